// step35 (StepFun Step-3.5-Flash, 196B-A11B), by llama.cpp's names and keys (llama-arch.cpp
// LLM_ARCH_STEP35, models/step35.cpp, convert_hf_to_gguf.py Step35Model) and Hugging Face's
// modeling_step3p5.py (Step3p5Attention, Step3p5MLP, Step3p5MoEMLP, Step3p5DecoderLayer):
// - two attention geometries by attention.sliding_window_pattern (layer_types): sliding layers
//   (96 query heads, 8 K/V heads of 128, NEOX rope over rope.dimension_count_swa dims, default
//   rope.dimension_count, at rope.freq_base_swa, seeing the last attention.sliding_window
//   positions) and full layers (64 query heads, 8 K/V heads, rope over rope.dimension_count / 2
//   dims: HF's partial_rotary_factor 0.5, at rope.freq_base, divided per pair by rope_freqs
//   when the file has it); head counts per layer in head_count / head_count_kv arrays; the
//   full layers are ModelConfig::alt with their own n_head;
// - q and k RMS-normed per head (Step3p5RMSNorm multiplies by 1 + w; the converter adds the 1
//   to every norm weight, so the file's norms multiply as stored); attention scale
//   1/sqrt(head_dim);
// - a head-wise output gate when the file has attn_gate (use_head_wise_attn_gate, g_proj):
//   head h's attention output times sigmoid(g_proj(x))[h], x the attention's normed input;
// - the first leading_dense_block_count layers a dense SwiGLU MLP, the others routed experts
//   plus one shared expert (always added); the router sigmoid, the selection bias exp_probs_b
//   (router_bias) choosing and never weighing, the k chosen renormalized (HF always does;
//   expert_weights_norm when the file says otherwise), times expert_weights_scale
//   (moe_router_scaling_factor);
// - SwiGLU clamped per layer (swiglu_limits / swiglu_limits_shared): min(silu(g), L) *
//   clamp(u, -L, L), swiglu_clamp_exp for the routed experts, swiglu_clamp_shexp for the shared
//   expert and the dense MLP (HF builds both with swiglu_limits_shared); 0 means none;
// - nextn_predict_layers MTP blocks after the trunk (counted in block_count) are skipped.
// Refused: rope.scaling.type yarn (the family's files carry llama3-type scaling as
// rope_freqs).
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/kernels.h"
#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorSpec kGate[] = {
    {tensor::kAttnGate, Dim::kEmbd, Dim::kHeads, Dim::kOne, &LayerWeights::wgate},
};
constexpr TensorGroup kAttn[] = {
    {kGqaTensors}, {kQkNormPerHead}, {.tensors = kGate, .need = Dim::kAttnGate}};

// Full layers: their own query heads (the K/V heads and head width may differ too).
constexpr TensorSpec kAltGqa[] = {
    {tensor::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::attn_norm,
     Init::kNorm},
    {tensor::kAttnQ, Dim::kEmbd, Dim::kQAlt, Dim::kOne, &LayerWeights::wq},
    {tensor::kAttnK, Dim::kEmbd, Dim::kKVAlt, Dim::kOne, &LayerWeights::wk},
    {tensor::kAttnV, Dim::kEmbd, Dim::kKVAlt, Dim::kOne, &LayerWeights::wv},
    {tensor::kAttnOutput, Dim::kQAlt, Dim::kEmbd, Dim::kOne, &LayerWeights::wo},
    {tensor::kAttnQNorm, Dim::kHeadDimAlt, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::q_norm,
     Init::kNorm},
    {tensor::kAttnKNorm, Dim::kHeadDimAlt, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::k_norm,
     Init::kNorm},
};
constexpr TensorSpec kGateAlt[] = {
    {tensor::kAttnGate, Dim::kEmbd, Dim::kHeadsAlt, Dim::kOne, &LayerWeights::wgate},
};
constexpr TensorGroup kAttnAlt[] = {{kAltGqa}, {.tensors = kGateAlt, .need = Dim::kAttnGate}};

constexpr TensorGroup kDense[] = {{kDenseFfn}};
constexpr TensorSpec kSelectBias[] = {
    {tensor::kExpProbsB, Dim::kExpert, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::exp_probs_b,
     Init::kBias},
};
constexpr TensorGroup kMoe[] = {
    {kMoeFfn},
    {.tensors = kSelectBias, .optional = true, .trigger = tensor::kExpProbsB},
    {kSharedExpert},
};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

// The head counts of one kind of layer: every layer of the kind the same, dividing by its K/V
// heads (llama.cpp's per-layer arrays allow more; the released model has two geometries).
void take_heads(const std::string& k, int il, int64_t v, int64_t per, int& into, const char* kind) {
  if (v < 1 || v > kMaxDim || (per > 0 && v % per != 0) || (into != 0 && into != v)) {
    throw Error("metadata " + k + "[" + std::to_string(il) + "] = " + std::to_string(v) +
                " is out of range, does not divide into the layer's K/V heads or differs from the "
                "other " +
                kind + " layers'");
  }
  into = int(v);
}

