// libFuzzer target for the tokenizers: any bytes, with or without special-token parsing, must
// encode to ids inside the vocabulary and decode back without a crash, for the bundled model's
// byte-level BPE and the shared llama.cpp test vocabularies (SPM and BPE variants) when
// present. The first input byte picks the vocabulary and the flags; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lynx/gguf.h"
#include "lynx/tokenizer.h"

namespace {

struct Vocabs {
  std::vector<lynx::gguf::File> files;  // the tokenizers keep no views into them
  std::vector<std::unique_ptr<lynx::Tokenizer>> toks;
};

// Loaded once per process: building a tokenizer is far slower than one input.
const Vocabs& vocabs() {
  static const Vocabs v = [] {
    Vocabs out;
    std::vector<std::string> paths = {std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf"};
    std::error_code ec;
    const std::string shared = std::string(LYNX_SOURCE_DIR) + "/../shared/data/vocab";
    for (const auto& e : std::filesystem::directory_iterator(shared, ec)) {
      if (e.path().extension() == ".gguf") paths.push_back(e.path().string());
    }
    for (const auto& p : paths) {
      try {
        out.files.push_back(lynx::gguf::File::open(p));
        out.toks.push_back(lynx::Tokenizer::from_gguf(out.files.back()));
      } catch (const lynx::Error&) {
      }
    }
    if (out.toks.empty()) __builtin_trap();  // nothing to fuzz: a setup error
    return out;
  }();
  return v;
}

}  // namespace

// Before the first input, so that the per-input -timeout does not count the loading.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vocabs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Vocabs& v = vocabs();
  const lynx::Tokenizer& tok = *v.toks[data[0] % v.toks.size()];
  const bool add_special = (data[0] >> 4) & 1, parse_special = (data[0] >> 5) & 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
  size_t sink = 0;
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
    sink += tok.token_to_piece(id).size();
  }
  sink += tok.decode(ids).size();
  volatile size_t keep = sink;
  (void)keep;
  return 0;
}
