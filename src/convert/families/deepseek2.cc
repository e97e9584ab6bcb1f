// deepseek_v2 / deepseek_v3 -> `deepseek2`: kv_b_proj kept whole as attn_kv_b (the loader
//   splits it per head), e_score_correction_bias -> exp_probs_b.bias, the first
//   first_k_dense_replace layers dense, scoring_func -> expert_gating_func, YaRN keys.
// glm_moe_dsa (GLM-5) -> `glm-dsa`: the same tables, sigmoid routing, the DSA indexer's tensors
//   written as they are (Family::unrun) with its keys.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

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

constexpr TensorRule kMlaAttn[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnQA, "model.layers.{L}.self_attn.q_a_proj.weight"},
    {T::kAttnQANorm, "model.layers.{L}.self_attn.q_a_layernorm.weight"},
    {T::kAttnQB, "model.layers.{L}.self_attn.q_b_proj.weight"},
    {T::kAttnKvAMqa, "model.layers.{L}.self_attn.kv_a_proj_with_mqa.weight"},
    {T::kAttnKvANorm, "model.layers.{L}.self_attn.kv_a_layernorm.weight"},
    {T::kAttnKvB, "model.layers.{L}.self_attn.kv_b_proj.weight", Transform::kNone,
     Layout::kMlaWhole},
    {T::kAttnKB, "model.layers.{L}.self_attn.kv_b_proj.weight", Transform::kKvBToKB,
     Layout::kMlaSplit},
    {T::kAttnVB, "model.layers.{L}.self_attn.kv_b_proj.weight", Transform::kKvBToVB,
     Layout::kMlaSplit},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kFfnNorm, "model.layers.{L}.post_attention_layernorm.weight"},
};

constexpr TensorRule kDeepseekExperts[] = {
    {T::kExpProbsB, "model.layers.{L}.mlp.gate.e_score_correction_bias"},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_experts.gate_proj.weight"},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_experts.up_proj.weight"},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_experts.down_proj.weight"},
};

constexpr Keys kDeepseekK[] = {kBaseKeys, kDeepseekKeys};

constexpr Rules kDeepseekL[] = {kMlaAttn, kDenseFfn, kExperts, kDeepseekExperts};

// What deepseek2 and the architectures run as it (mistral4, glm-dsa) share: the MLA sizes,
// experts in every layer after the dense lead, interleaved rope rows; keys under `a`.
void mla_keys(const HfConfig& c, gguf::Writer& w, const char* a) {
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  const int64_t nope = c.get_int("qk_nope_head_dim"), rope = c.get_int("qk_rope_head_dim");
  u32("attention.key_length", nope + rope);
  u32("attention.value_length", c.get_int("v_head_dim"));
  if (c.has("q_lora_rank")) u32("attention.q_lora_rank", c.get_int("q_lora_rank"));
  // deepseek2 (llama.cpp's and lynx-moe's) has experts in every layer after the dense lead.
  if (c.get_int("moe_layer_freq", 1) != 1) {
    c.fail("moe_layer_freq " + std::to_string(c.get_int("moe_layer_freq", 1)) +
           " is not supported (1: experts in every layer after first_k_dense_replace)");
  }
  // ggml's NORM rope rotates adjacent pairs, the order of the interleaved weights; HF's
  // rope_interleave false rotates halves, which would need the rope rows permuted.
  if (!c.get_bool("rope_interleave", true)) {
    c.fail("rope_interleave is false: the rope rows are in rotate-half order, not converted");
  }
}

