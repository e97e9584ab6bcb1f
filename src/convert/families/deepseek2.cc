// deepseek_v2 / deepseek_v3 -> `deepseek2`: kv_b_proj kept whole as attn_kv_b (the loader
//   splits it per head), e_score_correction_bias -> exp_probs_b.bias, the first
//   first_k_dense_replace layers dense, scoring_func -> expert_gating_func, YaRN keys.
// glm_moe_dsa (GLM-5) -> `glm-dsa`: the same tables, sigmoid routing, the DSA indexer's tensors
//   written as they are (Family::unrun) with its keys.
// mistral3 with a mistral4 text_config (Mistral Small 4) -> `mistral4`: the same keys, tensors
//   under model.language_model., experts fused per layer, softmax routing, the vision tower left
//   out.
#include <cmath>

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

// Mistral Small 4 (Mistral3ForConditionalGeneration with a mistral4 text_config): DeepSeek-V3's
// attention and MoE under the language model's prefix, experts fused per layer outputs first
// (gate_up_proj [E, 2F, hidden]: gate the first F rows; down_proj [E, hidden, F]), a softmax
// router without a selection bias.
#define M4 "model.language_model."
constexpr TensorRule kMistral4Global[] = {
    {T::kTokenEmbd, M4 "embed_tokens.weight"},
    {T::kOutputNorm, M4 "norm.weight"},
    {T::kOutput, "lm_head.weight"},
};
constexpr TensorRule kMistral4Attn[] = {
    {T::kAttnNorm, M4 "layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, M4 "layers.{L}.self_attn.q_proj.weight"},
    {T::kAttnQA, M4 "layers.{L}.self_attn.q_a_proj.weight"},
    {T::kAttnQANorm, M4 "layers.{L}.self_attn.q_a_layernorm.weight"},
    {T::kAttnQB, M4 "layers.{L}.self_attn.q_b_proj.weight"},
    {T::kAttnKvAMqa, M4 "layers.{L}.self_attn.kv_a_proj_with_mqa.weight"},
    {T::kAttnKvANorm, M4 "layers.{L}.self_attn.kv_a_layernorm.weight"},
    {T::kAttnKvB, M4 "layers.{L}.self_attn.kv_b_proj.weight", Transform::kNone, Layout::kMlaWhole},
    {T::kAttnKB, M4 "layers.{L}.self_attn.kv_b_proj.weight", Transform::kKvBToKB,
     Layout::kMlaSplit},
    {T::kAttnVB, M4 "layers.{L}.self_attn.kv_b_proj.weight", Transform::kKvBToVB,
     Layout::kMlaSplit},
    {T::kAttnOutput, M4 "layers.{L}.self_attn.o_proj.weight"},
    {T::kFfnNorm, M4 "layers.{L}.post_attention_layernorm.weight"},
};
constexpr TensorRule kMistral4Ffn[] = {
    {T::kFfnGate, M4 "layers.{L}.mlp.gate_proj.weight"},
    {T::kFfnUp, M4 "layers.{L}.mlp.up_proj.weight"},
    {T::kFfnDown, M4 "layers.{L}.mlp.down_proj.weight"},
    {T::kFfnGateInp, M4 "layers.{L}.mlp.gate.weight"},
    {T::kFfnGateExps, M4 "layers.{L}.mlp.experts.gate_up_proj", Transform::kRowsGate},
    {T::kFfnUpExps, M4 "layers.{L}.mlp.experts.gate_up_proj", Transform::kRowsUp},
    {T::kFfnDownExps, M4 "layers.{L}.mlp.experts.down_proj", Transform::kRowsDown},
    {T::kFfnGateShexp, M4 "layers.{L}.mlp.shared_experts.gate_proj.weight"},
    {T::kFfnUpShexp, M4 "layers.{L}.mlp.shared_experts.up_proj.weight"},
    {T::kFfnDownShexp, M4 "layers.{L}.mlp.shared_experts.down_proj.weight"},
};
#undef M4
constexpr Rules kMistral4L[] = {kMistral4Attn, kMistral4Ffn};
constexpr Absent kMistral4Absent[] = {
    {T::kExpProbsB, "Mistral Small 4's router (Mistral4TopkRouter) has no selection bias"},
};
// The vision tower and its projector (llama.cpp writes them to an mmproj file).
constexpr const char* kMistral3Vision[] = {"model.vision_tower.", "model.multi_modal_projector."};

// Mistral Small 4's config.json: model_type mistral3 with the language model in text_config
// (lifted), whose model_type must be mistral4 (Mistral 3 / Ministral 3 are another
// architecture). HF's Mistral4MoE: softmax over all experts, group-limited when n_group > 1,
// renormalized by norm_topk_prob, routed_scaling_factor. rope_parameters.llama_4_scaling_beta,
// which scales the queries by 1 + beta ln(1 + floor(p / original_max_position_embeddings)), goes
// to attention.temperature_scale (llama.cpp's converters' key for it) with the original context
// as rope.scaling.original_context_length (the engine's floor length, as llama.cpp's).
void mistral4_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "mistral4";
  auto u32 = [&](const char* k, int64_t v) { w.set(key(a, k), gguf::Value::u32(uint32_t(v))); };
  const nlohmann::json& j = c.json();
  const bool m4 = j.contains("text_config") && j.at("text_config").is_object() &&
                  j.at("text_config").value("model_type", "") == "mistral4";
  if (!m4) {
    c.fail(
        "text_config.model_type is not mistral4: Mistral 3 / Ministral 3 checkpoints are another "
        "architecture, not converted");
  }
  mla_keys(c, w, a);
  if (c.get_string("hidden_act", "silu") != "silu") {
    c.fail("hidden_act '" + c.get_string("hidden_act", "") + "' is not supported (silu)");
  }
  if (c.get_bool("attention_bias", false)) {
    c.fail("attention_bias is true, but mistral4 (deepseek2) has no attention biases");
  }
  u32("expert_gating_func", 1);
  const int64_t n_group = c.get_int("n_group", 1);
  if (n_group > 1) {
    u32("expert_group_count", n_group);
    u32("expert_group_used_count", c.get_int("topk_group"));
  }
  mla_yarn(c, w, a);
  // HF reads the beta from rope_parameters (lifted into rope_scaling when the type is not
  // default; kept where it is otherwise).
  const nlohmann::json* rp = nullptr;
  for (const char* k : {"rope_scaling", "rope_parameters"}) {
    if (j.contains(k) && j.at(k).is_object() && j.at(k).contains("llama_4_scaling_beta")) {
      rp = &j.at(k);
      break;
    }
  }
  if (rp != nullptr && !rp->at("llama_4_scaling_beta").is_null()) {
    const nlohmann::json& b = rp->at("llama_4_scaling_beta");
    if (!b.is_number() || !std::isfinite(b.get<double>())) {
      c.fail("llama_4_scaling_beta must be a finite number, got " + b.dump());
    }
    if (b.get<double>() != 0.0) {
      if (!rp->contains("original_max_position_embeddings") ||
          !rp->at("original_max_position_embeddings").is_number_unsigned() ||
          rp->at("original_max_position_embeddings").get<int64_t>() < 1) {
        c.fail("llama_4_scaling_beta needs a positive original_max_position_embeddings beside it");
      }
      w.set(key(a, "attention.temperature_scale"), gguf::Value::f32(b.get<float>()));
      u32("rope.scaling.original_context_length",
          rp->at("original_max_position_embeddings").get<int64_t>());
    }
  }
}

void mistral4_split_keys(const HfConfig& c, gguf::Writer& w) {
  split_keys(c, w, "mistral4");
}

}  // namespace

constexpr Family kMistral4 = {
    .model_type = "mistral3",
    .arch = "mistral4",
    .keys = kDeepseekK,
    .global = kMistral4Global,
    .layer = kMistral4L,
    .tokenizer_pre = "tekken",
    .extra_keys = mistral4_extra,
    .split_keys = mistral4_split_keys,
    .ignore_prefixes = kMistral3Vision,
    .absent = kMistral4Absent,
};

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
