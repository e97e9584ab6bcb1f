// gpt_oss -> `gpt-oss` (GptOssModel): experts as one tensor per layer, MXFP4
//   (*_blocks / *_scales, repacked into ggml's block_mxfp4) or dequantized ([n_expert, in, out],
//   transposed); gate_up_proj's rows (and gate_up_proj_bias's columns) interleave gate (even)
//   and up (odd); self_attn.sinks -> attn_sinks.weight, mlp.router -> ffn_gate_inp (with a
//   bias), post_attention_layernorm -> post_attention_norm; intermediate_size is also the
//   expert width; sliding_window and YaRN keys.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr KeyRule kGptOssKeys[] = {
    {"num_local_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"sliding_window", "attention.sliding_window", K::kU32, true},
};

constexpr TensorRule kGptOssLayer[] = {
    {T::kAttnOutputBias, "model.layers.{L}.self_attn.o_proj.bias"},
    {T::kAttnSinks, "model.layers.{L}.self_attn.sinks"},
    {T::kFfnGateInp, "model.layers.{L}.mlp.router.weight"},
    {T::kFfnGateInpBias, "model.layers.{L}.mlp.router.bias"},
    {T::kFfnGateExps, "model.layers.{L}.mlp.experts.gate_up_proj", Transform::kFusedGate},
    {T::kFfnUpExps, "model.layers.{L}.mlp.experts.gate_up_proj", Transform::kFusedUp},
    {T::kFfnDownExps, "model.layers.{L}.mlp.experts.down_proj", Transform::kFusedDown},
    {T::kFfnGateExpsBias, "model.layers.{L}.mlp.experts.gate_up_proj_bias", Transform::kEvenCols},
    {T::kFfnUpExpsBias, "model.layers.{L}.mlp.experts.gate_up_proj_bias", Transform::kOddCols},
    {T::kFfnDownExpsBias, "model.layers.{L}.mlp.experts.down_proj_bias"},
};

constexpr Keys kGptOssK[] = {kBaseKeys, kHeadDimKeys, kGptOssKeys};

constexpr Rules kGptOssL[] = {kGqaAttnPostNorm, kQkvBias, kGptOssLayer};

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

}  // namespace

constexpr Family kGptOss = {
    .model_type = "gpt_oss",
    .arch = "gpt-oss",
    .keys = kGptOssK,
    .global = kGlobal,
    .layer = kGptOssL,
    .tokenizer_pre = "gpt-4o",
    .extra_keys = gpt_oss_extra,
};

}  // namespace lynx::convert::table
