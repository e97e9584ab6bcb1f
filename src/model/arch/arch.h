// Architecture descriptions: what one model family is, as data. One file per family
// (src/model/arch/<family>.cc) holds its metadata keys, its tensor table (llama.cpp's names,
// written once in tensor_names.h) and its per-layer block kinds; registry.cc lists them. Loading
// (model.cc), synth (synth.cc) and the forward pass (through ModelConfig::layer_kinds) all read
// these descriptions, so a new family is one new file plus its NumPy reference.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lynx/gguf.h"
#include "lynx/model.h"
#include "model/arch/tensor_names.h"
#include "model/weights.h"

namespace lynx::arch {

// The symbols a tensor's shape is written in, resolved against a ModelConfig (dim()).
enum class Dim : uint8_t {
  kOne,
  kEmbd,        // n_embd
  kQ,           // n_head * head_dim
  kKV,          // n_head_kv * head_dim
  kQkv,         // (n_head + 2 n_head_kv) * head_dim (a fused attn_qkv's rows)
  kHeadDim,     // head_dim
  kFf,          // dense FFN width
  kFfExp,       // expert FFN width
  kFfShexp,     // shared-expert FFN width
  kExpert,      // n_expert
  kHeads,       // n_head
  kQLora,       // MLA: q_lora_rank
  kKvLora,      // MLA: kv_lora_rank
  kKvLoraRope,  // MLA: kv_lora_rank + qk_rope_dim (attn_kv_a_mqa rows)
  kKvBMla,      // MLA: n_head * (qk_nope_dim + v_head_dim) (attn_kv_b rows)
  kVMla,        // MLA: n_head * v_head_dim (attn_output cols)
  kNopeDim,     // MLA: qk_nope_dim
  kVHeadDim,    // MLA: v_head_dim
  kSelectBias,  // 1 when the gating has a selection bias, else 0 (synth: write exp_probs_b)
  kQkNorm,      // 1 when the config has q/k norms, else 0 (families where they are optional)
  kEmbd2,       // 2 * n_embd (NextN: eh_proj takes the embedding and the hidden state)
  kVocab,       // n_vocab
  kQAlt,        // alt's heads * alt.head_dim (ModelConfig::alt: gemma4's full-attention layers)
  kKVAlt,       // alt.n_head_kv * alt.head_dim
  kHeadDimAlt,  // alt.head_dim
  kAltV,        // 1 when the alt layers have their own attn_v (not alt.k_eq_v), else 0
  kFfExp2,      // 2 * n_ff_exp (a fused ffn_gate_up_exps' rows)
  kHeadsAlt,    // alt.n_head (0: n_head): the alt layers' query heads (step35's full ones)
  kAttnGate,    // 1 when the config has an attention gate (ModelConfig::attn_gate), else 0
  kQ2,          // 2 * n_head * head_dim (qwen3next's attn_q: query and gate per head)
  kSsmConvK,    // delta_net.conv_kernel
  kSsmConv,     // delta_net.conv_dim() (attn_qkv's rows, the conv's channels)
  kSsmV,        // delta_net.value_dim() (attn_gate's rows, ssm_out's cols)
  kSsmVHeads,   // delta_net.n_v_heads
  kSsmVHeads2,  // 2 * delta_net.n_v_heads (ssm_ba's rows)
  kSsmHeadV,    // delta_net.head_v_dim
};
int64_t dim(const ModelConfig& c, Dim d);

// How synth fills a tensor (random values, seeded by the tensor's name).
enum class Init : uint8_t {
  kNorm,     // vector: 1 + 0.05 N(0,1)
  kBias,     // vector: 0.02 N(0,1)
  kGateVec,  // vector: N(0,1) / sqrt(n_embd) (a gate dotted with the normed input)
  kMatrix,   // matrix in the model's weight type: N(0,1) / sqrt(cols)
  kRouter,   // matrix kept F32: router_std N(0,1) / sqrt(cols)
  kConv,     // vector table: N(0,1) / sqrt(cols) (a depthwise conv's taps)
  kDecayA,   // vector: -exp(0.5 N(0,1) - 1), as -exp(A_log) is negative (ssm_a)
};

// One tensor of a layer: its llama.cpp name after "blk.N.", its shape (ggml order: cols, rows,
// matrices) and where the loader puts it. A vector has `vec` set and usually rows = mats =
// kOne; a `vec` with rows (gpt-oss's per-expert biases, [cols x rows]) is bound as one F32
// array of rows x cols.
struct TensorSpec {
  const char* name;
  Dim cols, rows = Dim::kOne, mats = Dim::kOne;
  Weight LayerWeights::*mat = nullptr;
  const float* LayerWeights::*vec = nullptr;
  Init init = Init::kMatrix;
  bool required = true;  // within its group
};

// Tensors that come and go together. An optional group is bound when its `trigger` tensor is
// in the file (then all its required tensors must be); `infer`, when not kOne and still 0 in
// the config, is read from the trigger's rows (as the shared-expert width is). synth writes an
// optional group when dim(`infer`) > 0.
struct TensorGroup {
  std::span<const TensorSpec> tensors;
  bool optional = false;
  const char* trigger = nullptr;
  Dim infer = Dim::kOne;
  // The group exists only when dim(`need`) > 0 (== 0 with need_zero): q through a low rank
  // or directly, as q_lora_rank says.
  Dim need = Dim::kOne;
  bool need_zero = false;
  bool synth = true;  // false: an alternative layout synth does not write (attn_kv_b)
};
bool group_applies(const ModelConfig& c, const TensorGroup& g);

// Which tensor groups a layer of each block kind has.
struct BlockTables {
  std::span<const TensorGroup> attn_gqa = {};
  std::span<const TensorGroup> attn_mla = {};
  std::span<const TensorGroup> attn_alt = {};    // LayerKind::alt layers (gemma4's full ones)
  std::span<const TensorGroup> attn_delta = {};  // AttnKind::kDeltaNet layers
  std::span<const TensorGroup> ffn_dense = {};
  std::span<const TensorGroup> ffn_moe = {};  // routed experts, and the shared expert's group
};

struct ArchDesc {
  const char* name;  // general.architecture
  RopeType rope = RopeType::kNorm;
  QKNorm qk_norm = QKNorm::kNone;
  bool qkv_bias = false;
  bool norm_topk = true;  // default of {arch}.expert_weights_norm
  bool moe = false;       // experts required (false: dense, or optional as for `llama`)
  ExpertAct expert_act = ExpertAct::kSwiglu;  // the experts' activation (ModelConfig)
  BlockTables blocks;
  // The family's own metadata keys, read after the common ones (model.cc read_config) and
  // written by synth after the common ones; nullptr: none.
  void (*read_metadata)(const gguf::File& f, ModelConfig& c) = nullptr;
  void (*write_metadata)(const ModelConfig& c, gguf::Writer& w) = nullptr;
  // The block kinds of layer il (default: GQA attention; MoE when the file has experts).
  LayerKind (*layer_kind)(const ModelConfig& c, int il) = nullptr;
  // Non-null: the family runs YaRN rope scaling ({arch}.rope.scaling.type = yarn); called
  // after read_rope_scaling filled c.yarn with llama.cpp's generic values, to apply the
  // family's own magnitude / attention-scale convention. nullptr: YaRN files are refused.
  void (*yarn_convention)(ModelConfig& c) = nullptr;
  // The tensors a next-token-prediction block (ModelConfig::n_layer_nextn) has besides its
  // layer's block kinds: synth writes them; the loader skips NextN blocks whole.
  std::span<const TensorGroup> nextn = {};
};

// Metadata readers that validate (registry.cc). int_in: an integer key in [lo, hi] (`def`
// when absent); positive_int: required, in [1, kMaxDim]; positive_float: positive and finite.
constexpr int64_t kMaxDim = int64_t(1) << 30;
int int_in(const gguf::File& f, const std::string& key, int64_t def, int64_t lo, int64_t hi);
int positive_int(const gguf::File& f, const std::string& key);
float positive_float(const gguf::File& f, const std::string& key, double def);

// {arch}.rope.scaling.*, after the family's own keys (the rope dimension must be known):
// absent or `none` leaves c.yarn off; `yarn` (for a family with yarn_convention) reads the
// factor (required), original_context_length (default: context_length), yarn_beta_fast /
// yarn_beta_slow (32 / 1) and yarn_log_multiplier, and computes the ramp's corners; any other
// type, or a bad value, throws naming the key.
void read_rope_scaling(const gguf::File& f, const ArchDesc& a, ModelConfig& c);

// A per-layer key: an array of n_layer entries (as converters write head counts, the sliding
// pattern, clamp limits) or one value for every layer; an array of another length throws
// naming the key. Absent: `def` for every layer, or a throw when def is empty (required).
std::vector<int64_t> per_layer_ints(const gguf::File& f, const std::string& key, int n_layer,
                                    std::optional<int64_t> def = std::nullopt);
std::vector<float> per_layer_floats(const gguf::File& f, const std::string& key, int n_layer,
                                    std::optional<float> def = std::nullopt);

// Every registered family; find() throws naming the architecture and the supported list.
std::span<const ArchDesc* const> all();
const ArchDesc& find(const std::string& name);

// The block kinds of every layer (desc.layer_kind or the default) and the groups of one.
LayerKind layer_kind(const ArchDesc& a, const ModelConfig& c, int il);
std::span<const TensorGroup> attn_groups(const ArchDesc& a, const LayerKind& k);
std::span<const TensorGroup> ffn_groups(const ArchDesc& a, const LayerKind& k);

// Tensor tables shared by families.
// Outside the layers, the same in every family (model.cc loads them, synth.cc writes them);
// without output.weight the output is tied to token_embd.
inline constexpr TensorSpec kGlobalTensors[] = {
    {tensor::kTokenEmbd, Dim::kEmbd, Dim::kVocab},
    {tensor::kOutputNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, nullptr, Init::kNorm},
    {.name = tensor::kOutput, .cols = Dim::kEmbd, .rows = Dim::kVocab, .required = false},
};
inline constexpr TensorSpec kGqaTensors[] = {
    {tensor::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::attn_norm,
     Init::kNorm},
    {tensor::kAttnQ, Dim::kEmbd, Dim::kQ, Dim::kOne, &LayerWeights::wq},
    {tensor::kAttnK, Dim::kEmbd, Dim::kKV, Dim::kOne, &LayerWeights::wk},
    {tensor::kAttnV, Dim::kEmbd, Dim::kKV, Dim::kOne, &LayerWeights::wv},
    {tensor::kAttnOutput, Dim::kQ, Dim::kEmbd, Dim::kOne, &LayerWeights::wo},
};
// Attention with one fused projection (attn_qkv: q rows, then k, then v), split at load.
inline constexpr TensorSpec kFusedQkvTensors[] = {
    {tensor::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::attn_norm,
     Init::kNorm},
    {tensor::kAttnQkv, Dim::kEmbd, Dim::kQkv, Dim::kOne, &LayerWeights::wqkv},
    {tensor::kAttnOutput, Dim::kQ, Dim::kEmbd, Dim::kOne, &LayerWeights::wo},
};
inline constexpr TensorSpec kQkvBias[] = {
    {tensor::kAttnQBias, Dim::kQ, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::bq, Init::kBias},
    {tensor::kAttnKBias, Dim::kKV, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::bk, Init::kBias},
    {tensor::kAttnVBias, Dim::kKV, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::bv, Init::kBias},
};
inline constexpr TensorSpec kQkNormPerHead[] = {
    {tensor::kAttnQNorm, Dim::kHeadDim, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::q_norm,
     Init::kNorm},
    {tensor::kAttnKNorm, Dim::kHeadDim, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::k_norm,
     Init::kNorm},
};
inline constexpr TensorSpec kQkNormFull[] = {
    {tensor::kAttnQNorm, Dim::kQ, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::q_norm,
     Init::kNorm},
    {tensor::kAttnKNorm, Dim::kKV, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::k_norm,
     Init::kNorm},
};
inline constexpr TensorSpec kDenseFfn[] = {
    {tensor::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::ffn_norm,
     Init::kNorm},
    {tensor::kFfnGate, Dim::kEmbd, Dim::kFf, Dim::kOne, &LayerWeights::ffn_gate},
    {tensor::kFfnUp, Dim::kEmbd, Dim::kFf, Dim::kOne, &LayerWeights::ffn_up},
    {tensor::kFfnDown, Dim::kFf, Dim::kEmbd, Dim::kOne, &LayerWeights::ffn_down},
};
// The router stays F32, as llama.cpp's quantizer leaves it.
inline constexpr TensorSpec kMoeFfn[] = {
    {tensor::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::ffn_norm,
     Init::kNorm},
    {tensor::kFfnGateInp, Dim::kEmbd, Dim::kExpert, Dim::kOne, &LayerWeights::router, nullptr,
     Init::kRouter},
    {tensor::kFfnGateExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::gate_exps},
    {tensor::kFfnUpExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::up_exps},
    {tensor::kFfnDownExps, Dim::kFfExp, Dim::kEmbd, Dim::kExpert, &LayerWeights::down_exps},
};
// The shared expert, and the gate (qwen2moe) that scales its output by sigmoid(gate . x).
inline constexpr TensorSpec kSharedExpert[] = {
    {tensor::kFfnGateShexp, Dim::kEmbd, Dim::kFfShexp, Dim::kOne, &LayerWeights::gate_shexp},
    {tensor::kFfnUpShexp, Dim::kEmbd, Dim::kFfShexp, Dim::kOne, &LayerWeights::up_shexp},
    {tensor::kFfnDownShexp, Dim::kFfShexp, Dim::kEmbd, Dim::kOne, &LayerWeights::down_shexp},
};
inline constexpr TensorSpec kSharedGate[] = {
    {tensor::kFfnGateInpShexp, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::shexp_gate,
     Init::kGateVec},
};
// A NextN block's own embedding and output head, which some checkpoints carry and llama.cpp
// loads when present (TENSOR_NOT_REQUIRED); synth does not write them, the loader skips NextN
// blocks whole.
inline constexpr TensorSpec kNextnEmbedTokens[] = {
    {tensor::kNextnEmbedTokens, Dim::kEmbd, Dim::kVocab},
};
inline constexpr TensorSpec kNextnSharedHead[] = {
    {tensor::kNextnSharedHeadHead, Dim::kEmbd, Dim::kVocab},
};
inline constexpr TensorGroup kNextnOptional[] = {
    {.tensors = kNextnEmbedTokens,
     .optional = true,
     .trigger = tensor::kNextnEmbedTokens,
     .synth = false},
    {.tensors = kNextnSharedHead,
     .optional = true,
     .trigger = tensor::kNextnSharedHeadHead,
     .synth = false},
};
// The MoE FFN of the GQA families: routed experts, and a shared expert (with its optional
// gate) when the file has one.
inline constexpr TensorGroup kMoeOptionalShared[] = {
    {kMoeFfn},
    {.tensors = kSharedExpert,
     .optional = true,
     .trigger = tensor::kFfnUpShexp,
     .infer = Dim::kFfShexp},
    {.tensors = kSharedGate,
     .optional = true,
     .trigger = tensor::kFfnGateInpShexp,
     .need = Dim::kFfShexp},
};

}  // namespace lynx::arch
