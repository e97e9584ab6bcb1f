// step3p5 -> `step35` (StepFun Step-3.5-Flash; llama.cpp's Step35Model), facts from Hugging
// Face's modeling_step3p5.py / its config and src/model/arch/step35.cc:
// - layer_types (full_attention / sliding_attention) -> attention.sliding_window_pattern; the
//   full layers' heads num_attention_heads / num_attention_groups, the sliding layers'
//   attention_other_setting's, as per-layer head_count / head_count_kv arrays;
// - rope_theta (one, or one per layer) -> rope.freq_base (full layers) and rope.freq_base_swa;
//   partial_rotary_factors (full 0.5, sliding 1.0 by default) -> rope.dimension_count (the
//   full layers rotate half of it) and rope.dimension_count_swa; llama3-type rope_scaling (for
//   the full layers, yarn_only_types) -> rope_freqs.weight, its factors over the whole head
//   as llama.cpp's converter computes them (docs/models.md: not HF's exact long-range rope);
// - every RMSNorm weight (model.norm, input_layernorm, post_attention_layernorm, q_norm,
//   k_norm) stored with the 1 HF adds; g_proj -> attn_gate; moe_layers_enum (the MoE layers,
//   which must be the layers after a dense lead) -> leading_dense_block_count; experts stacked
//   per layer [n_expert, out, in] (moe.gate_proj / up_proj / down_proj); moe.gate -> ffn_gate_inp,
//   moe.router_bias -> exp_probs_b.bias, share_expert.* -> ffn_*_shexp; moe_router_activation
//   -> expert_gating_func; swiglu_limits / swiglu_limits_shared (null: none) ->
//   swiglu_clamp_exp / swiglu_clamp_shexp; the MTP layers after num_hidden_layers dropped.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

using X = Transform;

constexpr KeyRule kStepKeys[] = {
    {"num_hidden_layers", "block_count", K::kU32, true},
    {"max_position_embeddings", "context_length"},
    {"hidden_size", "embedding_length", K::kU32, true},
    {"intermediate_size", "feed_forward_length", K::kU32, true},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon", K::kF32, true},
    {"head_dim", "attention.key_length", K::kU32, true},
    {"head_dim", "attention.value_length", K::kU32, true},
    {"sliding_window", "attention.sliding_window", K::kU32, true},
    {"moe_num_experts", "expert_count", K::kU32, true},
    {"moe_top_k", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"share_expert_dim", "expert_shared_feed_forward_length", K::kU32, true},
    {"moe_router_scaling_factor", "expert_weights_scale", K::kF32},
    {"norm_expert_weight", "expert_weights_norm", K::kBool},
};

constexpr TensorRule kStepGlobal[] = {
    {T::kTokenEmbd, "model.embed_tokens.weight"},
    {T::kOutputNorm, "model.norm.weight", X::kPlusOne},
    {T::kOutput, "lm_head.weight"},
};

