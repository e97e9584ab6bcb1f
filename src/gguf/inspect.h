// A model-level summary of a GGUF file (what `lynx-moe inspect` prints): architecture and
// hyper-parameters from the llama.cpp metadata keys, the MoE layout, and where the bytes
// are: per weight type, and routed-expert weights (streamed per activated expert, the
// quantity Lynx reduces) versus everything else.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lynx/gguf.h"

namespace lynx::gguf {

struct TypeStats {
  TensorType type = TensorType::F32;
  size_t count = 0;
  uint64_t bytes = 0;
};

struct ModelSummary {
  std::string path;
  uint64_t file_size = 0;
  uint32_t version = 0;
  uint32_t alignment = 0;
  size_t n_metadata = 0;
  std::string architecture;  // general.architecture ("" when absent)
  std::string name;          // general.name
  // Hyper-parameters from `{arch}.*` keys; empty when the file does not say. Per-layer
  // arrays (some architectures vary head counts by layer) are reported by their maximum.
  std::optional<int64_t> n_layer, n_embd, n_head, n_head_kv, n_ctx, n_vocab;
  std::optional<int64_t> n_expert, n_expert_used, n_expert_shared;
  // First tensors found of the shared-expert kinds (e.g. "blk.0.ffn_up_shexp.weight"),
  // "" when the file has none. DeepSeek's first layers are dense, so any block counts.
  std::string shexp_gate_inp_tensor, shexp_up_tensor;

  size_t n_tensors = 0;
  uint64_t tensor_bytes = 0;
  uint64_t expert_bytes = 0;         // routed experts: *_exps tensors
  uint64_t shared_expert_bytes = 0;  // *_shexp tensors (always active, dense)
  uint64_t other_bytes = 0;          // attention, norms, embeddings, routers, dense FFNs
  std::vector<TypeStats> types;      // by type value, only types present
};

ModelSummary summarize(const File& f);

struct InspectOptions {
  bool tensors = false;   // list every tensor (always included in JSON)
  bool metadata = false;  // list every metadata key with its value
};

// Human-readable report.
std::string format_summary(const File& f, const ModelSummary& s, const InspectOptions& opt);
// JSON report (nlohmann-json); metadata strings that are not valid UTF-8 are kept as
// replacement characters when dumped with error_handler_t::replace.
nlohmann::ordered_json summary_json(const File& f, const ModelSummary& s,
                                    const InspectOptions& opt);
// A metadata value as JSON (arrays recursively).
nlohmann::ordered_json value_json(const Value& v);
// "1.50 MiB"
std::string format_bytes(uint64_t bytes);

}  // namespace lynx::gguf
