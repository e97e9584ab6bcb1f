// The machine probes (kernels/probes.h): plausible figures, and refusals of nonsense runs.
#include "kernels/probes.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernels.h"
#include "lynx/error.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

TEST(Probes, MeasuresPlausibleBandwidth) {
  ThreadPool pool(2);
  const double gbps = measure_read_bandwidth_gbps(pool, size_t{64} << 20);
  EXPECT_GT(gbps, 0.1);
  EXPECT_LT(gbps, 100000.0);
  // One pass (the bench's interleaved probe) measures too; zero passes is an error.
  const double one = measure_read_bandwidth_gbps(pool, size_t{64} << 20, 1);
  EXPECT_GT(one, 0.1);
  EXPECT_LT(one, 100000.0);
  EXPECT_THROW(measure_read_bandwidth_gbps(pool, size_t{64} << 20, 0), Error);
}

TEST(Probes, MeasuresPlausibleFmaPeak) {
  // The probe's loop counts its flops: 12 chains x 2 flops x the vector's lanes per round, on
  // every instruction set (1 f32 lane for Highway's scalar target, 4 to 16 for SIMD), and its
  // chains stay finite.
  testing::for_each_target([] {
    float sink = 0.0f;
    const double flops = fma_chains(1000, 1e-3f, &sink);
    const double per_round = flops / 1000.0;
    EXPECT_TRUE(per_round == 24.0 || per_round == 24.0 * 4 || per_round == 24.0 * 8 ||
                per_round == 24.0 * 16)
        << per_round;
    EXPECT_TRUE(std::isfinite(sink));
    EXPECT_GT(sink, 0.0f);
  });
  ThreadPool one(1), two(2);
  const double g1 = measure_fma_gflops(one, 2), g2 = measure_fma_gflops(two, 2);
  EXPECT_GT(g1, 0.1);
  EXPECT_LT(g1, 1e5);
  EXPECT_GT(g2, 0.1);
  EXPECT_THROW(measure_fma_gflops(two, 0), Error);
}

}  // namespace
}  // namespace lynx::kernels
