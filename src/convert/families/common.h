// What the family tables (src/convert/families/<family>.cc) share: the config fields every
// family copies, the rule groups of the common Hugging Face layouts, and small helpers.
#pragma once
#include <string>

#include "convert/family.h"
#include "model/arch/tensor_names.h"

namespace lynx::convert::table {

namespace T = arch::tensor;
using K = KeyKind;
using Rules = std::span<const TensorRule>;
using Keys = std::span<const KeyRule>;

// Fields every family shares (Model.set_gguf_parameters).
inline constexpr KeyRule kBaseKeys[] = {
    {"num_hidden_layers", "block_count", K::kU32, true},
    {"max_position_embeddings", "context_length"},
    {"hidden_size", "embedding_length", K::kU32, true},
    {"intermediate_size", "feed_forward_length"},
    {"num_attention_heads", "attention.head_count", K::kU32, true},
    {"num_key_value_heads", "attention.head_count_kv"},
    {"rope_theta", "rope.freq_base", K::kF32},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon", K::kF32, true},
};

inline constexpr KeyRule kHeadDimKeys[] = {
    {"head_dim", "attention.key_length"},
    {"head_dim", "attention.value_length"},
};

inline constexpr KeyRule kQwenMoeKeys[] = {
    {"num_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length"},
    {"shared_expert_intermediate_size", "expert_shared_feed_forward_length"},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
};

inline constexpr TensorRule kGlobal[] = {
    {T::kTokenEmbd, "model.embed_tokens.weight"},
    {T::kOutputNorm, "model.norm.weight"},
    {T::kOutput, "lm_head.weight"},  // absent: tied to token_embd
};

// Attention of the Qwen / OLMoE layouts (NEOX rope: HF's rotate-half rows as they are).
inline constexpr TensorRule kGqaAttn[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnK, "model.layers.{L}.self_attn.k_proj.weight"},
    {T::kAttnV, "model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kFfnNorm, "model.layers.{L}.post_attention_layernorm.weight"},
};

inline constexpr TensorRule kQkvBias[] = {
    {T::kAttnQBias, "model.layers.{L}.self_attn.q_proj.bias"},
    {T::kAttnKBias, "model.layers.{L}.self_attn.k_proj.bias"},
    {T::kAttnVBias, "model.layers.{L}.self_attn.v_proj.bias"},
};

inline constexpr TensorRule kQkNorm[] = {
    {T::kAttnQNorm, "model.layers.{L}.self_attn.q_norm.weight"},
    {T::kAttnKNorm, "model.layers.{L}.self_attn.k_norm.weight"},
};

inline constexpr TensorRule kDenseFfn[] = {
    {T::kFfnGate, "model.layers.{L}.mlp.gate_proj.weight"},
    {T::kFfnUp, "model.layers.{L}.mlp.up_proj.weight"},
    {T::kFfnDown, "model.layers.{L}.mlp.down_proj.weight"},
};

inline constexpr TensorRule kExperts[] = {
    {T::kFfnGateInp, "model.layers.{L}.mlp.gate.weight"},
    {T::kFfnGateExps, "model.layers.{L}.mlp.experts.{E}.gate_proj.weight"},
    {T::kFfnUpExps, "model.layers.{L}.mlp.experts.{E}.up_proj.weight"},
    {T::kFfnDownExps, "model.layers.{L}.mlp.experts.{E}.down_proj.weight"},
};

// Attention whose FFN norm is named post_attention_norm (gpt-oss, glm4moe).
inline constexpr TensorRule kGqaAttnPostNorm[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnK, "model.layers.{L}.self_attn.k_proj.weight"},
    {T::kAttnV, "model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kPostAttentionNorm, "model.layers.{L}.post_attention_layernorm.weight"},
};

inline constexpr TensorRule kGlmExperts[] = {
    {T::kExpProbsB, "model.layers.{L}.mlp.gate.e_score_correction_bias"},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_experts.gate_proj.weight"},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_experts.up_proj.weight"},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_experts.down_proj.weight"},
};

