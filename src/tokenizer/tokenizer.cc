// Tokenizer construction (vocabulary validation, special tokens, end-of-generation set),
// special-token partitioning, encode/decode and streaming decode.
#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "lynx/gguf.h"
#include "tokenizer/impl.h"

namespace lynx {

using namespace tok;

namespace {

bool is_any(std::string_view s, std::span<const std::string_view> list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// Token texts llama.cpp recognizes as end-of-turn / fill-in-the-middle markers when the
// metadata does not name them (llama_vocab::impl::load). They are facts of the vocabularies.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         "<｜end▁of▁sentence｜>",
    "<end_of_utterance>"};
constexpr std::string_view kFimPre[] = {"<|fim_prefix|>",  "<fim-prefix>", "<fim_prefix>",
                                        "<｜fim▁begin｜>", "<PRE>",        "▁<PRE>",
                                        "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSuf[] = {"<|fim_suffix|>",  "<fim-suffix>", "<fim_suffix>",
                                        "<｜fim▁hole｜>",  "<SUF>",        "▁<SUF>",
                                        "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMid[] = {"<|fim_middle|>",  "<fim-middle>", "<fim_middle>",
                                        "<｜fim▁end｜>",   "<MID>",        "▁<MID>",
                                        "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::string_view kFimRep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                        "<reponame>"};
constexpr std::string_view kEogTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>",
                                          "<｜end▁of▁sentence｜>",
                                          "[e~["};

uint16_t attr_of(TokenType t) {
  switch (t) {
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kByte:
      return kAttrByte;
    default:
      return 0;
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xAB>" -> 0xAB; -1 when the text is not of that form.
int byte_token_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex_value(t[3]), lo = hex_value(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

}  // namespace

void Tokenizer::Impl::build(Vocab v) {
  read_tokens(v);
  set_special_ids(v);
  mark_control_and_eog();
  collect_specials(v.rstrip_after_special);
  map_bytes(v.merges);
  make_pieces();
}

// The model kind, then the token table: texts, scores, attributes, text -> id (validated).
void Tokenizer::Impl::read_tokens(Vocab& v) {
  model = v.model;
  if (model == "llama") {
    spm = true;
  } else if (model == "gpt2") {
    spm = false;
  } else {
    throw Error("unknown tokenizer model '" + gguf::printable(model) +
                "' (tokenizer.ggml.model); lynx-moe supports 'llama' (SentencePiece) and "
                "'gpt2' (byte-level BPE)");
  }
  const auto n = static_cast<int32_t>(v.tokens.size());
  if (n == 0) throw Error("tokenizer: the vocabulary has no tokens (tokenizer.ggml.tokens)");
  if (!v.scores.empty() && static_cast<int32_t>(v.scores.size()) < n) {
    throw Error("tokenizer: tokenizer.ggml.scores has " + std::to_string(v.scores.size()) +
                " entries for " + std::to_string(n) + " tokens");
  }
  if (!v.types.empty() && static_cast<int32_t>(v.types.size()) < n) {
    throw Error("tokenizer: tokenizer.ggml.token_type has " + std::to_string(v.types.size()) +
                " entries for " + std::to_string(n) + " tokens");
  }

  tokens = std::move(v.tokens);
  scores = std::move(v.scores);
  scores.resize(n, 0.f);
  attrs.assign(n, kAttrNormal);
  token_to_id.reserve(n * 2);
  for (int32_t i = 0; i < n; ++i) {
    if (tokens[i].empty()) tokens[i] = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    if (!v.types.empty()) attrs[i] = attr_of(v.types[i]);
    auto [it, inserted] = token_to_id.emplace(tokens[i], i);
    if (!inserted) {
      throw Error("tokenizer: duplicate token '" + gguf::printable(tokens[i]) + "' has ids " +
                  std::to_string(it->second) + " and " + std::to_string(i));
    }
  }
}

// BOS / EOS / ... ids and the add_* flags: the model's defaults (llama.cpp's), then the
// metadata's.
void Tokenizer::Impl::set_special_ids(const Vocab& v) {
  const auto n = static_cast<int32_t>(tokens.size());
  PreTokenizerInfo pre_info;
  if (spm) {
    bos = 1, eos = 2, unk = 0;
    add_bos = true, add_eos = false, add_space_prefix = true;
  } else {
    pretok = PreTokenizer::create(v.pre);
    pre_info = pretok->info();
    pre = v.pre.empty() ? "default" : v.pre;
    // llama.cpp's legacy default for BPE vocabularies without ids in the metadata.
    bos = pre_info.no_bos ? -1 : 11;
    eos = 11;
    add_bos = pre_info.add_bos, add_eos = false, add_space_prefix = false;
    ignore_merges = pre_info.ignore_merges;
  }
  for (int32_t* id : {&bos, &eos, &unk}) {
    if (*id >= n) *id = -1;
  }
  // An id the metadata gives must name a token: a default in its place would feed or stop on
  // another token than the model was trained with. The padding id is the exception (nothing
  // here reads it; some converted files carry one past the end): it is dropped.
  auto set_id = [&](int32_t* dst, const std::optional<int32_t>& src, const char* name) {
    if (!src) return;
    if (*src < 0) {  // a Vocab built in code says "none" (from_gguf refuses negative ids)
      *dst = -1;
      return;
    }
    if (*src >= n) {
      if (dst == &pad) return;
      throw Error(std::string("tokenizer: tokenizer.ggml.") + name + " is " + std::to_string(*src) +
                  ", outside the vocabulary of " + std::to_string(n) + " tokens");
    }
    *dst = *src;
  };
  set_id(&bos, v.bos, "bos_token_id");
  set_id(&eos, v.eos, "eos_token_id");
  set_id(&eot, v.eot, "eot_token_id");
  set_id(&eom, v.eom, "eom_token_id");
  set_id(&unk, v.unk, "unknown_token_id");
  set_id(&pad, v.pad, "padding_token_id");
  if (v.add_bos) add_bos = *v.add_bos;
  if (v.add_eos) add_eos = *v.add_eos;
  if (v.add_space_prefix) add_space_prefix = *v.add_space_prefix;
  if (add_bos && bos < 0) {
    throw Error("tokenizer: tokenizer.ggml.add_bos_token is true but there is no BOS token");
  }
  if (add_eos && eos < 0) {
    throw Error("tokenizer: tokenizer.ggml.add_eos_token is true but there is no EOS token");
  }
}

// Marker tokens found by text become control tokens (llama.cpp does this because converted
// vocabularies often mistype them); the end-of-generation set follows.
void Tokenizer::Impl::mark_control_and_eog() {
  const auto n = static_cast<int32_t>(tokens.size());
  auto find_first = [&](std::span<const std::string_view> texts) -> int32_t {
    for (int32_t i = 0; i < n; ++i) {
      if (is_any(tokens[i], texts)) return i;
    }
    return -1;
  };
  int32_t fim_pad = -1, fim_rep = -1, fim_sep = -1;
  auto detect = [&](int32_t* id, std::span<const std::string_view> texts) {
    if (*id >= 0) return;  // named by the metadata: taken as is
    *id = find_first(texts);
    if (*id >= 0) attrs[*id] |= kAttrControl;
  };
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1;
  detect(&eot, kEotTexts);
  static constexpr std::string_view kEom[] = {"<|eom_id|>"};
  detect(&eom, kEom);
  detect(&fim_pre, kFimPre);
  detect(&fim_suf, kFimSuf);
  detect(&fim_mid, kFimMid);
  detect(&fim_pad, kFimPad);
  detect(&fim_rep, kFimRep);
  static constexpr std::string_view kFimSep[] = {"<|file_sep|>"};
  detect(&fim_sep, kFimSep);

  eog.assign(n, 0);
  for (int32_t id : {fim_pad, fim_rep, fim_sep}) {
    if (id >= 0) eog[id] = 1;
  }
  for (int32_t i = 0; i < n; ++i) {
    if (is_any(tokens[i], kEogTexts)) {
      eog[i] = 1;
      attrs[i] |= kAttrControl;
    }
  }
  // gpt-oss (harmony): these markers are always rendered, as llama.cpp does.
  for (int32_t i = 0; i < n; ++i) {
    static constexpr std::string_view kHarmony[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                    "<|constrain|>"};
    if (is_any(tokens[i], kHarmony)) {
      attrs[i] = kAttrUserDefined;
    }
  }
  for (int32_t id : {eos, eot, eom}) {
    if (id >= 0) eog[id] = 1;
  }
  // Harmony-style vocabularies end a message with <|end|> but a generation with <|return|> /
  // <|call|>: <|end|> is not end-of-generation there.
  {
    static constexpr std::string_view kRet[] = {"<|return|>"}, kCall[] = {"<|call|>", "<|calls|>"},
                                      kFlush[] = {"<|flush|>"}, kEnd[] = {"<|end|>"};
    const int32_t ret = find_first(kRet), call = find_first(kCall);
    const int32_t flush = find_first(kFlush), end = find_first(kEnd);
    if (end >= 0 && eog[end] && call >= 0 && eog[call] &&
        ((ret >= 0 && eog[ret]) || (flush >= 0 && eog[flush]))) {
      eog[end] = 0;
      attrs[end] = kAttrUserDefined;
    }
  }
}

// The tokens cut out of raw text before tokenization (longest first), and their rstrip.
void Tokenizer::Impl::collect_specials(bool rstrip_after_special) {
  const auto n = static_cast<int32_t>(tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    if (attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) specials.push_back(i);
  }
  std::stable_sort(specials.begin(), specials.end(),
                   [&](int32_t a, int32_t b) { return tokens[a].size() > tokens[b].size(); });
  if (rstrip_after_special) {
    for (int32_t id : specials) attrs[id] |= kAttrRstrip;
    for (std::string_view t : {"</s>"}) {
      if (auto it = token_to_id.find(t); it != token_to_id.end()) attrs[it->second] |= kAttrRstrip;
    }
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (auto it = token_to_id.find(t); it != token_to_id.end()) {
        attrs[it->second] &= static_cast<uint16_t>(~kAttrRstrip);
      }
    }
  }
}

// The token of each byte (SPM: <0xXX>; BPE: the byte's encoded char) and the BPE merges.
void Tokenizer::Impl::map_bytes(const std::vector<std::string>& merges) {
  byte_token.fill(-1);
  if (spm) {
    for (const std::string& t : tokens) {
      for (size_t k = t.find("\xE2\x96\x81", 1); k != std::string::npos;
           k = t.find("\xE2\x96\x81", k + 1)) {
        joins_space[static_cast<uint8_t>(t[k - 1])] = true;
      }
    }
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char buf[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
      auto it = token_to_id.find(std::string_view(buf, 6));
      if (it == token_to_id.end()) it = token_to_id.find(std::string(1, static_cast<char>(b)));
      if (it != token_to_id.end()) byte_token[b] = it->second;
    }
  } else {
    bpe = std::make_unique<BpeModel>(merges, token_to_id, static_cast<int32_t>(tokens.size()));
    ByteMap bm;
    for (int b = 0; b < 256; ++b) {
      auto it = token_to_id.find(bm.byte_to_utf8[b]);
      if (it != token_to_id.end()) byte_token[b] = it->second;
    }
  }
}

// token_to_piece's cache: the text each token decodes to.
void Tokenizer::Impl::make_pieces() {
  const auto n = static_cast<int32_t>(tokens.size());
  ByteMap bm;
  pieces.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    const std::string& t = tokens[i];
    const uint16_t a = attrs[i];
    std::string& p = pieces[i];
    if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
      p = t;
    } else if (a & kAttrNormal) {
      if (spm) {
        p = t;
        replace_all(p, "\xE2\x96\x81", " ");
      } else {
        const auto* s = reinterpret_cast<const uint8_t*>(t.data());
        for (size_t k = 0; k < t.size();) {
          uint32_t cp;
          const int len = utf8_decode(s + k, t.size() - k, &cp);
          if (len <= 0) {  // not UTF-8: keep the byte
            p += t[k++];
            continue;
          }
          const int byte = bm.cp_to_byte(cp);
          if (byte >= 0) {
            p += static_cast<char>(byte);
          } else {
            p.append(t, k, len);  // not a byte code point: keep it as text
          }
          k += len;
        }
      }
    } else if (a & kAttrByte) {
      const int b = byte_token_value(t);
      p = b >= 0 ? std::string(1, static_cast<char>(b)) : t;
    }
  }
}

namespace {

struct Fragment {
  int32_t token;  // -1: raw text [off, off + len)
  uint32_t off;
  uint32_t len;
};

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

}  // namespace

std::vector<int32_t> Tokenizer::Impl::encode(std::string_view text, bool add_special,
                                             bool parse_special) const {
  if (text.size() > 0xFFFFFFF0u) throw Error("tokenizer: text larger than 4 GiB");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);

