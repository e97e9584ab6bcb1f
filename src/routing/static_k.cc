// static-k: every decode token uses only its top k' < k experts (docs/routing.md, "Policies"),
// the naive way to stream fewer experts. The k - k' dropped slots keep their ids with weight
// exactly 0 (inactive, see routing.h); kept weights follow the model's gating (renormalized
// when the model normalizes top-k weights, raw probabilities otherwise).
#include <algorithm>

#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx::routing {
namespace {

class StaticKPolicy final : public RoutingPolicy {
 public:
  explicit StaticKPolicy(int k) : k_(k) {}
  std::string spec() const override { return "static-k:k=" + std::to_string(k_); }
  void check(const GatingConfig& g) const override { check_at_most_k(spec(), "k", k_, g); }

  void route(const RoutingInput& in, RoutingOutput& out) override {
    route_topk(in, out);
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    const int kk = std::min(k_, k);
    if (kk >= k) return;
    for (int t = 0; t < in.n_tokens; ++t) {
      if (!is_remappable(in, t)) continue;
      const float* z = in.logits + size_t(t) * n;
      set_weights(z, row_gate(z, n, g.func), g, out.ids + size_t(t) * k, kk, 0.f,
                  out.weights + size_t(t) * k);
    }
  }

 private:
  int k_;
};

}  // namespace

std::unique_ptr<RoutingPolicy> make_static_k_policy(SpecOptions& o) {
  const int k = o.get_int("k", 0, 1, 1 << 16);
  if (k == 0) throw Error("routing spec 'static-k': needs k=K' (experts per token, < k)");
  return std::make_unique<StaticKPolicy>(k);
}

}  // namespace lynx::routing
