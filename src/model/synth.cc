// Random-weight GGUF models at real shapes (see lynx/synth.h).
#include "lynx/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "model/arch/arch.h"

namespace lynx {
namespace {

// Shapes from the models' published configs (config.json of each release).
const SynthShape kShapes[] = {
    // OLMoE-1B-7B: 64 experts, 8 per token, no shared expert.
    {"olmoe-1b-7b", "olmoe", 16, 2048, 16, 16, 128, 50304, 4096, 0, 64, 8, 1024, 0, 10000.f, 1e-5f},
    // Qwen2-57B-A14B: 64 experts, 8 per token, one shared expert of width 20480.
    {"qwen2-57b", "qwen2moe", 28, 3584, 28, 4, 128, 151936, 4096, 0, 64, 8, 2560, 20480, 1e6f,
     1e-6f},
    // Qwen3-30B-A3B: 128 experts, 8 per token, head_dim 128 != n_embd / n_head.
    {"qwen3-30b", "qwen3moe", 48, 2048, 32, 4, 128, 151936, 4096, 0, 128, 8, 768, 0, 1e6f, 1e-6f},
    // Mixtral-8x7B: 8 experts, 2 per token.
    {"mixtral-8x7b", "llama", 32, 4096, 32, 8, 128, 32000, 4096, 0, 8, 2, 14336, 0, 1e6f, 1e-5f},
    // Small shapes for tests and the demo: an OLMoE-like 64/8 and a Mixtral-like 8/2.
    {"tiny-moe", "olmoe", 4, 256, 4, 4, 64, 512, 2048, 0, 64, 8, 128, 0, 10000.f, 1e-5f},
    {"tiny-mixtral", "llama", 4, 256, 4, 2, 64, 512, 2048, 0, 8, 2, 512, 0, 10000.f, 1e-5f},
    // DeepSeek-V2-Lite (and Coder-V2-Lite): MLA without q compression, 1 dense layer then 64
    // experts, 6 per token, 2 shared, softmax, not renormalized. YaRN as its config.json:
    // factor 40 over 4096 original positions, mscale_all_dim 0.707 (log multiplier 0.0707);
    // context_length stays 4096 (the real 163840 would size a server's default KV cache).
    {.name = "deepseek-v2-lite",
     .arch = "deepseek2",
     .n_layer = 27,
     .n_embd = 2048,
     .n_head = 16,
     .n_head_kv = 16,
     .head_dim = 192,
     .n_vocab = 102400,
     .n_ctx = 4096,
     .n_ff = 10944,
     .n_expert = 64,
     .n_expert_used = 6,
     .n_ff_exp = 1408,
     .rope_base = 10000.f,
     .rms_eps = 1e-6f,
     .kv_lora_rank = 512,
     .qk_nope_dim = 128,
     .qk_rope_dim = 64,
     .v_head_dim = 128,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 2,
     .norm_topk = false,
     .yarn_factor = 40.f,
     .yarn_orig_ctx = 4096,
     .yarn_log_mul = 0.0707f},
    // DeepSeek-V3 layout at reduced depth (5 of 61 layers: its 3 dense ones, 2 MoE): q_lora
    // 1536, 256 experts, 8 per token in 4 of 8 groups, sigmoid with selection bias,
    // renormalized, routed scale 2.5, 1 shared expert; YaRN factor 40 over 4096, mscale_all_dim
    // 1 (log multiplier 0.1).
    {.name = "deepseek-v3",
     .arch = "deepseek2",
     .n_layer = 5,
     .n_embd = 7168,
     .n_head = 128,
     .n_head_kv = 128,
     .head_dim = 192,
     .n_vocab = 129280,
     .n_ctx = 4096,
     .n_ff = 18432,
     .n_expert = 256,
     .n_expert_used = 8,
     .n_ff_exp = 2048,
     .rope_base = 10000.f,
     .rms_eps = 1e-6f,
     .q_lora_rank = 1536,
     .kv_lora_rank = 512,
     .qk_nope_dim = 128,
     .qk_rope_dim = 64,
     .v_head_dim = 128,
     .n_layer_dense_lead = 3,
     .n_expert_shared = 1,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 2.5f,
     .n_group = 8,
     .n_group_used = 4,
     .yarn_factor = 40.f,
     .yarn_orig_ctx = 4096,
     .yarn_log_mul = 0.1f},
    // Small MLA shapes for tests: V2-like (no q compression, softmax) and V3-like.
    {.name = "tiny-deepseek-v2",
     .arch = "deepseek2",
     .n_layer = 3,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 4,
     .head_dim = 48,
     .n_vocab = 512,
     .n_ctx = 2048,
     .n_ff = 512,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .rope_base = 10000.f,
     .rms_eps = 1e-6f,
     .kv_lora_rank = 64,
     .qk_nope_dim = 32,
     .qk_rope_dim = 16,
     .v_head_dim = 32,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 2,
     .norm_topk = false},
    // gpt-oss-20b / 120b (config.json of the releases): 24 / 36 layers, 32 / 128 experts, 4
    // per token, softmax over the selected; 64 query heads and 8 KV heads of 64 dims (Q = 4096
    // != n_embd 2880), sliding window 128 on the even layers, rope base 150000 with YaRN
    // factor 32 over 4096 positions; experts in MXFP4 as the released files (the other
    // matrices take --type; the releases' are Q8_0 in ggml-org's GGUF). context_length stays
    // 4096 (the real 131072 would size a server's default KV cache).
    {.name = "gpt-oss-20b",
     .arch = "gpt-oss",
     .n_layer = 24,
     .n_embd = 2880,
     .n_head = 64,
     .n_head_kv = 8,
     .head_dim = 64,
     .n_vocab = 201088,
     .n_ctx = 4096,
     .n_expert = 32,
     .n_expert_used = 4,
     .n_ff_exp = 2880,
     .rope_base = 150000.f,
     .rms_eps = 1e-5f,
     .norm_topk = false,
     .yarn_factor = 32.f,
     .yarn_orig_ctx = 4096,
     .sliding_window = 128,
     .mxfp4_experts = true},
    {.name = "gpt-oss-120b",
     .arch = "gpt-oss",
     .n_layer = 36,
     .n_embd = 2880,
     .n_head = 64,
     .n_head_kv = 8,
     .head_dim = 64,
     .n_vocab = 201088,
     .n_ctx = 4096,
     .n_expert = 128,
     .n_expert_used = 4,
     .n_ff_exp = 2880,
     .rope_base = 150000.f,
     .rms_eps = 1e-5f,
     .norm_topk = false,
     .yarn_factor = 32.f,
     .yarn_orig_ctx = 4096,
     .sliding_window = 128,
     .mxfp4_experts = true},
    // Small gpt-oss for tests: a window of 4 (shorter than the test prompts), head_dim 48 so
    // Q = 192 != n_embd, widths multiples of 32 (MXFP4 blocks).
    {.name = "tiny-gpt-oss",
     .arch = "gpt-oss",
     .n_layer = 2,
     .n_embd = 128,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 48,
     .n_vocab = 512,
     .n_ctx = 2048,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 96,
     .rope_base = 150000.f,
     .rms_eps = 1e-5f,
     .norm_topk = false,
     .yarn_factor = 32.f,
     .yarn_orig_ctx = 4096,
     .sliding_window = 4,
     .mxfp4_experts = true},
    {.name = "tiny-deepseek-v3",
     .arch = "deepseek2",
     .n_layer = 3,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 4,
     .head_dim = 48,
     .n_vocab = 512,
     .n_ctx = 2048,
     .n_ff = 512,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .rope_base = 10000.f,
     .rms_eps = 1e-6f,
     .q_lora_rank = 64,
     .kv_lora_rank = 64,
     .qk_nope_dim = 32,
     .qk_rope_dim = 16,
     .v_head_dim = 32,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 1,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 2.5f,
     .n_group = 4,
     .n_group_used = 2},
    // GLM-4.5-Air: 1 dense layer then 128 experts, 8 per token, 1 shared; sigmoid with
    // selection bias, renormalized, routed scale 1; q/k/v biases, no q/k norm; NEOX rope on
    // 64 of the 128 dims per head (partial_rotary_factor 0.5), base 1e6; one NextN block after
    // its 46 layers. context_length 4096 (the real 131072 would size a server's KV cache).
    {.name = "glm-4.5-air",
     .arch = "glm4moe",
     .n_layer = 46,
     .n_embd = 4096,
     .n_head = 96,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_vocab = 151552,
     .n_ctx = 4096,
     .n_ff = 10944,
     .n_expert = 128,
     .n_expert_used = 8,
     .n_ff_exp = 1408,
     .rope_base = 1e6f,
     .rms_eps = 1e-5f,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 1,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 1.f,
     .n_rot = 64,
     .n_nextn = 1},
    // GLM-4.5 at reduced depth (8 of 92 layers: its 3 dense ones, 5 MoE): 160 experts, 8 per
    // token, 1 shared, routed scale 2.5, per-head q/k norms; otherwise as 4.5-Air.
    {.name = "glm-4.5",
     .arch = "glm4moe",
     .n_layer = 8,
     .n_embd = 5120,
     .n_head = 96,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_vocab = 151552,
     .n_ctx = 4096,
     .n_ff = 12288,
     .n_expert = 160,
     .n_expert_used = 8,
     .n_ff_exp = 1536,
     .rope_base = 1e6f,
     .rms_eps = 1e-5f,
     .n_layer_dense_lead = 3,
     .n_expert_shared = 1,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 2.5f,
     .n_rot = 64,
     .qk_norm = true,
     .n_nextn = 1},
    // Small glm4moe shapes for tests: Air-like, and GLM-4.5-like (q/k norms, scale 2.5).
    {.name = "tiny-glm4moe",
     .arch = "glm4moe",
     .n_layer = 3,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_vocab = 512,
     .n_ctx = 2048,
     .n_ff = 512,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .rope_base = 1e6f,
     .rms_eps = 1e-5f,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 1,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 1.f,
     .n_rot = 32,
     .n_nextn = 1},
    {.name = "tiny-glm4moe-qknorm",
     .arch = "glm4moe",
     .n_layer = 3,
     .n_embd = 256,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 64,
     .n_vocab = 512,
     .n_ctx = 2048,
     .n_ff = 512,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128,
     .rope_base = 1e6f,
     .rms_eps = 1e-5f,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 1,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 2.5f,
     .n_rot = 32,
     .qk_norm = true,
     .n_nextn = 1},
    // MiniMax-M2 / M2.1 / M2.5 (config.json of MiniMaxAI/MiniMax-M2): 62 layers, all MoE, 256
    // experts of width 1536, 8 per token, no shared expert; sigmoid with selection bias,
    // renormalized; 48 query and 8 key/value heads of 128, RMSNorm over the whole q and k rows
    // (the family's), NEOX rope on 64 of the 128 dims (rotary_dim), base 5e6, eps 1e-6;
    // vocabulary 200064. context_length 4096 (the real 196608 would size a server's KV cache).
    {.name = "minimax-m2",
     .arch = "minimax-m2",
     .n_layer = 62,
     .n_embd = 3072,
     .n_head = 48,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_vocab = 200064,
     .n_ctx = 4096,
     .n_ff = 1536,
     .n_expert = 256,
     .n_expert_used = 8,
     .n_ff_exp = 1536,
     .rope_base = 5e6f,
     .rms_eps = 1e-6f,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .n_rot = 64},
    // A small minimax-m2 for tests: head_dim x heads (128) differs from n_embd (64), rope on
    // 16 of the 32 dims per head.
    {.name = "tiny-minimax-m2",
     .arch = "minimax-m2",
     .n_layer = 3,
     .n_embd = 64,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 32,
     .n_vocab = 512,
     .n_ctx = 2048,
     .n_ff = 32,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 32,
     .rope_base = 5e6f,
     .rms_eps = 1e-6f,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .n_rot = 16},
    // ERNIE-4.5-21B-A3B (config.json of baidu/ERNIE-4.5-21B-A3B-PT, HF's Ernie4_5_MoeConfig
    // defaults): 28 layers, the first dense (moe_layer_start_index 1, width 12288), then 64
    // experts of width 1536, 6 per token, 2 shared experts (one FFN of 3072, no gate); softmax
    // with selection bias, renormalized; 20 query and 4 key/value heads of 128, normal rope over
    // the whole head, base 5e5, eps 1e-5; vocabulary 103424, tied embeddings. context_length
    // 4096 (the real 131072 would size a server's KV cache).
    {.name = "ernie4_5-moe",
     .arch = "ernie4_5-moe",
     .n_layer = 28,
     .n_embd = 2560,
     .n_head = 20,
     .n_head_kv = 4,
     .head_dim = 128,
     .n_vocab = 103424,
     .n_ctx = 4096,
     .n_ff = 12288,
     .n_expert = 64,
     .n_expert_used = 6,
     .n_ff_exp = 1536,
     .n_ff_shexp = 3072,
     .rope_base = 5e5f,
     .rms_eps = 1e-5f,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 2,
     .select_bias = true,
     .norm_topk = true,
     .tied_output = true},
    // A small ernie4_5-moe for tests (the fixtures' shape): a dense layer, then two MoE layers
    // of 8 experts (3 per token) and 2 shared; heads x head_dim (64) differs from n_embd (32).
    {.name = "tiny-ernie4_5-moe",
     .arch = "ernie4_5-moe",
     .n_layer = 3,
     .n_embd = 32,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 16,
     .n_vocab = 300,
     .n_ctx = 2048,
     .n_ff = 64,
     .n_expert = 8,
     .n_expert_used = 3,
     .n_ff_exp = 32,
     .n_ff_shexp = 64,
     .rope_base = 5e5f,
     .rms_eps = 1e-5f,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 2,
     .select_bias = true,
     .norm_topk = true,
     .tied_output = true},
    // dots.llm1 (config.json of rednote-hilab/dots.llm1.inst): 62 layers, the first dense
    // (intermediate_size 10944), then 128 experts of width 1408, 6 per token, and 2 shared
    // (one FFN of 2816); sigmoid with selection bias, renormalized, routed scale 2.5; 32 query
    // and 32 key/value heads of 128 with per-head q/k RMSNorm, NEOX rope on every dim, base
    // 1e7, eps 1e-5; vocabulary 152064. context_length 4096 (the real 32768 would size a
    // server's KV cache).
    {.name = "dots1",
     .arch = "dots1",
     .n_layer = 62,
     .n_embd = 4096,
     .n_head = 32,
     .n_head_kv = 32,
     .head_dim = 128,
     .n_vocab = 152064,
     .n_ctx = 4096,
     .n_ff = 10944,
     .n_expert = 128,
     .n_expert_used = 6,
     .n_ff_exp = 1408,
     .rope_base = 1e7f,
     .rms_eps = 1e-5f,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 2,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 2.5f},
    // A small dots1 for tests: head_dim x heads (96) differs from n_embd (64), one dense layer,
    // 2 shared experts, routed scale 2.5.
    {.name = "tiny-dots1",
     .arch = "dots1",
     .n_layer = 3,
     .n_embd = 64,
     .n_head = 4,
     .n_head_kv = 4,
     .head_dim = 24,
     .n_vocab = 512,
     .n_ctx = 2048,
     .n_ff = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 32,
     .rope_base = 1e7f,
     .rms_eps = 1e-5f,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 2,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 2.5f},
    // Qwen3-VL-30B-A3B-Instruct's language model (text_config of its config.json): Qwen3-30B-A3B's
    // shape (48 layers, 128 experts of 768, 8 per token, 32 query / 4 key-value heads of 128)
    // with rope base 5e6; qwen3vlmoe writes mrope_section [24, 20, 20] (+ 0) and 3 deepstack
    // layers (the vision tower's deepstack_visual_indexes).
    {"qwen3-vl-30b", "qwen3vlmoe", 48, 2048, 32, 4, 128, 151936, 4096, 0, 128, 8, 768, 0, 5e6f,
     1e-6f},
    // A small qwen3vlmoe for tests: 4 query / 2 key-value heads of 32 (q_dim 128 != n_embd 64).
    {"tiny-qwen3vlmoe", "qwen3vlmoe", 3, 64, 4, 2, 32, 512, 2048, 0, 16, 4, 32, 0, 10000.f, 1e-6f},
    // Mistral Small 4 (Mistral4Config, mistralai/Mistral-Small-4-119B-2603): 36 layers, all MoE
    // (first_k_dense_replace 0), 128 experts of 2048, 4 per token, softmax, renormalized, scale
    // 1, one shared expert; MLA with q_lora_rank 1024, kv_lora_rank 256, qk_nope / qk_rope /
    // v heads 64 / 64 / 128, 32 heads; YaRN factor 128 over 8192 positions, mscale_all_dim 1
    // (log multiplier 0.1), rope base 10000; vocabulary 131072; eps 1e-6.
    {.name = "mistral-small-4",
     .arch = "mistral4",
     .n_layer = 36,
     .n_embd = 4096,
     .n_head = 32,
     .n_head_kv = 32,
     .head_dim = 128,
     .n_vocab = 131072,
     .n_ctx = 4096,
     .n_ff = 12288,
     .n_expert = 128,
     .n_expert_used = 4,
     .n_ff_exp = 2048,
     .rope_base = 10000.f,
     .rms_eps = 1e-6f,
     .q_lora_rank = 1024,
     .kv_lora_rank = 256,
     .qk_nope_dim = 64,
     .qk_rope_dim = 64,
     .v_head_dim = 128,
     .n_layer_dense_lead = 0,
     .n_expert_shared = 1,
     .norm_topk = true,
     .yarn_factor = 128.f,
     .yarn_orig_ctx = 8192,
     .yarn_log_mul = 0.1f},
    // GLM-5 (zai-org/GLM-5 config.json, GlmMoeDsaForCausalLM) at reduced depth (5 of its 78
    // layers: its 3 dense ones, 2 MoE): hidden 6144, 64 heads, MLA with q_lora_rank 2048,
    // kv_lora_rank 512, qk_nope / qk_rope / v heads 192 / 64 / 256; dense width 12288; 256
    // experts of 2048, 8 per token, sigmoid with selection bias, renormalized, scale 2.5, one
    // shared; rope base 1e6 without scaling; eps 1e-5; vocabulary 154880. The DSA indexer's
    // keys are written, its tensors not (the engine does not run it); no NextN block.
    {.name = "glm-5",
     .arch = "glm-dsa",
     .n_layer = 5,
     .n_embd = 6144,
     .n_head = 64,
     .n_head_kv = 64,
     .head_dim = 256,
     .n_vocab = 154880,
     .n_ctx = 4096,
     .n_ff = 12288,
     .n_expert = 256,
     .n_expert_used = 8,
     .n_ff_exp = 2048,
     .rope_base = 1e6f,
     .rms_eps = 1e-5f,
     .q_lora_rank = 2048,
     .kv_lora_rank = 512,
     .qk_nope_dim = 192,
     .qk_rope_dim = 64,
     .v_head_dim = 256,
     .n_layer_dense_lead = 3,
     .n_expert_shared = 1,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 2.5f},
    // Ling-mini-2.0 (config.json of inclusionAI/Ling-mini-2.0, BailingMoeV2ForCausalLM): 20
    // layers, the first dense (intermediate_size 5120), then 256 experts of width 512, 8 per
    // token, within the best 4 of 8 groups, and 1 shared expert of 512; sigmoid with selection
    // bias, renormalized, routed scale 2.5; 16 query and 4 key/value heads of 128 through a
    // fused attn_qkv, per-head q/k RMSNorm, NEOX rope on 64 of 128 dims (partial_rotary_factor
    // 0.5), base 600000, eps 1e-6; vocabulary 157184; one MTP block after the trunk
    // (num_nextn_predict_layers 1). context_length 4096 (the real 32768 would size a server's
    // KV cache).
    {.name = "ling-mini-2.0",
     .arch = "bailingmoe2",
     .n_layer = 20,
     .n_embd = 2048,
     .n_head = 16,
     .n_head_kv = 4,
     .head_dim = 128,
     .n_vocab = 157184,
     .n_ctx = 4096,
     .n_ff = 5120,
     .n_expert = 256,
     .n_expert_used = 8,
     .n_ff_exp = 512,
     .rope_base = 600000.f,
     .rms_eps = 1e-6f,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 1,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 2.5f,
     .n_group = 8,
     .n_group_used = 4,
     .n_rot = 64,
     .n_nextn = 1},
    // A small bailingmoe2 for tests: 4 query and 2 key/value heads of 24 (q 96 rows, k and v 48
    // each, fused), rope on 12 of 24 dims, one dense layer, 3 of 16 experts per token within
    // the best 2 of 4 groups, one shared expert, routed scale 2.5.
    {.name = "tiny-bailingmoe2",
     .arch = "bailingmoe2",
     .n_layer = 3,
     .n_embd = 64,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 24,
     .n_vocab = 512,
     .n_ctx = 2048,
     .n_ff = 64,
     .n_expert = 16,
     .n_expert_used = 3,
     .n_ff_exp = 32,
     .rope_base = 600000.f,
     .rms_eps = 1e-6f,
     .n_layer_dense_lead = 1,
     .n_expert_shared = 1,
     .sigmoid = true,
     .select_bias = true,
     .norm_topk = true,
     .weights_scale = 2.5f,
     .n_group = 4,
     .n_group_used = 2,
     .n_rot = 12},
    // Hunyuan-A13B (config.json of tencent/Hunyuan-A13B-Instruct): 32 layers, every one MoE: 64
    // experts of width 3072 (moe_intermediate_size), 8 per token, softmax renormalized, plus
    // one shared MLP of 3072 (intermediate_size, num_shared_expert 1); 32 query and 8
    // key/value heads of 128, NEOX rope then per-head q/k RMSNorm; rope base 1e4 with NTK alpha
    // 1000 folded in as llama.cpp's converter writes it (1e4 * 1000^(128/126)); eps 1e-5;
    // vocabulary 128167, tied embeddings. context_length 4096 (llama.cpp's converter writes
    // 262144, which would size a server's KV cache).
    {.name = "hunyuan-a13b",
     .arch = "hunyuan-moe",
     .n_layer = 32,
     .n_embd = 4096,
     .n_head = 32,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_vocab = 128167,
     .n_ctx = 4096,
     .n_ff = 3072,
     .n_expert = 64,
     .n_expert_used = 8,
     .n_ff_exp = 3072,
     .n_ff_shexp = 3072,
     .rope_base = 11158839.9251f,
     .rms_eps = 1e-5f,
     .n_expert_shared = 1,
     .norm_topk = true,
     .tied_output = true},
    // A small hunyuan-moe for tests: heads x head_dim (64) differs from n_embd (32), the shared
    // MLP (64) is wider than the experts (32), 8 experts, 3 per token, tied embeddings.
    {.name = "tiny-hunyuan-moe",
     .arch = "hunyuan-moe",
     .n_layer = 3,
     .n_embd = 32,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 16,
     .n_vocab = 320,
     .n_ctx = 2048,
     .n_ff = 32,
     .n_expert = 8,
     .n_expert_used = 3,
     .n_ff_exp = 32,
     .n_ff_shexp = 64,
     .rope_base = 11158839.9251f,
     .rms_eps = 1e-5f,
     .n_expert_shared = 1,
     .norm_topk = true,
     .tied_output = true},
    // Gemma 4 26B-A4B (config.json of google/gemma-4-26B-A4B-it, text_config): 30 layers, 5
    // sliding (window 1024, 8 K/V heads of 256, rope base 1e4) to 1 full (2 K/V heads of 512
    // whose values are their keys, rope base 1e6 on a quarter of the pairs); every layer a
    // GeGLU MLP of 2112 beside 128 experts of 704, 8 per token; vocabulary 262144, tied
    // embeddings, logits capped at 30. context_length 4096 (the real 262144 would size a
    // server's KV cache).
    {.name = "gemma4-26b-a4b",
     .arch = "gemma4",
     .n_layer = 30,
     .n_embd = 2816,
     .n_head = 16,
     .n_head_kv = 8,
     .head_dim = 256,
     .n_vocab = 262144,
     .n_ctx = 4096,
     .n_ff = 2112,
     .n_expert = 128,
     .n_expert_used = 8,
     .n_ff_exp = 704,
     .rope_base = 10000.f,
     .rms_eps = 1e-6f,
     .norm_topk = true,
     .sliding_window = 1024,
     .tied_output = true,
     .head_dim_alt = 512,
     .n_head_kv_alt = 2,
     .alt_period = 6,
     .rope_base_alt = 1e6f,
     .rope_frac_alt = 0.25f,
     .final_softcap = 30.f,
     .k_eq_v_alt = true},
    // A small gemma4 for tests: sliding (window 4) and full layers alternate, the full ones with
    // 32-wide heads (16 sliding), 1 K/V head (2), 4 of 16 rope pairs rotating; logits capped.
    {.name = "tiny-gemma4",
     .arch = "gemma4",
     .n_layer = 4,
     .n_embd = 64,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 16,
     .n_vocab = 512,
     .n_ctx = 2048,
     .n_ff = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 32,
     .rope_base = 10000.f,
     .rms_eps = 1e-6f,
     .norm_topk = true,
     .sliding_window = 4,
     .tied_output = true,
     .head_dim_alt = 32,
     .n_head_kv_alt = 1,
     .alt_period = 2,
     .rope_base_alt = 1e6f,
     .rope_frac_alt = 0.25f,
     .final_softcap = 10.f,
     .k_eq_v_alt = true},
};

// splitmix64: a fast seeded generator, so multi-GB models are written at disk speed.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Approximately normal: sum of uniforms (Irwin-Hall, 4 terms), unit variance.
  float normal() {
    uint64_t r = next();
    float acc = 0;
    for (int i = 0; i < 4; ++i) acc += float((r >> (16 * i)) & 0xFFFF) / 65535.f;
    return (acc - 2.f) * 1.7320508f;
  }
};

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others are moved to
// code points 256 and up, so every byte has a visible one-character token.
std::string byte_token(int b) {
  auto printable = [](int c) {
    return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
  };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += !printable(c);
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

class SynthWriter {
 public:
  SynthWriter(const SynthOptions& o, gguf::Writer& w) : o_(o), w_(w) {}

  void matrix(const std::string& name, gguf::TensorType type, int64_t cols, int64_t rows,
              int64_t n_mat, float std) {
    std::vector<int64_t> ne = {cols, rows};
    if (n_mat > 1) ne.push_back(n_mat);
    const size_t row_bytes = gguf::row_size(type, cols);
    const uint64_t seed = hash_name(name, o_.seed);
    total_ += row_bytes * size_t(rows * n_mat);
    w_.add_tensor_lazy(name, type, ne, [=, this](uint8_t* dst, size_t) {
      Rng rng{seed};
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows * n_mat; ++r) {
        for (auto& v : row) v = rng.normal() * std;
        kernels::quantize_row(type, row.data(), dst + size_t(r) * row_bytes, cols);
        done_ += row_bytes;
      }
      if (o_.progress) o_.progress(done_, total_);
    });
  }

  // n values, or (rows > 1) a [n x rows] table (gpt-oss's per-expert biases).
  void vector(const std::string& name, int64_t n, float mean, float std, int64_t rows = 1) {
    std::vector<float> v(static_cast<size_t>(n * rows));
    Rng rng{hash_name(name, o_.seed)};
    for (auto& x : v) x = mean + std * rng.normal();
    std::vector<int64_t> ne = {n};
    if (rows > 1) ne.push_back(rows);
    w_.add_tensor(name, gguf::TensorType::F32, ne, v.data(), v.size() * sizeof(float));
  }

 private:
  const SynthOptions& o_;
  gguf::Writer& w_;
  size_t total_ = 0;
  size_t done_ = 0;
};

// The configuration a shape describes, as the loader will read it back (the dimensions the
// tensor tables are written in, and the block kind of every layer).
ModelConfig synth_config(const SynthShape& s, const arch::ArchDesc& desc) {
  ModelConfig c;
  c.arch = s.arch;
  c.n_layer = s.n_layer;
  c.n_embd = s.n_embd;
  c.n_head = s.n_head;
  c.n_head_kv = s.n_head_kv;
  c.head_dim = s.head_dim;
  c.n_vocab = s.n_vocab;
  c.n_ctx_train = s.n_ctx;
  c.n_ff = s.n_ff;
  c.n_expert = s.n_expert;
  c.n_expert_used = s.n_expert_used;
  c.n_ff_exp = s.n_ff_exp;
  c.n_ff_shexp = s.n_ff_shexp;
  c.rope_base = s.rope_base;
  c.rms_eps = s.rms_eps;
  c.q_lora_rank = s.q_lora_rank;
  c.kv_lora_rank = s.kv_lora_rank;
  c.qk_nope_dim = s.qk_nope_dim;
  c.qk_rope_dim = s.qk_rope_dim;
  c.v_head_dim = s.v_head_dim;
  // A depth cut below the leading dense layers (--layers) keeps one MoE layer.
  c.n_layer_dense_lead =
      s.n_expert > 0 ? std::min(s.n_layer_dense_lead, s.n_layer - 1) : s.n_layer_dense_lead;
  c.n_expert_shared = s.n_expert_shared;
  c.n_moe_layer_step = s.moe_layer_step;
  c.n_swa = s.sliding_window;
  if (s.yarn_factor > 0.f) {
    c.yarn.on = true;
    c.yarn.factor = s.yarn_factor;
    c.yarn.orig_ctx = s.yarn_orig_ctx;
    c.yarn.log_mul = s.yarn_log_mul;
  }
  if (c.n_ff_shexp == 0) c.n_ff_shexp = s.n_expert_shared * s.n_ff_exp;
  c.n_rot = s.n_rot;
  c.n_layer_nextn = s.n_nextn;
  c.qk_norm = s.qk_norm ? QKNorm::kPerHead : desc.qk_norm;
  c.gating.n_expert = s.n_expert;
  c.gating.n_expert_used = s.n_expert_used;
  c.gating.func = s.sigmoid ? GatingFunc::kSigmoid : GatingFunc::kSoftmax;
  c.gating.select_bias = s.select_bias;
  c.gating.norm_topk = s.norm_topk;
  c.gating.weights_scale = s.weights_scale;
  c.gating.n_group = s.n_group;
  c.gating.n_group_used = s.n_group_used;
  if (s.head_dim_alt > 0) {
    AltAttention& a = c.alt;
    a.head_dim = s.head_dim_alt;
    a.n_head_kv = s.n_head_kv_alt;
    a.k_eq_v = s.k_eq_v_alt;
    a.rope_base = s.rope_base_alt;
    a.n_rot = s.head_dim_alt;
    // Hugging Face's proportional rope: int(frac * head_dim // 2) pairs rotate at
    // base^(-2i/head_dim), the others not (llama.cpp's rope_freqs: 1, then 1e30).
    const int rotated = int(s.rope_frac_alt * float(s.head_dim_alt) / 2.f);
    a.freq_factors.assign(size_t(s.head_dim_alt / 2), 1e30f);
    std::fill_n(a.freq_factors.begin(), std::min(rotated, s.head_dim_alt / 2), 1.f);
    // Every alt_period-th layer full, and the last one (Gemma4TextConfig forces it).
    a.layers.assign(size_t(s.n_layer), 0);
    for (int il = 0; il < s.n_layer; ++il) {
      a.layers[size_t(il)] =
          il == s.n_layer - 1 || (s.alt_period > 0 && il % s.alt_period == s.alt_period - 1);
    }
  }
  c.final_softcap = s.final_softcap;
  c.layer_kinds.resize(size_t(s.n_layer));
  for (int il = 0; il < s.n_layer; ++il) c.layer_kinds[size_t(il)] = arch::layer_kind(desc, c, il);
  return c;
}

// One tensor of a layer's table, filled as its Init says.
void write_tensor(SynthWriter& sw, const SynthOptions& o, const ModelConfig& c,
                  const std::string& prefix, const arch::TensorSpec& t) {
  const int64_t cols = arch::dim(c, t.cols), rows = arch::dim(c, t.rows);
  const float in_std = 1.f / std::sqrt(float(c.n_embd));
  switch (t.init) {
    case arch::Init::kNorm:
      sw.vector(prefix + t.name, cols, 1.f, 0.05f, rows);
      break;
    case arch::Init::kBias:
      sw.vector(prefix + t.name, cols, 0.f, 0.02f, rows);
      break;
    case arch::Init::kGateVec:
      sw.vector(prefix + t.name, cols, 0.f, in_std, rows);
      break;
    case arch::Init::kMatrix: {
      // Routed experts (a stack of n_expert matrices) may have their own type.
      const bool expert = t.mats == arch::Dim::kExpert;
      const gguf::TensorType type = !expert                 ? o.type
                                    : o.expert_type         ? *o.expert_type
                                    : o.shape.mxfp4_experts ? gguf::TensorType::MXFP4
                                                            : o.type;
      sw.matrix(prefix + t.name, type, cols, rows, arch::dim(c, t.mats),
                1.f / std::sqrt(float(cols)));
      break;
    }
    case arch::Init::kRouter:
      sw.matrix(prefix + t.name, gguf::TensorType::F32, cols, arch::dim(c, t.rows),
                arch::dim(c, t.mats), o.router_std * (1.f / std::sqrt(float(cols))));
      break;
  }
}

}  // namespace

