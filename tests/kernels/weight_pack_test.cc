// pack_weights: which matrices move to which layout, what the copies hold, aliases, the
// release callback, and the options that turn each layout off.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "kernels/weight_pack.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

struct Mat {
  std::vector<uint8_t> bytes;
  MatrixRef ref;
};

Mat make(TensorType t, int64_t rows, int64_t cols, int64_t n_mat, uint32_t seed) {
  Mat m;
  const size_t rb = weight_row_bytes(t, cols);
  m.bytes.resize(rb * size_t(rows * n_mat));
  const std::vector<float> src = testing::random_floats(size_t(rows * n_mat * cols), seed);
  for (int64_t r = 0; r < rows * n_mat; ++r) {
    quantize_row(t, &src[size_t(r * cols)], m.bytes.data() + size_t(r) * rb, cols);
  }
  m.ref = {t, m.bytes.data(), rows, cols, n_mat, rb, rb * size_t(rows), WeightLayout::kRows};
  return m;
}

TEST(WeightPack, MovesEachMatrixToItsPreferredLayoutOnce) {
  Mat q8 = make(TensorType::Q8_0, 32, 64, 3, 1);   // interleavable, 3 experts
  Mat f16 = make(TensorType::F16, 48, 40, 1, 2);   // panels
  Mat odd = make(TensorType::Q4_0, 20, 64, 1, 3);  // rows not a multiple of 16: stays
  MatrixRef alias = q8.ref;                        // the same tensor bound twice
  MatrixRef* mats[] = {&q8.ref, &f16.ref, &odd.ref, &alias};
  std::vector<std::pair<const uint8_t*, size_t>> released;
  PackOptions o;
  o.threads = 2;
  o.release = [&](const uint8_t* p, size_t n) { released.emplace_back(p, n); };
  size_t bytes = 0;
  const std::unique_ptr<PackedWeights> packed = pack_weights(mats, o, &bytes);
  ASSERT_NE(packed, nullptr);
  EXPECT_EQ(bytes, q8.bytes.size() + f16.bytes.size());

  EXPECT_EQ(q8.ref.layout, WeightLayout::kInterleaved16);
  EXPECT_EQ(f16.ref.layout, WeightLayout::kPanel16);
  EXPECT_EQ(odd.ref.layout, WeightLayout::kRows);
  EXPECT_EQ(odd.ref.data, odd.bytes.data());
  EXPECT_EQ(alias.data, q8.ref.data);
  EXPECT_EQ(alias.layout, WeightLayout::kInterleaved16);
  for (const MatrixRef* m : {&q8.ref, &f16.ref}) {
    EXPECT_GE(m->data, packed->data());
    EXPECT_LE(m->data + m->mat_bytes * size_t(m->n_mat), packed->data() + packed->size());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data) % 64, 0u);
  }
  // The copies hold what the layout functions write, the sources are untouched.
  std::vector<uint8_t> want(q8.bytes.size());
  for (int64_t e = 0; e < 3; ++e) {
    interleave16_into(TensorType::Q8_0, q8.bytes.data() + size_t(e) * q8.ref.mat_bytes,
                      want.data() + size_t(e) * q8.ref.mat_bytes, 64, 0, 2);
  }
  EXPECT_EQ(0, std::memcmp(q8.ref.data, want.data(), want.size()));
  std::vector<uint8_t> want_f(f16.bytes.size());
  panel16_into(TensorType::F16, f16.bytes.data(), want_f.data(), 40, 0, 3);
  EXPECT_EQ(0, std::memcmp(f16.ref.data, want_f.data(), want_f.size()));
  // Every source byte of the moved matrices was released, nothing of the one that stayed.
  auto covered = [&](const uint8_t* p) {
    for (const auto& [b, n] : released) {
      if (p >= b && p < b + n) return true;
    }
    return false;
  };
  for (const Mat* m : {&q8, &f16}) {
    for (size_t i = 0; i < m->bytes.size(); i += 7) EXPECT_TRUE(covered(m->bytes.data() + i));
  }
  EXPECT_FALSE(covered(odd.bytes.data()));
}

TEST(WeightPack, OptionsTurnEachLayoutOff) {
  Mat q4 = make(TensorType::Q4_0, 16, 32, 1, 4);
  Mat bf = make(TensorType::BF16, 16, 8, 1, 5);
  MatrixRef* mats[] = {&q4.ref, &bf.ref};
  PackOptions o;
  o.interleave_int = false;
  o.panel_float = false;
  EXPECT_EQ(pack_weights(mats, o), nullptr);
  EXPECT_EQ(q4.ref.data, q4.bytes.data());
  o.panel_float = true;
  const auto packed = pack_weights(mats, o);
  ASSERT_NE(packed, nullptr);
  EXPECT_EQ(q4.ref.layout, WeightLayout::kRows);
  EXPECT_EQ(bf.ref.layout, WeightLayout::kPanel16);
  EXPECT_EQ(preferred_layout(q4.ref, PackOptions{}), WeightLayout::kInterleaved16);
}

}  // namespace
}  // namespace lynx::kernels