constexpr TensorRule kStepLayer[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight", X::kPlusOne},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnK, "model.layers.{L}.self_attn.k_proj.weight"},
    {T::kAttnV, "model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kAttnQNorm, "model.layers.{L}.self_attn.q_norm.weight", X::kPlusOne},
    {T::kAttnKNorm, "model.layers.{L}.self_attn.k_norm.weight", X::kPlusOne},
    {T::kAttnGate, "model.layers.{L}.self_attn.g_proj.weight"},
    {T::kFfnNorm, "model.layers.{L}.post_attention_layernorm.weight", X::kPlusOne},
    {T::kFfnGate, "model.layers.{L}.mlp.gate_proj.weight"},
    {T::kFfnUp, "model.layers.{L}.mlp.up_proj.weight"},
    {T::kFfnDown, "model.layers.{L}.mlp.down_proj.weight"},
    {T::kFfnGateInp, "model.layers.{L}.moe.gate.weight"},
    {T::kExpProbsB, "model.layers.{L}.moe.router_bias"},
    {T::kFfnGateExps, "model.layers.{L}.moe.gate_proj.weight", X::kStacked3d},
    {T::kFfnUpExps, "model.layers.{L}.moe.up_proj.weight", X::kStacked3d},
    {T::kFfnDownExps, "model.layers.{L}.moe.down_proj.weight", X::kStacked3d},
    {T::kFfnGateShexp, "model.layers.{L}.share_expert.gate_proj.weight"},
    {T::kFfnUpShexp, "model.layers.{L}.share_expert.up_proj.weight"},
    {T::kFfnDownShexp, "model.layers.{L}.share_expert.down_proj.weight"},
};

constexpr Keys kStepK[] = {kStepKeys};
constexpr Rules kStepL[] = {kStepLayer};

constexpr char kSliding[] = "sliding_attention";

// One value per layer from a config field: a list (its first n entries; null reads `none`) or
// one number for every layer; absent: `def` for every layer.
std::vector<double> per_layer(const HfConfig& c, const char* k, int64_t n, double def,
                              double none) {
  const auto& j = c.json();
  std::vector<double> out(size_t(n), def);
  if (!j.contains(k) || j[k].is_null()) return out;
  const auto& v = j[k];
  if (v.is_number()) return std::vector<double>(size_t(n), v.get<double>());
  if (!v.is_array() || int64_t(v.size()) < n) c.fail(std::string(k) + " must list every layer");
  for (int64_t i = 0; i < n; ++i) {
    const auto& x = v[size_t(i)];
    if (!x.is_null() && !x.is_number()) c.fail(std::string(k) + " must hold numbers");
    out[size_t(i)] = x.is_null() ? none : x.get<double>();
  }
  return out;
}

// The one value of a per-layer list over the layers of one kind; lists that differ within a
// kind are refused (the architecture has one geometry per kind).
double of_kind(const HfConfig& c, const std::vector<double>& v, const std::vector<bool>& sliding,
               bool kind, const char* k, double def) {
  double got = def;
  bool seen = false;
  for (size_t i = 0; i < v.size(); ++i) {
    if (sliding[i] != kind) continue;
    if (seen && v[i] != got) {
      c.fail(std::string(k) + " differs between " + (kind ? "sliding" : "full") + " layers");
    }
    got = v[i];
    seen = true;
  }
  return got;
}

std::vector<bool> sliding_layers(const HfConfig& c) {
  const int64_t n = c.get_int("num_hidden_layers");
  const auto& j = c.json();
  if (!j.contains("layer_types") || !j["layer_types"].is_array() ||
      int64_t(j["layer_types"].size()) < n) {
    c.fail("layer_types must list every layer (full_attention / sliding_attention)");
  }
  std::vector<bool> out;
  for (int64_t i = 0; i < n; ++i) {
    const auto& t = j["layer_types"][size_t(i)];
    if (!t.is_string() || (t != "full_attention" && t != kSliding)) {
      c.fail("layer_types[" + std::to_string(i) + "] is " + t.dump() +
             " (full_attention or sliding_attention)");
    }
    out.push_back(t == kSliding);
  }
  return out;
}

// llama3-type rope_scaling, checked: {rope_type llama3, factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings}, applied to the full layers only.
const nlohmann::json* llama3_scaling(const HfConfig& c) {
  if (!c.has("rope_scaling")) return nullptr;
  const nlohmann::json& r = c.json()["rope_scaling"];
  const std::string type = r.is_object() ? r.value("rope_type", r.value("type", "")) : "";
  if (type != "llama3") c.fail("rope_scaling must be of type llama3 for step3p5");
  for (const char* k :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    if (!r.contains(k) || !r[k].is_number() || !(r[k].get<double>() > 0)) {
      c.fail(std::string("rope_scaling.") + k + " must be a positive number");
    }
  }
  if (!(r["high_freq_factor"].get<double>() > r["low_freq_factor"].get<double>())) {
    c.fail("rope_scaling.high_freq_factor must exceed low_freq_factor");
  }
  const auto& j = c.json();
  if (j.contains("yarn_only_types") && !j["yarn_only_types"].is_null() &&
      j["yarn_only_types"] != nlohmann::json::array({"full_attention"})) {
    c.fail("yarn_only_types other than [\"full_attention\"] is not supported");
  }
  return &r;
}

void step35_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "step35";
  const auto& j = c.json();
  const int64_t n = c.get_int("num_hidden_layers"), hd = c.get_int("head_dim");
  const std::vector<bool> sliding = sliding_layers(c);
  // Heads per layer.
  const nlohmann::json other = j.value("attention_other_setting", nlohmann::json::object());
  const bool any_sliding = std::find(sliding.begin(), sliding.end(), true) != sliding.end();
  if (any_sliding) {
    if (!other.is_object() || !other.contains("num_attention_heads") ||
        !other.contains("num_attention_groups")) {
      c.fail(
          "attention_other_setting must give the sliding layers' num_attention_heads and "
          "num_attention_groups");
    }
    if (other.value("attention_type", std::string(kSliding)) != kSliding) {
      c.fail("attention_other_setting.attention_type must be sliding_attention");
    }
    if (other.value("head_dim", hd) != hd) {
      c.fail("attention_other_setting.head_dim differs from head_dim (one head width)");
    }
  }
  std::vector<gguf::Value> heads, kv, swa;
  for (int64_t i = 0; i < n; ++i) {
    const bool s = sliding[size_t(i)];
    heads.push_back(gguf::Value::u32(uint32_t(s ? other["num_attention_heads"].get<int64_t>()
                                                : c.get_int("num_attention_heads"))));
    kv.push_back(gguf::Value::u32(uint32_t(s ? other["num_attention_groups"].get<int64_t>()
                                             : c.get_int("num_attention_groups"))));
    swa.push_back(gguf::Value::boolean(s));
  }
  w.set(key(a, "attention.head_count"), gguf::Value::array(gguf::ValueType::UINT32, heads));
  w.set(key(a, "attention.head_count_kv"), gguf::Value::array(gguf::ValueType::UINT32, kv));
  w.set(key(a, "attention.sliding_window_pattern"), gguf::Value::array(gguf::ValueType::BOOL, swa));
  // Rope.
  const auto theta = per_layer(c, "rope_theta", n, 10000.0, 10000.0);
  const double base_full = of_kind(c, theta, sliding, false, "rope_theta", theta[0]);
  const double base_swa = of_kind(c, theta, sliding, true, "rope_theta", base_full);
  const auto prf = per_layer(c, "partial_rotary_factors", n, -1.0, -1.0);
  std::vector<double> prf_def(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    prf_def[size_t(i)] = prf[size_t(i)] >= 0 ? prf[size_t(i)] : sliding[size_t(i)] ? 1.0 : 0.5;
  }
  const double prf_full = of_kind(c, prf_def, sliding, false, "partial_rotary_factors", 0.5);
  const double prf_swa = of_kind(c, prf_def, sliding, true, "partial_rotary_factors", 1.0);
  const double rot = 2.0 * prf_full * double(hd), rot_swa = prf_swa * double(hd);
  if (rot != std::floor(rot) || int64_t(rot) % 4 != 0 || rot > double(hd) || rot < 4 ||
      rot_swa != std::floor(rot_swa) || int64_t(rot_swa) % 2 != 0 || rot_swa < 2 ||
      rot_swa > double(hd)) {
    c.fail(
        "partial_rotary_factors give rotated widths the architecture cannot express (full "
        "layers: a multiple of 2 of at most half of head_dim; sliding: even, at most head_dim)");
  }
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  u32("rope.dimension_count", int64_t(rot));
  u32("rope.dimension_count_swa", int64_t(rot_swa));
  w.set(key(a, "rope.freq_base"), gguf::Value::f32(float(base_full)));
  w.set(key(a, "rope.freq_base_swa"), gguf::Value::f32(float(base_swa)));
  llama3_scaling(c);
  // MoE layers: the ones after the dense lead.
  std::vector<int64_t> moe;
  if (j.contains("moe_layers_enum") && j["moe_layers_enum"].is_string()) {
    const std::string s = j["moe_layers_enum"].get<std::string>();
    size_t at = 0;
    while (at < s.size()) {
      const size_t end = std::min(s.find(',', at), s.size());
      const std::string item = s.substr(at, end - at);
      if (!item.empty()) {
        try {
          moe.push_back(std::stoll(item));
        } catch (const std::exception&) {
          c.fail("moe_layers_enum must list layer numbers");
        }
      }
      at = end + 1;
    }
  } else if (j.contains("moe_layers_enum") && j["moe_layers_enum"].is_array()) {
    for (const auto& x : j["moe_layers_enum"]) {
      if (!x.is_number_integer()) c.fail("moe_layers_enum must list layer numbers");
      moe.push_back(x.get<int64_t>());
    }
  } else {
    c.fail("moe_layers_enum (the MoE layers) is required");
  }
  std::sort(moe.begin(), moe.end());
  const int64_t lead = moe.empty() ? n : moe.front();
  for (size_t i = 0; i < moe.size(); ++i) {
    if (moe[i] != lead + int64_t(i) || moe[i] >= n + 16) {
      c.fail(
          "moe_layers_enum must be the layers after a dense lead (step35 has dense layers "
          "only before the MoE ones)");
    }
  }
  u32("leading_dense_block_count", lead);
  const std::string act = c.get_string("moe_router_activation", "softmax");
  if (act != "sigmoid" && act != "softmax") {
    c.fail("moe_router_activation '" + act + "' is not supported (sigmoid, softmax)");
  }
  u32("expert_gating_func", act == "sigmoid" ? 2 : 1);
  for (auto [hf, gg] : {std::pair{"swiglu_limits", "swiglu_clamp_exp"},
                        std::pair{"swiglu_limits_shared", "swiglu_clamp_shexp"}}) {
    if (!c.has(hf)) continue;
    std::vector<gguf::Value> v;
    for (double x : per_layer(c, hf, n, 0.0, 0.0)) {
      if (!(x >= 0) || !std::isfinite(x)) c.fail(std::string(hf) + " must be >= 0");
      v.push_back(gguf::Value::f32(float(x)));
    }
    w.set(key(a, gg), gguf::Value::array(gguf::ValueType::FLOAT32, v));
  }
  if (c.get_string("hidden_act", "silu") != "silu") {
    c.fail("hidden_act '" + c.get_string("hidden_act", "") + "' is not supported (silu)");
  }
  if (c.get_bool("attention_bias", false) || c.get_bool("mlp_bias", false)) {
    c.fail("attention_bias / mlp_bias is true, but step35 has no biases");
  }
}