// The length a per-layer array must have: the trunk's layers, or all of block_count's when
// the file has MTP blocks and writes their entries too (the entries past the trunk unused).
int arr_len(const gguf::File& f, const ModelConfig& c, const char* k) {
  const gguf::Value* v = f.find(key(c, k));
  const int all = c.n_layer + c.n_layer_nextn;
  const bool whole = v && v->type == gguf::ValueType::ARRAY && v->as_array().size() == size_t(all);
  return whole ? all : c.n_layer;
}

void read(const gguf::File& f, ModelConfig& c) {
  // block_count counts the MTP blocks; the trunk is the layers before them.
  c.n_layer_nextn = int_in(f, key(c, "nextn_predict_layers"), 0, 0, c.n_layer - 1);
  c.n_layer -= c.n_layer_nextn;
  const int n = c.n_layer;
  const int v_len = int_in(f, key(c, "attention.value_length"), c.head_dim, 1, kMaxDim);
  if (v_len != c.head_dim) {
    throw Error("metadata " + key(c, "attention.value_length") + " = " + std::to_string(v_len) +
                " differs from the key head dimension " + std::to_string(c.head_dim));
  }
  const auto swa = per_layer_ints(f, key(c, "attention.sliding_window_pattern"),
                                  arr_len(f, c, "attention.sliding_window_pattern"));
  const auto heads =
      per_layer_ints(f, key(c, "attention.head_count"), arr_len(f, c, "attention.head_count"));
  const auto kv = per_layer_ints(f, key(c, "attention.head_count_kv"),
                                 arr_len(f, c, "attention.head_count_kv"));
  AltAttention& a = c.alt;
  a.layers.assign(size_t(n), 0);
  a.head_dim = c.head_dim;
  int h_swa = 0, kv_swa = 0;
  a.n_head = a.n_head_kv = 0;
  bool any_swa = false;
  for (int il = 0; il < n; ++il) {
    const bool full = swa[size_t(il)] == 0;
    a.layers[size_t(il)] = full;
    any_swa |= !full;
    const char* kind = full ? "full" : "sliding";
    take_heads(key(c, "attention.head_count_kv"), il, kv[size_t(il)], 0,
               full ? a.n_head_kv : kv_swa, kind);
    take_heads(key(c, "attention.head_count"), il, heads[size_t(il)], kv[size_t(il)],
               full ? a.n_head : h_swa, kind);
  }
  // The main geometry is the sliding layers' (all full: the full ones').
  c.n_head = any_swa ? h_swa : a.n_head;
  c.n_head_kv = any_swa ? kv_swa : a.n_head_kv;
  if (int64_t(std::max(c.n_head, a.n_head)) * c.head_dim > kMaxDim) {
    throw Error("head_count x head dimension is out of range");
  }
  c.n_swa = any_swa ? positive_int(f, key(c, "attention.sliding_window")) : 0;

  // Rope: the full layers rotate half of rope.dimension_count (llama.cpp's n_rot_full / 2,
  // HF's partial_rotary_factor 0.5), the sliding ones rope.dimension_count_swa (default the
  // whole rope.dimension_count); bases rope.freq_base (full) and rope.freq_base_swa.
  const int n_rot = int_in(f, key(c, "rope.dimension_count"), c.head_dim, 4, c.head_dim);
  if (n_rot % 4 != 0) {
    throw Error("metadata " + key(c, "rope.dimension_count") + " = " + std::to_string(n_rot) +
                " must be a multiple of 4 (the full layers rotate half of it in pairs)");
  }
  c.n_rot = int_in(f, key(c, "rope.dimension_count_swa"), n_rot, 2, c.head_dim);
  if (c.n_rot % 2 != 0) {
    throw Error("metadata " + key(c, "rope.dimension_count_swa") + " must be even");
  }
  a.n_rot = n_rot / 2;
  a.rope_base = c.rope_base;
  c.rope_base = positive_float(f, key(c, "rope.freq_base_swa"), a.rope_base);
  // llama.cpp's rope_freqs: one tensor of n_rot_max / 2 entries; the full layers divide their
  // n_rot / 2 pair frequencies by its first entries, the sliding layers do not use it.
  if (const gguf::TensorInfo* t = f.find_tensor(tensor::kRopeFreqs)) {
    const int64_t want = std::max(a.n_rot, any_swa ? c.n_rot : 0) / 2;
    if (t->n_elements() != want || !kernels::is_compute_type(t->type)) {
      throw Error("tensor '" + std::string(tensor::kRopeFreqs) + "' has shape " +
                  t->shape_string() + ", expected [" + std::to_string(want) + "]");
    }
    std::vector<float> ff(static_cast<size_t>(want));
    kernels::ref::dequantize_row(t->type, t->data, ff.data(), want);
    for (float x : ff) {
      if (!(x > 0) || std::isinf(x)) {
        throw Error("tensor 'rope_freqs.weight' holds " + std::to_string(x) +
                    " (must be positive and finite)");
      }
    }
    a.freq_factors.assign(ff.begin(), ff.begin() + a.n_rot / 2);
  }

  // Per-head q/k norms always; the output gate when the file has it (then in every layer).
  c.attn_gate = f.find_tensor("blk.0." + std::string(tensor::kAttnGate)) ? AttnGate::kHeadSigmoid
                                                                         : AttnGate::kNone;

  c.n_layer_dense_lead = int_in(f, key(c, "leading_dense_block_count"), 0, 0, n);
  if (c.n_layer_dense_lead < n && c.n_ff_shexp == 0) {
    throw Error("metadata " + key(c, "expert_shared_feed_forward_length") +
                " is required (every MoE layer has a shared expert)");
  }
  // llama.cpp: absent or 0 means sigmoid for this family (HF's router_bias_func); 1 softmax.
  const int func = int_in(f, key(c, "expert_gating_func"), 0, 0, 2);
  c.gating.func = func == 1 ? GatingFunc::kSoftmax : GatingFunc::kSigmoid;

  // The clamps: absent means none; negative or not finite is refused.
  auto limits = [&](const char* k) {
    std::vector<float> v = per_layer_floats(f, key(c, k), arr_len(f, c, k), 0.f);
    v.resize(size_t(n));
    for (int il = 0; il < n; ++il) {
      const float x = v[size_t(il)];
      if (!(x >= 0.f) || !std::isfinite(x)) {
        throw Error("metadata " + key(c, k) + "[" + std::to_string(il) +
                    "] = " + std::to_string(x) + " must be a finite number >= 0");
      }
    }
    return std::any_of(v.begin(), v.end(), [](float x) { return x > 0.f; }) ? v
                                                                            : std::vector<float>{};
  };
  c.swiglu_exp = limits("swiglu_clamp_exp");
  c.swiglu_ffn = limits("swiglu_clamp_shexp");
}

