// The BF16 fast mode (matmul_bf16.h) with AVX512_BF16's VDPBF16PS: the kernel of CPUs that have
// AVX512_BF16 but no AMX (AMD Zen 4 and 5, Intel Cooper Lake), and of AMX machines when
// --bf16-kernel avx512bf16 asks for it (the tests and benchmarks use that to run it there).
//
// Raw intrinsics with a target attribute behind the CPUID check of matmul_bf16.cc, not Highway:
// Highway 1.0.3 (Debian 12) has no target with AVX512_BF16, and its bf16
// ReorderWidenMulAccumulate / WidenMulPairwiseAdd widen both operands to F32 and use FMAs there,
// the same work as the exact path, instead of emitting VDPBF16PS.
//
// VDPBF16PS multiplies 16-bit pairs: F32 lane n gets a[2n] b[2n] + a[2n + 1] b[2n + 1]. A
// kPanel16 64-byte line holds column c for the panel's 16 rows, then column c + 1; one VPERMW
// puts row n's two columns side by side in lane n (the pair layout), and the token's pair
// (x[c], x[c + 1]), one 32-bit word, is broadcast to every lane. Per 64 bytes of weights: one
// load, one VPERMW (F16: two VCVTPH2PS and a VCVTNE2PS2BF16 before it) and one VDPBF16PS per
// token. Blocking: 2 panels (32 rows) x up to 8 tokens, 16 accumulators, the columns in order.
// An F16 call with more than 16 tokens first converts each 32-row block to BF16 in the pair
// layout in scratch, so that the conversion and VPERMW run once per weight, not per 8 tokens.
// Each output is one accumulator over its row's columns in order whatever the row range or
// token block, so outputs depend only on their row and token.
#include <algorithm>
#include <cstring>

