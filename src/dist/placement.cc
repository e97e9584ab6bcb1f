#include "dist/placement.h"

#include "dist/hash.h"
#include "lynx/error.h"

namespace lynx::dist {

Placement default_placement(int ranks, int experts, int moe_layers) {
  if (ranks < 1) throw Error("expert parallelism needs at least one rank");
  Placement p;
  p.ranks = ranks;
  p.experts = experts;
  std::vector<int> row(size_t(experts), 0);
  for (int e = 0; e < experts; ++e) row[size_t(e)] = int(int64_t(e) * ranks / experts);
  p.layers.assign(size_t(moe_layers), row);
  return p;
}

Placement read_placement(const std::string& text, const std::string& origin, int ranks, int experts,
                         int moe_layers) {
  const analysis::PlacementFit fit{ranks, experts, moe_layers};
  return analysis::placement_from_json(text, origin, &fit);
}

uint64_t placement_hash(const Placement& p) {
  Fnv1a h;
  h.add(&p.ranks, sizeof p.ranks);
  h.add(&p.experts, sizeof p.experts);
  for (const auto& row : p.layers) h.add(row.data(), row.size() * sizeof(int));
  return h.value();
}

}  // namespace lynx::dist
