// The integer kernel (matmul_q8.cc) as it was before the vector E8M0 scale conversion, the
// mask-free vpermb nibble lookup and the split vpdpbusd chains at 1-2 tokens, kept so that one
// process can time the two against each other (bench/bench_mxfp4_ab.cc: the machine is shared,
// so only interleaved A/B ratios mean anything) and the tests can hold both to the scalar twin.
#pragma once
#include <cstdint>

#include "kernels/kernels.h"

namespace lynx::kernels {

// matmul_rows_q8 with the baseline kernel for MXFP4, IQ4_NL and Q8_0 weights (every other type
// runs the one kernel it has). Same arguments, same checks, the same bits.
void matmul_rows_q8_baseline(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                             const QuantizedActs& x, int t0, int n_tok, float* y, int64_t ldy,
                             WeightLayout layout = WeightLayout::kRows);

}  // namespace lynx::kernels
