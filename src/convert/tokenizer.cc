// Tokenizer conversion (tokenizer.h). Token type numbers are llama.cpp's llama_token_type:
// 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte (the same numbering as
// SentencePiece's ModelProto.SentencePiece.Type).
#include "convert/tokenizer.h"

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lynx/error.h"
#include "util/file.h"

namespace lynx::convert {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

// tokenizer.json of the largest vocabularies is tens of MiB.
constexpr uint64_t kMaxTokenizerFile = 1 * util::kGiB;

json read_json(const fs::path& p) {
  const std::string text = util::read_file_bounded(p.string(), kMaxTokenizerFile, "tokenizer");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(p.string() + ": not valid JSON: " + e.what());
  }
}

std::string read_text(const fs::path& p) {
  return util::read_file_bounded(p.string(), kMaxTokenizerFile, "tokenizer");
}

bool looks_special(const std::string& t) {
  auto wrapped = [&](const char* open, const char* close) {
    const size_t a = std::strlen(open), b = std::strlen(close);
    return t.size() >= a + b && t.compare(0, a, open) == 0 &&
           t.compare(t.size() - b, b, close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || wrapped("<|", "|>") ||
         wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>");  // DeepSeek's fullwidth bars
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;  // SentencePiece only
  std::map<std::string, int64_t> ids;
};

void pad_vocab(Vocab& v, int64_t n, float pad_score) {
  for (int64_t i = int64_t(v.tokens.size()); i < n; ++i) {
    v.tokens.push_back("[PAD" + std::to_string(i) + "]");
    v.types.push_back(kUnused);
    if (!v.scores.empty() || pad_score != 0) v.scores.push_back(pad_score);
  }
}

// tokenizer.json, model type BPE -> gpt2 tokens, types and merges.
Vocab read_bpe(const fs::path& p, const json& tj, int64_t n_vocab,
               std::vector<std::string>* merges) {
  const std::string where = p.string();
  if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object()) {
    throw Error(where + ": no \"model\" object");
  }
  const json& m = tj["model"];
  const std::string type =
      m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>() : std::string("?");
  if (type != "BPE") {
    throw Error(where + ": tokenizer model type '" + gguf::printable(type) +
                "' is not supported (byte-level BPE; SentencePiece through tokenizer.model)");
  }
  if (!m.contains("vocab") || !m["vocab"].is_object()) throw Error(where + ": no model.vocab");
  Vocab v;
  v.tokens.assign(size_t(n_vocab), std::string());
  v.types.assign(size_t(n_vocab), 0);
  auto put = [&](const std::string& tok, const json& id, int32_t type) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(n_vocab)) {
      throw Error(where + ": token '" + gguf::printable(tok) + "' has id " + id.dump() +
                  ", outside the model's " + std::to_string(n_vocab) + " embedding rows");
    }
    const size_t i = id.get<size_t>();
    v.tokens[i] = tok;
    v.types[i] = type;
    v.ids[tok] = int64_t(i);
  };
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it)
    put(it.key(), it.value(), kNormal);
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const json& a : tj["added_tokens"]) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() ||
          !a.contains("id")) {
        throw Error(where + ": added_tokens entries need \"id\" and \"content\"");
      }
      const std::string c = a["content"].get<std::string>();
      const bool special = a.value("special", false) || looks_special(c);
      put(c, a["id"], special ? kControl : kUserDefined);
    }
  }
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] == 0) {
      v.tokens[i] = "[PAD" + std::to_string(i) + "]";
      v.types[i] = kUnused;
    }
  }
  if (m.contains("merges") && m["merges"].is_array()) {
    for (const json& x : m["merges"]) {
      if (x.is_string()) {
        merges->push_back(x.get<std::string>());
      } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
        merges->push_back(x[0].get<std::string>() + " " + x[1].get<std::string>());
      } else {
        throw Error(where + ": model.merges holds an entry that is neither \"a b\" nor [a, b]");
      }
    }
  }
  return v;
}

