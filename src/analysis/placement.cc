#include "analysis/placement.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include <nlohmann/json.hpp>

#include "analysis/trace.h"

namespace lynx::analysis {
namespace {

void check_ranks(int n_expert, int ranks) {
  if (n_expert < 1) throw Error("placement: need at least one expert");
  if (ranks < 1 || ranks > n_expert) {
    throw Error("placement: ranks must be in [1, experts = " + std::to_string(n_expert) +
                "], got " + std::to_string(ranks));
  }
}

}  // namespace

int rank_capacity(int n_expert, int ranks, int rank) {
  check_ranks(n_expert, ranks);
  return n_expert / ranks + (rank < n_expert % ranks ? 1 : 0);
}

std::vector<int> contiguous_layer(int n_expert, int ranks) {
  check_ranks(n_expert, ranks);
  std::vector<int> rank_of(static_cast<size_t>(n_expert));
  int e = 0;
  for (int r = 0; r < ranks; ++r) {
    for (int i = rank_capacity(n_expert, ranks, r); i > 0; --i) rank_of[size_t(e++)] = r;
  }
  return rank_of;
}

Placement contiguous_placement(int n_layers, int n_expert, int ranks) {
  if (n_layers < 1) throw Error("placement: need at least one layer");
  Placement p;
  p.ranks = ranks;
  p.experts = n_expert;
  p.layers.assign(size_t(n_layers), contiguous_layer(n_expert, ranks));
  return p;
}

void add_expert_load(const GatingConfig& g, const float* logits, int n_tokens,
                     std::vector<double>& count, std::vector<double>& coact) {
  const int n = g.n_expert, k = g.n_expert_used;
  count.resize(size_t(n), 0.0);
  coact.resize(size_t(n) * n, 0.0);
  std::vector<int32_t> ids(size_t(n_tokens) * k);
  std::vector<float> w(ids.size());
  RoutingInput in;
  in.logits = logits;
  in.n_tokens = n_tokens;
  in.gating = &g;
  RoutingOutput out{ids.data(), w.data()};
  route_topk(in, out);
  for (int t = 0; t < n_tokens; ++t) {
    const int32_t* id = &ids[size_t(t) * k];
    const float* wt = &w[size_t(t) * k];
    for (int i = 0; i < k; ++i) {
      if (!(wt[i] > 0.f)) continue;
      count[size_t(id[i])] += 1;
      for (int j = 0; j < k; ++j) {
        if (j != i && wt[j] > 0.f) coact[size_t(id[i]) * n + size_t(id[j])] += 1;
      }
    }
  }
}

ExpertLoad expert_load_from_trace(const std::string& trace_path) {
  TraceReader r(trace_path);
  const TraceHeader& h = r.header();
  const GatingConfig g = h.gating();
  ExpertLoad load;
  load.n_expert = h.n_expert;
  load.count.assign(size_t(h.n_layers), std::vector<double>(size_t(h.n_expert), 0.0));
  load.coact.assign(size_t(h.n_layers), std::vector<double>(size_t(h.n_expert) * h.n_expert, 0.0));
  load.tokens.assign(size_t(h.n_layers), 0);
  TraceRecord rec;
  int64_t rows = 0;
  while (r.next(rec)) {
    if (rec.n_tokens == 0) continue;
    add_expert_load(g, rec.logits.data(), rec.n_tokens, load.count[size_t(rec.layer)],
                    load.coact[size_t(rec.layer)]);
    load.tokens[size_t(rec.layer)] += rec.n_tokens;
    rows += rec.n_tokens;
  }
  if (rows == 0) throw Error("routing trace '" + trace_path + "' holds no token rows");
  return load;
}

std::vector<int> balance_layer(const std::vector<double>& count, const std::vector<double>& coact,
                               int ranks, const BalanceOptions& opt) {
  const int n = int(count.size());
  check_ranks(n, ranks);
  const bool use_coact = opt.coact_weight != 0;
  if (use_coact && coact.size() != size_t(n) * n) {
    throw Error("placement: co-activation matrix has " + std::to_string(coact.size()) +
                " entries, expected " + std::to_string(size_t(n) * n));
  }
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return count[size_t(a)] > count[size_t(b)]; });
  std::vector<double> load(size_t(ranks), 0.0);
  std::vector<int> held(size_t(ranks), 0);
  std::vector<int> rank_of(size_t(n), -1);
  for (int e : order) {
    int best = -1;
    double best_score = 0;
    for (int r = 0; r < ranks; ++r) {
      if (held[size_t(r)] >= rank_capacity(n, ranks, r)) continue;
      double score = load[size_t(r)];
      if (use_coact) {
        double c = 0;
        for (int f = 0; f < n; ++f) {
          if (rank_of[size_t(f)] == r) c += coact[size_t(e) * n + size_t(f)];
        }
        score += opt.coact_weight * c;
      }
      if (best < 0 || score < best_score ||
          (score == best_score && held[size_t(r)] < held[size_t(best)])) {
        best = r;
        best_score = score;
      }
    }
    rank_of[size_t(e)] = best;  // capacities sum to n: a rank with room always exists
    load[size_t(best)] += count[size_t(e)];
    ++held[size_t(best)];
  }
  return rank_of;
}

Placement balanced_placement(const ExpertLoad& load, int ranks, const BalanceOptions& opt) {
  if (load.count.empty()) throw Error("placement: no layers to place");
  Placement p;
  p.ranks = ranks;
  p.experts = load.n_expert;
  for (size_t l = 0; l < load.count.size(); ++l) {
    static const std::vector<double> kNone;
    p.layers.push_back(
        balance_layer(load.count[l], l < load.coact.size() ? load.coact[l] : kNone, ranks, opt));
  }
  return p;
}

