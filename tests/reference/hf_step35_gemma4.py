"""Step-3.5-Flash and Gemma 4 checkpoints for make_hf_checkpoint.py, from their fixtures."""

import os

import numpy as np

import gguf_np as G
from hf_files import make_tokenizer, write_checkpoint
from hf_layout import common_config, gguf_kv


def step35_from_fixture(out_dir, name, gguf_path):
    """Step-3.5-Flash (model_type step3p5) from the step35 fixture: every norm weight less the 1
    the converter adds (HF's Step3p5RMSNorm multiplies by 1 + w), experts stacked per layer as
    the checkpoint holds them (moe.gate_proj / up_proj [E, F, hidden], down_proj [E, hidden,
    F]: GGUF's ne read backwards), the router under moe.gate, its bias moe.router_bias, the
    shared expert share_expert.*, the gate g_proj; the config's per-layer lists (layer_types,
    rope_theta, partial_rotary_factors, swiglu_limits / _shared), the sliding layers' heads in
    attention_other_setting, moe_layers_enum, and the llama3-type rope_scaling whose factors
    over the whole head are the fixture's rope_freqs (asserted here); plus one MTP layer after
    the trunk (model.layers.<n>) the converter must drop."""
    g = G.read_gguf(gguf_path)
    arch = "step35"
    k = lambda n, d=None: gguf_kv(g, arch, n, d)  # noqa: E731
    n = k("block_count") - k("nextn_predict_layers", 0)
    hd = k("attention.key_length")
    swa = [bool(x) for x in k("attention.sliding_window_pattern")][:n]
    heads, kv = list(k("attention.head_count"))[:n], list(k("attention.head_count_kv"))[:n]
    full = swa.index(False)
    other = swa.index(True)
    rot = k("rope.dimension_count")
    rot_swa = k("rope.dimension_count_swa", rot)
    base, base_swa = k("rope.freq_base"), k("rope.freq_base_swa", k("rope.freq_base"))
    lead = k("leading_dense_block_count")
    scaling = {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0,
               "high_freq_factor": 32.0, "original_max_position_embeddings": 64}
    want = g.tensors["rope_freqs.weight"].to_numpy()
    got = []
    for i in range(hd // 2):
        wl = 2 * np.pi * base ** (2.0 * i / hd)
        lo_wl = scaling["original_max_position_embeddings"] / scaling["low_freq_factor"]
        hi_wl = scaling["original_max_position_embeddings"] / scaling["high_freq_factor"]
        if wl < hi_wl:
            got.append(1.0)
        elif wl > lo_wl:
            got.append(scaling["factor"])
        else:
            sm = (scaling["original_max_position_embeddings"] / wl - 1.0) / (32.0 - 1.0)
            got.append(1.0 / ((1.0 - sm) / scaling["factor"] + sm))
    assert np.allclose(np.float32(got), want, rtol=1e-6), (got, want)
    c = common_config(g, arch, "step3p5")
    c.pop("num_key_value_heads")
    c.update({
        "num_hidden_layers": n, "head_dim": hd, "num_attention_heads": heads[full],
        "num_attention_groups": kv[full],
        "attention_other_setting": {"attention_type": "sliding_attention",
                                    "num_attention_heads": heads[other],
                                    "num_attention_groups": kv[other], "head_dim": hd},
        "layer_types": ["sliding_attention" if s else "full_attention" for s in swa],
        "rope_theta": [float(base_swa) if s else float(base) for s in swa],
        "partial_rotary_factors": [rot_swa / hd if s else rot / 2 / hd for s in swa],
        "rope_scaling": scaling, "yarn_only_types": ["full_attention"],
        "sliding_window": k("attention.sliding_window"),
        "moe_layers_enum": ",".join(str(i) for i in range(lead, n)),
        "moe_num_experts": k("expert_count"), "moe_top_k": k("expert_used_count"),
        "moe_intermediate_size": k("expert_feed_forward_length"),
        "share_expert_dim": k("expert_shared_feed_forward_length"),
        "moe_router_scaling_factor": float(k("expert_weights_scale")),
        "norm_expert_weight": bool(k("expert_weights_norm")),
        "moe_router_activation": "sigmoid", "use_moe_router_bias": True,
        "use_head_wise_attn_gate": True, "hidden_act": "silu",
        "swiglu_limits": [float(x) or None for x in k("swiglu_clamp_exp")][:n],
        "swiglu_limits_shared": [float(x) or None for x in k("swiglu_clamp_shexp")][:n],
        "num_nextn_predict_layers": 1})
    names = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
             "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
             "attn_output.weight": "self_attn.o_proj.weight",
             "attn_q_norm.weight": "self_attn.q_norm.weight",
             "attn_k_norm.weight": "self_attn.k_norm.weight",
             "attn_gate.weight": "self_attn.g_proj.weight",
             "ffn_norm.weight": "post_attention_layernorm.weight",
             "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
             "ffn_down.weight": "mlp.down_proj.weight", "ffn_gate_inp.weight": "moe.gate.weight",
             "exp_probs_b.bias": "moe.router_bias",
             "ffn_gate_exps.weight": "moe.gate_proj.weight",
             "ffn_up_exps.weight": "moe.up_proj.weight",
             "ffn_down_exps.weight": "moe.down_proj.weight",
             "ffn_gate_shexp.weight": "share_expert.gate_proj.weight",
             "ffn_up_shexp.weight": "share_expert.up_proj.weight",
             "ffn_down_shexp.weight": "share_expert.down_proj.weight"}
    t = []
    for nm, info in g.tensors.items():
        x = info.to_numpy().astype(np.float64)
        if nm == "rope_freqs.weight":
            continue
        if nm.endswith("norm.weight"):
            x = x - 1.0
        if nm == "token_embd.weight":
            t.append(("model.embed_tokens.weight", x))
        elif nm == "output_norm.weight":
            t.append(("model.norm.weight", x))
        elif nm == "output.weight":
            t.append(("lm_head.weight", x))
        else:
            il, rest = nm[4:].split(".", 1)
            if int(il) >= n:
                continue
            t.append(("model.layers.%s.%s" % (il, names[rest]), x))
    t.append(("model.layers.%d.eh_proj.weight" % n, np.ones((c["hidden_size"], 2 * c["hidden_size"]))))
    tok = make_tokenizer(c["vocab_size"], False, False)
    write_checkpoint(os.path.join(out_dir, name), c, t, "F32", 2, tok)


