// Shared helpers of the routing policies: the model's gating function, exact top-k selection
// and the weight rules every policy applies to the experts it chose. Internal to src/routing.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "lynx/routing.h"

namespace lynx::routing {

// The one total order on a token's experts used everywhere: higher logit first, ties broken
// by the lower expert id (so results never depend on sort stability). Total over non-finite
// logits too (docs/routing.md "Non-finite router logits"): +inf ranks first, then finite
// values, then -inf, and NaN ranks after everything; equal values (two +inf, two NaN) go by
// id. A strict weak order, so std::sort may use it; the NaN test runs only when neither
// comparison holds.
inline bool logit_before(const float* z, int32_t a, int32_t b) {
  const float za = z[a], zb = z[b];
  if (za > zb) return true;
  if (za < zb) return false;
  const bool na = std::isnan(za), nb = std::isnan(zb);
  if (na != nb) return nb;  // the number before the NaN
  return a < b;             // equal, or both NaN
}

// A token may be remapped only when it is a decode token that did not ask for exact routing.
inline bool is_remappable(const RoutingInput& in, int t) {
  return in.flags == nullptr || (in.flags[t] & (kTokenPrefill | kTokenExact)) == 0;
}
inline bool is_prefill(const RoutingInput& in, int t) {
  return in.flags != nullptr && (in.flags[t] & kTokenPrefill) != 0;
}

// The row of token t that policies CHOOSE by: its selection keys, or its logits when the
// gating has no selection transform. Weights always come from the logits (set_weights).
inline const float* key_row(const RoutingInput& in, int t) {
  const float* base = in.select ? in.select : in.logits;
  return base + size_t(t) * size_t(in.gating->n_expert);
}

// Throws lynx::Error when the input cannot be routed (missing gating, k outside [1, N],
// null buffers). Cheap: called once per route().
void check_routing_args(const RoutingInput& in, const RoutingOutput& out);

// Per-token constants of the gating function: the row maximum and, for softmax, 1/Z with
// Z = sum_e exp(z_e - max) over ALL N experts (the model's probabilities). Non-finite rows
// get the limits (docs/routing.md): NaN logits have probability 0 and are left out of the
// maximum and of Z; when the maximum is +inf (or every number is -inf) the experts at the
// maximum share the mass equally; a row of NaNs has probability 0 everywhere (inv_z = 0).
struct RowGate {
  float zmax = 0;
  float inv_z = 1;
};
RowGate row_gate(const float* z, int n, GatingFunc func);

// The router probability of one expert: softmax over all N (also for kSoftmaxWeight, whose
// softmax over the selected is only its weight rule), or the sigmoid score.
// Always finite, in [0, 1].
inline float gate_prob(float z, const RowGate& g, GatingFunc func) {
  if (func != GatingFunc::kSigmoid) {
    const float d = z - g.zmax;  // <= 0, or NaN for a NaN logit or inf - inf
    if (d == d) return std::exp(d) * g.inv_z;
    return z == g.zmax ? g.inv_z : 0.f;  // an infinite maximum: its share of the mass
  }
  const float p = 1.f / (1.f + std::exp(-z));
  return p == p ? p : 0.f;
}

// Top-k of a row by logit_before, written to ids[0..k) in that order. O(N*k) insertion,
// which beats a sort for the k <= 16 of real models.
void topk_row(const float* z, int n, int k, int32_t* ids);
// Top-k among candidate experts cand[0..n_cand); returns how many were written (<= k).
int topk_among(const float* z, const int32_t* cand, int n_cand, int k, int32_t* ids);

// The weight rule shared by all policies. ids[0..n_active) are the active experts in
// descending logit order; slots n_active..k-1 get weight exactly 0 (inactive).
//   p_j  = gate_prob(z[ids[j]])
//   norm_topk:            w_j = p_j / sum_active p
//   else, target > 0:     w_j = p_j * target / sum_active p   (remap: keep the token's
//                                                             original top-k mass)
//   else:                 w_j = p_j                            (the model's own gating)
// and finally w_j *= weights_scale. kSoftmaxWeight: w_j = softmax over the active experts'
// logits (sums to 1, the model's own rule, with or without a target).
// For softmax gating, p_j / sum p over a subset equals a softmax over that subset, so this is
// exactly the algorithm's "gating function over U, then renormalize or rescale".
void set_weights(const float* z, const RowGate& rg, const GatingConfig& g, const int32_t* ids,
                 int n_active, float target, float* w);

// Exact top-k for one token (ids by selection key `key`, weights from the logits z), as the
// model was trained. Returns the row's gate constants so that callers remapping the token
// need not recompute them.
RowGate route_token_exact(const float* z, const float* key, const GatingConfig& g, int32_t* ids,
                          float* w);

// The group limit kept by a remap: when the gating limits groups, every expert of chosen[0..k)
// whose key is -inf (outside the token's allowed groups) is replaced by the best of the
// token's exact choice exact[0..k) not chosen yet, and chosen is put back in key order. A
// no-op for gatings without a group limit.
void keep_group_limit(const GatingConfig& g, const float* key, const int32_t* exact, int k,
                      int32_t* chosen);

// route_topk for all tokens, keeping each row's gate constants in gates[0..T) (resized;
// no allocation once large enough).
void route_topk_keep_gates(const RoutingInput& in, RoutingOutput& out, std::vector<RowGate>& gates);

// Sum of router probabilities of ids[0..n).
float prob_mass(const float* z, const RowGate& rg, GatingFunc func, const int32_t* ids, int n);

}  // namespace lynx::routing
