// gemma4 -> `gemma4` (Gemma 4 26B-A4B, Gemma4ForConditionalGeneration; llama.cpp's
// Gemma4Model), facts from Hugging Face's modeling_gemma4.py / configuration_gemma4.py
// (Gemma4TextAttention, Gemma4TextRouter, Gemma4TextExperts, Gemma4TextDecoderLayer) and
// llama.cpp's converter (docs/models.md, src/model/arch/gemma4.cc):
// - the language model's fields in text_config, its tensors under model.language_model.; the
//   vision and audio towers (model.vision_tower., model.embed_vision., model.audio_tower.,
//   model.embed_audio.) not converted (llama.cpp writes them to an mmproj file);
// - every RMSNorm weight as it is: Gemma4RMSNorm multiplies by w, not Gemma 2/3's (1 + w);
//   the embedding scale sqrt(hidden_size) is the architecture's, not written into weights;
// - pre_feedforward_layernorm -> ffn_norm, post_feedforward_layernorm_1 / _2 / (none) ->
//   post_ffw_norm_1 / _2 / post_ffw_norm, pre_feedforward_layernorm_2 -> pre_ffw_norm_2;
//   router.proj -> ffn_gate_inp, router.scale -> ffn_gate_inp.scale, router.per_expert_scale ->
//   ffn_down_exps.scale, layer_scalar -> layer_output_scale;
// - experts fused per layer outputs first: experts.gate_up_proj [E, 2F, hidden] (gate the
//   first F rows, up the last F) written as ffn_gate_exps / ffn_up_exps (llama.cpp writes one
//   ffn_gate_up_exps; the loader and the expert tier take both),
//   experts.down_proj [E, hidden, F];
// - layer_types -> attention.sliding_window_pattern; head_dim / global_head_dim ->
//   key_length_swa / key_length; head_count_kv per layer: num_key_value_heads for the sliding
//   layers, num_global_key_value_heads for the full ones when attention_k_eq_v (HF's
//   use_alternative_attention; their v_proj is then absent and the values are the keys);
// - rope_parameters per layer type: sliding_attention "default" at its rope_theta ->
//   rope.freq_base_swa over the whole head; full_attention "proportional" at its rope_theta ->
//   rope.freq_base, its partial_rotary_factor -> rope_freqs.weight (global_head_dim / 2
//   factors: 1 for the int(global_head_dim * factor / 2) rotating pairs, 1e30 for the rest,
//   as llama.cpp's converter writes them), rope.dimension_count = global_head_dim.
#include <string>
#include <vector>

#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

using X = Transform;

constexpr KeyRule kGemmaKeys[] = {
    {"num_hidden_layers", "block_count", K::kU32, true},
    {"max_position_embeddings", "context_length"},
    {"hidden_size", "embedding_length", K::kU32, true},
    {"intermediate_size", "feed_forward_length", K::kU32, true},
    {"num_attention_heads", "attention.head_count", K::kU32, true},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon", K::kF32, true},
    {"global_head_dim", "attention.key_length", K::kU32, true},
    {"global_head_dim", "attention.value_length", K::kU32, true},
    {"head_dim", "attention.key_length_swa", K::kU32, true},
    {"head_dim", "attention.value_length_swa", K::kU32, true},
    {"sliding_window", "attention.sliding_window", K::kU32, true},
    {"num_experts", "expert_count", K::kU32, true},
    {"top_k_experts", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"final_logit_softcapping", "final_logit_softcapping", K::kF32},
};

#define G4 "model.language_model."
constexpr TensorRule kGemmaGlobal[] = {
    {T::kTokenEmbd, G4 "embed_tokens.weight"},
    {T::kOutputNorm, G4 "norm.weight"},
    {T::kOutput, "lm_head.weight"},  // absent: tied to the embeddings (the released model)
};

