// qwen3next (Qwen3-Next-80B-A3B, Qwen3-Coder-Next) and qwen35moe (Qwen3.5 35B-A3B, 122B-A10B,
// 397B-A17B), by llama.cpp's names and keys (llama-arch.cpp, models/qwen3next.cpp,
// models/qwen35moe.cpp, conversion/qwen.py Qwen3NextModel / Qwen3_5MoeTextModel) and Hugging
// Face's modeling_qwen3_next.py / modeling_qwen3_5_moe.py:
// - three of every four layers (full_attention_interval, or attention.recurrent_layers) are
//   Gated DeltaNet linear attention (AttnKind::kDeltaNet, ModelConfig::delta_net; forward.cc
//   delta_net): attn_qkv gives the q, k and v channels, a causal depthwise conv over the last
//   ssm.conv_kernel inputs (ssm_conv1d, no bias) and SiLU; q and k L2-normed per head, q scaled
//   by head_k_dim^-1/2; per value head beta = sigmoid(b), decay exp(ssm_a softplus(a + ssm_dt))
//   with ssm_a = -exp(A_log) (the converter's); the delta rule on a head_k x head_v state per
//   value head; the output RMS-normed per head (ssm_norm) times silu(z) (attn_gate) into
//   ssm_out;
// - the fourth is gated attention: attn_q gives per head the query and as many gate values,
//   q/k RMSNorm per head, NEOX rope on the first rope.dimension_count dims of each head
//   (partial_rotary_factor 0.25), GQA, the output times sigmoid(gate) before attn_output;
// - every layer an MoE FFN after post_attention_norm: softmax router, top k renormalized
//   (llama.cpp's graph passes norm_w = true; norm_topk_prob is true in the released configs),
//   SwiGLU experts, and a shared expert scaled by sigmoid(ffn_gate_inp_shexp . x);
// - every RMSNorm multiplies by its weight as stored: the checkpoints' (1 + w) norms are
//   stored with the 1 added by the converter (all but the DeltaNet's gated norm, whose weight
//   is used as is in both).
// Where qwen35moe differs: beta and alpha come from two projections (ssm_beta, ssm_alpha)
// instead of one interleaved per key head (ssm_ba); the converter reorders the value heads from
// grouped by key head to tiled (value head h reads key head h % n_k instead of h / (n_v / n_k));
// the rope is Qwen3.5's interleaved M-RoPE (rope.dimension_sections), which for text, where
// the three position components are equal, is the NEOX rope over the rotated dims when the
// sections cover them all (checked; other sections are refused); next-token-prediction blocks
// may follow the trunk (nextn_predict_layers; skipped, as llama.cpp's main graph does).
// Not read: qwen3next files of the older layout with one fused ssm_in (q, k, v, z per key head).
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorSpec kGatedAttn[] = {
    {tensor::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::attn_norm,
     Init::kNorm},
    {tensor::kAttnQ, Dim::kEmbd, Dim::kQ2, Dim::kOne, &LayerWeights::wq},
    {tensor::kAttnK, Dim::kEmbd, Dim::kKV, Dim::kOne, &LayerWeights::wk},
    {tensor::kAttnV, Dim::kEmbd, Dim::kKV, Dim::kOne, &LayerWeights::wv},
    {tensor::kAttnOutput, Dim::kQ, Dim::kEmbd, Dim::kOne, &LayerWeights::wo},
};
constexpr TensorGroup kAttn[] = {{kGatedAttn}, {kQkNormPerHead}};

constexpr TensorSpec kDeltaNet[] = {
    {tensor::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::attn_norm,
     Init::kNorm},
    {tensor::kAttnQkv, Dim::kEmbd, Dim::kSsmConv, Dim::kOne, &LayerWeights::ssm_qkv},
    {tensor::kAttnGate, Dim::kEmbd, Dim::kSsmV, Dim::kOne, &LayerWeights::ssm_z},
    {tensor::kSsmConv1d, Dim::kSsmConvK, Dim::kSsmConv, Dim::kOne, nullptr, &LayerWeights::ssm_conv,
     Init::kConv},
    {tensor::kSsmDt, Dim::kSsmVHeads, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::ssm_dt,
     Init::kBias},
    {tensor::kSsmA, Dim::kSsmVHeads, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::ssm_a,
     Init::kDecayA},
    {tensor::kSsmNorm, Dim::kSsmHeadV, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::ssm_norm,
     Init::kNorm},
    {tensor::kSsmOut, Dim::kSsmV, Dim::kEmbd, Dim::kOne, &LayerWeights::ssm_out},
};
constexpr TensorSpec kBetaAlphaFused[] = {
    {tensor::kSsmBa, Dim::kEmbd, Dim::kSsmVHeads2, Dim::kOne, &LayerWeights::ssm_ba},
};
constexpr TensorSpec kBetaAlphaApart[] = {
    {tensor::kSsmBeta, Dim::kEmbd, Dim::kSsmVHeads, Dim::kOne, &LayerWeights::ssm_beta},
    {tensor::kSsmAlpha, Dim::kEmbd, Dim::kSsmVHeads, Dim::kOne, &LayerWeights::ssm_alpha},
};
constexpr TensorGroup kDeltaNextGroups[] = {{kDeltaNet}, {kBetaAlphaFused}};
constexpr TensorGroup kDelta35Groups[] = {{kDeltaNet}, {kBetaAlphaApart}};

