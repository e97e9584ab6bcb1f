// The family tables (family.h). Facts from llama.cpp's convert_hf_to_gguf.py (keys written per
// model class) and gguf-py/gguf/tensor_mapping.py (HF name -> GGUF name):
// - llama / mistral / mixtral -> `llama`: q_proj and k_proj rows permuted from HF's rotate-half
//   layout to ggml's adjacent pairs (LlamaModel.permute), Mixtral's experts w1/w3/w2 stacked
//   into ffn_gate_exps / ffn_up_exps / ffn_down_exps;
// - qwen2_moe / qwen3_moe / olmoe: experts gate_proj/up_proj/down_proj stacked; the Qwen2-MoE
//   shared expert and its sigmoid gate (shared_expert_gate -> ffn_gate_inp_shexp); OLMoE's
//   rms epsilon fixed at 1e-5 (OlmoeModel);
// - deepseek_v2 / deepseek_v3 -> `deepseek2`: kv_b_proj kept whole as attn_kv_b (the loader
//   splits it per head), e_score_correction_bias -> exp_probs_b.bias, the first
//   first_k_dense_replace layers dense, scoring_func -> expert_gating_func, YaRN keys.
// - gpt_oss -> `gpt-oss` (GptOssModel): experts as one tensor per layer, MXFP4
//   (*_blocks / *_scales, repacked into ggml's block_mxfp4) or dequantized ([n_expert, in, out],
//   transposed); gate_up_proj's rows (and gate_up_proj_bias's columns) interleave gate (even)
//   and up (odd); self_attn.sinks -> attn_sinks.weight, mlp.router -> ffn_gate_inp (with a
//   bias), post_attention_layernorm -> post_attention_norm; intermediate_size is also the
//   expert width; sliding_window and YaRN keys;
// - glm4_moe -> `glm4moe` (Glm4MoeModel): rope.dimension_count = head_dim x
//   partial_rotary_factor, sigmoid gating (expert_gating_func 2), e_score_correction_bias ->
//   exp_probs_b.bias, shared_experts -> *_shexp, the first first_k_dense_replace layers dense,
//   and the num_nextn_predict_layers next-token-prediction layers after the trunk converted as
//   blk.N with nextn.* tensors (eh_proj, enorm, hnorm, shared_head.norm / .head,
//   embed_tokens), block_count counting them.
// - minimax_m2 -> `minimax-m2` (MiniMaxM2Model): experts block_sparse_moe.experts.N.w1 / w3 /
//   w2 stacked as Mixtral's, block_sparse_moe.gate -> ffn_gate_inp,
//   block_sparse_moe.e_score_correction_bias -> exp_probs_b.bias, q_norm / k_norm (whole-row
//   weights) -> attn_q_norm / attn_k_norm, intermediate_size is the expert width,
//   rope.dimension_count = rotary_dim, scoring_func -> expert_gating_func.
// - dots1 -> `dots1` (Dots1Model, a Qwen2MoeModel): experts mlp.experts.N.gate_proj / up_proj /
//   down_proj stacked, mlp.gate -> ffn_gate_inp, mlp.gate.e_score_correction_bias ->
//   exp_probs_b.bias, mlp.shared_experts -> *_shexp, per-head q_norm / k_norm, the first
//   first_k_dense_replace layers dense; n_routed_experts, moe_intermediate_size,
//   n_shared_experts, routed_scaling_factor, norm_topk_prob; scoring_func noaux_tc -> sigmoid.
// - ernie4_5_moe -> `ernie4_5-moe` (Ernie4_5MoeModel): experts mlp.experts.N.gate_proj / up_proj
//   / down_proj stacked, mlp.gate -> ffn_gate_inp, mlp.moe_statics.e_score_correction_bias ->
//   exp_probs_b.bias, mlp.shared_experts.* -> *_shexp, q/k unpermuted (normal rope on HF's
//   interleaved pairs), moe_layer_start_index / moe_layer_interval -> leading_dense_block_count /
//   interleave_moe_layer_step, the SentencePiece tokenizer.model when there is one.
// - qwen3_vl_moe -> `qwen3vlmoe` (Qwen3VLMoeTextModel): text_config lifted, the language model's
//   tensors under model.language_model. as qwen3_moe's, experts fused per layer
//   (mlp.experts.gate_up_proj [E, hidden, 2F] split in halves, down_proj [E, F, hidden]),
//   mrope_section -> rope.dimension_sections, the vision tower (model.visual.*) not converted.
// - bailing_moe_v2 (and bailing_moe with architectures BailingMoeV2ForCausalLM: Ling / Ring 2.0)
//   -> `bailingmoe2` (BailingMoeV2Model): attention.query_key_value kept fused as attn_qkv
//   (the loader splits it into row views), attention.dense -> attn_output,
//   query_layernorm / key_layernorm -> attn_q_norm / attn_k_norm, model.word_embeddings ->
//   token_embd, mlp.gate.expert_bias -> exp_probs_b.bias, mlp.shared_experts -> *_shexp, the
//   first first_k_dense_replace layers dense; rope.dimension_count = head_dim x
//   partial_rotary_factor (0.5 absent), expert_shared_feed_forward_length =
//   moe_shared_expert_intermediate_size or moe_intermediate_size x num_shared_experts,
//   n_group / topk_group, score_function sigmoid -> expert_gating_func 2; the
//   num_nextn_predict_layers MTP layers after the trunk converted and counted in block_count.
// Tokenizer pre-tokenizer names: the ones llama.cpp's hash table picks for these families'
// released tokenizers (Qwen1.5/2/3 "qwen2", OLMo "olmo", DeepSeek-LLM / V2 "deepseek-llm",
// DeepSeek-V3 "deepseek-v3", Llama 3 style BPE "llama-bpe", gpt-oss's o200k "gpt-4o", GLM-4.5
// "glm4", MiniMax-M2 "minimax-m2", dots.llm1's Qwen2 tokenizer "qwen2").
#include "convert/family.h"
#include "lynx/error.h"
#include "model/arch/tensor_names.h"

