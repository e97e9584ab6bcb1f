// Files written by llama.cpp's own quantizer (llama-quantize, Q4_K_M / Q6_K / IQ4_XS / Q5_0 of a
// tiny llama MoE; made by tests/reference/make_llamacpp_fixtures.py with a llama.cpp built
// beside the project, its commit in goldens.json) against the NumPy reference's float64 logits
// of the decoded weights: the engine reads llama.cpp's bytes, per-tensor type choices (Q6_K
// output, fallbacks where a super-block does not fit a row) and metadata as the reference does.
// Made with (2026-12-01, llama.cpp built beside the project by its own build, never by this one):
//   /usr/bin/python3 tests/reference/make_llamacpp_fixtures.py
//     --llama-quantize /work/peers/llama.cpp/build/bin/llama-quantize
//     --llama-cpp-version "source tree of 2025-02-20 without git metadata (...)"
// (one command line; no trailing backslashes here: a comment ending in one continues.)
// Every tensor of the four files is byte for byte what `lynx-moe quantize` writes for the same
// F32 source and mix (checked by hand when they were made; docs/models.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx {
namespace {

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/llamacpp/";

// golden_test.cc's bounds: exact activations hold every position to the F32 bound; the default
// path, which rounds activations to Q8_0 before products with the Q8_0 tensors llama-quantize
// writes (fallbacks), against the rounded reference within a rounding flip's effect.
constexpr double kMaxNmse = 1e-5;
constexpr double kMaxNmseActqFlip = 1e-3;

using testing_util::nmse;

std::vector<float> read_logits(const std::string& file, size_t n) {
  return testing_util::read_logits(kDir + file, n);
}

TEST(LlamaCppFixtures, EngineLogitsMatchTheReferenceOnLlamaQuantizeFiles) {
  std::ifstream mf(kDir + "goldens.json");
  ASSERT_TRUE(mf.good()) << "missing " << kDir << "goldens.json";
  const nlohmann::json m = nlohmann::json::parse(mf);
  std::set<std::string> mixes;
  for (const auto& x : m["fixtures"]) {
    const std::string name = x["name"];
    mixes.insert(x["mix"].get<std::string>());
    const auto tokens = x["tokens"].get<std::vector<int32_t>>();
    const size_t V = x["n_vocab"].get<size_t>();
    const auto argmax = x["argmax"].get<std::vector<int>>();
    const auto exact_want = read_logits(x["logits_file"], tokens.size() * V);
    const auto actq_want = read_logits(x["logits_actq_file"], tokens.size() * V);
    auto model = Model::load(kDir + x["file"].get<std::string>());
    for (bool exact : {true, false}) {
      SCOPED_TRACE(name + (exact ? ", exact activations" : ", default activations"));
      ContextOptions co;
      co.n_threads = 2;
      co.n_ctx = 64;
      co.exact_activations = exact;
      Context ctx(*model, co);
      const int32_t seq = ctx.new_sequence();
      std::vector<BatchToken> batch;
      for (size_t i = 0; i < tokens.size(); ++i) {
        batch.push_back({tokens[i], seq, int32_t(i), kTokenPrefill, true});
      }
      ctx.eval(batch);
      ASSERT_EQ(ctx.n_logits(), int(tokens.size()));
      const auto& want = exact ? exact_want : actq_want;
      for (size_t p = 0; p < tokens.size(); ++p) {
        const auto got = ctx.logits(int(p));
        const std::span<const float> w(want.data() + p * V, V);
        EXPECT_LE(nmse(got, w), exact ? kMaxNmse : kMaxNmseActqFlip) << "position " << p;
        if (exact) {
          EXPECT_EQ(int(std::max_element(got.begin(), got.end()) - got.begin()), argmax[p])
              << "position " << p;
        }
      }
    }
  }
  EXPECT_EQ(mixes, (std::set<std::string>{"Q4_K_M", "Q6_K", "IQ4_XS", "Q5_0"}));
}

}  // namespace
}  // namespace lynx
