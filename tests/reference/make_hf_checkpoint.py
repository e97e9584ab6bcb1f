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
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np as G  # noqa: E402

FIX = os.path.join(HERE, "fixtures")


# ---------------------------------------------------------------------------------------
# safetensors and tokenizer files
# ---------------------------------------------------------------------------------------

def tensor_bytes(x, dtype):
    if dtype in ("U8", "F8_E4M3"):  # raw bytes (MXFP4 blocks and scales, FP8 codes)
        return np.ascontiguousarray(x, dtype=np.uint8).tobytes()
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "BF16":
        return G.f32_to_bf16_bits(x).astype("<u2").tobytes()
    return x.astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, numpy array) or (name, numpy array, dtype) in file order, written
    as their own dtype or else `dtype`."""
    header, blobs, off = {}, [], 0
    for t in tensors:
        name, x, dt = t if len(t) == 3 else (t[0], t[1], dtype)
        raw = tensor_bytes(x, dt)
        header[name] = {"dtype": dt, "shape": list(x.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)  # the data section starts 8-aligned, as the library does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_checkpoint(d, config, tensors, dtype="F32", shards=1, tokenizer=None):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype)
    else:
        weight_map = {}
        per = (len(tensors) + shards - 1) // shards
        for s in range(shards):
            name = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
            part = tensors[s * per:(s + 1) * per]
            write_safetensors(os.path.join(d, name), part, dtype)
            for t in part:
                weight_map[t[0]] = name
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)
    tok, tok_cfg = tokenizer
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, ensure_ascii=False)


CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


def make_tokenizer(n_vocab, merges_as_pairs, template_list=False):
    """A byte-level BPE tokenizer.json of n_vocab ids: printable ASCII, 'Ġ' (space) and three
    merged tokens from 0 up, ids in the middle left unassigned (llama.cpp pads them), and the
    last four ids added tokens (three special, one not)."""
    chars = ["\u0120"] + [chr(c) for c in range(33, 127)]
    merged = ["\u0120t", "he", "\u0120the"]
    base = chars + merged
    n_plain = min(len(base), n_vocab - 4 - 3)  # leave at least 3 ids unassigned
    vocab = {t: i for i, t in enumerate(base[:n_plain])}
    merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he")]
    merges = [m for m in merges if "".join(m) in vocab]
    added = [
        {"id": n_vocab - 4, "content": "<tool>", "special": False},
        {"id": n_vocab - 3, "content": "<|endoftext|>", "special": True},
        {"id": n_vocab - 2, "content": "<|im_start|>", "special": True},
        {"id": n_vocab - 1, "content": "<|im_end|>", "special": True},
    ]
    for a in added:
        a.update({"single_word": False, "lstrip": False, "rstrip": False, "normalized": False})
    tok = {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "vocab": vocab,
                  "merges": [list(m) for m in merges] if merges_as_pairs
                  else [" ".join(m) for m in merges]},
    }
    tok_cfg = {"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"},
               "bos_token": None, "add_bos_token": False}
    if template_list:
        tok_cfg["chat_template"] = [{"name": "default", "template": CHAT_TEMPLATE},
                                    {"name": "tool_use", "template": "{{ tools }}"}]
    else:
        tok_cfg["chat_template"] = CHAT_TEMPLATE
    return tok, tok_cfg


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, wire, payload):
    return _varint(num << 3 | wire) + payload


def write_sentencepiece(path, pieces):
    """A SentencePiece tokenizer.model (protobuf ModelProto) of (piece, score, type) triples:
    field 1 repeated SentencePiece {1: piece, 2: score (float), 3: type}; a trainer_spec
    (field 2) is written too, which readers must skip."""
    out = bytearray()
    for text, score, ptype in pieces:
        raw = text.encode()
        msg = _field(1, 2, _varint(len(raw)) + raw) + _field(2, 5, struct.pack("<f", score))
        if ptype != 1:
            msg += _field(3, 0, _varint(ptype))
        out += _field(1, 2, _varint(len(msg)) + msg)
    spec = _field(3, 0, _varint(8000))  # trainer_spec.vocab_size, skipped by the converter
    out += _field(2, 2, _varint(len(spec)) + spec)
    with open(path, "wb") as f:
        f.write(bytes(out))


SPM_PIECES = ([("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
              + [(t, -float(i), 1) for i, t in enumerate(
                  ["\u2581the", "\u2581t", "he", "\u2581", "t", "h", "e", "a", "b", "c"])])


# ---------------------------------------------------------------------------------------
# GGUF fixture -> HF layout (the inverse of convert_hf_to_gguf's transforms)
# ---------------------------------------------------------------------------------------

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
        "moe_intermediate_size": k("expert_feed_forward_length"),
        "n_routed_experts": k("expert_count"),
        "num_experts_per_tok": k("expert_used_count"),
        "n_shared_experts": k("expert_shared_count"),
        "first_k_dense_replace": k("leading_dense_block_count"),
        "routed_scaling_factor": float(k("expert_weights_scale")),
        "norm_topk_prob": bool(k("expert_weights_norm")),
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
        "moe_intermediate_size": k("expert_feed_forward_length"),
        "n_routed_experts": k("expert_count"),
        "num_experts_per_tok": k("expert_used_count"),
        "n_shared_experts": k("expert_shared_count"),
        "first_k_dense_replace": k("leading_dense_block_count"),
        "routed_scaling_factor": float(k("expert_weights_scale")),
        "norm_topk_prob": bool(k("expert_weights_norm")),
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


# ---------------------------------------------------------------------------------------
# gpt-oss: experts fused per layer, MXFP4 (OpenAI's layout) or dequantized
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# Dense Qwen2 / Qwen3: weights drawn here, expected GGUF written from the same values
# ---------------------------------------------------------------------------------------

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