namespace lynx::convert {
namespace {

namespace T = arch::tensor;
using K = KeyKind;
using Rules = std::span<const TensorRule>;
using Keys = std::span<const KeyRule>;

// Fields every family shares (Model.set_gguf_parameters).
constexpr KeyRule kBaseKeys[] = {
    {"num_hidden_layers", "block_count", K::kU32, true},
    {"max_position_embeddings", "context_length"},
    {"hidden_size", "embedding_length", K::kU32, true},
    {"intermediate_size", "feed_forward_length"},
    {"num_attention_heads", "attention.head_count", K::kU32, true},
    {"num_key_value_heads", "attention.head_count_kv"},
    {"rope_theta", "rope.freq_base", K::kF32},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon", K::kF32, true},
};
constexpr KeyRule kHeadDimKeys[] = {
    {"head_dim", "attention.key_length"},
    {"head_dim", "attention.value_length"},
};
constexpr KeyRule kLlamaKeys[] = {
    {"vocab_size", "vocab_size"},
    {"num_local_experts", "expert_count"},
    {"num_experts_per_tok", "expert_used_count"},
};
constexpr KeyRule kQwenMoeKeys[] = {
    {"num_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length"},
    {"shared_expert_intermediate_size", "expert_shared_feed_forward_length"},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
};
constexpr KeyRule kDeepseekKeys[] = {
    {"n_routed_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"n_shared_experts", "expert_shared_count", K::kU32, true},
    {"routed_scaling_factor", "expert_weights_scale", K::kF32},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
    {"kv_lora_rank", "attention.kv_lora_rank", K::kU32, true},
    {"qk_rope_head_dim", "rope.dimension_count", K::kU32, true},
    {"first_k_dense_replace", "leading_dense_block_count", K::kU32, true},
};

constexpr KeyRule kGptOssKeys[] = {
    {"num_local_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"sliding_window", "attention.sliding_window", K::kU32, true},
};
constexpr KeyRule kGlmKeys[] = {
    {"n_routed_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"n_shared_experts", "expert_shared_count", K::kU32, true},
    {"first_k_dense_replace", "leading_dense_block_count"},
    {"routed_scaling_factor", "expert_weights_scale", K::kF32},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
    {"num_nextn_predict_layers", "nextn_predict_layers"},
    {"n_group", "expert_group_count"},
    {"topk_group", "expert_group_used_count"},
};

constexpr KeyRule kMinimaxKeys[] = {
    {"num_local_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"intermediate_size", "expert_feed_forward_length", K::kU32, true},
};

constexpr KeyRule kDots1Keys[] = {
    {"n_routed_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"first_k_dense_replace", "leading_dense_block_count", K::kU32, true},
    {"n_shared_experts", "expert_shared_count", K::kU32, true},
    {"routed_scaling_factor", "expert_weights_scale", K::kF32, true},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
};

constexpr KeyRule kErnieKeys[] = {
    {"moe_num_experts", "expert_count", K::kU32, true},
    {"moe_k", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"moe_layer_start_index", "leading_dense_block_count", K::kU32, true},
    {"moe_layer_interval", "interleave_moe_layer_step", K::kU32, true},
    {"moe_num_shared_experts", "expert_shared_count"},
};

constexpr KeyRule kBailing2Keys[] = {
    {"num_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"first_k_dense_replace", "leading_dense_block_count", K::kU32, true},
    {"num_shared_experts", "expert_shared_count", K::kU32, true},
    {"routed_scaling_factor", "expert_weights_scale", K::kF32, true},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
    {"n_group", "expert_group_count"},
    {"topk_group", "expert_group_used_count"},
    {"num_nextn_predict_layers", "nextn_predict_layers"},
    {"vocab_size", "vocab_size"},
};

constexpr TensorRule kGlobal[] = {
    {T::kTokenEmbd, "model.embed_tokens.weight"},
    {T::kOutputNorm, "model.norm.weight"},
    {T::kOutput, "lm_head.weight", When::kOptional},  // absent: tied to token_embd
};

constexpr TensorRule kLlamaAttn[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight", When::kAlways, Transform::kPermuteQ},
    {T::kAttnK, "model.layers.{L}.self_attn.k_proj.weight", When::kAlways, Transform::kPermuteK},
    {T::kAttnV, "model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kFfnNorm, "model.layers.{L}.post_attention_layernorm.weight"},
};
constexpr TensorRule kMixtralExperts[] = {
    {T::kFfnGateInp, "model.layers.{L}.block_sparse_moe.gate.weight", When::kMoeLayer},
    {T::kFfnGateExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w1.weight", When::kMoeLayer},
    {T::kFfnUpExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w3.weight", When::kMoeLayer},
    {T::kFfnDownExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w2.weight", When::kMoeLayer},
};
// Attention of the Qwen / OLMoE layouts (NEOX rope: HF's rotate-half rows as they are).
constexpr TensorRule kGqaAttn[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnK, "model.layers.{L}.self_attn.k_proj.weight"},
    {T::kAttnV, "model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kFfnNorm, "model.layers.{L}.post_attention_layernorm.weight"},
};
constexpr TensorRule kQkvBias[] = {
    {T::kAttnQBias, "model.layers.{L}.self_attn.q_proj.bias"},
    {T::kAttnKBias, "model.layers.{L}.self_attn.k_proj.bias"},
    {T::kAttnVBias, "model.layers.{L}.self_attn.v_proj.bias"},
};
constexpr TensorRule kQkNorm[] = {
    {T::kAttnQNorm, "model.layers.{L}.self_attn.q_norm.weight"},
    {T::kAttnKNorm, "model.layers.{L}.self_attn.k_norm.weight"},
};
constexpr TensorRule kDenseFfn[] = {
    {T::kFfnGate, "model.layers.{L}.mlp.gate_proj.weight", When::kDenseLayer},
    {T::kFfnUp, "model.layers.{L}.mlp.up_proj.weight", When::kDenseLayer},
    {T::kFfnDown, "model.layers.{L}.mlp.down_proj.weight", When::kDenseLayer},
};
constexpr TensorRule kExperts[] = {
    {T::kFfnGateInp, "model.layers.{L}.mlp.gate.weight", When::kMoeLayer},
    {T::kFfnGateExps, "model.layers.{L}.mlp.experts.{E}.gate_proj.weight", When::kMoeLayer},
    {T::kFfnUpExps, "model.layers.{L}.mlp.experts.{E}.up_proj.weight", When::kMoeLayer},
    {T::kFfnDownExps, "model.layers.{L}.mlp.experts.{E}.down_proj.weight", When::kMoeLayer},
};
// Qwen3-VL-MoE: the language model under model.language_model., experts fused per layer.
constexpr TensorRule kVlGlobal[] = {
    {T::kTokenEmbd, "model.language_model.embed_tokens.weight"},
    {T::kOutputNorm, "model.language_model.norm.weight"},
    {T::kOutput, "lm_head.weight", When::kOptional},
};
constexpr TensorRule kVlLayer[] = {
    {T::kAttnNorm, "model.language_model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, "model.language_model.layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnK, "model.language_model.layers.{L}.self_attn.k_proj.weight"},
    {T::kAttnV, "model.language_model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.language_model.layers.{L}.self_attn.o_proj.weight"},
    {T::kAttnQNorm, "model.language_model.layers.{L}.self_attn.q_norm.weight"},
    {T::kAttnKNorm, "model.language_model.layers.{L}.self_attn.k_norm.weight"},
    {T::kFfnNorm, "model.language_model.layers.{L}.post_attention_layernorm.weight"},
    {T::kFfnGateInp, "model.language_model.layers.{L}.mlp.gate.weight"},
    {T::kFfnGateExps, "model.language_model.layers.{L}.mlp.experts.gate_up_proj", When::kAlways,
     Transform::kHalfGate},
    {T::kFfnUpExps, "model.language_model.layers.{L}.mlp.experts.gate_up_proj", When::kAlways,
     Transform::kHalfUp},
    {T::kFfnDownExps, "model.language_model.layers.{L}.mlp.experts.down_proj", When::kAlways,
     Transform::kHalfDown},
};
constexpr TensorRule kQwenSharedExpert[] = {
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_expert.gate_proj.weight", When::kShared},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_expert.up_proj.weight", When::kShared},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_expert.down_proj.weight", When::kShared},
    {T::kFfnGateInpShexp, "model.layers.{L}.mlp.shared_expert_gate.weight", When::kShared},
};
constexpr TensorRule kMlaAttn[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight", When::kNoQLora},
    {T::kAttnQA, "model.layers.{L}.self_attn.q_a_proj.weight", When::kQLora},
    {T::kAttnQANorm, "model.layers.{L}.self_attn.q_a_layernorm.weight", When::kQLora},
    {T::kAttnQB, "model.layers.{L}.self_attn.q_b_proj.weight", When::kQLora},
    {T::kAttnKvAMqa, "model.layers.{L}.self_attn.kv_a_proj_with_mqa.weight"},
    {T::kAttnKvANorm, "model.layers.{L}.self_attn.kv_a_layernorm.weight"},
    {T::kAttnKvB, "model.layers.{L}.self_attn.kv_b_proj.weight", When::kKvBWhole},
    {T::kAttnKB, "model.layers.{L}.self_attn.kv_b_proj.weight", When::kKvBSplit,
     Transform::kKvBToKB},
    {T::kAttnVB, "model.layers.{L}.self_attn.kv_b_proj.weight", When::kKvBSplit,
     Transform::kKvBToVB},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kFfnNorm, "model.layers.{L}.post_attention_layernorm.weight"},
};
constexpr TensorRule kDeepseekExperts[] = {
    {T::kExpProbsB, "model.layers.{L}.mlp.gate.e_score_correction_bias", When::kMoeOptional},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_experts.gate_proj.weight", When::kShared},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_experts.up_proj.weight", When::kShared},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_experts.down_proj.weight", When::kShared},
};

// Attention whose FFN norm is named post_attention_norm (gpt-oss, glm4moe).
constexpr TensorRule kGqaAttnPostNorm[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnK, "model.layers.{L}.self_attn.k_proj.weight"},
    {T::kAttnV, "model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kPostAttentionNorm, "model.layers.{L}.post_attention_layernorm.weight"},
};
constexpr TensorRule kGptOssLayer[] = {
    {T::kAttnOutputBias, "model.layers.{L}.self_attn.o_proj.bias"},
    {T::kAttnSinks, "model.layers.{L}.self_attn.sinks"},
    {T::kFfnGateInp, "model.layers.{L}.mlp.router.weight"},
    {T::kFfnGateInpBias, "model.layers.{L}.mlp.router.bias"},
    {T::kFfnGateExps, "model.layers.{L}.mlp.experts.gate_up_proj", When::kAlways,
     Transform::kFusedGate},
    {T::kFfnUpExps, "model.layers.{L}.mlp.experts.gate_up_proj", When::kAlways,
     Transform::kFusedUp},
    {T::kFfnDownExps, "model.layers.{L}.mlp.experts.down_proj", When::kAlways,
     Transform::kFusedDown},
    {T::kFfnGateExpsBias, "model.layers.{L}.mlp.experts.gate_up_proj_bias", When::kAlways,
     Transform::kEvenCols},
    {T::kFfnUpExpsBias, "model.layers.{L}.mlp.experts.gate_up_proj_bias", When::kAlways,
     Transform::kOddCols},
    {T::kFfnDownExpsBias, "model.layers.{L}.mlp.experts.down_proj_bias"},
};
constexpr TensorRule kGlmQkNorm[] = {
    {T::kAttnQNorm, "model.layers.{L}.self_attn.q_norm.weight", When::kQkNorm},
    {T::kAttnKNorm, "model.layers.{L}.self_attn.k_norm.weight", When::kQkNorm},
};
constexpr TensorRule kGlmExperts[] = {
    {T::kExpProbsB, "model.layers.{L}.mlp.gate.e_score_correction_bias", When::kMoeLayer},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_experts.gate_proj.weight", When::kShared},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_experts.up_proj.weight", When::kShared},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_experts.down_proj.weight", When::kShared},
};
constexpr TensorRule kMinimaxExperts[] = {
    {T::kFfnGateInp, "model.layers.{L}.block_sparse_moe.gate.weight"},
    {T::kExpProbsB, "model.layers.{L}.block_sparse_moe.e_score_correction_bias"},
    {T::kFfnGateExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w1.weight"},
    {T::kFfnUpExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w3.weight"},
    {T::kFfnDownExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w2.weight"},
};
constexpr TensorRule kErnieExperts[] = {
    {T::kExpProbsB, "model.layers.{L}.mlp.moe_statics.e_score_correction_bias", When::kMoeLayer},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_experts.gate_proj.weight", When::kShared},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_experts.up_proj.weight", When::kShared},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_experts.down_proj.weight", When::kShared},
};
// Ling / Ring 2.0 (BailingMoeV2): the fused projection kept fused, its own names.
constexpr TensorRule kBailing2Global[] = {
    {T::kTokenEmbd, "model.word_embeddings.weight"},
    {T::kOutputNorm, "model.norm.weight"},
    {T::kOutput, "lm_head.weight"},
};
constexpr TensorRule kBailing2Layer[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQkv, "model.layers.{L}.attention.query_key_value.weight"},
    {T::kAttnOutput, "model.layers.{L}.attention.dense.weight"},
    {T::kAttnQNorm, "model.layers.{L}.attention.query_layernorm.weight"},
    {T::kAttnKNorm, "model.layers.{L}.attention.key_layernorm.weight"},
    {T::kFfnNorm, "model.layers.{L}.post_attention_layernorm.weight"},
    {T::kExpProbsB, "model.layers.{L}.mlp.gate.expert_bias", When::kMoeLayer},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_experts.gate_proj.weight", When::kMoeLayer},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_experts.up_proj.weight", When::kMoeLayer},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_experts.down_proj.weight", When::kMoeLayer},
    // The MTP layer's norm after its FFN (llama.cpp's LAYER_OUT_NORM, required there).
    {T::kLayerOutputNorm, "model.layers.{L}.final_layernorm.weight", When::kNextn},
};

// The next-token-prediction layer's own tensors (gguf-py tensor_mapping.py NEXTN_*).
constexpr TensorRule kNextn[] = {
    {T::kNextnEhProj, "model.layers.{L}.eh_proj.weight", When::kNextn},
    {T::kNextnEnorm, "model.layers.{L}.enorm.weight", When::kNextn},
    {T::kNextnHnorm, "model.layers.{L}.hnorm.weight", When::kNextn},
    {T::kNextnSharedHeadNorm, "model.layers.{L}.shared_head.norm.weight", When::kNextnOptional},
    {T::kNextnSharedHeadHead, "model.layers.{L}.shared_head.head.weight", When::kNextnOptional},
    {T::kNextnEmbedTokens, "model.layers.{L}.embed_tokens.weight", When::kNextnOptional},
};

// The groups each family is made of.
constexpr Keys kLlamaK[] = {kBaseKeys, kHeadDimKeys, kLlamaKeys};
constexpr Keys kQwenMoeK[] = {kBaseKeys, kHeadDimKeys, kQwenMoeKeys};
constexpr Keys kDenseK[] = {kBaseKeys, kHeadDimKeys};
constexpr Keys kDeepseekK[] = {kBaseKeys, kDeepseekKeys};
constexpr Rules kLlamaL[] = {kLlamaAttn, kDenseFfn, kMixtralExperts};
constexpr Rules kQwen2MoeL[] = {kGqaAttn, kQkvBias, kExperts, kQwenSharedExpert};
constexpr Rules kQkNormMoeL[] = {kGqaAttn, kQkNorm, kExperts};
constexpr Rules kQwen3VlMoeL[] = {kVlLayer};
constexpr Rules kQwen2L[] = {kGqaAttn, kQkvBias, kDenseFfn};
constexpr Rules kQwen3L[] = {kGqaAttn, kQkNorm, kDenseFfn};
constexpr Rules kDeepseekL[] = {kMlaAttn, kDenseFfn, kExperts, kDeepseekExperts};
constexpr Keys kGptOssK[] = {kBaseKeys, kHeadDimKeys, kGptOssKeys};
constexpr Rules kGptOssL[] = {kGqaAttnPostNorm, kQkvBias, kGptOssLayer};
constexpr Keys kGlmK[] = {kBaseKeys, kHeadDimKeys, kGlmKeys};
constexpr Rules kGlmL[] = {kGqaAttnPostNorm, kQkvBias,    kGlmQkNorm, kDenseFfn,
                           kExperts,         kGlmExperts, kNextn};

constexpr Keys kMinimaxK[] = {kBaseKeys, kHeadDimKeys, kMinimaxKeys};
constexpr Rules kMinimaxL[] = {kGqaAttn, kQkNorm, kMinimaxExperts};

constexpr Keys kDots1K[] = {kBaseKeys, kHeadDimKeys, kDots1Keys};
constexpr Rules kDots1L[] = {kGqaAttn, kQkNorm, kDenseFfn, kExperts, kGlmExperts};
constexpr Keys kBailing2K[] = {kBaseKeys, kHeadDimKeys, kBailing2Keys};
constexpr Rules kBailing2L[] = {kBailing2Layer, kDenseFfn, kExperts, kNextn};
constexpr Absent kErnieAbsent[] = {
    {T::kAttnQBias, "use_bias is refused (ernie4_5_moe_extra): the released checkpoints have none"},
    {T::kAttnKBias, "use_bias is refused (ernie4_5_moe_extra): the released checkpoints have none"},
    {T::kAttnVBias, "use_bias is refused (ernie4_5_moe_extra): the released checkpoints have none"},
};
constexpr Keys kErnieK[] = {kBaseKeys, kHeadDimKeys, kErnieKeys};
constexpr Rules kErnieL[] = {kGqaAttn, kDenseFfn, kExperts, kErnieExperts};

std::string key(const char* arch, const char* k) {
  return std::string(arch) + "." + k;
}

// rope_scaling the family does not express is refused rather than dropped: the file would
// load and run with the wrong positions.
void no_rope_scaling(const HfConfig& c) {
  if (c.has("rope_scaling")) {
    c.fail("rope_scaling is set, which the converter does not support for this family");
  }
}

void llama_extra(const HfConfig& c, gguf::Writer& w) {
  no_rope_scaling(c);
  const int64_t rot = c.has("head_dim")
                          ? c.get_int("head_dim")
                          : c.get_int("hidden_size") / c.get_int("num_attention_heads");
  w.set(key("llama", "rope.dimension_count"), gguf::Value::u32(uint32_t(rot)));
}

void plain_extra(const HfConfig& c, gguf::Writer&) {
  no_rope_scaling(c);
}

// Qwen3-VL-MoE's language model (llama.cpp's Qwen3VLMoeTextModel): rope_scaling (or
// rope_parameters) carries mrope_section [t, h, w] -> rope.dimension_sections [t, h, w, 0], the
// vision tower's deepstack_visual_indexes count -> n_deepstack_layers; every layer MoE.
void qwen3vl_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "qwen3vlmoe";
  const nlohmann::json& j = c.json();
  const nlohmann::json* rope = nullptr;
  for (const char* k : {"rope_scaling", "rope_parameters"}) {
    if (j.contains(k) && j[k].is_object() && j[k].contains("mrope_section")) rope = &j[k];
  }
  if (!rope) c.fail("rope_scaling.mrope_section (interleaved M-RoPE) is missing");
  const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
  if (type != "default") c.fail("rope type '" + type + "' is not supported (default M-RoPE only)");
  if (rope->contains("mrope_interleaved") && !(*rope)["mrope_interleaved"].get<bool>()) {
    c.fail("mrope_interleaved false (Qwen2-VL's chunked M-RoPE) is not this architecture");
  }
  const nlohmann::json& ms = (*rope)["mrope_section"];
  if (!ms.is_array() || ms.size() != 3) c.fail("mrope_section must be 3 integers");
  std::vector<int32_t> sections;
  for (const auto& v : ms) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 4096) {
      c.fail("mrope_section must be 3 integers >= 0");
    }
    sections.push_back(v.get<int32_t>());
  }
  sections.push_back(0);
  w.set(key(a, "rope.dimension_sections"), gguf::Value::i32_array(sections));
  int64_t deepstack = 0;
  if (j.contains("vision_config") && j["vision_config"].is_object() &&
      j["vision_config"].contains("deepstack_visual_indexes")) {
    const auto& d = j["vision_config"]["deepstack_visual_indexes"];
    if (!d.is_array()) c.fail("vision_config.deepstack_visual_indexes must be a list");
    deepstack = int64_t(d.size());
  }
  w.set(key(a, "n_deepstack_layers"), gguf::Value::u32(uint32_t(deepstack)));
  if (c.get_int("decoder_sparse_step", 1) != 1 ||
      (j.contains("mlp_only_layers") && !j["mlp_only_layers"].empty())) {
    c.fail("decoder_sparse_step / mlp_only_layers with dense layers are not supported");
  }
}

void olmoe_extra(const HfConfig& c, gguf::Writer& w) {
  no_rope_scaling(c);
  w.set(key("olmoe", "attention.layer_norm_rms_epsilon"), gguf::Value::f32(1e-5f));
}

void deepseek_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "deepseek2";
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  const int64_t nope = c.get_int("qk_nope_head_dim"), rope = c.get_int("qk_rope_head_dim");
  u32("attention.key_length", nope + rope);
  u32("attention.value_length", c.get_int("v_head_dim"));
  if (c.has("q_lora_rank")) u32("attention.q_lora_rank", c.get_int("q_lora_rank"));
  const std::string scoring = c.get_string("scoring_func", "softmax");
  if (scoring != "softmax" && scoring != "sigmoid") {
    c.fail("scoring_func '" + scoring + "' is not supported (softmax, sigmoid)");
  }
  u32("expert_gating_func", scoring == "sigmoid" ? 2 : 1);
  const std::string topk = c.get_string("topk_method", "greedy");
  const int64_t n_group = c.get_int("n_group", 1);
  if ((topk == "group_limited_greedy" || topk == "noaux_tc") && n_group > 1) {
    u32("expert_group_count", n_group);
    u32("expert_group_used_count", c.get_int("topk_group"));
  }
  if (c.has("rope_scaling")) {
    const nlohmann::json& r = c.json()["rope_scaling"];
    // DeepSeek's own configs say "type"; transformers writes "rope_type".
    std::string type;
    for (const char* k : {"type", "rope_type"}) {
      if (r.is_object() && r.contains(k) && r[k].is_string()) type = r[k].get<std::string>();
    }
    if (type != "yarn" || !r.contains("factor") || !r["factor"].is_number()) {
      c.fail("rope_scaling must be of type yarn with a factor for deepseek2");
    }
    w.set(key(a, "rope.scaling.type"), gguf::Value::str("yarn"));
    w.set(key(a, "rope.scaling.factor"), gguf::Value::f32(r["factor"].get<float>()));
    if (r.contains("original_max_position_embeddings") &&
        r["original_max_position_embeddings"].is_number_unsigned()) {
      u32("rope.scaling.original_context_length",
          r["original_max_position_embeddings"].get<int64_t>());
    }
    const float mscale_all = r.contains("mscale_all_dim") && r["mscale_all_dim"].is_number()
                                 ? r["mscale_all_dim"].get<float>()
                                 : 0.f;
    w.set(key(a, "rope.scaling.yarn_log_multiplier"), gguf::Value::f32(0.1f * mscale_all));
  }
}

// The split layout's head sizes (newer convert_hf_to_gguf.py): the cached key is the latent
// plus the rope part, the cached value the latent; the per-head sizes move to the *_mla keys;
// one key/value head.
void deepseek_split_keys(const HfConfig& c, gguf::Writer& w) {
  const char* a = "deepseek2";
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  const int64_t nope = c.get_int("qk_nope_head_dim"), rope = c.get_int("qk_rope_head_dim");
  const int64_t lora = c.get_int("kv_lora_rank");
  u32("attention.key_length", lora + rope);
  u32("attention.value_length", lora);
  u32("attention.key_length_mla", nope + rope);
  u32("attention.value_length_mla", c.get_int("v_head_dim"));
  u32("attention.head_count_kv", 1);
}

bool deepseek_moe_layer(const HfConfig& c, int il) {
  return il >= c.get_int("first_k_dense_replace") && il % c.get_int("moe_layer_freq", 1) == 0;
}

// rope_scaling as {"rope_type" or "type": "yarn", "factor", "original_max_position_embeddings",
// "beta_fast", "beta_slow"} -> the keys the base converter writes (TextModel
// set_gguf_parameters); anything else is refused.
void yarn_keys(const HfConfig& c, gguf::Writer& w, const char* a) {
  if (!c.has("rope_scaling")) return;
  const nlohmann::json& r = c.json()["rope_scaling"];
  auto str = [&](const char* k) {
    return r.is_object() && r.contains(k) && r[k].is_string() ? r[k].get<std::string>()
                                                              : std::string();
  };
  auto num = [&](const char* k) { return r.is_object() && r.contains(k) && r[k].is_number(); };
  const std::string type = str("rope_type").empty() ? str("type") : str("rope_type");
  if (type != "yarn" || !num("factor") || !num("original_max_position_embeddings")) {
    c.fail(std::string("rope_scaling must be of type yarn with a factor and "
                       "original_max_position_embeddings for ") +
           a);
  }
  w.set(key(a, "rope.scaling.type"), gguf::Value::str("yarn"));
  w.set(key(a, "rope.scaling.factor"), gguf::Value::f32(r["factor"].get<float>()));
  const double orig = r["original_max_position_embeddings"].get<double>();
  if (!(orig >= 1 && orig <= 4294967295.0))
    c.fail("rope_scaling.original_max_position_embeddings is out of range");
  w.set(key(a, "rope.scaling.original_context_length"), gguf::Value::u32(uint32_t(orig)));
  if (num("beta_fast")) {
    w.set(key(a, "rope.scaling.yarn_beta_fast"), gguf::Value::f32(r["beta_fast"].get<float>()));
  }
  if (num("beta_slow")) {
    w.set(key(a, "rope.scaling.yarn_beta_slow"), gguf::Value::f32(r["beta_slow"].get<float>()));
  }
}

// What llama.cpp's gpt-oss graph fixes and the file cannot say: sliding-window attention on
// the even layers and full attention on the odd ones (set_swa_pattern(2)), the SwiGLU clamp at
// 7. A checkpoint that differs is refused rather than converted into a file that runs wrong.
void gpt_oss_extra(const HfConfig& c, gguf::Writer& w) {
  if (c.has("layer_types")) {
    const nlohmann::json& lt = c.json()["layer_types"];
    if (!lt.is_array() || int64_t(lt.size()) != c.get_int("num_hidden_layers")) {
      c.fail("layer_types must list num_hidden_layers entries");
    }
    for (size_t i = 0; i < lt.size(); ++i) {
      const char* want = i % 2 == 0 ? "sliding_attention" : "full_attention";
      if (!lt[i].is_string() || lt[i].get<std::string>() != want) {
        c.fail("layer_types[" + std::to_string(i) + "] is " + lt[i].dump() + ", expected \"" +
               want +
               "\" (gpt-oss runs sliding-window attention on the even layers and full "
               "attention on the odd ones)");
      }
    }
  }
  if (c.get_float("swiglu_limit", 7.0) != 7.0) {
    c.fail("swiglu_limit must be 7 (the clamp llama.cpp's gpt-oss graph fixes)");
  }
  yarn_keys(c, w, "gpt-oss");
}

void glm4moe_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "glm4moe";
  no_rope_scaling(c);
  if (!c.get_bool("attention_bias", true)) {
    c.fail("attention_bias is false, but glm4moe (llama.cpp's and lynx-moe's) needs q/k/v biases");
  }
  const int64_t head = c.has("head_dim")
                           ? c.get_int("head_dim")
                           : c.get_int("hidden_size") / c.get_int("num_attention_heads");
  const double prf = c.get_float("partial_rotary_factor", 0.5);
  const int64_t rot = int64_t(double(head) * prf);
  if (!(prf > 0 && prf <= 1) || rot < 2 || rot % 2 != 0) {
    c.fail("partial_rotary_factor " + std::to_string(prf) + " x head dimension " +
           std::to_string(head) + " must give an even number of rotated dimensions");
  }
  w.set(key(a, "rope.dimension_count"), gguf::Value::u32(uint32_t(rot)));
  w.set(key(a, "expert_gating_func"), gguf::Value::u32(2));  // sigmoid
  // block_count counts the next-token-prediction layers (Glm4MoeModel's block_count).
  w.set(key(a, "block_count"),
        gguf::Value::u32(
            uint32_t(c.get_int("num_hidden_layers") + c.get_int("num_nextn_predict_layers", 0))));
}

// MiniMax-M2's config.json: rotary_dim (64 of head_dim 128; transformers 5 writes
// partial_rotary_factor inside rope_parameters instead), scoring_func, and switches the
// architecture has one answer to (refused otherwise rather than converted into a file that
// runs another model): q/k norms over the whole row of all heads (use_qk_norm,
// qk_norm_type "per_layer"), the selection bias (use_routing_bias), no shared expert, every
// layer full attention (attn_type_list: MiniMax-Text-01's 0 is linear attention).
void minimax_m2_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "minimax-m2";
  no_rope_scaling(c);
  const int64_t head = c.has("head_dim")
                           ? c.get_int("head_dim")
                           : c.get_int("hidden_size") / c.get_int("num_attention_heads");
  const double prf = c.get_float("partial_rotary_factor", 1.0);
  const int64_t from_factor = int64_t(double(head) * prf);
  const int64_t rot = c.get_int("rotary_dim", from_factor);
  if (c.has("rotary_dim") && c.has("partial_rotary_factor") && rot != from_factor) {
    c.fail("rotary_dim " + std::to_string(rot) + " disagrees with partial_rotary_factor " +
           std::to_string(prf) + " x head_dim " + std::to_string(head));
  }
  if (rot < 2 || rot > head || rot % 2 != 0) {
    c.fail("rotary_dim " + std::to_string(rot) + " must be even and at most head_dim " +
           std::to_string(head));
  }
  w.set(key(a, "rope.dimension_count"), gguf::Value::u32(uint32_t(rot)));
  const std::string scoring = c.get_string("scoring_func", "sigmoid");
  if (scoring != "softmax" && scoring != "sigmoid") {
    c.fail("scoring_func '" + scoring + "' is not supported (softmax, sigmoid)");
  }
  w.set(key(a, "expert_gating_func"), gguf::Value::u32(scoring == "sigmoid" ? 2 : 1));
  if (!c.get_bool("use_qk_norm", true)) {
    c.fail("use_qk_norm is false, but minimax-m2 (llama.cpp's and lynx-moe's) needs q/k norms");
  }
  if (c.get_string("qk_norm_type", "per_layer") != "per_layer") {
    c.fail("qk_norm_type '" + c.get_string("qk_norm_type", "") +
           "' is not supported (per_layer: one norm over all heads)");
  }
  if (!c.get_bool("use_routing_bias", true)) {
    c.fail("use_routing_bias is false, but minimax-m2 needs e_score_correction_bias");
  }
  if (c.get_int("shared_intermediate_size", 0) != 0) {
    c.fail("shared_intermediate_size is set, but minimax-m2 has no shared expert");
  }
  if (c.has("attn_type_list")) {
    const auto& types = c.json().at("attn_type_list");
    if (!types.is_array()) c.fail("attn_type_list must be a list");
    for (const auto& t : types) {
      if (!t.is_number_integer() || t.get<int64_t>() != 1) {
        c.fail("attn_type_list has a layer that is not full attention (1)");
      }
    }
  }
}

// dots.llm1's config.json: scoring_func noaux_tc (llama.cpp's converter; "sigmoid" is the
// same router, HF's code has no other) -> expert_gating_func 2. What llama.cpp's dots1 cannot
// express is refused rather than converted into a file that runs another model: rope scaling,
// q/k/v biases, fewer key/value heads than heads (its loader sizes attn_k / attn_v by the head
// count), group-limited routing (it writes no group keys; the released configs have 1 of 1).
void dots1_extra(const HfConfig& c, gguf::Writer& w) {
  no_rope_scaling(c);
  const std::string scoring = c.get_string("scoring_func", "noaux_tc");
  if (scoring != "noaux_tc" && scoring != "sigmoid") {
    c.fail("scoring_func '" + scoring + "' is not supported (noaux_tc, sigmoid)");
  }
  w.set(key("dots1", "expert_gating_func"), gguf::Value::u32(2));
  if (c.get_bool("attention_bias", false)) {
    c.fail("attention_bias is true, but dots1 (llama.cpp's and lynx-moe's) has no q/k/v biases");
  }
  const int64_t heads = c.get_int("num_attention_heads");
  if (c.get_int("num_key_value_heads", heads) != heads) {
    c.fail(
        "num_key_value_heads differs from num_attention_heads, which llama.cpp's dots1 "
        "cannot load (attn_k / attn_v sized by the head count)");
  }
  const auto& j = c.json();
  auto int_or_one = [&](const char* k) {
    return j.contains(k) && !j.at(k).is_null() ? c.get_int(k) : int64_t(1);
  };
  const int64_t n_group = int_or_one("n_group"), topk_group = int_or_one("topk_group");
  if (n_group > 1 && topk_group < n_group) {
    c.fail("n_group " + std::to_string(n_group) + " / topk_group " + std::to_string(topk_group) +
           ": group-limited routing, which llama.cpp's dots1 does not run");
  }
}

// ERNIE-4.5's config.json: the shared experts' width (HF: one MLP of moe_intermediate_size x
// moe_num_shared_experts; llama.cpp's converter writes intermediate_size / num_key_value_heads,
// the same number for the 21B-A3B), and switches with one answer in llama.cpp's graph, refused
// otherwise: no biases (use_bias), SiLU, MoE layers up to the last (moe_layer_end_index), no
// rope scaling.
void ernie4_5_moe_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "ernie4_5-moe";
  no_rope_scaling(c);
  if (c.get_bool("use_bias", false)) {
    c.fail("use_bias is true, but ernie4_5-moe (llama.cpp's graph) has no output or MLP biases");
  }
  if (c.get_string("hidden_act", "silu") != "silu") {
    c.fail("hidden_act '" + c.get_string("hidden_act", "") + "' is not supported (silu)");
  }
  const int64_t n_layer = c.get_int("num_hidden_layers");
  const int64_t end = c.get_int("moe_layer_end_index", -1);
  if (end != -1 && end != n_layer - 1) {
    c.fail("moe_layer_end_index " + std::to_string(end) +
           " is not the last layer, which llama.cpp's graph assumes");
  }
  if (c.get_int("moe_layer_interval") < 1) c.fail("moe_layer_interval must be at least 1");
  const int64_t shared = c.get_int("moe_num_shared_experts", 0);
  if (shared > 0) {
    w.set(key(a, "expert_shared_feed_forward_length"),
          gguf::Value::u32(uint32_t(shared * c.get_int("moe_intermediate_size"))));
  }
}

bool ernie4_5_moe_layer(const HfConfig& c, int il) {
  return il >= c.get_int("moe_layer_start_index") &&
         (il + 1) % c.get_int("moe_layer_interval") == 0;
}

// Ling / Ring 2.0's config.json. model_type "bailing_moe" is also Ling 1.x's (BailingMoeModel,
// another architecture): only BailingMoeV2ForCausalLM is taken under that name. What llama.cpp's
// bailingmoe2 cannot express is refused rather than converted into a file that runs another
// model: rope scaling, q/k/v or output biases, no q/k norm, another activation or router.
void bailingmoe2_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "bailingmoe2";
  const auto& j = c.json();
  if (c.model_type() == "bailing_moe") {
    const bool v2 = j.contains("architectures") && j.at("architectures").is_array() &&
                    !j.at("architectures").empty() &&
                    j.at("architectures")[0] == "BailingMoeV2ForCausalLM";
    if (!v2) {
      c.fail(
          "architectures is not BailingMoeV2ForCausalLM: Ling 1.x (BailingMoeForCausalLM) is "
          "another architecture, not supported");
    }
  }
  no_rope_scaling(c);
  if (c.get_bool("use_qkv_bias", false) || c.get_bool("use_bias", false)) {
    c.fail(
        "use_qkv_bias / use_bias is true, but bailingmoe2 (llama.cpp's and lynx-moe's) has "
        "no biases");
  }
  if (!c.get_bool("use_qk_norm", true)) {
    c.fail("use_qk_norm is false, but bailingmoe2 (llama.cpp's and lynx-moe's) needs q/k norms");
  }
  if (c.get_string("hidden_act", "silu") != "silu") {
    c.fail("hidden_act '" + c.get_string("hidden_act", "") + "' is not supported (silu)");
  }
  const std::string score = c.get_string("score_function", "sigmoid");
  if (score != "sigmoid") {
    c.fail("score_function '" + score + "' is not supported (sigmoid: HF's router has no other)");
  }
  w.set(key(a, "expert_gating_func"), gguf::Value::u32(2));
  const int64_t head = c.has("head_dim")
                           ? c.get_int("head_dim")
                           : c.get_int("hidden_size") / c.get_int("num_attention_heads");
  const double prf = c.get_float("partial_rotary_factor", 0.5);
  const int64_t rot = int64_t(double(head) * prf);
  if (!(prf > 0 && prf <= 1) || rot < 2 || rot % 2 != 0) {
    c.fail("partial_rotary_factor " + std::to_string(prf) + " x head dimension " +
           std::to_string(head) + " must give an even number of rotated dimensions");
  }
  w.set(key(a, "rope.dimension_count"), gguf::Value::u32(uint32_t(rot)));
  const int64_t shared = c.has("moe_shared_expert_intermediate_size")
                             ? c.get_int("moe_shared_expert_intermediate_size")
                             : c.get_int("moe_intermediate_size") * c.get_int("num_shared_experts");
  w.set(key(a, "expert_shared_feed_forward_length"), gguf::Value::u32(uint32_t(shared)));
  // block_count counts the MTP layers (BailingMoeV2Model's block_count).
  w.set(key(a, "block_count"),
        gguf::Value::u32(
            uint32_t(c.get_int("num_hidden_layers") + c.get_int("num_nextn_predict_layers", 0))));
}

