// gemma4 (Gemma 4 26B-A4B), by llama.cpp's names and keys (llama-arch.cpp LLM_ARCH_GEMMA4,
// models/gemma4-iswa.cpp, conversion/gemma.py Gemma4Model) and Hugging Face's
// modeling_gemma4.py (Gemma4TextAttention, Gemma4TextRouter, Gemma4TextExperts,
// Gemma4TextDecoderLayer, Gemma4TextModel, Gemma4ForCausalLM):
// - embeddings times sqrt(n_embd); every RMSNorm multiplies by its weight as stored (Gemma 4's
//   norms are not Gemma 2/3's (1 + w), and the converter adds nothing: norm_shift 0);
// - two attention geometries: sliding layers (attention.sliding_window_pattern true) with
//   key_length_swa-wide heads, head_count_kv[il] K/V heads, NEOX rope over the whole head at
//   rope.freq_base_swa, seeing the last attention.sliding_window positions; full layers with
//   key_length-wide heads (512), their own head_count_kv[il] (2), rope at rope.freq_base
//   divided per pair by rope_freqs (HF's "proportional" rope: 1/4 of the pairs rotate, the
//   rest not, which llama.cpp's rope_freqs of 1e30 expresses), and, without attn_v, values
//   that are the K projection (attention_k_eq_v);
// - q and k RMS-normed per head with weights, v per head without (v_norm); no 1/sqrt(d)
//   attention scale (scaling 1.0); the attention output normed (post_attention_norm) before
//   the residual add;
// - every layer (enable_moe_block) a dense GeGLU MLP (ffn_norm in, post_ffw_norm_1 out) beside
//   the routed experts (pre_ffw_norm_2 in, post_ffw_norm_2 out), their sum normed
//   (post_ffw_norm) and added; the router reads RMSNorm(x) without weight times
//   ffn_gate_inp.scale / sqrt(n_embd), softmax, top k renormalized, then each weight times its
//   expert's ffn_down_exps.scale (per_expert_scale); GELU (tanh form) experts;
// - the layer's output times layer_output_scale (layer_scalar); logits soft-capped at
//   final_logit_softcapping.
// Not run: per-layer input embeddings (the small E2B / E4B models: embedding_length_per_layer_
// input > 0) and KV sharing across layers (attention.shared_kv_layers > 0) are refused. The
// experts' gate and up come fused (ffn_gate_up_exps, llama.cpp's converter) or apart
// (ffn_gate_exps / ffn_up_exps, which llama.cpp also loads).
#include <cmath>
#include <string>

#include "kernels/kernels.h"
#include "model/arch/families.h"

namespace lynx::arch {
namespace {

// Sliding layers: the usual GQA tensors, per-head q/k norms, the attention output's norm.
constexpr TensorSpec kQkNormAlt[] = {
    {tensor::kAttnQNorm, Dim::kHeadDimAlt, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::q_norm,
     Init::kNorm},
    {tensor::kAttnKNorm, Dim::kHeadDimAlt, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::k_norm,
     Init::kNorm},
};
constexpr TensorSpec kPostAttn[] = {
    {tensor::kPostAttentionNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr,
     &LayerWeights::post_attn_norm, Init::kNorm},
};
// Full layers: their own widths; attn_v only when the values are not the keys.
constexpr TensorSpec kAltGqa[] = {
    {tensor::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::attn_norm,
     Init::kNorm},
    {tensor::kAttnQ, Dim::kEmbd, Dim::kQAlt, Dim::kOne, &LayerWeights::wq},
    {tensor::kAttnK, Dim::kEmbd, Dim::kKVAlt, Dim::kOne, &LayerWeights::wk},
    {tensor::kAttnOutput, Dim::kQAlt, Dim::kEmbd, Dim::kOne, &LayerWeights::wo},
};
constexpr TensorSpec kAltV[] = {
    {tensor::kAttnV, Dim::kEmbd, Dim::kKVAlt, Dim::kOne, &LayerWeights::wv},
};

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkNormPerHead}, {kPostAttn}};
constexpr TensorGroup kAttnAlt[] = {
    {kAltGqa}, {.tensors = kAltV, .need = Dim::kAltV}, {kQkNormAlt}, {kPostAttn}};

