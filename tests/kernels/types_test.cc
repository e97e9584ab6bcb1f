// The weight type table (kernels/types.h) and the types computed through it: decode against
// the NumPy reference bit for bit (tests/reference/fixtures/types/blocks.gguf, made by
// make_type_fixtures.py), the exact float matmul path on every type, and bad blocks
// (NaN/Inf scales) that must not crash anything.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/thread_pool.h"
#include "kernels/types.h"
#include "lynx/error.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

using testing::random_floats;

const std::string kBlocks =
    std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/types/blocks.gguf";

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bit-equal, or both NaN (a NaN's payload is the fp16 scale's, which the decoders and NumPy
// may quiet differently).
bool same(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bits(a) == bits(b);
}

TEST(TypeTraits, RowsAgreeWithTheGgufTable) {
  std::set<TensorType> seen;
  for (const TypeTraits& tr : all_type_traits()) {
    SCOPED_TRACE(gguf::tensor_type_name(tr.type));
    EXPECT_TRUE(seen.insert(tr.type).second) << "two rows";
    int64_t be = 0, bb = 0;
    ASSERT_TRUE(gguf::tensor_type_info(tr.type, &be, &bb));
    EXPECT_EQ(tr.block_elems, be);
    EXPECT_EQ(tr.block_bytes, bb);
    EXPECT_NE(tr.decode, nullptr);
    EXPECT_TRUE(is_compute_type(tr.type));
    EXPECT_EQ(weight_row_bytes(tr.type, 4 * tr.block_elems), size_t(4 * bb));
    EXPECT_EQ(has_int_path(tr.type), tr.int_kernel);
    // An integer kernel reads Q8_0 blocks (matmul_q8.cc; with their sums for ggml's Q8_1
    // types) or Q8_K blocks (matmul_k.h).
    if (has_int8_path(tr.type)) {
      EXPECT_TRUE(tr.act_type == TensorType::Q8_0 || tr.act_type == TensorType::Q8_1);
    }
    if (tr.int_kernel && !has_int8_path(tr.type)) {
      EXPECT_EQ(tr.act_type, TensorType::Q8_K);
    }
  }
  for (TensorType t :
       {TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q2_K, TensorType::Q3_K,
        TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_K, TensorType::IQ4_NL,
        TensorType::IQ4_XS, TensorType::MXFP4, TensorType::F32, TensorType::F16, TensorType::BF16,
        TensorType::Q8_0, TensorType::Q4_0}) {
    EXPECT_TRUE(seen.count(t)) << gguf::tensor_type_name(t);
  }
  // ggml's vec_dot_type: Q8_K for the K-quants and IQ4_XS, Q8_0 for the 32-element types.
  EXPECT_EQ(type_traits(TensorType::Q4_K).act_type, TensorType::Q8_K);
  EXPECT_EQ(type_traits(TensorType::IQ4_XS).act_type, TensorType::Q8_K);
  EXPECT_EQ(type_traits(TensorType::IQ4_NL).act_type, TensorType::Q8_0);
  EXPECT_EQ(type_traits(TensorType::Q4_0).act_type, TensorType::Q8_0);
}

TEST(TypeTraits, UnknownTypesAreNamedInTheError) {
  EXPECT_EQ(find_type_traits(TensorType::IQ2_XXS), nullptr);
  EXPECT_FALSE(is_compute_type(TensorType::IQ2_XXS));
  try {
    type_traits(TensorType::IQ2_XXS);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("iq2_xxs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q4_K"), std::string::npos) << e.what();
  }
  EXPECT_THROW(weight_row_bytes(TensorType::Q4_K, 100), Error);  // not a multiple of 256
}

