"""gpt-oss for make_hf_checkpoint.py: experts fused per layer, MXFP4 in OpenAI's layout (ggml's
blocks rewritten, asserted to decode as transformers decodes them) or dequantized."""

import os

import numpy as np

import gguf_np as G
from hf_files import make_tokenizer, write_checkpoint
from hf_layout import GQA_NAMES, common_config, gguf_kv

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def ggml_mxfp4_to_openai(raw, n_mat, rows, cols):
    """ggml block_mxfp4 bytes (per 32 values: E8M0 byte, then 16 bytes holding element j in
    the low nibble of byte j and element j + 16 in the high one) -> OpenAI's *_blocks
    [n_mat, rows, cols/32, 16] (element 2k in the low nibble of byte k, 2k + 1 in the high
    one) and *_scales [n_mat, rows, cols/32]; the codes and the E8M0 byte are the same."""
    nb = cols // 32
    b = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(n_mat, rows, nb, 17)
    qs = b[..., 1:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # element order 0..31
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return blocks, np.ascontiguousarray(b[..., 0])


def openai_mxfp4_decode(blocks, scales):
    """transformers' dequantization of OpenAI's layout (convert_moe_packed_tensors): value =
    E2M1[nibble] * 2^(scale - 127), low nibble first."""
    v = np.empty(blocks.shape[:-1] + (32,), np.float32)
    v[..., 0::2] = E2M1[blocks & 0x0F]
    v[..., 1::2] = E2M1[blocks >> 4]
    v = v * np.ldexp(np.float32(1), scales.astype(np.int32) - 127)[..., None].astype(np.float32)
    return v.reshape(blocks.shape[0], blocks.shape[1], -1)


def gpt_oss_from_fixture(out_dir, name, gguf_path, mxfp4):
    g = G.read_gguf(gguf_path)
    a = "gpt-oss"
    k = lambda key, d=None: gguf_kv(g, a, key, d)  # noqa: E731
    L, E, F, D = k("block_count"), k("expert_count"), k("expert_feed_forward_length"), \
        k("embedding_length")
    config = common_config(g, a, "gpt_oss")
    config.update({
        "head_dim": k("attention.key_length"),
        "intermediate_size": F,
        "num_local_experts": E,
        "num_experts_per_tok": k("expert_used_count"),
        "experts_per_token": k("expert_used_count"),
        "sliding_window": k("attention.sliding_window"),
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention"
                        for i in range(L)],
        "rope_scaling": {"rope_type": "yarn", "factor": float(k("rope.scaling.factor")),
                         "original_max_position_embeddings":
                             k("rope.scaling.original_context_length"),
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
        "swiglu_limit": 7.0,
        "attention_bias": True,
        "hidden_act": "silu",
    })
    if mxfp4:
        config["quantization_config"] = {"quant_method": "mxfp4",
                                         "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                    "model.layers.*.mlp.router",
                                                                    "model.embed_tokens",
                                                                    "lm_head"]}
    names = {"token_embd.weight": "model.embed_tokens.weight",
             "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    layer_names = dict(GQA_NAMES, **{"attn_output.bias": "self_attn.o_proj.bias",
                                      "attn_sinks.weight": "self_attn.sinks",
                                      "ffn_gate_inp.weight": "mlp.router.weight",
                                      "ffn_gate_inp.bias": "mlp.router.bias"})
    out = []
    for i in range(-1, L):
        if i < 0:
            for n, hn in names.items():
                out.append((hn, g.tensors[n].to_numpy()))
            continue
        b, p = "blk.%d." % i, "model.layers.%d." % i
        for n, t_ in g.tensors.items():
            rest = n[len(b):]
            if n.startswith(b) and "_exps." not in rest:
                out.append((p + layer_names[rest], t_.to_numpy()))
        t = {x: g.tensors[b + "ffn_%s_exps.weight" % x] for x in ("gate", "up", "down")}
        if mxfp4:
            assert all(v.type == 39 for v in t.values())
            gb, gs = ggml_mxfp4_to_openai(t["gate"].raw, E, F, D)
            ub, us = ggml_mxfp4_to_openai(t["up"].raw, E, F, D)
            db, ds = ggml_mxfp4_to_openai(t["down"].raw, E, D, F)
            # The OpenAI layout must decode (as transformers does) to the fixture's values.
            for (bl, sc), x in (((gb, gs), "gate"), ((db, ds), "down")):
                assert np.array_equal(openai_mxfp4_decode(bl, sc), t[x].to_numpy()), x
            fb = np.empty((E, 2 * F) + gb.shape[2:], np.uint8)
            fb[:, 0::2], fb[:, 1::2] = gb, ub
            fs = np.empty((E, 2 * F) + gs.shape[2:], np.uint8)
            fs[:, 0::2], fs[:, 1::2] = gs, us
            out += [(p + "mlp.experts.gate_up_proj_blocks", fb, "U8"),
                    (p + "mlp.experts.gate_up_proj_scales", fs, "U8"),
                    (p + "mlp.experts.down_proj_blocks", db, "U8"),
                    (p + "mlp.experts.down_proj_scales", ds, "U8")]
        else:  # dequantized: [E, in, out], gate and up columns interleaved
            gt, ut, dt = (t[x].to_numpy() for x in ("gate", "up", "down"))
            gu = np.empty((E, D, 2 * F), np.float32)
            gu[:, :, 0::2], gu[:, :, 1::2] = gt.transpose(0, 2, 1), ut.transpose(0, 2, 1)
            out += [(p + "mlp.experts.gate_up_proj", gu, "F16"),
                    (p + "mlp.experts.down_proj", dt.transpose(0, 2, 1), "F16")]
        gb_ = g.tensors[b + "ffn_gate_exps.bias"].to_numpy()
        ub_ = g.tensors[b + "ffn_up_exps.bias"].to_numpy()
        gub = np.empty((E, 2 * F), np.float32)
        gub[:, 0::2], gub[:, 1::2] = gb_, ub_
        out += [(p + "mlp.experts.gate_up_proj_bias", gub),
                (p + "mlp.experts.down_proj_bias", g.tensors[b + "ffn_down_exps.bias"].to_numpy())]
    d = os.path.join(out_dir, name)
    tok, tok_cfg = make_tokenizer(config["vocab_size"], True)
    del tok_cfg["chat_template"]  # shipped as chat_template.jinja, as openai/gpt-oss-* do
    write_checkpoint(d, config, out, "F32", 2 if mxfp4 else 1, (tok, tok_cfg))
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write("{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}"
                "<|end|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}")