// The FFN of every layer: the dense MLP and the experts side by side.
constexpr TensorSpec kMoeDense[] = {
    {tensor::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::ffn_norm,
     Init::kNorm},
    {tensor::kFfnGate, Dim::kEmbd, Dim::kFf, Dim::kOne, &LayerWeights::ffn_gate},
    {tensor::kFfnUp, Dim::kEmbd, Dim::kFf, Dim::kOne, &LayerWeights::ffn_up},
    {tensor::kFfnDown, Dim::kFf, Dim::kEmbd, Dim::kOne, &LayerWeights::ffn_down},
    {tensor::kPostFfwNorm1, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr,
     &LayerWeights::post_ffw_norm_1, Init::kNorm},
    {tensor::kFfnGateInp, Dim::kEmbd, Dim::kExpert, Dim::kOne, &LayerWeights::router, nullptr,
     Init::kRouter},
    {tensor::kFfnGateInpScale, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr,
     &LayerWeights::router_scale, Init::kNorm},
    {tensor::kPreFfwNorm2, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::pre_ffw_norm_2,
     Init::kNorm},
    {tensor::kFfnDownExps, Dim::kFfExp, Dim::kEmbd, Dim::kExpert, &LayerWeights::down_exps},
    {tensor::kFfnDownExpsScale, Dim::kExpert, Dim::kOne, Dim::kOne, nullptr,
     &LayerWeights::down_exps_scale, Init::kNorm},
    {tensor::kPostFfwNorm2, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr,
     &LayerWeights::post_ffw_norm_2, Init::kNorm},
    {tensor::kPostFfwNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::post_ffw_norm,
     Init::kNorm},
};
// The experts' gate and up: two tensors (what synth writes by default; llama.cpp loads them
// too) or one fused tensor (what llama.cpp's converter writes), viewed as two strided halves
// and copied apart at load unless the expert tier reads them (model.cc).
constexpr TensorSpec kGateUpSplit[] = {
    {tensor::kFfnGateExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::gate_exps},
    {tensor::kFfnUpExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::up_exps},
};
constexpr TensorSpec kGateUpFused[] = {
    {tensor::kFfnGateUpExps, Dim::kEmbd, Dim::kFfExp2, Dim::kExpert, &LayerWeights::gate_up_exps},
};
constexpr TensorSpec kOutScale[] = {
    {tensor::kLayerOutputScale, Dim::kOne, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::out_scale,
     Init::kNorm},
};
constexpr TensorGroup kFfn[] = {
    {kMoeDense},
    {.tensors = kGateUpSplit, .optional = true, .trigger = tensor::kFfnGateExps},
    {.tensors = kGateUpFused, .optional = true, .trigger = tensor::kFfnGateUpExps, .synth = false},
    {.tensors = kOutScale, .optional = true, .trigger = tensor::kLayerOutputScale}};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

void require_equal(const std::string& what, int64_t got, int64_t want, const std::string& whose) {
  if (got != want) {
    throw Error("metadata " + what + " = " + std::to_string(got) + " differs from " + whose +
                " = " + std::to_string(want));
  }
}

void read(const gguf::File& f, ModelConfig& c) {
  if (f.get_int(key(c, "embedding_length_per_layer_input"), 0) != 0) {
    throw Error("metadata " + key(c, "embedding_length_per_layer_input") +
                " > 0: per-layer input embeddings (Gemma 4 E2B / E4B) are not implemented");
  }
  if (f.get_int(key(c, "attention.shared_kv_layers"), 0) != 0) {
    throw Error("metadata " + key(c, "attention.shared_kv_layers") +
                " > 0: KV sharing across layers is not implemented");
  }
  if (c.n_expert == 0) throw Error("gemma4 without experts (the dense Gemma 4) is not supported");
  // The full layers' head is attention.key_length (read as c.head_dim), the sliding layers'
  // key_length_swa; keys and values of one width (llama.cpp asserts it per layer).
  c.alt.head_dim = c.head_dim;
  c.head_dim = int_in(f, key(c, "attention.key_length_swa"), 0, 2, kMaxDim);
  require_equal(key(c, "attention.value_length"),
                int_in(f, key(c, "attention.value_length"), c.alt.head_dim, 1, kMaxDim),
                c.alt.head_dim, key(c, "attention.key_length"));
  require_equal(key(c, "attention.value_length_swa"),
                int_in(f, key(c, "attention.value_length_swa"), c.head_dim, 1, kMaxDim), c.head_dim,
                key(c, "attention.key_length_swa"));
  if (c.head_dim % 2 || c.alt.head_dim % 2) throw Error("gemma4 head dimensions must be even");
  const int n = c.n_layer;
  const auto swa = per_layer_ints(f, key(c, "attention.sliding_window_pattern"), n);
  const auto hkv = per_layer_ints(f, key(c, "attention.head_count_kv"), n);
  c.alt.layers.assign(size_t(n), 0);
  c.n_head_kv = c.alt.n_head_kv = 0;
  for (int il = 0; il < n; ++il) {
    const bool full = swa[size_t(il)] == 0;
    c.alt.layers[size_t(il)] = full;
    int& h = full ? c.alt.n_head_kv : c.n_head_kv;
    const int64_t v = hkv[size_t(il)];
    if (v < 1 || c.n_head % v != 0 || (h != 0 && h != v)) {
      throw Error("metadata " + key(c, "attention.head_count_kv") + "[" + std::to_string(il) +
                  "] = " + std::to_string(v) +
                  " does not divide head_count = " + std::to_string(c.n_head) +
                  " or differs from the other " + (full ? "full" : "sliding") + " layers'");
    }
    h = int(v);
  }
  if (c.n_head_kv == 0) c.n_head_kv = c.alt.n_head_kv;  // no sliding layer
  c.n_swa = positive_int(f, key(c, "attention.sliding_window"));
  // Rope: the full layers' base and dims are the plain keys, the sliding layers' the _swa ones.
  c.alt.rope_base = c.rope_base;
  c.rope_base = positive_float(f, key(c, "rope.freq_base_swa"), 10000.0);
  c.alt.n_rot = int_in(f, key(c, "rope.dimension_count"), c.alt.head_dim, 2, c.alt.head_dim);
  c.n_rot = int_in(f, key(c, "rope.dimension_count_swa"), c.head_dim, 2, c.head_dim);
  if (c.n_rot % 2 || c.alt.n_rot % 2) throw Error("gemma4 rope dimensions must be even");
  if (const gguf::TensorInfo* t = f.find_tensor(tensor::kRopeFreqs)) {
    if (t->n_elements() != c.alt.n_rot / 2 || !kernels::is_compute_type(t->type)) {
      throw Error("tensor '" + std::string(tensor::kRopeFreqs) + "' has shape " +
                  t->shape_string() + ", expected [" + std::to_string(c.alt.n_rot / 2) + "]");
    }
    c.alt.freq_factors.resize(size_t(c.alt.n_rot / 2));
    kernels::ref::dequantize_row(t->type, t->data, c.alt.freq_factors.data(), c.alt.n_rot / 2);
    for (float x : c.alt.freq_factors) {
      if (!(x > 0) || std::isnan(x))
        throw Error("tensor 'rope_freqs.weight' holds " + std::to_string(x) +
                    " (must be positive)");
    }
  }
  // Values from the keys' projection where the full layers have no attn_v (k_eq_v).
  for (int il = 0; il < n; ++il) {
    if (!c.alt.layers[size_t(il)]) continue;
    c.alt.k_eq_v = !f.find_tensor("blk." + std::to_string(il) + "." + tensor::kAttnV);
    break;
  }
  const double cap = f.get_float(key(c, "final_logit_softcapping"), 0.0);
  if (!(cap >= 0) || !std::isfinite(float(cap))) {
    throw Error("metadata " + key(c, "final_logit_softcapping") + " must be >= 0");
  }
  c.final_softcap = float(cap);
  c.embd_scale = std::sqrt(float(c.n_embd));
  c.kq_scale = 1.f;
  c.v_norm = true;
  c.sandwich_norms = true;
  c.dense_act = DenseAct::kGeluTanh;
  // llama.cpp's graph: softmax over all experts, top k, renormalized, whatever the keys say.
  c.gating.func = GatingFunc::kSoftmax;
  c.gating.norm_topk = true;
  c.gating.weights_scale = 1.f;
}

