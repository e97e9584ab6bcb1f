// Blocked GQA attention (attention.h). Layout of one call, R = n_tok * n_head rows (row
// r = i * n_head + g: token i, head g), padded to Rp, a multiple of the vector width:
//   qt [hd x Rp]   the queries transposed, so a score vector holds one key's scores for
//                  kN rows and no horizontal sum is needed;
//   s  [kKeys x Rp] one key tile's scores, then their exp (the P of flash attention);
//   vt [kKeys x hdp] the tile's value rows, zero-padded to hdp (a multiple of the width);
//   kt [kKeys x hd] the tile's key rows decoded to F32 (F16 / Q8_0 caches only; F32 keys
//                  are read in place);
//   o  [Rp x hdp]  the unnormalized outputs; m, l, corr, lo, hi [Rp]: running max, running
//                  sum, this tile's rescale factor, and each row's visible key positions.
// Keys are read straight from the cache rows (broadcast scalars), values through vt.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

#include "kernels/kernels.h"
#include "kernels/types/layout.h"
#include "lynx/error.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
// Order matters: foreach_target.h re-includes this file once per target.
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/cache_control.h"
#include "hwy/highway.h"

#include "hwy/contrib/math/math-inl.h"
#include "kernels/float_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Keys per tile: the tile's scores and values stay in L1 next to the queries' vectors.
constexpr int kKeys = 32;
// A Q8_0 cache row's block: fp16 d, then 32 int8 quants (ggml's block_q8_0).
constexpr int kQ8Bytes = int(sizeof(types::BlockQ8_0));
constexpr int kQ8Qs = int(offsetof(types::BlockQ8_0, qs));

using gguf::TensorType;

// dst[0..n) = the first n elements of a cached head vector of type t (F32, F16, Q8_0), with
// the values of the scalar decoders: an F16 widening and q * d are exact in F32 on every
// target.
HWY_INLINE void DecodeKvRow(TensorType t, const uint8_t* src, float* dst, int n) {
  const DF df;
  if (t == TensorType::F32) {
    std::memcpy(dst, src, sizeof(float) * size_t(n));
    return;
  }
  if (t == TensorType::F16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto* h = reinterpret_cast<const hwy::float16_t*>(src);
    int d = 0;
    for (; d + kN <= n; d += int(kN))
      hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + d)), df, dst + d);
    for (; d < n; ++d) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * size_t(d), 2);
      dst[d] = fp16_to_fp32(bits);
    }
    return;
  }
  // Q8_0: blocks of fp16 d and 32 int8 quants; a tail block decodes into a 32-float buffer.
  const hn::Rebind<int8_t, DF> di8;
  const hn::Rebind<int32_t, DF> di32;
  HWY_ALIGN float tail[32];
  for (int b = 0; b * 32 < n; ++b, src += kQ8Bytes) {
    uint16_t bits;
    std::memcpy(&bits, src, 2);
    const VF d = hn::Set(df, fp16_to_fp32(bits));
    float* out = (b + 1) * 32 <= n ? dst + b * 32 : tail;
    const auto* q = reinterpret_cast<const int8_t*>(src + kQ8Qs);
    for (int j = 0; j < 32; j += int(kN)) {
      hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, q + j))), d), df,
                 out + j);
    }
    if (out == tail) std::memcpy(dst + b * 32, tail, sizeof(float) * size_t(n - b * 32));
  }
}

// Scores of NK keys (rows krow) for NR vectors of query rows starting at column c of qt:
// s[key * rp + c ...] = (q . k) * scale, -inf where the key's position is outside the row's
// [lo, hi].
template <int NK, int NR>
HWY_INLINE void ScoreBlock(const float* const* krow, const float* pk, const float* qt, int64_t rp,
                           int hd, int64_t c, float scale, const float* lo, const float* hi,
                           float* s) {
  const DF df;
  VF acc[NK][NR];
  for (int a = 0; a < NK; ++a)
    for (int b = 0; b < NR; ++b) acc[a][b] = hn::Zero(df);
  for (int d = 0; d < hd; ++d) {
    VF qv[NR];
    for (int b = 0; b < NR; ++b) qv[b] = hn::LoadU(df, qt + d * rp + c + b * kN);
    for (int a = 0; a < NK; ++a) {
      const VF kb = hn::Set(df, krow[a][d]);
      for (int b = 0; b < NR; ++b) acc[a][b] = hn::MulAdd(kb, qv[b], acc[a][b]);
    }
  }
  const VF vs = hn::Set(df, scale), ninf = hn::Set(df, -INFINITY);
  for (int a = 0; a < NK; ++a) {
    const VF p = hn::Set(df, pk[a]);
    for (int b = 0; b < NR; ++b) {
      const int64_t col = c + b * kN;
      const auto vis =
          hn::And(hn::Le(hn::LoadU(df, lo + col), p), hn::Le(p, hn::LoadU(df, hi + col)));
      hn::StoreU(hn::IfThenElse(vis, hn::Mul(acc[a][b], vs), ninf), df, s + a * rp + col);
    }
  }
}