  // Cut special tokens out of the text, longest first (llama.cpp's tokenizer_st_partition).
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({-1, 0, static_cast<uint32_t>(text.size())});
  std::array<bool, 256> present{};
  for (char c : text) present[static_cast<uint8_t>(c)] = true;
  std::vector<Fragment> next;
  for (int32_t id : specials) {
    const uint16_t a = attrs[id];
    if (!parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& t = tokens[id];
    if (!present[static_cast<uint8_t>(t[0])]) continue;
    next.clear();
    bool changed = false;
    for (const Fragment& f : frags) {
      if (f.token >= 0 || f.len < t.size()) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.off;
      const size_t end = f.off + f.len;
      const std::string_view window = text.substr(0, end);
      while (pos < end) {
        const size_t m = window.find(t, pos);
        if (m == std::string_view::npos) break;
        changed = true;
        size_t left_end = m;
        if (a & kAttrLstrip) {
          while (left_end > pos && is_space(text[left_end - 1])) --left_end;
        }
        if (left_end > pos) {
          next.push_back({-1, static_cast<uint32_t>(pos), static_cast<uint32_t>(left_end - pos)});
        }
        next.push_back({id, 0, 0});
        pos = m + t.size();
        if (a & kAttrRstrip) {
          while (pos < end && is_space(text[pos])) ++pos;
        }
      }
      if (pos < end) {
        next.push_back({-1, static_cast<uint32_t>(pos), static_cast<uint32_t>(end - pos)});
      }
    }
    if (changed) frags.swap(next);
  }

  if (add_special && add_bos) out.push_back(bos);
  if (spm) {
    const SpmView view{&token_to_id, &scores, &byte_token, unk, &joins_space};
    bool prev_special = true;  // the first text fragment gets the space prefix too
    std::string buf;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      buf.clear();
      if (add_space_prefix && prev_special) buf = ' ';
      buf.append(text.substr(f.off, f.len));
      replace_all(buf, " ", "\xE2\x96\x81");
      spm_encode(view, buf, &out);
      prev_special = false;
    }
  } else {
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
      } else {
        encode_bpe_text(text.substr(f.off, f.len), &out);
      }
    }
  }
  if (add_special && add_eos) out.push_back(eos);
  return out;
}

