"""Qwen checkpoints for make_hf_checkpoint.py: dense Qwen2 / Qwen3 (weights drawn here, the
expected GGUF written from the same values), Qwen3-VL-MoE, Qwen3-Next and Qwen3.5-MoE (from
their fixtures)."""

import os

import numpy as np

import gguf_np as G
from hf_files import make_tokenizer, write_checkpoint
from hf_layout import common_config, gguf_kv, hf_tensors, qwen_moe_extra


def dense_qwen(out_dir, name, model_type, arch, dtype, seed):
    rng = np.random.default_rng(seed)
    E, L, H, KV, hd, F, V = 64, 2, 4, 2, 32 if arch == "qwen3" else 16, 96, 128
    cast = {"F16": lambda x: x.astype(np.float16).astype(np.float32),
            "BF16": lambda x: G.bf16_bits_to_f32(G.f32_to_bf16_bits(x.astype(np.float32)))}[dtype]
    mat = lambda r, c: cast(rng.standard_normal((r, c)) / np.sqrt(c))  # noqa: E731
    vec = lambda n: cast(1 + 0.05 * rng.standard_normal(n))  # noqa: E731
    hf, gg = [], []  # (name, array); (name, array, is_matrix)

    def add(hname, gname, x):
        hf.append((hname, x))
        gg.append((gname, x))
    add("model.embed_tokens.weight", "token_embd.weight", mat(V, E))
    for i in range(L):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        add(p + "input_layernorm.weight", b + "attn_norm.weight", vec(E))
        add(p + "self_attn.q_proj.weight", b + "attn_q.weight", mat(H * hd, E))
        add(p + "self_attn.k_proj.weight", b + "attn_k.weight", mat(KV * hd, E))
        add(p + "self_attn.v_proj.weight", b + "attn_v.weight", mat(KV * hd, E))
        if arch == "qwen2":
            bias = lambda n: cast(0.02 * rng.standard_normal(n))  # noqa: E731
            add(p + "self_attn.q_proj.bias", b + "attn_q.bias", bias(H * hd))
            add(p + "self_attn.k_proj.bias", b + "attn_k.bias", bias(KV * hd))
            add(p + "self_attn.v_proj.bias", b + "attn_v.bias", bias(KV * hd))
        else:
            add(p + "self_attn.q_norm.weight", b + "attn_q_norm.weight", vec(hd))
            add(p + "self_attn.k_norm.weight", b + "attn_k_norm.weight", vec(hd))
        add(p + "self_attn.o_proj.weight", b + "attn_output.weight", mat(E, H * hd))
        add(p + "post_attention_layernorm.weight", b + "ffn_norm.weight", vec(E))
        add(p + "mlp.gate_proj.weight", b + "ffn_gate.weight", mat(F, E))
        add(p + "mlp.up_proj.weight", b + "ffn_up.weight", mat(F, E))
        add(p + "mlp.down_proj.weight", b + "ffn_down.weight", mat(E, F))
    add("model.norm.weight", "output_norm.weight", vec(E))
    add("lm_head.weight", "output.weight", mat(V, E))
    config = {"model_type": model_type, "hidden_size": E, "num_hidden_layers": L,
              "num_attention_heads": H, "num_key_value_heads": KV, "intermediate_size": F,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 512,
              "vocab_size": V, "tie_word_embeddings": False, "rope_scaling": None,
              "torch_dtype": "float16" if dtype == "F16" else "bfloat16"}
    if arch == "qwen3":
        config["head_dim"] = hd
    d = os.path.join(out_dir, name)
    write_checkpoint(d, config, hf, dtype, 1, make_tokenizer(V, arch == "qwen3", arch == "qwen3"))
    # expected.gguf: matrices in the checkpoint's type, vectors F32 (as convert writes them).
    gtype = {"F16": 1, "BF16": 30}[dtype]
    a = arch + "."
    kv = [("general.architecture", G.string(arch)),
          (a + "block_count", G.u32(L)), (a + "context_length", G.u32(512)),
          (a + "embedding_length", G.u32(E)), (a + "feed_forward_length", G.u32(F)),
          (a + "attention.head_count", G.u32(H)), (a + "attention.head_count_kv", G.u32(KV)),
          (a + "rope.freq_base", G.f32(1000000.0)),
          (a + "attention.layer_norm_rms_epsilon", G.f32(1e-6))]
    if arch == "qwen3":
        kv += [(a + "attention.key_length", G.u32(hd)), (a + "attention.value_length", G.u32(hd))]
    tensors = []
    for gname, x in gg:
        ne = list(reversed(x.shape))
        t = gtype if x.ndim == 2 else 0
        tensors.append((gname, ne, t, G.encode_tensor(x, t)))
    G.write_gguf(os.path.join(d, "expected.gguf"), kv, tensors)


