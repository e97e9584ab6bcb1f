// Hostile-input suite (issue 15): mutations of the bundled models' GGUF files and hostile
// text for their tokenizers. Every mutant must either load or be refused with a lynx::Error;
// nothing may crash, hang or throw anything else. The counts are fixed and seeded, so the
// suite takes the same few seconds every run (and runs under ASan+UBSan in CI, which is what
// turns a quiet out-of-bounds read into a failure). Longer, unbounded runs: docs/fuzzing.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../scratch.h"
#include "gguf/inspect.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/tokenizer.h"

namespace lynx {
namespace {

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

const std::string kBundled = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";
const std::string kSmall =
    std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/qwen2moe-q8_0.gguf";

// Texts that have broken tokenizers elsewhere: invalid UTF-8 (lone continuation bytes,
// truncated sequences, overlong forms, surrogates), control tokens written as text, NULs,
// and long runs that stress the pre-tokenizer and the merge loop.
std::vector<std::string> hostile_texts() {
  std::vector<std::string> t = {
      "",
      std::string("\0\0\0", 3),
      "\x80\x80\xbf",
      "\xc3",
      "\xe2\x82",
      "\xf0\x9f\x98",
      "\xc0\xaf\xe0\x80\xaf",      // overlong '/'
      "\xed\xa0\x80\xed\xbf\xbf",  // UTF-16 surrogates
      "\xf4\x90\x80\x80\xff\xfe",  // above U+10FFFF, bytes never in UTF-8
      "<|endoftext|><|endoftext|>",
      "<|endoftext|",
      "<|extra_300|>text<|im_start|>",
      "<s></s><unk>",
      "a\r\n\t\v\f\x1b[31m red \x1b[0m",
  };
  t.push_back(std::string(100000, 'a'));
  t.push_back(std::string(50000, ' '));
  t.push_back(std::string(30000, '\x80'));
  std::string digits;
  for (int i = 0; i < 20000; ++i) digits += char('0' + i % 10);
  t.push_back(digits);
  std::string mixed;
  std::mt19937 rng(7);
  for (int i = 0; i < 60000; ++i) mixed += char(rng() & 0xff);
  t.push_back(mixed);
  std::string emoji;
  for (int i = 0; i < 5000; ++i) emoji += "\xf0\x9f\x98\x80";
  t.push_back(emoji);
  return t;
}

// Encodes and decodes each text both ways; ids stay inside the vocabulary.
void exercise_tokenizer(const Tokenizer& tok, const std::vector<std::string>& texts) {
  for (const auto& s : texts) {
    for (const bool special : {false, true}) {
      const auto ids = tok.encode(s, true, special);
      for (int32_t id : ids) {
        ASSERT_GE(id, 0);
        ASSERT_LT(id, tok.n_vocab());
      }
      (void)tok.decode(ids);
    }
  }
  for (int32_t id : {-1, tok.n_vocab(), 1 << 30}) {
    try {
      (void)tok.token_to_piece(id);
    } catch (const Error&) {
    }
  }
}

TEST(HostileTokenizer, BundledAndSharedVocabularies) {
  const auto texts = hostile_texts();
  std::vector<std::string> files = {kBundled};
  const std::string shared = std::string(LYNX_SHARED_DIR) + "/data/vocab";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(shared, ec)) {
    if (e.path().extension() == ".gguf") files.push_back(e.path().string());
  }
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    const gguf::File f = gguf::File::open(path);
    const auto tok = Tokenizer::from_gguf(f);
    exercise_tokenizer(*tok, texts);
  }
}

// Parses a (mutated) buffer; when it parses, also builds the tokenizer, tokenizes hostile
// text and renders `inspect`'s summary. Only lynx::Error may come out.
int try_buffer(const uint8_t* data, size_t size, const std::vector<std::string>& texts) {
  try {
    const gguf::File f = gguf::File::from_memory(data, size, "mutant.gguf");
    const auto s = gguf::summarize(f);
    gguf::InspectOptions opt;
    opt.metadata = opt.tensors = true;
    (void)gguf::format_summary(f, s, opt);
    const auto tok = Tokenizer::from_gguf(f);
    exercise_tokenizer(*tok, texts);
    return 1;
  } catch (const Error&) {
    return 0;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a lynx::Error: " << e.what();
    return 0;
  }
}

