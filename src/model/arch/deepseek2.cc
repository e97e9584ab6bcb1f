// deepseek2 (DeepSeek-V2, V2-Lite, Coder-V2, and the V3 layout), by llama.cpp's names and keys
// (llama-arch.cpp, models/deepseek2.cpp, convert_hf_to_gguf.py):
// - multi-head latent attention: q from attn_q (q_lora_rank 0, V2-Lite) or attn_q_a ->
//   attn_q_a_norm -> attn_q_b; attn_kv_a_mqa gives the kv_lora_rank latent (normed by
//   attn_kv_a_norm) and the qk_rope part shared by all heads; per head the key and value
//   up-projections attn_k_b / attn_v_b (newer files) or attn_kv_b (older ones, split at load);
//   adjacent-pair (NORM) rope on the rope parts, YaRN-scaled in the released files (the
//   scale 1/sqrt(qk_nope + qk_rope) then grows by DeepSeek's mscale squared: yarn() below);
// - the first leading_dense_block_count layers dense, the others routed experts plus
//   expert_shared_count shared experts (one FFN of width expert_shared_count * n_ff_exp);
// - softmax gating (V2) or sigmoid with the selection bias exp_probs_b (V3), group-limited
//   top-k, expert_weights_norm / expert_weights_scale.
//
// Two more architecture names run as deepseek2, as llama.cpp and ik_llama.cpp run them (the
// same hparams reader, tensor loader and graph; llama-arch.cpp names, llama-hparams.cpp):
// - mistral4 (Mistral Small 4, 119B-A6B): DeepSeek-V3's layout under its own name: MLA with
//   q_lora_rank, YaRN with DeepSeek's convention, softmax routing, one shared expert;
// - glm-dsa (GLM-5, GlmMoeDsaForCausalLM): MLA + MoE as DeepSeek-V3 (sigmoid + exp_probs_b,
//   the first layers dense), nextn_predict_layers NextN blocks after the trunk (never run,
//   as for glm4moe), and the DeepSeek sparse-attention "lightning indexer" of every layer
//   (blk.N.indexer.{k_norm.weight, k_norm.bias, proj.weight, attn_k.weight, attn_q_b.weight},
//   attention.indexer.{head_count, key_length, top_k}). The indexer picks the top_k (2,048)
//   cached tokens each query attends to; lynx-moe does not run it and attends to every cached
//   token, which is the same attention while a sequence holds at most top_k tokens, and dense
//   attention (not GLM-5's) beyond. Its tensors are checked by name and shape and left unused.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorSpec kMlaCommon[] = {
    {tensor::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::attn_norm,
     Init::kNorm},
    {tensor::kAttnKvAMqa, Dim::kEmbd, Dim::kKvLoraRope, Dim::kOne, &LayerWeights::wkv_a_mqa},
    {tensor::kAttnKvANorm, Dim::kKvLora, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::kv_a_norm,
     Init::kNorm},
    {tensor::kAttnOutput, Dim::kVMla, Dim::kEmbd, Dim::kOne, &LayerWeights::wo},
};
constexpr TensorSpec kQDirect[] = {
    {tensor::kAttnQ, Dim::kEmbd, Dim::kQ, Dim::kOne, &LayerWeights::wq},
};
constexpr TensorSpec kQLowRank[] = {
    {tensor::kAttnQA, Dim::kEmbd, Dim::kQLora, Dim::kOne, &LayerWeights::wq_a},
    {tensor::kAttnQANorm, Dim::kQLora, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::q_a_norm,
     Init::kNorm},
    {tensor::kAttnQB, Dim::kQLora, Dim::kQ, Dim::kOne, &LayerWeights::wq_b},
};
constexpr TensorSpec kKvSplit[] = {
    {tensor::kAttnKB, Dim::kNopeDim, Dim::kKvLora, Dim::kHeads, &LayerWeights::wk_b},
    {tensor::kAttnVB, Dim::kKvLora, Dim::kVHeadDim, Dim::kHeads, &LayerWeights::wv_b},
};
constexpr TensorSpec kKvB[] = {
    {tensor::kAttnKvB, Dim::kKvLora, Dim::kKvBMla, Dim::kOne, &LayerWeights::wkv_b},
};
constexpr TensorSpec kSelectBiasTensor[] = {
    {tensor::kExpProbsB, Dim::kExpert, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::exp_probs_b,
     Init::kBias},
};

