// The weight views of a loaded model: where each matrix's bytes are, in which type and
// layout. Internal to the engine (the public Model hands out only opaque references):
// raw pointers into the file mapping or the model's arena, per-family fields, and the
// kernels' packed layouts, which change with the kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lynx/gguf.h"
#include "lynx/model.h"

namespace lynx {
namespace kernels {
// How a weight matrix's bytes are ordered (src/kernels/kernels.h); declared here without its
// values so the weight views do not depend on the kernels. Zero is kRows, the file's order.
enum class WeightLayout : uint8_t;
}  // namespace kernels

// A weight matrix: `rows` rows of `cols` elements of `type` (ggml ne = [cols, rows]); for
// expert tensors, `n_mat` such matrices back to back. In file order (rows contiguous) unless
// the loader repacked it: then `layout` is kInterleaved16 or kPanel16 and only the matmul
// kernels, which take the layout, may read it.
struct Weight {
  gguf::TensorType type = gguf::TensorType::F32;
  const uint8_t* data = nullptr;
  int64_t cols = 0;
  int64_t rows = 0;
  int64_t n_mat = 1;
  size_t row_bytes = 0;
  size_t mat_bytes = 0;
  kernels::WeightLayout layout{};  // kRows
  // [n_mat] or nullptr: matrix i at mats[i] instead of data + i * mat_bytes (routed experts
  // read into the expert tier's slots, as the tiered executor hands them to the kernels).
  const uint8_t* const* mats = nullptr;
  // Bytes from one matrix to the next when they are not back to back (0: mat_bytes): the gate
  // and up halves of a fused ffn_gate_up_exps, viewed in the file. The kernels and the
  // repacking take only back-to-back matrices, so such views are either copied apart at load
  // or read only by the expert tier (split_fused_experts, model.cc).
  size_t mat_stride = 0;
  bool present() const { return data != nullptr; }
  size_t stride() const { return mat_stride ? mat_stride : mat_bytes; }
  const uint8_t* mat(int64_t i) const { return mats ? mats[i] : data + size_t(i) * stride(); }
};

struct LayerWeights {
  const float* attn_norm = nullptr;
  Weight wq, wk, wv, wo;
  // A fused [q; k; v] projection (attn_qkv, bailingmoe2): bound here, then split at load into
  // the wq / wk / wv row views of it (no copy) and cleared; qkv_fused remembers the file's
  // layout (the imatrix names the one tensor).
  Weight wqkv;
  bool qkv_fused = false;
  // MLA (deepseek2): q through a low-rank pair (wq_a, q_a_norm, wq_b) or wq directly; the
  // latent and rope part from wkv_a_mqa, the latent normed by kv_a_norm; per head, wk_b
  // [kv_lora x qk_nope] absorbs the key up-projection into q and wv_b [v x kv_lora] the value
  // one into the output (n_mat = n_head; made from attn_kv_b, wkv_b, when a file has only it).
  Weight wq_a, wq_b, wkv_a_mqa, wkv_b, wk_b, wv_b;
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
  // gpt-oss: the output projection's bias [n_embd] and one learned logit per head [n_head]
  // (attn_sinks) that joins every softmax denominator of that head (nullptr: none).
  const float* bo = nullptr;
  const float* attn_sinks = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  // The attention's output gate [layer's n_head x n_embd] (ModelConfig::attn_gate; step35's
  // g_proj), or absent.
  Weight wgate;
  const float* ffn_norm = nullptr;
  // gemma4's sandwich norms: the attention output's (post_attention_norm) and the FFN
  // output's (post_ffw_norm); beside the experts, the dense FFN's output norm
  // (post_ffw_norm_1) and the experts' input and output norms (pre_ffw_norm_2,
  // post_ffw_norm_2); nullptr: none.
  const float* post_attn_norm = nullptr;
  const float* post_ffw_norm = nullptr;
  const float* post_ffw_norm_1 = nullptr;
  const float* pre_ffw_norm_2 = nullptr;
  const float* post_ffw_norm_2 = nullptr;
  // gemma4's router input: RMSNorm(x) (no weight) times router_scale [n_embd] / sqrt(n_embd)
  // (ffn_gate_inp.scale; nullptr: the FFN's normed input); the experts' outputs scaled per
  // expert by down_exps_scale [n_expert] (ffn_down_exps.scale, the router's per_expert_scale);
  // the layer's output multiplied by out_scale[0] (layer_output_scale, HF's layer_scalar).
  const float* router_scale = nullptr;
  const float* down_exps_scale = nullptr;
  const float* out_scale = nullptr;
  // Gated DeltaNet (qwen3next, qwen35moe; ModelConfig::delta_net): the q/k/v channels before
  // the conv (attn_qkv: all q heads, all k heads, all v heads), the output gate z (attn_gate),
  // the per-value-head beta and alpha inputs, either fused (ssm_ba, qwen3next: per key head
  // its n_v/n_k betas then as many alphas) or apart (ssm_beta / ssm_alpha, qwen35moe); the
  // depthwise conv [conv_dim x conv_kernel] (ssm_conv1d), per value head the decay's dt bias
  // (ssm_dt) and -exp(A_log) (ssm_a, the converter's), the gated norm [head_v_dim]
  // (ssm_norm) and the output projection (ssm_out).
  Weight ssm_qkv, ssm_z, ssm_ba, ssm_beta, ssm_alpha, ssm_out;
  const float* ssm_conv = nullptr;
  const float* ssm_dt = nullptr;
  const float* ssm_a = nullptr;
  const float* ssm_norm = nullptr;
  // Dense FFN.
  Weight ffn_gate, ffn_up, ffn_down;
  // MoE: router [n_expert x n_embd], experts (n_mat = n_expert).
  Weight router;
  // [n_expert] or nullptr: the selection bias (exp_probs_b, DeepSeek-V3), added to choose
  // experts, never to weigh them (GatingConfig::select_bias).
  const float* exp_probs_b = nullptr;
  Weight gate_exps, up_exps, down_exps;
  // Experts with gate and up fused in one tensor (ffn_gate_up_exps, [n_embd x 2F x n_expert]:
  // each expert's F gate rows, then its F up rows; llama.cpp's gemma4 converter): bound here,
  // then gate_exps / up_exps become strided views of its halves in the file (mat_stride 2F
  // rows) and it is cleared; gate_up_fused remembers it. The load copies the halves apart
  // into the model unless the expert tier reads the experts from the file.
  Weight gate_up_exps;
  bool gate_up_fused = false;
  // gpt-oss: the router's bias [n_expert] (added to the logits), the experts' biases
  // [n_expert x F] (gate, up) and [n_expert x n_embd] (down), and the activation between
  // (ModelConfig::expert_act, copied here so the expert executors see it with the weights).
  const float* router_b = nullptr;
  const float* gate_exps_b = nullptr;
  const float* up_exps_b = nullptr;
  const float* down_exps_b = nullptr;
  ExpertAct expert_act = ExpertAct::kSwiglu;
  float expert_limit = 0.f;  // the experts' SwiGLU clamp (ModelConfig::swiglu_exp; 0: none)
  // Shared expert.
  Weight gate_shexp, up_shexp, down_shexp;
  // [n_embd] or nullptr: the shared expert's output scaled by sigmoid(shexp_gate . x)
  // (ffn_gate_inp_shexp, qwen2moe).
  const float* shexp_gate = nullptr;
};

// Every weight view of a model (Model::weights()).
struct ModelWeights {
  std::vector<LayerWeights> layers;  // [n_layer]
  Weight token_embd, output;         // output == token_embd when tied
  const float* output_norm = nullptr;
};

inline const ModelWeights& Model::weights() const {
  return *w_;
}
inline const LayerWeights& Model::layer(int i) const {
  return w_->layers[size_t(i)];
}
inline const Weight& Model::token_embd() const {
  return w_->token_embd;
}
inline const Weight& Model::output() const {
  return w_->output;
}
inline const float* Model::output_norm() const {
  return w_->output_norm;
}

}  // namespace lynx
