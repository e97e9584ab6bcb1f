// Compute kernels over plain arrays (no graph, no model knowledge).
//
// Weights stay in their file type (F32, F16, BF16, Q8_0, Q4_0 with the ggml block layouts);
// activations are F32. Every SIMD kernel (Highway, runtime dispatch to the best instruction
// set of the machine) has a scalar twin in namespace `ref`, and tests compare the two over odd
// and aligned sizes.
#pragma once
#include <cstdint>

#include "lynx/gguf.h"

namespace lynx::kernels {

using gguf::TensorType;

// True for the weight types the engine computes with.
bool is_compute_type(TensorType t);

// Dequantizes `n` elements (a multiple of the type's block size) starting at `src`.
void dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
// Quantizes `n` F32 values into `dst` (row_size(t, n) bytes), as ggml does (round to
// nearest; Q8_0/Q4_0 scales from the block's absolute maximum).
void quantize_row(TensorType t, const float* src, void* dst, int64_t n);

float dot(const float* a, const float* b, int64_t n);

// Matrix product over a range of weight rows, streaming each weight row once for all tokens:
//   y[j * ldy + r] = sum_c W[r][c] * x[j * ldx + c]   for r in [r0, r1), j in [0, n_tok)
// W is row-major [rows x cols] in type t (row r starts at r * row_size(t, cols)).
void matmul_rows(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                 const float* x, int64_t ldx, int n_tok, float* y, int64_t ldy);

// y = x / sqrt(mean(x^2) + eps) * w   (w may be nullptr: no scale). y may alias x.
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax_inplace(float* x, int64_t n);
// out = silu(gate) * up. out may alias gate.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);

// Scalar reference twins: straightforward loops, the ground truth for the tests.
namespace ref {
void dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
void quantize_row(TensorType t, const float* src, void* dst, int64_t n);
float dot(const float* a, const float* b, int64_t n);
void matmul_rows(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                 const float* x, int64_t ldx, int n_tok, float* y, int64_t ldy);
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax_inplace(float* x, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);
}  // namespace ref

// IEEE half and bfloat16 conversions (scalar).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round to nearest even

// Name of the instruction set the dispatched kernels run on ("AVX2", "AVX3", ...).
const char* simd_target_name();

}  // namespace lynx::kernels
