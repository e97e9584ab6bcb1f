// Quantizing a GGUF model to the ggml block types: `lynx-moe quantize IN OUT MIX`.
//
// A mix (Q4_K_M, Q5_K_M, Q6_K, IQ4_XS, ...) names a default type and rules that give some
// tensors more (or fewer) bits, the rules llama.cpp's llama-quantize applies (its
// llama_tensor_get_type), so a file quantized here holds the types a user of that tool
// expects: output.weight Q6_K, attn_v and ffn_down promoted in the *_M mixes, routers and
// norms kept in their float type, a 32-element fallback for rows a super-block does not
// divide. docs/models.md lists the rules per mix.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lynx/gguf.h"
#include "lynx/imatrix.h"

namespace lynx {

// The mix names, as llama-quantize spells them ("Q4_K_M", ...).
std::vector<std::string> quant_mix_names();
// The llama_ftype a mix writes to general.file_type (case-insensitive name; throws lynx::Error
// for an unknown one), and whether its weights are a block-quantized type.
uint32_t quant_mix_ftype(const std::string& mix);
bool quant_mix_is_float(const std::string& mix);

// What the rules need to know about the model (from its metadata).
struct QuantModelInfo {
  int n_layer = 0;
  int n_expert = 0;
  int n_gqa = 1;           // n_head / n_head_kv
  bool has_output = true;  // false: the output projection is token_embd (tied)
  int n_attention_wv = 0;  // attn_v tensors in the file
};

// A tensor's target type under `mix` (case-insensitive name; throws lynx::Error for an unknown
// one). `i_attention_wv` is the index of this attn_v tensor among the file's attn_v tensors
// (the rules promote some layers); ignored for other tensors. Returns the tensor's own type for
// tensors that stay as they are (1D, routers, a non-".weight" name).
gguf::TensorType quant_tensor_type(const std::string& mix, const QuantModelInfo& info,
                                   const gguf::TensorInfo& t, int i_attention_wv);

struct QuantizeOptions {
  std::string mix;    // "Q4_K_M", "Q8_0", ...
  int n_threads = 1;  // rows of a tensor are quantized in parallel
  // Called after each tensor: its index (from 0), the count, name, source and target type.
  std::function<void(size_t i, size_t n, const gguf::TensorInfo& t, gguf::TensorType to)> progress;
  // Called with warnings (requantizing an already quantized source, tensors the importance
  // matrix has no entry for).
  std::function<void(const std::string&)> warn;
  // Importance matrix (read_imatrix): the types with an importance-weighted quantizer
  // (quantize_weighted.h: the K-quants, IQ4_NL/IQ4_XS, Q4_0/Q4_1/Q5_0/Q5_1) weight each
  // column's error by it. nullptr: the reference quantizers. Q2_K_S requires one, as
  // llama-quantize does (lynx::Error without).
  const Imatrix* imatrix = nullptr;
};

struct QuantizeResult {
  size_t bytes_in = 0, bytes_out = 0;                           // tensor data
  std::vector<std::pair<std::string, gguf::TensorType>> types;  // per tensor, file order
  int n_weighted = 0;  // tensors quantized with importance weights
};

// Reads `in` (tensors in F32/F16/BF16; quantized sources are requantized with a warning),
// writes `out` with the mix's types; metadata copied, general.file_type set to the mix's
// llama_ftype and general.quantization_version to 2, as llama-quantize writes them. An imatrix
// entry whose shape does not fit its tensor is a lynx::Error before anything is written.
QuantizeResult quantize_model(const std::string& in, const std::string& out,
                              const QuantizeOptions& opts);

}  // namespace lynx
