"""More tiny Hugging Face checkpoints for the `lynx-moe convert` tests, written by
make_hf_checkpoint.py's main() (the hunyuan, glm-dsa and mistral4 group): each is a golden
fixture's GGUF weights put back into the family's released Hugging Face layout by NumPy code
written independently of src/convert, so converting it must give the fixture's goldens.

  - hunyuan (fixtures/hunyuan-moe, F32): HunYuanMoEV1ForCausalLM's layout as the released
    config has it (model_type "hunyuan"): self_attn.query_layernorm / key_layernorm,
    mlp.gate.wg (the router), mlp.experts.N.*, mlp.shared_mlp.*; per-layer lists moe_topk /
    moe_intermediate_size / num_shared_expert; the rope base as rope_theta with the NTK alpha
    (rope_scaling type dynamic, alpha 1000) chosen so that rope_theta x alpha^(d / (d - 2)) is
    the fixture's base in float32 (asserted); tied embeddings (no lm_head).
  - glm_moe_dsa (fixtures/mla/tiny-deepseek-v3, F32: glm-dsa runs as deepseek2, so its goldens
    are deepseek2's): DeepSeek-V3's names (kv_b_proj joined from the fixture's k_b / v_b), the
    GLM-5 config (no topk_method: HF's router is group-limited whenever n_group > 1;
    mlp_layer_types; rope_parameters), the DSA indexer's five tensors per layer (drawn here:
    the engine does not run them), and one next-token-prediction layer after the trunk that the
    converter must drop.
  - mistral3 with a mistral4 text_config (fixtures/mla/tiny-deepseek-v2, F32: softmax, no
    selection bias, as Mistral Small 4; mistral4 runs as deepseek2): Mistral3ForConditionalGeneration's
    layout as transformers' convert_mistral4_weight_to_hf.py writes it, in BF16-free F32:
    model.language_model. names, experts fused per layer outputs first (gate_up_proj
    [E, 2F, hidden], gate rows first; down_proj [E, hidden, F]), lm_head at the top, the text
    config under text_config, and a vision tower / projector tensor to be left out.
  - FP8 twins (mistral3_fp8, glm_moe_dsa_fp8, each with a *_dequant twin): the projection
    weights as float8_e4m3fn codes (F8_E4M3) with weight_scale_inv, per tensor (Mistral Small 4's
    release: a scalar, [E, 1, 1] for the fused experts, plus static activation_scale tensors the
    converter drops) or per block of quantization_config.weight_block_size (GLM-5-FP8,
    DeepSeek-V3: a grid, here [16, 48] so blocks are ragged at the edge); the twin holds the
    values the FP8 ones stand for (code value x scale, in float32) and no quantization, so both
    must convert to the same file.
  - hunyuan_tiktoken: the hunyuan checkpoint with the release's tokenizer files instead of a
    tokenizer.json: hy.tiktoken ("<base64 bytes> <rank>" per line; the 256 bytes, then merged
    tokens ranked so that some merges are not the obvious split, one multi-byte UTF-8 token and
    one token BPE never builds), tokenizer_config.json with added_tokens_decoder (the special
    tokens after the ranks) and expected_tokenizer.json: the gpt2-form tokens, the merges
    written out by hand, and the ids a plain rank-based BPE (tiktoken's rule, written here)
    gives for a few strings.
"""

import base64
import json
import os
import re
import shutil

import numpy as np

import gguf_np as G
from hf_files import CHAT_TEMPLATE, make_tokenizer, write_checkpoint
from hf_layout import common_config, deepseek_extra, gguf_kv, hf_tensors

HUNYUAN_NAMES = {  # GGUF layer tensor -> HF name under model.layers.N.
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.query_layernorm.weight",
    "attn_k_norm.weight": "self_attn.key_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate_inp.weight": "mlp.gate.wg.weight",
    "ffn_gate_shexp.weight": "mlp.shared_mlp.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_mlp.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_mlp.down_proj.weight",
}
EXPERTS = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj",
           "ffn_down_exps.weight": "down_proj"}