constexpr TensorGroup kAttn[] = {
    {kMlaCommon},
    {.tensors = kQDirect, .need = Dim::kQLora, .need_zero = true},
    {.tensors = kQLowRank, .need = Dim::kQLora},
    // One of the two key/value layouts; model.cc requires one and splits attn_kv_b.
    {.tensors = kKvSplit, .optional = true, .trigger = tensor::kAttnKB},
    {.tensors = kKvB, .optional = true, .trigger = tensor::kAttnKvB, .synth = false},
};
constexpr TensorGroup kDense[] = {{kDenseFfn}};
constexpr TensorGroup kMoe[] = {
    {kMoeFfn},
    {kSharedExpert},
    {.tensors = kSelectBiasTensor,
     .optional = true,
     .trigger = tensor::kExpProbsB,
     .infer = Dim::kSelectBias},
};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

// expert_gating_func: 1 softmax, 2 sigmoid (3, softmax over the selected, is gpt-oss's). Files
// of DeepSeek-V2 / V2.5 predate the key (softmax); GLM-4.7-Flash files, which run as deepseek2,
// lack it too but route by sigmoid with a selection bias. llama.cpp (models/deepseek2.cpp)
// and ik_llama.cpp (llama-hparams.cpp) take an absent key (or 0, none) as sigmoid for
// GLM-4.7-Flash, recognized by its 47 layers (48 with the next-token-prediction block; llama.cpp
// also asks for its 154880-token vocabulary), else softmax. We take the same two cases and one
// more: sigmoid whenever the MoE layers carry exp_probs_b, as the selection bias belongs to
// DeepSeek-V3's sigmoid router (every converter that writes it for a softmax router also writes
// the key). A file with the key keeps its value.
GatingFunc gating_func(const gguf::File& f, const ModelConfig& c) {
  const int func = int_in(f, key(c, "expert_gating_func"), 0, 0, 3);
  if (func == 1) return GatingFunc::kSoftmax;
  if (func == 2) return GatingFunc::kSigmoid;
  if (func == 3) return GatingFunc::kSoftmaxWeight;
  const gguf::TensorInfo* emb = f.find_tensor(tensor::kTokenEmbd);
  const bool glm47_flash =
      (c.n_layer == 47 || c.n_layer == 48) && emb != nullptr && emb->ne[1] == 154880;
  bool bias = false;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::string& n = t.name;
    const std::string suffix = ".exp_probs_b.bias";
    if (n.size() > suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      bias = true;
      break;
    }
  }
  return glm47_flash || bias ? GatingFunc::kSigmoid : GatingFunc::kSoftmax;
}