bool glm4moe_moe_layer(const HfConfig& c, int il) {
  return il >= c.get_int("first_k_dense_replace", 0);
}

constexpr Family kLlama = {
    .model_type = "llama",
    .arch = "llama",
    .keys = kLlamaK,
    .global = kGlobal,
    .layer = kLlamaL,
    .tokenizer_pre = "llama-bpe",
    .extra_keys = llama_extra,
    .n_expert_key = "num_local_experts",
};
constexpr Family kMistral = {
    .model_type = "mistral",
    .arch = "llama",
    .keys = kLlamaK,
    .global = kGlobal,
    .layer = kLlamaL,
    .tokenizer_pre = "llama-bpe",
    .extra_keys = llama_extra,
    .n_expert_key = "num_local_experts",
};
constexpr Family kMixtral = {
    .model_type = "mixtral",
    .arch = "llama",
    .keys = kLlamaK,
    .global = kGlobal,
    .layer = kLlamaL,
    .tokenizer_pre = "llama-bpe",
    .extra_keys = llama_extra,
    .n_expert_key = "num_local_experts",
};
constexpr Family kQwen2Moe = {
    .model_type = "qwen2_moe",
    .arch = "qwen2moe",
    .keys = kQwenMoeK,
    .global = kGlobal,
    .layer = kQwen2MoeL,
    .tokenizer_pre = "qwen2",
    .extra_keys = plain_extra,
    .n_expert_key = "num_experts",
    .shared_key = "shared_expert_intermediate_size",
};
constexpr Family kQwen3Moe = {
    .model_type = "qwen3_moe",
    .arch = "qwen3moe",
    .keys = kQwenMoeK,
    .global = kGlobal,
    .layer = kQkNormMoeL,
    .tokenizer_pre = "qwen2",
    .extra_keys = plain_extra,
    .n_expert_key = "num_experts",
};
constexpr Family kQwen3VlMoe = {
    .model_type = "qwen3_vl_moe",
    .arch = "qwen3vlmoe",
    .keys = kQwenMoeK,
    .global = kVlGlobal,
    .layer = kQwen3VlMoeL,
    .tokenizer_pre = "qwen2",
    .extra_keys = qwen3vl_extra,
    .n_expert_key = "num_experts",
    .ignore_prefix = "model.visual.",
};
constexpr Family kOlmoe = {
    .model_type = "olmoe",
    .arch = "olmoe",
    .keys = kQwenMoeK,
    .global = kGlobal,
    .layer = kQkNormMoeL,
    .tokenizer_pre = "olmo",
    .extra_keys = olmoe_extra,
    .n_expert_key = "num_experts",
};
constexpr Family kQwen2 = {
    .model_type = "qwen2",
    .arch = "qwen2",
    .keys = kDenseK,
    .global = kGlobal,
    .layer = kQwen2L,
    .tokenizer_pre = "qwen2",
    .extra_keys = plain_extra,
};
constexpr Family kQwen3 = {
    .model_type = "qwen3",
    .arch = "qwen3",
    .keys = kDenseK,
    .global = kGlobal,
    .layer = kQwen3L,
    .tokenizer_pre = "qwen2",
    .extra_keys = plain_extra,
};
constexpr Family kDeepseekV2 = {
    .model_type = "deepseek_v2",
    .arch = "deepseek2",
    .keys = kDeepseekK,
    .global = kGlobal,
    .layer = kDeepseekL,
    .tokenizer_pre = "deepseek-llm",
    .extra_keys = deepseek_extra,
    .split_keys = deepseek_split_keys,
    .moe_layer = deepseek_moe_layer,
    .n_expert_key = "n_routed_experts",
    .shared_key = "n_shared_experts",
};
constexpr Family kDeepseekV3 = {
    .model_type = "deepseek_v3",
    .arch = "deepseek2",
    .keys = kDeepseekK,
    .global = kGlobal,
    .layer = kDeepseekL,
    .tokenizer_pre = "deepseek-v3",
    .extra_keys = deepseek_extra,
    .split_keys = deepseek_split_keys,
    .moe_layer = deepseek_moe_layer,
    .n_expert_key = "n_routed_experts",
    .shared_key = "n_shared_experts",
};

