// The Q8_K integer path (matmul_k.h): the activation quantizer, the unpacking of weight
// blocks to integer levels times sub-block scales (from each type's levels_<type>, the one
// scalar reading of its block, types/layout.h), the block dot products (Highway, dynamic
// dispatch: int16 pair products, vpmaddwd on x86) and the scalar twin.
//
// A weight row is unpacked once per call into an int16 buffer (level x sub-block scale, 512
// bytes per block) and then multiplied with every token's int16 activations: the unpacking is
// scalar and its cost shared by the tokens of the call. The integer sums are exact, so the
// lane order does not matter and every target gives the scalar twin's bits.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/matmul_k.h"
#include "kernels/scratch.h"
#include "kernels/types.h"
#include "kernels/types/blocks.h"
#include "kernels/types/levels_k.h"
#include "lynx/error.h"

#ifndef LYNX_KERNELS_MATMUL_K_BLOCK
#define LYNX_KERNELS_MATMUL_K_BLOCK
namespace lynx::kernels {
// A weight block in levels form: ls[e] = scale(sub(e)) * level(e); m[sub] the integer mins
// (none for Q3_K/Q6_K/IQ4_XS), each covering sub_len elements.
struct BlockK {
  float d = 0, dmin = 0;
  int32_t m[16] = {};
  int sub_len = 16;
  bool has_min = false;
};

// One 256-value block of Q8_K activations by types::encode_q8_k (the scalar twin, and every
// target's path for a block with a NaN or an infinity): quants, scale, 16-value group sums.
inline void encode_acts_block_k(const float* v, int8_t* q, float* d, int32_t* gsum) {
  uint8_t blk[292];
  types::encode_q8_k(v, blk, 1);
  *d = types::load_f32(blk);
  std::memcpy(q, blk + 4, 256);
  for (int g = 0; g < 16; ++g) {
    int16_t s;
    std::memcpy(&s, blk + 260 + 2 * g, 2);
    gsum[g] = s;
  }
}
}  // namespace lynx::kernels
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_k.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Exact int32 sum of ls[e] * q[e] over the 256 elements of a block.
HWY_INLINE int32_t BlockDot(const int16_t* ls, const int8_t* q) {
#if HWY_TARGET == HWY_SCALAR
  // One lane: no int16 pairs to widen; the plain loop is the same exact sum.
  int32_t s = 0;
  for (int64_t i = 0; i < 256; ++i) s += ls[i] * q[i];
  return s;
#else
  using D32 = hn::ScalableTag<int32_t>;
  using D16 = hn::Repartition<int16_t, D32>;
  const D32 d32;
  const D16 d16;
  const hn::Rebind<int8_t, D16> d8;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d16));
  auto s0 = hn::Zero(d32), s1 = hn::Zero(d32);
  for (int64_t i = 0; i < 256; i += n) {
    s0 = hn::ReorderWidenMulAccumulate(d32, hn::LoadU(d16, ls + i),
                                       hn::PromoteTo(d16, hn::LoadU(d8, q + i)), s0, s1);
  }
  return hn::GetLane(hn::SumOfLanes(d32, hn::Add(s0, s1)));
#endif
}

