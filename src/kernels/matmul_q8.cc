// The integer path for Q8_0 / Q4_0 weights and the other 32-element types (Q4_1, Q5_0, Q5_1,
// IQ4_NL, MXFP4; see kernels.h for the arithmetic): the SIMD activation quantizer and the int8
// matmul. Highway with dynamic dispatch, compiled once per
// instruction set like matmul.cc.
//
// Computation, "rows in lanes": a block of kNR weight rows (the int32 lanes of a vector: 16
// with AVX-512, 8 with AVX2) is unpacked per 32-column block into 8 planes; plane g holds in
// lane i the 4 weight bytes of row i at columns 4g..4g+3. A u8 x s8 4-way dot product of plane
// g with the token's activation bytes 4g..4g+3 broadcast to all lanes (one vpdpbusd with
// AVX-512 VNNI) adds those 4 columns into all kNR rows at once, so after 8 planes the block's
// integer sums are already reduced, one int32 per row: then one convert and one FMA per row
// and token per 32 columns, where the float path needs 32 FMAs.
//
// Where the planes come from depends on the weight layout (kernels.h); the unpacking per
// weight type and layout is in matmul_q8_unpack-inl.h:
//  * kInterleaved16 (what the engine repacks the matrices of all these types to at load)
//    stores the planes and the 16 rows' scales as they are used: per block one vector load per
//    scalar field and one per plane (e.g. 4 for Q4_0, 8 for Q8_0), a lane slice of them when
//    kNR < 16. At small
//    batches that is what keeps decode from being bound by per-thread instruction throughput
//    (figures: docs/benchmarks.md, "Kernel and loader design measurements").
//  * kRows (the file's layout) needs 16 scalar scale loads and, per plane set, 128-bit piece
//    loads of the kNR rows and a 4x4 int32 transpose per 128-bit block (LoadPlanes4,
//    LoadPlanesQ8): the loop is then bound by those shuffles, not by memory.
//
// Unsigned x signed: Q4_0 nibbles are used as they are (0..15), and the weight offset is
// taken out with the block's activation sum: sum (n - 8) q = sum n q - 8 sum q. Q8_0 weights
// are biased to unsigned (w ^ 0x80 = w + 128) the same way, with 128 sum q. Targets without
// VNNI use vpmaddubsw (u8 x s8 -> saturating s16 pairs) + vpmaddwd instead: for Q4_0 the
// pairs stay far from saturation (8 planes x 2 x 15 x 127 < 2^15), for Q8_0 they would not
// (255 x 127 x 2), so there the weights' sign moves onto the activation instead
// (|w| x sign(w) q, |w| <= 128: pairs <= 32512), as ggml does.
//
// Highway 1.0.3 has no op for u8 x s8 dot products (vpdpbusd, vpmaddubsw), so these few are
// raw intrinsics inside #if HWY_TARGET == HWY_AVX3_DL / HWY_AVX3 / HWY_AVX2 (AVX3_DL, the
// target with VNNI, is compiled because src/kernels/CMakeLists.txt defines HWY_WANT_AVX3_DL);
// everything else is Highway ops. Other targets (EMU128 or SCALAR, non-x86) unpack the
// weights to one int32 vector per column and multiply-add them with broadcast activations, in
// plain Highway.
//
// Like the float path: with up to kNT tokens each block is unpacked in registers and used at
// once (RowBlockDirect); with more, weights are unpacked once per chunk of kChunkBlocks
// blocks into an L1 buffer and every group of kBufNT tokens runs over it, accumulators kept in
// `accbuf` between chunks (RowBlockBuffered). Each weight byte is read from memory once per
// call for up to kSuperTokens tokens, software-prefetched a row block ahead in address order,
// and every output sees the same sequence of operations whatever the row split, token
// grouping or layout (lanes never mix; a partial row block of kRows repeats its last row, one
// of kInterleaved16 computes its whole kNR-row slice and stores the rows asked for). The
// float update is an exact FMA on every target (per lane std::fma where Highway's MulAdd is
// not fused), so all targets and the scalar twin agree bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/kernels.h"
#include "kernels/matmul_k.h"
#include "kernels/types.h"
#include "lynx/error.h"

