// The blocked GQA attention kernel against its scalar twin: odd head dims, 1-70 query tokens,
// earlier context, sliding windows over ring buffers, attention sinks, every SIMD target; and
// over F16 / Q8_0 caches (the twin decoding each row with the scalar decoders), up to 600
// keys, with MLA's shape (values = the first hd_v dims of the keys).
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

using gguf::TensorType;
using testing::for_each_target;
using testing::random_floats;

struct Case {
  int hd, n_head, n_tok, past, window;
  bool ring, sinks;
  TensorType kt = TensorType::F32, vt = TensorType::F32;
  int hd_v = 0;  // > 0: MLA's shape, v == k and hd_v < hd
};

// Runs one case: n_tok query tokens at positions past..past+n_tok-1, interleaved in the batch
// with rows of another sequence (batch row 2i+1), over a cache of past + n_tok positions.
void run_case(const Case& cs, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "hd " << cs.hd << " heads " << cs.n_head << " tokens " << cs.n_tok << " past "
               << cs.past << " window " << cs.window << " ring " << cs.ring << " sinks " << cs.sinks
               << " k " << gguf::tensor_type_name(cs.kt) << " v " << gguf::tensor_type_name(cs.vt)
               << " hd_v " << cs.hd_v);
  const int len = cs.past + cs.n_tok;
  const bool mla = cs.hd_v > 0;
  const int hdv = mla ? cs.hd_v : cs.hd;
  // A ring as the cache keeps it: the window - 1 older positions plus the step's tokens.
  const int ring = cs.ring ? cs.window - 1 + cs.n_tok : 0;
  const int rows = ring > 0 ? ring : len;
  // Rows: the head vector, then other KV heads and padding (an odd number of bytes between
  // rows for F16 / Q8_0; F32 rows stay float-aligned as the cache keeps them). The bytes
  // outside the head vectors hold 0xff (F32: NaN), which must never be read.
  auto stride_of = [&](TensorType t, int n) {
    const int64_t hb = int64_t(kv_cache_head_bytes(t, n));
    return t == TensorType::F32 ? hb * 3 + 4 : hb * 3 + 3;
  };
  const int64_t k_stride = stride_of(cs.kt, cs.hd), v_stride = stride_of(cs.vt, hdv);
  const int64_t q_stride = int64_t(cs.hd) * cs.n_head + 5;
  const int64_t out_stride = int64_t(hdv) * cs.n_head + 5;
  const int batch_rows = 2 * cs.n_tok;
  std::vector<float> q = random_floats(size_t(batch_rows) * q_stride, seed, 1.f);
  std::vector<uint8_t> k(size_t(rows * k_stride), 0xff), v(size_t(rows * v_stride), 0xff);
  // Positions the ring has overwritten are never read; rows hold the latest position.
  const std::vector<float> kr = random_floats(size_t(len) * cs.hd, seed + 1, 1.f);
  const std::vector<float> vr = random_floats(size_t(len) * cs.hd, seed + 2, 1.f);
  for (int p = 0; p < len; ++p) {
    const int64_t row = ring > 0 ? p % ring : p;
    kv_cache_store(cs.kt, &kr[size_t(p) * cs.hd], &k[size_t(row * k_stride)], cs.hd);
    kv_cache_store(cs.vt, &vr[size_t(p) * cs.hd], &v[size_t(row * v_stride)], hdv);
  }
  std::vector<float> sinks = random_floats(size_t(cs.n_head), seed + 3, 2.f);
  std::vector<int32_t> tok(size_t(cs.n_tok)), pos(size_t(cs.n_tok));
  for (int i = 0; i < cs.n_tok; ++i) {
    tok[size_t(i)] = 2 * i + 1;
    pos[size_t(i)] = cs.past + i;
  }
  AttentionGroup a;
  a.q = q.data();
  a.q_stride = q_stride;
  a.out_stride = out_stride;
  a.tok = tok.data();
  a.pos = pos.data();
  a.n_tok = cs.n_tok;
  a.n_head = cs.n_head;
  a.hd = cs.hd;
  a.hd_v = cs.hd_v;
  a.k = k.data();
  a.v = mla ? k.data() : v.data();
  a.k_stride = k_stride;
  a.v_stride = mla ? k_stride : v_stride;
  a.k_type = cs.kt;
  a.v_type = mla ? cs.kt : cs.vt;
  a.ring = ring;
  a.window = cs.window;
  a.scale = 1.f / std::sqrt(float(cs.hd));
  a.sinks = cs.sinks ? sinks.data() : nullptr;

  std::vector<float> want(size_t(batch_rows) * out_stride, -7.f);
  a.out = want.data();
  ref::attention_group(a);
  for_each_target([&] {
    std::vector<float> got(want.size(), -7.f), scratch;
    a.out = got.data();
    attention_group(a, scratch);
    for (size_t r = 0; r < size_t(batch_rows); ++r) {
      for (size_t c = 0; c < size_t(out_stride); ++c) {
        const size_t x = r * size_t(out_stride) + c;
        const bool written = r % 2 == 1 && c < size_t(hdv) * size_t(cs.n_head);
        if (!written) {
          ASSERT_EQ(got[x], -7.f) << "wrote outside its rows at " << r << "," << c;
          continue;
        }
        // The outputs are convex combinations of unit-normal values: absolute error in f32.
        ASSERT_NEAR(got[x], want[x], 2e-5 + 2e-5 * std::abs(want[x]))
            << "row " << r << " col " << c;
      }
    }
  });
}