void write(const ModelConfig& c, gguf::Writer& w) {
  auto u32 = [&](const char* k, int v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  std::vector<gguf::Value> swa, heads, kv;
  for (int il = 0; il < c.n_layer; ++il) {
    const bool full = c.layer_alt(il);
    swa.push_back(gguf::Value::boolean(!full));
    heads.push_back(gguf::Value::u32(uint32_t(c.layer_n_head(il))));
    kv.push_back(gguf::Value::u32(uint32_t(c.layer_n_head_kv(il))));
  }
  w.set(key(c, "attention.sliding_window_pattern"), gguf::Value::array(gguf::ValueType::BOOL, swa));
  w.set(key(c, "attention.head_count"), gguf::Value::array(gguf::ValueType::UINT32, heads));
  w.set(key(c, "attention.head_count_kv"), gguf::Value::array(gguf::ValueType::UINT32, kv));
  u32("attention.sliding_window", c.n_swa);
  u32("rope.dimension_count", 2 * c.alt.n_rot);
  if (c.rope_dim() != 2 * c.alt.n_rot) u32("rope.dimension_count_swa", c.rope_dim());
  w.set(key(c, "rope.freq_base"), gguf::Value::f32(c.alt.rope_base));
  w.set(key(c, "rope.freq_base_swa"), gguf::Value::f32(c.rope_base));
  u32("leading_dense_block_count", c.n_layer_dense_lead);
  u32("expert_gating_func", c.gating.func == GatingFunc::kSigmoid ? 2 : 1);
  w.set(key(c, "expert_weights_scale"), gguf::Value::f32(c.gating.weights_scale));
  w.set(key(c, "expert_weights_norm"), gguf::Value::boolean(c.gating.norm_topk));
  auto floats = [&](const char* k, const std::vector<float>& v) {
    if (v.empty()) return;
    std::vector<gguf::Value> items;
    for (float x : v) items.push_back(gguf::Value::f32(x));
    w.set(key(c, k), gguf::Value::array(gguf::ValueType::FLOAT32, items));
  };
  floats("swiglu_clamp_exp", c.swiglu_exp);
  floats("swiglu_clamp_shexp", c.swiglu_ffn);
  if (!c.alt.freq_factors.empty()) {
    w.add_tensor(tensor::kRopeFreqs, gguf::TensorType::F32, {int64_t(c.alt.freq_factors.size())},
                 c.alt.freq_factors.data(), c.alt.freq_factors.size() * sizeof(float));
  }
}

LayerKind layer(const ModelConfig& c, int il) {
  LayerKind k;
  k.alt = !c.alt.layers.empty() && c.alt.layers[size_t(il)] != 0;
  k.window = k.alt ? 0 : c.n_swa;
  if (il >= c.n_layer_dense_lead) k.ffn = FfnKind::kMoeShared;
  return k;
}

}  // namespace

constexpr ArchDesc kStep35 = {
    .name = "step35",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kPerHead,
    .norm_topk = true,  // HF renormalizes the chosen weights always
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .attn_alt = kAttnAlt, .ffn_dense = kDense, .ffn_moe = kMoe},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
};

}  // namespace lynx::arch