#ifndef LYNX_KERNELS_MATMUL_Q8_JOB
#define LYNX_KERNELS_MATMUL_Q8_JOB
namespace lynx::kernels {
// One matmul_rows_q8 call, validated; q/d/s point at the call's first token.
struct MatmulQ8Job {
  TensorType type;
  const uint8_t* w;
  int64_t row_bytes;
  int64_t n_blocks;
  int64_t r0, r1;
  const int8_t* q;
  const float* d;
  const int32_t* s;
  int64_t ldq;  // int8 quants per token row (= cols)
  int64_t ldb;  // blocks per token row
  int n_tok;
  float* y;
  int64_t ldy;
  WeightLayout layout;
};
}  // namespace lynx::kernels
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_q8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "hwy/cache_control.h"
#include "kernels/int_common-inl.h"
#include "kernels/matmul_q8_unpack-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using icommon::FmaExact;
using icommon::LoadI32;
using icommon::StoreLanes;
using icommon::WithTokenCount;

// ------------------------------------------------------------------ activation quantizer

// roundf (half away from zero) of float lanes: the fraction p - trunc(p) is exact for the
// magnitudes here (< 2^23), so the comparison with 0.5 decides exactly as roundf does.
template <class D, class V>
HWY_INLINE V RoundHalfAway(D d, V p) {
  const V tr = hn::Trunc(p);
  const auto up = hn::Ge(hn::Abs(hn::Sub(p, tr)), hn::Set(d, 0.5f));
  return hn::IfThenElse(up, hn::Add(tr, hn::CopySign(hn::Set(d, 1.0f), p)), tr);
}

void QuantizeActsT(const float* x, int64_t ldx, int t0, int t1, int64_t cols, int8_t* q, float* d,
                   int32_t* s) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> di8;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  const int64_t nb = cols / 32;
  for (int t = t0; t < t1; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + t * ldx + b * 32;
      auto mx = hn::Zero(df);
      auto finite = hn::Eq(mx, mx);  // all true
      for (int64_t k = 0; k < 32; k += n) {
        const auto vk = hn::LoadU(df, v + k);
        mx = hn::Max(mx, hn::Abs(vk));
        finite = hn::And(finite, hn::IsFinite(vk));
      }
      if (!hn::AllTrue(df, finite)) {
        // NaN / inf activations (a broken model): converting them to int is undefined and
        // their integer sum overflows. A zero block with a NaN scale keeps the products NaN,
        // which the forward pass reports (model/finite.h).
        for (int k = 0; k < 32; ++k) q[t * cols + b * 32 + k] = 0;
        d[t * nb + b] = std::numeric_limits<float>::quiet_NaN();
        s[t * nb + b] = 0;
        continue;
      }
      const float amax = hn::GetLane(hn::MaxOfLanes(df, mx));
      const float dd = amax / 127.0f;
      const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
      const auto vid = hn::Set(df, id);
      auto sum = hn::Zero(di);
      int8_t* qb = q + t * cols + b * 32;
      for (int64_t k = 0; k < 32; k += n) {
        const auto qi = hn::ConvertTo(di, RoundHalfAway(df, hn::Mul(hn::LoadU(df, v + k), vid)));
        sum = hn::Add(sum, qi);
        hn::StoreU(hn::DemoteTo(di8, qi), di8, qb + k);
      }
      d[t * nb + b] = fp16_to_fp32(fp32_to_fp16(dd));
      s[t * nb + b] = hn::GetLane(hn::SumOfLanes(di, sum));
    }
  }
}

// ------------------------------------------------------------------ matmul: per-target core

// Highway 1.0.3's AVX3_DL target string enables "avxvnni" (the VEX form) but not
// "avx512vnni", which _mm512_dpbusd_epi32 needs; its runtime check of AVX3_DL does require
// AVX512_VNNI, so enabling it for the matmul code of this target is safe.
#if HWY_TARGET == HWY_AVX3_DL
HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512vnni")
#endif

#undef LYNX_Q8_DOT_TOKENS  // defined below per target (foreach_target includes this file again)

constexpr int kNT = kNR >= 16 ? 8 : 4;  // tokens per group of RowBlockDirect
// Tokens per group of RowBlockBuffered: 8 on every target. With DotTokens a plane load serves
// the whole group, so AVX2's 8-row blocks also take 8 tokens (was kNT = 4 there).
constexpr int kBufNT = 8;
constexpr int64_t kChunkBlocks = 16;  // 512 columns unpacked at a time (8-16 KiB of planes)
constexpr int kSuperTokens = 64;      // token groups sharing one unpacked chunk

