// minimax-m2 (MiniMax-M2, M2.1, M2.5: 230B-A10B), by llama.cpp's names and keys
// (llama-arch.cpp LLM_ARCH_MINIMAX_M2, models/minimax-m2.cpp; ik_llama.cpp's
// graphs/build_minimaxm2.cpp) and Hugging Face's modeling_minimax_m2.py:
// - GQA attention without biases; q and k each go through one RMSNorm over the WHOLE projected
//   row (attn_q_norm has n_head * head_dim weights, attn_k_norm n_head_kv * head_dim), before
//   the split into heads: OLMoE's full-row norm, not Qwen3's per-head one;
// - NEOX rope on the first rope.dimension_count dims of each head only (rotary_dim 64 of
//   head_dim 128), the rest passing through; kq scale 1/sqrt(head_dim);
// - every layer routed experts, no shared expert, no dense layer: sigmoid(z) + exp_probs_b
//   (e_score_correction_bias) chooses the top k, sigmoid(z) alone weighs them, renormalized;
// - expert_gating_func: the converters write 2 (sigmoid, HF's scoring_func); absent means
//   sigmoid here, the only router the HF code has (llama.cpp's default for a missing key is
//   none, ik_llama.cpp's softmax: neither would run such a file as trained).
// The released checkpoints also carry 3 multi-token-prediction modules that neither HF's
// model nor llama.cpp's converter keeps; the GGUF files have none.
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorSpec kMoeFfnBias[] = {
    {tensor::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::ffn_norm,
     Init::kNorm},
    {tensor::kFfnGateInp, Dim::kEmbd, Dim::kExpert, Dim::kOne, &LayerWeights::router, nullptr,
     Init::kRouter},
    {tensor::kExpProbsB, Dim::kExpert, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::exp_probs_b,
     Init::kBias},
    {tensor::kFfnGateExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::gate_exps},
    {tensor::kFfnUpExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::up_exps},
    {tensor::kFfnDownExps, Dim::kFfExp, Dim::kEmbd, Dim::kExpert, &LayerWeights::down_exps},
};

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkNormFull}};
constexpr TensorGroup kMoe[] = {{kMoeFfnBias}};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

void read(const gguf::File& f, ModelConfig& c) {
  // llama.cpp asserts key and value heads of one size (n_embd_head_k == n_embd_head_v).
  const int v_len = int_in(f, key(c, "attention.value_length"), c.head_dim, 1, kMaxDim);
  if (v_len != c.head_dim) {
    throw Error("inconsistent head dimensions: " + key(c, "attention.value_length") + " = " +
                std::to_string(v_len) + " differs from the key head dimension " +
                std::to_string(c.head_dim));
  }
  c.n_rot = int_in(f, key(c, "rope.dimension_count"), c.head_dim, 1, kMaxDim);
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    throw Error("inconsistent head dimensions: " + key(c, "rope.dimension_count") + " = " +
                std::to_string(c.n_rot) + " must be even and at most the head dimension " +
                std::to_string(c.head_dim));
  }
  // llama.cpp and ik_llama.cpp size the experts by feed_forward_length and require
  // expert_feed_forward_length too; the converters write both from intermediate_size. Two
  // different values would make the engines disagree on the file: refused.
  const std::string ff = key(c, "feed_forward_length"), ffe = key(c, "expert_feed_forward_length");
  if (f.has(ff) && f.has(ffe) && c.n_ff != c.n_ff_exp) {
    throw Error("metadata " + ffe + " = " + std::to_string(c.n_ff_exp) + " differs from " + ff +
                " = " + std::to_string(c.n_ff) + " (the expert width; llama.cpp reads the latter)");
  }
  // 1 softmax, 2 (or absent) sigmoid; 3 (softmax over the selected, gpt-oss) is not this
  // family's and is refused rather than run.
  const int func = int_in(f, key(c, "expert_gating_func"), 2, 1, 2);
  c.gating.func = func == 1 ? GatingFunc::kSoftmax : GatingFunc::kSigmoid;
  c.gating.select_bias = true;  // exp_probs_b is required in every layer
  // Both llama.cpp's and ik_llama.cpp's graphs renormalize the top k whatever
  // expert_weights_norm says (HF does too); the key is not read.
  c.gating.norm_topk = true;
}

void write(const ModelConfig& c, gguf::Writer& w) {
  w.set(key(c, "rope.dimension_count"), gguf::Value::u32(uint32_t(c.rope_dim())));
  w.set(key(c, "expert_gating_func"),
        gguf::Value::u32(c.gating.func == GatingFunc::kSigmoid ? 2u : 1u));
}

LayerKind layer(const ModelConfig&, int) {
  LayerKind k;
  k.ffn = FfnKind::kMoe;
  return k;
}

}  // namespace

constexpr ArchDesc kMinimaxM2 = {
    .name = "minimax-m2",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kFull,
    .norm_topk = true,
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_moe = kMoe},  // no dense layer
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
};

}  // namespace lynx::arch
