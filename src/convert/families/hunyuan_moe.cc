// hunyuan_v1_moe / hunyuan (HunYuanMoEV1ForCausalLM: Hunyuan-A13B) -> `hunyuan-moe`
//   (HunYuanMoEModel): query_layernorm / key_layernorm -> attn_q_norm / attn_k_norm,
//   mlp.gate.wg -> ffn_gate_inp, experts mlp.experts.N.* stacked, mlp.shared_mlp.* ->
//   ffn_*_shexp; the per-layer lists moe_topk / moe_intermediate_size / num_shared_expert (one
//   value in every layer) -> expert_used_count / expert_feed_forward_length /
//   expert_shared_count; the NTK-alpha rope (rope_scaling type dynamic with alpha) folded into
//   rope.freq_base = rope_theta x alpha^(d / (d - 2)), d the head dimension, as llama.cpp's
//   converter folds it (HF's HunYuanDynamicNTKAlphaRotaryEmbedding uses that base at every
//   position).
#include <cmath>
#include <string>

#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

// kBaseKeys without intermediate_size (Hunyuan's is the shared MLP's unit width, not the
// experts') and rope_theta (written with the alpha folded in).
constexpr KeyRule kHunyuanKeys[] = {
    {"num_hidden_layers", "block_count", K::kU32, true},
    {"max_position_embeddings", "context_length"},
    {"hidden_size", "embedding_length", K::kU32, true},
    {"num_attention_heads", "attention.head_count", K::kU32, true},
    {"num_key_value_heads", "attention.head_count_kv"},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon", K::kF32, true},
    {"num_experts", "expert_count", K::kU32, true},
};

constexpr TensorRule kHunyuanLayer[] = {
    {T::kAttnQNorm, "model.layers.{L}.self_attn.query_layernorm.weight"},
    {T::kAttnKNorm, "model.layers.{L}.self_attn.key_layernorm.weight"},
    {T::kFfnGateInp, "model.layers.{L}.mlp.gate.wg.weight"},
    {T::kFfnGateExps, "model.layers.{L}.mlp.experts.{E}.gate_proj.weight"},
    {T::kFfnUpExps, "model.layers.{L}.mlp.experts.{E}.up_proj.weight"},
    {T::kFfnDownExps, "model.layers.{L}.mlp.experts.{E}.down_proj.weight"},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_mlp.gate_proj.weight"},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_mlp.up_proj.weight"},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_mlp.down_proj.weight"},
};

constexpr Keys kHunyuanK[] = {kHunyuanKeys};

constexpr Rules kHunyuanL[] = {kGqaAttn, kQkvBias, kHunyuanLayer};

// A field HF reads per layer (an int, or a list with one entry per layer): the architecture has
// one value for every layer, so a list whose entries differ is refused.
int64_t same_in_every_layer(const HfConfig& c, const char* k) {
  const nlohmann::json& v = c.json().contains(k) ? c.json().at(k) : nlohmann::json();
  if (!v.is_array()) return c.get_int(k);
  const int64_t n = c.get_int("num_hidden_layers");
  if (int64_t(v.size()) != n) {
    c.fail(std::string(k) + " lists " + std::to_string(v.size()) + " values for " +
           std::to_string(n) + " layers");
  }
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 1 || x != v.front()) {
      c.fail(std::string(k) + " " + v.dump() +
             ": hunyuan-moe (llama.cpp's and lynx-moe's) has one positive value for every layer");
    }
  }
  return v.front().get<int64_t>();
}