def qwen3vl_from_fixture(out_dir, name, gguf_path):
    """Qwen3-VL-MoE (model_type qwen3_vl_moe) from the qwen3vlmoe fixture: the language model's
    fields nested in text_config (mrope_section from rope.dimension_sections), its tensors under
    model.language_model., the experts fused per layer as transformers stores them
    (mlp.experts.gate_up_proj [E, hidden, 2F]: gate then up outputs, inputs first;
    mlp.experts.down_proj [E, F, hidden]), and a stand-in vision tower tensor (model.visual.*)
    the converter must leave out."""
    g = G.read_gguf(gguf_path)
    arch = "qwen3vlmoe"
    text = common_config(g, arch, "qwen3_vl_moe_text")
    text.update(qwen_moe_extra(True)(g, arch))
    tie = text.pop("tie_word_embeddings")
    text.pop("torch_dtype")
    sections = [int(x) for x in gguf_kv(g, arch, "rope.dimension_sections")]
    text["rope_scaling"] = {"mrope_interleaved": True, "mrope_section": sections[:3],
                            "rope_type": "default"}
    text["decoder_sparse_step"] = 1
    text["mlp_only_layers"] = []
    n_ds = gguf_kv(g, arch, "n_deepstack_layers")
    config = {"model_type": "qwen3_vl_moe", "architectures": ["Qwen3VLMoeForConditionalGeneration"],
              "text_config": text, "tie_word_embeddings": tie, "torch_dtype": "float32",
              "vision_config": {"depth": 2, "deepstack_visual_indexes": list(range(n_ds))}}
    n_exp = text["num_experts"]
    flat = dict(hf_tensors(g, arch, text))
    tensors = []
    for il in range(text["num_hidden_layers"]):
        p = "model.layers.%d.mlp.experts." % il
        gate = [flat.pop(p + "%d.gate_proj.weight" % e) for e in range(n_exp)]
        up = [flat.pop(p + "%d.up_proj.weight" % e) for e in range(n_exp)]
        down = [flat.pop(p + "%d.down_proj.weight" % e) for e in range(n_exp)]
        q = "model.language_model.layers.%d.mlp.experts." % il
        tensors.append((q + "gate_up_proj", np.stack(
            [np.concatenate([gt.T, ut.T], axis=1) for gt, ut in zip(gate, up)])))
        tensors.append((q + "down_proj", np.stack([d.T for d in down])))
    for n, x in flat.items():
        tensors.append((n if n == "lm_head.weight" else
                        "model.language_model." + n[len("model."):], x))
    tensors.append(("model.visual.patch_embed.proj.weight",
                    np.ones((8, 3, 2, 2, 2), dtype=np.float32)))
    tok = make_tokenizer(text["vocab_size"], False, False)
    write_checkpoint(os.path.join(out_dir, name), config, tensors, "F32", 2, tok)