// SentencePiece's tokenizer.model (protobuf ModelProto): field 1 = repeated SentencePiece
// {1: piece (string), 2: score (float), 3: type (enum, default NORMAL)}. Other fields skipped.
class Proto {
 public:
  Proto(const uint8_t* p, size_t n, std::string where)
      : p_(p), end_(p + n), where_(std::move(where)) {}
  bool done() const { return p_ >= end_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) bad();
      const uint8_t b = *p_++;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad();
  }
  // Reads a field key; returns the field number and sets *wire.
  uint64_t key(int* wire) {
    const uint64_t k = varint();
    *wire = int(k & 7);
    return k >> 3;
  }
  std::pair<const uint8_t*, size_t> bytes() {
    const uint64_t n = varint();
    if (n > uint64_t(end_ - p_)) bad();
    const uint8_t* at = p_;
    p_ += n;
    return {at, size_t(n)};
  }
  uint32_t fixed32() {
    if (end_ - p_ < 4) bad();
    uint32_t v;
    std::memcpy(&v, p_, 4);
    p_ += 4;
    return v;
  }
  void skip(int wire) {
    if (wire == 0)
      varint();
    else if (wire == 1) {
      if (end_ - p_ < 8) bad();
      p_ += 8;
    } else if (wire == 2)
      bytes();
    else if (wire == 5)
      fixed32();
    else
      bad();
  }
  [[noreturn]] void bad() const { throw Error(where_ + ": malformed SentencePiece model"); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  std::string where_;
};

Vocab read_spm(const fs::path& p, int64_t n_vocab) {
  const std::string data = read_text(p);
  Proto top(reinterpret_cast<const uint8_t*>(data.data()), data.size(), p.string());
  Vocab v;
  while (!top.done()) {
    int wire = 0;
    const uint64_t field = top.key(&wire);
    if (field != 1 || wire != 2) {
      top.skip(wire);
      continue;
    }
    auto [b, n] = top.bytes();
    Proto piece(b, n, p.string());
    std::string text;
    float score = 0;
    int32_t type = kNormal;
    while (!piece.done()) {
      int w = 0;
      const uint64_t f = piece.key(&w);
      if (f == 1 && w == 2) {
        auto [s, len] = piece.bytes();
        text.assign(reinterpret_cast<const char*>(s), len);
      } else if (f == 2 && w == 5) {
        const uint32_t bits = piece.fixed32();
        std::memcpy(&score, &bits, 4);
      } else if (f == 3 && w == 0) {
        type = int32_t(piece.varint());
        if (type < 1 || type > 6) piece.bad();
      } else {
        piece.skip(w);
      }
    }
    v.ids[text] = int64_t(v.tokens.size());
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.types.push_back(type);
  }
  if (v.tokens.empty()) throw Error(p.string() + ": no pieces in the SentencePiece model");
  if (int64_t(v.tokens.size()) > n_vocab) {
    throw Error(p.string() + ": " + std::to_string(v.tokens.size()) +
                " pieces, more than the model's " + std::to_string(n_vocab) + " embedding rows");
  }
  // added_tokens.json ({text: id}) extends the pieces, as llama.cpp's sentencepiece path does.
  const fs::path added = p.parent_path() / "added_tokens.json";
  if (fs::exists(added)) {
    const json a = read_json(added);
    std::map<int64_t, std::string> by_id;
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (it.value().is_number_unsigned()) by_id[it.value().get<int64_t>()] = it.key();
    }
    for (const auto& [id, text] : by_id) {
      if (id != int64_t(v.tokens.size()) || id >= n_vocab) continue;  // llama.cpp skips these too
      v.ids[text] = id;
      v.tokens.push_back(text);
      v.scores.push_back(-1000.f);
      v.types.push_back(kUserDefined);
    }
  }
  pad_vocab(v, n_vocab, -1000.f);
  return v;
}

// GPT-2's bytes_to_unicode, as UTF-8: the printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF)
// stand for themselves, the n-th other byte for U+0100 + n. tokenizer.ggml.tokens of a "gpt2"
// model hold token bytes in this form.
class Gpt2Bytes {
 public:
  Gpt2Bytes() {
    unsigned n = 0;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable =
          (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      const unsigned cp = printable ? b : 0x100 + n++;
      if (cp < 0x80) {
        map_[b] = std::string(1, char(cp));
      } else {  // all below U+0800: two UTF-8 bytes
        map_[b] = {char(0xc0 | (cp >> 6)), char(0x80 | (cp & 0x3f))};
      }
    }
  }
  std::string operator()(const std::string& bytes) const {
    std::string out;
    for (const char c : bytes) out += map_[static_cast<unsigned char>(c)];
    return out;
  }