TEST(Attention, BlockedMatchesScalarTwinCausal) {
  uint32_t seed = 1;
  for (int hd : {1, 3, 17, 64, 128}) {
    for (int n_head : {1, 3, 4, 8}) {
      for (int n_tok : {1, 2, 5, 16, 33, 70}) {
        run_case({hd, n_head, n_tok, 0, 0, false, false}, seed++);
      }
    }
  }
}

TEST(Attention, BlockedMatchesScalarTwinWithPastContext) {
  uint32_t seed = 100;
  for (int hd : {5, 64, 130}) {
    for (int n_tok : {1, 7, 64, 70}) run_case({hd, 4, n_tok, 45, 0, false, false}, seed++);
  }
}

TEST(Attention, BlockedMatchesScalarTwinWindowsRingsAndSinks) {
  uint32_t seed = 200;
  for (int hd : {3, 64}) {
    for (int n_tok : {1, 9, 40, 70}) {
      for (int window : {1, 4, 33}) {
        for (bool ring : {false, true}) {
          for (bool sinks : {false, true}) {
            run_case({hd, 8, n_tok, 50, window, ring, sinks}, seed++);
          }
        }
      }
      run_case({hd, 2, n_tok, 3, 0, false, true}, seed++);  // sinks without a window
    }
  }
}

// F16 and Q8_0 caches: odd head dims (Q8_0 pads a head to whole blocks), 1-600 keys, decode
// (one token) and prefill tiles, windows over rings, sinks, mixed K/V types.
TEST(Attention, QuantizedCachesMatchScalarTwin) {
  uint32_t seed = 300;
  const TensorType f16 = TensorType::F16, q8 = TensorType::Q8_0, f32 = TensorType::F32;
  for (auto [kt, vt] : {std::pair{f16, f16}, {q8, q8}, {q8, f16}, {f32, q8}}) {
    for (int hd : {3, 32, 47, 64, 128}) {
      for (auto [n_tok, past] : {std::pair{1, 0}, {1, 599}, {5, 17}, {33, 0}, {70, 530}}) {
        run_case({hd, 4, n_tok, past, 0, false, false, kt, vt}, seed++);
      }
    }
    for (int n_tok : {1, 9, 40}) {
      run_case({64, 8, n_tok, 50, 33, true, true, kt, vt}, seed++);
      run_case({64, 2, n_tok, 3, 0, false, true, kt, vt}, seed++);
    }
  }
}

// MLA's absorbed attention: one KV head of kv_lora + rope dims whose values are its first
// kv_lora dims (v == k), over every cache type.
TEST(Attention, MlaShapeMatchesScalarTwin) {
  uint32_t seed = 400;
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    for (auto [hd, hd_v] : {std::pair{80, 64}, {96, 64}, {50, 40}}) {
      for (auto [n_tok, past] : {std::pair{1, 0}, {1, 300}, {8, 0}, {8, 200}}) {
        run_case({hd, 16, n_tok, past, 0, false, false, t, t, hd_v}, seed++);
      }
    }
  }
}

