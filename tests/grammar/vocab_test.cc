// The token index over a real vocabulary (DeepSeek LLM's 102,400 tokens, byte-level BPE):
// the trie walk's mask equals the token-by-token check on states of a JSON output.
#include <gtest/gtest.h>

#include "lynx/gguf.h"
#include "lynx/grammar.h"
#include "lynx/tokenizer.h"

namespace lynx::grammar {
namespace {

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

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "n": {"type": "integer"}}, "required": ["name", "n"]})";

TEST(TokenIndexVocab, MaskEqualsTheTokenByTokenCheck) {
  // allows() (the lazy check) and the mask must agree on every token.
  const Vocab& v = vocab();
  const auto g = Grammar::parse(schema_to_gbnf(kSchema));
  Matcher m(g);
  std::vector<uint64_t> bits;
  StateId s = m.start();
  for (const std::string& part :
       {std::string(""), std::string("{\"name\": \"ab"), std::string("c\", \"n\": 1")}) {
    s = m.step(s, part);
    ASSERT_NE(s, kDead);
    v.index->mask(m, s, bits);
    int allowed = 0;
    for (int32_t id = 0; id < v.index->n_vocab(); ++id) {
      const bool bit = (bits[size_t(id) >> 6] >> (id & 63)) & 1;
      ASSERT_EQ(bit, v.index->allows(m, s, id))
          << "token " << id << " '" << v.index->piece(id) << "'";
      allowed += bit;
    }
    EXPECT_GT(allowed, 0);
  }
}

}  // namespace
}  // namespace lynx::grammar
