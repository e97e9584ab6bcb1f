// Shared by the expert tier's tests (expert_tier_test.cc, expert_io_test.cc): the MoE fixtures
// of tests/reference, load options of a fully loaded model and of a tier of a given size, and a
// run of two sequences whose logits are compared bit for bit.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx {
namespace tier_test {

inline const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

struct MoeFixture {
  std::string name, file;
  std::vector<int32_t> tokens;
};

// The fixtures of goldens.json whose models have routed experts.
inline std::vector<MoeFixture> moe_fixtures() {
  std::ifstream f(kFixtures + "goldens.json");
  EXPECT_TRUE(f.good());
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<MoeFixture> out;
  for (const auto& x : j["fixtures"]) {
    const auto& routing = x["routing"];
    bool moe = false;
    for (const auto& layer : routing) moe = moe || !layer.empty();
    if (!moe) continue;
    out.push_back({x["name"], kFixtures + x["file"].get<std::string>(),
                   x["tokens"].get<std::vector<int32_t>>()});
  }
  return out;
}

inline LoadOptions resident() {
  LoadOptions o;
  o.expert_cache = 0;
  return o;
}

inline LoadOptions tier_of(const Model& m, int slots) {
  LoadOptions o;
  size_t slot = 0;
  for (int il = 0; il < m.config().n_layer; ++il) {
    if (m.config().layer_routed(il)) slot = std::max(slot, m.expert_bytes(il) + 192);
  }
  o.expert_cache = int64_t(slot) * slots;
  o.expert_prefetch = 2;  // the read-ahead runs in every tier test that does not turn it off
  return o;
}

// Every position's logits of: the first half of the tokens prefilled in sequence A, then the
// rest decoded one by one in A while B, started with the same tokens reversed, runs beside it
// in the same batches (distinct tokens per step, so the plan has many experts).
inline std::vector<float> run(const Model& m, const std::vector<int32_t>& toks, bool exact,
                              const std::string& routing = "topk") {
  ContextOptions co;
  co.routing = routing;
  co.n_ctx = 64;
  co.n_threads = 2;
  co.exact_activations = exact;
  Context ctx(m, co);
  const int32_t a = ctx.new_sequence(), b = ctx.new_sequence();
  const size_t half = toks.size() / 2;
  std::vector<BatchToken> batch;
  std::vector<float> out;
  auto collect = [&] {
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto l = ctx.logits(int(i));
      out.insert(out.end(), l.begin(), l.end());
    }
  };
  for (size_t i = 0; i < half; ++i) {
    batch.push_back({toks[i], a, int32_t(i), kTokenPrefill, true});
    batch.push_back({toks[toks.size() - 1 - i], b, int32_t(i), kTokenPrefill, true});
  }
  ctx.eval(batch);
  collect();
  for (size_t i = half; i < toks.size(); ++i) {
    batch.clear();
    batch.push_back({toks[i], a, int32_t(i), 0, true});
    batch.push_back({toks[toks.size() - 1 - i], b, int32_t(i), 0, true});
    ctx.eval(batch);
    collect();
  }
  return out;
}

inline bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace tier_test
}  // namespace lynx