// Row r (unpacked: ls, blocks) times tokens [t0, t0 + n_tok) of x, into y[j * ldy + r]. The
// float update is matmul_k.h's; std::fma is one instruction on the targets with FMA (and
// exact everywhere), so every target gives the scalar twin's bits.
void RowKT(const int16_t* ls, const BlockK* blocks, const QuantizedActsK& x, int t0, int n_tok,
           float* y, int64_t ldy, int64_t r) {
  const int64_t nb = x.n_blocks(), cols = x.cols;
  for (int j = 0; j < n_tok; ++j) {
    const int tok = t0 + j;
    const int8_t* q = x.q.data() + size_t(tok) * size_t(cols);
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockK& k = blocks[b];
      const int32_t isum = BlockDot(ls + b * 256, q + b * 256);
      const float dx = x.d[size_t(tok * nb + b)];
      acc = std::fma(k.d * dx, static_cast<float>(isum), acc);
      if (k.has_min) {
        const int32_t* gs = &x.gsum[size_t((tok * nb + b) * 16)];
        const int per = k.sub_len / 16, n_sub = 256 / k.sub_len;
        int32_t msum = 0;
        for (int s = 0; s < n_sub; ++s) {
          int32_t g = 0;
          for (int p = 0; p < per; ++p) g += gs[s * per + p];
          msum += k.m[s] * g;
        }
        acc = std::fma(-(k.dmin * dx), static_cast<float>(msum), acc);
      }
    }
    y[j * ldy + r] = acc;
  }
}

