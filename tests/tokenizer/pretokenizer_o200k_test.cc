// gpt-oss's o200k pre-tokenizer (tokenizer.ggml.pre = "gpt-4o"; the regex of tiktoken's
// o200k_base / o200k_harmony), split by hand: case-aware words (camel case splits, a leading
// non-letter joins the word, contractions stay on it), digits in runs of at most three, a
// space before digits alone, newline runs.
#include <gtest/gtest.h>

#include "tokenizer/pretokenizer.h"

namespace lynx::tok {
namespace {

std::vector<std::string> words(std::string_view pre, std::string_view text) {
  std::vector<Span> spans;
  PreTokenizer::create(pre)->split(text, &spans);
  std::vector<std::string> out;
  for (const auto& [b, e] : spans) out.emplace_back(text.substr(b, e - b));
  return out;
}

TEST(PreTokenizerO200k, SplitsByHand) {
  using V = std::vector<std::string>;
  EXPECT_EQ(words("gpt-4o", "Hello world's 12345\n\nOK!!"),
            (V{"Hello", " world's", " ", "123", "45", "\n\n", "OK", "!!"}));
  EXPECT_EQ(words("gpt-4o", "HelloWorld"), (V{"Hello", "World"}));
  // llama3's regex keeps the camel-cased word whole: the two are told apart.
  EXPECT_EQ(words("llama3", "HelloWorld"), (V{"HelloWorld"}));
  // Punctuation takes the newlines after it; one non-letter joins the word it precedes.
  EXPECT_EQ(words("gpt-4o", "x!!\ny"), (V{"x", "!!\n", "y"}));
  EXPECT_EQ(words("gpt-4o", "a/b\n"), (V{"a", "/b", "\n"}));
}

}  // namespace
}  // namespace lynx::tok