#if LYNX_INT_X86
#if HWY_TARGET == HWY_AVX3_DL
// kShort: the caller has 1-2 tokens, so this chain is nearly all the independent work a block
// has; two chains of 4 instead of one of 8 halve its latency (~5 cycles per vpdpbusd). The
// sums are exact int32, so the split changes no bit.
template <TensorType kType, bool kShort = false>
HWY_INLINE VI DotBlock(const VI* pl, const int8_t* xq, int32_t init) {
  const DI di;
  __m512i acc = hn::Set(di, init).raw;
  if constexpr (kShort) {
    __m512i acc1 = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      acc = _mm512_dpbusd_epi32(acc, pl[g].raw, hn::Set(di, LoadI32(xq + 4 * g)).raw);
      acc1 = _mm512_dpbusd_epi32(acc1, pl[g + 4].raw, hn::Set(di, LoadI32(xq + 4 * g + 16)).raw);
    }
    return VI{_mm512_add_epi32(acc, acc1)};
  }
  for (int g = 0; g < 8; ++g) {
    acc = _mm512_dpbusd_epi32(acc, pl[g].raw, hn::Set(di, LoadI32(xq + 4 * g)).raw);
  }
  return VI{acc};
}
#else  // AVX3 or AVX2 without VNNI
#if HWY_TARGET == HWY_AVX2
HWY_INLINE __m256i MaddUbs(__m256i u8, __m256i s8) {
  return _mm256_maddubs_epi16(u8, s8);
}
HWY_INLINE __m256i MaddOnes(__m256i s16) {
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}
HWY_INLINE __m256i Add16(__m256i a, __m256i b) {
  return _mm256_add_epi16(a, b);
}
HWY_INLINE __m256i SignBytes(__m256i x, __m256i w) {  // x * sign(w) per byte
  return _mm256_sign_epi8(x, w);
}
#else
HWY_INLINE __m512i MaddUbs(__m512i u8, __m512i s8) {
  return _mm512_maddubs_epi16(u8, s8);
}
HWY_INLINE __m512i MaddOnes(__m512i s16) {
  return _mm512_madd_epi16(s16, _mm512_set1_epi16(1));
}
HWY_INLINE __m512i Add16(__m512i a, __m512i b) {
  return _mm512_add_epi16(a, b);
}
HWY_INLINE __m512i SignBytes(__m512i x, __m512i w) {  // no vpsignb in AVX-512: negate by mask
  return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
}
#endif
template <TensorType kType, bool kShort = false>
HWY_INLINE VI DotBlock(const VI* pl, const int8_t* xq, int32_t init) {
  const DI di;
  if constexpr (!kSignedW<kType>) {
    // int16 pair sums of 4-bit levels stay below 2^15 over 8 planes (8 x 2 x 15 x 127), of
    // 5-bit levels over 4 (4 x 2 x 31 x 127).
    constexpr int kRun = kHi5<kType> ? 4 : 8;
    VI acc = hn::Set(di, init);
    for (int g0 = 0; g0 < 8; g0 += kRun) {
      auto acc16 = MaddUbs(pl[g0].raw, hn::Set(di, LoadI32(xq + 4 * g0)).raw);
      for (int g = g0 + 1; g < g0 + kRun; ++g) {
        acc16 = Add16(acc16, MaddUbs(pl[g].raw, hn::Set(di, LoadI32(xq + 4 * g)).raw));
      }
      acc = hn::Add(acc, VI{MaddOnes(acc16)});
    }
    return acc;
  } else {
    VI acc = hn::Set(di, init);
    for (int g = 0; g < 8; ++g) {
      const auto xs = SignBytes(hn::Set(di, LoadI32(xq + 4 * g)).raw, pl[8 + g].raw);
      acc = hn::Add(acc, VI{MaddOnes(MaddUbs(pl[g].raw, xs))});
    }
    return acc;
  }
}
#endif