// Byte mutations of the bundled model's header (metadata, vocabulary, tensor infos), made in
// place and undone, so no mutant copies the 12 MB file.
TEST(GgufMutations, BundledModelHeaderBytes) {
  std::vector<uint8_t> buf = read_all(kBundled);
  ASSERT_GT(buf.size(), 1000u);
  const size_t header = size_t(gguf::File::from_memory(buf.data(), buf.size()).data_offset());
  const std::vector<std::string> texts = {"hello world", "\xff\xfe<|endoftext|>", "x y z"};
  std::mt19937_64 rng(15);
  const uint8_t specials[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x09, 0x0c, 0x20};
  int parsed = 0;
  const int kMutants = 400;
  for (int i = 0; i < kMutants; ++i) {
    const size_t pos = rng() % header;
    const int n = 1 + int(rng() % 8);  // 1..8 consecutive bytes: a length or count field
    std::vector<uint8_t> saved(buf.begin() + long(pos),
                               buf.begin() + long(std::min(buf.size(), pos + size_t(n))));
    for (size_t j = 0; j < saved.size(); ++j) {
      buf[pos + j] = (rng() & 1) ? uint8_t(rng()) : specials[rng() % sizeof specials];
    }
    parsed += try_buffer(buf.data(), buf.size(), texts);
    std::copy(saved.begin(), saved.end(), buf.begin() + long(pos));
  }
  // Many mutations hit a token's bytes and still parse; many others break a length field.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, kMutants);
}

// Every field that sizes something, set to hostile values: the counts, the first key's
// length, the vocabulary's element count, a tensor's dimension count, shape, type, offset.
TEST(GgufMutations, BundledModelHugeCountsAndFields) {
  std::vector<uint8_t> buf = read_all(kBundled);
  const std::vector<std::string> texts = {"abc"};
  auto set_u64 = [&](size_t pos, uint64_t v) { std::memcpy(&buf[pos], &v, 8); };
  auto find = [&](const std::string& s) {
    const auto it = std::search(buf.begin(), buf.end(), s.begin(), s.end());
    return size_t(it - buf.begin());
  };
  const uint64_t values[] = {0,
                             1,
                             0xff,
                             uint64_t(1) << 31,
                             uint64_t(1) << 32,
                             uint64_t(1) << 40,
                             uint64_t(1) << 63,
                             ~uint64_t(0)};
  const size_t tokens_key = find("tokenizer.ggml.tokens");
  ASSERT_LT(tokens_key, buf.size());
  const size_t tokens_count = tokens_key + std::strlen("tokenizer.ggml.tokens") + 4 + 4;
  const size_t tensor_key = find("blk.0.ffn_gate_inp.weight");
  ASSERT_LT(tensor_key, buf.size());
  const size_t n_dims = tensor_key + std::strlen("blk.0.ffn_gate_inp.weight");
  const std::vector<size_t> fields = {8, 16, 24, tokens_count, n_dims - 8};
  int cases = 0;
  for (size_t f : fields) {
    uint64_t orig;
    std::memcpy(&orig, &buf[f], 8);
    for (uint64_t v : values) {
      set_u64(f, v);
      try_buffer(buf.data(), buf.size(), texts);
      ++cases;
    }
    set_u64(f, orig);
  }
  // The tensor info after the name: n_dims (u32), ne[n_dims] (i64), type (u32), offset (u64).
  uint32_t dims;
  std::memcpy(&dims, &buf[n_dims], 4);
  ASSERT_EQ(dims, 2u);
  const size_t ne0 = n_dims + 4, type = ne0 + 16, offset = type + 4;
  const std::vector<uint8_t> saved(buf.begin() + long(n_dims), buf.begin() + long(offset + 8));
  for (uint32_t d : {0u, 1u, 3u, 4u, 5u, 0xffffffffu}) {
    std::memcpy(&buf[n_dims], &d, 4);
    try_buffer(buf.data(), buf.size(), texts);
    ++cases;
  }
  std::copy(saved.begin(), saved.end(), buf.begin() + long(n_dims));
  for (int64_t v : {int64_t(0), int64_t(-1), int64_t(1) << 40, INT64_MAX}) {
    std::memcpy(&buf[ne0], &v, 8);
    try_buffer(buf.data(), buf.size(), texts);
    ++cases;
  }
  std::copy(saved.begin(), saved.end(), buf.begin() + long(n_dims));
  for (uint32_t t : {1u, 2u, 8u, 30u, 39u, 1000u}) {
    std::memcpy(&buf[type], &t, 4);
    try_buffer(buf.data(), buf.size(), texts);
    ++cases;
  }
  std::copy(saved.begin(), saved.end(), buf.begin() + long(n_dims));
  for (uint64_t o : {uint64_t(1), uint64_t(32), buf.size() * 2, ~uint64_t(0) - 31}) {
    set_u64(offset, o);
    try_buffer(buf.data(), buf.size(), texts);
    ++cases;
  }
  EXPECT_EQ(cases, int(fields.size() * 8 + 6 + 4 + 6 + 4));
}

// Truncations anywhere: in the header every few bytes, then through the data.
TEST(GgufMutations, BundledModelTruncations) {
  const std::vector<uint8_t> buf = read_all(kBundled);
  const size_t header = size_t(gguf::File::from_memory(buf.data(), buf.size()).data_offset());
  int cases = 0;
  for (size_t n = 0; n < header; n += std::max<size_t>(1, header / 97)) {
    EXPECT_EQ(try_buffer(buf.data(), n, {"a"}), 0) << "size " << n;
    ++cases;
  }
  for (size_t n = header; n < buf.size(); n += (buf.size() - header) / 13) {
    EXPECT_EQ(try_buffer(buf.data(), n, {"a"}), 0) << "size " << n;
    ++cases;
  }
  EXPECT_GT(cases, 100);
}

