#include "dist/placement.h"

#include <nlohmann/json.hpp>

#include "dist/hash.h"
#include "lynx/error.h"

namespace lynx::dist {

Placement Placement::contiguous(int ranks, int experts, int moe_layers) {
  if (ranks < 1) throw Error("expert parallelism needs at least one rank");
  Placement p;
  p.ranks = ranks;
  p.experts = experts;
  std::vector<int> row(size_t(experts), 0);
  for (int e = 0; e < experts; ++e) row[size_t(e)] = int(int64_t(e) * ranks / experts);
  p.owner.assign(size_t(moe_layers), row);
  return p;
}

Placement Placement::parse(const std::string& text, const std::string& origin, int ranks,
                           int experts, int moe_layers) {
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
  if (!j["ranks"].is_number_integer() || j["ranks"].get<int64_t>() != ranks) {
    throw fail("\"ranks\" is " + j["ranks"].dump() + " but the job has " + std::to_string(ranks) +
               " ranks");
  }
  if (!j["experts"].is_number_integer() || j["experts"].get<int64_t>() != experts) {
    throw fail("\"experts\" is " + j["experts"].dump() + " but the model has " +
               std::to_string(experts) + " experts per layer");
  }
  const nlohmann::json& layers = j["layers"];
  if (!layers.is_array() || layers.size() != size_t(moe_layers)) {
    throw fail("\"layers\" must be an array of " + std::to_string(moe_layers) +
               " arrays (one per MoE layer)");
  }
  Placement p;
  p.ranks = ranks;
  p.experts = experts;
  for (size_t il = 0; il < layers.size(); ++il) {
    const nlohmann::json& row = layers[il];
    const std::string where = "layers[" + std::to_string(il) + "]";
    if (!row.is_array() || row.size() != size_t(experts)) {
      throw fail(where + " must list the rank of each of the " + std::to_string(experts) +
                 " experts");
    }
    std::vector<int> owners;
    for (size_t e = 0; e < row.size(); ++e) {
      if (!row[e].is_number_integer() || row[e].get<int64_t>() < 0 ||
          row[e].get<int64_t>() >= ranks) {
        throw fail(where + "[" + std::to_string(e) + "] = " + row[e].dump() +
                   " is not a rank in [0, " + std::to_string(ranks) + ")");
      }
      owners.push_back(row[e].get<int>());
    }
    p.owner.push_back(std::move(owners));
  }
  return p;
}

std::vector<int> Placement::experts_of(int moe_layer, int rank) const {
  std::vector<int> out;
  for (int e = 0; e < experts; ++e) {
    if (rank_of(moe_layer, e) == rank) out.push_back(e);
  }
  return out;
}

uint64_t Placement::hash() const {
  Fnv1a h;
  h.add(&ranks, sizeof ranks);
  h.add(&experts, sizeof experts);
  for (const auto& row : owner) h.add(row.data(), row.size() * sizeof(int));
  return h.value();
}

}  // namespace lynx::dist
