// Tokenizer internals shared by the SPM and BPE models (not a public header).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lynx/tokenizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace lynx {

namespace tok {

// Token attributes (llama.cpp's llama_token_attr bits that matter to tokenization).
enum Attr : uint16_t {
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
  kAttrLstrip = 1 << 7,
  kAttrRstrip = 1 << 8,
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Byte-level BPE merge table over interned symbols: ids below n_vocab are vocabulary tokens,
// higher ids are merge operands/results that are not tokens themselves.
class BpeModel {
 public:
  BpeModel(const std::vector<std::string>& merges, const TokenMap& token_to_id, int32_t n_vocab);
  // Merges one word (raw bytes) and appends the resulting token ids to `out`.
  void encode_word(std::string_view word, bool ignore_merges, const TokenMap& token_to_id,
                   std::vector<int32_t>* out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  int32_t intern(const std::string& s, const TokenMap& token_to_id);
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void emit_symbol(int32_t sym, uint8_t byte, const TokenMap& token_to_id,
                   std::vector<int32_t>* out) const;

  int32_t n_vocab_;
  TokenMap extra_ids_;              // non-token strings -> id >= n_vocab
  std::vector<std::string> extra_;  // id - n_vocab -> string
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_sym_;  // symbol of each byte's encoded char, -1 if none
  ByteMap bytes_;
};

// SentencePiece-style merge of `text` (already space-escaped); appends token ids.
struct SpmView {
  const TokenMap* token_to_id;
  const std::vector<float>* scores;
  const std::array<int32_t, 256>* byte_token;  // -1 when a byte has no token
  int32_t unk;
  // Bytes that end a character which some token has right before an escaped space (U+2581).
  // A merge can only cross the start of a word when the character before it is one of these,
  // so the text is merged word-run by word-run elsewhere: identical result, small queues.
  const std::array<bool, 256>* joins_space;
};
void spm_encode(const SpmView& v, std::string_view text, std::vector<int32_t>* out);

}  // namespace tok

struct Tokenizer::Impl {
  std::string model;  // "llama" | "gpt2"
  std::string pre;
  bool spm = true;

  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<uint16_t> attrs;
  tok::TokenMap token_to_id;

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::vector<uint8_t> eog;  // per id

  // Tokens cut out of raw text before tokenization, longest text first.
  std::vector<int32_t> specials;
  // SPM: the <0xXX> token of each byte; BPE: the token of each byte's encoded char.
  std::array<int32_t, 256> byte_token{};
  std::vector<std::string> pieces;      // token_to_piece cache
  std::array<bool, 256> joins_space{};  // SPM: see SpmView::joins_space

  std::unique_ptr<tok::PreTokenizer> pretok;
  std::unique_ptr<tok::BpeModel> bpe;
  bool ignore_merges = false;

  void build(Vocab v);  // validates and fills everything above
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  void encode_bpe_text(std::string_view text, std::vector<int32_t>* out) const;

 private:
  // The stages of build, in order.
  void read_tokens(Vocab& v);
  void set_special_ids(const Vocab& v);
  void mark_control_and_eog();
  void collect_specials(bool rstrip_after_special);
  void map_bytes(const std::vector<std::string>& merges);
  void make_pieces();
};

}  // namespace lynx