// The MoE FFN after post_attention_norm, with its (required) gated shared expert.
constexpr TensorSpec kMoe[] = {
    {tensor::kPostAttentionNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::ffn_norm,
     Init::kNorm},
    {tensor::kFfnGateInp, Dim::kEmbd, Dim::kExpert, Dim::kOne, &LayerWeights::router, nullptr,
     Init::kRouter},
    {tensor::kFfnGateExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::gate_exps},
    {tensor::kFfnUpExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::up_exps},
    {tensor::kFfnDownExps, Dim::kFfExp, Dim::kEmbd, Dim::kExpert, &LayerWeights::down_exps},
};
constexpr TensorGroup kFfn[] = {{kMoe}, {kSharedExpert}, {kSharedGate}};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

bool is_35(const ModelConfig& c) {
  return c.arch == "qwen35moe";
}

// rope.dimension_sections (qwen35moe, required as llama.cpp reads it): 4 entries (t, h, w, e);
// the interleaved M-RoPE equals the NEOX rope for text only when t + h + w covers every
// rotated pair and e is empty (a pair left to e would rotate by the 4th position component).
void read_sections(const gguf::File& f, const ModelConfig& c) {
  const std::string sk = key(c, "rope.dimension_sections");
  const gguf::Value* v = f.find(sk);
  if (v == nullptr) throw Error("missing metadata " + sk);
  const auto& arr = v->as_array(sk);
  if (arr.size() != 4) {
    throw Error("metadata " + sk + " has " + std::to_string(arr.size()) +
                " entries, expected 4 (t, h, w, e)");
  }
  int64_t s[4];
  for (int i = 0; i < 4; ++i) {
    s[i] = arr[size_t(i)].as_int(sk);
    if (s[i] < 0 || s[i] > kMaxDim) throw Error("metadata " + sk + " has a negative or huge entry");
  }
  if (s[3] != 0 || s[0] + s[1] + s[2] != c.n_rot / 2) {
    throw Error("metadata " + sk + " = [" + std::to_string(s[0]) + ", " + std::to_string(s[1]) +
                ", " + std::to_string(s[2]) + ", " + std::to_string(s[3]) +
                "]: only sections whose t, h, w cover the " + std::to_string(c.n_rot / 2) +
                " rotated pairs (e = 0) are implemented");
  }
}

