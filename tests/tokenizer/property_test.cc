// Property tests on the real vocabularies: random Unicode and byte strings (invalid UTF-8,
// long whitespace runs, emoji, CJK, combining marks) never throw or crash, round-trip through
// decode, and stream-decode to valid UTF-8 that matches decode.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "lynx/gguf.h"
#include "lynx/tokenizer.h"
#include "tokenizer/unicode.h"

namespace lynx {
namespace {

const std::string kVocabDir = std::string(LYNX_SHARED_DIR) + "/data/vocab";

void append_cp(std::string& s, uint32_t cp) {
  tok::utf8_append(s, cp);
}

// A random string mixing the hard cases. `allow_invalid` adds bytes that are not UTF-8.
std::string random_text(std::mt19937& rng, size_t max_pieces, bool allow_invalid,
                        bool allow_u2581) {
  static const uint32_t kEmoji[] = {0x1F600, 0x1F680, 0x1F999, 0x2705, 0x1F32B, 0xFE0F, 0x200D};
  static const uint32_t kMarks[] = {0x0301, 0x0308, 0x0327, 0x093F, 0x0E31, 0x20DD};
  static const char* kWords[] = {"Hello", "world",         "'s", "'ll",    "333",
                                 "3.14",  "don't",         "é",  "Привет", "<s>",
                                 "</s>",  "<|endoftext|>", "▁",  "\r\n",   "!!!"};
  std::uniform_int_distribution<int> kind(0, 11);
  std::string s;
  const size_t pieces = std::uniform_int_distribution<size_t>(0, max_pieces)(rng);
  for (size_t i = 0; i < pieces; ++i) {
    switch (kind(rng)) {
      case 0:  // printable ASCII
        for (int k = std::uniform_int_distribution<int>(1, 8)(rng); k > 0; --k) {
          s += static_cast<char>(std::uniform_int_distribution<int>(0x20, 0x7E)(rng));
        }
        break;
      case 1:  // whitespace run (sometimes long)
        for (int k = std::uniform_int_distribution<int>(1, rng() % 8 == 0 ? 400 : 6)(rng); k > 0;
             --k) {
          s += " \t\n\r\v\f"[rng() % 6];
        }
        break;
      case 2:
        append_cp(s, kEmoji[rng() % std::size(kEmoji)]);
        break;
      case 3:  // CJK, Hangul
        append_cp(s, std::uniform_int_distribution<uint32_t>(0x4E00, 0x9FA5)(rng));
        if (rng() % 2) append_cp(s, std::uniform_int_distribution<uint32_t>(0xAC00, 0xD7A3)(rng));
        break;
      case 4:  // combining marks after a letter
        s += static_cast<char>('a' + rng() % 26);
        append_cp(s, kMarks[rng() % std::size(kMarks)]);
        break;
      case 5: {
        std::string w = kWords[rng() % std::size(kWords)];
        if (!allow_u2581 && w == "▁") w = "_";
        s += w;
        break;
      }
      case 6:  // any valid code point, surrogates excluded
        for (;;) {
          const uint32_t cp = std::uniform_int_distribution<uint32_t>(1, 0x10FFFF)(rng);
          if ((cp >= 0xD800 && cp <= 0xDFFF) || (!allow_u2581 && cp == 0x2581)) continue;
          append_cp(s, cp);
          break;
        }
        break;
      case 7:
        if (allow_invalid) {  // raw bytes, mostly not UTF-8
          for (int k = std::uniform_int_distribution<int>(1, 4)(rng); k > 0; --k) {
            s += static_cast<char>(0x80 + rng() % 0x80);
          }
        }
        break;
      case 8:
        if (allow_invalid) s += "\xE2\x82";  // truncated sequence
        break;
      case 9:
        s += std::to_string(rng() % 100000);
        break;
      case 10:
        s += rng() % 2 ? " " : "  ";
        break;
      default:
        s += static_cast<char>(rng() % 32);  // control characters, NUL included
        break;
    }
  }
  return s;
}

bool valid_utf8(std::string_view s) {
  tok::Sanitized san;
  return tok::sanitize_utf8(s, &san);
}

class VocabProperty : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabProperty, RandomTextNeverThrowsAndRoundTrips) {
  const std::string path = kVocabDir + "/" + GetParam();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(file);
  // SPM decodes U+2581 as a space by design, so it is not lossless for that one character.
  const bool spm = tok->model() == "llama";
  // Bytes that are not UTF-8 round-trip when every byte has a token that decodes to it. The
  // deepseek vocabulary replaced some byte-level characters ("ù") by added tokens, which
  // render as their UTF-8 text, so there stray bytes >= 0x80 are not lossless.
  bool bytes_lossless = true;
  for (int b = 0x80; b < 0x100; ++b) {
    const std::string one(1, static_cast<char>(b));
    bytes_lossless = bytes_lossless && tok->decode(tok->encode(one, false, false)) == one;
  }
  if (GetParam() == "ggml-vocab-deepseek-llm.gguf") {
    EXPECT_FALSE(bytes_lossless);
  }
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 300; ++iter) {
    const bool invalid = iter % 3 == 0;
    const std::string s = random_text(rng, 40, invalid, !spm);
    std::vector<int32_t> ids;
    ASSERT_NO_THROW(ids = tok->encode(s, false, false)) << iter;
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->n_vocab());
    if (!invalid || bytes_lossless) {
      ASSERT_EQ(tok->decode(ids), s) << "iteration " << iter;
    }

