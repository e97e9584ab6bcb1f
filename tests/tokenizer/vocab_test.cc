// The tokenizers against llama.cpp's reference outputs on real GGUF vocabularies
// (../shared/data/vocab: NAME.gguf, NAME.gguf.inp, NAME.gguf.out from llama.cpp's
// test-tokenizer-0). Inputs are separated by "\n__ggml_vocab_test__\n" exactly (so a test
// string keeps its own leading/trailing newlines); each output line is the ids, tokenized
// without BOS and without parsing special tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lynx/error.h"
#include "lynx/gguf.h"
#include "lynx/tokenizer.h"

namespace lynx {
namespace {

const std::string kVocabDir = std::string(LYNX_SHARED_DIR) + "/data/vocab";

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> read_cases(const std::string& name) {
  const std::string inp = read_all(kVocabDir + "/" + name + ".inp");
  const std::string outp = read_all(kVocabDir + "/" + name + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Case> cases;
  std::istringstream lines(outp);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i >= texts.size()) throw std::runtime_error(name + ": more outputs than inputs");
    Case c{texts[i++], {}};
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  if (i != texts.size()) throw std::runtime_error(name + ": fewer outputs than inputs");
  return cases;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

class VocabFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFixture, MatchesLlamaCppIdsAndRoundTrips) {
  const std::string name = GetParam();
  const std::string path = kVocabDir + "/" + name;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(file);
  const auto cases = read_cases(name);
  ASSERT_GT(cases.size(), 30u);
  for (const auto& c : cases) {
    const auto ids = tok->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, c.ids) << name << ": '" << c.text << "'\n got:      " << show(ids)
                          << "\n expected: " << show(c.ids);
    // Both tokenizers are lossless on valid UTF-8 text (byte fallback / byte-level BPE).
    EXPECT_EQ(tok->decode(ids), c.text) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, VocabFixture,
                         ::testing::Values("ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf",
                                           "ggml-vocab-deepseek-llm.gguf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

TEST(VocabMetadata, SpecialIdsAndFlags) {
  const std::string path = kVocabDir + "/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP();
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(file);
  EXPECT_EQ(tok->model(), "llama");
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
  EXPECT_TRUE(tok->add_bos());
  // BOS per metadata, and the control token text is parsed only when asked.
  const auto with_bos = tok->encode("Hello", true, false);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos[0], 1);
  const auto parsed = tok->encode("</s>", false, true);
  EXPECT_EQ(parsed, std::vector<int32_t>{2});
  const auto literal = tok->encode("</s>", false, false);
  EXPECT_NE(literal, std::vector<int32_t>{2});
  EXPECT_EQ(tok->decode(literal), "</s>");
  // Byte fallback pieces are the raw bytes.
  const int32_t b0a = tok->find_token("<0x0A>");
  ASSERT_GE(b0a, 0);
  EXPECT_EQ(tok->token_to_piece(b0a), "\n");
}

TEST(VocabMetadata, Gpt2SpecialTokens) {
  const std::string path = kVocabDir + "/ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP();
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(file);
  EXPECT_EQ(tok->model(), "gpt2");
  const int32_t eot = tok->find_token("<|endoftext|>");
  ASSERT_GE(eot, 0);
  EXPECT_TRUE(tok->is_eog(eot));
  EXPECT_EQ(tok->encode("a<|endoftext|>b", false, true),
            (std::vector<int32_t>{tok->find_token("a"), eot, tok->find_token("b")}));
  // Not parsed: the marker is ordinary text and never becomes the special id.
  const auto plain = tok->encode("a<|endoftext|>b", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(tok->decode(plain), "a<|endoftext|>b");
}

// A special id outside the vocabulary (issue 29): it used to be replaced by the default
// BOS, so another token was fed where the model expects its own. Refused at load, naming the
// key; an out-of-range padding id (nothing reads it) is dropped.
TEST(VocabMetadata, OutOfRangeSpecialIdsAreRefused) {
  const std::string path = kVocabDir + "/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP();
  const gguf::File src = gguf::File::open(path);
  const int64_t n = int64_t(src.get_array("tokenizer.ggml.tokens").size());
  auto with = [&](const std::string& key, const gguf::Value& v) {
    gguf::Writer w;
    for (const auto& kv : src.metadata()) {
      if (kv.key != "general.alignment") w.set(kv.key, kv.value);
    }
    w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));
    w.set(key, v);
    const std::string out = std::string(LYNX_BINARY_DIR) + "/vocab_bad_id.gguf";
    w.write(out);
    return gguf::File::open(out);
  };
  const std::vector<gguf::Value> bad = {gguf::Value::u32(uint32_t(n)),
                                        gguf::Value::u32(uint32_t(1) << 31),
                                        gguf::Value::u32(0xFFFFFFFFu), gguf::Value::i32(-1)};
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.eot_token_id"}) {
    for (const auto& v : bad) {
      SCOPED_TRACE(std::string(key));
      const gguf::File f = with(key, v);
      try {
        Tokenizer::from_gguf(f);
        ADD_FAILURE() << "an out-of-range id loaded";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::string(key).substr(15)), std::string::npos)
            << e.what();
      }
    }
  }
  // The last id is in range; an out-of-range padding id loads and is not used.
  EXPECT_EQ(
      Tokenizer::from_gguf(with("tokenizer.ggml.bos_token_id", gguf::Value::u32(uint32_t(n - 1))))
          ->bos(),
      int32_t(n - 1));
  EXPECT_NO_THROW(
      Tokenizer::from_gguf(with("tokenizer.ggml.padding_token_id", gguf::Value::u32(uint32_t(n)))));
}

}  // namespace
}  // namespace lynx
