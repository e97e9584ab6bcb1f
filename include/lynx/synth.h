// Random-weight models at the shapes of real MoE models, written as GGUF files. They are
// how speed is measured at real sizes on machines that cannot download real weights; the
// router can be driven by recorded traces (see the bench) so routing looks like a trained
// model's.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lynx/gguf.h"

namespace lynx {

struct SynthShape {
  std::string name;  // "olmoe-1b-7b", ...
  std::string arch;  // general.architecture
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int n_vocab = 0, n_ctx = 4096;
  int n_ff = 0;  // dense width (dense models) or 0
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  float rope_base = 10000.f, rms_eps = 1e-5f;
  // Multi-head latent attention and DeepSeek's routing (deepseek2 shapes; unused otherwise):
  // head_dim = qk_nope_dim + qk_rope_dim; the shared expert is n_expert_shared x n_ff_exp wide.
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  int n_layer_dense_lead = 0, n_expert_shared = 0;
  bool sigmoid = false, select_bias = false, norm_topk = true;
  float weights_scale = 1.f;
  int n_group = 1, n_group_used = 1;
  // YaRN rope scaling as written by the family (deepseek2: rope.scaling.*); factor 0 = none.
  float yarn_factor = 0.f;
  int yarn_orig_ctx = 0;
  float yarn_log_mul = 0.f;
  // Rotary dims per head (glm4moe, minimax-m2; 0 = head_dim); glm4moe: per-head q/k norms
  // (optional in the family), and next-token-prediction blocks written after the n_layer
  // (block_count counts them; the engine skips them).
  int n_rot = 0;
  bool qk_norm = false;
  int n_nextn = 0;
  // gpt-oss: the sliding window of its even layers (0 = none), and experts stored in MXFP4
  // as the released files have them (SynthOptions::expert_type overrides).
  int sliding_window = 0;
  bool mxfp4_experts = false;
  // ernie4_5-moe: from n_layer_dense_lead on, every moe_layer_step-th layer is MoE (the
  // others dense, n_ff wide); tied_output: no output.weight (the output shares token_embd).
  int moe_layer_step = 1;
  bool tied_output = false;
  // gemma4: the full-attention layers' geometry (head_dim_alt-wide heads, n_head_kv_alt K/V
  // heads, their values the keys with k_eq_v_alt, rope at rope_base_alt on the first
  // rope_frac_alt of the pairs: Hugging Face's "proportional" rope), every alt_period-th layer
  // and the last full (the others sliding_window), and the logits' soft cap (0: none).
  int head_dim_alt = 0, n_head_kv_alt = 0, alt_period = 0;
  float rope_base_alt = 0.f, rope_frac_alt = 1.f, final_softcap = 0.f;
  bool k_eq_v_alt = false;
  // step35: the full layers' query heads (n_head_alt; 0 = n_head) and rotary dims (n_rot_alt;
  // 0 = gemma4's proportional rope above), full at the first layer of each alt_period
  // (alt_first) instead of the last; llama3-type rope factors for them (rope_freqs, as
  // llama.cpp's converter computes them over head_dim_alt: factor, original context,
  // high-frequency factor; factor 0 = none); an attention output gate per head; and the
  // SwiGLU clamps of the last swiglu_last layers (swiglu_exp for the routed experts,
  // swiglu_ffn for the shared expert and dense MLP; 0 = none).
  int n_head_alt = 0, n_rot_alt = 0;
  bool alt_first = false;
  float llama3_factor = 0.f, llama3_high = 4.f;
  int llama3_orig_ctx = 0;
  bool attn_gate = false;
  float swiglu_exp = 0.f, swiglu_ffn = 0.f;
  int swiglu_last = 0;
  // qwen3next / qwen35moe: Gated DeltaNet layers (ModelConfig::delta_net) with ssm_k_heads
  // query/key heads and ssm_v_heads value heads of ssm_head_dim, a conv of ssm_conv_kernel
  // taps, every full_attn_interval-th layer gated attention (0: no DeltaNet layers).
  int ssm_conv_kernel = 0, ssm_head_dim = 0, ssm_k_heads = 0, ssm_v_heads = 0;
  int full_attn_interval = 0;
};

// Known shapes: olmoe-1b-7b, qwen2-57b, qwen3-30b, mixtral-8x7b, deepseek-v2-lite,
// deepseek-v3 (5 of its 61 layers: 3 dense, 2 MoE), glm-4.5-air, glm-4.5 (8 of its 92
// layers), gpt-oss-20b, gpt-oss-120b, minimax-m2, ernie4_5-moe (ERNIE-4.5-21B-A3B), dots1,
// qwen3-vl-30b, mistral-small-4, glm-5 (5 of its 78 layers), ling-mini-2.0 (bailingmoe2),
// hunyuan-a13b, gemma4-26b-a4b, step-3.5-flash, and small ones used by tests and the demo
// (tiny-moe, tiny-mixtral, tiny-deepseek-v2, tiny-deepseek-v3, tiny-glm4moe, tiny-glm4moe-qknorm,
// tiny-gpt-oss, tiny-minimax-m2, tiny-ernie4_5-moe, tiny-dots1, tiny-qwen3vlmoe, tiny-bailingmoe2,
// tiny-hunyuan-moe, tiny-gemma4, tiny-step35, tiny-qwen3next, tiny-qwen35moe),
// qwen3-next-80b-a3b and qwen3.5-35b-a3b. Throws lynx::Error for an unknown name.
SynthShape synth_shape(const std::string& name);
std::vector<std::string> synth_shape_names();

struct SynthOptions {
  SynthShape shape;
  gguf::TensorType type = gguf::TensorType::F16;  // weight matrices; norms/router stay F32
  // The routed experts' type when set; otherwise MXFP4 for shapes with mxfp4_experts, else
  // `type`.
  std::optional<gguf::TensorType> expert_type;
  uint64_t seed = 1;
  float router_std = 1.5f;  // std of router logits at unit-variance input
  std::function<void(size_t done, size_t total)> progress;
  std::string chat_template;  // tokenizer.chat_template when not empty (server tests)
  // The routed experts' gate and up as one ffn_gate_up_exps tensor (each expert's gate rows,
  // then its up rows), as llama.cpp's gemma4 converter writes them, instead of two tensors;
  // for the families that take that layout (gemma4), else an error.
  bool fused_gate_up = false;
};

// Writes the model (with a byte-level BPE vocabulary so text round-trips) to `path`.
void write_synth_model(const SynthOptions& opts, const std::string& path);

}  // namespace lynx