def hunyuan_from_fixture(out_dir, name, gguf_path):
    g = G.read_gguf(gguf_path)
    arch = "hunyuan-moe"
    k = lambda n, d=None: gguf_kv(g, arch, n, d)  # noqa: E731
    n = k("block_count")
    hd = k("attention.key_length")
    base = np.float32(k("rope.freq_base"))
    alpha = 1000.0
    theta = float(base) / alpha ** (hd / (hd - 2))
    assert np.float32(theta * alpha ** (hd / (hd - 2))) == base, (theta, base)
    n_shared = k("expert_shared_count")
    c = common_config(g, arch, "hunyuan")
    c.update({
        "architectures": ["HunYuanMoEV1ForCausalLM"],
        "head_dim": hd, "attention_head_dim": hd,
        "intermediate_size": k("expert_shared_feed_forward_length") // n_shared,
        "num_experts": k("expert_count"),
        "moe_topk": [k("expert_used_count")] * n,
        "moe_intermediate_size": [k("expert_feed_forward_length")] * n,
        "num_shared_expert": [n_shared] * n,
        "use_mixed_mlp_moe": True, "use_qk_norm": True, "use_cla": False, "cla_share_factor": 2,
        "attention_bias": False, "moe_layer_num_skipped": 0, "hidden_act": "silu",
        "rope_theta": theta,
        "rope_scaling": {"alpha": alpha, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
                         "mscale": 1.0, "mscale_all_dim": 1.0, "type": "dynamic"},
    })
    assert c["tie_word_embeddings"]
    t = []
    for nm, info in g.tensors.items():
        x = info.to_numpy().astype(np.float32)
        if nm == "token_embd.weight":
            t.append(("model.embed_tokens.weight", x))
        elif nm == "output_norm.weight":
            t.append(("model.norm.weight", x))
        else:
            il, rest = nm[4:].split(".", 1)
            p = "model.layers.%s." % il
            if rest in EXPERTS:
                for e in range(x.shape[0]):
                    t.append((p + "mlp.experts.%d.%s.weight" % (e, EXPERTS[rest]), x[e]))
            else:
                t.append((p + HUNYUAN_NAMES[rest], x))
    tok = make_tokenizer(c["vocab_size"], False, False)
    write_checkpoint(os.path.join(out_dir, name), c, t, "F32", 2, tok)


def gpt2_bytes_to_unicode():
    """GPT-2's table: printable bytes as themselves, the n-th other byte as chr(256 + n)."""
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


# Merged tokens after the 256 bytes, in rank order, with the merge a converter must recover
# (derived by hand: BPE over the token's bytes with lower ranks only). " th" is " " + "th", not
# " t" + "h", because "th" ranks below " t"; "xyz" has no merge (BPE never builds it).
TIKTOKEN_MERGED = [
    (b"th", "t h"), (b"he", "h e"), (b" t", "\u0120 t"), (b" th", "\u0120 th"),
    (b"the", "th e"), (b" the", "\u0120th e"), (b"in", "i n"), (b"ng", "n g"),
    (b"ing", "in g"), (b" in", "\u0120 in"), (b"\n\n", "\u010a \u010a"),
    ("\u00e9".encode(), "\u00c3 \u00a9"), (b"xyz", None), (b"20", "2 0"), (b" w", "\u0120 w"),
    (b"or", "o r"), (b"ld", "l d"), (b" wor", "\u0120w or"), (b" world", "\u0120wor ld"),
]
TIKTOKEN_SPECIAL = ["<|endoftext|>", "<|startoftext|>", "<|bos|>", "<|eos|>", "<|pad|>",
                    "<|extra_0|>"]
TIKTOKEN_TEXTS = ["the thing", " the world", "Hello world\n\nthe 2024", "th\u00e9\u00e2tre xyz",
                  "in inning", "with  two   spaces\n"]
