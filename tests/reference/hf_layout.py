"""GGUF fixture -> Hugging Face layout for make_hf_checkpoint.py: the inverse of
convert_hf_to_gguf's transforms for the families that share the GQA / DeepSeek names (llama,
mixtral, qwen2moe, qwen3moe, olmoe, deepseek2, glm4moe, minimax-m2, dots1, ernie4_5-moe,
bailing_moe_v2): the name tables, hf_tensors(), the per-family config.json fields (*_extra) and
from_fixture(), which writes one checkpoint from them."""

import json
import os

import numpy as np

import gguf_np as G
from hf_files import SPM_PIECES, make_tokenizer, write_checkpoint, write_sentencepiece


def unpermute(w, n_heads):
    """GGUF (ggml NORM rope, adjacent pairs) rows -> HF rotate-half rows, per head."""
    rows = w.shape[0]
    hd = rows // n_heads
    return (w.reshape(n_heads, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def gguf_kv(g, arch, key, default=None):
    return g.get(arch + "." + key, default)


def common_config(g, arch, model_type):
    k = lambda name, d=None: gguf_kv(g, arch, name, d)  # noqa: E731
    c = {
        "model_type": model_type,
        "hidden_size": k("embedding_length"),
        "num_hidden_layers": k("block_count"),
        "num_attention_heads": k("attention.head_count"),
        "num_key_value_heads": k("attention.head_count_kv", k("attention.head_count")),
        "rms_norm_eps": float(np.float32(k("attention.layer_norm_rms_epsilon"))),
        "rope_theta": float(k("rope.freq_base", 10000.0)),
        "max_position_embeddings": k("context_length"),
        "vocab_size": g.tensors["token_embd.weight"].ne[1],
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "torch_dtype": "float32",
    }
    if k("feed_forward_length") is not None:
        c["intermediate_size"] = k("feed_forward_length")
    return c


GQA_NAMES = {  # GGUF layer tensor -> HF name under model.layers.N.
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",  # gpt-oss, glm4moe
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
    # DeepSeek
    "attn_q_a.weight": "self_attn.q_a_proj.weight",
    "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
    "attn_q_b.weight": "self_attn.q_b_proj.weight",
    "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
    "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
    # GLM-4.5's next-token-prediction layer
    "nextn.eh_proj.weight": "eh_proj.weight",
    "nextn.enorm.weight": "enorm.weight",
    "nextn.hnorm.weight": "hnorm.weight",
    "nextn.shared_head_norm.weight": "shared_head.norm.weight",
}
BAILING2_NAMES = {  # Ling 2.0's own names under model.layers.N.
    "attn_qkv.weight": "attention.query_key_value.weight",
    "attn_output.weight": "attention.dense.weight",
    "attn_q_norm.weight": "attention.query_layernorm.weight",
    "attn_k_norm.weight": "attention.key_layernorm.weight",
    "exp_probs_b.bias": "mlp.gate.expert_bias",
    "ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
}
EXPERT_NAMES = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj",
                "ffn_down_exps.weight": "down_proj"}
MIXTRAL_EXPERT_NAMES = {"ffn_gate_exps.weight": "w1", "ffn_up_exps.weight": "w3",
                        "ffn_down_exps.weight": "w2"}


def hf_tensors(g, arch, config):
    """The fixture's tensors under their HF names, in HF layout (float32)."""
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    out = []
    kb = {}
    for name, t in g.tensors.items():
        x = t.to_numpy().astype(np.float32)
        if name == "token_embd.weight" and arch == "bailingmoe2":
            out.append(("model.word_embeddings.weight", x))
            continue
        if name == "token_embd.weight":
            out.append(("model.embed_tokens.weight", x))
            continue
        if name == "output_norm.weight":
            out.append(("model.norm.weight", x))
            continue
        if name == "output.weight":
            out.append(("lm_head.weight", x))
            continue
        _, layer, rest = name.split(".", 2)
        p = "model.layers.%s." % layer
        if rest in EXPERT_NAMES:
            for e in range(x.shape[0]):
                if arch in ("llama", "minimax-m2"):
                    hf = p + "block_sparse_moe.experts.%d.%s.weight" % (
                        e, MIXTRAL_EXPERT_NAMES[rest])
                else:
                    hf = p + "mlp.experts.%d.%s.weight" % (e, EXPERT_NAMES[rest])
                out.append((hf, x[e]))
            continue
        if arch == "llama" and rest == "attn_q.weight":
            x = unpermute(x, n_head)
        if arch == "llama" and rest == "attn_k.weight":
            x = unpermute(x, n_kv)
        if arch in ("llama", "minimax-m2") and rest == "ffn_gate_inp.weight":
            out.append((p + "block_sparse_moe.gate.weight", x))
            continue
        if arch == "bailingmoe2" and rest in BAILING2_NAMES:
            out.append((p + BAILING2_NAMES[rest], x))
            continue
        if arch == "dots1" and rest == "exp_probs_b.bias":
            out.append((p + "mlp.gate.e_score_correction_bias", x))
            continue
        if arch == "minimax-m2" and rest == "exp_probs_b.bias":
            out.append((p + "block_sparse_moe.e_score_correction_bias", x))
            continue
        if arch == "ernie4_5-moe" and rest == "exp_probs_b.bias":
            out.append((p + "mlp.moe_statics.e_score_correction_bias", x.reshape(1, -1)))
            continue
        if arch in ("deepseek2", "glm4moe", "dots1", "ernie4_5-moe") and rest.startswith("ffn_") \
                and "shexp" in rest:
            out.append((p + GQA_NAMES[rest].replace("shared_expert.", "shared_experts."), x))
            continue
        if rest in ("attn_k_b.weight", "attn_v_b.weight"):
            kb.setdefault(layer, {})[rest] = x
            if len(kb[layer]) == 2:
                k_b, v_b = kb[layer]["attn_k_b.weight"], kb[layer]["attn_v_b.weight"]
                heads = [np.concatenate([k_b[h].T, v_b[h]], axis=0) for h in range(k_b.shape[0])]
                out.append((p + "self_attn.kv_b_proj.weight", np.concatenate(heads, axis=0)))
            continue
        if rest == "ffn_gate_inp_shexp.weight":
            x = x.reshape(1, -1)  # HF's Linear(hidden, 1)
        out.append((p + GQA_NAMES[rest], x))
    return out


def from_fixture(out_dir, name, gguf_path, model_type, extra, shards=1, pairs=False, tlist=False,
                 spm=False):
    g = G.read_gguf(gguf_path)
    arch = g.get("general.architecture")
    config = common_config(g, arch, model_type)
    config.update(extra(g, arch))
    tensors = hf_tensors(g, arch, config)
    tok = make_tokenizer(config["vocab_size"], pairs, tlist)
    write_checkpoint(os.path.join(out_dir, name), config, tensors, "F32", shards, tok)
    if spm:  # Mixtral ships a SentencePiece model, which llama.cpp prefers to tokenizer.json
        write_sentencepiece(os.path.join(out_dir, name, "tokenizer.model"), SPM_PIECES)
        with open(os.path.join(out_dir, name, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                       "add_bos_token": True, "add_eos_token": False,
                       "chat_template": "{{ bos_token }}{% for m in messages %}[INST] "
                                        "{{ m['content'] }} [/INST]{% endfor %}"}, f)


def llama_extra(g, arch):
    c = {}
    if gguf_kv(g, arch, "expert_count"):
        c["num_local_experts"] = gguf_kv(g, arch, "expert_count")
        c["num_experts_per_tok"] = gguf_kv(g, arch, "expert_used_count")
    return c


def qwen_moe_extra(norm_topk):
    def f(g, arch):
        c = {"num_experts": gguf_kv(g, arch, "expert_count"),
             "num_experts_per_tok": gguf_kv(g, arch, "expert_used_count"),
             "norm_topk_prob": norm_topk}
        if gguf_kv(g, arch, "expert_feed_forward_length"):
            c["moe_intermediate_size"] = gguf_kv(g, arch, "expert_feed_forward_length")
        if gguf_kv(g, arch, "expert_shared_feed_forward_length"):
            c["shared_expert_intermediate_size"] = gguf_kv(g, arch,
                                                           "expert_shared_feed_forward_length")
        if gguf_kv(g, arch, "attention.key_length"):
            c["head_dim"] = gguf_kv(g, arch, "attention.key_length")
        return c
    return f


def deepseek_extra(g, arch):
    k = lambda name, d=None: gguf_kv(g, arch, name, d)  # noqa: E731
    rope = k("rope.dimension_count")
    c = {
        "kv_lora_rank": k("attention.kv_lora_rank"),
        "q_lora_rank": k("attention.q_lora_rank") or None,
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": k("attention.key_length_mla") - rope,
        "v_head_dim": k("attention.value_length_mla"),
        "moe_intermediate_size": k("expert_feed_forward_length"),
        "n_routed_experts": k("expert_count"),
        "num_experts_per_tok": k("expert_used_count"),
        "n_shared_experts": k("expert_shared_count"),
        "first_k_dense_replace": k("leading_dense_block_count"),
        "moe_layer_freq": 1,
        "routed_scaling_factor": float(k("expert_weights_scale")),
        "norm_topk_prob": bool(k("expert_weights_norm")),
        "scoring_func": "sigmoid" if k("expert_gating_func") == 2 else "softmax",
        "topk_method": "noaux_tc" if k("expert_group_count") else "greedy",
        "n_group": k("expert_group_count", 1),
        "topk_group": k("expert_group_used_count", 1),
        "num_key_value_heads": k("attention.head_count"),
    }
    return c


def deepseek_style_moe_fields(k):
    """The MoE fields GLM-4.5 and dots.llm1 name as DeepSeek-V3 does, in their config.json order
    (k reads the fixture's GGUF key under its architecture)."""
    return {
        "moe_intermediate_size": k("expert_feed_forward_length"),
        "n_routed_experts": k("expert_count"),
        "num_experts_per_tok": k("expert_used_count"),
        "n_shared_experts": k("expert_shared_count"),
        "first_k_dense_replace": k("leading_dense_block_count"),
        "routed_scaling_factor": float(k("expert_weights_scale")),
        "norm_topk_prob": bool(k("expert_weights_norm")),
    }


def glm4moe_extra(g, arch):
    k = lambda name, d=None: gguf_kv(g, arch, name, d)  # noqa: E731
    nextn = k("nextn_predict_layers", 0)
    head = k("attention.key_length")
    return {
        "num_hidden_layers": k("block_count") - nextn,  # the trunk; block_count counts NextN
        "num_nextn_predict_layers": nextn,
        "head_dim": head,
        "partial_rotary_factor": k("rope.dimension_count") / head,
        "attention_bias": True,
        "use_qk_norm": "blk.0.attn_q_norm.weight" in g.tensors,
        **deepseek_style_moe_fields(k),
        "n_group": 1,
        "topk_group": 1,
        "rope_scaling": None,
    }


def dots1_extra(g, arch):
    """dots.llm1's config.json fields (n_routed_experts, moe_intermediate_size,
    first_k_dense_replace, scoring_func noaux_tc; n_group / topk_group null as released)."""
    k = lambda name, d=None: gguf_kv(g, arch, name, d)  # noqa: E731
    return {
        "architectures": ["Dots1ForCausalLM"],
        "head_dim": k("attention.key_length"),
        "attention_bias": False,
        **deepseek_style_moe_fields(k),
        "scoring_func": "noaux_tc",
        "n_group": None,
        "topk_group": None,
        "rope_scaling": None,
        "tie_word_embeddings": False,
    }


def bailingmoe2_extra(g, arch):
    """Ling-mini-2.0's config.json fields (num_experts, moe_intermediate_size,
    first_k_dense_replace, n_group / topk_group, partial_rotary_factor, score_function), one MTP
    layer after the trunk."""
    k = lambda name, d=None: gguf_kv(g, arch, name, d)  # noqa: E731
    return {
        "architectures": ["BailingMoeV2ForCausalLM"],
        "head_dim": k("attention.key_length"),
        "partial_rotary_factor": k("rope.dimension_count") / k("attention.key_length"),
        "use_qkv_bias": False,
        "use_bias": False,
        "use_qk_norm": True,
        "hidden_act": "silu",
        "moe_intermediate_size": k("expert_feed_forward_length"),
        "moe_shared_expert_intermediate_size": k("expert_shared_feed_forward_length"),
        "num_experts": k("expert_count"),
        "num_experts_per_tok": k("expert_used_count"),
        "num_shared_experts": k("expert_shared_count"),
        "first_k_dense_replace": k("leading_dense_block_count"),
        "routed_scaling_factor": float(k("expert_weights_scale")),
        "norm_topk_prob": bool(k("expert_weights_norm")),
        "n_group": k("expert_group_count"),
        "topk_group": k("expert_group_used_count"),
        "score_function": "sigmoid",
        "num_nextn_predict_layers": 1,
        "rope_scaling": None,
        "tie_word_embeddings": False,
    }


def bailingmoe2_from_fixture(out_dir, name, gguf_path):
    """The fixture as a Ling 2.0 checkpoint, plus one MTP layer (model.layers.<n_layer>): the
    last layer's tensors again and the MTP layer's own (eh_proj, enorm, hnorm,
    final_layernorm), small values; no output depends on it."""
    g = G.read_gguf(gguf_path)
    arch = g.get("general.architecture")
    config = common_config(g, arch, "bailing_moe_v2")
    config.update(bailingmoe2_extra(g, arch))
    tensors = hf_tensors(g, arch, config)
    n, E = config["num_hidden_layers"], config["hidden_size"]
    last = "model.layers.%d." % (n - 1)
    mtp = "model.layers.%d." % n
    tensors += [(mtp + t[len(last):], x) for t, x in tensors if t.startswith(last)]
    rng = np.random.default_rng(2026)
    tensors += [(mtp + "eh_proj.weight", (0.02 * rng.standard_normal((E, 2 * E))).astype(np.float32))]
    for norm in ("enorm", "hnorm", "final_layernorm"):
        tensors.append((mtp + norm + ".weight", np.ones(E, dtype=np.float32)))
    tok = make_tokenizer(config["vocab_size"], False, False)
    write_checkpoint(os.path.join(out_dir, name), config, tensors, "F32", 2, tok)


def minimax_m2_extra(g, arch):
    """MiniMax-M2's config.json fields (the released file's names: rotary_dim,
    num_local_experts, intermediate_size as the expert width, scoring_func, ...)."""
    k = lambda name, d=None: gguf_kv(g, arch, name, d)  # noqa: E731
    n = k("block_count")
    return {
        "architectures": ["MiniMaxM2ForCausalLM"],
        "head_dim": k("attention.key_length"),
        "rotary_dim": k("rope.dimension_count"),
        "intermediate_size": k("expert_feed_forward_length"),
        "num_local_experts": k("expert_count"),
        "num_experts_per_tok": k("expert_used_count"),
        "scoring_func": "sigmoid",
        "use_routing_bias": True,
        "use_qk_norm": True,
        "qk_norm_type": "per_layer",
        "shared_intermediate_size": 0,
        "attn_type_list": [1] * n,
        "use_mtp": True,
        "num_mtp_modules": 3,
        "rope_scaling": None,
    }


def ernie4_5_moe_extra(g, arch):
    """ERNIE-4.5-MoE's config.json fields (Ernie4_5_MoeConfig: moe_num_experts, moe_k,
    moe_intermediate_size, moe_num_shared_experts, moe_layer_start_index / _end_index /
    _interval, use_bias)."""
    k = lambda name, d=None: gguf_kv(g, arch, name, d)  # noqa: E731
    return {
        "architectures": ["Ernie4_5_MoeForCausalLM"],
        "head_dim": k("attention.key_length"),
        "hidden_act": "silu",
        "use_bias": False,
        "moe_num_experts": k("expert_count"),
        "moe_k": k("expert_used_count"),
        "moe_intermediate_size": k("expert_feed_forward_length"),
        "moe_num_shared_experts": k("expert_shared_count", 0),
        "moe_layer_start_index": k("leading_dense_block_count"),
        "moe_layer_end_index": k("block_count") - 1,
        "moe_layer_interval": k("interleave_moe_layer_step"),
        "moe_norm_min": 1e-12,
        "rope_scaling": None,
    }