#include "kernels/matmul_bf16.h"
#include "kernels/scratch.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace lynx::kernels::detail {
namespace {

#define LYNX_TARGET_DPBF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

// Tokens per block: 2 panels x 8 tokens = 16 accumulators, with the two weight vectors, the
// permutation index and the broadcast well inside the 32 vector registers.
constexpr int kTokBlock = 8;
// Software prefetch distance in the panel stream (the float kernels' measurement, matmul.cc).
constexpr int64_t kPrefetchBytes = 4096;

// Lane n of the result takes 16-bit element n (column c, row n) and element 16 + n (column
// c + 1, row n).
LYNX_TARGET_DPBF16 inline __m512i pair_index() {
  alignas(64) uint16_t idx[32];
  for (int n = 0; n < 16; ++n) {
    idx[2 * n] = uint16_t(n);
    idx[2 * n + 1] = uint16_t(16 + n);
  }
  return _mm512_load_si512(idx);
}

// The 16 pairs (row n: columns c and c + 1) of the panel line at `line`, as BF16; kLast: only
// column c is left (an odd column count), so only its half of the line is read.
template <bool F16, bool kLast>
LYNX_TARGET_DPBF16 inline __m512i load_pairs(const uint8_t* line, const __m512i idx) {
  __m512i v;
  if constexpr (!kLast) {
    _mm_prefetch(reinterpret_cast<const char*>(line + kPrefetchBytes), _MM_HINT_T0);
    v = _mm512_loadu_si512(line);
  } else {
    v = _mm512_maskz_loadu_epi16(0xFFFF, line);
  }
  if constexpr (F16) {  // F16 -> F32 exactly, then to BF16 to nearest even
    const __m512 lo = _mm512_maskz_cvtph_ps(0xFFFF, _mm512_maskz_extracti64x4_epi64(0xF, v, 0));
    const __m512 hi = _mm512_maskz_cvtph_ps(0xFFFF, _mm512_maskz_extracti64x4_epi64(0xF, v, 1));
    v = __m512i(_mm512_cvtne2ps_pbh(hi, lo));
  }
  return _mm512_permutexvar_epi16(idx, v);
}

// Rows [b0, b0 + 32) (p1 == p0 when only the panel at b0 is wanted) times NT tokens from s.
// kPaired: p0/p1 are panels already in the pair layout, BF16 and padded to an even column
// count (prepare_pairs); else the kPanel16 lines of the weights themselves.
template <bool F16, bool kPaired, int NT>
LYNX_TARGET_DPBF16 void block(const Bf16RowsJob& j, const uint8_t* p0, const uint8_t* p1,
                              int64_t b0, bool two, int s) {
  const int64_t ldx = j.x->ld;
  const uint16_t* x = j.x->v.data() + (j.t0 + s) * ldx;
  const __m512i idx = pair_index();
  __m512 a0[NT], a1[NT];
  for (int i = 0; i < NT; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
  // The odd last column is its own step after the loop: with its masked load inside the
  // loop, GCC 12 kept a0/a1 in memory and stored all 2 NT accumulators every iteration, which
  // halved the kernel's rate on a Zen 5 (docs/benchmarks.md).
  auto step = [&]<bool kLast>(int64_t c) LYNX_TARGET_DPBF16 {
    __m512bh w0, w1;
    if constexpr (kPaired) {
      w0 = __m512bh(_mm512_load_si512(p0 + c * 32));
      w1 = __m512bh(_mm512_load_si512(p1 + c * 32));
    } else {
      w0 = __m512bh(load_pairs<F16, kLast>(p0 + c * 32, idx));
      w1 = __m512bh(load_pairs<F16, kLast>(p1 + c * 32, idx));
    }
    for (int i = 0; i < NT; ++i) {
      int32_t pair;  // x[c] and x[c + 1] (the padding past cols is zero)
      std::memcpy(&pair, x + i * ldx + c, 4);
      const __m512bh xb = __m512bh(_mm512_set1_epi32(pair));
      a0[i] = _mm512_dpbf16_ps(a0[i], w0, xb);
      a1[i] = _mm512_dpbf16_ps(a1[i], w1, xb);
    }
  };
  const int64_t cols = j.cols, even = cols & ~int64_t{1};
  for (int64_t c = 0; c < even; c += 2) step.template operator()<false>(c);
  if (even < cols) step.template operator()<true>(even);
  // Only the rows in [r0, r1): masked stores (masked-off lanes are never touched).
  auto mask = [&](int64_t p) {
    const int64_t lo = std::max(j.r0, p) - p, hi = std::min(j.r1, p + 16) - p;
    return hi <= lo ? __mmask16(0) : __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
  };
  const __mmask16 m0 = mask(b0), m1 = two ? mask(b0 + 16) : __mmask16(0);
  for (int i = 0; i < NT; ++i) {
    float* yr = j.y + (s + i) * j.ldy;
    _mm512_mask_storeu_ps(yr + b0, m0, a0[i]);
    if (two) _mm512_mask_storeu_ps(yr + b0 + 16, m1, a1[i]);
  }
}

// The panel at p (kPanel16) in the pair layout, BF16, into out (64-byte aligned, (cols + 1) / 2
// lines; an odd count's last line has zero weights for the missing column). The products then
// read what load_pairs would have made of the same lines, so the outputs are the same bits.
template <bool F16>
LYNX_TARGET_DPBF16 void prepare_pairs(const uint8_t* p, int64_t cols, uint8_t* out) {
  const __m512i idx = pair_index();
  const int64_t even = cols & ~int64_t{1};
  for (int64_t c = 0; c < even; c += 2) {
    _mm512_store_si512(out + c * 32, load_pairs<F16, false>(p + c * 32, idx));
  }
  if (even < cols) _mm512_store_si512(out + even * 32, load_pairs<F16, true>(p + even * 32, idx));
}

template <bool F16>
LYNX_TARGET_DPBF16 void rows(const Bf16RowsJob& j, Scratch& scratch) {
  using Fn = void (*)(const Bf16RowsJob&, const uint8_t*, const uint8_t*, int64_t, bool, int);
  static constexpr Fn kDirect[kTokBlock] = {
      block<F16, false, 1>, block<F16, false, 2>, block<F16, false, 3>, block<F16, false, 4>,
      block<F16, false, 5>, block<F16, false, 6>, block<F16, false, 7>, block<F16, false, 8>};
  static constexpr Fn kPaired[kTokBlock] = {
      block<F16, true, 1>, block<F16, true, 2>, block<F16, true, 3>, block<F16, true, 4>,
      block<F16, true, 5>, block<F16, true, 6>, block<F16, true, 7>, block<F16, true, 8>};
  const int64_t panel_bytes = 16 * j.cols * 2;
  // F16 with more than two token blocks: each 32-row block's weights are converted and put in
  // the pair layout once instead of once per token block, and the blocks read them back from
  // the cache with no conversion or VPERMW in the loop. Measured on a Zen 5 (768x2048, two
  // threads): F16 +9% at 24 tokens, +17% at 32, +40% at 512, but -10% at 16; BF16 weights lost
  // at 16-64 tokens and were even at 512 (their VPERMW costs less than the copy), so they
  // stay direct.
  const bool pair_once = F16 && j.n_tok > 2 * kTokBlock;
  const int64_t paired_bytes = (j.cols + 1) / 2 * 64;
  uint8_t* buf =
      pair_once ? scratch.get<uint8_t>(ScratchSlot::kBf16Panels, 2 * paired_bytes) : nullptr;
  for (int64_t b0 = j.r0 - j.r0 % 16; b0 < j.r1; b0 += 32) {
    const bool two = b0 + 16 < j.r1;
    const uint8_t* p0 = j.w + b0 / 16 * panel_bytes;
    const uint8_t* p1 = two ? p0 + panel_bytes : p0;
    const Fn* fns = kDirect;
    if (pair_once) {
      prepare_pairs<F16>(p0, j.cols, buf);
      if (two) prepare_pairs<F16>(p1, j.cols, buf + paired_bytes);
      p0 = buf;
      p1 = two ? buf + paired_bytes : buf;
      fns = kPaired;
    }
    for (int s = 0; s < j.n_tok; s += kTokBlock) {
      fns[std::min(kTokBlock, j.n_tok - s) - 1](j, p0, p1, b0, two, s);
    }
  }
}

}  // namespace

void dpbf16_rows(const Bf16RowsJob& j, Scratch& scratch) {
  if (j.f16) {
    rows<true>(j, scratch);
  } else {
    rows<false>(j, scratch);
  }
}

}  // namespace lynx::kernels::detail

#else

namespace lynx::kernels::detail {
void dpbf16_rows(const Bf16RowsJob&, Scratch&) {}  // unreachable: has_bf16_path is false off x86-64
}  // namespace lynx::kernels::detail

#endif
