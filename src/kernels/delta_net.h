// The per-token steps of Gated DeltaNet (Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks";
// Qwen3-Next's linear attention, Hugging Face's torch_recurrent_gated_delta_rule and
// torch_causal_conv1d_update) on one sequence's state, as plain arrays: the causal depthwise
// conv with its window of past inputs, and the delta rule on one value head's state matrix.
// The recurrent form runs a prompt token by token through the same state, so a prompt split
// any way gives the same numbers. delta_rule_chunked is the chunked form for runs of one
// sequence's tokens (prefill; the forward pass takes it from ContextOptions::
// delta_rule_chunk_min tokens): the same quantities summed in another order, so within float
// rounding of the recurrence, not bit for bit.
#pragma once
#include <cstddef>
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

// Tokens per chunk of delta_rule_chunked: the chunk's matrices (64 x 64 decays and Gram
// products, 64 x dv solutions) stay in L2 beside a 128 x 128 state.
constexpr int64_t kDeltaChunk = 64;

// n consecutive tokens of one value head, token t's rows at base + t * stride.
struct DeltaRuleRows {
  const float* q;  // dk floats each, L2-normed and scaled as for delta_rule_step
  const float* k;  // dk floats each, L2-normed
  const float* v;  // dv floats each
  int64_t ld_qkv;  // row stride of q, k and v
  const float* decay;
  const float* beta;
  int64_t ld_gb;  // stride of decay and beta
  float* out;     // dv floats each, written
  int64_t ld_out;
};

// Floats of scratch delta_rule_chunked needs (about 61,500 for dk = dv = 128: 240 KiB).
size_t delta_rule_chunked_scratch(int64_t dk, int64_t dv);

// n tokens of the gated delta rule (delta_rule_step's definition, token after token) on S,
// in chunks of kDeltaChunk: per chunk the triangular system of the chunk's updates
// (d_t + beta_t sum_{s<t} (g_{s+1} .. g_t) (k_t . k_s) d_s = beta_t (v_t - G_t S_0^T k_t)) is
// solved by forward substitution and the outputs and the next state come from matrix products
// against the chunk's first state (delta_net_chunked.cc). Products of decays below 1e-30 are
// taken as 0. mem: delta_rule_chunked_scratch(dk, dv) floats. SIMD (dynamic dispatch).
void delta_rule_chunked(float* S, const DeltaRuleRows& rows, int64_t n, int64_t dk, int64_t dv,
                        float* mem);

namespace ref {
// The scalar twins, computing the definitions above in their order (the decayed state first,
// then S^T k, the update, and S^T q of the updated state), with std::exp in the SiLU.
void conv_step(float* x, float* window, const float* w, int64_t conv_dim, int K, int64_t c0,
               int64_t c1);
void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay,
                     float beta, int64_t dk, int64_t dv, float* mem, float* out);
}  // namespace ref

}  // namespace lynx::kernels
