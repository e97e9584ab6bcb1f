// TokenIndex::mask (the run-length groups plus a pruned trie walk, src/grammar/mask.cc)
// against its scalar twin mask_walk (one walk of the whole trie) and the token-by-token check
// allows(), bit for bit, at every state of random outputs: the schema and json_object of
// bench_grammar, the schemas of the other grammar tests, random schemas, and GBNF grammars
// where the state is not uniform over the class or the run outlives kMaxRun. The vocabulary
// is DeepSeek LLM's plus tokens made to sit on the edges (runs of kMaxRun +- 1 code points,
// incomplete, overlong and surrogate UTF-8, escapes, quotes) and merged pieces as in
// bench_grammar.
#include <gtest/gtest.h>

#include <random>

#include "lynx/gguf.h"
#include "lynx/grammar.h"
#include "lynx/tokenizer.h"

namespace lynx::grammar {
namespace {

std::shared_ptr<const TokenIndex> test_index() {
  static const std::shared_ptr<const TokenIndex> index = [] {
    auto tok = Tokenizer::from_gguf(gguf::File::open(std::string(LYNX_SHARED_DIR) +
                                                     "/data/vocab/ggml-vocab-deepseek-llm.gguf"));
    std::vector<std::string> pieces;
    std::vector<bool> eog;
    for (int32_t id = 0; id < tok->n_vocab(); ++id) {
      eog.push_back(tok->is_eog(id));
      pieces.push_back(tok->is_control(id) ? "" : tok->token_to_piece(id));
    }
    const size_t base = pieces.size();
    const int r = TokenIndex::kMaxRun;
    for (int n : {r - 1, r, r + 1, 2 * r}) {
      pieces.push_back(std::string(size_t(n), 'a'));
      pieces.push_back(std::string(size_t(n), ' '));
      std::string e;
      for (int k = 0; k < n; ++k) e += "\xC3\xA9";  // U+00E9
      pieces.push_back(e);
      pieces.push_back(std::string(size_t(n - 1), 'b') + "\"");
      pieces.push_back(std::string(size_t(n - 1), 'c') + "\xE4\xBD");
    }
    for (const char* p : {"\xE4\xBD",
                          "ab\xE4",
                          "\xBD\xA0",
                          "\xC0\x80",
                          "\xED\xA0\x80",
                          "\xF4\x90\x80\x80",
                          "\xF0\x9F\x98\x80",
                          "\\n",
                          "\\u00e9",
                          "\\uD83D",
                          "\\uDE00",
                          "\",",
                          "x\"",
                          "\"}",
                          "\n  ",
                          "\t",
                          "\x7F",
                          "-1",
                          "1.5e",
                          "true,",
                          "null}",
                          "}\n"}) {
      pieces.push_back(p);
    }
    // Merged pieces, as bench_grammar grows a vocabulary (BPE merges are concatenations).
    std::mt19937 rng(11);
    for (int k = 0; k < 20000; ++k) pieces.push_back(pieces[rng() % base] + pieces[rng() % base]);
    eog.resize(pieces.size(), false);
    return std::make_shared<TokenIndex>(std::move(pieces), std::move(eog));
  }();
  return index;
}

bool bit(const std::vector<uint64_t>& bits, int32_t id) {
  return (bits[size_t(id) >> 6] >> (id & 63)) & 1;
}

// Random outputs of `gbnf`: at each state the three computations agree; the next token is
// drawn from the mask (end-of-generation tokens too, which restart the output).
void expect_masks_agree(const std::string& gbnf, int outputs, int steps, uint32_t seed) {
  SCOPED_TRACE(gbnf.substr(0, 200));
  const auto index = test_index();
  // The whole-trie walk makes a state for every partial character and run length it meets
  // (the merged pieces are long): more than a matcher is allowed by default.
  Limits limits;
  limits.max_states = 1 << 16;
  const auto g = Grammar::parse(gbnf, "root", limits);
  std::mt19937 rng(seed);
  std::vector<uint64_t> a, b;
  int checked = 0;
  for (int o = 0; o < outputs; ++o) {
    Matcher fast(g), twin(g);
    StateId s = fast.start(), t = twin.start();
    for (int step = 0; step < steps; ++step) {
      index->mask(fast, s, a);
      index->mask_walk(twin, t, b);
      ASSERT_EQ(a, b) << "output " << o << " step " << step;
      if (step % 4 == 0) {  // the token-by-token check costs a pass over the vocabulary
        for (int32_t id = 0; id < index->n_vocab(); ++id) {
          ASSERT_EQ(bit(a, id), index->allows(fast, s, id))
              << "token " << id << " '" << index->piece(id) << "' output " << o << " step " << step;
        }
      }
      ++checked;
      std::vector<int32_t> ids;
      for (int32_t id = 0; id < index->n_vocab(); ++id) {
        if (bit(a, id)) ids.push_back(id);
      }
      if (ids.empty()) break;
      const int32_t id = ids[rng() % ids.size()];
      if (index->is_eog(id)) break;
      s = fast.step(s, index->piece(id));
      t = twin.step(t, index->piece(id));
      ASSERT_NE(s, kDead);
    }
  }
  EXPECT_GT(checked, outputs);
}

TEST(TokenMask, BenchGrammarSchemaAndJsonObject) {
  const char* schema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    "kind": {"enum": ["person", "robot", "other"]},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "maxLength": 8}}, "required": ["city"]}},
  "required": ["name", "age", "tags", "kind", "address"]})";
  expect_masks_agree(schema_to_gbnf(schema), 4, 40, 1);
  expect_masks_agree(json_object_gbnf(), 4, 40, 2);
}