#if HWY_TARGET != HWY_AVX3_DL
// Every token's block sum at once, planes outer: each plane is loaded once for the NT tokens
// instead of once per token. Per token these are DotBlock's integer operations in the same
// order, so the sums are the same bits. Where it matters (docs/benchmarks.md, "Prefill against
// ik_llama.cpp at 512 and 2048 tokens"): without VNNI a plane and token takes 3-4 vector
// operations and, in DotBlock's order, 3 loads (the plane twice for signed weights, the
// broadcast activation), which on AVX2 is about as many loads as the core issues per cycle.
template <TensorType kType, int NT>
HWY_INLINE void DotTokens(const VI* pl, const int8_t* xq, int64_t ldq, const int32_t* xs,
                          int64_t ldb, VI (&isum)[NT]) {
  const DI di;
  for (int t = 0; t < NT; ++t) isum[t] = hn::Set(di, -kOffset<kType> * xs[t * ldb]);
  if constexpr (!kSignedW<kType>) {
    constexpr int kRun = kHi5<kType> ? 4 : 8;  // see DotBlock
    for (int g0 = 0; g0 < 8; g0 += kRun) {
      decltype(pl[0].raw) acc16[NT];
      for (int t = 0; t < NT; ++t) {
        acc16[t] = MaddUbs(pl[g0].raw, hn::Set(di, LoadI32(xq + t * ldq + 4 * g0)).raw);
      }
      for (int g = g0 + 1; g < g0 + kRun; ++g) {
        const auto p = pl[g].raw;
        for (int t = 0; t < NT; ++t) {
          acc16[t] = Add16(acc16[t], MaddUbs(p, hn::Set(di, LoadI32(xq + t * ldq + 4 * g)).raw));
        }
      }
      for (int t = 0; t < NT; ++t) isum[t] = hn::Add(isum[t], VI{MaddOnes(acc16[t])});
    }
  } else {
    for (int g = 0; g < 8; ++g) {
      const auto a = pl[g].raw, sign = pl[8 + g].raw;
      for (int t = 0; t < NT; ++t) {
        const auto x = SignBytes(hn::Set(di, LoadI32(xq + t * ldq + 4 * g)).raw, sign);
        isum[t] = hn::Add(isum[t], VI{MaddOnes(MaddUbs(a, x))});
      }
    }
  }
}
#define LYNX_Q8_DOT_TOKENS 1
#endif

#else  // generic Highway

template <TensorType kType, bool kShort = false>
HWY_INLINE VI DotBlock(const VI* pl, const int8_t* xq, int32_t init) {
  const DI di;
  VI acc = hn::Set(di, init);
  for (int e = 0; e < 32; ++e) acc = hn::Add(acc, hn::Mul(pl[e], hn::Set(di, int32_t{xq[e]})));
  return acc;
}

#endif  // LYNX_INT_X86

// Adds block `b` (column block c0 + b of the job) of NT tokens into acc.
// kSplit: DotBlock's two chains (1-2 tokens).
template <TensorType kType, int NT, bool kSplit>
HWY_INLINE void AddBlock(const MatmulQ8Job& j, const Block<kType>& blk, int64_t tok, int64_t b,
                         VF (&acc)[NT]) {
  const DF df;
  const int8_t* xq = j.q + tok * j.ldq + b * 32;
  const float* xd = j.d + tok * j.ldb + b;
  const int32_t* xs = j.s + tok * j.ldb + b;
#ifdef LYNX_Q8_DOT_TOKENS
  VI isums[NT];
  DotTokens<kType, NT>(blk.pl, xq, j.ldq, xs, j.ldb, isums);
#endif
  for (int t = 0; t < NT; ++t) {
#ifdef LYNX_Q8_DOT_TOKENS
    const VI isum = isums[t];
#else
    const VI isum =
        DotBlock<kType, kSplit>(blk.pl, xq + t * j.ldq, -kOffset<kType> * xs[t * j.ldb]);
#endif
    const VF dx = hn::Set(df, xd[t * j.ldb]);
    acc[t] = FmaExact(DF(), hn::Mul(blk.dw, dx), hn::ConvertTo(df, isum), acc[t]);
    if constexpr (kHasMin<kType>) {
      // m x (dx x sum q): ggml's Q8_1 term, with the activation sum kept exact.
      const VF qsum = hn::Set(df, static_cast<float>(xs[t * j.ldb]));
      acc[t] = FmaExact(DF(), hn::Mul(blk.mw, dx), qsum, acc[t]);
    }
  }
}

// Prefetches slice `step` (kNR * block bytes long) of the bytes at `next` (the next row block
// or group, contiguous in memory), one slice per block of this row block, so the next one is
// fetched in address order, spread evenly over this one's blocks. Prefetching
// along the kNR rows instead (kNR interleaved streams per core, as the demand loads of the
// kRows layout go) ran ~6% slower end to end on Q8_0 at batch 1 with 2 threads (DRAM page
// locality, presumably); so did prefetch bursts per chunk of blocks (up to 2x: they overflow
// the miss buffers). Past the last row block this prefetches bytes that may not belong to
// the matrix: prefetches never fault.
template <TensorType kType>
HWY_INLINE void PrefetchShare(const uint8_t* next, int64_t step) {
  constexpr int64_t kBytes = kNR * BlockBytes<kType>();
  for (int64_t o = (step * kBytes + 63) & ~int64_t{63}; o < (step + 1) * kBytes; o += 64) {
    hwy::Prefetch(next + o);
  }
}