// Hunyuan-A13B's config.json. What hunyuan-moe (llama.cpp's graph and lynx-moe's) cannot express
// is refused rather than converted into a file that runs another model: cross-layer attention
// (use_cla), biases (attention_bias also biases o_proj, which the architecture has not), no q/k
// norm or no shared MLP, leading dense layers, another activation, a rope scaling other than the
// NTK alpha.
void hunyuan_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "hunyuan-moe";
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  const auto& j = c.json();
  if (c.model_type() == "hunyuan") {  // the name HunYuan's dense checkpoints use too
    const bool moe = j.contains("architectures") && j.at("architectures").is_array() &&
                     !j.at("architectures").empty() &&
                     j.at("architectures")[0] == "HunYuanMoEV1ForCausalLM";
    if (!moe) c.fail("architectures is not HunYuanMoEV1ForCausalLM (the dense HunYuan models)");
  }
  if (c.get_bool("use_cla", false)) {
    c.fail("use_cla is true: cross-layer attention, which hunyuan-moe does not run");
  }
  if (c.get_bool("attention_bias", false) || c.get_bool("mlp_bias", false)) {
    c.fail("attention_bias / mlp_bias is true, but hunyuan-moe has no output or MLP biases");
  }
  if (!c.get_bool("use_qk_norm", false)) {
    c.fail("use_qk_norm is false, but hunyuan-moe needs query_layernorm / key_layernorm");
  }
  if (!c.get_bool("use_mixed_mlp_moe", false)) {
    c.fail("use_mixed_mlp_moe is false, but hunyuan-moe has a shared MLP in every layer");
  }
  if (c.get_int("moe_layer_num_skipped", 0) != 0) {
    c.fail("moe_layer_num_skipped > 0: leading dense layers, which hunyuan-moe does not have");
  }
  if (c.get_string("hidden_act", "silu") != "silu") {
    c.fail("hidden_act '" + c.get_string("hidden_act", "") + "' is not supported (silu)");
  }
  const int64_t heads = c.get_int("num_attention_heads");
  const int64_t head = c.has("head_dim")             ? c.get_int("head_dim")
                       : c.has("attention_head_dim") ? c.get_int("attention_head_dim")
                                                     : c.get_int("hidden_size") / heads;
  if (c.has("head_dim") && c.has("attention_head_dim") && c.get_int("attention_head_dim") != head) {
    c.fail("head_dim and attention_head_dim differ");
  }
  if (head < 4 || head % 2 != 0) c.fail("the head dimension must be even and at least 4");
  u32("attention.key_length", head);
  u32("attention.value_length", head);
  u32("rope.dimension_count", head);  // the whole head rotates (llama.cpp asserts it)
  // The experts' width is also feed_forward_length: llama.cpp's graph sizes the experts by it
  // (its converter writes intermediate_size, the same 3072 in the release).
  const int64_t ff_exp = same_in_every_layer(c, "moe_intermediate_size");
  u32("feed_forward_length", ff_exp);
  u32("expert_feed_forward_length", ff_exp);
  u32("expert_used_count", same_in_every_layer(c, "moe_topk"));
  // HF's shared MLP is intermediate_size x num_shared_expert wide.
  const int64_t n_shared = same_in_every_layer(c, "num_shared_expert");
  u32("expert_shared_count", n_shared);
  u32("expert_shared_feed_forward_length", c.get_int("intermediate_size") * n_shared);
  u32("expert_gating_func", 1);  // softmax, then the top k renormalized (HF's topkgating)
  w.set(key(a, "expert_weights_norm"), gguf::Value::boolean(true));
  double base = c.get_float("rope_theta", 10000.0);
  if (c.has("rope_scaling")) {
    const nlohmann::json& r = j.at("rope_scaling");
    std::string type;
    for (const char* k : {"type", "rope_type"}) {
      if (r.is_object() && r.contains(k) && r[k].is_string()) type = r[k].get<std::string>();
    }
    if (type != "dynamic" || !r.contains("alpha") || !r["alpha"].is_number() ||
        !(r["alpha"].get<double>() > 0)) {
      c.fail(
          "rope_scaling must be of type dynamic with an alpha (HunYuan's NTK-alpha rope); "
          "got " +
          r.dump());
    }
    const double d = double(head);
    base *= std::pow(r["alpha"].get<double>(), d / (d - 2));
  }
  w.set(key(a, "rope.freq_base"), gguf::Value::f32(float(base)));
}

}  // namespace

// The released checkpoint's own config (trust_remote_code) says "hunyuan".
constexpr const char* kHunyuanOtherNames[] = {"hunyuan"};

constexpr Family kHunyuanMoe = {
    .model_type = "hunyuan_v1_moe",
    .arch = "hunyuan-moe",
    .keys = kHunyuanK,
    .global = kGlobal,
    .layer = kHunyuanL,
    .tokenizer_pre = "hunyuan",
    .extra_keys = hunyuan_extra,
    .other_model_types = kHunyuanOtherNames,
};

}  // namespace lynx::convert::table
