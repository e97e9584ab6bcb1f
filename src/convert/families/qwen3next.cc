// qwen3_next -> `qwen3next` (Qwen3-Next-80B-A3B, Qwen3-Coder-Next; llama.cpp's Qwen3NextModel)
// and qwen3_5_moe -> `qwen35moe` (Qwen3.5 35B-A3B / 122B-A10B / 397B-A17B, the language model;
// Qwen3_5MoeTextModel), facts from Hugging Face's modeling_qwen3_next.py /
// modeling_qwen3_5_moe.py and llama.cpp's converter (docs/models.md, src/model/arch/qwen3next.cc):
// - the (1 + w) RMSNorm weights (input_layernorm, post_attention_layernorm, model.norm, q_norm,
//   k_norm) stored with the 1 added; linear_attn.norm (the gated norm) as it is;
// - linear_attn.A_log -> ssm_a = -exp(A_log), dt_bias -> ssm_dt.bias, conv1d [C, 1, K] ->
//   ssm_conv1d [C, K], out_proj -> ssm_out, norm -> ssm_norm;
// - Qwen3-Next: in_proj_qkvz (per key head q, k, then its value heads' v and z) split into
//   attn_qkv (all q, all k, all v) and attn_gate (z); in_proj_ba -> ssm_ba as it is;
// - Qwen3.5: in_proj_qkv / in_proj_z / in_proj_b / in_proj_a -> attn_qkv / attn_gate /
//   ssm_beta / ssm_alpha, the value heads reordered from grouped by key head to tiled (in v's
//   rows, z, b, a, A_log, dt_bias, the conv's v channels and out_proj's columns), experts fused
//   outputs first (mlp.experts.gate_up_proj / down_proj), the tensors under
//   model.language_model., the vision tower (model.visual.) not converted, mrope_section ->
//   rope.dimension_sections;
// - gated attention (self_attn.q_proj gives per head the query then the gate) as it is; the
//   MTP module (mtp.*) dropped, as llama.cpp's converter does.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

using X = Transform;