void write(const ModelConfig& c, gguf::Writer& w) {
  auto u32 = [&](const char* k, int v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  u32("attention.key_length", c.alt.head_dim);
  u32("attention.value_length", c.alt.head_dim);
  u32("attention.key_length_swa", c.head_dim);
  u32("attention.value_length_swa", c.head_dim);
  std::vector<gguf::Value> swa, hkv;
  for (int il = 0; il < c.n_layer; ++il) {
    const bool full = c.alt.layers[size_t(il)] != 0;
    swa.push_back(gguf::Value::boolean(!full));
    hkv.push_back(gguf::Value::u32(uint32_t(full ? c.alt.n_head_kv : c.n_head_kv)));
  }
  w.set(key(c, "attention.sliding_window_pattern"), gguf::Value::array(gguf::ValueType::BOOL, swa));
  w.set(key(c, "attention.head_count_kv"), gguf::Value::array(gguf::ValueType::UINT32, hkv));
  u32("attention.sliding_window", c.n_swa);
  u32("attention.shared_kv_layers", 0);
  u32("embedding_length_per_layer_input", 0);
  w.set(key(c, "rope.freq_base"), gguf::Value::f32(c.alt.rope_base));
  w.set(key(c, "rope.freq_base_swa"), gguf::Value::f32(c.rope_base));
  u32("rope.dimension_count", c.alt.n_rot);
  u32("rope.dimension_count_swa", c.rope_dim());
  if (c.final_softcap > 0) {
    w.set(key(c, "final_logit_softcapping"), gguf::Value::f32(c.final_softcap));
  }
  if (!c.alt.freq_factors.empty()) {
    w.add_tensor(tensor::kRopeFreqs, gguf::TensorType::F32, {int64_t(c.alt.freq_factors.size())},
                 c.alt.freq_factors.data(), c.alt.freq_factors.size() * sizeof(float));
  }
}

LayerKind layer(const ModelConfig& c, int il) {
  LayerKind k;
  k.ffn = FfnKind::kMoeDense;
  k.alt = c.alt.layers[size_t(il)] != 0;
  k.window = k.alt ? 0 : c.n_swa;
  return k;
}

}  // namespace

constexpr ArchDesc kGemma4 = {
    .name = "gemma4",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kPerHead,
    .norm_topk = true,
    .moe = true,
    .expert_act = ExpertAct::kGeglu,
    .blocks = {.attn_gqa = kAttn, .attn_alt = kAttnAlt, .ffn_moe = kFfn},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
};

}  // namespace lynx::arch
