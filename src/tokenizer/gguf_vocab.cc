// Tokenizer::from_gguf: the `tokenizer.ggml.*` metadata (llama.cpp's key names) -> Vocab.
#include <algorithm>
#include <cctype>

#include "lynx/gguf.h"
#include "tokenizer/impl.h"

namespace lynx {

namespace {

// A special token id from the metadata. An id outside the vocabulary is refused (here when it
// does not fit an int32, in Tokenizer::from_vocab otherwise) rather than replaced by a default
// that would silently put another token where the model expects this one; only the padding
// id, which nothing here reads, is dropped instead.
std::optional<int32_t> opt_id(const gguf::File& f, std::string_view key) {
  const gguf::Value* v = f.find(key);
  if (!v) return std::nullopt;
  const int64_t id = v->as_int(key);
  if (id < 0 || id > INT32_MAX) {
    if (key == "tokenizer.ggml.padding_token_id") return std::nullopt;
    throw Error(f.path() + ": " + std::string(key) + " is " + std::to_string(id) +
                ", not a token id of the vocabulary");
  }
  return static_cast<int32_t>(id);
}

std::optional<bool> opt_bool(const gguf::File& f, std::string_view key) {
  const gguf::Value* v = f.find(key);
  if (!v) return std::nullopt;
  return v->as_bool(key);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  Vocab v;
  if (!f.has("tokenizer.ggml.model")) {
    throw Error(f.path() + ": no tokenizer in the file (tokenizer.ggml.model is missing)");
  }
  v.model = f.get_string("tokenizer.ggml.model");
  v.pre = f.get_string("tokenizer.ggml.pre", "");

  const auto& toks = f.get_array("tokenizer.ggml.tokens");
  v.tokens.reserve(toks.size());
  for (const auto& t : toks) v.tokens.push_back(t.as_string("tokenizer.ggml.tokens"));

  if (const gguf::Value* s = f.find("tokenizer.ggml.scores")) {
    const auto& arr = s->as_array("tokenizer.ggml.scores");
    v.scores.reserve(arr.size());
    for (const auto& x : arr) v.scores.push_back(static_cast<float>(x.as_float("scores")));
  }
  if (const gguf::Value* t = f.find("tokenizer.ggml.token_type")) {
    const auto& arr = t->as_array("tokenizer.ggml.token_type");
    v.types.reserve(arr.size());
    for (const auto& x : arr) {
      v.types.push_back(static_cast<TokenType>(x.as_int("tokenizer.ggml.token_type")));
    }
  }
  if (v.model == "gpt2") {
    if (!f.has("tokenizer.ggml.merges")) {
      throw Error(f.path() + ": gpt2 tokenizer without merges (tokenizer.ggml.merges)");
    }
    const auto& arr = f.get_array("tokenizer.ggml.merges");
    v.merges.reserve(arr.size());
    for (const auto& m : arr) v.merges.push_back(m.as_string("tokenizer.ggml.merges"));
  }
  v.bos = opt_id(f, "tokenizer.ggml.bos_token_id");
  v.eos = opt_id(f, "tokenizer.ggml.eos_token_id");
  v.eot = opt_id(f, "tokenizer.ggml.eot_token_id");
  v.eom = opt_id(f, "tokenizer.ggml.eom_token_id");
  v.unk = opt_id(f, "tokenizer.ggml.unknown_token_id");
  v.pad = opt_id(f, "tokenizer.ggml.padding_token_id");
  v.add_bos = opt_bool(f, "tokenizer.ggml.add_bos_token");
  v.add_eos = opt_bool(f, "tokenizer.ggml.add_eos_token");
  v.add_space_prefix = opt_bool(f, "tokenizer.ggml.add_space_prefix");

  // llama.cpp strips whitespace after the special tokens of Phi-3 models, recognized by name.
  std::string name = f.get_string("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  v.rstrip_after_special =
      name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;

  try {
    return from_vocab(std::move(v));
  } catch (const Error& e) {
    throw Error(f.path() + ": " + e.what());
  }
}

}  // namespace lynx
