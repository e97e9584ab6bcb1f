// trace_topk_uses (see trace_uses.h).
#include "analysis/trace_uses.h"

#include <algorithm>
#include <numeric>

#include "analysis/trace.h"
#include "lynx/error.h"

namespace lynx::analysis {

std::vector<std::vector<uint32_t>> trace_topk_uses(const std::string& path,
                                                   const ModelConfig& model) {
  TraceReader r(path);
  const TraceHeader& h = r.header();
  if (h.n_expert != model.n_expert) {
    throw Error("routing trace '" + path + "' records " + std::to_string(h.n_expert) +
                " experts per layer, the model has " + std::to_string(model.n_expert));
  }
  if (h.n_layers < 1) throw Error("routing trace '" + path + "' has no layers");
  const size_t n = size_t(model.n_expert);
  const int k = std::clamp(model.n_expert_used, 1, model.n_expert);
  std::vector<std::vector<uint32_t>> by_trace(size_t(h.n_layers), std::vector<uint32_t>(n, 0));
  std::vector<int32_t> order(n);
  TraceRecord rec;
  uint64_t tokens = 0;
  while (r.next(rec)) {
    std::vector<uint32_t>& u = by_trace[size_t(rec.layer)];
    for (int t = 0; t < rec.n_tokens; ++t) {
      const float* l = rec.logits.data() + size_t(t) * n;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return l[a] > l[b] || (l[a] == l[b] && a < b);
      });
      for (int j = 0; j < k; ++j) ++u[size_t(order[size_t(j)])];
    }
    tokens += uint64_t(rec.n_tokens);
  }
  if (tokens == 0) throw Error("routing trace '" + path + "' holds no token");
  std::vector<std::vector<uint32_t>> out(size_t(model.n_layer));
  for (int il = 0; il < model.n_layer; ++il) {
    if (model.layer_routed(il)) out[size_t(il)] = by_trace[size_t(il % h.n_layers)];
  }
  return out;
}

}  // namespace lynx::analysis
