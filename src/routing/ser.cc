// ser: Smart Expert Reduction (ik_llama.cpp, `-ser Kmin,t`; docs/routing.md, "Policies").
// Per decode token, keep the top Kmin experts and every other top-k expert whose router
// probability exceeds t times the top-1's; the rest are dropped. Not batch-aware: it lowers
// the experts per token. Dropped slots keep their ids with weight exactly 0 (inactive, see
// routing.h). Kept weights follow the model's gating: renormalized to sum 1 when the model
// normalizes top-k weights, the raw probabilities otherwise.
#include <algorithm>

#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx::routing {
namespace {

class SerPolicy final : public RoutingPolicy {
 public:
  SerPolicy(int kmin, double t) : kmin_(kmin), t_(t) {}
  std::string spec() const override {
    return "ser:kmin=" + std::to_string(kmin_) + ",t=" + fmt_num(t_);
  }
  void check(const GatingConfig& g) const override { check_at_most_k(spec(), "kmin", kmin_, g); }

  void route(const RoutingInput& in, RoutingOutput& out) override {
    route_topk(in, out);
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    const int kmin = std::min(kmin_, k);
    if (kmin >= k) return;
    for (int t = 0; t < in.n_tokens; ++t) {
      if (!is_remappable(in, t)) continue;
      const float* z = in.logits + size_t(t) * n;
      int32_t* ids = out.ids + size_t(t) * k;
      const RowGate rg = row_gate(z, n, g.func);
      const float thresh = float(t_) * gate_prob(z[ids[0]], rg, g.func);
      // ids are in descending logit order and the probability is monotone in the logit, so
      // the kept experts are a prefix.
      int active = kmin;
      while (active < k && gate_prob(z[ids[active]], rg, g.func) > thresh) ++active;
      if (active == k) continue;
      set_weights(z, rg, g, ids, active, 0.f, out.weights + size_t(t) * k);
    }
  }

 private:
  int kmin_;
  double t_;
};

}  // namespace

std::unique_ptr<RoutingPolicy> make_ser_policy(SpecOptions& o) {
  const int kmin = o.get_int("kmin", 0, 1, 1 << 16);
  const double t = o.get_number("t", -1, 0, 1);
  if (kmin == 0) throw Error("routing spec 'ser': needs kmin=K (experts always kept per token)");
  if (t < 0) throw Error("routing spec 'ser': needs t=T (threshold relative to the top-1, 0..1)");
  return std::make_unique<SerPolicy>(kmin, t);
}

}  // namespace lynx::routing
