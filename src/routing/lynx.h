// lynx: dynamic batch-aware expert selection (the algorithm: docs/routing.md, "lynx"), with
// improvements for gaps of the original, each an option:
//   protect-top1        a token's top-1 expert always survives (default on)
//   piggyback-prefill   experts that prefill / exact tokens activate anyway count as loaded
//                       (default on)
//   mode                decode-tokens (default: remap the decode tokens of every step) or
//                       decode-only-batches (the original: any prefill token -> all exact)
//   alpha, beta         bin resolution and count; default derived from (k, N), see
//                       lynx_default_alpha_beta and docs/routing.md
//   window              instead of beta: the window beta / alpha in logits, per MoE layer
//                       (W0/W1/..., the last value holds for later layers; 0 = that layer
//                       routes exactly). The window sets Lynx's operating point and layers
//                       differ in how much remapping they tolerate (docs/evaluation.md).
// The class is visible to tests so that the intermediates (q, h, S, m, U) of the last call can
// be checked against hand-computed values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lynx/routing.h"
#include "routing/gating.h"

namespace lynx::routing {

enum class LynxMode : uint8_t { kDecodeTokens, kDecodeOnlyBatches };

struct LynxParams {
  float alpha = 0;  // > 0; 0 = derived from (k, N)
  float beta = 0;   // >= 1; 0 = derived from (k, N)
  bool protect_top1 = true;
  bool piggyback_prefill = true;
  LynxMode mode = LynxMode::kDecodeTokens;
  std::vector<float> window;  // per MoE layer beta / alpha; empty = use beta
};

struct AlphaBeta {
  float alpha = 0, beta = 0;
};
// The default (alpha, beta) for a model routing k of N experts: the published setting of the
// reference model nearest in (log2(k/N), log2(k)); exact for every model of the published table
// (docs/routing.md).
AlphaBeta lynx_default_alpha_beta(int k, int n);

// Intermediates of the last route() call. Rows are the B remapped (decode) tokens, in token
// order; rows[r] is the token index of row r.
struct LynxState {
  bool applied = false;           // false: the whole step was routed exactly
  int B = 0;                      // tokens the policy applied to
  float alpha = 0, beta = 0;      // the values used
  std::vector<int> rows;          // [B]
  std::vector<float> q;           // [B x N] confidence bins, in {-beta} U {.., -1, 0}
  std::vector<float> h;           // [B x N] B^q
  std::vector<float> S;           // [N] sum over rows of h
  std::vector<float> m;           // [B x N] q + (S - h [+ loaded]) / (B [+ 1])
  std::vector<int32_t> critical;  // [B x k] each row's picks by m (top-1 first if protected)
  std::vector<uint8_t> loaded;    // [N] 1 = activated by a prefill/exact token (piggyback)
  std::vector<int32_t> U;         // the critical set plus loaded experts, ascending ids
};

class LynxPolicy final : public RoutingPolicy {
 public:
  explicit LynxPolicy(const LynxParams& p) : p_(p) {}
  std::string spec() const override;
  void route(const RoutingInput& in, RoutingOutput& out) override;
  const LynxState& state() const { return st_; }
  const LynxParams& params() const { return p_; }

 private:
  void score(const RoutingInput& in, const RoutingOutput& exact, int n_loaded);
  void pick_critical(const RoutingInput& in, const RoutingOutput& exact);

  LynxParams p_;
  LynxState st_;
  std::vector<float> pow_b_;     // B^-j for integer j, so h needs no pow() per element
  std::vector<int32_t> counts_;  // [levels x N] tokens per bin and expert
  std::vector<uint8_t> in_u_;    // [N]
  std::vector<RowGate> gates_;   // [T] gate constants of each row
  std::vector<int32_t> chosen_;  // [k]
};

}  // namespace lynx::routing