// Stored and loaded head vectors: F16 as the scalar conversions round; Q8_0 as the type
// table's quantizer and decoder, the last block of an odd length zero-padded.
TEST(Attention, KvCacheStoreLoad) {
  for (int n : {1, 31, 32, 33, 64, 100}) {
    const std::vector<float> x = random_floats(size_t(n), uint32_t(n), 3.f);
    std::vector<uint8_t> h(kv_cache_head_bytes(TensorType::F16, n));
    std::vector<float> back(static_cast<size_t>(n));
    kv_cache_store(TensorType::F16, x.data(), h.data(), n);
    kv_cache_load(TensorType::F16, h.data(), back.data(), n);
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(back[size_t(i)], fp16_to_fp32(fp32_to_fp16(x[size_t(i)])));

    const int padded = (n + 31) / 32 * 32;
    ASSERT_EQ(kv_cache_head_bytes(TensorType::Q8_0, n), size_t(padded / 32 * 34));
    std::vector<uint8_t> qb(kv_cache_head_bytes(TensorType::Q8_0, n));
    kv_cache_store(TensorType::Q8_0, x.data(), qb.data(), n);
    std::vector<float> xp(static_cast<size_t>(padded), 0.f), want(static_cast<size_t>(padded));
    std::copy(x.begin(), x.end(), xp.begin());
    std::vector<uint8_t> ref_q(qb.size());
    ref::quantize_row(TensorType::Q8_0, xp.data(), ref_q.data(), padded);
    EXPECT_EQ(qb, ref_q) << n;
    ref::dequantize_row(TensorType::Q8_0, ref_q.data(), want.data(), padded);
    kv_cache_load(TensorType::Q8_0, qb.data(), back.data(), n);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(back[size_t(i)], want[size_t(i)]);
      // Half a quantization step of the block, plus the fp16 rounding of its scale.
      float amax = 0;
      for (int j = i / 32 * 32; j < std::min(n, i / 32 * 32 + 32); ++j) {
        amax = std::max(amax, std::abs(x[size_t(j)]));
      }
      EXPECT_NEAR(back[size_t(i)], x[size_t(i)], amax / 127 * 0.5f + amax * 1e-3f);
    }
  }
  EXPECT_EQ(kv_cache_head_bytes(TensorType::F32, 64), 256u);
  EXPECT_EQ(kv_cache_head_bytes(TensorType::F16, 64), 128u);
  EXPECT_EQ(kv_cache_head_bytes(TensorType::Q8_0, 64), 68u);
  EXPECT_THROW(kv_cache_head_bytes(TensorType::Q4_0, 64), std::exception);
}

TEST(Attention, LargeScoresStayFinite) {
  // Scores in the hundreds: a naive exp overflows; the online max keeps every term <= 1.
  const int hd = 16, n_tok = 20;
  std::vector<float> q(size_t(n_tok) * hd, 30.f), k(size_t(n_tok) * hd), v(size_t(n_tok) * hd);
  for (int p = 0; p < n_tok; ++p) {
    for (int d = 0; d < hd; ++d) {
      k[size_t(p * hd + d)] = float(p % 3);
      v[size_t(p * hd + d)] = float(p);
    }
  }
  std::vector<int32_t> tok(static_cast<size_t>(n_tok)), pos(static_cast<size_t>(n_tok));
  for (int i = 0; i < n_tok; ++i) tok[size_t(i)] = pos[size_t(i)] = i;
  AttentionGroup a;
  a.q = q.data();
  a.q_stride = hd;
  a.out_stride = hd;
  a.tok = tok.data();
  a.pos = pos.data();
  a.n_tok = n_tok;
  a.n_head = 1;
  a.hd = hd;
  a.k = k.data();
  a.v = v.data();
  a.k_stride = a.v_stride = hd * 4;
  a.scale = 1.f;
  std::vector<float> want(q.size()), got(q.size()), scratch;
  a.out = want.data();
  ref::attention_group(a);
  for_each_target([&] {
    a.out = got.data();
    attention_group(a, scratch);
    for (size_t x = 0; x < got.size(); ++x) {
      ASSERT_TRUE(std::isfinite(got[x])) << x;
      ASSERT_NEAR(got[x], want[x], 1e-4 * (1 + std::abs(want[x]))) << x;
    }
  });
}

TEST(Attention, PositionOutOfRangeIsAnError) {
  std::vector<float> q(4), k(4), v(4), out(4), scratch;
  const int32_t tok = 0, pos = 1 << 24;
  AttentionGroup a;
  a.q = q.data();
  a.out = out.data();
  a.tok = &tok;
  a.pos = &pos;
  a.n_tok = 1;
  a.n_head = 1;
  a.hd = 4;
  a.k = k.data();
  a.v = v.data();
  EXPECT_THROW(attention_group(a, scratch), std::exception);
}

}  // namespace
}  // namespace lynx::kernels