// Where a row block's weights come from. Both sources give, per 32-column block b, the same
// Block (lane i = row row0 + i) and store lanes [lo, hi) at y + row0, so the kernels below
// run the same operations per output whatever the layout.
//
// kRows: rows [r, min(r + kNR, r1)) as kNR row pointers (a partial block repeats its last
// row, whose lanes are computed and not stored).
struct RowsSource {
  // Where RowBlockBuffered prefetches the next row block: while unpacking a chunk (false) or
  // spread over the first token group's pass over it (true). kRows prefetches while
  // unpacking, its unpack being slow enough to space the prefetches out; kInterleaved16
  // unpacks a chunk in a burst and prefetches while computing (docs/benchmarks.md, "Kernel
  // and loader design measurements").
  static constexpr bool kPrefetchWhileComputing = false;
  const uint8_t* rows[kNR];
  const uint8_t* next;  // the next row block, contiguous in memory
  int64_t row0;
  int lo = 0, hi;
  RowsSource(const MatmulQ8Job& j, int64_t r) : row0(r) {
    hi = static_cast<int>(std::min<int64_t>(kNR, j.r1 - r));
    for (int i = 0; i < kNR; ++i) rows[i] = j.w + (r + std::min(i, hi - 1)) * j.row_bytes;
    next = j.w + (r + kNR) * j.row_bytes;
  }
  template <TensorType kType>
  HWY_INLINE void Prefetch(int64_t b) const {
    PrefetchShare<kType>(next, b);
  }
  template <TensorType kType>
  HWY_INLINE void Unpack(int64_t b, Block<kType>& blk) const {
    UnpackRows<kType>(rows, b * BlockBytes<kType>(), blk);
  }
};

// kInterleaved16: the kNR-aligned rows [row0, row0 + kNR) holding row r, slice `sub` of their
// 16-row group; stores only the rows in [j.r0, j.r1).
struct Interleaved16Source {
  static constexpr bool kPrefetchWhileComputing = true;  // see RowsSource
  const uint8_t* group;
  const uint8_t* next;  // the next group, contiguous in memory
  int64_t row0, n_blocks;
  int sub, lo, hi;
  Interleaved16Source(const MatmulQ8Job& j, int64_t r) : row0(r - r % kNR), n_blocks(j.n_blocks) {
    const int64_t g = row0 / kInterleaveRows;
    group = j.w + g * kInterleaveRows * j.row_bytes;
    next = group + kInterleaveRows * j.row_bytes;
    sub = static_cast<int>(row0 % kInterleaveRows) / kNR;
    lo = static_cast<int>(std::max<int64_t>(j.r0 - row0, 0));
    hi = static_cast<int>(std::min<int64_t>(j.r1 - row0, kNR));
  }
  // The group's slices together prefetch the next group once, in address order.
  template <TensorType kType>
  HWY_INLINE void Prefetch(int64_t b) const {
    PrefetchShare<kType>(next, sub * n_blocks + b);
  }
  template <TensorType kType>
  HWY_INLINE void Unpack(int64_t b, Block<kType>& blk) const {
    UnpackI16<kType>(group + b * kInterleaveRows * BlockBytes<kType>(), sub, blk);
  }
};

// n_tok <= kNT: every block is unpacked into registers and used at once.
template <TensorType kType, int NT, class Source>
HWY_NOINLINE void RowBlockDirect(const MatmulQ8Job& j, const Source& src) {
  const DF df;
  VF acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = hn::Zero(df);
  for (int64_t b = 0; b < j.n_blocks; ++b) {
    Block<kType> blk;
    src.template Prefetch<kType>(b);
    src.template Unpack<kType>(b, blk);
    AddBlock<kType, NT, (NT <= 2)>(j, blk, 0, b, acc);
  }
  for (int t = 0; t < NT; ++t) {
    HWY_ALIGN float out[kNR];
    hn::Store(acc[t], df, out);
    StoreLanes(DF(), out, src.lo, src.hi, j.y + t * j.ldy + src.row0);
  }
}

