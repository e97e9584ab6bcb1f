// Importance-weighted quantizers (`lynx-moe quantize --imatrix`): for each ggml type whose
// ggml quantizer takes importance weights, the same block layout as the reference encoder
// (src/kernels/types/), but every scale search minimizes the squared error weighted per
// column by imp[j] * sqrt(sigma2 + x[j]^2) (the weighting of ggml's quantize_*_impl: the
// activation's mean square times a term that keeps large weights precise). The searches are
// written from the description of ggml-quants.c's make_qx_quants / make_qkx3_quants /
// make_qp_quants / quantize_row_iq4_nl_impl; the bytes need not match ggml's, any decoder of
// the type reads them.
#pragma once
#include <cstdint>

#include "lynx/gguf.h"

namespace lynx {

// True when type t has an importance-weighted quantizer here: Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS (those whose ggml quantizer uses importance).
bool has_weighted_quantizer(gguf::TensorType t);

// Quantizes the row x of n values (a multiple of the type's block) into dst (row_size(t, n)
// bytes), weighting column j's error by imp[j] (n non-negative values). Throws lynx::Error for
// a type without a weighted quantizer.
void quantize_row_weighted(gguf::TensorType t, const float* x, const float* imp, void* dst,
                           int64_t n);

}  // namespace lynx