void read(const gguf::File& f, ModelConfig& c) {
  c.q_lora_rank = int_in(f, key(c, "attention.q_lora_rank"), 0, 0, kMaxDim);
  c.kv_lora_rank = positive_int(f, key(c, "attention.kv_lora_rank"));
  c.qk_rope_dim = positive_int(f, key(c, "rope.dimension_count"));
  // Newer files (absorbed MLA) keep the per-head sizes in the *_mla keys and the cached
  // sizes in key_length / value_length; older ones have the per-head sizes there.
  const bool mla_keys = f.find(key(c, "attention.key_length_mla")) != nullptr;
  const std::string kk = mla_keys ? "attention.key_length_mla" : "attention.key_length";
  const std::string vk = mla_keys ? "attention.value_length_mla" : "attention.value_length";
  const int k_len = positive_int(f, key(c, kk.c_str()));
  c.v_head_dim = positive_int(f, key(c, vk.c_str()));
  c.qk_nope_dim = k_len - c.qk_rope_dim;
  if (c.qk_nope_dim <= 0 || c.qk_rope_dim % 2 != 0) {
    throw Error("inconsistent head dimensions: " + key(c, kk.c_str()) + " = " +
                std::to_string(k_len) + " must exceed " + key(c, "rope.dimension_count") + " = " +
                std::to_string(c.qk_rope_dim) + ", which must be even");
  }
  if (int64_t(c.n_head) * (k_len + c.v_head_dim) > kMaxDim) {
    throw Error("head_count x head dimensions out of range");
  }
  c.head_dim = k_len;  // q_dim() = n_head * (qk_nope + qk_rope)
  c.n_head_kv = c.n_head;
  c.rope = RopeType::kNorm;
  c.n_layer_dense_lead = int_in(f, key(c, "leading_dense_block_count"), 0, 0, c.n_layer);
  c.n_expert_shared = int_in(f, key(c, "expert_shared_count"), 0, 0, 64);
  if (c.n_expert > 0 && c.n_expert_shared < 1) {
    throw Error("metadata " + key(c, "expert_shared_count") + " must be at least 1");
  }
  if (c.n_ff_shexp == 0) c.n_ff_shexp = c.n_expert_shared * c.n_ff_exp;
  c.gating.func = gating_func(f, c);
  // Mistral Small 4's llama_4_scaling_beta, under the key llama.cpp's converters write for it
  // (Mistral3 / MistralMoe: attention.temperature_scale); the floor length is the original
  // context (llama.cpp: n_ctx_orig_yarn, HF: original_max_position_embeddings).
  const std::string tk = key(c, "attention.temperature_scale");
  if (f.has(tk)) {
    const double beta = f.get_float(tk, 0.0);
    if (!std::isfinite(beta)) throw Error("metadata " + tk + " must be a finite number");
    c.attn_temp.scale = float(beta);
    c.attn_temp.floor_len =
        int_in(f, key(c, "rope.scaling.original_context_length"), c.n_ctx_train, 1, kMaxDim);
  }
}

// DeepSeek's YaRN convention (HF modeling_deepseek.py; llama.cpp's deepseek2 graph): cos and
// sin keep magnitude 1 (the model's mscale / mscale_all_dim ratio, 1 in the released V2-Lite
// and V3 configs), and the softmax scale 1/sqrt(qk_nope + qk_rope) is multiplied by m^2,
// m = 1 + 0.1 mscale_all_dim ln(factor). The file stores 0.1 * mscale_all_dim as
// yarn_log_multiplier (convert_hf_to_gguf.py), so m = 1 + yarn_log_multiplier ln(factor).
void yarn(ModelConfig& c) {
  const double m = 1.0 + double(c.yarn.log_mul) * std::log(double(c.yarn.factor));
  c.yarn.mscale = 1.f;
  c.yarn.kq_mul = float(m * m);
}