# Hunyuan's pre-tokenizer regex (qwen2's), with \p{L} as [^\W\d_] and \p{N} as \d, which Python's
# re knows; the texts above are chosen so these agree with the Unicode classes.
HY_SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|(?:[^\r\n\w]|_)?[^\W\d_]+|\d|"
                      r" ?(?:[^\s\w]|_)+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def rank_bpe(piece, ranks):
    """tiktoken's rule: merge the adjacent pair whose joined bytes rank lowest, until none is
    in the table; the parts' ranks are the ids."""
    parts = [bytes([b]) for b in piece]
    while len(parts) > 1:
        cand = [(ranks[parts[i] + parts[i + 1]], i) for i in range(len(parts) - 1)
                if parts[i] + parts[i + 1] in ranks]
        if not cand:
            break
        _, i = min(cand)
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return [ranks[p] for p in parts]


def hunyuan_tiktoken(out_dir, name, from_name):
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(os.path.join(out_dir, from_name), d)
    os.remove(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    n_vocab = c["vocab_size"]
    byte_order = sorted(range(256), key=lambda b: ord(gpt2_bytes_to_unicode()[b]))
    ranked = [bytes([b]) for b in byte_order] + [t for t, _ in TIKTOKEN_MERGED]
    ranks = {t: i for i, t in enumerate(ranked)}
    with open(os.path.join(d, "hy.tiktoken"), "w") as f:
        for t, i in ranks.items():
            f.write("%s %d\n" % (base64.b64encode(t).decode(), i))
    first = len(ranked)
    assert first + len(TIKTOKEN_SPECIAL) + 1 < n_vocab
    decoder = {str(first + k): {"content": s, "special": True, "lstrip": False,
                                "rstrip": False, "normalized": False, "single_word": False}
               for k, s in enumerate(TIKTOKEN_SPECIAL)}
    tool = first + len(TIKTOKEN_SPECIAL)
    decoder[str(tool)] = {"content": "<tool>", "special": False}
    tc = {"added_tokens_decoder": decoder, "bos_token": "<|startoftext|>", "eos_token": "<|eos|>",
          "pad_token": "<|pad|>", "add_bos_token": False, "chat_template": CHAT_TEMPLATE,
          "tokenizer_class": "HYTokenizer"}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, ensure_ascii=False)
    g2u = gpt2_bytes_to_unicode()
    tokens = ["".join(g2u[b] for b in t) for t in ranked]
    tokens += TIKTOKEN_SPECIAL + ["<tool>"]
    types = [1] * first + [3] * len(TIKTOKEN_SPECIAL) + [4]
    tokens += ["[PAD%d]" % i for i in range(len(tokens), n_vocab)]
    types += [5] * (n_vocab - len(types))
    enc = [[text, [i for piece in HY_SPLIT.findall(text) for i in rank_bpe(piece.encode(), ranks)]]
           for text in TIKTOKEN_TEXTS]
    exp = {"tokens": tokens, "types": types,
           "merges": [m for _, m in TIKTOKEN_MERGED if m is not None],
           "bos": first + 1, "eos": first + 3, "pad": first + 4, "encode": enc}
    with open(os.path.join(d, "expected_tokenizer.json"), "w") as f:
        json.dump(exp, f, ensure_ascii=False, indent=1)