void Tokenizer::Impl::encode_bpe_text(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<Span> words;
  words.reserve(text.size() / 4 + 4);
  pretok->split(text, &words);
  // Natural text repeats its words; a per-call cache keeps encode() lock-free and const.
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
  std::vector<int32_t> pool;
  const bool use_cache = words.size() > 64;
  if (use_cache) cache.reserve(words.size() / 4);
  for (const Span& w : words) {
    const std::string_view word = text.substr(w.first, w.second - w.first);
    if (!use_cache) {
      bpe->encode_word(word, ignore_merges, token_to_id, out);
      continue;
    }
    auto it = cache.find(word);
    if (it == cache.end()) {
      const auto begin = static_cast<uint32_t>(pool.size());
      bpe->encode_word(word, ignore_merges, token_to_id, &pool);
      it = cache.emplace(word, std::make_pair(begin, static_cast<uint32_t>(pool.size()))).first;
    }
    out->insert(out->end(), pool.begin() + it->second.first, pool.begin() + it->second.second);
  }
}

// ---- public API ----

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(Vocab vocab) {
  auto impl = std::make_unique<Impl>();
  impl->build(std::move(vocab));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  return impl_->encode(text, add_special, parse_special);
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) {
    throw Error("token id " + std::to_string(id) + " is out of range [0, " +
                std::to_string(n_vocab()) + ")");
  }
  return impl_->pieces[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  bool strip_space = impl_->add_space_prefix;  // undo the space encode() prepended
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) {
      throw Error("token id " + std::to_string(id) + " is out of range [0, " +
                  std::to_string(n_vocab()) + ")");
    }
    std::string_view p = impl_->pieces[id];
    if (strip_space && !p.empty() && p[0] == ' ') p.remove_prefix(1);
    strip_space = false;
    out.append(p);
  }
  return out;
}