constexpr Family kGptOss = {
    .model_type = "gpt_oss",
    .arch = "gpt-oss",
    .keys = kGptOssK,
    .global = kGlobal,
    .layer = kGptOssL,
    .tokenizer_pre = "gpt-4o",
    .extra_keys = gpt_oss_extra,
    .n_expert_key = "num_local_experts",
};
constexpr Family kGlm4Moe = {
    .model_type = "glm4_moe",
    .arch = "glm4moe",
    .keys = kGlmK,
    .global = kGlobal,
    .layer = kGlmL,
    .tokenizer_pre = "glm4",
    .extra_keys = glm4moe_extra,
    .moe_layer = glm4moe_moe_layer,
    .n_expert_key = "n_routed_experts",
    .shared_key = "n_shared_experts",
    .nextn_key = "num_nextn_predict_layers",
};

constexpr Family kMinimaxM2 = {
    .model_type = "minimax_m2",
    .arch = "minimax-m2",
    .keys = kMinimaxK,
    .global = kGlobal,
    .layer = kMinimaxL,
    .tokenizer_pre = "minimax-m2",
    .extra_keys = minimax_m2_extra,
    .n_expert_key = "num_local_experts",
};

constexpr Family kDots1 = {
    .model_type = "dots1",
    .arch = "dots1",
    .keys = kDots1K,
    .global = kGlobal,
    .layer = kDots1L,
    .tokenizer_pre = "qwen2",
    .extra_keys = dots1_extra,
    .moe_layer = glm4moe_moe_layer,
    .n_expert_key = "n_routed_experts",
    .shared_key = "n_shared_experts",
};

