// qwen3_moe -> `qwen3moe` (per-head q/k norms, experts stacked as qwen2moe.cc says), and
// qwen3_vl_moe -> `qwen3vlmoe` (Qwen3VLMoeTextModel): text_config lifted, the language model's
//   tensors under model.language_model. as qwen3_moe's, experts fused per layer
//   (mlp.experts.gate_up_proj [E, hidden, 2F] split in halves, down_proj [E, F, hidden]),
//   mrope_section -> rope.dimension_sections, the vision tower (model.visual.*) not converted.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

// Qwen3-VL-MoE: the language model under model.language_model., experts fused per layer.
constexpr TensorRule kVlGlobal[] = {
    {T::kTokenEmbd, "model.language_model.embed_tokens.weight"},
    {T::kOutputNorm, "model.language_model.norm.weight"},
    {T::kOutput, "lm_head.weight"},
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
    {T::kFfnGateExps, "model.language_model.layers.{L}.mlp.experts.gate_up_proj",
     Transform::kHalfGate},
    {T::kFfnUpExps, "model.language_model.layers.{L}.mlp.experts.gate_up_proj", Transform::kHalfUp},
    {T::kFfnDownExps, "model.language_model.layers.{L}.mlp.experts.down_proj",
     Transform::kHalfDown},
};

constexpr Rules kQwen3VlMoeL[] = {kVlLayer};

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

}  // namespace

constexpr Family kQwen3Moe = {
    .model_type = "qwen3_moe",
    .arch = "qwen3moe",
    .keys = kQwenMoeK,
    .global = kGlobal,
    .layer = kQkNormMoeL,
    .tokenizer_pre = "qwen2",
    .extra_keys = plain_extra,
    .absent = kAbsentDenseShared,
};

constexpr Family kQwen3VlMoe = {
    .model_type = "qwen3_vl_moe",
    .arch = "qwen3vlmoe",
    .keys = kQwenMoeK,
    .global = kVlGlobal,
    .layer = kQwen3VlMoeL,
    .tokenizer_pre = "qwen2",
    .extra_keys = qwen3vl_extra,
    .ignore_prefixes = kVisual,
    .absent = kAbsentDenseShared,
};

}  // namespace lynx::convert::table