def glm_moe_dsa_from_fixture(out_dir, name, gguf_path):
    g = G.read_gguf(gguf_path)
    arch = "deepseek2"
    c = common_config(g, arch, "glm_moe_dsa")
    c.update(deepseek_extra(g, arch))
    n, lead = c["num_hidden_layers"], c["first_k_dense_replace"]
    del c["topk_method"]
    c.update({
        "architectures": ["GlmMoeDsaForCausalLM"], "scoring_func": "sigmoid",
        "index_n_heads": 2, "index_head_dim": 16, "index_topk": 2048,
        "mlp_layer_types": ["dense"] * lead + ["sparse"] * (n - lead),
        "num_nextn_predict_layers": 1, "rope_interleave": True,
        "rope_parameters": {"rope_theta": c.pop("rope_theta"), "rope_type": "default"},
    })
    t = hf_tensors(g, arch, c)
    rng = np.random.default_rng(33)
    hidden, q_lora = c["hidden_size"], c["q_lora_rank"]
    heads, hd = c["index_n_heads"], c["index_head_dim"]
    for il in range(n):
        p = "model.layers.%d.self_attn.indexer." % il
        t += [(p + "wq_b.weight", rng.standard_normal((heads * hd, q_lora)) * 0.05),
              (p + "wk.weight", rng.standard_normal((hd, hidden)) * 0.05),
              (p + "k_norm.weight", 1.0 + 0.1 * rng.standard_normal(hd)),
              (p + "k_norm.bias", 0.1 * rng.standard_normal(hd)),
              (p + "weights_proj.weight", rng.standard_normal((heads, hidden)) * 0.05)]
    p = "model.layers.%d." % n  # the MTP layer
    t += [(p + "eh_proj.weight", np.ones((hidden, 2 * hidden))), (p + "enorm.weight", np.ones(hidden)),
          (p + "self_attn.indexer.wk.weight", np.ones((hd, hidden)))]
    tok = make_tokenizer(c["vocab_size"], False, False)
    write_checkpoint(os.path.join(out_dir, name), c, t, "F32", 2, tok)
    fp8_pair(out_dir, name + "_fp8", c, t, tok, projection, block=(16, 48))


def mistral4_from_fixture(out_dir, name, gguf_path):
    g = G.read_gguf(gguf_path)
    arch = "deepseek2"
    tc = common_config(g, arch, "mistral4")
    tc.update(deepseek_extra(g, arch))
    for k in ("scoring_func", "topk_method", "moe_layer_freq"):
        del tc[k]
    rope = tc["qk_rope_head_dim"]
    tc.update({
        "hidden_act": "silu", "rope_interleave": True, "attention_bias": False,
        "rope_parameters": {"rope_theta": tc.pop("rope_theta"), "rope_type": "default",
                            "partial_rotary_factor": rope / (rope + tc["qk_nope_head_dim"])},
    })
    c = {"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"],
         "text_config": tc, "vision_config": {"model_type": "pixtral", "hidden_size": 8},
         "image_token_id": 10, "spatial_merge_size": 2, "tie_word_embeddings": False}
    t = []
    for nm, x in hf_tensors(g, arch, tc):
        if ".mlp.experts." in nm:
            continue
        t.append((nm if nm == "lm_head.weight" else nm.replace("model.", "model.language_model.", 1), x))
    for nm, info in g.tensors.items():
        if nm.endswith("ffn_gate_exps.weight"):
            il = nm.split(".")[1]
            gate = info.to_numpy().astype(np.float32)
            up = g.tensors[nm.replace("gate", "up")].to_numpy().astype(np.float32)
            down = g.tensors[nm.replace("gate", "down")].to_numpy().astype(np.float32)
            p = "model.language_model.layers.%s.mlp.experts." % il
            t += [(p + "gate_up_proj", np.concatenate([gate, up], axis=1)), (p + "down_proj", down)]
    t += [("model.vision_tower.patch_conv.weight", np.ones((8, 3, 2, 2))),
          ("model.multi_modal_projector.linear_1.weight", np.ones((8, 8)))]
    tok = make_tokenizer(tc["vocab_size"], False, False)
    write_checkpoint(os.path.join(out_dir, name), c, t, "F32", 2, tok)
    fp8_pair(out_dir, name + "_fp8", c, t, tok, projection)