def qwen3next_from_fixture(out_dir, name, gguf_path):
    """Qwen3-Next (model_type qwen3_next) or Qwen3.5-MoE (qwen3_5_moe) from the qwen3next
    fixtures: the weights as the checkpoint holds them, from tests/reference/qwen3next_ref.py's
    load(), which undoes the converter independently of src/convert (norms - 1, A_log =
    log(-ssm_a), in_proj_qkvz rebuilt per key head, Qwen3.5's value heads back in grouped
    order). Qwen3-Next: model.* names, one tensor per expert, in_proj_qkvz / in_proj_ba;
    Qwen3.5: the fields in text_config (mrope_section from rope.dimension_sections), tensors
    under model.language_model., experts fused outputs first (gate_up_proj [E, 2F, hidden],
    down_proj [E, hidden, F]), in_proj_qkv / in_proj_z / in_proj_b / in_proj_a, and a
    stand-in vision tensor. Both get an MTP tensor (mtp.*) the converter must drop."""
    import qwen3next_ref as Q
    g = G.read_gguf(gguf_path)
    arch = g.get("general.architecture")
    m = Q.load(gguf_path)
    q35 = arch == "qwen35moe"
    k = lambda n, d=None: gguf_kv(g, arch, n, d)  # noqa: E731
    text = common_config(g, arch, "qwen3_5_moe_text" if q35 else "qwen3_next")
    text.pop("torch_dtype")
    tie = text.pop("tie_word_embeddings")
    text.update({
        "num_hidden_layers": m.n_layer, "head_dim": m.hd, "num_experts": m.N,
        "num_experts_per_tok": m.k, "moe_intermediate_size": m.F,
        "shared_expert_intermediate_size": m.Fs, "norm_topk_prob": True,
        "linear_conv_kernel_dim": m.K, "linear_key_head_dim": m.dk,
        "linear_num_key_heads": m.nk, "linear_num_value_heads": m.nv,
        "linear_value_head_dim": m.dv, "full_attention_interval": k("full_attention_interval", 4),
        "partial_rotary_factor": m.n_rot / m.hd, "hidden_act": "silu",
        "decoder_sparse_step": 1, "mlp_only_layers": [],
        "layer_types": ["linear_attention" if L.linear else "full_attention" for L in m.layers]})
    pre = "model.language_model." if q35 else "model."
    # load() gives the matrices as qwen3next_ref.Mat (the array in .a), vectors as arrays.
    f32 = lambda a: np.asarray(getattr(a, "a", a), dtype=np.float32)  # noqa: E731
    t = [(pre + "embed_tokens.weight", f32(m.tok)), (pre + "norm.weight", f32(m.out_norm))]
    if not tie:
        t.append(("lm_head.weight", f32(m.out)))
    for i, L in enumerate(m.layers):
        p = pre + "layers.%d." % i
        t += [(p + "input_layernorm.weight", f32(L.in_norm)),
              (p + "post_attention_layernorm.weight", f32(L.post_norm))]
        if L.linear:
            la = p + "linear_attn."
            if q35:
                t += [(la + "in_proj_qkv.weight", f32(L.in_proj_qkv)),
                      (la + "in_proj_z.weight", f32(L.in_proj_z)),
                      (la + "in_proj_b.weight", f32(L.in_proj_b)),
                      (la + "in_proj_a.weight", f32(L.in_proj_a))]
            else:
                t += [(la + "in_proj_qkvz.weight", f32(L.in_proj_qkvz)),
                      (la + "in_proj_ba.weight", f32(L.in_proj_ba))]
            t += [(la + "conv1d.weight", f32(L.conv)[:, None, :]),
                  (la + "dt_bias", f32(L.dt_bias)), (la + "A_log", f32(L.A_log)),
                  (la + "norm.weight", f32(L.norm)), (la + "out_proj.weight", f32(L.out_proj))]
        else:
            sa = p + "self_attn."
            t += [(sa + "q_proj.weight", f32(L.q_proj)), (sa + "k_proj.weight", f32(L.k_proj)),
                  (sa + "v_proj.weight", f32(L.v_proj)), (sa + "o_proj.weight", f32(L.o_proj)),
                  (sa + "q_norm.weight", f32(L.q_norm)), (sa + "k_norm.weight", f32(L.k_norm))]
        mp = p + "mlp."
        t.append((mp + "gate.weight", f32(L.router)))
        if q35:
            t += [(mp + "experts.gate_up_proj",
                   f32(np.concatenate([f32(L.gate_e), f32(L.up_e)], axis=1))),
                  (mp + "experts.down_proj", f32(L.down_e))]
        else:
            for e in range(m.N):
                t += [(mp + "experts.%d.gate_proj.weight" % e, f32(L.gate_e[e])),
                      (mp + "experts.%d.up_proj.weight" % e, f32(L.up_e[e])),
                      (mp + "experts.%d.down_proj.weight" % e, f32(L.down_e[e]))]
        t += [(mp + "shared_expert.gate_proj.weight", f32(L.gate_s)),
              (mp + "shared_expert.up_proj.weight", f32(L.up_s)),
              (mp + "shared_expert.down_proj.weight", f32(L.down_s)),
              (mp + "shared_expert_gate.weight", f32(L.shared_gate)[None, :])]
    t.append(("mtp.fc.weight", np.ones((m.E, 2 * m.E), dtype=np.float32)))
    if q35:
        sections = [int(x) for x in k("rope.dimension_sections")]
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": text.pop("rope_theta"),
                                   "mrope_interleaved": True, "mrope_section": sections[:3],
                                   "partial_rotary_factor": text.pop("partial_rotary_factor")}
        config = {"model_type": "qwen3_5_moe",
                  "architectures": ["Qwen3_5MoeForConditionalGeneration"],
                  "text_config": text, "tie_word_embeddings": tie, "torch_dtype": "float32",
                  "vision_config": {"depth": 2}}
        t.append(("model.visual.patch_embed.proj.weight", np.ones((4, 3), dtype=np.float32)))
    else:
        config = dict(text, tie_word_embeddings=tie, torch_dtype="float32")
    tok = make_tokenizer(text["vocab_size"], False, False)
    write_checkpoint(os.path.join(out_dir, name), config, t, "F32", 2, tok)
