// The integer path for the K-quants and IQ4_XS: weights times activations quantized to Q8_K
// blocks (QuantizedActsK, kernels.h), as ggml computes them (their vec_dot_type is Q8_K).
// The forward pass takes it (through matmul_rows_q8) for the types whose row of the type table
// says int_kernel; the others keep the exact float path until their kernels here are faster.
//
// Arithmetic (every target and the scalar twin compute exactly this, so they agree bit for
// bit): a weight block of 256 is read as integer levels L[e] with a per-sub-block integer
// scale s and, for Q2_K/Q4_K/Q5_K, an integer min m (value = d s L - dmin m):
//   Q2_K: L = q (0..3), s, m 4-bit, sub-blocks of 16      Q3_K: L = q - 4(1 - h) (-4..3), s - 32
//   Q4_K: L = q (0..15), s, m 6-bit, sub-blocks of 32     Q5_K: L = q (0..31), s, m 6-bit
//   Q6_K: L = q - 32, s int8, sub-blocks of 16            IQ4_XS: L = grid[q], s = ls - 32
// For row r, token t, over the blocks b in order:
//   isum = sum_e s[sub(e)] L[e] qx[e]          (exact int32: |s L| <= 4064, |qx| <= 127)
//   msum = sum_sub m[sub] (sum of qx over sub)  (exact int32)
//   acc  = fma(d_w * dx_b, float(isum), acc); then, with mins, acc = fma(-(dmin_w * dx_b),
//          float(msum), acc)
// with d_w, dmin_w the block's fp16 scales (widened) and dx_b the activation block's f32 scale.
//
// Two kernels compute this: the rows kernel (any of these types, kRows: each row unpacked to
// int16 levels, then int16 dot products) and the interleaved kernel of matmul_k_i16.cc (all of
// them in kInterleaved16: 16 rows in vector lanes, u8 x s8 products, the layout the loader
// repacks these matrices to).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace lynx::kernels {

// Resizes `out` to [n_tok x cols] and quantizes the rows (row t at x + t * ldx).
void quantize_acts_k(const float* x, int64_t ldx, int n_tok, int64_t cols, QuantizedActsK& out);
// Quantizes rows [t0, t1) into the same rows of `out`, which must already have its shape.
void quantize_acts_k_rows(const float* x, int64_t ldx, int t0, int t1, QuantizedActsK& out);

// True for the types with this integer path: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
bool has_k_int_path(TensorType t);

// True for the types the interleaved kernel takes (all of has_k_int_path's).
bool has_k_interleaved_kernel(TensorType t);

// y[j * ldy + r] = W[r] . x[t0 + j] for r in [r0, r1), j in [0, n_tok); W in `layout` (kRows,
// or kInterleaved16 for has_k_interleaved_kernel types: then the whole 16-row groups that
// [r0, r1) touches are read, as matmul_rows_q8 does). Each output depends only on its row and
// token (any row split, token grouping or layout gives the same bits). Throws lynx::Error for
// another type, layout or a shape mismatch. `scratch` as for matmul_rows.
void matmul_rows_k(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                   const QuantizedActsK& x, int t0, int n_tok, float* y, int64_t ldy,
                   WeightLayout layout = WeightLayout::kRows, Scratch* scratch = nullptr);

// The interleaved kernel (matmul_k_i16.cc), arguments checked by matmul_rows_k.
void matmul_rows_k_i16(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                       const QuantizedActsK& x, int t0, int n_tok, float* y, int64_t ldy);

namespace ref {
// The activation quantizer's scalar twin (types::encode_q8_k per block).
void quantize_acts_k_rows(const float* x, int64_t ldx, int t0, int t1, QuantizedActsK& out);
// The scalar twin: the same arithmetic element by element, on the levels of the type's one
// scalar reading of a block (levels_<type>, types/layout.h, which the float decode shares and
// the reference fixtures check); kInterleaved16 weights are read in place by their own
// indexing of the layout (not the repack functions).
void matmul_rows_k(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                   const QuantizedActsK& x, int t0, int n_tok, float* y, int64_t ldy,
                   WeightLayout layout = WeightLayout::kRows);
}  // namespace ref

}  // namespace lynx::kernels