// n_tok > kNT: per chunk of kChunkBlocks blocks, the rows are unpacked once into an L1
// buffer and every token group runs over it; accumulators live in `accbuf` between chunks,
// so each output sees the same operations as in RowBlockDirect.
template <TensorType kType, class Source>
HWY_NOINLINE void RowBlockBuffered(const MatmulQ8Job& j, const Source& src) {
  const DF df;
  Block<kType> blocks[kChunkBlocks];
  HWY_ALIGN float accbuf[kSuperTokens * kNR];  // [token][row]

  for (int s0 = 0; s0 < j.n_tok; s0 += kSuperTokens) {
    const int ns = std::min(kSuperTokens, j.n_tok - s0);
    for (int k = 0; k < ns * kNR; k += kNR) hn::Store(hn::Zero(df), df, accbuf + k);
    for (int64_t c0 = 0; c0 < j.n_blocks; c0 += kChunkBlocks) {
      const int64_t c1 = std::min(j.n_blocks, c0 + kChunkBlocks);
      for (int64_t b = c0; b < c1; ++b) {
        if (!Source::kPrefetchWhileComputing) src.template Prefetch<kType>(b);
        src.template Unpack<kType>(b, blocks[b - c0]);
      }
      for (int t0 = 0; t0 < ns; t0 += kBufNT) {
        WithTokenCount<kBufNT>(std::min(kBufNT, ns - t0), [&]<int NT>() {
          VF acc[NT];
          for (int t = 0; t < NT; ++t) acc[t] = hn::Load(df, accbuf + (t0 + t) * kNR);
          for (int64_t b = c0; b < c1; ++b) {
            if (Source::kPrefetchWhileComputing && t0 == 0) src.template Prefetch<kType>(b);
            AddBlock<kType, NT, (NT <= 2)>(j, blocks[b - c0], s0 + t0, b, acc);
          }
          for (int t = 0; t < NT; ++t) hn::Store(acc[t], df, accbuf + (t0 + t) * kNR);
        });
      }
    }
    for (int t = 0; t < ns; ++t) {
      StoreLanes(DF(), accbuf + t * kNR, src.lo, src.hi, j.y + (s0 + t) * j.ldy + src.row0);
    }
  }
}

#if HWY_TARGET == HWY_AVX2
// AVX2, Q8_0 in the kInterleaved16 layout, more than kNT tokens: RowBlockBuffered's loops
// (token super-groups, chunks of kChunkBlocks blocks) over whole 16-row groups, with the planes
// read straight from the weights instead of an unpacked L1 copy. Per 32-column block and group
// of kGroupNT tokens, plane g of both 8-row halves is loaded once, |w| = vpsignb(w, w) once,
// and each token's broadcast activation serves both halves (vpsignb by w, vpmaddubsw,
// vpmaddwd by ones, add: DotTokens' integer work, exact, so the order changes no bit). The
// float sums live in `accbuf` and take one exact FMA per block, row and token, in block order
// as everywhere else. Against RowBlockBuffered on 8-row blocks this saves the copy's second
// load of every plane (|w| and w), half the broadcasts, and the spills of DotTokens' eight
// token sums next to eight float sums (16 of AVX2's 16 registers). The gain on Zen 3:
// docs/benchmarks.md (issue 31).
constexpr int kGroupNT = 4;

template <int NT>
HWY_INLINE void Q8GroupTokens(const MatmulQ8Job& j, const uint8_t* group, const uint8_t* next,
                              int64_t c0, int64_t c1, int64_t tok, bool prefetch, float* accbuf) {
  constexpr TensorType kType = TensorType::Q8_0;
  constexpr int64_t kGroupBlock = kInterleaveRows * BlockBytes<kType>();  // one block, 16 rows
  const DF df;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = c0; b < c1; ++b) {
    if (prefetch) {  // the next group, spread over this one's blocks (two kNR-row slices each)
      PrefetchShare<kType>(next, 2 * b);
      PrefetchShare<kType>(next, 2 * b + 1);
    }
    const uint8_t* gb = group + b * kGroupBlock;
    // Plane g (columns 4g..4g+3 of the 16 rows, 64 bytes: rows 0-7, then 8-15) after the 16
    // scales.
    const uint8_t* pl = gb + kInterleaveRows * kFieldBytes<kType>;
    const int8_t* xq = j.q + tok * j.ldq + b * 32;
    __m256i s0[NT], s1[NT];
    for (int t = 0; t < NT; ++t) s0[t] = s1[t] = _mm256_setzero_si256();
    HWY_UNROLL(8)
    for (int g = 0; g < 8; ++g) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pl + 64 * g));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pl + 64 * g + 32));
      const __m256i a0 = SignBytes(w0, w0), a1 = SignBytes(w1, w1);
      HWY_UNROLL(4)
      for (int t = 0; t < NT; ++t) {
        const __m256i x = _mm256_set1_epi32(LoadI32(xq + t * j.ldq + 4 * g));
        s0[t] = _mm256_add_epi32(s0[t], _mm256_madd_epi16(MaddUbs(a0, SignBytes(x, w0)), ones));
        s1[t] = _mm256_add_epi32(s1[t], _mm256_madd_epi16(MaddUbs(a1, SignBytes(x, w1)), ones));
        // Keeps the running sums running: without this GCC reassociates the fully unrolled
        // adds into all 64 products of the block first (spilled to the stack), then a tree.
        asm("" : "+x"(s0[t]), "+x"(s1[t]));
      }
    }
    const VF dw0 = F16ToF32(gb), dw1 = F16ToF32(gb + 2 * kNR);
    const float* xd = j.d + tok * j.ldb + b;
    for (int t = 0; t < NT; ++t) {
      const VF dx = hn::Set(df, xd[t * j.ldb]);
      float* acc = accbuf + t * kInterleaveRows;
      hn::Store(FmaExact(df, hn::Mul(dw0, dx), hn::ConvertTo(df, VI{s0[t]}), hn::Load(df, acc)), df,
                acc);
      hn::Store(
          FmaExact(df, hn::Mul(dw1, dx), hn::ConvertTo(df, VI{s1[t]}), hn::Load(df, acc + kNR)), df,
          acc + kNR);
    }
  }
}