// Vector registers of the target: 16 on AVX2 and older x86, 32 elsewhere (AVX-512, NEON,
// SVE). A block's accumulators, its query vectors and a broadcast must fit, or the compiler
// spills the accumulators to the stack inside the innermost loop.
constexpr bool kFewRegs =
    HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3;
// Query vectors per score block: NK * NR accumulators + NR + 1 registers.
template <int NK>
constexpr int kScoreNR = kFewRegs ? (NK >= 8 ? 1 : 2) : (NK >= 8 ? 2 : 4);

template <int NK>
HWY_INLINE void ScoreKeys(const float* const* krow, const float* pk, const float* qt, int64_t rp,
                          int hd, float scale, const float* lo, const float* hi, float* s) {
  constexpr int NR = kScoreNR<NK>;
  const int64_t nv = rp / kN;
  int64_t b = 0;
  for (; b + NR <= nv; b += NR) ScoreBlock<NK, NR>(krow, pk, qt, rp, hd, b * kN, scale, lo, hi, s);
  if constexpr (NR > 1) {
    for (; b + 2 <= nv; b += 2) ScoreBlock<NK, 2>(krow, pk, qt, rp, hd, b * kN, scale, lo, hi, s);
  }
  for (; b < nv; ++b) ScoreBlock<NK, 1>(krow, pk, qt, rp, hd, b * kN, scale, lo, hi, s);
}

// Key j's value vector at dims [d, d + kN): from the decoded tile vt, or straight from an F16
// cache row, which saves storing the tile and loading it back (F16 decode at 8k context 17-25%
// faster; F32 rows read in place were slower than through the tile: docs/benchmarks.md).
struct ValuesFromTile {
  const float* vt;
  int64_t hdp;
  HWY_INLINE VF operator()(int j, int64_t d) const { return hn::LoadU(DF(), vt + j * hdp + d); }
};
struct ValuesFromF16 {
  const uint8_t* const* rows;
  HWY_INLINE VF operator()(int j, int64_t d) const {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(rows[j]) + d));
  }
};
// o[r0..r0+4) columns [d0, d0 + NC kN) = o * corr + sum_j p[j][r] value(j).
template <int NC, class Values>
HWY_INLINE void PvBlock(const float* p, int64_t rp, const Values& values, int64_t hdp, int nk,
                        const float* corr, int64_t r0, int64_t d0, float* o) {
  const DF df;
  VF acc[4][NC];
  for (int i = 0; i < 4; ++i) {
    const VF cr = hn::Set(df, corr[r0 + i]);
    for (int c = 0; c < NC; ++c) {
      acc[i][c] = hn::Mul(hn::LoadU(df, o + (r0 + i) * hdp + d0 + c * kN), cr);
    }
  }
  for (int j = 0; j < nk; ++j) {
    VF vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = values(j, d0 + c * kN);
    for (int i = 0; i < 4; ++i) {
      const VF pj = hn::Set(df, p[j * rp + r0 + i]);
      for (int c = 0; c < NC; ++c) acc[i][c] = hn::MulAdd(pj, vv[c], acc[i][c]);
    }
  }
  for (int i = 0; i < 4; ++i) {
    for (int c = 0; c < NC; ++c) hn::StoreU(acc[i][c], df, o + (r0 + i) * hdp + d0 + c * kN);
  }
}

// Every 4-row block of o over every value vector (the PV product of one key tile).
template <class Values>
HWY_INLINE void PvTile(const float* p, int64_t rp, const Values& values, int64_t hdp, int nk,
                       const float* corr, float* o) {
  // 4 rows x NC value vectors of accumulators, + NC values + 1 broadcast in registers.
  constexpr int kPvNC = kFewRegs ? 2 : 4;
  const int64_t nv = hdp / kN;
  for (int64_t r0 = 0; r0 < rp; r0 += 4) {
    int64_t c = 0;
    for (; c + kPvNC <= nv; c += kPvNC) PvBlock<kPvNC>(p, rp, values, hdp, nk, corr, r0, c * kN, o);
    if constexpr (kPvNC > 2) {
      for (; c + 2 <= nv; c += 2) PvBlock<2>(p, rp, values, hdp, nk, corr, r0, c * kN, o);
    }
    for (; c < nv; ++c) PvBlock<1>(p, rp, values, hdp, nk, corr, r0, c * kN, o);
  }
}