double imbalance_factor(const std::vector<int>& rank_of, const std::vector<double>& count,
                        int ranks) {
  if (rank_of.size() != count.size()) throw Error("imbalance_factor: size mismatch");
  std::vector<double> load(size_t(ranks), 0.0);
  for (size_t e = 0; e < rank_of.size(); ++e) {
    if (rank_of[e] < 0 || rank_of[e] >= ranks) throw Error("imbalance_factor: rank out of range");
    load[size_t(rank_of[e])] += count[e];
  }
  const double total = std::accumulate(load.begin(), load.end(), 0.0);
  if (total <= 0) return 1.0;
  return *std::max_element(load.begin(), load.end()) / (total / ranks);
}

void validate_placement(const Placement& p) {
  check_ranks(p.experts, p.ranks);
  if (p.layers.empty()) throw Error("placement: no layers");
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const auto& layer = p.layers[l];
    const std::string where = "placement layer " + std::to_string(l);
    if (layer.size() != size_t(p.experts)) {
      throw Error(where + ": " + std::to_string(layer.size()) + " entries, expected " +
                  std::to_string(p.experts));
    }
    std::vector<int> held(size_t(p.ranks), 0);
    for (size_t e = 0; e < layer.size(); ++e) {
      if (layer[e] < 0 || layer[e] >= p.ranks) {
        throw Error(where + ": expert " + std::to_string(e) + " on rank " +
                    std::to_string(layer[e]) + ", outside [0, " + std::to_string(p.ranks) + ")");
      }
      ++held[size_t(layer[e])];
    }
    for (int r = 0; r < p.ranks; ++r) {
      if (held[size_t(r)] != rank_capacity(p.experts, p.ranks, r)) {
        throw Error(where + ": rank " + std::to_string(r) + " holds " +
                    std::to_string(held[size_t(r)]) + " experts, expected " +
                    std::to_string(rank_capacity(p.experts, p.ranks, r)));
      }
    }
  }
}

std::string placement_to_json(const Placement& p) {
  validate_placement(p);
  // ordered_json keeps the keys in the documented order.
  nlohmann::ordered_json j;
  j["ranks"] = p.ranks;
  j["experts"] = p.experts;
  j["layers"] = p.layers;
  return j.dump() + "\n";
}

Placement placement_from_json(const std::string& text, const std::string& origin,
                              const PlacementFit* fit) {
  auto fail = [&](const std::string& why) -> Error {
    return Error("placement " + origin + ": " + why);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw fail(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw fail("expected a JSON object");
  for (const char* key : {"ranks", "experts", "layers"}) {
    if (!j.contains(key)) throw fail(std::string("missing \"") + key + "\"");
  }
  const nlohmann::json& jr = j["ranks"];
  const nlohmann::json& je = j["experts"];
  if (fit) {
    if (!jr.is_number_integer() || jr.get<int64_t>() != fit->ranks) {
      throw fail("\"ranks\" is " + jr.dump() + " but the job has " + std::to_string(fit->ranks) +
                 " ranks");
    }
    if (!je.is_number_integer() || je.get<int64_t>() != fit->experts) {
      throw fail("\"experts\" is " + je.dump() + " but the model has " +
                 std::to_string(fit->experts) + " experts per layer");
    }
  } else {
    // Bounded so that the row checks below cannot overflow an int.
    for (const auto& [key, v] :
         {std::pair<const char*, const nlohmann::json*>{"ranks", &jr}, {"experts", &je}}) {
      if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > (1 << 24)) {
        throw fail(std::string("\"") + key + "\" is " + v->dump() +
                   ", not an integer in [1, 16777216]");
      }
    }
  }
  Placement p;
  p.ranks = jr.get<int>();
  p.experts = je.get<int>();
  const nlohmann::json& layers = j["layers"];
  if (fit && (!layers.is_array() || layers.size() != size_t(fit->layers))) {
    throw fail("\"layers\" must be an array of " + std::to_string(fit->layers) +
               " arrays (one per MoE layer)");
  }
  if (!layers.is_array()) throw fail("\"layers\" must be an array of arrays (one per layer)");
  for (size_t il = 0; il < layers.size(); ++il) {
    const nlohmann::json& row = layers[il];
    const std::string where = "layers[" + std::to_string(il) + "]";
    if (!row.is_array() || row.size() != size_t(p.experts)) {
      throw fail(where + " must list the rank of each of the " + std::to_string(p.experts) +
                 " experts");
    }
    std::vector<int> owners;
    owners.reserve(row.size());
    for (size_t e = 0; e < row.size(); ++e) {
      if (!row[e].is_number_integer() || row[e].get<int64_t>() < 0 ||
          row[e].get<int64_t>() >= p.ranks) {
        throw fail(where + "[" + std::to_string(e) + "] = " + row[e].dump() +
                   " is not a rank in [0, " + std::to_string(p.ranks) + ")");
      }
      owners.push_back(row[e].get<int>());
    }
    p.layers.push_back(std::move(owners));
  }
  return p;
}

std::vector<int> Placement::experts_of(int layer, int rank) const {
  std::vector<int> out;
  for (int e = 0; e < experts; ++e) {
    if (rank_of(layer, e) == rank) out.push_back(e);
  }
  return out;
}

}  // namespace lynx::analysis
