// Pre-tokenizers of byte-level BPE vocabularies: the word-splitting regexes selected by
// `tokenizer.ggml.pre`, run with PCRE2 (UTF + UCP, JIT).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lynx::tok {

// What a pre-tokenizer name implies besides its regexes (llama.cpp's per-name flags).
struct PreTokenizerInfo {
  std::string name;            // canonical name as given
  bool ignore_merges = false;  // a word that is itself a token is emitted without merging
  bool add_bos = false;        // default for add_bos when the metadata does not say
  bool no_bos = false;         // the family has no BOS token (chatglm4)
};

// A word: [begin, end) byte offsets into the text passed to split().
using Span = std::pair<uint32_t, uint32_t>;

class PreTokenizer {
 public:
  // Throws lynx::Error naming `name` when it is not a known pre-tokenizer.
  static std::unique_ptr<PreTokenizer> create(std::string_view name);
  ~PreTokenizer();

  const PreTokenizerInfo& info() const { return info_; }
  // Appends the words of `text` (arbitrary bytes) to `words`, in order, covering the text
  // completely. Each regex of the list splits every word of the previous pass into matches
  // and the gaps between them (llama.cpp's unicode_regex_split).
  void split(std::string_view text, std::vector<Span>* words) const;

 private:
  struct Regex;
  PreTokenizer() = default;
  PreTokenizerInfo info_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace lynx::tok