 private:
  std::array<std::string, 256> map_;
};

// Strict base64 (RFC 4648, '=' padding): nullopt for anything else.
std::optional<std::string> base64_decode(const std::string& s) {
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    const int pad = last ? (s[i + 3] == '=') + (s[i + 2] == '=') : 0;
    if (pad == 1 && s[i + 2] == '=') return std::nullopt;  // "x=y=" is not padding
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const int d = k >= 4 - pad ? 0 : value(s[i + size_t(k)]);
      if (d < 0) return std::nullopt;
      v = (v << 6) | uint32_t(d);
    }
    out += char(v >> 16);
    if (pad < 2) out += char((v >> 8) & 0xff);
    if (pad < 1) out += char(v & 0xff);
  }
  return out;
}

// The merge that made `token` (rank `rank`): byte-level BPE over its bytes using only merges
// of lower rank, as tiktoken would encode it with the vocabulary cut below `rank`. Two parts
// left are the merge; anything else (a token BPE never builds) gives none, as llama.cpp's
// converter skips such tokens too.
std::optional<std::pair<std::string, std::string>> recover_merge(
    const std::string& token, int64_t rank, const std::unordered_map<std::string, int64_t>& ranks) {
  std::vector<std::string> parts;
  for (const char c : token) parts.emplace_back(1, c);
  while (parts.size() > 2) {
    size_t best = parts.size();
    int64_t best_rank = rank;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best == parts.size()) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + ptrdiff_t(best) + 1);
  }
  if (parts.size() != 2) return std::nullopt;
  return std::make_pair(parts[0], parts[1]);
}

