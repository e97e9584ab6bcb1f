// The GGUF tensor names (llama.cpp's, llama-arch.cpp LLM_TENSOR_NAMES), written once: the
// architecture tables (arch.h, <family>.cc) declare their tensors with these, and the convert
// tables (src/convert/families.cc) name the tensor each Hugging Face tensor becomes with them.
// Per-layer names are what follows "blk.N.".
#pragma once

namespace lynx::arch::tensor {

// Outside the layers.
inline constexpr char kTokenEmbd[] = "token_embd.weight";
inline constexpr char kOutputNorm[] = "output_norm.weight";
inline constexpr char kOutput[] = "output.weight";
inline constexpr char kRopeFreqs[] = "rope_freqs.weight";

// Attention.
inline constexpr char kAttnNorm[] = "attn_norm.weight";
inline constexpr char kAttnQ[] = "attn_q.weight";
inline constexpr char kAttnK[] = "attn_k.weight";
inline constexpr char kAttnV[] = "attn_v.weight";
inline constexpr char kAttnOutput[] = "attn_output.weight";
inline constexpr char kAttnQkv[] = "attn_qkv.weight";
inline constexpr char kAttnQBias[] = "attn_q.bias";
inline constexpr char kAttnKBias[] = "attn_k.bias";
inline constexpr char kAttnVBias[] = "attn_v.bias";
inline constexpr char kAttnOutputBias[] = "attn_output.bias";
inline constexpr char kAttnQNorm[] = "attn_q_norm.weight";
inline constexpr char kAttnKNorm[] = "attn_k_norm.weight";
inline constexpr char kAttnSinks[] = "attn_sinks.weight";
inline constexpr char kAttnGate[] = "attn_gate.weight";
inline constexpr char kAttnQA[] = "attn_q_a.weight";
inline constexpr char kAttnQANorm[] = "attn_q_a_norm.weight";
inline constexpr char kAttnQB[] = "attn_q_b.weight";
inline constexpr char kAttnKvAMqa[] = "attn_kv_a_mqa.weight";
inline constexpr char kAttnKvANorm[] = "attn_kv_a_norm.weight";
inline constexpr char kAttnKvB[] = "attn_kv_b.weight";
inline constexpr char kAttnKB[] = "attn_k_b.weight";
inline constexpr char kAttnVB[] = "attn_v_b.weight";

// FFN and experts.
inline constexpr char kFfnNorm[] = "ffn_norm.weight";
inline constexpr char kPostAttentionNorm[] = "post_attention_norm.weight";
inline constexpr char kFfnGate[] = "ffn_gate.weight";
inline constexpr char kFfnUp[] = "ffn_up.weight";
inline constexpr char kFfnDown[] = "ffn_down.weight";
inline constexpr char kFfnGateInp[] = "ffn_gate_inp.weight";
inline constexpr char kFfnGateInpBias[] = "ffn_gate_inp.bias";
inline constexpr char kExpProbsB[] = "exp_probs_b.bias";
inline constexpr char kFfnGateExps[] = "ffn_gate_exps.weight";
inline constexpr char kFfnUpExps[] = "ffn_up_exps.weight";
inline constexpr char kFfnDownExps[] = "ffn_down_exps.weight";
inline constexpr char kFfnGateExpsBias[] = "ffn_gate_exps.bias";
inline constexpr char kFfnUpExpsBias[] = "ffn_up_exps.bias";
inline constexpr char kFfnDownExpsBias[] = "ffn_down_exps.bias";
inline constexpr char kFfnGateShexp[] = "ffn_gate_shexp.weight";
inline constexpr char kFfnUpShexp[] = "ffn_up_shexp.weight";
inline constexpr char kFfnDownShexp[] = "ffn_down_shexp.weight";
inline constexpr char kFfnGateInpShexp[] = "ffn_gate_inp_shexp.weight";
inline constexpr char kLayerOutputNorm[] = "layer_output_norm.weight";
// gemma4 (llama-arch.cpp LLM_ARCH_GEMMA4).
inline constexpr char kPostFfwNorm[] = "post_ffw_norm.weight";
inline constexpr char kPostFfwNorm1[] = "post_ffw_norm_1.weight";
inline constexpr char kPreFfwNorm2[] = "pre_ffw_norm_2.weight";
inline constexpr char kPostFfwNorm2[] = "post_ffw_norm_2.weight";
inline constexpr char kFfnGateInpScale[] = "ffn_gate_inp.scale";
inline constexpr char kFfnDownExpsScale[] = "ffn_down_exps.scale";
inline constexpr char kFfnGateUpExps[] = "ffn_gate_up_exps.weight";
inline constexpr char kLayerOutputScale[] = "layer_output_scale.weight";

// Gated DeltaNet (llama-arch.cpp LLM_ARCH_QWEN3NEXT / LLM_ARCH_QWEN35MOE); ssm_a has no suffix.
inline constexpr char kSsmConv1d[] = "ssm_conv1d.weight";
inline constexpr char kSsmDt[] = "ssm_dt.bias";
inline constexpr char kSsmA[] = "ssm_a";
inline constexpr char kSsmBa[] = "ssm_ba.weight";
inline constexpr char kSsmBeta[] = "ssm_beta.weight";
inline constexpr char kSsmAlpha[] = "ssm_alpha.weight";
inline constexpr char kSsmNorm[] = "ssm_norm.weight";
inline constexpr char kSsmOut[] = "ssm_out.weight";
inline constexpr char kSsmIn[] = "ssm_in.weight";  // older qwen3next files: q, k, v, z fused

// A next-token-prediction (NextN) layer's own.
inline constexpr char kNextnEhProj[] = "nextn.eh_proj.weight";
inline constexpr char kNextnEnorm[] = "nextn.enorm.weight";
inline constexpr char kNextnHnorm[] = "nextn.hnorm.weight";
inline constexpr char kNextnSharedHeadNorm[] = "nextn.shared_head_norm.weight";
inline constexpr char kNextnSharedHeadHead[] = "nextn.shared_head_head.weight";
inline constexpr char kNextnEmbedTokens[] = "nextn.embed_tokens.weight";

}  // namespace lynx::arch::tensor