// Rows [j.r0, j.r1) by 16-row groups; a group the range cuts is computed whole and only its
// rows in the range are stored.
HWY_NOINLINE void RunGroupsQ8I16(const MatmulQ8Job& j) {
  static_assert(kNR * 2 == kInterleaveRows);
  const DF df;
  HWY_ALIGN float accbuf[kSuperTokens * kInterleaveRows];  // [token][row of the group]
  for (int64_t row0 = j.r0 - j.r0 % kInterleaveRows; row0 < j.r1; row0 += kInterleaveRows) {
    const uint8_t* group = j.w + row0 * j.row_bytes;
    const uint8_t* next = group + kInterleaveRows * j.row_bytes;
    const int lo = static_cast<int>(std::max<int64_t>(j.r0 - row0, 0));
    const int hi = static_cast<int>(std::min<int64_t>(j.r1 - row0, kInterleaveRows));
    for (int s0 = 0; s0 < j.n_tok; s0 += kSuperTokens) {
      const int ns = std::min(kSuperTokens, j.n_tok - s0);
      for (int k = 0; k < ns * kInterleaveRows; k += kNR) hn::Store(hn::Zero(df), df, accbuf + k);
      for (int64_t c0 = 0; c0 < j.n_blocks; c0 += kChunkBlocks) {
        const int64_t c1 = std::min(j.n_blocks, c0 + kChunkBlocks);
        for (int t0 = 0; t0 < ns; t0 += kGroupNT) {
          WithTokenCount<kGroupNT>(std::min(kGroupNT, ns - t0), [&]<int NT>() {
            Q8GroupTokens<NT>(j, group, next, c0, c1, s0 + t0, s0 == 0 && t0 == 0,
                              accbuf + t0 * kInterleaveRows);
          });
        }
      }
      for (int t = 0; t < ns; ++t) {
        for (int h = 0; h < 2; ++h) {
          const int l = std::max(lo - h * kNR, 0), r = std::min(hi - h * kNR, kNR);
          if (l >= r) continue;
          StoreLanes(DF(), accbuf + t * kInterleaveRows + h * kNR, l, r,
                     j.y + (s0 + t) * j.ldy + row0 + h * kNR);
        }
      }
    }
  }
}
#endif

template <TensorType kType, class Source>
void RunRowsQ8(const MatmulQ8Job& j, int64_t r_begin) {
  for (int64_t r = r_begin; r < j.r1; r += kNR) {
    const Source src(j, r);
    if (j.n_tok > kNT) {
      RowBlockBuffered<kType>(j, src);
    } else {
      WithTokenCount<kNT>(j.n_tok, [&]<int NT>() { RowBlockDirect<kType, NT>(j, src); });
    }
  }
}

template <TensorType kType>
void RunQ8(const MatmulQ8Job& j) {
  if (j.layout == WeightLayout::kRows) {
    RunRowsQ8<kType, RowsSource>(j, j.r0);
  } else {
    // kNR divides 16, so the kNR-aligned row blocks from r0's tile each one 16-row group.
    static_assert(kInterleaveRows % kNR == 0);
#if HWY_TARGET == HWY_AVX2
    if constexpr (kType == TensorType::Q8_0) {
      if (j.n_tok > kNT) {
        RunGroupsQ8I16(j);
        return;
      }
    }
#endif
    RunRowsQ8<kType, Interleaved16Source>(j, j.r0 - j.r0 % kNR);
  }
}

void MatmulQ8T(const MatmulQ8Job& j) {
  dispatch_type<kQ8KernelTypes>(j.type, [&]<TensorType kType>() { RunQ8<kType>(j); });
}