def e4m3_values():
    """The 256 float8 e4m3fn values by code (S.EEEE.MMM, bias 7, no infinities, S.1111.111 NaN)."""
    b = np.arange(256)
    e, m = (b >> 3) & 15, b & 7
    mag = np.where(e == 0, m * 2.0 ** -9, (8 + m) * 2.0 ** (e - 10.0))
    mag[(e == 15) & (m == 7)] = np.nan
    return np.where(b & 0x80, -mag, mag).astype(np.float32)


E4M3 = e4m3_values()


def to_e4m3(x):
    """Nearest e4m3fn code of each value (|x| <= 448)."""
    pos = E4M3[:127].astype(np.float64)  # codes 0x00 .. 0x7e, increasing
    a = np.abs(x)
    i = np.clip(np.searchsorted(pos, a), 1, 126)
    i = np.where(a - pos[i - 1] <= pos[i] - a, i - 1, i)
    return (i | np.where(x < 0, 0x80, 0)).astype(np.uint8)


def fp8_scale(x):
    m = float(np.max(np.abs(x)))
    return np.float32(m / 448.0 if m > 0 else 1.0)


def fp8_pair(out_dir, name, config, tensors, tok, quantize, block=None):
    """Writes <name> (the `quantize` tensors as FP8 codes with weight_scale_inv) and
    <name>_dequant (their FP8 values x scale as float32, no quantization_config)."""
    q, d = [], []
    for nm, x in tensors:
        if not quantize(nm, x):
            q.append((nm, x))
            d.append((nm, x))
            continue
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 3:  # fused experts: one scale per expert
            s = np.array([fp8_scale(x[e]) for e in range(x.shape[0])], np.float32)
            codes = to_e4m3(x / s[:, None, None])
            deq = E4M3[codes] * s[:, None, None]
            sc = s.reshape(-1, 1, 1)
        elif block is None:
            sc = fp8_scale(x)
            codes = to_e4m3(x / sc)
            deq = E4M3[codes] * sc
            sc = np.array(sc, np.float32)  # shape [], as per-tensor scales are saved
        else:
            br, bc = block
            gr, gc = -(-x.shape[0] // br), -(-x.shape[1] // bc)
            sc = np.array([[fp8_scale(x[i * br:(i + 1) * br, j * bc:(j + 1) * bc])
                            for j in range(gc)] for i in range(gr)], np.float32)
            full = np.repeat(np.repeat(sc, br, 0), bc, 1)[:x.shape[0], :x.shape[1]]
            codes = to_e4m3(x / full)
            deq = E4M3[codes] * full
        assert deq.dtype == np.float32
        q += [(nm, codes, "F8_E4M3"), (nm + "_scale_inv", sc)]
        if nm.endswith("q_proj.weight") or nm.endswith("gate_up_proj"):
            q.append((nm.replace(".weight", "") + (".activation_scale" if nm.endswith(".weight")
                                                   else "_activation_scale"),
                      np.ones(x.shape[0] if x.ndim == 3 else (), np.float32)))
        d.append((nm, deq))
    qc = dict(config)
    qc["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "static",
                                 "weight_block_size": list(block) if block else None}
    write_checkpoint(os.path.join(out_dir, name), qc, q, "F32", 2, tok)
    write_checkpoint(os.path.join(out_dir, name + "_dequant"), config, d, "F32", 2, tok)


def projection(nm, x):
    return ".layers." in nm and (nm.endswith("_proj.weight") or nm.endswith("_proj")
                                 or nm.endswith("wq_b.weight") or nm.endswith("wk.weight"))


def main(out, fix):
    f = lambda n: os.path.join(fix, n)  # noqa: E731
    hunyuan_from_fixture(out, "hunyuan", f("hunyuan-moe/tiny-hunyuan-moe-f32.gguf"))
    hunyuan_tiktoken(out, "hunyuan_tiktoken", "hunyuan")
    glm_moe_dsa_from_fixture(out, "glm_moe_dsa", f("mla/tiny-deepseek-v3.gguf"))
    mistral4_from_fixture(out, "mistral3", f("mla/tiny-deepseek-v2.gguf"))