// Every type's decode (the dispatched one and the scalar twin) against the reference's, on
// random blocks: every bit pattern of quants and sub-scales, and NaN/Inf scales.
TEST(TypeDecode, BitExactAgainstNumpyReference) {
  const gguf::File f = gguf::File::open(kBlocks);
  int checked = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.type == TensorType::F32) continue;
    SCOPED_TRACE(t.name);
    const gguf::TensorInfo& want = f.tensor(t.name + ".f32");
    ASSERT_EQ(want.n_elements(), t.n_elements());
    const int64_t cols = t.ne[0], rows = t.ne[1];
    const size_t rb = gguf::row_size(t.type, cols);
    std::vector<float> got(static_cast<size_t>(cols)), got_ref(static_cast<size_t>(cols));
    int nan_rows = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(t.type, t.data + size_t(r) * rb, got.data(), cols);
      ref::dequantize_row(t.type, t.data + size_t(r) * rb, got_ref.data(), cols);
      bool any_nan = false;
      for (int64_t c = 0; c < cols; ++c) {
        float w;
        std::memcpy(&w, want.data + 4 * size_t(r * cols + c), 4);
        ASSERT_TRUE(same(got[size_t(c)], w))
            << "row " << r << " col " << c << ": " << got[size_t(c)] << " vs " << w;
        ASSERT_TRUE(same(got_ref[size_t(c)], w)) << "row " << r << " col " << c;
        any_nan |= std::isnan(w);
      }
      nan_rows += any_nan;
    }
    // MXFP4 has no NaN scale; every other type's fixture has some.
    if (t.type != TensorType::MXFP4) {
      EXPECT_GT(nan_rows, 0);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

// Random blocks of type t with finite, moderate scales: a quantizer-independent source of
// valid weights (random bytes, then every super-block scale field set to a fixed value).
std::vector<uint8_t> random_blocks(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
  const TypeTraits& tr = type_traits(t);
  std::vector<uint8_t> w(weight_row_bytes(t, cols) * size_t(rows));
  std::mt19937 rng(seed);
  for (auto& b : w) b = uint8_t(rng());
  // Offsets of the fp16 super-block scales per type (the MXFP4 exponent and Q8_K's f32 d
  // handled apart): an fp16 0.01 (0x211F) there keeps every value finite.
  std::vector<int> f16_at;
  switch (t) {
    case TensorType::Q4_1:
    case TensorType::Q5_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
      f16_at = {0, 2};
      break;
    case TensorType::Q5_0:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
      f16_at = {0};
      break;
    case TensorType::Q2_K:
      f16_at = {80, 82};
      break;
    case TensorType::Q3_K:
      f16_at = {108};
      break;
    case TensorType::Q6_K:
      f16_at = {208};
      break;
    default:
      break;
  }
  for (size_t o = 0; o < w.size(); o += size_t(tr.block_bytes)) {
    for (int a : f16_at) {
      w[o + size_t(a)] = 0x1F;
      w[o + size_t(a) + 1] = 0x21;
    }
    if (t == TensorType::MXFP4) w[o] = uint8_t(118 + w[o] % 8);
    if (t == TensorType::Q8_K) {
      const float d = 0.001f;
      std::memcpy(&w[o], &d, 4);
    }
  }
  return w;
}

const TensorType kDecodedTypes[] = {TensorType::Q4_1,   TensorType::Q5_0,   TensorType::Q5_1,
                                    TensorType::Q2_K,   TensorType::Q3_K,   TensorType::Q4_K,
                                    TensorType::Q5_K,   TensorType::Q6_K,   TensorType::Q8_K,
                                    TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4};

// matmul_rows on a type without a SIMD decoder equals the F32 matmul of its decoded rows bit
// for bit (the exact path), for any row split and token count, on every SIMD target, and
// agrees with the double-accumulating scalar twin to float rounding.
TEST(TypeMatmul, ExactPathEqualsF32OnDecodedRows) {
  for (TensorType t : kDecodedTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const int64_t be = type_traits(t).block_elems;
    const int64_t cols = be == 256 ? 512 : 96, rows = 37;
    const auto w = random_blocks(t, rows, cols, 5);
    std::vector<float> wf(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(t, w.data() + size_t(r) * weight_row_bytes(t, cols), &wf[size_t(r * cols)],
                     cols);
    }
    for (int n_tok : {1, 3, 7, 70}) {
      const auto x = random_floats(size_t(n_tok * cols), 11 + n_tok);
      testing::for_each_target([&] {
        std::vector<float> want(size_t(n_tok * rows)), got(want.size(), NAN), twin(want.size());
        matmul_rows(TensorType::F32, wf.data(), cols, 0, rows, x.data(), cols, n_tok, want.data(),
                    rows);
        // an odd split of the rows: [0, 5), [5, 22), [22, 37)
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 5}, {5, 22}, {22, rows}}) {
          matmul_rows(t, w.data(), cols, r0, r1, x.data(), cols, n_tok, got.data(), rows);
        }
        ref::matmul_rows(t, w.data(), cols, 0, rows, x.data(), cols, n_tok, twin.data(), rows);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(bits(got[i]), bits(want[i])) << "output " << i << " tokens " << n_tok;
          const size_t tok = i / size_t(rows), r = i % size_t(rows);
          double abs_sum = 0;
          for (int64_t c = 0; c < cols; ++c) {
            abs_sum += std::fabs(double(wf[r * size_t(cols) + size_t(c)]) *
                                 x[tok * size_t(cols) + size_t(c)]);
          }
          ASSERT_NEAR(got[i], twin[i], testing::dot_tolerance(cols, abs_sum, twin[i]));
        }
      });
    }
  }
}

