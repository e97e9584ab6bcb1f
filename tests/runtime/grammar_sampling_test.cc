// Masked sampling over a real vocabulary (DeepSeek LLM's 102,400 tokens, byte-level BPE):
// random logits, the grammar of a schema as the sampler's constraint; whatever is drawn,
// an output that ends with the end-of-generation token parses and validates.
#include <gtest/gtest.h>

#include <random>

#include "../grammar/json_check.h"
#include "lynx/gguf.h"
#include "lynx/grammar.h"
#include "lynx/sampler.h"
#include "lynx/tokenizer.h"

namespace lynx::grammar {
namespace {

using test::json;

struct Vocab {
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const TokenIndex> index;
};

const Vocab& vocab() {
  static const Vocab v = [] {
    Vocab r;
    r.tok = Tokenizer::from_gguf(gguf::File::open(std::string(LYNX_SHARED_DIR) +
                                                  "/data/vocab/ggml-vocab-deepseek-llm.gguf"));
    std::vector<std::string> pieces(size_t(r.tok->n_vocab()));
    std::vector<bool> eog(pieces.size());
    for (int32_t id = 0; id < r.tok->n_vocab(); ++id) {
      eog[size_t(id)] = r.tok->is_eog(id);
      if (!r.tok->is_control(id)) pieces[size_t(id)] = r.tok->token_to_piece(id);
    }
    r.index = std::make_shared<TokenIndex>(std::move(pieces), std::move(eog));
    return r;
  }();
  return v;
}

// Generates with random logits (closing characters and the end token raised, so that the
// walk ends); returns the text, or "" when max_tokens ran out.
std::string run(const std::shared_ptr<const Grammar>& g, SamplingParams p, unsigned seed,
                int max_tokens = 600) {
  const Vocab& v = vocab();
  Constraint c(g, v.index);
  Sampler sampler(p);
  // A few random vectors drawn once (a draw over the whole vocabulary per step would cost
  // more than the test), mixed per step, plus the raise of closing characters and the end.
  static const std::vector<std::vector<float>> noise = [&] {
    std::mt19937 g(5);
    std::normal_distribution<float> normal(0.f, 2.f);
    std::vector<std::vector<float>> n(8, std::vector<float>(size_t(v.tok->n_vocab())));
    for (auto& x : n) {
      for (float& y : x) y = normal(g);
    }
    return n;
  }();
  static const std::vector<float> raise = [&] {
    std::vector<float> r(size_t(v.tok->n_vocab()));
    for (size_t i = 0; i < r.size(); ++i) {
      const std::string& piece = v.index->piece(int32_t(i));
      if (piece.find_first_of("\"]}") != std::string::npos) r[i] += 4.f;
      if (v.index->is_eog(int32_t(i))) r[i] += 20.f;
    }
    return r;
  }();
  std::mt19937 rng(seed);
  std::vector<float> logits(size_t(v.tok->n_vocab()));
  std::vector<int32_t> out;
  for (int n = 0; n < max_tokens; ++n) {
    const auto& a = noise[rng() % noise.size()];
    const auto& b = noise[rng() % noise.size()];
    const size_t shift = rng() % logits.size();
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = a[i] + b[(i + shift) % logits.size()] + raise[i];
    }
    const int32_t t = sampler.sample(logits, &c);
    EXPECT_GE(t, 0);
    if (t < 0) return "";
    if (v.index->is_eog(t)) {
      EXPECT_TRUE(c.accepting());
      std::string pieces;
      for (int32_t id : out) pieces += v.index->piece(id);
      EXPECT_EQ(pieces, v.tok->decode(out));
      for (int32_t id : out) {
        if (v.index->piece(id) != v.tok->decode(std::vector<int32_t>{id}))
          ADD_FAILURE() << id << " [" << v.index->piece(id) << "] ["
                        << v.tok->decode(std::vector<int32_t>{id}) << "]";
      }
      return pieces;
    }
    out.push_back(t);
  }
  return "";
}

void expect_valid(const std::string& schema_text, SamplingParams p, int runs, int min_ended) {
  const json schema = json::parse(schema_text);
  const auto g = Grammar::parse(schema_to_gbnf(schema_text));
  int ended = 0;
  for (int r = 0; r < runs; ++r) {
    p.seed = uint64_t(r);
    const std::string text = run(g, p, unsigned(r + 1));
    if (text.empty()) continue;
    ++ended;
    json v;
    try {
      v = json::parse(text);
    } catch (const std::exception& e) {
      std::string hex;
      for (unsigned char ch : text) {
        char b[4];
        snprintf(b, 4, "%02x ", ch);
        hex += b;
      }
      ADD_FAILURE() << "does not parse: " << hex;
      continue;
    }
    EXPECT_EQ(test::check(v, schema, schema), "") << text;
  }
  EXPECT_GE(ended, min_ended);
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "n": {"type": "integer"},
    "xs": {"type": "array", "items": {"type": "number"}, "maxItems": 3},
    "kind": {"enum": ["a", "b"]},
    "more": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}},
  "required": ["name", "n", "xs", "kind", "more"]})";

TEST(GrammarSampling, TemperatureDrawsOverARealVocabValidate) {
  SamplingParams p;
  p.temperature = 1.f;  // no filter: the lazy check runs
  expect_valid(kSchema, p, 6, 5);
}

TEST(GrammarSampling, GreedyAndFiltersValidate) {
  SamplingParams greedy;
  expect_valid(kSchema, greedy, 3, 3);
  SamplingParams filtered;
  filtered.temperature = 0.8f;
  filtered.top_k = 40;
  filtered.top_p = 0.95f;
  filtered.min_p = 0.01f;
  expect_valid(kSchema, filtered, 3, 3);
}

TEST(GrammarSampling, JsonObjectOutputParses) {
  const auto g = Grammar::parse(json_object_gbnf());
  SamplingParams p;
  p.temperature = 1.f;
  int ended = 0;
  for (unsigned r = 0; r < 4; ++r) {
    const std::string text = run(g, p, r + 10);
    if (text.empty()) continue;
    ++ended;
    EXPECT_TRUE(json::accept(text)) << text;
    EXPECT_TRUE(json::parse(text).is_object()) << text;
  }
  EXPECT_GE(ended, 2);
}

}  // namespace
}  // namespace lynx::grammar
