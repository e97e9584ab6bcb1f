// Opens the real llama.cpp vocab-only files (written by llama.cpp's Python gguf writer).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>

#include "lynx/gguf.h"

namespace lynx::gguf {
namespace {

std::string vocab(const std::string& name) {
  return std::string(LYNX_SHARED_DIR) + "/data/vocab/" + name;
}

struct VocabCase {
  const char* file;
  const char* arch;
  const char* model;  // tokenizer.ggml.model
  size_t n_tokens;
};

class RealVocab : public ::testing::TestWithParam<VocabCase> {};

TEST_P(RealVocab, OpensAndReadsTokenizer) {
  const VocabCase& c = GetParam();
  const std::string path = vocab(c.file);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const File f = File::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture"), c.arch);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), c.model);
  const auto& tokens = f.get_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.size(), c.n_tokens);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->elem_type, ValueType::STRING);
  EXPECT_FALSE(tokens.front().as_string().empty());
  if (const Value* types = f.find("tokenizer.ggml.token_type")) {
    EXPECT_EQ(types->as_array().size(), c.n_tokens);
  }
  EXPECT_GE(f.get_int("tokenizer.ggml.eos_token_id"), 0);
  EXPECT_TRUE(f.tensors().empty());  // vocab-only
}

INSTANTIATE_TEST_SUITE_P(
    Vocab, RealVocab,
    ::testing::Values(VocabCase{"ggml-vocab-gpt-2.gguf", "gpt2", "gpt2", 50257},
                      VocabCase{"ggml-vocab-llama-spm.gguf", "llama", "llama", 32000},
                      VocabCase{"ggml-vocab-deepseek-llm.gguf", "llama", "gpt2", 102400}),
    [](const auto& info) {
      std::string s = info.param.file;
      for (char& ch : s) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return s;
    });

}  // namespace
}  // namespace lynx::gguf
