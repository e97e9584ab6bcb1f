// trace_topk_uses (src/analysis/trace_uses.h): the exact top-k counts the expert tier pins
// from (--expert-pin), the trace's layers mapped onto the model's as a replay maps them, and
// a trace that does not fit the model, or is missing or corrupt, refused with a message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "analysis/trace.h"
#include "analysis/trace_uses.h"
#include "lynx/error.h"

namespace lynx {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("lynx_uses_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// n_layer layers, layer 0 dense, the others routed over n experts, k per token.
ModelConfig model_of(int n_layer, int n, int k) {
  ModelConfig c;
  c.n_layer = n_layer;
  c.n_expert = n;
  c.n_expert_used = k;
  c.layer_kinds.resize(size_t(n_layer));
  for (int il = 1; il < n_layer; ++il) c.layer_kinds[size_t(il)].ffn = FfnKind::kMoe;
  return c;
}

std::string error_of(const std::string& path, const ModelConfig& c) {
  try {
    analysis::trace_topk_uses(path, c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Two trace layers over 4 experts, k = 2: trace layer 0 picks {3, 1} then {3, 0}, layer 1 a
// tie among all (the lower ids win).
void write_trace(const std::string& path, int n_expert) {
  analysis::TraceHeader h;
  h.n_layers = 2;
  h.n_expert = n_expert;
  h.n_expert_used = 2;
  analysis::TraceWriter w(path, h);
  std::vector<float> z0 = {0.f, 1.f, -1.f, 2.f, 0.5f, -3.f, -2.f, 4.f};
  z0.resize(size_t(2 * n_expert), -5.f);
  if (n_expert != 4) z0.assign(size_t(2 * n_expert), 0.f);
  const std::vector<float> z1(size_t(n_expert), 0.25f);
  w.write(0, 0, 2, nullptr, z0.data());
  w.write(0, 1, 1, nullptr, z1.data());
}

TEST(TraceUses, CountsExactTopKPerLayer) {
  const std::string path = temp_path("uses.lxrt");
  write_trace(path, 4);
  // Model layers 1, 2, 3 routed: they read trace layers 1, 0, 1.
  const auto u = analysis::trace_topk_uses(path, model_of(4, 4, 2));
  ASSERT_EQ(u.size(), 4u);
  EXPECT_TRUE(u[0].empty());  // dense
  EXPECT_EQ(u[1], (std::vector<uint32_t>{1, 1, 0, 0}));
  EXPECT_EQ(u[2], (std::vector<uint32_t>{1, 1, 0, 2}));
  EXPECT_EQ(u[3], u[1]);
  fs::remove(path);
}

TEST(TraceUses, RefusesATraceThatDoesNotFit) {
  const std::string path = temp_path("other.lxrt");
  write_trace(path, 8);
  const std::string wrong = error_of(path, model_of(4, 4, 2));
  EXPECT_NE(wrong.find("records 8 experts per layer, the model has 4"), std::string::npos) << wrong;
  // Missing.
  const std::string missing = error_of(temp_path("missing.lxrt"), model_of(4, 8, 2));
  EXPECT_NE(missing.find("cannot open routing trace"), std::string::npos) << missing;
  // Corrupt: cut inside its first record.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  in.close();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), 50);
  }
  const std::string cut = error_of(path, model_of(4, 8, 2));
  EXPECT_NE(cut.find(path), std::string::npos) << cut;
  // A header and no record: nothing to count.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), 28);
  }
  const std::string empty = error_of(path, model_of(4, 8, 2));
  EXPECT_NE(empty.find("holds no token"), std::string::npos) << empty;
  fs::remove(path);
}

}  // namespace
}  // namespace lynx
