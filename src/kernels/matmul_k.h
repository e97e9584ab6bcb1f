// The integer path for the K-quants and IQ4_XS: weights times activations quantized to Q8_K
// blocks, as ggml computes them (their vec_dot_type is Q8_K). Not yet called by the forward
// pass (src/model/forward.cc takes the exact float path for these types); the kernels, their
// scalar twins and tests are here for it.
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
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace lynx::kernels {

// Activation rows quantized to Q8_K blocks (bit for bit ggml's quantize_row_q8_K, the encoder
// of types/q8_k.cc), unpacked for the kernels: row t has cols levels (int8 values widened to
// int16) at q[t * cols], per block b its scale at d[t * n_blocks + b] and the sums of its 16
// groups of 16 levels at gsum[(t * n_blocks + b) * 16 + g].
struct QuantizedActsK {
  int n_tok = 0;
  int64_t cols = 0;  // a multiple of 256
  std::vector<int16_t> q;
  std::vector<float> d;
  std::vector<int32_t> gsum;
  int64_t n_blocks() const { return cols / 256; }
  void resize(int n_tok,
              int64_t cols);  // throws lynx::Error unless cols is a positive multiple of 256
};

// Resizes `out` to [n_tok x cols] and quantizes the rows (row t at x + t * ldx).
void quantize_acts_k(const float* x, int64_t ldx, int n_tok, int64_t cols, QuantizedActsK& out);

// True for the types with this integer path: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
bool has_k_int_path(TensorType t);

// y[j * ldy + r] = W[r] . x[t0 + j] for r in [r0, r1), j in [0, n_tok); W in kRows. Each output
// depends only on its row and token (any row split or token grouping gives the same bits).
// Throws lynx::Error for another type or a shape mismatch.
void matmul_rows_k(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                   const QuantizedActsK& x, int t0, int n_tok, float* y, int64_t ldy);

namespace ref {
// The scalar twin: the same arithmetic, levels read element by element.
void matmul_rows_k(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                   const QuantizedActsK& x, int t0, int n_tok, float* y, int64_t ldy);
}  // namespace ref

}  // namespace lynx::kernels
