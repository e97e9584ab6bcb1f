// The engine against the independent NumPy reference (tests/reference): tiny random-weight
// models of every architecture and weight type, golden logits at every position.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx {
namespace {

const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

struct Fixture {
  std::string name, file, type, arch;
  std::vector<int32_t> tokens;
  int n_vocab = 0;
  std::vector<float> logits;  // [n_tokens x n_vocab]
};

std::vector<Fixture> load_fixtures() {
  std::ifstream f(kFixtures + "goldens.json");
  EXPECT_TRUE(f.good()) << "missing " << kFixtures << "goldens.json";
  nlohmann::json j = nlohmann::json::parse(f);
  std::vector<Fixture> out;
  for (const auto& x : j["fixtures"]) {
    Fixture fx;
    fx.name = x["name"];
    fx.file = kFixtures + x["file"].get<std::string>();
    fx.type = x["type"];
    fx.arch = x["arch"];
    fx.tokens = x["tokens"].get<std::vector<int32_t>>();
    fx.n_vocab = x["n_vocab"];
    std::ifstream lf(kFixtures + x["logits_file"].get<std::string>(), std::ios::binary);
    fx.logits.resize(fx.tokens.size() * size_t(fx.n_vocab));
    lf.read(reinterpret_cast<char*>(fx.logits.data()), std::streamsize(fx.logits.size() * 4));
    EXPECT_TRUE(lf.good()) << fx.name;
    out.push_back(std::move(fx));
  }
  return out;
}

// Normalized MSE: sum (a-b)^2 / sum b^2, the measure test-backend-ops uses.
double nmse(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? num / den : num;
}

// The reference computes from the same quantized bits (dequantized exactly), so every type
// is held to the F32 bound; the only differences are float32 vs float64 accumulation.
constexpr double kMaxNmse = 1e-5;

TEST(Golden, FixturesCoverEveryArchitectureAndType) {
  auto fx = load_fixtures();
  std::set<std::string> archs, types;
  for (const auto& f : fx) {
    archs.insert(f.arch);
    types.insert(f.type);
  }
  for (const char* a : {"llama", "qwen2moe", "qwen3moe", "olmoe"}) EXPECT_TRUE(archs.count(a)) << a;
  for (const char* t : {"f32", "f16", "bf16", "q8_0", "q4_0"}) EXPECT_TRUE(types.count(t)) << t;
}

TEST(Golden, PrefillMatchesReferenceAtEveryPosition) {
  for (const Fixture& fx : load_fixtures()) {
    SCOPED_TRACE(fx.name);
    auto model = Model::load(fx.file);
    ASSERT_EQ(model->config().n_vocab, fx.n_vocab);
    ContextOptions co;
    co.n_threads = 2;
    co.n_ctx = 64;
    Context ctx(*model, co);
    const int32_t seq = ctx.new_sequence();
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < fx.tokens.size(); ++i) {
      batch.push_back({fx.tokens[i], seq, int32_t(i), kTokenPrefill, true});
    }
    ctx.eval(batch);
    ASSERT_EQ(ctx.n_logits(), int(fx.tokens.size()));
    for (size_t p = 0; p < fx.tokens.size(); ++p) {
      std::span<const float> want(fx.logits.data() + p * size_t(fx.n_vocab), size_t(fx.n_vocab));
      EXPECT_LE(nmse(ctx.logits(int(p)), want), kMaxNmse) << "position " << p;
    }
  }
}

TEST(Golden, TokenByTokenDecodeMatchesReference) {
  for (const Fixture& fx : load_fixtures()) {
    SCOPED_TRACE(fx.name);
    auto model = Model::load(fx.file);
    ContextOptions co;
    co.n_threads = 1;
    co.n_ctx = 64;
    Context ctx(*model, co);
    const int32_t seq = ctx.new_sequence();
    for (size_t p = 0; p < fx.tokens.size(); ++p) {
      BatchToken t{fx.tokens[p], seq, int32_t(p), kTokenDecode, true};
      ctx.eval({&t, 1});
      std::span<const float> want(fx.logits.data() + p * size_t(fx.n_vocab), size_t(fx.n_vocab));
      EXPECT_LE(nmse(ctx.logits(0), want), kMaxNmse) << "position " << p;
    }
  }
}

// With exact routing a sequence's logits do not depend on which other sequences share its
// batch (F32 model: max abs difference <= 1e-4).
TEST(Golden, BatchInvariance) {
  for (const Fixture& fx : load_fixtures()) {
    if (fx.type != "f32") continue;
    SCOPED_TRACE(fx.name);
    auto model = Model::load(fx.file);
    ContextOptions co;
    co.n_threads = 2;
    co.n_ctx = 64;
    Context ctx(*model, co);
    // Alone, token by token.
    std::vector<std::vector<float>> alone;
    {
      const int32_t s = ctx.new_sequence();
      for (size_t p = 0; p < fx.tokens.size(); ++p) {
        BatchToken t{fx.tokens[p], s, int32_t(p), kTokenDecode, true};
        ctx.eval({&t, 1});
        alone.emplace_back(ctx.logits(0).begin(), ctx.logits(0).end());
      }
      ctx.free_sequence(s);
    }
    // Together with 5 other sequences (other tokens, some in prefill) every step.
    const int32_t s = ctx.new_sequence();
    std::vector<int32_t> others;
    for (int i = 0; i < 5; ++i) others.push_back(ctx.new_sequence());
    for (size_t p = 0; p < fx.tokens.size(); ++p) {
      std::vector<BatchToken> batch;
      for (size_t o = 0; o < others.size(); ++o) {
        const int n = o % 2 ? 2 : 1;  // odd sequences feed two tokens (a prefill chunk)
        for (int j = 0; j < n; ++j) {
          const int32_t pos = ctx.sequence_length(others[o]) + j;
          batch.push_back({int32_t((p * 7 + o * 13 + j) % fx.n_vocab), others[o], pos,
                           uint8_t(n > 1 ? kTokenPrefill : kTokenDecode), false});
        }
      }
      batch.insert(batch.begin() + 3, BatchToken{fx.tokens[p], s, int32_t(p), kTokenDecode, true});
      ctx.eval(batch);
      ASSERT_EQ(ctx.n_logits(), 1);
      double maxdiff = 0;
      for (int v = 0; v < fx.n_vocab; ++v) {
        maxdiff =
            std::max(maxdiff, double(std::fabs(ctx.logits(0)[size_t(v)] - alone[p][size_t(v)])));
      }
      EXPECT_LE(maxdiff, 1e-4) << "position " << p;
    }
  }
}

// Lynx with one decode token per step is exact top-k: same logits as topk.
TEST(Golden, LynxAtBatchOneEqualsTopk) {
  for (const Fixture& fx : load_fixtures()) {
    if (fx.type != "f32") continue;
    SCOPED_TRACE(fx.name);
    auto model = Model::load(fx.file);
    if (!model->config().is_moe()) continue;
    ContextOptions co;
    co.n_threads = 1;
    co.n_ctx = 64;
    co.routing = "lynx";
    Context ctx(*model, co);
    const int32_t seq = ctx.new_sequence();
    for (size_t p = 0; p < fx.tokens.size(); ++p) {
      BatchToken t{fx.tokens[p], seq, int32_t(p), kTokenDecode, true};
      ctx.eval({&t, 1});
      std::span<const float> want(fx.logits.data() + p * size_t(fx.n_vocab), size_t(fx.n_vocab));
      EXPECT_LE(nmse(ctx.logits(0), want), kMaxNmse) << "position " << p;
    }
  }
}

}  // namespace
}  // namespace lynx