std::vector<std::string> synth_shape_names() {
  std::vector<std::string> out;
  for (const auto& s : kShapes) out.push_back(s.name);
  return out;
}

SynthShape synth_shape(const std::string& name) {
  for (const auto& s : kShapes) {
    if (s.name == name) return s;
  }
  std::string list;
  for (const auto& s : kShapes) list += (list.empty() ? "" : ", ") + s.name;
  throw Error("unknown shape '" + name + "' (known: " + list + ")");
}

void write_synth_model(const SynthOptions& o, const std::string& path) {
  const SynthShape& s = o.shape;
  for (const gguf::TensorType t : {o.type, o.expert_type.value_or(o.type)}) {
    if (!kernels::is_compute_type(t)) {
      throw Error(std::string("synth: unsupported weight type ") + gguf::tensor_type_name(t));
    }
  }
  if (s.n_layer < 1) throw Error("synth: the model needs at least one layer");
  if (s.n_expert > 0 && s.n_expert < s.n_expert_used) {
    throw Error("synth: " + std::to_string(s.n_expert) + " experts is fewer than the shape's " +
                std::to_string(s.n_expert_used) + " experts per token");
  }
  if (s.n_vocab < 257) {
    throw Error(
        "synth: the vocabulary needs at least 257 entries (256 bytes and <|endoftext|>), got " +
        std::to_string(s.n_vocab));
  }
  const arch::ArchDesc& desc = arch::find(s.arch);
  if (s.n_nextn < 0 || (s.n_nextn > 0 && desc.nextn.empty())) {
    throw Error("synth: " + s.arch + " cannot have " + std::to_string(s.n_nextn) +
                " next-token-prediction blocks");
  }
  gguf::Writer w;
  const std::string a = s.arch + ".";
  w.set("general.architecture", gguf::Value::str(s.arch));
  w.set("general.name", gguf::Value::str("synth-" + s.name));
  w.set("general.file_type", gguf::Value::u32(uint32_t(o.type)));
  w.set(a + "block_count", gguf::Value::u32(uint32_t(s.n_layer)));
  w.set(a + "context_length", gguf::Value::u32(uint32_t(s.n_ctx)));
  w.set(a + "embedding_length", gguf::Value::u32(uint32_t(s.n_embd)));
  w.set(a + "attention.head_count", gguf::Value::u32(uint32_t(s.n_head)));
  // MLA files (llama.cpp's absorbed layout) give the cached sizes here: one latent "head" of
  // kv_lora + rope keys and kv_lora values; the per-head sizes go in the *_mla keys.
  const bool mla = s.kv_lora_rank > 0;
  w.set(a + "attention.head_count_kv", gguf::Value::u32(uint32_t(mla ? 1 : s.n_head_kv)));
  w.set(a + "attention.key_length",
        gguf::Value::u32(uint32_t(mla ? s.kv_lora_rank + s.qk_rope_dim : s.head_dim)));
  w.set(a + "attention.value_length",
        gguf::Value::u32(uint32_t(mla ? s.kv_lora_rank : s.head_dim)));
  w.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(s.rms_eps));
  w.set(a + "rope.freq_base", gguf::Value::f32(s.rope_base));
  const bool moe = s.n_expert > 0;
  // MoE shapes with dense layers (deepseek2's leading ones) give their width; the others the
  // expert width, as before.
  w.set(a + "feed_forward_length",
        gguf::Value::u32(uint32_t(moe && s.n_ff == 0 ? s.n_ff_exp : s.n_ff)));
  if (moe) {
    w.set(a + "expert_count", gguf::Value::u32(uint32_t(s.n_expert)));
    w.set(a + "expert_used_count", gguf::Value::u32(uint32_t(s.n_expert_used)));
    w.set(a + "expert_feed_forward_length", gguf::Value::u32(uint32_t(s.n_ff_exp)));
    if (s.n_ff_shexp > 0) {
      w.set(a + "expert_shared_feed_forward_length", gguf::Value::u32(uint32_t(s.n_ff_shexp)));
    }
  }

  // Byte-level BPE vocabulary: 256 byte tokens, an end-of-text control token, then unused
  // control tokens up to the shape's vocabulary size (so the output matrix has its real size).
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_token(b));
    types.push_back(1);
  }
  tokens.push_back("<|endoftext|>");
  types.push_back(3);
  while (int(tokens.size()) < s.n_vocab) {
    tokens.push_back("<|extra_" + std::to_string(tokens.size()) + "|>");
    types.push_back(3);
  }
  w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  if (!o.chat_template.empty()) {
    w.set("tokenizer.chat_template", gguf::Value::str(o.chat_template));
  }
  w.set("tokenizer.ggml.pre", gguf::Value::str("default"));
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::str_array({}));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(256));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(256));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(false));

  SynthWriter sw(o, w);
  const ModelConfig c = synth_config(s, desc);
  if (desc.write_metadata) desc.write_metadata(c, w);
  const int64_t E = s.n_embd;
  const float in_std = 1.f / std::sqrt(float(E));
  sw.matrix("token_embd.weight", o.type, E, s.n_vocab, 1, 1.f);
  sw.vector("output_norm.weight", E, 1.f, 0.05f);
  if (!s.tied_output) sw.matrix("output.weight", o.type, E, s.n_vocab, 1, in_std);
  // The trunk's layers, then the NextN blocks (a layer of the same kinds plus their own
  // tensors), which block_count counts (the family's write_metadata).
  for (int il = 0; il < s.n_layer + c.n_layer_nextn; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const bool nextn = il >= s.n_layer;
    const LayerKind kind = nextn ? arch::layer_kind(desc, c, il) : c.layer_kinds[size_t(il)];
    const std::span<const arch::TensorGroup> parts[] = {
        arch::attn_groups(desc, kind), arch::ffn_groups(desc, kind),
        nextn ? desc.nextn : std::span<const arch::TensorGroup>{}};
    for (const auto& groups : parts) {
      for (const arch::TensorGroup& g : groups) {
        if (!g.synth || !arch::group_applies(c, g)) continue;
        if (g.optional && arch::dim(c, g.infer) <= 0) continue;
        for (const arch::TensorSpec& t : g.tensors) write_tensor(sw, o, c, p, t);
      }
    }
  }
  w.write(path);
}

}  // namespace lynx