def gemma4_from_fixture(out_dir, name, gguf_path):
    """Gemma 4 (model_type gemma4, Gemma4ForConditionalGeneration) from the gemma4 fixture: the
    language model's fields in text_config (model_type gemma4_text), its tensors under
    model.language_model. with HF's names (router.proj / scale / per_expert_scale,
    pre/post_feedforward_layernorm(_1/_2), layer_scalar), every norm as it is (Gemma 4 has no
    (1 + w)), the experts fused per layer as Gemma4TextExperts holds them (gate_up_proj
    [E, 2F, hidden]: gate rows then up rows; down_proj [E, hidden, F]), no v_proj in the full
    layer (attention_k_eq_v), tied embeddings (no lm_head); rope_parameters per layer type, the
    full layers' partial_rotary_factor read back from the fixture's rope_freqs (1 ... then 1e30 ...,
    asserted); plus a vision and an audio tensor the converter must leave out."""
    g = G.read_gguf(gguf_path)
    arch = "gemma4"
    k = lambda n, d=None: gguf_kv(g, arch, n, d)  # noqa: E731
    n = k("block_count")
    swa = [bool(x) for x in k("attention.sliding_window_pattern")]
    kv = list(k("attention.head_count_kv"))
    full, other = swa.index(False), swa.index(True)
    hd_full, hd_swa = k("attention.key_length"), k("attention.key_length_swa")
    ff = g.tensors["rope_freqs.weight"].to_numpy()
    pairs = int(np.sum(ff == 1.0))
    assert np.all(ff[:pairs] == 1.0) and np.all(ff[pairs:] == np.float32(1e30)), ff
    k_eq_v = "blk.%d.attn_v.weight" % full not in g.tensors
    text = common_config(g, arch, "gemma4_text")
    for x in ("torch_dtype", "rope_theta"):
        text.pop(x)
    tie = text.pop("tie_word_embeddings")
    text.update({
        "num_key_value_heads": kv[other], "num_global_key_value_heads": kv[full],
        "head_dim": hd_swa, "global_head_dim": hd_full, "attention_k_eq_v": k_eq_v,
        "layer_types": ["sliding_attention" if s else "full_attention" for s in swa],
        "sliding_window": k("attention.sliding_window"),
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default",
                                  "rope_theta": float(k("rope.freq_base_swa"))},
            "full_attention": {"rope_type": "proportional", "rope_theta": float(k("rope.freq_base")),
                               "partial_rotary_factor": 2.0 * pairs / hd_full}},
        "final_logit_softcapping": float(k("final_logit_softcapping")),
        "enable_moe_block": True, "num_experts": k("expert_count"),
        "top_k_experts": k("expert_used_count"),
        "moe_intermediate_size": k("expert_feed_forward_length"),
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size_per_layer_input": 0,
        "num_kv_shared_layers": 0, "use_double_wide_mlp": False, "attention_bias": False})
    names = {"attn_norm.weight": "input_layernorm.weight",
             "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
             "attn_v.weight": "self_attn.v_proj.weight",
             "attn_output.weight": "self_attn.o_proj.weight",
             "attn_q_norm.weight": "self_attn.q_norm.weight",
             "attn_k_norm.weight": "self_attn.k_norm.weight",
             "post_attention_norm.weight": "post_attention_layernorm.weight",
             "ffn_norm.weight": "pre_feedforward_layernorm.weight",
             "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
             "ffn_down.weight": "mlp.down_proj.weight",
             "post_ffw_norm_1.weight": "post_feedforward_layernorm_1.weight",
             "ffn_gate_inp.weight": "router.proj.weight", "ffn_gate_inp.scale": "router.scale",
             "pre_ffw_norm_2.weight": "pre_feedforward_layernorm_2.weight",
             "ffn_down_exps.weight": "experts.down_proj",
             "ffn_down_exps.scale": "router.per_expert_scale",
             "post_ffw_norm_2.weight": "post_feedforward_layernorm_2.weight",
             "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
             "layer_output_scale.weight": "layer_scalar"}
    pre = "model.language_model."
    t = []
    for nm, info in g.tensors.items():
        x = info.to_numpy().astype(np.float32)
        if nm == "rope_freqs.weight":
            continue
        if nm == "token_embd.weight":
            t.append((pre + "embed_tokens.weight", x))
        elif nm == "output_norm.weight":
            t.append((pre + "norm.weight", x))
        elif nm == "output.weight":
            t.append(("lm_head.weight", x))
        else:
            il, rest = nm[4:].split(".", 1)
            p = pre + "layers.%s." % il
            if rest == "ffn_gate_exps.weight":
                up = g.tensors["blk.%s.ffn_up_exps.weight" % il].to_numpy().astype(np.float32)
                t.append((p + "experts.gate_up_proj", np.concatenate([x, up], axis=1)))
            elif rest != "ffn_up_exps.weight":
                t.append((p + names[rest], x))
    t += [("model.vision_tower.encoder.layers.0.mlp.up_proj.linear.weight",
           np.ones((4, 3), dtype=np.float32)),
          ("model.embed_audio.embedding_projection.weight", np.ones((2, 4), dtype=np.float32))]
    config = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
              "text_config": text, "tie_word_embeddings": tie, "torch_dtype": "float32",
              "vision_config": {"hidden_size": 4}, "audio_config": {"hidden_size": 4}}
    tok = make_tokenizer(text["vocab_size"], False, False)
    write_checkpoint(os.path.join(out_dir, name), config, t, "F32", 2, tok)
