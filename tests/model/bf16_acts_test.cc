// The BF16 fast mode (ContextOptions::bf16_activations) on the BF16 and F16 golden fixtures of
// the NumPy reference (tests/reference): the logits stay within a BF16-sized NMSE of the exact
// goldens, the mode really changes the arithmetic where the machine has the BF16 kernel (else
// it is the exact path, bit for bit), and it leaves the other weight types alone. The NMSE
// per fixture is printed: docs/benchmarks.md quotes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/matmul_bf16.h"
#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx {
namespace {

const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

// Rounding every activation of every BF16/F16 product to 8 significant bits: a relative error
// of about 2^-9 per product input, through a few layers. Measured on the fixtures (AMX): mean
// NMSE 8e-6 to 5e-5 per fixture, at most 1.4e-4 at a position (printed by the test); 1e-3
// would be an arithmetic error, not rounding.
constexpr double kMaxNmseBf16 = 1e-3;

std::vector<float> prefill_logits(const Model& model, const std::vector<int32_t>& tokens, bool bf16,
                                  int threads) {
  ContextOptions co;
  co.n_threads = threads;
  co.n_ctx = 64;
  co.exact_activations = true;
  co.bf16_activations = bf16;
  Context ctx(model, co);
  const int32_t seq = ctx.new_sequence();
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.push_back({tokens[i], seq, int32_t(i), kTokenPrefill, true});
  }
  ctx.eval(batch);
  std::vector<float> out;
  for (int p = 0; p < ctx.n_logits(); ++p) {
    out.insert(out.end(), ctx.logits(p).begin(), ctx.logits(p).end());
  }
  return out;
}

TEST(Bf16Acts, GoldenFixturesStayCloseToTheReference) {
  std::ifstream f(kFixtures + "goldens.json");
  ASSERT_TRUE(f.good());
  const nlohmann::json j = nlohmann::json::parse(f);
  const bool kernel = kernels::has_bf16_path(
      gguf::TensorType::BF16, kernels::WeightLayout::kPanel16, kernels::best_bf16_kernel());
  int half_fixtures = 0, changed = 0;
  for (const auto& x : j["fixtures"]) {
    const std::string type = x["type"];
    const std::string name = x["name"];
    SCOPED_TRACE(name);
    const auto tokens = x["tokens"].get<std::vector<int32_t>>();
    const int V = x["n_vocab"];
    const auto want = testing_util::read_logits(kFixtures + x["logits_file"].get<std::string>(),
                                                tokens.size() * size_t(V));
    auto model = Model::load(kFixtures + x["file"].get<std::string>());
    const auto fast = prefill_logits(*model, tokens, true, 2);
    const auto exact = prefill_logits(*model, tokens, false, 2);
    const bool half = type == "bf16" || type == "f16";
    if (!half || !kernel) {  // no BF16 product: the exact path, bit for bit
      EXPECT_EQ(fast, exact);
      continue;
    }
    ++half_fixtures;
    double worst = 0, sum = 0;
    for (size_t p = 0; p < tokens.size(); ++p) {
      const std::span<const float> got(fast.data() + p * V, size_t(V));
      const std::span<const float> ref(want.data() + p * V, size_t(V));
      const double e = testing_util::nmse(got, ref);
      EXPECT_LE(e, kMaxNmseBf16) << "position " << p;
      worst = std::max(worst, e);
      sum += e;
    }
    changed += fast != exact;
    std::printf("[ bf16-acts ] %-16s logit NMSE vs reference: mean %.2e, max %.2e\n", name.c_str(),
                sum / double(tokens.size()), worst);
  }
  if (kernel) {
    EXPECT_GE(half_fixtures, 8);
    EXPECT_EQ(changed, half_fixtures) << "the fast mode left some BF16/F16 fixture exact";
  }
}

}  // namespace
}  // namespace lynx