// Rows [t0, t1) of Q8_K activations: encode_acts_block_k's operations lane by lane (the value
// of largest magnitude, the first one when several tie; iscale = -127 / it; q = min(127,
// nearest-even(iscale x)); exact integer group sums; d = 1 / iscale), so every target gives its
// bits. It was scalar: ~140 CPU ms of a 512-token Q4_K_M prefill (docs/benchmarks.md, issue 31).
HWY_NOINLINE void QuantizeActsKT(const float* x, int64_t ldx, int t0, int t1, int64_t cols,
                                 int8_t* q, float* d, int32_t* gsum) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> di8;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  const int64_t nb = cols / 256;
  for (int t = t0; t < t1; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + t * ldx + b * 256;
      int8_t* qb = q + t * cols + b * 256;
      float* db = d + t * nb + b;
      int32_t* gs = gsum + (t * nb + b) * 16;
      auto mx = hn::Zero(df);
      auto finite = hn::Eq(mx, mx);  // all true
      for (int64_t k = 0; k < 256; k += n) {
        const auto vk = hn::LoadU(df, v + k);
        mx = hn::Max(mx, hn::Abs(vk));
        finite = hn::And(finite, hn::IsFinite(vk));
      }
      if (!hn::AllTrue(df, finite)) {
        encode_acts_block_k(v, qb, db, gs);
        continue;
      }
      const float amax = hn::GetLane(hn::MaxOfLanes(df, mx));
      if (amax == 0.0f) {  // encode_q8_k's zero block
        std::memset(qb, 0, 256);
        *db = 0.0f;
        for (int g = 0; g < 16; ++g) gs[g] = 0;
        continue;
      }
      float max = amax;
      for (int64_t k = 0; k < 256; k += n) {
        const intptr_t i =
            hn::FindFirstTrue(df, hn::Eq(hn::Abs(hn::LoadU(df, v + k)), hn::Set(df, amax)));
        if (i >= 0) {
          max = v[k + i];
          break;
        }
      }
      const float iscale = -127.0f / max;
      const auto vs = hn::Set(df, iscale);
      const auto v127 = hn::Set(di, 127);
      for (int g = 0; g < 16; ++g) {
        auto sum = hn::Zero(di);
        for (int64_t k = 16 * g; k < 16 * g + 16; k += n) {
          const auto qi = hn::Min(hn::NearestInt(hn::Mul(hn::LoadU(df, v + k), vs)), v127);
          sum = hn::Add(sum, qi);
          hn::StoreU(hn::DemoteTo(di8, qi), di8, qb + k);
        }
        gs[g] = hn::GetLane(hn::SumOfLanes(di, sum));
      }
      *db = 1 / iscale;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lynx::kernels {

HWY_EXPORT(RowKT);
HWY_EXPORT(QuantizeActsKT);

namespace {

// The rows kernel's form of a block: each level times its sub-block scale in int16 (|s L| <=
// 4064), the mins apart; from the type's one reading of its block (types/levels_k.h), fused
// into this loop (no levels written and read back).
template <class R>
struct UnpackSink {  // at namespace scope: a local class cannot have the member template sub
  BlockK& k;
  int16_t* ls;
  void head(float d, float dmin) {
    k.d = d;
    k.dmin = dmin;
  }
  template <class Level>
  void sub(int s, int scale, int min, Level level) {
    k.m[s] = min;
    int16_t* o = ls + R::kSubLen * s;
#pragma GCC unroll 1  // vectorized, not unrolled first and left scalar (types/levels_k.h)
    for (int e = 0; e < R::kSubLen; ++e) o[e] = static_cast<int16_t>(scale * level(e));
  }
};

template <class Block>
BlockK unpack_by_reader(const uint8_t* b, int16_t* ls) {
  using R = types::Reader<Block>;
  BlockK k;
  k.has_min = R::kMin;
  k.sub_len = R::kSubLen;
  UnpackSink<R> sink{k, ls};
  R::read(b, sink);
  return k;
}

using UnpackFn = BlockK (*)(const uint8_t* b, int16_t* ls);

UnpackFn unpack_fn(TensorType t) {
  switch (t) {
    case TensorType::Q2_K:
      return unpack_by_reader<types::BlockQ2_K>;
    case TensorType::Q3_K:
      return unpack_by_reader<types::BlockQ3_K>;
    case TensorType::Q4_K:
      return unpack_by_reader<types::BlockQ4_K>;
    case TensorType::Q5_K:
      return unpack_by_reader<types::BlockQ5_K>;
    case TensorType::Q6_K:
      return unpack_by_reader<types::BlockQ6_K>;
    case TensorType::IQ4_XS:
      return unpack_by_reader<types::BlockIq4_xs>;
    default:
      throw Error(std::string("matmul_rows_k: no reading of ") + gguf::tensor_type_name(t));
  }
}

int64_t block_bytes(TensorType t) {
  return type_traits(t).block_bytes;
}

void check(const char* what, TensorType t, int64_t cols, int64_t r0, int64_t r1,
           const QuantizedActsK& x, int t0, int n_tok) {
  if (!has_k_int_path(t)) {
    throw Error(std::string(what) + ": no Q8_K integer path for " + gguf::tensor_type_name(t));
  }
  if (cols <= 0 || cols % 256 != 0 || cols != x.cols || r0 < 0 || r1 < r0 || t0 < 0 || n_tok < 0 ||
      t0 + n_tok > x.n_tok) {
    throw Error(std::string(what) + ": bad arguments");
  }
}

// The float update shared by both paths (matmul_k.h).
float accumulate(float acc, float dw, float dminw, float dx, int32_t isum, int32_t msum,
                 bool has_min) {
  acc = std::fma(dw * dx, static_cast<float>(isum), acc);
  if (has_min) acc = std::fma(-(dminw * dx), static_cast<float>(msum), acc);
  return acc;
}

}  // namespace

void QuantizedActsK::resize(int n, int64_t c) {
  if (n < 0 || c <= 0 || c % 256 != 0) {
    throw Error("QuantizedActsK: " + std::to_string(c) +
                " columns is not a positive multiple of 256");
  }
  n_tok = n;
  cols = c;
  q.resize(static_cast<size_t>(n) * size_t(c));
  d.resize(static_cast<size_t>(n) * size_t(n_blocks()));
  gsum.resize(d.size() * 16);
  gpair.resize(d.size() * 8);
  spair.resize(d.size() * 4);
}

void QuantizedActsK::copy_row(int t, const QuantizedActsK& src, int src_t) {
  if (src.cols != cols || t < 0 || t >= n_tok || src_t < 0 || src_t >= src.n_tok) {
    throw Error("QuantizedActsK::copy_row: shapes or rows do not match");
  }
  auto cp = [&](auto& dst, const auto& from, size_t per_row) {
    std::copy_n(from.begin() + ptrdiff_t(size_t(src_t) * per_row), per_row,
                dst.begin() + ptrdiff_t(size_t(t) * per_row));
  };
  const size_t nb = size_t(n_blocks());
  cp(q, src.q, size_t(cols));
  cp(d, src.d, nb);
  cp(gsum, src.gsum, nb * 16);
  cp(gpair, src.gpair, nb * 8);
  cp(spair, src.spair, nb * 4);
}

void quantize_acts_k(const float* x, int64_t ldx, int n_tok, int64_t cols, QuantizedActsK& out) {
  out.resize(n_tok, cols);
  quantize_acts_k_rows(x, ldx, 0, n_tok, out);
}

namespace {

// The pair forms of the group sums that the kernels read (gpair, spair), from gsum.
void pair_group_sums(int t0, int t1, QuantizedActsK& out) {
  const int64_t nb = out.n_blocks();
  auto pair = [](int32_t lo, int32_t hi) {
    return int32_t((uint32_t(lo) & 0xFFFFu) | (uint32_t(hi) << 16));
  };
  for (int t = t0; t < t1; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const int32_t* gs = &out.gsum[size_t((t * nb + b) * 16)];
      for (int k = 0; k < 8; ++k)
        out.gpair[size_t((t * nb + b) * 8 + k)] = pair(gs[2 * k], gs[2 * k + 1]);
      for (int k = 0; k < 4; ++k) {
        out.spair[size_t((t * nb + b) * 4 + k)] =
            pair(gs[4 * k] + gs[4 * k + 1], gs[4 * k + 2] + gs[4 * k + 3]);
      }
    }
  }
}

}  // namespace

void quantize_acts_k_rows(const float* x, int64_t ldx, int t0, int t1, QuantizedActsK& out) {
  if (t0 < 0 || t1 < t0 || t1 > out.n_tok) {
    throw Error("quantize_acts_k_rows: rows [" + std::to_string(t0) + ", " + std::to_string(t1) +
                ") outside the " + std::to_string(out.n_tok) + " rows of the output");
  }
  if (t0 == t1) return;
  HWY_DYNAMIC_DISPATCH(QuantizeActsKT)
  (x, ldx, t0, t1, out.cols, out.q.data(), out.d.data(), out.gsum.data());
  pair_group_sums(t0, t1, out);
}

namespace ref {

void quantize_acts_k_rows(const float* x, int64_t ldx, int t0, int t1, QuantizedActsK& out) {
  if (t0 < 0 || t1 < t0 || t1 > out.n_tok) {
    throw Error("ref::quantize_acts_k_rows: rows outside the output");
  }
  const int64_t nb = out.n_blocks(), cols = out.cols;
  for (int t = t0; t < t1; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      encode_acts_block_k(x + t * ldx + b * 256, &out.q[size_t(t * cols + b * 256)],
                          &out.d[size_t(t * nb + b)], &out.gsum[size_t((t * nb + b) * 16)]);
    }
  }
  pair_group_sums(t0, t1, out);
}

}  // namespace ref