constexpr KeyRule kNextKeys[] = {
    {"num_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"shared_expert_intermediate_size", "expert_shared_feed_forward_length", K::kU32, true},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
    {"linear_conv_kernel_dim", "ssm.conv_kernel", K::kU32, true},
    {"linear_key_head_dim", "ssm.state_size", K::kU32, true},
    {"linear_num_key_heads", "ssm.group_count", K::kU32, true},
    {"linear_num_value_heads", "ssm.time_step_rank", K::kU32, true},
    {"full_attention_interval", "full_attention_interval", K::kU32, true},
};

constexpr TensorRule kNextGlobal[] = {
    {T::kTokenEmbd, "model.embed_tokens.weight"},
    {T::kOutputNorm, "model.norm.weight", X::kPlusOne},
    {T::kOutput, "lm_head.weight"},
};

constexpr TensorRule kNextLayer[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight", X::kPlusOne},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnK, "model.layers.{L}.self_attn.k_proj.weight"},
    {T::kAttnV, "model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kAttnQNorm, "model.layers.{L}.self_attn.q_norm.weight", X::kPlusOne},
    {T::kAttnKNorm, "model.layers.{L}.self_attn.k_norm.weight", X::kPlusOne},
    {T::kAttnQkv, "model.layers.{L}.linear_attn.in_proj_qkvz.weight", X::kQkvzToQkv},
    {T::kAttnGate, "model.layers.{L}.linear_attn.in_proj_qkvz.weight", X::kQkvzToZ},
    {T::kSsmBa, "model.layers.{L}.linear_attn.in_proj_ba.weight"},
    {T::kSsmConv1d, "model.layers.{L}.linear_attn.conv1d.weight", X::kConv1d},
    {T::kSsmDt, "model.layers.{L}.linear_attn.dt_bias"},
    {T::kSsmA, "model.layers.{L}.linear_attn.A_log", X::kNegExp},
    {T::kSsmNorm, "model.layers.{L}.linear_attn.norm.weight"},
    {T::kSsmOut, "model.layers.{L}.linear_attn.out_proj.weight"},
    {T::kPostAttentionNorm, "model.layers.{L}.post_attention_layernorm.weight", X::kPlusOne},
    {T::kFfnGateInp, "model.layers.{L}.mlp.gate.weight"},
    {T::kFfnGateExps, "model.layers.{L}.mlp.experts.{E}.gate_proj.weight"},
    {T::kFfnUpExps, "model.layers.{L}.mlp.experts.{E}.up_proj.weight"},
    {T::kFfnDownExps, "model.layers.{L}.mlp.experts.{E}.down_proj.weight"},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_expert.gate_proj.weight"},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_expert.up_proj.weight"},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_expert.down_proj.weight"},
    {T::kFfnGateInpShexp, "model.layers.{L}.mlp.shared_expert_gate.weight"},
};

constexpr TensorRule k35Global[] = {
    {T::kTokenEmbd, "model.language_model.embed_tokens.weight"},
    {T::kOutputNorm, "model.language_model.norm.weight", X::kPlusOne},
    {T::kOutput, "lm_head.weight"},
};

constexpr TensorRule k35Layer[] = {
    {T::kAttnNorm, "model.language_model.layers.{L}.input_layernorm.weight", X::kPlusOne},
    {T::kAttnQ, "model.language_model.layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnK, "model.language_model.layers.{L}.self_attn.k_proj.weight"},
    {T::kAttnV, "model.language_model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.language_model.layers.{L}.self_attn.o_proj.weight"},
    {T::kAttnQNorm, "model.language_model.layers.{L}.self_attn.q_norm.weight", X::kPlusOne},
    {T::kAttnKNorm, "model.language_model.layers.{L}.self_attn.k_norm.weight", X::kPlusOne},
    {T::kAttnQkv, "model.language_model.layers.{L}.linear_attn.in_proj_qkv.weight", X::kTiledQkv},
    {T::kAttnGate, "model.language_model.layers.{L}.linear_attn.in_proj_z.weight", X::kTiledRows},
    {T::kSsmBeta, "model.language_model.layers.{L}.linear_attn.in_proj_b.weight", X::kTiledRows},
    {T::kSsmAlpha, "model.language_model.layers.{L}.linear_attn.in_proj_a.weight", X::kTiledRows},
    {T::kSsmConv1d, "model.language_model.layers.{L}.linear_attn.conv1d.weight", X::kTiledConv1d},
    {T::kSsmDt, "model.language_model.layers.{L}.linear_attn.dt_bias", X::kTiledRows},
    {T::kSsmA, "model.language_model.layers.{L}.linear_attn.A_log", X::kTiledNegExp},
    {T::kSsmNorm, "model.language_model.layers.{L}.linear_attn.norm.weight"},
    {T::kSsmOut, "model.language_model.layers.{L}.linear_attn.out_proj.weight", X::kTiledCols},
    {T::kPostAttentionNorm, "model.language_model.layers.{L}.post_attention_layernorm.weight",
     X::kPlusOne},
    {T::kFfnGateInp, "model.language_model.layers.{L}.mlp.gate.weight"},
    {T::kFfnGateExps, "model.language_model.layers.{L}.mlp.experts.gate_up_proj", X::kRowsGate},
    {T::kFfnUpExps, "model.language_model.layers.{L}.mlp.experts.gate_up_proj", X::kRowsUp},
    {T::kFfnDownExps, "model.language_model.layers.{L}.mlp.experts.down_proj", X::kRowsDown},
    {T::kFfnGateShexp, "model.language_model.layers.{L}.mlp.shared_expert.gate_proj.weight"},
    {T::kFfnUpShexp, "model.language_model.layers.{L}.mlp.shared_expert.up_proj.weight"},
    {T::kFfnDownShexp, "model.language_model.layers.{L}.mlp.shared_expert.down_proj.weight"},
    {T::kFfnGateInpShexp, "model.language_model.layers.{L}.mlp.shared_expert_gate.weight"},
};

constexpr Keys kNextK[] = {kBaseKeys, kHeadDimKeys, kNextKeys};
constexpr Rules kNextL[] = {kNextLayer};
constexpr Rules k35L[] = {k35Layer};

// What both share: the value width, the rotated dims, and the switches the architecture has one
// answer to (refused otherwise): every layer MoE, the layer pattern of full_attention_interval,
// SiLU.
void common_keys(const HfConfig& c, gguf::Writer& w, const char* a) {
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  u32("ssm.inner_size", c.get_int("linear_value_head_dim") * c.get_int("linear_num_value_heads"));
  const int64_t head = c.get_int("head_dim");
  const double prf = c.get_float("partial_rotary_factor", 0.25);
  const int64_t rot = int64_t(double(head) * prf);
  if (!(prf > 0 && prf <= 1) || rot < 2 || rot % 2 != 0) {
    c.fail("partial_rotary_factor " + std::to_string(prf) + " x head_dim " + std::to_string(head) +
           " must give an even number of rotated dimensions");
  }
  u32("rope.dimension_count", rot);
  if (c.get_string("hidden_act", "silu") != "silu") {
    c.fail("hidden_act '" + c.get_string("hidden_act", "") + "' is not supported (silu)");
  }
  const auto& j = c.json();
  if (c.get_int("decoder_sparse_step", 1) != 1 ||
      (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array() &&
       !j["mlp_only_layers"].empty())) {
    c.fail("decoder_sparse_step / mlp_only_layers with dense layers are not supported");
  }
  const int64_t every = c.get_int("full_attention_interval");
  if (every < 1) c.fail("full_attention_interval must be at least 1");
  if (j.contains("layer_types")) {
    const auto& lt = j["layer_types"];
    if (!lt.is_array() || int64_t(lt.size()) < c.get_int("num_hidden_layers")) {
      c.fail("layer_types must list num_hidden_layers entries");
    }
    for (int64_t i = 0; i < c.get_int("num_hidden_layers"); ++i) {
      const char* want = (i + 1) % every == 0 ? "full_attention" : "linear_attention";
      if (!lt[size_t(i)].is_string() || lt[size_t(i)].get<std::string>() != want) {
        c.fail("layer_types[" + std::to_string(i) + "] is " + lt[size_t(i)].dump() +
               ", expected \"" + want + "\" (every full_attention_interval-th layer full)");
      }
    }
  }
}

void next_extra(const HfConfig& c, gguf::Writer& w) {
  no_rope_scaling(c);
  common_keys(c, w, "qwen3next");
}

// Qwen3.5's interleaved M-RoPE: mrope_section [t, h, w] (in rope_scaling or rope_parameters)
// -> rope.dimension_sections [t, h, w, 0]; the architecture checks that they cover the rotated
// pairs.
void q35_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "qwen35moe";
  common_keys(c, w, a);
  const nlohmann::json& j = c.json();
  const nlohmann::json* rope = nullptr;
  for (const char* k : {"rope_scaling", "rope_parameters"}) {
    if (j.contains(k) && j[k].is_object() && j[k].contains("mrope_section")) rope = &j[k];
  }
  if (!rope) c.fail("rope_parameters.mrope_section (interleaved M-RoPE) is missing");
  const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
  if (type != "default") c.fail("rope type '" + type + "' is not supported (default M-RoPE only)");
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
}

}  // namespace

constexpr Family kQwen3Next = {
    .model_type = "qwen3_next",
    .arch = "qwen3next",
    .keys = kNextK,
    .global = kNextGlobal,
    .layer = kNextL,
    .tokenizer_pre = "qwen2",
    .extra_keys = next_extra,
};

constexpr Family kQwen35Moe = {
    .model_type = "qwen3_5_moe",
    .arch = "qwen35moe",
    .keys = kNextK,
    .global = k35Global,
    .layer = k35L,
    .tokenizer_pre = "qwen35",
    .extra_keys = q35_extra,
    .ignore_prefixes = kVisual,
};

}  // namespace lynx::convert::table
