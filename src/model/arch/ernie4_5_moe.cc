// ernie4_5-moe (Baidu ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B: the text models), by
// llama.cpp's names and keys (llama-arch.cpp LLM_ARCH_ERNIE4_5_MOE, models/ernie4-5-moe.cpp,
// convert_hf_to_gguf.py Ernie4_5MoeModel; ik_llama.cpp's graphs/build_ernie45.cpp and
// create_ernie45_tensors) and Hugging Face's modeling_ernie4_5_moe.py:
// - GQA attention, llama-like: no q/k norm, q/k/v biases only when the file has them (HF's
//   use_bias; the released models have none); normal (GPT-J, interleaved pairs) rope over the
//   whole head (llama.cpp asserts rope.dimension_count == head_dim); kq scale 1/sqrt(head_dim);
// - layer il is MoE when il >= leading_dense_block_count (moe_layer_start_index) and
//   (il + 1) % interleave_moe_layer_step (moe_layer_interval) == 0, else a dense SwiGLU FFN of
//   feed_forward_length; both keys required, as llama.cpp reads them;
// - the router: p = softmax(z) over all experts; the top k of p + exp_probs_b
//   (moe_statics.e_score_correction_bias; optional per file, as llama.cpp loads it) are chosen,
//   weighed by p alone, renormalized (HF divides by max(sum, moe_norm_min = 1e-12), llama.cpp by
//   max(sum, 6.1e-5): the same for any sum a softmax top-k can have). llama.cpp's graph fixes
//   softmax, renormalization on and no scale whatever expert_gating_func /
//   expert_weights_norm / expert_weights_scale say: the converters write none of them; a file
//   whose expert_gating_func names another router is refused;
// - shared experts (moe_num_shared_experts of moe_intermediate_size, as one FFN) without a
//   gate, added to the routed output, when expert_shared_feed_forward_length > 0;
// - tied embeddings in the 21B (tie_word_embeddings: no output.weight; the loader's fallback).
// The released checkpoints' multi-token-prediction modules (mtp_*) are dropped by the
// converters; the GGUF files have none.
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorSpec kSelectBiasTensor[] = {
    {tensor::kExpProbsB, Dim::kExpert, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::exp_probs_b,
     Init::kBias},
};

// q/k/v biases come together (trigger attn_q.bias); synth writes none, as the releases have none.
constexpr TensorGroup kAttn[] = {
    {kGqaTensors},
    {.tensors = kQkvBias, .optional = true, .trigger = tensor::kAttnQBias, .synth = false},
};
constexpr TensorGroup kDense[] = {{kDenseFfn}};
constexpr TensorGroup kMoe[] = {
    {kMoeFfn},
    {.tensors = kSelectBiasTensor, .need = Dim::kSelectBias},
    {.tensors = kSharedExpert, .need = Dim::kFfShexp},
};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

bool is_moe_layer(const ModelConfig& c, int il) {
  return il >= c.n_layer_dense_lead && (il + 1) % c.n_moe_layer_step == 0;
}

void read(const gguf::File& f, ModelConfig& c) {
  // llama.cpp asserts key and value heads of one size and rope over the whole head.
  const int v_len = int_in(f, key(c, "attention.value_length"), c.head_dim, 1, kMaxDim);
  if (v_len != c.head_dim) {
    throw Error("inconsistent head dimensions: " + key(c, "attention.value_length") + " = " +
                std::to_string(v_len) + " differs from the key head dimension " +
                std::to_string(c.head_dim));
  }
  const int n_rot = int_in(f, key(c, "rope.dimension_count"), c.head_dim, 1, kMaxDim);
  if (n_rot != c.head_dim) {
    throw Error("metadata " + key(c, "rope.dimension_count") + " = " + std::to_string(n_rot) +
                " differs from the head dimension " + std::to_string(c.head_dim) +
                " (the family rotates whole heads)");
  }
  f.get_int(key(c, "leading_dense_block_count"));  // required, as llama.cpp reads them
  f.get_int(key(c, "interleave_moe_layer_step"));
  c.n_layer_dense_lead = int_in(f, key(c, "leading_dense_block_count"), 0, 0, c.n_layer);
  c.n_moe_layer_step = int_in(f, key(c, "interleave_moe_layer_step"), 1, 1, c.n_layer);
  c.n_expert_shared = int_in(f, key(c, "expert_shared_count"), 0, 0, 64);
  // llama.cpp's graph: softmax, renormalized, unscaled, whatever the keys say. A key naming
  // another router (sigmoid, softmax over the selected) would be run otherwise than it says.
  const int func = int_in(f, key(c, "expert_gating_func"), 1, 0, 3);
  if (func != 1) {
    throw Error("metadata " + key(c, "expert_gating_func") + " = " + std::to_string(func) + ": " +
                c.arch + " routes by softmax (1) only");
  }
  c.gating.func = GatingFunc::kSoftmax;
  c.gating.norm_topk = true;
  c.gating.weights_scale = 1.f;
  // The attention output has no bias in llama.cpp's graph: a file with one is refused.
  if (f.find_tensor("blk.0.attn_output.bias")) {
    throw Error("tensor 'blk.0.attn_output.bias': " + c.arch +
                " has no attention output bias (llama.cpp's graph would drop it)");
  }
  // The selection bias and the shared expert, as the first MoE layer has them; then every MoE
  // layer must (TensorGroup need).
  int first = -1;
  for (int il = 0; il < c.n_layer && first < 0; ++il) {
    if (is_moe_layer(c, il)) first = il;
  }
  if (first < 0) {
    throw Error(c.arch + " model without an MoE layer (" + key(c, "leading_dense_block_count") +
                " = " + std::to_string(c.n_layer_dense_lead) + ", " +
                key(c, "interleave_moe_layer_step") + " = " + std::to_string(c.n_moe_layer_step) +
                ", " + std::to_string(c.n_layer) + " layers)");
  }
  const std::string p = "blk." + std::to_string(first) + ".";
  c.gating.select_bias = f.find_tensor(p + tensor::kExpProbsB) != nullptr;
  if (c.n_ff_shexp == 0 && f.find_tensor(p + tensor::kFfnUpShexp)) {
    throw Error("tensor '" + p + "ffn_up_shexp.weight' without " +
                key(c, "expert_shared_feed_forward_length") +
                " (llama.cpp runs the shared expert only with that key)");
  }
}

void write(const ModelConfig& c, gguf::Writer& w) {
  auto u32 = [&](const char* k, int v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  u32("rope.dimension_count", c.head_dim);
  u32("leading_dense_block_count", c.n_layer_dense_lead);
  u32("interleave_moe_layer_step", c.n_moe_layer_step);
  if (c.n_expert_shared > 0) u32("expert_shared_count", c.n_expert_shared);
}

LayerKind layer(const ModelConfig& c, int il) {
  LayerKind k;
  if (is_moe_layer(c, il)) k.ffn = c.n_ff_shexp > 0 ? FfnKind::kMoeShared : FfnKind::kMoe;
  return k;
}

}  // namespace

constexpr ArchDesc kErnie45Moe = {
    .name = "ernie4_5-moe",
    .rope = RopeType::kNorm,
    .norm_topk = true,
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoe},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
};

}  // namespace lynx::arch