void AttentionGroupT(const AttentionGroup& a, std::vector<float>& scratch) {
  const DF df;
  const int G = a.n_head, hd = a.hd, hdv = a.hd_v > 0 ? a.hd_v : a.hd;
  const int64_t R = int64_t(a.n_tok) * G;
  const bool decode_k = a.k_type != TensorType::F32;
  // Rows padded to whole vectors and to the 4-row blocks of PvBlock.
  constexpr int64_t kStep = kN > 4 ? kN : 4;
  const int64_t rp = (R + kStep - 1) / kStep * kStep;
  const int64_t hdp = (hdv + kN - 1) / kN * kN;
  const size_t need =
      size_t(hd * rp + kKeys * rp + kKeys * hdp + rp * hdp + 5 * rp + (decode_k ? kKeys * hd : 0));
  if (scratch.size() < need) scratch.resize(need);
  float* qt = scratch.data();
  float* s = qt + hd * rp;
  float* vt = s + kKeys * rp;
  float* o = vt + kKeys * hdp;
  float* m = o + rp * hdp;
  float* l = m + rp;
  float* corr = l + rp;
  float* lo = corr + rp;
  float* hi = lo + rp;
  float* kt = hi + rp;

  int32_t kmin = INT32_MAX, kmax = -1;
  for (int64_t r = 0; r < rp; ++r) {
    if (r < R) {
      const int i = int(r / G), g = int(r % G);
      const float* q = a.q + int64_t(a.tok[i]) * a.q_stride + int64_t(g) * hd;
      for (int d = 0; d < hd; ++d) qt[d * rp + r] = q[d];
      const int32_t p = a.pos[i];
      const int32_t first = a.window > 0 ? std::max(0, p - a.window + 1) : 0;
      lo[r] = float(first);
      hi[r] = float(p);
      kmin = std::min(kmin, first);
      kmax = std::max(kmax, p);
      // Online softmax state; a sink starts the sum at exp(sink - sink) = 1.
      m[r] = a.sinks ? a.sinks[g] : -INFINITY;
      l[r] = a.sinks ? 1.f : 0.f;
    } else {  // padding rows see no key
      for (int d = 0; d < hd; ++d) qt[d * rp + r] = 0.f;
      lo[r] = 1.f;
      hi[r] = 0.f;
      m[r] = -INFINITY;
      l[r] = 0.f;
    }
  }
  std::fill(o, o + rp * hdp, 0.f);

  const auto* kbase = static_cast<const uint8_t*>(a.k);
  const auto* vbase = static_cast<const uint8_t*>(a.v);
  const float* krow[kKeys];
  const uint8_t* vrow[kKeys];
  float pk[kKeys];
  // F16 values of whole vectors are read in place by the PV product (no reads past a head's
  // end); the others through the decoded tile vt.
  const bool direct_v = a.v_type == TensorType::F16 && hdv == hdp;
  const VF ninf = hn::Set(df, -INFINITY), zero = hn::Zero(df);
  // Bytes of one head vector in the cache, for the prefetch of the next tile's rows: at
  // decode the rows come from DRAM, and without it each row waits on its own misses (half the
  // kernel's time at 8k context, docs/benchmarks.md).
  const int64_t k_bytes = int64_t(a.k_type == TensorType::F32   ? hd * 4
                                  : a.k_type == TensorType::F16 ? hd * 2
                                                                : (hd + 31) / 32 * kQ8Bytes);
  const int64_t v_bytes = int64_t(a.v_type == TensorType::F32   ? hdv * 4
                                  : a.v_type == TensorType::F16 ? hdv * 2
                                                                : (hdv + 31) / 32 * kQ8Bytes);
  for (int32_t kb = kmin; kb <= kmax; kb += kKeys) {
    const int nk = int(std::min<int64_t>(kKeys, int64_t(kmax) + 1 - kb));
    for (int j = 0; j < nk; ++j) {
      const int32_t p = kb + j;
      // The next tile's row j, one tile ahead: spread over the tile's rows rather than
      // issued at once, so the misses stay within what the core keeps in flight.
      if (p + kKeys <= kmax) {
        const int64_t prow = a.ring > 0 ? (p + kKeys) % a.ring : p + kKeys;
        const uint8_t* kr = kbase + prow * a.k_stride;
        const uint8_t* vr = vbase + prow * a.v_stride;
        for (int64_t off = 0; off < k_bytes; off += 64) hwy::Prefetch(kr + off);
        if (vr != kr)
          for (int64_t off = 0; off < v_bytes; off += 64) hwy::Prefetch(vr + off);
      }
      const int64_t row = a.ring > 0 ? p % a.ring : p;
      const uint8_t* kr = kbase + row * a.k_stride;
      if (decode_k) {
        DecodeKvRow(a.k_type, kr, kt + j * hd, hd);
        krow[j] = kt + j * hd;
      } else {
        krow[j] = reinterpret_cast<const float*>(kr);
      }
      pk[j] = float(p);
      vrow[j] = vbase + row * a.v_stride;
      if (!direct_v) {
        DecodeKvRow(a.v_type, vrow[j], vt + j * hdp, hdv);
        std::fill(vt + j * hdp + hdv, vt + (j + 1) * hdp, 0.f);
      }
    }
    int j = 0;
    // One query vector (decode: a token's heads): eight keys at a time keep eight
    // independent FMA chains, enough to cover the FMA latency.
    if (rp == kN) {
      for (; j + 8 <= nk; j += 8)
        ScoreKeys<8>(krow + j, pk + j, qt, rp, hd, a.scale, lo, hi, s + j * rp);
    }
    for (; j + 4 <= nk; j += 4)
      ScoreKeys<4>(krow + j, pk + j, qt, rp, hd, a.scale, lo, hi, s + j * rp);
    switch (nk - j) {
      case 3:
        ScoreKeys<3>(krow + j, pk + j, qt, rp, hd, a.scale, lo, hi, s + j * rp);
        break;
      case 2:
        ScoreKeys<2>(krow + j, pk + j, qt, rp, hd, a.scale, lo, hi, s + j * rp);
        break;
      case 1:
        ScoreKeys<1>(krow + j, pk + j, qt, rp, hd, a.scale, lo, hi, s + j * rp);
        break;
      default:
        break;
    }
    // Online softmax, kN rows at a time: the new max, the old sums rescaled by
    // exp(m_old - m_new), the tile's scores replaced by exp(s - m_new). A row that has seen
    // only masked keys keeps max -inf; exp is then taken against 0, so its terms stay 0.
    for (int64_t c = 0; c < rp; c += kN) {
      const VF mo = hn::LoadU(df, m + c);
      VF mx = mo;
      for (int jj = 0; jj < nk; ++jj) mx = hn::Max(mx, hn::LoadU(df, s + jj * rp + c));
      const VF ms = hn::IfThenElse(hn::Eq(mx, ninf), zero, mx);
      const VF cr = hn::Exp(df, hn::Sub(mo, ms));
      VF sum = zero;
      for (int jj = 0; jj < nk; ++jj) {
        const VF e = hn::Exp(df, hn::Sub(hn::LoadU(df, s + jj * rp + c), ms));
        hn::StoreU(e, df, s + jj * rp + c);
        sum = hn::Add(sum, e);
      }
      hn::StoreU(mx, df, m + c);
      hn::StoreU(hn::MulAdd(hn::LoadU(df, l + c), cr, sum), df, l + c);
      hn::StoreU(cr, df, corr + c);
    }
    if (direct_v) {
      PvTile(s, rp, ValuesFromF16{vrow}, hdp, nk, corr, o);
    } else {
      PvTile(s, rp, ValuesFromTile{vt, hdp}, hdp, nk, corr, o);
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    const int i = int(r / G), g = int(r % G);
    float* out = a.out + int64_t(a.tok[i]) * a.out_stride + int64_t(g) * hdv;
    const float inv = 1.f / l[r];
    for (int d = 0; d < hdv; ++d) out[d] = o[r * hdp + d] * inv;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lynx::kernels {

HWY_EXPORT(AttentionGroupT);

namespace {
constexpr int kRowsPerTile = 64;
constexpr int kQ8Bytes = int(sizeof(types::BlockQ8_0));
}  // namespace

int attention_tile_tokens(int n_head) {
  return std::max(1, kRowsPerTile / std::max(1, n_head));
}

bool is_kv_cache_type(TensorType t) {
  return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::Q8_0;
}

size_t kv_cache_head_bytes(TensorType t, int64_t n) {
  switch (t) {
    case TensorType::F32:
      return size_t(n) * 4;
    case TensorType::F16:
      return size_t(n) * 2;
    case TensorType::Q8_0:
      return size_t((n + 31) / 32) * kQ8Bytes;
    default:
      throw Error(std::string("KV cache type ") + gguf::tensor_type_name(t) +
                  " is not one of f32, f16, q8_0");
  }
}

void kv_cache_store(TensorType t, const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  if (t == TensorType::F32) {
    std::memcpy(out, src, sizeof(float) * size_t(n));
  } else if (t == TensorType::F16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = fp32_to_fp16(src[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
  } else {
    const int64_t whole = n / 32 * 32;
    if (whole > 0) quantize_row(TensorType::Q8_0, src, out, whole);
    if (whole < n) {  // the last block zero-padded
      float pad[32] = {};
      std::memcpy(pad, src + whole, sizeof(float) * size_t(n - whole));
      quantize_row(TensorType::Q8_0, pad, out + whole / 32 * kQ8Bytes, 32);
    }
  }
}

void kv_cache_load(TensorType t, const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const uint8_t*>(src);
  if (t == TensorType::F32) {
    std::memcpy(dst, in, sizeof(float) * size_t(n));
  } else if (t == TensorType::F16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      dst[i] = fp16_to_fp32(h);
    }
  } else {
    float block[32];
    for (int64_t b = 0; b * 32 < n; ++b) {
      ref::dequantize_row(TensorType::Q8_0, in + b * kQ8Bytes, block, 32);
      std::memcpy(dst + b * 32, block, sizeof(float) * size_t(std::min<int64_t>(32, n - b * 32)));
    }
  }
}

void attention_group(const AttentionGroup& a, std::vector<float>& scratch) {
  if (a.n_tok <= 0) return;
  if (!is_kv_cache_type(a.k_type) || !is_kv_cache_type(a.v_type)) {
    throw Error("attention_group: KV cache types must be f32, f16 or q8_0");
  }
  for (int i = 0; i < a.n_tok; ++i) {
    if (a.pos[i] < 0 || a.pos[i] >= (1 << 24)) {
      throw Error("attention_group: position " + std::to_string(a.pos[i]) + " outside [0, 2^24)");
    }
  }
  HWY_DYNAMIC_DISPATCH(AttentionGroupT)(a, scratch);
}

namespace ref {

void attention_group(const AttentionGroup& a) {
  const int hdv = a.hd_v > 0 ? a.hd_v : a.hd;
  std::vector<float> sc, kd(size_t(a.hd)), vd;
  for (int i = 0; i < a.n_tok; ++i) {
    const int32_t p = a.pos[i];
    const int32_t j0 = a.window > 0 ? std::max(0, p - a.window + 1) : 0;
    const int n = p + 1 - j0;
    sc.assign(size_t(n), 0.f);
    for (int g = 0; g < a.n_head; ++g) {
      const float* q = a.q + int64_t(a.tok[i]) * a.q_stride + int64_t(g) * a.hd;
      auto row = [&](int j) { return a.ring > 0 ? (j0 + j) % a.ring : j0 + j; };
      for (int j = 0; j < n; ++j) {
        kv_cache_load(a.k_type, static_cast<const uint8_t*>(a.k) + int64_t(row(j)) * a.k_stride,
                      kd.data(), a.hd);
        double d = 0;
        for (int e = 0; e < a.hd; ++e) d += double(q[e]) * kd[size_t(e)];
        sc[size_t(j)] = float(d) * a.scale;
      }
      float mx = a.sinks ? a.sinks[g] : -INFINITY;
      for (int j = 0; j < n; ++j) mx = std::max(mx, sc[size_t(j)]);
      double sum = a.sinks ? std::exp(double(a.sinks[g]) - mx) : 0.0;
      for (int j = 0; j < n; ++j) {
        sc[size_t(j)] = std::exp(sc[size_t(j)] - mx);
        sum += sc[size_t(j)];
      }
      float* out = a.out + int64_t(a.tok[i]) * a.out_stride + int64_t(g) * hdv;
      vd.assign(size_t(n) * hdv, 0.f);
      for (int j = 0; j < n; ++j) {
        kv_cache_load(a.v_type, static_cast<const uint8_t*>(a.v) + int64_t(row(j)) * a.v_stride,
                      &vd[size_t(j) * hdv], hdv);
      }
      for (int e = 0; e < hdv; ++e) {
        double acc = 0;
        for (int j = 0; j < n; ++j) acc += double(sc[size_t(j)]) * vd[size_t(j) * hdv + e];
        out[e] = float(acc / sum);
      }
    }
  }
}

}  // namespace ref
}  // namespace lynx::kernels
#endif  // HWY_ONCE