#define G4L G4 "layers.{L}."
constexpr TensorRule kGemmaLayer[] = {
    {T::kAttnNorm, G4L "input_layernorm.weight"},
    {T::kAttnQ, G4L "self_attn.q_proj.weight"},
    {T::kAttnK, G4L "self_attn.k_proj.weight"},
    {T::kAttnV, G4L "self_attn.v_proj.weight"},  // absent in full layers with attention_k_eq_v
    {T::kAttnOutput, G4L "self_attn.o_proj.weight"},
    {T::kAttnQNorm, G4L "self_attn.q_norm.weight"},
    {T::kAttnKNorm, G4L "self_attn.k_norm.weight"},
    {T::kPostAttentionNorm, G4L "post_attention_layernorm.weight"},
    {T::kFfnNorm, G4L "pre_feedforward_layernorm.weight"},
    {T::kFfnGate, G4L "mlp.gate_proj.weight"},
    {T::kFfnUp, G4L "mlp.up_proj.weight"},
    {T::kFfnDown, G4L "mlp.down_proj.weight"},
    {T::kPostFfwNorm1, G4L "post_feedforward_layernorm_1.weight"},
    {T::kFfnGateInp, G4L "router.proj.weight"},
    {T::kFfnGateInpScale, G4L "router.scale"},
    {T::kPreFfwNorm2, G4L "pre_feedforward_layernorm_2.weight"},
    {T::kFfnGateExps, G4L "experts.gate_up_proj", X::kRowsGate},
    {T::kFfnUpExps, G4L "experts.gate_up_proj", X::kRowsUp},
    {T::kFfnDownExps, G4L "experts.down_proj", X::kRowsDown},
    {T::kFfnDownExpsScale, G4L "router.per_expert_scale"},
    {T::kPostFfwNorm2, G4L "post_feedforward_layernorm_2.weight"},
    {T::kPostFfwNorm, G4L "post_feedforward_layernorm.weight"},
    {T::kLayerOutputScale, G4L "layer_scalar"},
};
#undef G4L
#undef G4

constexpr Keys kGemmaK[] = {kGemmaKeys};
constexpr Rules kGemmaL[] = {kGemmaLayer};

constexpr const char* kTowers[] = {"model.vision_tower.", "model.embed_vision.",
                                   "model.audio_tower.", "model.embed_audio."};

constexpr Absent kGemmaAbsent[] = {
    {T::kFfnGateUpExps,
     "experts.gate_up_proj is written split (ffn_gate_exps / ffn_up_exps), which the loader "
     "takes as it takes the fused tensor"},
};

// layer_types as sliding flags; every entry must be one of the two kinds, and the last layer
// full (HF forces it full whatever the config says, llama.cpp would not).
std::vector<bool> sliding_layers(const HfConfig& c) {
  const int64_t n = c.get_int("num_hidden_layers");
  const nlohmann::json& j = c.json();
  if (!j.contains("layer_types") || !j["layer_types"].is_array() ||
      int64_t(j["layer_types"].size()) != n) {
    c.fail("layer_types must list every layer (sliding_attention / full_attention)");
  }
  std::vector<bool> out;
  for (const auto& t : j["layer_types"]) {
    const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
    if (s != "sliding_attention" && s != "full_attention") {
      c.fail("layer_types entry '" + s + "' is neither sliding_attention nor full_attention");
    }
    out.push_back(s == "sliding_attention");
  }
  if (out.back()) {
    c.fail("layer_types ends with a sliding layer, but Gemma 4's last layer is full_attention");
  }
  return out;
}

// rope_parameters.<kind> (an object), checked to be the rope type the architecture runs.
const nlohmann::json& rope_of(const HfConfig& c, const char* kind, const char* type) {
  const nlohmann::json& j = c.json();
  if (!j.contains("rope_parameters") || !j["rope_parameters"].is_object() ||
      !j["rope_parameters"].contains(kind) || !j["rope_parameters"][kind].is_object()) {
    c.fail(std::string("rope_parameters.") + kind + " (the " + kind + " layers' rope) is missing");
  }
  const nlohmann::json& r = j["rope_parameters"][kind];
  const nlohmann::json t = r.value("rope_type", nlohmann::json("default"));
  if (!t.is_string() || t.get<std::string>() != type) {
    c.fail(std::string("rope_parameters.") + kind + ".rope_type is " + t.dump() + ", expected \"" +
           type + "\"");
  }
  return r;
}

double number(const HfConfig& c, const nlohmann::json& r, const char* kind, const char* k,
              double def) {
  if (!r.contains(k) || r[k].is_null()) return def;
  if (!r[k].is_number())
    c.fail(std::string("rope_parameters.") + kind + "." + k + " is not a number");
  return r[k].get<double>();
}

// The number of rotating pairs of the full layers' proportional rope (HF's rope_angles).
int64_t full_rope_pairs(const HfConfig& c) {
  const nlohmann::json& r = rope_of(c, "full_attention", "proportional");
  const double f = number(c, r, "full_attention", "partial_rotary_factor", 1.0);
  const int64_t hd = c.get_int("global_head_dim");
  const int64_t pairs = int64_t(double(hd) * f / 2);
  if (!(f > 0 && f <= 1) || pairs < 1) {
    c.fail("rope_parameters.full_attention.partial_rotary_factor " + std::to_string(f) +
           " must rotate at least one pair of global_head_dim");
  }
  return pairs;
}

