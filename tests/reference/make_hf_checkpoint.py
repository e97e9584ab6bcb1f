"""Builds tiny Hugging Face-layout checkpoints for the `lynx-moe convert` tests (NumPy only).

    /usr/bin/python3 tests/reference/make_hf_checkpoint.py --out DIR

Each checkpoint is a directory as the families ship them: config.json, *.safetensors (written
here byte by byte: u64 header length, JSON header, row-major data), tokenizer.json and
tokenizer_config.json (with a chat template).

Where a golden exists (tests/reference/fixtures: llama-moe = Mixtral, llama-dense = Llama,
qwen2moe, qwen3moe, olmoe, and mla/tiny-deepseek-v2 / v3), the checkpoint is made by INVERTING
the conversion on the fixture's GGUF weights, written independently of src/convert:
  - llama: ggml's adjacent-pair q/k rows put back into HF's rotate-half order
    (GGUF rows (head, hd/2, 2) -> HF rows (head, 2, hd/2));
  - stacked experts ffn_*_exps [n_expert, rows, cols] split into one HF tensor per expert
    (Mixtral w1 = gate, w3 = up, w2 = down; the others gate_proj / up_proj / down_proj);
  - DeepSeek: attn_k_b [head, kv_lora, nope] and attn_v_b [head, v, kv_lora] joined into
    kv_b_proj [head * (nope + v), kv_lora] (per head: k_b^T rows, then v_b rows).
  - glm4moe (fixtures/glm4moe, with q/k norms or without): the NextN block blk.N becomes
    model.layers.N.* with eh_proj / enorm / hnorm / shared_head.norm, num_hidden_layers the
    trunk;
  - minimax-m2 (fixtures/minimax-m2, F32): experts as Mixtral's (block_sparse_moe.experts.N.w1 /
    w3 / w2), block_sparse_moe.gate, block_sparse_moe.e_score_correction_bias, the config's
    rotary_dim / num_local_experts / scoring_func;
  - dots1 (fixtures/dots1, F32): experts mlp.experts.N.gate_proj / up_proj / down_proj,
    mlp.gate, mlp.gate.e_score_correction_bias, mlp.shared_experts, the config's
    n_routed_experts / first_k_dense_replace / routed_scaling_factor / scoring_func noaux_tc;
  - ernie4_5-moe (fixtures/ernie4_5-moe, F32): experts mlp.experts.N.*, mlp.gate,
    mlp.moe_statics.e_score_correction_bias ([1, N] as HF stores it), mlp.shared_experts.*, no
    lm_head (tied), the config's moe_* fields;
  - bailing_moe_v2 (fixtures/bailingmoe2, F32): Ling 2.0's names (model.word_embeddings,
    attention.query_key_value kept fused, attention.dense, query_layernorm / key_layernorm,
    mlp.gate.expert_bias, mlp.shared_experts), the config's n_group / topk_group /
    partial_rotary_factor / score_function; plus one MTP layer after the trunk
    (num_nextn_predict_layers 1: the last layer's tensors again, eh_proj, enorm, hnorm,
    final_layernorm), which the converter writes and the loader skips;
  - gemma4 (fixtures/gemma4, F32): Gemma4ForConditionalGeneration's layout (text_config,
    model.language_model. names, norms as they are, experts.gate_up_proj [E, 2F, hidden],
    rope_parameters per layer type with the full layers' proportional partial_rotary_factor
    read back from rope_freqs), plus a vision and an audio tensor to be left out;
  - gpt-oss (fixtures/gpt-oss): the ggml MXFP4 experts rewritten in OpenAI's layout
    (*_blocks with element 2k in the low nibble of byte k, *_scales apart; asserted to decode,
    as transformers decodes it, to the fixture's values), gate and up rows (and bias columns)
    interleaved into gate_up_proj; the F16-experts fixture in the dequantized layout
    ([n_expert, in, out], F16).
  - hunyuan, mistral4 and glm-dsa: make_hf_checkpoint_more.py.
Converting the checkpoint must then reproduce the fixture's golden logits (the goldens come
from reference.py / deepseek2_ref.py / glm4moe_ref.py / gpt_oss_ref.py on the fixture), so
the C++ converter's permutation, stacking and naming are checked against independent code.

qwen2 and qwen3 (dense) have no golden: their weights are drawn here (F16 and BF16 values, to
exercise those dtypes) and expected.gguf is written beside them from the same values, with
the llama.cpp names; the test compares the converted file with it tensor by tensor.

qwen2moe, glm4_moe, minimax_m2, dots1, ernie4_5_moe, bailing_moe_v2 and gpt_oss are written as two shards with model.safetensors.index.json,
deepseek_v2 as three;
mixtral also gets a SentencePiece tokenizer.model (protobuf written by hand), which the
converter prefers for the llama family, as llama.cpp's does.

The code is split by concern: hf_files.py writes the files (safetensors, tokenizers),
hf_layout.py holds the GGUF -> HF names and the families that share them, hf_gpt_oss.py,
hf_qwen.py, hf_step35_gemma4.py and make_hf_checkpoint_more.py one family group each; this file
only says which checkpoint comes from which fixture.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# One module per family group; hf_files writes the files, hf_layout holds the shared names.
from hf_gpt_oss import gpt_oss_from_fixture  # noqa: E402
from hf_layout import (bailingmoe2_from_fixture, deepseek_extra, dots1_extra,  # noqa: E402
                       ernie4_5_moe_extra, from_fixture, glm4moe_extra, llama_extra,
                       minimax_m2_extra, qwen_moe_extra)
from hf_qwen import dense_qwen, qwen3next_from_fixture, qwen3vl_from_fixture  # noqa: E402
from hf_step35_gemma4 import gemma4_from_fixture, step35_from_fixture  # noqa: E402

FIX = os.path.join(HERE, "fixtures")


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = args.out
    os.makedirs(out, exist_ok=True)
    f = lambda n: os.path.join(FIX, n)  # noqa: E731
    from_fixture(out, "mixtral", f("llama-moe-f32.gguf"), "mixtral", llama_extra, pairs=True,
                 spm=True)
    from_fixture(out, "llama", f("llama-dense-f32.gguf"), "llama", llama_extra)
    from_fixture(out, "qwen2_moe", f("qwen2moe-f32.gguf"), "qwen2_moe", qwen_moe_extra(False),
                 shards=2)
    from_fixture(out, "qwen3_moe", f("qwen3moe-f32.gguf"), "qwen3_moe", qwen_moe_extra(True),
                 tlist=True)
    from_fixture(out, "olmoe", f("olmoe-f32.gguf"), "olmoe", qwen_moe_extra(False))
    from_fixture(out, "deepseek_v2", f("mla/tiny-deepseek-v2.gguf"), "deepseek_v2", deepseek_extra,
                 shards=3)
    from_fixture(out, "deepseek_v3", f("mla/tiny-deepseek-v3.gguf"), "deepseek_v3", deepseek_extra)
    from_fixture(out, "glm4_moe", f("glm4moe/tiny-glm4moe.gguf"), "glm4_moe", glm4moe_extra,
                 shards=2)
    from_fixture(out, "glm4_moe_qknorm", f("glm4moe/tiny-glm4moe-qknorm.gguf"), "glm4_moe",
                 glm4moe_extra)
    from_fixture(out, "minimax_m2", f("minimax-m2/tiny-minimax-m2-f32.gguf"), "minimax_m2",
                 minimax_m2_extra, shards=2)
    from_fixture(out, "dots1", f("dots1/tiny-dots1-f32.gguf"), "dots1", dots1_extra, shards=2)
    from_fixture(out, "ernie4_5_moe", f("ernie4_5-moe/tiny-ernie4_5-moe-f32.gguf"),
                 "ernie4_5_moe", ernie4_5_moe_extra, shards=2)
    qwen3vl_from_fixture(out, "qwen3_vl_moe", f("qwen3vlmoe/tiny-qwen3vlmoe-f32.gguf"))
    bailingmoe2_from_fixture(out, "bailing_moe_v2", f("bailingmoe2/tiny-bailingmoe2-f32.gguf"))
    qwen3next_from_fixture(out, "qwen3_next", f("qwen3next/tiny-qwen3next-f32.gguf"))
    qwen3next_from_fixture(out, "qwen3_5_moe", f("qwen3next/tiny-qwen35moe-f32.gguf"))
    step35_from_fixture(out, "step3p5", f("step35/tiny-step35-f32.gguf"))
    gemma4_from_fixture(out, "gemma4", f("gemma4/tiny-gemma4-f32.gguf"))
    import make_hf_checkpoint_more  # noqa: E402 (hunyuan, mistral4, glm-dsa)
    make_hf_checkpoint_more.main(out, FIX)
    gpt_oss_from_fixture(out, "gpt_oss", f("gpt-oss/tiny-gpt-oss.gguf"), True)
    gpt_oss_from_fixture(out, "gpt_oss_dequant", f("gpt-oss/tiny-gpt-oss-f16-experts.gguf"), False)
    dense_qwen(out, "qwen2", "qwen2", "qwen2", "F16", 2001)
    dense_qwen(out, "qwen3", "qwen3", "qwen3", "BF16", 2002)  # last: hf_fixtures.h looks for it
    print("wrote HF checkpoints under", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