// A tiktoken rank file (Hunyuan-A13B's hy.tiktoken: "<base64 token bytes> <rank>" per line,
// ranks 0..n-1 each once) -> gpt2 tokens with id = rank and the merges recovered from the
// ranks, as llama.cpp's converter does for tiktoken models; the special tokens (which the rank
// file does not hold) from tokenizer_config.json's added_tokens_decoder, as the released
// tokenizer's save_pretrained wrote them.
Vocab read_tiktoken(const fs::path& p, const json& tc, int64_t n_vocab,
                    std::vector<std::string>* merges) {
  const std::string where = p.string();
  const std::string text = read_text(p);
  const Gpt2Bytes gpt2_text;
  std::vector<std::string> by_rank;
  std::vector<bool> seen;
  std::unordered_map<std::string, int64_t> ranks;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string here = where + ":" + std::to_string(line_no) + ": ";
    const size_t sp = line.find(' ');
    const std::string b64 = line.substr(0, sp);
    const std::string r = sp == std::string::npos ? std::string() : line.substr(sp + 1);
    if (r.empty() || r.size() > 18 || r.find_first_not_of("0123456789") != std::string::npos) {
      throw Error(here + "not '<base64 token> <rank>': '" + gguf::printable(line.substr(0, 80)) +
                  "'");
    }
    const auto bytes = base64_decode(b64);
    if (!bytes || bytes->empty()) {
      throw Error(here + "'" + gguf::printable(b64.substr(0, 80)) + "' is not base64 token bytes");
    }
    const int64_t rank = std::stoll(r);
    if (rank >= n_vocab) {
      throw Error(here + "rank " + r + " is outside the model's " + std::to_string(n_vocab) +
                  " embedding rows");
    }
    if (size_t(rank) >= by_rank.size()) {
      by_rank.resize(size_t(rank) + 1);
      seen.resize(size_t(rank) + 1, false);
    }
    if (seen[size_t(rank)]) throw Error(here + "rank " + r + " given twice");
    auto [it, fresh] = ranks.emplace(*bytes, rank);
    if (!fresh) {
      throw Error(here + "token '" + gguf::printable(gpt2_text(*bytes)) + "' given twice (ranks " +
                  std::to_string(it->second) + " and " + r + ")");
    }
    seen[size_t(rank)] = true;
    by_rank[size_t(rank)] = *bytes;
  }
  if (by_rank.empty()) throw Error(where + ": no tokens");
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) {
      throw Error(where + ": rank " + std::to_string(i) + " is missing (ranks must run 0.." +
                  std::to_string(seen.size() - 1) + " without gaps)");
    }
  }
  Vocab v;
  v.tokens.assign(size_t(n_vocab), std::string());
  v.types.assign(size_t(n_vocab), 0);
  for (size_t i = 0; i < by_rank.size(); ++i) {
    v.tokens[i] = gpt2_text(by_rank[i]);
    v.types[i] = kNormal;
    v.ids[v.tokens[i]] = int64_t(i);
    if (by_rank[i].size() < 2) continue;
    if (auto m = recover_merge(by_rank[i], int64_t(i), ranks)) {
      merges->push_back(gpt2_text(m->first) + " " + gpt2_text(m->second));
    }
  }
  const std::string cfg_where = (p.parent_path() / "tokenizer_config.json").string();
  if (!tc.contains("added_tokens_decoder") || !tc["added_tokens_decoder"].is_object()) {
    throw Error(cfg_where + ": no added_tokens_decoder, which names the special tokens that " +
                p.filename().string() + " does not hold");
  }
  for (auto it = tc["added_tokens_decoder"].begin(); it != tc["added_tokens_decoder"].end(); ++it) {
    const json& a = it.value();
    const std::string& key = it.key();
    if (key.empty() || key.size() > 18 ||
        key.find_first_not_of("0123456789") != std::string::npos || !a.is_object() ||
        !a.contains("content") || !a["content"].is_string()) {
      throw Error(cfg_where + ": added_tokens_decoder entries need a numeric id and \"content\"");
    }
    const int64_t id = std::stoll(key);
    const std::string c = a["content"].get<std::string>();
    if (id < int64_t(by_rank.size()) || id >= n_vocab || v.types[size_t(id)] != 0) {
      throw Error(cfg_where + ": added token '" + gguf::printable(c) + "' has id " + key +
                  ", which is not free between the " + std::to_string(by_rank.size()) +
                  " ranked tokens and the model's " + std::to_string(n_vocab) + " embedding rows");
    }
    const bool special =
        (a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>()) ||
        looks_special(c);
    v.tokens[size_t(id)] = c;
    v.types[size_t(id)] = special ? kControl : kUserDefined;
    v.ids[c] = id;
  }
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] == 0) {
      v.tokens[i] = "[PAD" + std::to_string(i) + "]";
      v.types[i] = kUnused;
    }
  }
  return v;
}

// A token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> token_text(const json& tc, const char* key) {
  if (!tc.contains(key)) return std::nullopt;
  const json& x = tc[key];
  if (x.is_string()) return x.get<std::string>();
  if (x.is_object() && x.contains("content") && x["content"].is_string()) {
    return x["content"].get<std::string>();
  }
  return std::nullopt;
}

// The one *.tiktoken file of the directory (Hunyuan-A13B: hy.tiktoken); empty when none.
fs::path tiktoken_file(const fs::path& dir) {
  fs::path found;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".tiktoken") continue;
    if (!found.empty()) {
      throw Error(dir.string() + ": two tiktoken files (" + found.filename().string() + ", " +
                  e.path().filename().string() + "); which one is the tokenizer is not known");
    }
    found = e.path();
  }
  return found;
}

}  // namespace