int32_t Tokenizer::bos() const {
  return impl_->bos;
}
int32_t Tokenizer::eos() const {
  return impl_->eos;
}
int32_t Tokenizer::eot() const {
  return impl_->eot;
}
bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && id < n_vocab() && impl_->eog[id] != 0;
}
bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && (impl_->attrs[id] & kAttrControl) != 0;
}
bool Tokenizer::add_bos() const {
  return impl_->add_bos;
}
int Tokenizer::n_vocab() const {
  return static_cast<int>(impl_->tokens.size());
}
const std::string& Tokenizer::model() const {
  return impl_->model;
}
const std::string& Tokenizer::pre() const {
  return impl_->pre;
}
int32_t Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->token_to_id.find(text);
  return it == impl_->token_to_id.end() ? -1 : it->second;
}

// ---- streaming ----

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_->token_to_piece(id);
  std::string out;
  const auto* p = reinterpret_cast<const uint8_t*>(pending_.data());
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    uint32_t cp;
    const int len = utf8_decode(p + i, n - i, &cp);
    if (len > 0) {
      out.append(pending_, i, len);
      i += len;
    } else if (len == 0) {
      out += "\xEF\xBF\xBD";  // can never become valid
      ++i;
    } else {
      break;  // incomplete: wait for the next token
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
  pending_.clear();
  return out;
}

}  // namespace lynx