    // Parsing specials and adding BOS never breaks anything either.
    ASSERT_NO_THROW(tok->encode(s, true, true));

    // Streaming: every chunk is valid UTF-8; for valid text the chunks join to the text.
    StreamDecoder sd(*tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string chunk = sd.push(id);
      ASSERT_TRUE(valid_utf8(chunk)) << iter;
      streamed += chunk;
    }
    streamed += sd.flush();
    if (!invalid) {
      std::string expect = s;
      // decode() drops the space SPM prepends; a stream keeps every piece.
      if (spm && !ids.empty())
        expect = tok->token_to_piece(ids[0]).substr(0, 1) == " " ? " " + s : s;
      ASSERT_EQ(streamed, expect) << iter;
    }
  }
}

TEST_P(VocabProperty, LongWhitespaceRuns) {
  const std::string path = kVocabDir + "/" + GetParam();
  if (!std::filesystem::exists(path)) GTEST_SKIP();
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(file);
  for (const std::string& ws : {std::string(20000, ' '), std::string(5000, '\n'),
                                std::string(3000, '\t') + "x" + std::string(3000, ' ')}) {
    const std::string s = "a" + ws + "b" + ws;
    const auto ids = tok->encode(s, false, false);
    EXPECT_EQ(tok->decode(ids), s);
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, VocabProperty,
                         ::testing::Values("ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf",
                                           "ggml-vocab-deepseek-llm.gguf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

TEST(StreamDecoder, HoldsSplitCharactersUntilComplete) {
  // Byte tokens of "é" (C3 A9) and "🚀" (F0 9F 9A 80) pushed one by one.
  Vocab v;
  v.model = "llama";
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.types.push_back(TokenType::kByte);
  }
  v.tokens.push_back("<unk>");
  v.types.push_back(TokenType::kUnknown);
  v.unk = 256;
  v.bos = -1;
  v.eos = -1;
  v.add_bos = false;
  auto tok = Tokenizer::from_vocab(v);
  StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(0xC3), "");
  EXPECT_EQ(sd.push(0xA9), "é");
  EXPECT_EQ(sd.push(0xF0), "");
  EXPECT_EQ(sd.push(0x9F), "");
  EXPECT_EQ(sd.push(0x9A), "");
  EXPECT_EQ(sd.push(0x80), "🚀");
  EXPECT_EQ(sd.push('a'), "a");
  // A lone continuation byte can never complete: replaced at once.
  EXPECT_EQ(sd.push(0x80), "\xEF\xBF\xBD");
  // A lead byte followed by ASCII: the lead is invalid, the ASCII passes.
  EXPECT_EQ(sd.push(0xE2), "");
  EXPECT_EQ(sd.push('b'),
            "\xEF\xBF\xBD"
            "b");
  // An incomplete tail at the end of the stream.
  EXPECT_EQ(sd.push(0xE2), "");
  EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(sd.flush(), "");
}

}  // namespace
}  // namespace lynx