void write_tokenizer(const TokenizerInput& in, gguf::Writer& w) {
  const fs::path dir(in.dir);
  const json tc = fs::exists(dir / "tokenizer_config.json")
                      ? read_json(dir / "tokenizer_config.json")
                      : json::object();
  const json& cfg = *static_cast<const json*>(in.config);
  Vocab v;
  std::vector<std::string> merges;
  // SentencePiece where llama.cpp's converter reads tokenizer.model (Mixtral / Llama, ERNIE-4.5).
  const bool spm =
      (in.arch == "llama" || in.arch == "ernie4_5-moe") && fs::exists(dir / "tokenizer.model");
  if (spm) {
    v = read_spm(dir / "tokenizer.model", in.n_vocab);
    w.set("tokenizer.ggml.model", gguf::Value::str("llama"));
    w.set("tokenizer.ggml.scores", gguf::Value::f32_array(v.scores));
    if (tc.contains("add_prefix_space") && tc["add_prefix_space"].is_boolean()) {
      w.set("tokenizer.ggml.add_space_prefix",
            gguf::Value::boolean(tc["add_prefix_space"].get<bool>()));
    }
  } else if (fs::exists(dir / "tokenizer.json")) {
    v = read_bpe(dir / "tokenizer.json", read_json(dir / "tokenizer.json"), in.n_vocab, &merges);
    w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
    w.set("tokenizer.ggml.pre", gguf::Value::str(in.pre));
  } else if (const fs::path tk = tiktoken_file(dir); !tk.empty()) {
    v = read_tiktoken(tk, tc, in.n_vocab, &merges);
    w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
    w.set("tokenizer.ggml.pre", gguf::Value::str(in.pre));
  } else {
    throw Error(in.dir + ": no tokenizer.json (or tokenizer.model, *.tiktoken) to convert");
  }
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(v.tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(v.types));
  if (!spm) w.set("tokenizer.ggml.merges", gguf::Value::str_array(merges));

  // Special tokens: tokenizer_config.json names them; config.json's ids are the fallback.
  const struct {
    const char* hf;
    const char* gguf;
    const char* config_id;
  } specials[] = {
      {"bos_token", "tokenizer.ggml.bos_token_id", "bos_token_id"},
      {"eos_token", "tokenizer.ggml.eos_token_id", "eos_token_id"},
      {"unk_token", "tokenizer.ggml.unknown_token_id", nullptr},
      {"pad_token", "tokenizer.ggml.padding_token_id", "pad_token_id"},
  };
  for (const auto& s : specials) {
    int64_t id = -1;
    if (auto text = token_text(tc, s.hf)) {
      auto it = v.ids.find(*text);
      if (it != v.ids.end())
        id = it->second;
      else if (in.warn)
        in.warn("tokenizer_config.json: " + std::string(s.hf) + " '" + gguf::printable(*text) +
                "' is not in the vocabulary");
    }
    if (id < 0 && s.config_id && cfg.contains(s.config_id) &&
        cfg[s.config_id].is_number_unsigned()) {
      id = cfg[s.config_id].get<int64_t>();
    }
    if (id >= 0 && id < in.n_vocab) w.set(s.gguf, gguf::Value::u32(uint32_t(id)));
  }
  for (const char* k : {"add_bos_token", "add_eos_token"}) {
    if (tc.contains(k) && tc[k].is_boolean()) {
      w.set(std::string("tokenizer.ggml.") + k, gguf::Value::boolean(tc[k].get<bool>()));
    }
  }

  // Chat template(s).
  if (tc.contains("chat_template") && tc["chat_template"].is_string()) {
    w.set("tokenizer.chat_template", gguf::Value::str(tc["chat_template"].get<std::string>()));
  } else if (tc.contains("chat_template") && tc["chat_template"].is_array()) {
    std::vector<std::string> names;
    for (const json& t : tc["chat_template"]) {
      if (!t.is_object() || !t.contains("name") || !t.contains("template") ||
          !t["name"].is_string() || !t["template"].is_string()) {
        throw Error(in.dir +
                    "/tokenizer_config.json: chat_template list entries need name and "
                    "template strings");
      }
      const std::string name = t["name"].get<std::string>();
      const std::string key =
          name == "default" ? "tokenizer.chat_template" : "tokenizer.chat_template." + name;
      w.set(key, gguf::Value::str(t["template"].get<std::string>()));
      if (name != "default") names.push_back(name);
    }
    if (!names.empty()) w.set("tokenizer.chat_templates", gguf::Value::str_array(names));
  } else if (fs::exists(dir / "chat_template.jinja")) {
    w.set("tokenizer.chat_template", gguf::Value::str(read_text(dir / "chat_template.jinja")));
  }
}

}  // namespace lynx::convert