constexpr Family kErnie45Moe = {
    .model_type = "ernie4_5_moe",
    .arch = "ernie4_5-moe",
    .keys = kErnieK,
    .global = kGlobal,
    .layer = kErnieL,
    .tokenizer_pre = "default",
    .extra_keys = ernie4_5_moe_extra,
    .moe_layer = ernie4_5_moe_layer,
    .n_expert_key = "moe_num_experts",
    .shared_key = "moe_num_shared_experts",
    .absent = kErnieAbsent,
};

constexpr Family kBailingMoe2 = {
    .model_type = "bailing_moe_v2",
    .arch = "bailingmoe2",
    .keys = kBailing2K,
    .global = kBailing2Global,
    .layer = kBailing2L,
    .tokenizer_pre = "bailingmoe2",
    .extra_keys = bailingmoe2_extra,
    .moe_layer = glm4moe_moe_layer,
    .n_expert_key = "num_experts",
    .shared_key = "num_shared_experts",
    .nextn_key = "num_nextn_predict_layers",
};
constexpr Family kBailingMoe2AsV1Name = {
    .model_type = "bailing_moe",
    .arch = "bailingmoe2",
    .keys = kBailing2K,
    .global = kBailing2Global,
    .layer = kBailing2L,
    .tokenizer_pre = "bailingmoe2",
    .extra_keys = bailingmoe2_extra,
    .moe_layer = glm4moe_moe_layer,
    .n_expert_key = "num_experts",
    .shared_key = "num_shared_experts",
    .nextn_key = "num_nextn_predict_layers",
};