// Through the thread pool (the model's entry point) the result is the single call's.
TEST(TypeMatmul, PoolSplitIsBitIdentical) {
  ThreadPool pool(3);
  for (TensorType t : {TensorType::Q4_K, TensorType::Q6_K, TensorType::MXFP4}) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const int64_t cols = 256, rows = 53;
    const auto w = random_blocks(t, rows, cols, 9);
    const auto x = random_floats(size_t(5 * cols), 3);
    std::vector<float> one(size_t(5 * rows)), split(one.size());
    matmul_rows(t, w.data(), cols, 0, rows, x.data(), cols, 5, one.data(), rows);
    matmul(pool, t, w.data(), rows, cols, x.data(), cols, 5, split.data(), rows);
    for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(bits(one[i]), bits(split[i])) << i;
  }
}

// Blocks straight from random bytes: NaN, Inf and huge scales. Decode and products must run
// to the end (the outputs may be NaN or Inf; nothing traps or reads out of bounds).
TEST(TypeMatmul, NanAndInfScalesDoNotCrash) {
  for (TensorType t : kDecodedTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const int64_t cols = 256, rows = 16;
    std::vector<uint8_t> w(weight_row_bytes(t, cols) * size_t(rows));
    std::mt19937 rng(77);
    for (auto& b : w) b = uint8_t(rng());
    for (size_t o = 0; o + 1 < w.size(); o += size_t(type_traits(t).block_bytes)) {
      w[o] = 0x00;
      w[o + 1] = uint8_t(rng() % 2 ? 0x7C : 0x7E);  // +Inf or NaN in the first fp16 field
    }
    const auto x = random_floats(size_t(3 * cols), 1);
    std::vector<float> y(size_t(3 * rows));
    matmul_rows(t, w.data(), cols, 0, rows, x.data(), cols, 3, y.data(), rows);
    ref::matmul_rows(t, w.data(), cols, 0, rows, x.data(), cols, 3, y.data(), rows);
    std::vector<float> row(static_cast<size_t>(cols));
    dequantize_row(t, w.data(), row.data(), cols);
    SUCCEED();
  }
}

// The layouts that repack at load do not take these types (Q4_K, Q5_K and Q6_K have an
// interleaved layout for their integer kernel: matmul_k_i16_test.cc).
TEST(TypeMatmul, RepackLayoutsRejectDecodedTypes) {
  for (TensorType t : kDecodedTypes) {
    if (can_interleave(t, 16, 256)) continue;  // the types with an interleaved kernel
    EXPECT_FALSE(can_interleave(t, 16, 256));
    EXPECT_FALSE(can_panel16(t, 16, 256));
    const auto w = random_blocks(t, 16, 256, 1);
    const auto x = random_floats(256, 1);
    std::vector<float> y(16);
    EXPECT_THROW(matmul_rows(t, w.data(), 256, 0, 16, x.data(), 256, 1, y.data(), 16,
                             WeightLayout::kPanel16),
                 Error);
    EXPECT_THROW(matmul_rows(t, w.data(), 256, 0, 16, x.data(), 256, 1, y.data(), 16,
                             WeightLayout::kInterleaved16),
                 Error);
  }
}

}  // namespace
}  // namespace lynx::kernels
