// Tokenizers of GGUF vocabularies, token for token compatible with llama.cpp.
//
// Two tokenizer models are implemented, selected by `tokenizer.ggml.model`:
//   "llama"  SentencePiece-style: the text (a space prepended, spaces escaped as U+2581) is
//            split into UTF-8 characters and the adjacent pair whose concatenation is the
//            vocabulary token with the highest score is merged first; leftover characters
//            fall back to <0xXX> byte tokens.
//   "gpt2"   Byte-level BPE: a pre-tokenizer regex chosen by `tokenizer.ggml.pre` splits the
//            text into words, bytes are mapped to printable code points (GPT-2's
//            bytes_to_unicode) and merged by merge rank.
// Special tokens (control and user-defined types) are cut out of the text before either model
// runs, longest first, and never split. See docs/tokenizer.md for the exact rules and the few
// places where lynx deliberately differs from llama.cpp (invalid UTF-8 is kept byte-exact).
//
// A Tokenizer is immutable after construction; encode/decode are const and thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lynx/error.h"

namespace lynx {

namespace gguf {
class File;
}

// Token types as stored in `tokenizer.ggml.token_type` (the numbering is the file format's).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A vocabulary in memory: what the GGUF `tokenizer.*` keys hold. Unset optionals take the
// per-model defaults llama.cpp applies (SPM: bos=1 eos=2 unk=0, add_bos; BPE: no add_bos
// except for the llama3-family pre-tokenizers).
struct Vocab {
  std::string model;                // "llama" or "gpt2"
  std::string pre;                  // tokenizer.ggml.pre; empty = "default" (gpt2 only)
  std::vector<std::string> tokens;  // id -> text
  std::vector<float> scores;        // empty = all 0 (SPM merge priority)
  std::vector<TokenType> types;     // empty = all normal
  std::vector<std::string> merges;  // "left right", rank = index (gpt2)
  // Special ids: unset = the model's default, negative = none; an id past the vocabulary is
  // an Error (from_vocab).
  std::optional<int32_t> bos, eos, eot, eom, unk, pad;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  // Phi-3 models: text after a special token loses its leading whitespace (llama.cpp sets
  // RSTRIP on their special tokens by model name).
  bool rstrip_after_special = false;
};

class Tokenizer {
 public:
  // Builds from the `tokenizer.*` metadata; throws lynx::Error naming the key or the unknown
  // model / pre-tokenizer.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
  // Builds from an in-memory vocabulary (tests, synthetic models). Same validation.
  static std::unique_ptr<Tokenizer> from_vocab(Vocab vocab);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: BOS (and EOS) as the metadata asks. parse_special: control tokens written in
  // the text ("<|im_start|>") become their ids; user-defined tokens always do.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // The bytes a token stands for: byte tokens give their byte, normal tokens their text
  // (U+2581 -> space for SPM, byte-decoded for BPE), control/user-defined/unknown tokens their
  // literal text, unused tokens nothing. Throws lynx::Error for an id out of range.
  std::string token_to_piece(int32_t id) const;
  // Concatenated pieces (special tokens rendered as text); for SPM the space the encoder
  // prepended is removed from the first token, so decode(encode(s, false, false)) == s for
  // every byte string s the tokenizer represents losslessly.
  std::string decode(std::span<const int32_t> ids) const;

  int32_t bos() const;  // -1 when the vocabulary has none
  int32_t eos() const;
  int32_t eot() const;
  bool is_eog(int32_t id) const;  // end of generation: eos, eot, eom and the known end tokens
  bool is_control(int32_t id) const;
  bool add_bos() const;
  int n_vocab() const;
  const std::string& model() const;  // "llama" or "gpt2"
  const std::string& pre() const;    // the pre-tokenizer name in effect ("" for llama)
  // Id of a token by its exact text, -1 when absent.
  int32_t find_token(std::string_view text) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer for streaming output: push() returns the text that became complete,
// never a partial UTF-8 character. Bytes that cannot start or continue a valid character are
// emitted as U+FFFD, so everything returned is valid UTF-8. No leading-space stripping: a
// stream continues a prompt.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(&tok) {}
  std::string push(int32_t id);
  std::string flush();  // the held incomplete tail, as U+FFFD

 private:
  const Tokenizer* tok_;
  std::string pending_;
};

}  // namespace lynx