// rope_freqs.weight (llama3-type scaling): head_dim / 2 divisors over the whole head's
// frequencies base^(-2i/head_dim) at the full layers' base: 1 below the high-frequency
// wavelength, `factor` above the low-frequency one, a smooth blend between.
void step35_tensors(const HfConfig& c, gguf::Writer& w) {
  const nlohmann::json* r = llama3_scaling(c);
  if (!r) return;
  const int64_t n = c.get_int("num_hidden_layers"), d = c.get_int("head_dim");
  const std::vector<bool> sliding = sliding_layers(c);
  const auto theta = per_layer(c, "rope_theta", n, 10000.0, 10000.0);
  const double base = of_kind(c, theta, sliding, false, "rope_theta", theta[0]);
  const double f = (*r)["factor"].get<double>(), lo = (*r)["low_freq_factor"].get<double>();
  const double hi = (*r)["high_freq_factor"].get<double>();
  const double orig = (*r)["original_max_position_embeddings"].get<double>();
  std::vector<float> out;
  for (int64_t i = 0; i < d / 2; ++i) {
    const double wl = 2 * std::numbers::pi * std::pow(base, 2.0 * double(i) / double(d));
    if (wl < orig / hi) {
      out.push_back(1.f);
    } else if (wl > orig / lo) {
      out.push_back(float(f));
    } else {
      const double smooth = (orig / wl - lo) / (hi - lo);
      out.push_back(float(1.0 / ((1.0 - smooth) / f + smooth)));
    }
  }
  w.add_tensor(arch::tensor::kRopeFreqs, gguf::TensorType::F32, {int64_t(out.size())}, out.data(),
               out.size() * sizeof(float));
}

}  // namespace

constexpr Family kStep35 = {
    .model_type = "step3p5",
    .arch = "step35",
    .keys = kStepK,
    .global = kStepGlobal,
    .layer = kStepL,
    .tokenizer_pre = "default",  // not checked against llama.cpp's hash table
    .extra_keys = step35_extra,
    .extra_tensors = step35_tensors,
};

}  // namespace lynx::convert::table
