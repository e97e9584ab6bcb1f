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
// Each output is one accumulator over its row's columns in order whatever the row range or
// token block, so outputs depend only on their row and token.
#include <algorithm>
#include <cstring>

#include "kernels/matmul_bf16.h"

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
template <bool F16, int NT>
LYNX_TARGET_DPBF16 void block(const Bf16RowsJob& j, int64_t b0, bool two, int s) {
  const int64_t panel_bytes = 16 * j.cols * 2;
  const uint8_t* p0 = j.w + b0 / 16 * panel_bytes;
  const uint8_t* p1 = two ? p0 + panel_bytes : p0;
  const int64_t ldx = j.x->ld;
  const uint16_t* x = j.x->v.data() + (j.t0 + s) * ldx;
  const __m512i idx = pair_index();
  __m512 a0[NT], a1[NT];
  for (int i = 0; i < NT; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
  // The odd last column is its own step after the loop: with its masked load inside the
  // loop, GCC 12 kept a0/a1 in memory and stored all 2 NT accumulators every iteration, which
  // halved the kernel's rate on a Zen 5 (docs/benchmarks.md).
  auto step = [&]<bool kLast>(int64_t c) LYNX_TARGET_DPBF16 {
    const __m512bh w0 = __m512bh(load_pairs<F16, kLast>(p0 + c * 32, idx));
    const __m512bh w1 = __m512bh(load_pairs<F16, kLast>(p1 + c * 32, idx));
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

template <bool F16>
LYNX_TARGET_DPBF16 void rows(const Bf16RowsJob& j) {
  using Fn = void (*)(const Bf16RowsJob&, int64_t, bool, int);
  static constexpr Fn kBlocks[kTokBlock] = {block<F16, 1>, block<F16, 2>, block<F16, 3>,
                                            block<F16, 4>, block<F16, 5>, block<F16, 6>,
                                            block<F16, 7>, block<F16, 8>};
  for (int64_t b0 = j.r0 - j.r0 % 16; b0 < j.r1; b0 += 32) {
    const bool two = b0 + 16 < j.r1;
    for (int s = 0; s < j.n_tok; s += kTokBlock) {
      kBlocks[std::min(kTokBlock, j.n_tok - s) - 1](j, b0, two, s);
    }
  }
}

}  // namespace

void dpbf16_rows(const Bf16RowsJob& j) {
  if (j.f16) {
    rows<true>(j);
  } else {
    rows<false>(j);
  }
}

}  // namespace lynx::kernels::detail

#else

namespace lynx::kernels::detail {
void dpbf16_rows(const Bf16RowsJob&) {}  // unreachable: has_bf16_path is false off x86-64
}  // namespace lynx::kernels::detail

#endif