bool has_k_int_path(TensorType t) {
  const TypeTraits* tr = type_row(t);
  return tr && takes_k_kernel(*tr);
}

bool has_k_interleaved_kernel(TensorType t) {
  return has_k_int_path(t);  // all of them
}

void matmul_rows_k(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                   const QuantizedActsK& x, int t0, int n_tok, float* y, int64_t ldy,
                   WeightLayout layout, Scratch* scratch) {
  check("matmul_rows_k", t, cols, r0, r1, x, t0, n_tok);
  if (layout != WeightLayout::kRows) {
    if (layout != WeightLayout::kInterleaved16 || !has_k_interleaved_kernel(t)) {
      throw Error(std::string("matmul_rows_k: no kernel for ") + gguf::tensor_type_name(t) +
                  " in this layout");
    }
    if (r0 < r1 && n_tok > 0) matmul_rows_k_i16(t, w, cols, r0, r1, x, t0, n_tok, y, ldy);
    return;
  }
  const int64_t nb = cols / 256, bb = block_bytes(t);
  const UnpackFn unpack = unpack_fn(t);
  Scratch own;
  Scratch& s = scratch ? *scratch : own;
  int16_t* ls = s.get<int16_t>(ScratchSlot::kKLevels, size_t(cols));
  BlockK* blocks = s.get<BlockK>(ScratchSlot::kKBlocks, size_t(nb));
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      blocks[size_t(b)] = unpack(wb + (r * nb + b) * bb, &ls[size_t(b * 256)]);
    }
    HWY_DYNAMIC_DISPATCH(RowKT)(ls, blocks, x, t0, n_tok, y, ldy, r);
  }
}

