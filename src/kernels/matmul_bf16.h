// The BF16 fast mode of BF16 and F16 weights (ContextOptions::bf16_activations, the command
// line's --bf16-acts): activations rounded to BF16 once per matmul input, products of BF16
// pairs accumulated in F32 by the CPU's BF16 instructions (AMX tiles' TDPBF16PS, else
// AVX512_BF16's VDPBF16PS). This is what
// ik_llama.cpp computes on CPUs with AVX512_BF16 (docs/benchmarks.md): BF16 weights times BF16
// activations, F16 weights first rounded to BF16. It is not the exact path: each activation
// keeps 8 significant bits instead of 24 (F16 weights 8 instead of 11); the measured effect on
// logits and perplexity is in docs/benchmarks.md. Off by default.
//
// The kernels read the kPanel16 layout the loader gives F32/F16/BF16 matrices (kernels.h); the
// rows layout and machines without AVX512_BF16 keep the exact F32 path (has_bf16_path).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/kernels.h"

namespace lynx::kernels {

// Activation rows rounded to BF16 (round to nearest even, as VCVTNE2PS2BF16: subnormal inputs
// become zero, NaN stays NaN): row t has its `cols` values at v[t * ld], then zeros up to ld,
// the next multiple of 32 (the kernels read whole 32-column blocks). Reused across calls.
struct Bf16Acts {
  int n_tok = 0;
  int64_t cols = 0, ld = 0;
  std::vector<uint16_t> v;

  // [n x c], the values of rows already there kept only when the shape is unchanged.
  void resize(int n, int64_t c) {
    n_tok = n;
    cols = c;
    ld = (c + 31) / 32 * 32;
    v.resize(size_t(n) * size_t(ld));
  }
};

// The BF16 rounding of one activation (the scalar twin of the vector rounding).
uint16_t round_act_bf16(float x);
// Resizes `out` to [n_tok x cols] and rounds rows t (at x + t * ldx) into it.
void round_acts_bf16(const float* x, int64_t ldx, int n_tok, int64_t cols, Bf16Acts& out);
// Rounds rows [t0, t1) (row t at x + t * ldx) into `out`, already [n_tok x cols]; the other
// rows keep their values.
void round_acts_bf16_rows(const float* x, int64_t ldx, int t0, int t1, Bf16Acts& out);

// Products with fewer tokens stay on the exact F32 path in the fast mode: they are bound by
// the weights' bandwidth, which the F32 panels already reach, so BF16 would only cost accuracy
// (bench_kernels, 2048 x 2048 BF16, 2 threads, docs/benchmarks.md: the AMX kernel is several
// times faster from 16 tokens; at 1-4 tokens two runs on the loaded machine disagreed on
// which path was faster; the VDPBF16PS kernel ties with the F32 panels at 1-2 tokens, and on a
// Zen 5 is 1.07x faster at 4 tokens and 1.15-1.2x at 6 (768 x 2048 experts): a threshold of 4
// for it alone would help only the rare expert of a decode batch with 4-7 rows). The engine's
// callers (project, matmul_id) apply it per product, so an expert's product in a batch takes the
// BF16 path only when enough of the batch's rows chose that expert.
constexpr int kBf16MinTokens = 8;

// The BF16 kernels, best first (runtime dispatch): AMX tiles (matmul_bf16.cc) on a CPU with
// AMX-BF16 whose tile state the OS grants (Linux: the ARCH_REQ_XCOMP_PERM request, made once
// here); VDPBF16PS (matmul_bf16_avx512.cc) on a CPU with AVX512_BF16; none: the exact F32 path.
enum class Bf16Kernel { kNone, kAvx512Bf16, kAmx };
// "none", "avx512bf16", "amx".
const char* bf16_kernel_name(Bf16Kernel k);
// True when this machine can run k (kNone always).
bool bf16_kernel_available(Bf16Kernel k);
// The best kernel this machine has (kNone without AMX-BF16 and AVX512_BF16).
Bf16Kernel best_bf16_kernel();
// The kernel a name asks for (ContextOptions::bf16_kernel, --bf16-kernel): "" or "auto" the
// best here, else "amx", "avx512bf16" or "none" (so that the benchmarks can time the
// AVX512_BF16 kernel on a machine with AMX). Throws lynx::Error naming the choices when the name
// is unknown or this machine cannot run that kernel.
Bf16Kernel bf16_kernel_by_name(std::string_view name);

// True when a weight of type t stored in `layout` takes the BF16 fast mode on kernel k:
// BF16 or F16, kPanel16, and k is not kNone.
bool has_bf16_path(TensorType t, WeightLayout layout, Bf16Kernel k);

// y[j * ldy + r] = W[r] . x[t0 + j] for r in [r0, r1), j in [0, n_tok), with W [rows x cols]
// of type BF16 or F16 stored kPanel16 and x.cols == cols, on kernel k. Each product
// W[r][c] * x[c] is exact (both operands BF16; an F16 weight rounded to BF16 to nearest even),
// the sum is F32 in an order of the hardware's choosing, so results match the scalar twin
// (ref::matmul_rows_bf16) to F32 summation tolerance, not bit for bit. Each output depends
// only on its row and token. Whole 16-row panels that [r0, r1) touches are read. Throws
// lynx::Error when k is kNone or not available here, t is not BF16/F16 or the shapes disagree.
// `scratch`: the calling worker's working memory (scratch.h); nullptr makes a temporary one.
void matmul_rows_bf16(Bf16Kernel k, TensorType t, const void* w, int64_t cols, int64_t r0,
                      int64_t r1, const Bf16Acts& x, int t0, int n_tok, float* y, int64_t ldy,
                      Scratch* scratch = nullptr);

// matmul_rows_bf16 over all rows of W, split across the pool (all x.n_tok tokens).
void matmul_bf16(Bf16Kernel k, ThreadPool& pool, TensorType t, const void* w, int64_t rows,
                 int64_t cols, const Bf16Acts& x, float* y, int64_t ldy);

namespace ref {
// The scalar twin: the same BF16 operands (x already rounded; an F16 weight rounded to BF16),
// an F32 FMA chain over the columns in order. W in kPanel16 or kRows.
void matmul_rows_bf16(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                      const Bf16Acts& x, int t0, int n_tok, float* y, int64_t ldy,
                      WeightLayout layout = WeightLayout::kPanel16);
}  // namespace ref

namespace detail {
// One call of a kernel, its arguments checked (matmul_rows_bf16).
struct Bf16RowsJob {
  bool f16;
  const uint8_t* w;
  int64_t cols, r0, r1;
  const Bf16Acts* x;
  int t0, n_tok;
  float* y;
  int64_t ldy;
};
// The VDPBF16PS kernel (matmul_bf16_avx512.cc); only when the CPU has AVX512_BF16.
void dpbf16_rows(const Bf16RowsJob& j, Scratch& scratch);
}  // namespace detail

}  // namespace lynx::kernels
