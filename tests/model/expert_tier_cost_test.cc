// The expert tier's miss cost (ExpertTier::miss_cost, docs/offload.md): RAM's read rate over
// the readers' measured one, from a clock the test's reader advances by exactly the bytes it
// reads at a chosen rate (nothing here is timed); the initial cost until enough reads were
// seen, the clamp, and a fixed cost (--expert-miss-cost) that wins over what is measured.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "lynx/error.h"
#include "model/expert_tier.h"
#include "model/memory_budget.h"

namespace lynx {
namespace {

constexpr int kExperts = 512;
constexpr size_t kMat = 4096;  // one 32 x 32 F32 matrix: 3 x 4 KiB per expert

// A one-layer tier of one slot, read by one reader whose reads take `ns_per_byte` of the
// fake clock each.
struct FakeDisk {
  std::atomic<uint64_t> clock{1};
  std::atomic<double> ns_per_byte{1.0};
  std::unique_ptr<ExpertTier> tier;
  int next = 0;  // the next expert to claim (each claim a miss)

  explicit FakeDisk(MissCostOptions cost) {
    TierMatrix m;
    m.type = gguf::TensorType::F32;
    m.mat_bytes = kMat;
    m.stride = kMat;
    m.rows = m.cols = 32;
    std::vector<TierLayer> layers{{0, m, m, m}};
    auto read = [this](uint64_t, size_t n, uint8_t* dst) {
      std::memset(dst, 0, n);
      clock += uint64_t(double(n) * ns_per_byte.load());
    };
    ExpertIoOptions io;
    io.readers = 1;
    io.read = read;
    tier = std::make_unique<ExpertTier>("", std::move(layers), kExperts, 1, std::move(io), cost,
                                        [this] { return clock.load(); });
  }
  // Claims `n` experts not read before, one at a time, and waits for each read.
  void read(int n) {
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> want{next++ % kExperts};
      std::vector<ExpertTier::Claim> claims;
      tier->claim(0, want, claims);
      ASSERT_EQ(claims.size(), 1u);
      tier->wait(claims[0]);
      tier->release(claims);
    }
  }
};

TEST(ExpertTierMissCost, FollowsTheMeasuredRates) {
  MissCostOptions o;
  o.ram_bytes_per_s = 40e9;
  FakeDisk d(o);
  EXPECT_EQ(d.tier->miss_cost(), 20.f);  // nothing read yet: the initial cost
  d.read(o.min_reads - 1);
  EXPECT_EQ(d.tier->miss_cost(), 20.f);
  EXPECT_FALSE(d.tier->stats().miss_cost_measured);
  d.read(1);  // 1 GB/s against RAM's 40
  EXPECT_NEAR(d.tier->miss_cost(), 40.f, 1e-3);
  const ExpertTierStats s = d.tier->stats();
  EXPECT_TRUE(s.miss_cost_measured);
  EXPECT_NEAR(s.read_bytes_per_s, 1e9, 1e3);
  EXPECT_EQ(s.ram_bytes_per_s, 40e9);
  EXPECT_EQ(s.miss_cost, d.tier->miss_cost());

  // The disk gets 4x faster: the cost moves towards 10, the old reads fading.
  d.ns_per_byte = 0.25;
  d.read(16);
  const float midway = d.tier->miss_cost();
  EXPECT_LT(midway, 30.f);
  EXPECT_GT(midway, 11.f);
  d.read(300);
  EXPECT_NEAR(d.tier->miss_cost(), 10.f, 0.05f);
}

TEST(ExpertTierMissCost, StaysWithinItsRange) {
  MissCostOptions fast_ram;
  fast_ram.ram_bytes_per_s = 1e15;  // or a stalled disk: at most max_cost
  FakeDisk a(fast_ram);
  a.read(fast_ram.min_reads);
  EXPECT_EQ(a.tier->miss_cost(), fast_ram.max_cost);
  MissCostOptions slow_ram;
  slow_ram.ram_bytes_per_s = 1e8;  // reads faster than RAM (a page-cached file): 1
  FakeDisk b(slow_ram);
  b.read(slow_ram.min_reads);
  EXPECT_EQ(b.tier->miss_cost(), 1.f);
}

TEST(ExpertTierMissCost, AFixedCostWins) {
  MissCostOptions o;
  o.fixed = 7.f;
  o.ram_bytes_per_s = 40e9;
  FakeDisk d(o);
  EXPECT_EQ(d.tier->miss_cost(), 7.f);
  d.read(64);
  EXPECT_EQ(d.tier->miss_cost(), 7.f);
  const ExpertTierStats s = d.tier->stats();
  EXPECT_FALSE(s.miss_cost_measured);
  EXPECT_EQ(s.miss_cost, 7.f);
}

// The tier measures the rate it reads its own slot pool at when not told RAM's; the probe
// gives a plausible figure (above any disk's is not asserted: a loaded machine may be slow).
TEST(ExpertTierMissCost, ProbesThePoolWhenNotTold) {
  std::vector<uint64_t> buf(size_t(1) << 20, 3);
  EXPECT_GT(measure_read_rate(reinterpret_cast<const uint8_t*>(buf.data()), buf.size() * 8), 1e8);
  EXPECT_EQ(measure_read_rate(nullptr, 0), 0.0);
  EXPECT_GE(ram_probe_bytes(), size_t(16) << 20);
  FakeDisk d(MissCostOptions{});
  EXPECT_GT(d.tier->stats().ram_bytes_per_s, 1e8);
}

}  // namespace
}  // namespace lynx