// DeepSeek's YaRN (rope_scaling type yarn), keys under `a`.
void mla_yarn(const HfConfig& c, gguf::Writer& w, const char* a) {
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  if (c.has("rope_scaling")) {
    const nlohmann::json& r = c.json()["rope_scaling"];
    // DeepSeek's own configs say "type"; transformers writes "rope_type".
    std::string type;
    for (const char* k : {"type", "rope_type"}) {
      if (r.is_object() && r.contains(k) && r[k].is_string()) type = r[k].get<std::string>();
    }
    if (type != "yarn" || !r.contains("factor") || !r["factor"].is_number()) {
      c.fail(std::string("rope_scaling must be of type yarn with a factor for ") + a);
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

void deepseek_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "deepseek2";
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  mla_keys(c, w, a);
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
  mla_yarn(c, w, a);
}

// The split layout's head sizes (newer convert_hf_to_gguf.py): the cached key is the latent
// plus the rope part, the cached value the latent; the per-head sizes move to the *_mla keys;
// one key/value head.
void split_keys(const HfConfig& c, gguf::Writer& w, const char* a) {
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  const int64_t nope = c.get_int("qk_nope_head_dim"), rope = c.get_int("qk_rope_head_dim");
  const int64_t lora = c.get_int("kv_lora_rank");
  u32("attention.key_length", lora + rope);
  u32("attention.value_length", lora);
  u32("attention.key_length_mla", nope + rope);
  u32("attention.value_length_mla", c.get_int("v_head_dim"));
  u32("attention.head_count_kv", 1);
}

void deepseek_split_keys(const HfConfig& c, gguf::Writer& w) {
  split_keys(c, w, "deepseek2");
}

// GLM-5's DeepSeek sparse-attention indexer (DeepseekV32Indexer: wq_b, wk, the LayerNorm k_norm,
// weights_proj), which glm-dsa checks and does not run (dense attention: exact up to index_topk
// cached tokens); "shared" layers of indexer_types have none.
constexpr TensorRule kDsaIndexer[] = {
    {"indexer.k_norm.weight", "model.layers.{L}.self_attn.indexer.k_norm.weight"},
    {"indexer.k_norm.bias", "model.layers.{L}.self_attn.indexer.k_norm.bias"},
    {"indexer.proj.weight", "model.layers.{L}.self_attn.indexer.weights_proj.weight"},
    {"indexer.attn_k.weight", "model.layers.{L}.self_attn.indexer.wk.weight"},
    {"indexer.attn_q_b.weight", "model.layers.{L}.self_attn.indexer.wq_b.weight"},
};

// GLM-5's config.json (GlmMoeDsaConfig): DeepSeek-V3's MLA and MoE with HF's sigmoid router
// (DeepseekV3TopkRouter: group-limited whenever n_group > 1, whatever topk_method says), the
// indexer sizes, the dense lead as mlp_layer_types lists it. The next-token-prediction layer
// after the trunk (model.layers.<num_hidden_layers>) is dropped, as for DeepSeek-V3.
void glm_dsa_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "glm-dsa";
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  mla_keys(c, w, a);
  const std::string scoring = c.get_string("scoring_func", "sigmoid");
  if (scoring != "sigmoid") {
    c.fail("scoring_func '" + scoring + "' is not supported (sigmoid: GLM-5's router)");
  }
  u32("expert_gating_func", 2);
  const int64_t n_group = c.get_int("n_group", 1);
  if (n_group > 1) {
    u32("expert_group_count", n_group);
    u32("expert_group_used_count", c.get_int("topk_group"));
  }
  if (c.get_float("partial_rotary_factor", 1.0) != 1.0) {
    c.fail("partial_rotary_factor must be 1 (MLA rotates all qk_rope_head_dim dimensions)");
  }
  const int64_t n = c.get_int("num_hidden_layers"), lead = c.get_int("first_k_dense_replace");
  if (c.has("mlp_layer_types")) {
    const nlohmann::json& t = c.json().at("mlp_layer_types");
    bool ok = t.is_array() && int64_t(t.size()) == n;
    for (int64_t i = 0; ok && i < n; ++i) ok = t[size_t(i)] == (i < lead ? "dense" : "sparse");
    if (!ok) {
      c.fail("mlp_layer_types must be first_k_dense_replace (" + std::to_string(lead) +
             ") \"dense\" layers, then \"sparse\" ones");
    }
  }
  u32("attention.indexer.head_count", c.get_int("index_n_heads"));
  u32("attention.indexer.key_length", c.get_int("index_head_dim"));
  u32("attention.indexer.top_k", c.get_int("index_topk"));
  mla_yarn(c, w, a);
}

void glm_dsa_split_keys(const HfConfig& c, gguf::Writer& w) {
  split_keys(c, w, "glm-dsa");
}

}  // namespace

constexpr Family kGlmMoeDsa = {
    .model_type = "glm_moe_dsa",
    .arch = "glm-dsa",
    .keys = kDeepseekK,
    .global = kGlobal,
    .layer = kDeepseekL,
    .tokenizer_pre = "glm4",
    .extra_keys = glm_dsa_extra,
    .split_keys = glm_dsa_split_keys,
    .unrun = kDsaIndexer,
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
};

}  // namespace lynx::convert::table
