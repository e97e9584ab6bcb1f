// The algorithms on small hand-made vocabularies, the error paths, and internal invariants
// (SPM's word-run splitting gives the same ids as one global merge).
#include <gtest/gtest.h>

#include <filesystem>

#include "lynx/gguf.h"
#include "lynx/tokenizer.h"
#include "tokenizer/impl.h"
#include "tokenizer/report.h"

namespace lynx {
namespace {

const std::string kVocabDir = std::string(LYNX_SHARED_DIR) + "/data/vocab";
const std::string kSp = "\xE2\x96\x81";  // U+2581

Vocab spm_vocab() {
  Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", kSp, "a", "b", "c", "ab", "bc", kSp + "a", kSp + "abc"};
  v.scores = {0, 0, 0, -1, -2, -2, -2, -5, -1, -3, -0.5f};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  v.types.resize(v.tokens.size(), TokenType::kNormal);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.scores.push_back(0);
    v.types.push_back(TokenType::kByte);
  }
  return v;
}

TEST(Spm, HighestScorePairMergesFirst) {
  auto tok = Tokenizer::from_vocab(spm_vocab());
  const auto id = [&](const std::string& t) { return tok->find_token(t); };
  // "▁abc": pairs ▁a(-3) ab(-5) bc(-1): bc first, then ▁a, then ▁a+bc = ▁abc (-0.5).
  EXPECT_EQ(tok->encode("abc", false, false), std::vector<int32_t>{id(kSp + "abc")});
  // "▁ab": ▁a (-3) beats ab (-5); b stays.
  EXPECT_EQ(tok->encode("ab", false, false), (std::vector<int32_t>{id(kSp + "a"), id("b")}));
  // Unknown characters fall back to their bytes; BOS per the model default.
  EXPECT_EQ(tok->encode("é", true, false),
            (std::vector<int32_t>{1, id(kSp), id("<0xC3>"), id("<0xA9>")}));
  EXPECT_EQ(tok->decode(tok->encode(" a  bé\n", false, false)), " a  bé\n");
  // After a special token the text gets the space prefix again.
  EXPECT_EQ(tok->encode("a</s>a", false, true),
            (std::vector<int32_t>{id(kSp + "a"), 2, id(kSp + "a")}));
}

Vocab bpe_vocab(std::vector<std::string> merges, std::vector<std::string> extra) {
  Vocab v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  tok::ByteMap bm;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(bm.byte_to_utf8[b]);
  for (auto& t : extra) v.tokens.push_back(t);
  v.tokens.push_back("<|endoftext|>");
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.types.back() = TokenType::kControl;
  v.merges = std::move(merges);
  v.bos = v.eos = static_cast<int32_t>(v.tokens.size()) - 1;
  return v;
}

TEST(Bpe, LowestRankMergesFirstOnBytes) {
  {
    auto tok = Tokenizer::from_vocab(bpe_vocab({"b c", "a b", "a bc"}, {"bc", "ab", "abc"}));
    EXPECT_EQ(tok->encode("abc", false, false), std::vector<int32_t>{tok->find_token("abc")});
  }
  {
    auto tok = Tokenizer::from_vocab(bpe_vocab({"a b", "b c"}, {"ab", "bc"}));
    EXPECT_EQ(tok->encode("abc", false, false),
              (std::vector<int32_t>{tok->find_token("ab"), tok->find_token("c")}));
    // Words are merged separately: " abc" is "Ġ" + "abc" under the GPT-2 regex.
    const auto ids = tok->encode("abc abc", false, false);
    EXPECT_EQ(ids.size(), 5u);
    EXPECT_EQ(tok->decode(ids), "abc abc");
    // Every byte has a token, so any byte string round-trips.
    const std::string bytes("\x00\xff\xc3(\xe2\x82 \n\t", 10);
    EXPECT_EQ(tok->decode(tok->encode(bytes, false, false)), bytes);
    EXPECT_EQ(tok->token_to_piece(tok->find_token("\xC4\xA0")), " ");  // Ġ is the space byte
    // BPE default: no BOS.
    EXPECT_FALSE(tok->add_bos());
    EXPECT_EQ(tok->encode("a", true, false), std::vector<int32_t>{tok->find_token("a")});
  }
}

TEST(Special, LongestFirstNeverSplitAndStrip) {
  Vocab v = bpe_vocab({}, {"<|im_start|>", "<|im_start|>x", "<tool>"});
  const auto n = v.tokens.size();
  v.types[n - 4] = TokenType::kControl;      // <|im_start|>
  v.types[n - 3] = TokenType::kControl;      // <|im_start|>x (longer: wins)
  v.types[n - 2] = TokenType::kUserDefined;  // <tool>: always parsed
  auto tok = Tokenizer::from_vocab(v);
  const int32_t start = tok->find_token("<|im_start|>"), startx = tok->find_token("<|im_start|>x");
  const int32_t tool = tok->find_token("<tool>");
  EXPECT_EQ(tok->encode("<|im_start|>x<|im_start|>", false, true),
            (std::vector<int32_t>{startx, start}));
  // Not parsed: control text is plain text, user-defined still cut out.
  const auto ids = tok->encode("<|im_start|><tool>", false, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 0);
  EXPECT_EQ(ids.back(), tool);
  EXPECT_TRUE(tok->is_eog(tok->find_token("<|endoftext|>")));

  // Phi-3 style: whitespace after a special token is dropped.
  Vocab p = spm_vocab();
  p.tokens.push_back("<|user|>");
  p.scores.push_back(0);
  p.types.push_back(TokenType::kControl);
  p.rstrip_after_special = true;
  auto phi = Tokenizer::from_vocab(p);
  const int32_t user = phi->find_token("<|user|>");
  EXPECT_EQ(phi->encode("<|user|>\n a", false, true),
            (std::vector<int32_t>{user, phi->find_token(kSp + "a")}));
}

TEST(Errors, UnknownModelPreAndBadVocab) {
  Vocab v = spm_vocab();
  v.model = "t5";
  try {
    Tokenizer::from_vocab(v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'t5'"), std::string::npos);
  }
  Vocab b = bpe_vocab({}, {});
  b.pre = "my-new-pre";
  try {
    Tokenizer::from_vocab(b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'my-new-pre'"), std::string::npos);
  }
  Vocab d = bpe_vocab({}, {"a"});  // "a" is already a byte token
  EXPECT_THROW(Tokenizer::from_vocab(d), Error);
  Vocab nb = bpe_vocab({}, {});
  nb.bos.reset();
  nb.pre = "glm4";  // a family without BOS
  nb.add_bos = true;
  EXPECT_THROW(Tokenizer::from_vocab(nb), Error);
  auto ok = Tokenizer::from_vocab(bpe_vocab({}, {}));
  EXPECT_THROW(ok->token_to_piece(-1), Error);
  EXPECT_THROW(ok->token_to_piece(ok->n_vocab()), Error);
}

TEST(Report, ListingLikeLlamaTokenize) {
  auto tok = Tokenizer::from_vocab(bpe_vocab({}, {}));
  const std::vector<int32_t> ids = {tok->find_token("h"), tok->find_token("\xC4\xA0")};
  EXPECT_EQ(tok::describe_tokens(*tok, ids, true),
            "[" + std::to_string(ids[0]) + ", " + std::to_string(ids[1]) + "]\n");
  EXPECT_EQ(tok::describe_tokens(*tok, ids, false), "   104 -> 'h'\n    32 -> ' '\n");
  const std::string text = tok::mixed_text(5000, 7);
  EXPECT_LE(text.size(), 5000u);
  EXPECT_GE(text.size(), 4996u);
}

// The SPM tokenizer merges word runs separately where no token spans the boundary; the ids
// must equal one global merge over the whole text.
TEST(Spm, WordRunSplittingMatchesGlobalMerge) {
  const std::string path = kVocabDir + "/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP();
  auto f = gguf::File::open(path);
  tok::TokenMap map;
  const auto& toks = f.get_array("tokenizer.ggml.tokens");
  std::vector<float> scores;
  for (size_t i = 0; i < toks.size(); ++i) map.emplace(toks[i].as_string(), int32_t(i));
  for (const auto& s : f.get_array("tokenizer.ggml.scores")) scores.push_back(float(s.as_float()));
  std::array<int32_t, 256> bytes{};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    bytes[b] = map.at(buf);
  }
  std::array<bool, 256> never_cut;
  never_cut.fill(true);
  std::array<bool, 256> computed{};
  for (const auto& [t, id] : map) {
    for (size_t k = t.find(kSp, 1); k != std::string::npos; k = t.find(kSp, k + 1)) {
      computed[static_cast<uint8_t>(t[k - 1])] = true;
    }
  }
  std::string text = " " + tok::mixed_text(60000, 3);
  std::string esc;
  for (char c : text) esc += c == ' ' ? kSp : std::string(1, c);
  std::vector<int32_t> global, split;
  tok::spm_encode({&map, &scores, &bytes, 0, &never_cut}, esc, &global);
  tok::spm_encode({&map, &scores, &bytes, 0, &computed}, esc, &split);
  EXPECT_EQ(global, split);
  EXPECT_GT(global.size(), 10000u);
}

}  // namespace
}  // namespace lynx
