// The tokenizer of a Hugging Face model as llama.cpp's tokenizer.ggml.* keys.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "lynx/gguf.h"

namespace lynx::convert {

struct TokenizerInput {
  std::string dir;      // the checkpoint directory
  std::string arch;     // general.architecture: `llama` prefers a SentencePiece tokenizer.model
  std::string pre;      // tokenizer.ggml.pre for a byte-level BPE tokenizer
  int64_t n_vocab = 0;  // rows of the embedding: the token list is padded to it
  const void* config = nullptr;  // config.json (nlohmann::json*): bos/eos id fallbacks
  std::function<void(const std::string&)> warn;
};

// Writes tokenizer.ggml.{model, pre, tokens, token_type, merges | scores, *_token_id,
// add_bos_token, add_eos_token} and tokenizer.chat_template:
// - tokenizer.json of type BPE (byte-level) -> model "gpt2", as llama.cpp's _set_vocab_gpt2:
//   ids missing from the vocabulary become "[PAD<id>]" (UNUSED), added tokens CONTROL when
//   special or looking special (<|...|>, <｜...｜>), else USER_DEFINED; merges as "a b";
// - with neither tokenizer.json nor tokenizer.model, one *.tiktoken rank file (Hunyuan-A13B's
//   hy.tiktoken) -> model "gpt2": id = rank, merges recovered by BPE over each token with
//   lower ranks only (llama.cpp's way), special tokens from added_tokens_decoder;
// - tokenizer.model (SentencePiece protobuf) for `llama` -> model "llama" with the pieces'
//   scores and types, as _set_vocab_sentencepiece;
// special ids from tokenizer_config.json (bos_token, eos_token, unk_token, pad_token) looked up
// in the vocabulary, else config.json's bos_token_id / eos_token_id; the chat template from
// tokenizer_config.json ("chat_template", a string or a list of named templates) or
// chat_template.jinja. Throws lynx::Error for a missing or malformed tokenizer.
void write_tokenizer(const TokenizerInput& in, gguf::Writer& w);

}  // namespace lynx::convert
