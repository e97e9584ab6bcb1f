// gpt-oss (gpt-oss-20b, gpt-oss-120b), by llama.cpp's names and keys (llama-arch.cpp
// LLM_ARCH_OPENAI_MOE, models/openai-moe-iswa.cpp, llama-graph.cpp build_moe_ffn):
// - attention: GQA with biases on q / k / v / output, NEOX rope over the whole head
//   (attention.key_length 64), YaRN as llama.cpp's generic rope_yarn runs it (cos / sin times
//   1 + 0.1 ln(factor), the ramp's corners floored / ceiled; Hugging Face's config says
//   truncate = false, which llama.cpp does not follow); a learned logit per head (attn_sinks)
//   joins every softmax denominator, unscaled (ggml_soft_max_ext's sinks);
// - sliding-window layers alternating with full ones: llama.cpp's set_swa_pattern(2), so the
//   even layers (0, 2, ...) see the last attention.sliding_window positions
//   (LLAMA_SWA_TYPE_STANDARD: key p0 is masked for query p1 when p1 - p0 >= window);
// - every layer MoE, normed by post_attention_norm: router with a bias, top-k of the logits,
//   weights a softmax over the selected logits (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT,
//   fixed by the graph, not read from the file), experts with gate / up / down biases and the
//   clamped SwiGLU (LLM_FFN_SWIGLU_OAI_MOE, ExpertAct::kSwigluOai); the down bias is added
//   before the expert's weight multiplies it.
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorSpec kAttnExtra[] = {
    {tensor::kAttnOutputBias, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::bo,
     Init::kBias},
    {tensor::kAttnSinks, Dim::kHeads, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::attn_sinks,
     Init::kBias},
};
constexpr TensorSpec kMoe[] = {
    {tensor::kPostAttentionNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::ffn_norm,
     Init::kNorm},
    {tensor::kFfnGateInp, Dim::kEmbd, Dim::kExpert, Dim::kOne, &LayerWeights::router, nullptr,
     Init::kRouter},
    {tensor::kFfnGateInpBias, Dim::kExpert, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::router_b,
     Init::kBias},
    {tensor::kFfnGateExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::gate_exps},
    {tensor::kFfnUpExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::up_exps},
    {tensor::kFfnDownExps, Dim::kFfExp, Dim::kEmbd, Dim::kExpert, &LayerWeights::down_exps},
    {tensor::kFfnGateExpsBias, Dim::kFfExp, Dim::kExpert, Dim::kOne, nullptr,
     &LayerWeights::gate_exps_b, Init::kBias},
    {tensor::kFfnUpExpsBias, Dim::kFfExp, Dim::kExpert, Dim::kOne, nullptr,
     &LayerWeights::up_exps_b, Init::kBias},
    {tensor::kFfnDownExpsBias, Dim::kEmbd, Dim::kExpert, Dim::kOne, nullptr,
     &LayerWeights::down_exps_b, Init::kBias},
};

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkvBias}, {kAttnExtra}};
constexpr TensorGroup kFfn[] = {{kMoe}};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

void read(const gguf::File& f, ModelConfig& c) {
  c.n_swa = positive_int(f, key(c, "attention.sliding_window"));
  c.gating.func = GatingFunc::kSoftmaxWeight;
}

void write(const ModelConfig& c, gguf::Writer& w) {
  auto u32 = [&](const char* k, int v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  u32("attention.sliding_window", c.n_swa);
  if (c.yarn.on) {
    // The keys convert_hf_to_gguf.py writes for gpt-oss's rope_scaling (type yarn).
    w.set(key(c, "rope.scaling.type"), gguf::Value::str("yarn"));
    w.set(key(c, "rope.scaling.factor"), gguf::Value::f32(c.yarn.factor));
    u32("rope.scaling.original_context_length", c.yarn.orig_ctx);
  }
}

LayerKind layer(const ModelConfig& c, int il) {
  LayerKind k;
  k.attn = AttnKind::kGqa;
  k.ffn = FfnKind::kMoe;
  k.window = il % 2 == 0 ? c.n_swa : 0;
  return k;
}

// llama.cpp's defaults for a yarn file (read_rope_scaling) are gpt-oss's convention: cos and
// sin scaled by 1 + 0.1 ln(factor), the attention scale 1/sqrt(head_dim) unchanged.
void yarn(ModelConfig&) {}

}  // namespace

constexpr ArchDesc kGptOss = {
    .name = "gpt-oss",
    .rope = RopeType::kNeox,
    .qkv_bias = true,
    .norm_topk = false,
    .moe = true,
    .expert_act = ExpertAct::kSwigluOai,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = {}, .ffn_moe = kFfn},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
    .yarn_convention = yarn,
};

}  // namespace lynx::arch