namespace ref {

namespace {
// Block b of row r of a kInterleaved16 matrix, gathered into kRows order by this file's own
// reading of the layout (kernels.h): the fp16 fields (16 values each; at the block's start for
// Q4_K / Q5_K / IQ4_XS: d, dmin or d, scales_h; at its end for Q2_K: d, dmin, Q3_K / Q6_K: d)
// and then the planes of the rest; plane p, lane i = bytes of row i.
void interleaved_block(TensorType t, const uint8_t* w, int64_t nb, int64_t r, int64_t b,
                       uint8_t* out) {
  const InterleaveSpec spec = type_traits(t).interleave;
  const int n_fields = spec.fields, fb = spec.field_bytes;
  const int64_t bb = block_bytes(t), i = r % 16;
  const uint8_t* gb = w + (r - i) * nb * bb + b * 16 * bb;
  const int64_t words_at = spec.at_end ? 0 : n_fields * fb;
  const int64_t field_at = spec.at_end ? bb - n_fields * fb : 0;
  for (int f = 0; f < n_fields; ++f) {
    std::memcpy(out + field_at + fb * f, gb + 16 * fb * f + fb * i, size_t(fb));
  }
  const int64_t planes = (bb - n_fields * fb) / 4;
  for (int64_t p = 0; p < planes; ++p) {
    std::memcpy(out + words_at + 4 * p, gb + 16 * fb * n_fields + 64 * p + 4 * i, 4);
  }
}

}  // namespace

void matmul_rows_k(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                   const QuantizedActsK& x, int t0, int n_tok, float* y, int64_t ldy,
                   WeightLayout layout) {
  check("ref::matmul_rows_k", t, cols, r0, r1, x, t0, n_tok);
  if (layout == WeightLayout::kInterleaved16 && !has_k_interleaved_kernel(t)) {
    throw Error("ref::matmul_rows_k: no interleaved layout for this type");
  }
  const int64_t nb = cols / 256, bb = block_bytes(t);
  const TypeTraits& tr = type_traits(t);
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t r = r0; r < r1; ++r) {
    for (int j = 0; j < n_tok; ++j) {
      const int tok = t0 + j;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = wb + (r * nb + b) * bb;
        uint8_t gathered[256];
        if (layout == WeightLayout::kInterleaved16) {
          interleaved_block(t, wb, nb, r, b, gathered);
          blk = gathered;
        }
        types::LevelsK l;
        tr.levels_k(blk, l);
        const int8_t* q = &x.q[size_t(tok * cols + b * 256)];
        int32_t isum = 0, msum = 0;
        for (int e = 0; e < 256; ++e) {
          const int sub = e / l.sub_len;
          isum += l.scale[sub] * l.q[e] * q[e];
          msum += l.min[sub] * q[e];  // sum_sub m (sum of q over sub), element by element
        }
        acc = accumulate(acc, l.d, l.dmin, x.d[size_t(tok * nb + b)], isum, msum, l.has_min);
      }
      y[j * ldy + r] = acc;
    }
  }
}

}  // namespace ref
}  // namespace lynx::kernels
#endif  // HWY_ONCE