void gemma4_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "gemma4";
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  if (!c.get_bool("enable_moe_block", false)) {
    c.fail("enable_moe_block is false: the dense Gemma 4 models are not supported");
  }
  if (c.get_int("num_kv_shared_layers", 0) != 0) {
    c.fail(
        "num_kv_shared_layers > 0: KV sharing across layers (Gemma 4 E2B / E4B) is not "
        "supported");
  }
  // llama.cpp's converter reads a missing field as 0 (HF's class default is 256, but then the
  // checkpoint would hold embed_tokens_per_layer, which no rule takes).
  if (c.get_int("hidden_size_per_layer_input", 0) != 0) {
    c.fail(
        "hidden_size_per_layer_input > 0: per-layer input embeddings (Gemma 4 E2B / E4B) are "
        "not supported");
  }
  if (c.get_string("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh") {
    c.fail("hidden_activation '" + c.get_string("hidden_activation", "") +
           "' is not supported (gelu_pytorch_tanh)");
  }
  if (c.get_bool("attention_bias", false)) c.fail("attention_bias is true, but gemma4 has none");
  if (c.get_string("use_bidirectional_attention", "") == "all") {
    c.fail("use_bidirectional_attention \"all\" is not causal attention");
  }
  u32("attention.shared_kv_layers", 0);
  u32("embedding_length_per_layer_input", 0);

  const std::vector<bool> sliding = sliding_layers(c);
  const bool k_eq_v = c.get_bool("attention_k_eq_v", false);
  const int64_t kv_swa = c.get_int("num_key_value_heads");
  const int64_t kv_full = k_eq_v ? c.get_int("num_global_key_value_heads") : kv_swa;
  std::vector<gguf::Value> swa, kv;
  for (bool s : sliding) {
    swa.push_back(gguf::Value::boolean(s));
    kv.push_back(gguf::Value::u32(uint32_t(s ? kv_swa : kv_full)));
  }
  w.set(key(a, "attention.sliding_window_pattern"), gguf::Value::array(gguf::ValueType::BOOL, swa));
  w.set(key(a, "attention.head_count_kv"), gguf::Value::array(gguf::ValueType::UINT32, kv));

  const nlohmann::json& rs = rope_of(c, "sliding_attention", "default");
  if (number(c, rs, "sliding_attention", "partial_rotary_factor", 1.0) != 1.0) {
    c.fail(
        "rope_parameters.sliding_attention.partial_rotary_factor must be 1 (the sliding "
        "layers rotate the whole head)");
  }
  const nlohmann::json& rf = rope_of(c, "full_attention", "proportional");
  full_rope_pairs(c);
  w.set(key(a, "rope.freq_base"),
        gguf::Value::f32(float(number(c, rf, "full_attention", "rope_theta", 1e6))));
  w.set(key(a, "rope.freq_base_swa"),
        gguf::Value::f32(float(number(c, rs, "sliding_attention", "rope_theta", 1e4))));
  u32("rope.dimension_count", c.get_int("global_head_dim"));
  u32("rope.dimension_count_swa", c.get_int("head_dim"));
}

// rope_freqs.weight, read by the full layers only: 1 for a rotating pair, 1e30 (a frequency
// of 0) for the others.
void gemma4_tensors(const HfConfig& c, gguf::Writer& w) {
  const int64_t half = c.get_int("global_head_dim") / 2, pairs = full_rope_pairs(c);
  std::vector<float> out(size_t(half), 1e30f);
  for (int64_t i = 0; i < pairs && i < half; ++i) out[size_t(i)] = 1.f;
  w.add_tensor(arch::tensor::kRopeFreqs, gguf::TensorType::F32, {half}, out.data(),
               out.size() * sizeof(float));
}

}  // namespace

constexpr Family kGemma4 = {
    .model_type = "gemma4",
    .arch = "gemma4",
    .keys = kGemmaK,
    .global = kGemmaGlobal,
    .layer = kGemmaL,
    .tokenizer_pre = "default",  // not checked against llama.cpp (its own "gemma4" tokenizer)
    .extra_keys = gemma4_extra,
    .extra_tensors = gemma4_tensors,
    .ignore_prefixes = kTowers,
    .absent = kGemmaAbsent,
};

}  // namespace lynx::convert::table
