// What converting one Hugging Face model family means, as data: which config.json fields
// become which GGUF keys, which HF tensor becomes which of the architecture's tensors
// (convert_hf_to_gguf.py and gguf-py's tensor_mapping.py), and the per-tensor transforms.
// One file per family (families/<family>.cc); a new family is one more file, its extern in
// families/common.h and one row in kFamilies (families.cc).
#pragma once
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "lynx/gguf.h"

namespace lynx::convert {

// config.json with checked accessors: a missing or mistyped field is a lynx::Error naming
// the field and the model_type.
class HfConfig {
 public:
  HfConfig(nlohmann::json j, std::string path);
  const nlohmann::json& json() const { return j_; }
  const std::string& model_type() const { return model_type_; }
  bool has(const char* key) const;  // present and not null
  int64_t get_int(const char* key) const;
  int64_t get_int(const char* key, int64_t def) const;
  double get_float(const char* key) const;
  double get_float(const char* key, double def) const;
  bool get_bool(const char* key, bool def) const;
  std::string get_string(const char* key, const std::string& def) const;
  [[noreturn]] void fail(const std::string& what) const;

 private:
  const nlohmann::json& at(const char* key) const;
  void lift_text_config();
  void lift_rope_parameters();
  void check_sizes() const;
  nlohmann::json j_;
  std::string path_, model_type_;
};

// A config.json field written as a GGUF key "{arch}.<gguf>".
enum class KeyKind : uint8_t { kU32, kF32, kBool };
struct KeyRule {
  const char* hf;
  const char* gguf;
  KeyKind kind = KeyKind::kU32;
  bool required = false;
};

// Per-tensor transforms.
enum class Transform : uint8_t {
  kNone,
  kPermuteQ,  // HF rotate-half rows -> GGUF adjacent pairs, over n_head (llama/Mixtral)
  kPermuteK,  // same over n_head_kv
  // DeepSeek kv_b_proj [n_head * (nope + v), kv_lora] per head into attn_k_b (the key rows,
  // transposed: GGUF ne [nope, kv_lora, n_head]) or attn_v_b (the value rows: ne [kv_lora, v,
  // n_head]), the layout newer llama.cpp writes.
  kKvBToKB,
  kKvBToVB,
  // gpt-oss's experts, one HF tensor per layer for all experts: "<hf>_blocks" / "<hf>_scales"
  // (MXFP4, [n_expert, rows, cols / 32, 16] and [n_expert, rows, cols / 32] uint8, rows are
  // outputs) or the dequantized "<hf>" ([n_expert, cols, rows], inputs first). gate_up_proj
  // interleaves gate and up rows: gate the even ones, up the odd ones.
  kFusedGate,
  kFusedUp,
  kFusedDown,  // every row
  // Qwen3-VL-MoE's experts, one float tensor per layer for all experts, inputs first:
  // gate_up_proj [n_expert, hidden, 2F] (gate the first F outputs, up the last F; HF chunks it
  // in two) and down_proj [n_expert, F, hidden]; F = moe_intermediate_size.
  kHalfGate,
  kHalfUp,
  kHalfDown,
  // [n_expert, 2n] interleaved gate / up biases: the even or odd columns.
  kEvenCols,
  kOddCols,
  // Values: w + 1 (the checkpoint's (1 + w) RMSNorm weights, stored by llama.cpp with the 1
  // added) and -exp(w) (Gated DeltaNet's A_log -> ssm_a).
  kPlusOne,
  kNegExp,
  // Qwen3-Next's in_proj_qkvz, per key head g [q_g, k_g, v_g, z_g] (v_g, z_g: its n_v / n_k
  // value heads): all q, all k, all v (attn_qkv), or all z (attn_gate).
  kQkvzToQkv,
  kQkvzToZ,
  // A depthwise conv1d weight [channels, 1, kernel] as [channels, kernel].
  kConv1d,
  // Qwen3.5's value heads from grouped by key head (head g r + j, r = n_v / n_k) to tiled
  // (j n_k + g), as llama.cpp's converter writes them: the v rows of in_proj_qkv / the conv
  // (after the 2 n_k key-head rows of q and k), the rows of in_proj_z (head_v_dim per head),
  // of in_proj_b / in_proj_a and the elements of dt_bias (one per head), A_log's elements
  // (and -exp), out_proj's columns.
  kTiledQkv,
  kTiledConv1d,
  kTiledRows,
  kTiledNegExp,
  kTiledCols,
  // Experts fused per layer, outputs first (transformers 5 layout of Qwen3.5-MoE):
  // gate_up_proj [n_expert, 2F, hidden] (gate the first F rows, up the last F) and down_proj
  // [n_expert, hidden, F].
  kRowsGate,
  kRowsUp,
  kRowsDown,
  // Experts stacked per layer as [n_expert, rows, cols] (Step-3.5's moe.gate_proj / up_proj /
  // down_proj): one matrix per expert as it is.
  kStacked3d,
};

// Which of two layouts of the same weights a rule writes: a choice of the converter
// (ConvertOptions::mla_split), not a fact of the layer.
enum class Layout : uint8_t {
  kAny,
  kMlaWhole,  // MLA's key/value up-projection kept as one attn_kv_b (the default)
  kMlaSplit,  // ... or split per head into attn_k_b / attn_v_b
};

// Where one of the architecture's tensors comes from in the checkpoint. Which tensors a file
// has, and in which layers, is the architecture's (src/model/arch: its tensor groups, resolved
// by the loader's read_config against the metadata convert writes, with the checkpoint's tensors
// deciding the optional groups); a rule adds only the Hugging Face name and the transform.
// `tensor` is the GGUF name (model/arch/tensor_names.h; a layer's "blk.N." is added). "{L}" in
// hf is the layer; an hf name with "{E}" is read once per routed expert and stacked into one
// 3-D tensor (GGUF ne = [cols, rows, n_expert]).
struct TensorRule {
  const char* tensor;  // arch::tensor::k*
  const char* hf;
  Transform transform = Transform::kNone;
  Layout layout = Layout::kAny;
};

// A tensor the architecture (src/model/arch) declares that the family's checkpoints never
// have, and why: the converter writes none, the coverage test accepts it without a rule.
struct Absent {
  const char* tensor;  // arch::tensor::k*
  const char* why;
};

struct Family {
  const char* model_type;                              // config.json "model_type"
  const char* arch;                                    // general.architecture
  std::span<const std::span<const KeyRule>> keys;      // groups of field copies
  std::span<const TensorRule> global;                  // outside the layers
  std::span<const std::span<const TensorRule>> layer;  // groups, per layer ("{L}")
  const char* tokenizer_pre;                           // tokenizer.ggml.pre for a BPE tokenizer
  // Keys that are not a plain field copy (computed or defaulted); may be null.
  void (*extra_keys)(const HfConfig& c, gguf::Writer& w) = nullptr;
  // Tensors computed from the config rather than read (step35's rope_freqs); may be null.
  void (*extra_tensors)(const HfConfig& c, gguf::Writer& w) = nullptr;
  // Keys for the split MLA layout (ConvertOptions::mla_split); null: the family has no kv_b.
  void (*split_keys)(const HfConfig& c, gguf::Writer& w) = nullptr;
  // config field counting next-token-prediction layers after num_hidden_layers that are
  // converted (block_count includes them, as llama.cpp writes it; the architecture says what
  // such a layer holds); null: such layers are dropped.
  const char* nextn_key = nullptr;
  // config field (bool, false when absent) that says whether the checkpoint has q/k norms,
  // where the architecture takes them as optional per file (GLM-4.5 has them, 4.5-Air not): the
  // checkpoint must agree with it. null: the architecture decides alone.
  const char* qk_norm_key = nullptr;
  // Checkpoint tensors under these prefixes are not converted (vision / audio towers that
  // llama.cpp's converter writes to a separate mmproj file); empty: every tensor must be used.
  std::span<const char* const> ignore_prefixes = {};
  std::span<const Absent> absent = {};
  // Per-layer tensors outside the description's tensor groups, which the loader checks by name
  // and shape but does not run (GLM-5's DSA indexer): written as they are in each layer whose
  // checkpoint has them, so the file carries what llama.cpp loads. Not in the NextN layers.
  std::span<const TensorRule> unrun = {};
  // Other config.json model_type names for the same layout and rules (a release's own
  // remote-code name, an older class name); matched like model_type.
  std::span<const char* const> other_model_types = {};
};

// The rule writing GGUF tensor `tensor` ("blk.N." stripped) in this layout, or null.
const TensorRule* find_rule(const Family& f, std::string_view tensor, bool mla_split);
// The reason the family's checkpoints lack `tensor`, or null.
const char* absent_reason(const Family& f, std::string_view tensor);

// An architecture with no convert family, and why (the coverage test requires every
// registered architecture to have a family or a line here).
struct Unconverted {
  const char* arch;
  const char* why;
};
std::span<const Unconverted> unconverted();

std::span<const Family* const> families();
// Throws naming the model_type and the supported list.
const Family& find_family(const std::string& model_type);

}  // namespace lynx::convert