void read(const gguf::File& f, ModelConfig& c) {
  if (is_35(c)) {
    const int nextn = int_in(f, key(c, "nextn_predict_layers"), 0, 0, c.n_layer - 1);
    c.n_layer_nextn = nextn;
    c.n_layer -= nextn;
  } else if (f.find_tensor("blk.0." + std::string(tensor::kSsmIn))) {
    throw Error(
        "this qwen3next file has the older layout (one fused blk.N.ssm_in with q, k, v and z "
        "per key head), which lynx-moe does not read: convert it again with a current "
        "llama.cpp (attn_qkv and attn_gate)");
  }
  DeltaNet& d = c.delta_net;
  positive_int(f, key(c, "ssm.conv_kernel"));  // required
  d.conv_kernel = int_in(f, key(c, "ssm.conv_kernel"), 0, 1, 64);
  d.head_k_dim = positive_int(f, key(c, "ssm.state_size"));
  d.n_k_heads = positive_int(f, key(c, "ssm.group_count"));
  d.n_v_heads = positive_int(f, key(c, "ssm.time_step_rank"));
  const int inner = positive_int(f, key(c, "ssm.inner_size"));
  if (d.n_v_heads % d.n_k_heads != 0) {
    throw Error("metadata " + key(c, "ssm.time_step_rank") + " = " + std::to_string(d.n_v_heads) +
                " (value heads) is not a multiple of " + key(c, "ssm.group_count") + " = " +
                std::to_string(d.n_k_heads) + " (key heads)");
  }
  if (inner % d.n_v_heads != 0) {
    throw Error("metadata " + key(c, "ssm.inner_size") + " = " + std::to_string(inner) +
                " is not divisible by " + key(c, "ssm.time_step_rank") + " = " +
                std::to_string(d.n_v_heads));
  }
  d.head_v_dim = inner / d.n_v_heads;
  if (int64_t(d.n_k_heads) * d.head_k_dim > kMaxDim ||
      int64_t(d.n_v_heads) * d.head_k_dim * d.head_v_dim > kMaxDim) {
    throw Error("metadata ssm.* sizes are out of range");
  }
  d.tiled = is_35(c);
  // Which layers are recurrent: attention.recurrent_layers (one flag per layer), else every
  // layer but each full_attention_interval-th.
  d.layers.assign(size_t(c.n_layer), 0);
  const std::string rk = key(c, "attention.recurrent_layers");
  if (const gguf::Value* rv = f.find(rk)) {
    const auto& arr = rv->as_array(rk);
    if (arr.size() < size_t(c.n_layer)) {
      throw Error("metadata " + rk + " has " + std::to_string(arr.size()) + " entries for " +
                  std::to_string(c.n_layer) + " layers");
    }
    for (int il = 0; il < c.n_layer; ++il) {
      const gguf::Value& x = arr[size_t(il)];
      d.layers[size_t(il)] = x.type == gguf::ValueType::BOOL ? x.as_bool(rk) : x.as_int(rk) != 0;
    }
  } else {
    const int every = int_in(f, key(c, "full_attention_interval"), 4, 1, kMaxDim);
    for (int il = 0; il < c.n_layer; ++il) d.layers[size_t(il)] = (il + 1) % every != 0;
  }
  c.n_rot = int_in(f, key(c, "rope.dimension_count"), c.head_dim, 1, kMaxDim);
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    throw Error("metadata " + key(c, "rope.dimension_count") + " = " + std::to_string(c.n_rot) +
                " must be even and at most the head dimension " + std::to_string(c.head_dim));
  }
  if (is_35(c)) read_sections(f, c);
  c.attn_q_gate = true;
  // llama.cpp falls back to feed_forward_length for the shared expert's width.
  if (c.n_ff_shexp == 0) c.n_ff_shexp = c.n_ff;
  if (c.n_ff_shexp == 0) {
    throw Error("metadata " + key(c, "expert_shared_feed_forward_length") + " is required");
  }
}

void write(const ModelConfig& c, gguf::Writer& w) {
  auto u32 = [&](const char* k, int64_t v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  const DeltaNet& d = c.delta_net;
  u32("ssm.conv_kernel", d.conv_kernel);
  u32("ssm.state_size", d.head_k_dim);
  u32("ssm.group_count", d.n_k_heads);
  u32("ssm.time_step_rank", d.n_v_heads);
  u32("ssm.inner_size", d.value_dim());
  // The pattern as an interval: the first full layer's index + 1 (all recurrent: n_layer + 1).
  int every = c.n_layer + 1;
  for (int il = 0; il < c.n_layer; ++il) {
    if (!d.layers[size_t(il)]) {
      every = il + 1;
      break;
    }
  }
  u32("full_attention_interval", every);
  u32("rope.dimension_count", c.n_rot > 0 ? c.n_rot : c.head_dim);
  if (is_35(c)) {
    // Qwen3.5's [11, 11, 10] of 32 pairs, scaled to the rotated pairs.
    const int half = (c.n_rot > 0 ? c.n_rot : c.head_dim) / 2, hw = half * 11 / 32;
    w.set(key(c, "rope.dimension_sections"), gguf::Value::i32_array({hw, hw, half - 2 * hw, 0}));
  }
}

LayerKind layer(const ModelConfig& c, int il) {
  LayerKind k;
  if (c.delta_net.layers[size_t(il)]) k.attn = AttnKind::kDeltaNet;
  k.ffn = FfnKind::kMoeShared;
  return k;
}

}  // namespace

constexpr ArchDesc kQwen3Next = {
    .name = "qwen3next",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kPerHead,
    .norm_topk = true,
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .attn_delta = kDeltaNextGroups, .ffn_moe = kFfn},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
};

constexpr ArchDesc kQwen35Moe = [] {
  ArchDesc d = kQwen3Next;
  d.name = "qwen35moe";
  d.blocks.attn_delta = kDelta35Groups;
  return d;
}();

}  // namespace lynx::arch