// Whole-model loads of mutated files (small fixture, so each mutant is a 184 KB write):
// Model::load refuses them with a lynx::Error, or loads a model that runs a step or fails it
// with a lynx::Error (NaN weights, for instance).
TEST(GgufMutations, ModelLoadOfMutatedFiles) {
  std::vector<uint8_t> buf = read_all(kSmall);
  const size_t header = size_t(gguf::File::from_memory(buf.data(), buf.size()).data_offset());
  const std::string path = test::scratch_path("gguf_mutant.gguf");
  std::mt19937_64 rng(99);
  int loaded = 0, ran = 0;
  const int kMutants = 60;
  for (int i = 0; i < kMutants; ++i) {
    std::vector<uint8_t> m = buf;
    // Mostly header bytes (shapes, types, metadata), sometimes weight bytes (NaN/inf
    // patterns in F32 norms and router, garbage scales in Q8_0 blocks).
    const bool in_data = i % 4 == 3;
    for (int j = 0; j < 1 + int(rng() % 4); ++j) {
      const size_t pos = in_data ? header + rng() % (m.size() - header) : rng() % header;
      for (size_t b = pos; b < std::min(m.size(), pos + 4); ++b) m[b] = uint8_t(rng());
      if (in_data && pos + 4 <= m.size()) std::memset(&m[pos], 0xff, 4);  // a NaN
    }
    {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(m.data()), std::streamsize(m.size()));
    }
    try {
      LoadOptions lo;
      lo.prefetch = false;
      auto model = Model::load(path, lo);
      ++loaded;
      ContextOptions co;
      co.n_threads = 1;
      co.n_ctx = 4;
      co.routing = "lynx";
      Context ctx(*model, co);
      const int32_t s = ctx.new_sequence();
      std::vector<BatchToken> b = {{1, s, 0, kTokenPrefill, false}, {2, s, 1, kTokenPrefill, true}};
      ctx.eval(b);
      ++ran;
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "mutant " << i << ": not a lynx::Error: " << e.what();
    }
  }
  std::filesystem::remove(path);
  EXPECT_GT(loaded, 0);
  EXPECT_GE(loaded, ran);
}

TEST(GgufPrintable, EscapesControlsAndInvalidUtf8) {
  EXPECT_EQ(gguf::printable("blk.0.ffn_up"), "blk.0.ffn_up");
  EXPECT_EQ(gguf::printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");  // valid UTF-8 passes
  EXPECT_EQ(gguf::printable("\x1b[2J\n\x7f\\"), "\\x1b[2J\\x0a\\x7f\\\\");
  EXPECT_EQ(gguf::printable("\xc2\x9b"
                            "1m"),
            "\\xc2\\x9b1m");                                      // C1 CSI as UTF-8
  EXPECT_EQ(gguf::printable("\x9b\xff\xc3"), "\\x9b\\xff\\xc3");  // invalid bytes
  EXPECT_EQ(gguf::printable("\xc0\xaf"), "\\xc0\\xaf");           // overlong
  EXPECT_EQ(gguf::printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // surrogate
}

// inspect's listing and the reader's messages show hostile names escaped: no ESC, no CSI,
// no newline inside a name reaches the terminal.
TEST(GgufPrintable, InspectAndErrorsEscapeNames) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::str("llama\x1b]0;owned\x07"));
  w.set("general.name", gguf::Value::str("evil\nname\x9b"));
  w.set("key\x1b[31m", gguf::Value::str("v\x1b[0m"));
  const float data[4] = {1, 2, 3, 4};
  w.add_tensor("t\x1b[2J", gguf::TensorType::F32, {4}, data, sizeof data);
  const auto bytes = w.to_bytes();
  const auto f = gguf::File::from_memory(bytes.data(), bytes.size(), "x.gguf");
  gguf::InspectOptions opt;
  opt.metadata = opt.tensors = true;
  const std::string out = gguf::format_summary(f, gguf::summarize(f), opt);
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find('\x07'), std::string::npos) << out;
  EXPECT_EQ(out.find("evil\n"), std::string::npos) << out;
  EXPECT_NE(out.find("t\\x1b[2J"), std::string::npos) << out;
  // The reader's messages: a tensor whose data runs past the end of a truncated file.
  gguf::Writer d;
  d.add_tensor("a\x1b[2J", gguf::TensorType::F32, {4}, data, sizeof data);
  const auto db = d.to_bytes();
  try {
    gguf::File::from_memory(db.data(), db.size() - 24, "y.gguf");  // 8 of 16 bytes left
    ADD_FAILURE() << "accepted a truncated file";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\x1b'), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a\\x1b[2J"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lynx