constexpr const Family* kFamilies[] = {
    &kMixtral, &kLlama,     &kMistral, &kQwen2Moe,   &kQwen3Moe,    &kQwen3VlMoe,
    &kOlmoe,   &kQwen2,     &kQwen3,   &kDeepseekV2, &kDeepseekV3,  &kGptOss,
    &kGlm4Moe, &kMinimaxM2, &kDots1,   &kErnie45Moe, &kBailingMoe2, &kBailingMoe2AsV1Name};

}  // namespace

bool applies(When w, const LayerFacts& l) {
  switch (w) {
    case When::kAlways:
    case When::kOptional:
      return true;
    case When::kMoeLayer:
    case When::kMoeOptional:
      return l.moe;
    case When::kDenseLayer:
      return !l.moe;
    case When::kShared:
      return l.moe && l.shared;
    case When::kQLora:
      return l.q_lora;
    case When::kNoQLora:
      return !l.q_lora;
    case When::kKvBWhole:
      return !l.mla_split;
    case When::kKvBSplit:
      return l.mla_split;
    case When::kQkNorm:
      return l.qk_norm;
    case When::kNextn:
    case When::kNextnOptional:
      return l.nextn;
  }
  return false;
}

bool optional(When w) {
  return w == When::kOptional || w == When::kMoeOptional || w == When::kNextnOptional;
}

std::span<const Family* const> families() {
  return kFamilies;
}

const Family& find_family(const std::string& model_type) {
  for (const Family* f : kFamilies) {
    if (model_type == f->model_type) return *f;
  }
  std::string list;
  for (const Family* f : kFamilies) list += std::string(list.empty() ? "" : ", ") + f->model_type;
  throw Error("config.json: model_type '" + gguf::printable(model_type) +
              "' is not supported by convert (supported: " + list + ")");
}

}  // namespace lynx::convert