TEST(TokenMask, SchemasOfTheGrammarTests) {
  for (const char* schema : {
           R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
               "n": {"type": "integer"}}, "required": ["name", "n"]})",
           R"({"type": "object", "properties": {"s": {"type": "string", "minLength": 3,
               "maxLength": 5}, "b": {"type": "boolean"}, "x": {"type": "number"}},
               "required": ["s"]})",
           R"({"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 1,
               "maxItems": 3})",
           R"({"enum": ["a", "ab", "abc", "\u00e9t\u00e9", "x\"y"]})",
       }) {
    expect_masks_agree(schema_to_gbnf(schema), 3, 30, 3);
  }
}

// A random schema: objects, arrays, strings with random bounds, enums, numbers.
std::string random_schema(std::mt19937& rng, int depth) {
  const int kind = int(rng() % (depth >= 2 ? 4 : 6));
  auto str = [&] {
    std::string s = R"({"type": "string")";
    const int lo = int(rng() % 4), hi = lo + int(rng() % 45);
    if (rng() % 2) s += ", \"minLength\": " + std::to_string(lo);
    if (rng() % 4) s += ", \"maxLength\": " + std::to_string(hi);
    return s + "}";
  };
  switch (kind) {
    case 0:
    case 1:
      return str();
    case 2:
      return R"({"type": "integer"})";
    case 3:
      return R"({"enum": ["red", "green", "r\u00f6d", "x y"]})";
    case 4: {
      std::string s = R"({"type": "object", "properties": {)";
      const int n = 1 + int(rng() % 3);
      std::string req;
      for (int k = 0; k < n; ++k) {
        s += (k ? ", \"p" : "\"p") + std::to_string(k) + "\": " + random_schema(rng, depth + 1);
        req += (k ? ", \"p" : "\"p") + std::to_string(k) + "\"";
      }
      return s + "}, \"required\": [" + req + "]}";
    }
    default:
      return R"({"type": "array", "items": )" + random_schema(rng, depth + 1) +
             ", \"maxItems\": " + std::to_string(1 + rng() % 4) + "}";
  }
}

TEST(TokenMask, RandomSchemas) {
  std::mt19937 rng(5);
  for (int k = 0; k < 8; ++k) {
    const std::string schema = random_schema(rng, 0);
    SCOPED_TRACE(schema);
    expect_masks_agree(schema_to_gbnf(schema), 2, 30, uint32_t(100 + k));
  }
}

TEST(TokenMask, GrammarsWhereTheRunShortcutMustStepAside) {
  for (const char* gbnf : {
           // Not uniform: "a" takes part of [a-z] only.
           R"(root ::= [a-z]{0,5} "abc")",
           // A run longer than kMaxRun; and one with a lower bound.
           R"(root ::= "x" [^"]{2,40} "y")",
           R"(root ::= [^"\\]{34,36} "\"")",
           // Uniform over [^a] ("a" is disjoint), unbounded.
           R"(root ::= ( [^a]{0,3} "a" )*)",
           // Two large classes that overlap in part.
           R"(root ::= [\u0100-\uFFFF]{0,4} | .{0,2} [a-z])",
           R"(root ::= "\"" ( [^"\\] | "\\" . ){0,30} "\"")",
           // Uniformity lost along the run: the class narrows after three characters.
           R"(root ::= [^"]{3} ( [a-z]* | [^"]* "\"" ))",
       }) {
    expect_masks_agree(gbnf, 3, 30, 7);
  }
}

TEST(TokenMask, CharSetAlgebraEqualsCodePointByCodePoint) {
  std::mt19937 rng(9);
  auto random_set = [&] {
    CharSet c;
    uint32_t at = rng() % 40;
    const int n = int(rng() % 4);
    for (int k = 0; k < n; ++k) {
      const uint32_t lo = at + rng() % 20, hi = lo + rng() % 20;
      c.ranges.push_back({lo, hi});
      at = hi + 2;
    }
    c.negated = rng() % 2;
    return c;
  };
  for (int k = 0; k < 2000; ++k) {
    const CharSet a = random_set(), b = random_set();
    bool all = true, none = true;
    for (uint32_t cp = 0; cp < 200; ++cp) {
      if (!b.matches(cp)) continue;
      all = all && a.matches(cp);
      none = none && !a.matches(cp);
    }
    // Past 200 every set is constant: its negation flag decides.
    if (b.negated) {
      all = all && a.negated;
      none = none && !a.negated;
    }
    ASSERT_EQ(a.contains(b), all) << k;
    ASSERT_EQ(a.disjoint(b), none) << k;
    for (const auto& [lo, hi] : a.positive()) {
      ASSERT_LE(lo, hi);
      ASSERT_TRUE(a.matches(lo) && a.matches(hi));
    }
  }
}

}  // namespace
}  // namespace lynx::grammar
