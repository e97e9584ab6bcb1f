// The per-token steps of Gated DeltaNet (Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks";
// Qwen3-Next's linear attention, Hugging Face's torch_recurrent_gated_delta_rule and
// torch_causal_conv1d_update) on one sequence's state, as plain arrays: the causal depthwise
// conv with its window of past inputs, and the delta rule on one value head's state matrix.
// The recurrent form is exact for prefill too: a prompt runs token by token through the same
// state, so a prompt prefilled in chunks, or one token at a time, gives the same numbers.
#pragma once
#include <cstdint>

namespace lynx::kernels {

// One position of the causal depthwise conv of channels [c0, c1): x (this position's raw
// channels, conv_dim wide) becomes silu(sum_j w[c][j] in_j) where in_0 .. in_{K-2} are the
// window's rows (oldest first) and in_{K-1} = x[c]; the window then drops its oldest row and
// takes x. w: [conv_dim x K] (ssm_conv1d), window: [(K-1) x conv_dim]. SIMD over channels
// (dynamic dispatch); K >= 1.
void conv_step(float* x, float* window, const float* w, int64_t conv_dim, int K, int64_t c0,
               int64_t c1);

// One position of the gated delta rule on one value head's state S [dk x dv] (row i: key
// dimension i): S = decay S; d = beta (v - S^T k); S += k d^T; out = S^T q. q is already
// L2-normed and scaled by dk^-1/2, k L2-normed. mem: dv floats of scratch.
// SIMD over the value dimension (dynamic dispatch), in two passes over S instead of the
// definition's two read-write passes: with S0 the state before the step, the first pass reads
// S0^T k and S0^T q, then d = beta (v - decay S0^T k), out = decay S0^T q + (q . k) d, and the
// second pass writes S = decay S0 + k d^T. The same quantities, summed in another order: they
// agree with the scalar twin to float rounding, not bit for bit.
void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay,
                     float beta, int64_t dk, int64_t dv, float* mem, float* out);

namespace ref {
// The scalar twins, computing the definitions above in their order (the decayed state first,
// then S^T k, the update, and S^T q of the updated state), with std::exp in the SiLU.
void conv_step(float* x, float* window, const float* w, int64_t conv_dim, int K, int64_t c0,
               int64_t c1);
void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay,
                     float beta, int64_t dk, int64_t dv, float* mem, float* out);
}  // namespace ref

}  // namespace lynx::kernels