// The next-token-prediction layer's own tensors (gguf-py tensor_mapping.py NEXTN_*).
inline constexpr TensorRule kNextn[] = {
    {T::kNextnEhProj, "model.layers.{L}.eh_proj.weight"},
    {T::kNextnEnorm, "model.layers.{L}.enorm.weight"},
    {T::kNextnHnorm, "model.layers.{L}.hnorm.weight"},
    {T::kNextnSharedHeadNorm, "model.layers.{L}.shared_head.norm.weight"},
    {T::kNextnSharedHeadHead, "model.layers.{L}.shared_head.head.weight"},
    {T::kNextnEmbedTokens, "model.layers.{L}.embed_tokens.weight"},
};

// Tensors the architecture declares that some families' checkpoints never have.
inline constexpr char kNoShared[] = "the family has no shared expert";
inline constexpr char kAllMoe[] =
    "every layer has experts (the architecture's dense FFN serves files without experts)";
inline constexpr char kDenseOnly[] = "a dense family: no experts";
inline constexpr Absent kAbsentShared[] = {
    {T::kFfnGateShexp, kNoShared},
    {T::kFfnUpShexp, kNoShared},
    {T::kFfnDownShexp, kNoShared},
    {T::kFfnGateInpShexp, kNoShared},
};
inline constexpr Absent kAbsentDense[] = {
    {T::kFfnGate, kAllMoe},
    {T::kFfnUp, kAllMoe},
    {T::kFfnDown, kAllMoe},
};
inline constexpr Absent kAbsentDenseShared[] = {
    {T::kFfnGate, kAllMoe},           {T::kFfnUp, kAllMoe},        {T::kFfnDown, kAllMoe},
    {T::kFfnGateShexp, kNoShared},    {T::kFfnUpShexp, kNoShared}, {T::kFfnDownShexp, kNoShared},
    {T::kFfnGateInpShexp, kNoShared},
};
inline constexpr Absent kAbsentMoe[] = {
    {T::kFfnGateInp, kDenseOnly},   {T::kFfnGateExps, kDenseOnly},     {T::kFfnUpExps, kDenseOnly},
    {T::kFfnDownExps, kDenseOnly},  {T::kFfnGateShexp, kDenseOnly},    {T::kFfnUpShexp, kDenseOnly},
    {T::kFfnDownShexp, kDenseOnly}, {T::kFfnGateInpShexp, kDenseOnly},
};

// The vision tower of the Qwen vision-language checkpoints (an mmproj file in llama.cpp).
inline constexpr const char* kVisual[] = {"model.visual."};

inline constexpr Keys kDenseK[] = {kBaseKeys, kHeadDimKeys};

inline constexpr Keys kQwenMoeK[] = {kBaseKeys, kHeadDimKeys, kQwenMoeKeys};

inline constexpr Rules kQkNormMoeL[] = {kGqaAttn, kQkNorm, kExperts};

// "{arch}.<k>".
std::string key(const char* arch, const char* k);
// rope_scaling the family does not express is refused rather than dropped: the file would
// load and run with the wrong positions.
void no_rope_scaling(const HfConfig& c);
// No keys beyond the field copies (and no rope scaling).
void plain_extra(const HfConfig& c, gguf::Writer& w);

// One per model_type, in families/<family>.cc; families.cc lists them.
extern const Family kLlama;
extern const Family kMistral;
extern const Family kMixtral;
extern const Family kQwen2Moe;
extern const Family kQwen3Moe;
extern const Family kQwen3VlMoe;
extern const Family kOlmoe;
extern const Family kQwen2;
extern const Family kQwen3;
extern const Family kDeepseekV2;
extern const Family kDeepseekV3;
extern const Family kGptOss;
extern const Family kGlm4Moe;
extern const Family kMinimaxM2;
extern const Family kDots1;
extern const Family kErnie45Moe;
extern const Family kBailingMoe2;
extern const Family kQwen3Next;
extern const Family kQwen35Moe;
extern const Family kStep35;
extern const Family kGemma4;
extern const Family kHunyuanMoe;
extern const Family kGlmMoeDsa;
extern const Family kMistral4;

}  // namespace lynx::convert::table
