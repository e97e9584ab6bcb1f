// topk: exact routing, the model as trained (docs/routing.md, "Policies"). Every other policy
// is measured against it, and the batch-aware ones start from its output.
#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx {

void route_topk(const RoutingInput& in, RoutingOutput& out) {
  routing::check_routing_args(in, out);
  const GatingConfig& g = *in.gating;
  const int n = g.n_expert, k = g.n_expert_used;
  for (int t = 0; t < in.n_tokens; ++t) {
    routing::route_token_exact(in.logits + size_t(t) * n, routing::key_row(in, t), g,
                               out.ids + size_t(t) * k, out.weights + size_t(t) * k);
  }
}

namespace routing {
namespace {

class TopkPolicy final : public RoutingPolicy {
 public:
  std::string spec() const override { return "topk"; }
  void route(const RoutingInput& in, RoutingOutput& out) override { route_topk(in, out); }
};

}  // namespace

std::unique_ptr<RoutingPolicy> make_topk_policy(SpecOptions&) {
  return std::make_unique<TopkPolicy>();
}

}  // namespace routing
}  // namespace lynx