void write(const ModelConfig& c, gguf::Writer& w) {
  auto u32 = [&](const char* k, int v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  u32("attention.q_lora_rank", c.q_lora_rank);
  u32("attention.kv_lora_rank", c.kv_lora_rank);
  u32("rope.dimension_count", c.qk_rope_dim);
  u32("attention.key_length_mla", c.qk_nope_dim + c.qk_rope_dim);
  u32("attention.value_length_mla", c.v_head_dim);
  u32("leading_dense_block_count", c.n_layer_dense_lead);
  if (c.yarn.on) {
    // The keys convert_hf_to_gguf.py writes for a rope_scaling of type yarn.
    w.set(key(c, "rope.scaling.type"), gguf::Value::str("yarn"));
    w.set(key(c, "rope.scaling.factor"), gguf::Value::f32(c.yarn.factor));
    u32("rope.scaling.original_context_length", c.yarn.orig_ctx);
    w.set(key(c, "rope.scaling.yarn_log_multiplier"), gguf::Value::f32(c.yarn.log_mul));
  }
  if (c.attn_temp.on()) {
    w.set(key(c, "attention.temperature_scale"), gguf::Value::f32(c.attn_temp.scale));
    if (!c.yarn.on) u32("rope.scaling.original_context_length", c.attn_temp.floor_len);
  }
  u32("expert_shared_count", c.n_expert_shared);
  w.set(key(c, "expert_weights_scale"), gguf::Value::f32(c.gating.weights_scale));
  w.set(key(c, "expert_weights_norm"), gguf::Value::boolean(c.gating.norm_topk));
  u32("expert_gating_func", c.gating.func == GatingFunc::kSigmoid ? 2 : 1);
  if (c.gating.n_group > 1) {
    u32("expert_group_count", c.gating.n_group);
    u32("expert_group_used_count", c.gating.n_group_used);
  }
}

LayerKind layer(const ModelConfig& c, int il) {
  LayerKind k;
  k.attn = AttnKind::kMla;
  k.ffn = il < c.n_layer_dense_lead || c.n_expert == 0 ? FfnKind::kDense : FfnKind::kMoeShared;
  return k;
}

// glm-dsa: the trunk's layers (block_count counts the NextN blocks after it), then deepseek2's
// keys; an absent expert_gating_func is sigmoid (GLM-5 routes as DeepSeek-V3, and llama.cpp
// and ik_llama.cpp default glm-dsa to sigmoid); the indexer's tensors are the known five, of
// the shapes the indexer keys give.
void read_glm_dsa(const gguf::File& f, ModelConfig& c) {
  const int nextn = int_in(f, key(c, "nextn_predict_layers"), 0, 0, c.n_layer - 1);
  c.n_layer_nextn = nextn;
  c.n_layer -= nextn;
  read(f, c);
  if (f.find(key(c, "expert_gating_func")) == nullptr) c.gating.func = GatingFunc::kSigmoid;
  const int heads = int_in(f, key(c, "attention.indexer.head_count"), 0, 0, kMaxDim);
  const int len = int_in(f, key(c, "attention.indexer.key_length"), 0, 0, kMaxDim);
  int_in(f, key(c, "attention.indexer.top_k"), 2048, 1, kMaxDim);
  for (const gguf::TensorInfo& t : f.tensors()) {
    int il = -1, n = 0;
    if (std::sscanf(t.name.c_str(), "blk.%d.indexer.%n", &il, &n) != 1 || n == 0) continue;
    const std::string what = t.name.substr(size_t(n));
    std::vector<int64_t> want;
    if (what == "k_norm.weight" || what == "k_norm.bias") want = {len};
    if (what == "proj.weight") want = {c.n_embd, heads};
    if (what == "attn_k.weight") want = {c.n_embd, len};
    if (what == "attn_q_b.weight") want = {c.q_lora_rank, int64_t(heads) * len};
    if (want.empty()) {
      throw Error("tensor '" + t.name + "' is not one of the DSA indexer's tensors (" +
                  "k_norm.weight, k_norm.bias, proj.weight, attn_k.weight, attn_q_b.weight)");
    }
    if (heads == 0 || len == 0) {
      throw Error("tensor '" + t.name + "' needs metadata " +
                  key(c, "attention.indexer.head_count") + " and " +
                  key(c, "attention.indexer.key_length"));
    }
    bool ok = t.n_dims == int(want.size());
    for (size_t d = 0; d < want.size() && ok; ++d) ok = t.ne[d] == want[d];
    if (!ok) {
      std::string w;
      for (int64_t x : want) w += (w.empty() ? "" : ", ") + std::to_string(x);
      throw Error("tensor '" + t.name + "' has shape " + t.shape_string() + ", expected [" + w +
                  "]");
    }
  }
}

// The indexer's keys as GLM-5 has them (32 heads of 128, top 2,048); synth writes no indexer
// tensors (the engine does not read them).
void write_glm_dsa(const ModelConfig& c, gguf::Writer& w) {
  write(c, w);
  auto u32 = [&](const char* k, int v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  u32("attention.indexer.head_count", 32);
  u32("attention.indexer.key_length", 128);
  u32("attention.indexer.top_k", 2048);
}

}  // namespace

constexpr ArchDesc kDeepseek2 = {
    .name = "deepseek2",
    .rope = RopeType::kNorm,
    .norm_topk = false,
    .moe = false,  // experts optional (the dense layers read feed_forward_length)
    .blocks = {.attn_gqa = {}, .attn_mla = kAttn, .ffn_dense = kDense, .ffn_moe = kMoe},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
    .yarn_convention = yarn,
};

constexpr ArchDesc kMistral4 = [] {
  ArchDesc d = kDeepseek2;
  d.name = "mistral4";
  return d;
}();

constexpr ArchDesc kGlmDsa = [] {
  ArchDesc d = kDeepseek2;
  d.name = "glm-dsa";
  d.read_metadata = read_glm_dsa;
  d.write_metadata = write_glm_dsa;
  return d;
}();

}  // namespace lynx::arch
