// dots1 (rednote-hilab dots.llm1.base / .inst, 142B-A14B), by llama.cpp's names and keys
// (llama-arch.cpp LLM_ARCH_DOTS1, models/dots1.cpp, convert_hf_to_gguf.py Dots1Model;
// ik_llama.cpp's graphs/build_dots1.cpp) and Hugging Face's modeling_dots1.py (Qwen3's
// attention, DeepSeek-V3's router and MoE):
// - attention without biases; q and k go through Qwen3's per-head RMSNorm (head_dim weights)
//   after the split into heads, then NEOX rope on every dim of the head; kq scale
//   1/sqrt(head_dim);
// - the first leading_dense_block_count layers have a dense SwiGLU FFN (feed_forward_length
//   wide); the others routed experts (expert_feed_forward_length wide) plus one shared FFN of
//   expert_shared_count x expert_feed_forward_length, added unscaled and ungated;
// - the router: sigmoid(z) + exp_probs_b (e_score_correction_bias) chooses the top k,
//   sigmoid(z) alone weighs them, renormalized when expert_weights_norm says so (the released
//   files: norm_topk_prob true), then times expert_weights_scale (routed_scaling_factor 2.5);
//   exp_probs_b is optional in llama.cpp (without it, sigmoid(z) chooses too);
// - expert_gating_func: the converters write 2 (sigmoid); absent means sigmoid here, the only
//   router HF's code has (ik_llama.cpp's default for a missing key is softmax); 1 softmax is
//   run as written, 3 refused;
// - HF's router also limits the choice to topk_group of n_group groups; the released configs
//   have 1 of 1 (no limit) and llama.cpp's converter writes no group keys, so a file has none.
// llama.cpp and ik_llama.cpp size attn_k / attn_v by head_count and assert rope.dimension_count
// = head dimension = value_length; files that break those are refused rather than run in a way
// neither engine can.
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorSpec kProbsBias[] = {
    {tensor::kExpProbsB, Dim::kExpert, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::exp_probs_b,
     Init::kBias},
};

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkNormPerHead}};
constexpr TensorGroup kDense[] = {{kDenseFfn}};
// The selection bias is there when the first MoE layer has it; then every MoE layer must.
constexpr TensorGroup kMoe[] = {
    {kMoeFfn},
    {.tensors = kProbsBias, .need = Dim::kSelectBias},
    {kSharedExpert},
};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

void require_equal(const std::string& k, int got, int want, const std::string& what) {
  if (got != want) {
    throw Error("inconsistent head dimensions: " + k + " = " + std::to_string(got) +
                " differs from " + what + " " + std::to_string(want));
  }
}

void read(const gguf::File& f, ModelConfig& c) {
  require_equal(key(c, "attention.value_length"),
                int_in(f, key(c, "attention.value_length"), c.head_dim, 1, kMaxDim), c.head_dim,
                "the key head dimension");
  c.n_rot = int_in(f, key(c, "rope.dimension_count"), c.head_dim, 1, kMaxDim);
  require_equal(key(c, "rope.dimension_count"), c.n_rot, c.head_dim, "the head dimension");
  if (c.n_head_kv != c.n_head) {
    throw Error("metadata " + key(c, "attention.head_count_kv") + " = " +
                std::to_string(c.n_head_kv) + " differs from " + key(c, "attention.head_count") +
                " = " + std::to_string(c.n_head) +
                " (llama.cpp and ik_llama.cpp size attn_k and attn_v by the head count)");
  }
  // Required, as llama.cpp reads them.
  f.get_int(key(c, "leading_dense_block_count"));
  c.n_layer_dense_lead = int_in(f, key(c, "leading_dense_block_count"), 0, 0, c.n_layer - 1);
  f.get_int(key(c, "expert_feed_forward_length"));
  f.get_int(key(c, "expert_shared_count"));
  c.n_expert_shared = int_in(f, key(c, "expert_shared_count"), 0, 1, 64);
  if (c.n_ff_shexp == 0) c.n_ff_shexp = c.n_expert_shared * c.n_ff_exp;
  f.get_float(key(c, "expert_weights_scale"));
  // 1 softmax, 2 (or absent) sigmoid; 3 (softmax over the selected, gpt-oss) is not this
  // family's and is refused rather than run.
  const int func = int_in(f, key(c, "expert_gating_func"), 2, 1, 2);
  c.gating.func = func == 1 ? GatingFunc::kSoftmax : GatingFunc::kSigmoid;
  // llama.cpp reads no group keys for dots1 and would route without a limit.
  if (c.gating.n_group != 1) {
    throw Error("metadata " + key(c, "expert_group_count") + " = " +
                std::to_string(c.gating.n_group) +
                ": dots1 files have no expert groups (llama.cpp would ignore them)");
  }
  const std::string first_moe = "blk." + std::to_string(c.n_layer_dense_lead) + ".";
  c.gating.select_bias = f.find_tensor(first_moe + tensor::kExpProbsB) != nullptr;
}

void write(const ModelConfig& c, gguf::Writer& w) {
  auto u32 = [&](const char* k, int v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  u32("leading_dense_block_count", c.n_layer_dense_lead);
  u32("expert_shared_count", c.n_expert_shared);
  w.set(key(c, "expert_weights_scale"), gguf::Value::f32(c.gating.weights_scale));
  w.set(key(c, "expert_weights_norm"), gguf::Value::boolean(c.gating.norm_topk));
  u32("expert_gating_func", c.gating.func == GatingFunc::kSigmoid ? 2 : 1);
}

LayerKind layer(const ModelConfig& c, int il) {
  LayerKind k;
  if (il >= c.n_layer_dense_lead) k.ffn = FfnKind::kMoeShared;
  return k;
}

}  // namespace

constexpr ArchDesc kDots1 = {
    .name = "dots1",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kPerHead,
    .norm_topk = false,  // llama.cpp's default; the released files write true
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoe},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
};

}  // namespace lynx::arch