#if HWY_TARGET == HWY_AVX3_DL
HWY_POP_ATTRIBUTES
#endif

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lynx::kernels {

HWY_EXPORT(MatmulQ8T);
HWY_EXPORT(QuantizeActsT);

bool has_int8_path(TensorType t) {
  const TypeTraits* tr = type_row(t);
  return tr && takes_q8_kernel(*tr);
}

void QuantizedActs::resize(int n, int64_t c) {
  if (n < 0 || c <= 0 || c % 32 != 0) {
    throw Error("QuantizedActs: bad shape " + std::to_string(n) + " x " + std::to_string(c) +
                " (columns must be a positive multiple of 32)");
  }
  n_tok = n;
  cols = c;
  q.resize(static_cast<size_t>(n) * static_cast<size_t>(c));
  d.resize(static_cast<size_t>(n) * static_cast<size_t>(c / 32));
  sum.resize(d.size());
}

void QuantizedActs::copy_row(int t, const QuantizedActs& src, int src_t) {
  if (src.cols != cols || t < 0 || t >= n_tok || src_t < 0 || src_t >= src.n_tok) {
    throw Error("QuantizedActs::copy_row: shapes or rows do not match");
  }
  const int64_t nb = n_blocks();
  std::memcpy(&q[static_cast<size_t>(t * cols)], &src.q[static_cast<size_t>(src_t * cols)],
              static_cast<size_t>(cols));
  std::memcpy(&d[static_cast<size_t>(t * nb)], &src.d[static_cast<size_t>(src_t * nb)],
              static_cast<size_t>(nb) * sizeof(float));
  std::memcpy(&sum[static_cast<size_t>(t * nb)], &src.sum[static_cast<size_t>(src_t * nb)],
              static_cast<size_t>(nb) * sizeof(int32_t));
}

void quantize_acts_rows(const float* x, int64_t ldx, int t0, int t1, QuantizedActs& out) {
  if (t0 < 0 || t1 < t0 || t1 > out.n_tok || out.cols % 32 != 0) {
    throw Error("quantize_acts_rows: rows [" + std::to_string(t0) + ", " + std::to_string(t1) +
                ") outside the " + std::to_string(out.n_tok) + " rows of the output");
  }
  if (t0 == t1) return;
  HWY_DYNAMIC_DISPATCH(QuantizeActsT)
  (x, ldx, t0, t1, out.cols, out.q.data(), out.d.data(), out.sum.data());
}

void quantize_acts(const float* x, int64_t ldx, int n_tok, int64_t cols, QuantizedActs& out) {
  out.resize(n_tok, cols);
  quantize_acts_rows(x, ldx, 0, n_tok, out);
}

bool has_int_path(TensorType t) {
  const TypeTraits* tr = find_type_traits(t);
  return tr && tr->int_kernel;
}

void matmul_rows_q8(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                    const QuantizedActs& x, int t0, int n_tok, float* y, int64_t ldy,
                    WeightLayout layout, Scratch* scratch) {
  if (has_int_path(t) && type_traits(t).act_type == TensorType::Q8_K) {
    matmul_rows_k(t, w, cols, r0, r1, x.k, t0, n_tok, y, ldy, layout, scratch);
    return;
  }
  if (!has_int8_path(t)) {
    throw Error(std::string("matmul_rows_q8: no integer path for weight type ") +
                gguf::tensor_type_name(t));
  }
  const size_t row_bytes = weight_row_bytes(t, cols);  // validates cols
  if (cols != x.cols) {
    throw Error("matmul_rows_q8: activations have " + std::to_string(x.cols) + " columns, " +
                "the weights " + std::to_string(cols));
  }
  if (r0 < 0 || r1 < r0 || n_tok < 0 || t0 < 0 || t0 + n_tok > x.n_tok) {
    throw Error("matmul_rows_q8: bad range rows [" + std::to_string(r0) + ", " +
                std::to_string(r1) + ") tokens [" + std::to_string(t0) + ", " +
                std::to_string(t0 + n_tok) + ") of " + std::to_string(x.n_tok));
  }
  if (r0 == r1 || n_tok == 0) return;
  const int64_t nb = cols / 32;
  for_each_token_panel(cols, n_tok, [&](int p0, int n) {
    const int64_t tp = t0 + p0;
    const MatmulQ8Job job{t,
                          static_cast<const uint8_t*>(w),
                          static_cast<int64_t>(row_bytes),
                          nb,
                          r0,
                          r1,
                          x.q.data() + tp * cols,
                          x.d.data() + tp * nb,
                          x.sum.data() + tp * nb,
                          cols,
                          nb,
                          n,
                          y + p0 * ldy,
                          ldy,
                          layout};
    HWY_DYNAMIC_DISPATCH(MatmulQ8T)(job);
  });
}

}  // namespace lynx::kernels
#endif  // HWY_ONCE
