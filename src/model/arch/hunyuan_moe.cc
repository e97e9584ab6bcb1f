// hunyuan-moe (Tencent Hunyuan-A13B-Pretrain / -Instruct, 80B-A13B), by llama.cpp's names and
// keys (llama-arch.cpp LLM_ARCH_HUNYUAN_MOE, models/hunyuan-moe.cpp, convert_hf_to_gguf.py
// HunYuanMoEModel; ik_llama.cpp's build_hunyuan_moe) and the released modeling_hunyuan.py
// (transformers' hunyuan_v1_moe differs on one point, below):
// - GQA attention; q, k, v projections (biases only when the file has them: attention_bias,
//   false in the release); NEOX rope (HF's rotate_half) over the whole head, then q and k go
//   through a per-head RMSNorm (head_dim weights, query_layernorm / key_layernorm) AFTER the
//   rope, as the released code and llama.cpp's graph order them (transformers' port norms
//   before the rope; the two differ wherever a norm weight differs across a rotated pair);
//   kq scale 1/sqrt(head_dim);
// - the rope's NTK-aware alpha scaling is folded into rope.freq_base by llama.cpp's converter
//   (base * alpha^(d / (d - 2)): 11158839.9 for the release) and the file says no scaling;
//   the base is run as the file carries it;
// - every layer is MoE: the router p = softmax(z) over all experts, the top k chosen and
//   renormalized (HF's topkgating divides by max(sum, eps)), no scale, no selection bias:
//   llama.cpp's graph fixes softmax and renormalization whatever the keys say, so a file whose
//   expert_gating_func or expert_weights_norm says otherwise is refused; plus one shared MLP
//   (use_mixed_mlp_moe: shared_mlp) of expert_shared_feed_forward_length (absent: the
//   feed_forward_length, as llama.cpp sizes it), ungated, added to the routed output;
// - llama.cpp sizes the experts by feed_forward_length: a file whose
//   expert_feed_forward_length differs is refused (the converter writes both as 3072);
// - no leading dense layers (HF's moe_layer_num_skipped is 0; llama.cpp has no such key): a
//   file with leading_dense_block_count > 0 is refused;
// - tied embeddings (tie_word_embeddings: no output.weight; the loader's fallback).
// HF's topkgating also caps every expert at max(k, k T / E) tokens of one forward call and
// drops the rest; llama.cpp (and this engine) drop nothing (docs/models.md).
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorGroup kAttn[] = {
    {kGqaTensors},
    {kQkNormPerHead},
    {.tensors = kQkvBias, .optional = true, .trigger = tensor::kAttnQBias, .synth = false},
};
constexpr TensorGroup kMoe[] = {{kMoeFfn}, {kSharedExpert}};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

void require_equal(const std::string& k, int got, int want, const std::string& what,
                   const std::string& why = "") {
  if (got != want) {
    throw Error("metadata " + k + " = " + std::to_string(got) + " differs from " + what + " " +
                std::to_string(want) + (why.empty() ? "" : " (" + why + ")"));
  }
}

void read(const gguf::File& f, ModelConfig& c) {
  // llama.cpp asserts key and value heads of one size and rope over the whole head.
  require_equal(key(c, "attention.value_length"),
                int_in(f, key(c, "attention.value_length"), c.head_dim, 1, kMaxDim), c.head_dim,
                "the key head dimension");
  require_equal(key(c, "rope.dimension_count"),
                int_in(f, key(c, "rope.dimension_count"), c.head_dim, 1, kMaxDim), c.head_dim,
                "the head dimension", "the family rotates whole heads");
  f.get_int(key(c, "expert_feed_forward_length"));  // required, as llama.cpp reads it
  require_equal(key(c, "expert_feed_forward_length"), c.n_ff_exp, c.n_ff,
                key(c, "feed_forward_length"), "llama.cpp sizes the experts by it");
  if (c.n_ff_shexp == 0) c.n_ff_shexp = c.n_ff;
  if (c.n_ff_shexp <= 0) {
    throw Error("metadata " + key(c, "feed_forward_length") + " = 0: the shared MLP needs a width");
  }
  const int lead = int_in(f, key(c, "leading_dense_block_count"), 0, 0, c.n_layer);
  if (lead != 0) {
    throw Error("metadata " + key(c, "leading_dense_block_count") + " = " + std::to_string(lead) +
                ": every " + c.arch + " layer is MoE (llama.cpp would ignore the key)");
  }
  const int func = int_in(f, key(c, "expert_gating_func"), 1, 0, 3);
  if (func != 1) {
    throw Error("metadata " + key(c, "expert_gating_func") + " = " + std::to_string(func) + ": " +
                c.arch + " routes by softmax (1) only");
  }
  if (!c.gating.norm_topk) {
    throw Error("metadata " + key(c, "expert_weights_norm") + " = false: " + c.arch +
                " renormalizes the chosen experts' weights (llama.cpp's graph fixes it)");
  }
  if (c.gating.n_group != 1) {
    throw Error("metadata " + key(c, "expert_group_count") + " = " +
                std::to_string(c.gating.n_group) + ": " + c.arch + " has no expert groups");
  }
  // The attention output has no bias in this engine's graph: a file with one is refused.
  if (f.find_tensor("blk.0.attn_output.bias")) {
    throw Error("tensor 'blk.0.attn_output.bias': " + c.arch +
                " has no attention output bias here (attention_bias is false in the release)");
  }
  if (f.find_tensor("blk.0.exp_probs_b.bias")) {
    throw Error("tensor 'blk.0.exp_probs_b.bias': " + c.arch +
                " has no selection bias (llama.cpp's graph would ignore it)");
  }
  c.gating.func = GatingFunc::kSoftmax;
  c.gating.norm_topk = true;
  c.gating.select_bias = false;
}

void write(const ModelConfig& c, gguf::Writer& w) {
  auto u32 = [&](const char* k, int v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  u32("rope.dimension_count", c.head_dim);
  u32("expert_shared_count", c.n_expert_shared);
}

LayerKind layer(const ModelConfig&, int) {
  LayerKind k;
  k.ffn = FfnKind::kMoeShared;
  return k;
}

}  // namespace

constexpr ArchDesc kHunyuanMoe = {
    .name = "hunyuan-moe",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kPerHeadAfterRope,
    .norm_topk = true,
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_moe = kMoe},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
};

}  // namespace lynx::arch
