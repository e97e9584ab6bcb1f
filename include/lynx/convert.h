// Converting a Hugging Face checkpoint to GGUF: `lynx-moe convert HF_DIR -o OUT.gguf`.
//
// Reads config.json, the safetensors weights (one file or shards with
// model.safetensors.index.json) and the tokenizer (tokenizer.json / tokenizer.model,
// tokenizer_config.json with the chat template), and writes a GGUF with llama.cpp's keys and
// tensor names, so the file loads in lynx-moe and in llama.cpp. Streaming: the safetensors are
// memory-mapped and each GGUF tensor is built and written in turn, so the extra memory is one
// output tensor. The families and their mapping tables are in src/convert/families.cc;
// docs/models.md describes the command.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lynx/gguf.h"

namespace lynx {

// The config.json model_types convert knows.
std::vector<std::string> convert_model_types();

struct ConvertOptions {
  // "auto" (F32 when any matrix is F32 in the checkpoint, else BF16 when any is BF16, else
  // F16: no rounding), or a mix of `quantize` (F32, F16, BF16, Q8_0, Q4_K_M, ...): the types
  // llama-quantize would choose per tensor; norms, biases and routers stay F32.
  std::string type = "auto";
  int n_threads = 1;          // rows of a tensor converted in parallel
  std::string tokenizer_pre;  // overrides the family's tokenizer.ggml.pre (BPE tokenizers)
  std::string name;           // general.name; empty: the directory's name
  // DeepSeek (MLA): write kv_b_proj split per head into attn_k_b / attn_v_b with the *_mla
  // head-size keys, as newer llama.cpp converters do; false: one attn_kv_b (older converters;
  // lynx-moe loads both).
  bool mla_split = false;
  // After each tensor is written: index, count, GGUF name, shape, type.
  std::function<void(size_t i, size_t n, const gguf::TensorInfo& t)> progress;
  std::function<void(const std::string&)> warn;
};

struct ConvertResult {
  std::string model_type, arch;
  size_t n_tensors = 0;
  size_t bytes_in = 0, bytes_out = 0;  // tensor data read / written
  std::string type;                    // the mix used ("F32", "BF16", ... for "auto")
};

// Throws lynx::Error naming the problem for a bad checkpoint (missing config key, unknown
// model_type, missing or mis-shaped tensor, truncated safetensors, bad offsets, unsupported
// dtype, missing shard, unused tensors); nothing is left at `out` then.
ConvertResult convert_hf(const std::string& hf_dir, const std::string& out,
                         const ConvertOptions& opts = {});

}  // namespace lynx
