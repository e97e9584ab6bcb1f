"""Reference forward pass of qwen3vlmoe GGUF files (the language model of Qwen3-VL-30B-A3B /
235B-A22B as llama.cpp's converter writes it), float64, written plainly from Hugging Face's
modeling_qwen3_vl_moe.py (Qwen3VLMoeTextModel) and independent of the engine.

    /usr/bin/python3 tests/reference/qwen3vlmoe_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

Facts, from modeling_qwen3_vl_moe.py with llama.cpp's GGUF names and keys (llama-arch.cpp
LLM_ARCH_QWEN3VLMOE, convert_hf_to_gguf.py):
- layer: x += o_proj(attn(input_layernorm(x))); x += mlp(post_attention_layernorm(x))
  (GGUF: attn_norm, attn_output, ffn_norm); final norm, lm_head (output_norm, output);
- attention: q_proj / k_proj / v_proj without biases; q_norm / k_norm RMSNorms over each
  head's head_dim values; rotary from Qwen3VLMoeTextRotaryEmbedding: inv_freq =
  base^(-2i/d), one angle per (component, frequency) from the three position components
  (t, h, w); apply_interleaved_mrope keeps t's angle except at frequencies 1, 4, ... below
  3 * mrope_section[1] (h) and 2, 5, ... below 3 * mrope_section[2] (w); emb = cat(f, f);
  q * cos + rotate_half(q) * sin; GQA; softmax scale head_dim^-0.5. Text-only input: the
  position ids are arange(n) expanded to the three components (get_rope_index without
  image / video grids), so every frequency's angle is p * inv_freq;
- MLP (Qwen3VLMoeTextSparseMoeBlock, every layer: decoder_sparse_step 1, mlp_only_layers
  empty): p = softmax(gate(h)), the top num_experts_per_tok (ties here to the lower id),
  divided by their sum (always: the VL block has no norm_topk_prob switch); each expert
  from the fused gate_up_proj [E, hidden, 2F] (gate the first F columns, up the rest;
  GGUF ffn_gate_exps / ffn_up_exps) and down_proj [E, F, hidden] (ffn_down_exps):
  (up * silu(gate)) @ down;
- deepstack: the vision tower's features are added to the first len(deepstack_visual_embeds)
  layers' outputs at image positions only (visual_pos_masks): nothing for text.
GGUF: rope.dimension_sections holds mrope_section + [0]; n_deepstack_layers is the vision
tower's count. Shapes are checked as the file is read; a bad one raises naming the tensor.

ggml_imrope() is llama.cpp's rotation for comparison: ggml_rope_multi with
GGML_ROPE_TYPE_IMROPE, the 4 position components llama.cpp gives a text token
(llama-graph.cpp / ik_llama.cpp: [p, p, p, 0]) and ggml's sector rule (ggml.c
ggml_mrope_cache_init), where a frequency outside the t / h / w interleave takes the 4th
component (0 for text: not rotated).
"""

import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np  # noqa: E402


def rms_norm(x, w, eps):
    return x / math.sqrt(float(np.mean(x * x)) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotate_half(v):
    half = len(v) // 2
    return np.concatenate([-v[half:], v[:half]])


def mrope_angles(pos3, base, d, sections):
    """HF's rotary angles for one token: apply_interleaved_mrope over the angles of the three
    position components (t, h, w); sections = mrope_section (3 entries)."""
    inv_freq = np.array([base ** (-2.0 * i / d) for i in range(d // 2)])
    freqs = [p * inv_freq for p in pos3]
    out = freqs[0].copy()
    for comp, offset in ((1, 1), (2, 2)):
        idx = slice(offset, sections[comp] * 3, 3)  # clamped to the length, as torch's
        out[idx] = freqs[comp][idx]
    return out


def rope(v, pos3, base, sections):
    """apply_rotary_pos_emb on one head: v*cos + rotate_half(v)*sin, emb = cat(f, f)."""
    f = mrope_angles(pos3, base, len(v), sections)
    emb = np.concatenate([f, f])
    return v * np.cos(emb) + rotate_half(v) * np.sin(emb)


def ggml_imrope(v, pos4, base, sections4):
    """ggml's IMROPE rotation of one head (pairs (i, i + d/2)) for positions (t, h, w, e)."""
    d = len(v)
    half = d // 2
    total = sum(sections4)
    out = v.copy()
    for i in range(half):
        sector = i % total
        if sector % 3 == 1 and sector < 3 * sections4[1]:
            p = pos4[1]
        elif sector % 3 == 2 and sector < 3 * sections4[2]:
            p = pos4[2]
        elif sector % 3 == 0 and sector < 3 * sections4[0]:
            p = pos4[0]
        else:
            p = pos4[3]
        theta = p * base ** (-2.0 * i / d)
        c, s = math.cos(theta), math.sin(theta)
        out[i] = v[i] * c - v[i + half] * s
        out[i + half] = v[i] * s + v[i + half] * c
    return out


class Model:
    pass


def load(path):
    g = gguf_np.read_gguf(path)
    assert g.get("general.architecture") == "qwen3vlmoe"
    m = Model()

    def key(k, default=None):
        v = g.get("qwen3vlmoe." + k)
        if v is None and default is None:
            raise KeyError("qwen3vlmoe." + k)
        return default if v is None else v

    def w(name, shape):
        t = g.tensors.get(name)
        if t is None:
            raise KeyError("missing tensor " + name)
        a = t.to_numpy().astype(np.float64)
        if tuple(a.shape) != tuple(shape):
            raise ValueError("tensor %s has shape %s, expected %s" % (name, a.shape, shape))
        return a

    m.n_layer = key("block_count")
    m.E = key("embedding_length")
    m.H = key("attention.head_count")
    m.Hkv = key("attention.head_count_kv", m.H)
    m.hd = key("attention.key_length", m.E // m.H)
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.base = float(key("rope.freq_base", 10000.0))
    m.sections = [int(s) for s in key("rope.dimension_sections")]
    if len(m.sections) != 4 or sum(m.sections) > m.hd // 2:
        raise ValueError("bad rope.dimension_sections %s" % m.sections)
    m.N = key("expert_count")
    m.k = key("expert_used_count")
    m.Fe = key("expert_feed_forward_length")
    m.V = g.tensors["token_embd.weight"].ne[1]
    m.tok = w("token_embd.weight", (m.V, m.E))
    m.out_norm = w("output_norm.weight", (m.E,))
    m.out = w("output.weight", (m.V, m.E))
    Q, KV = m.H * m.hd, m.Hkv * m.hd
    m.layers = []
    for i in range(m.n_layer):
        p = "blk.%d." % i
        L = Model()
        L.attn_norm = w(p + "attn_norm.weight", (m.E,))
        L.wq = w(p + "attn_q.weight", (Q, m.E))
        L.wk = w(p + "attn_k.weight", (KV, m.E))
        L.wv = w(p + "attn_v.weight", (KV, m.E))
        L.wo = w(p + "attn_output.weight", (m.E, Q))
        L.q_norm = w(p + "attn_q_norm.weight", (m.hd,))
        L.k_norm = w(p + "attn_k_norm.weight", (m.hd,))
        L.ffn_norm = w(p + "ffn_norm.weight", (m.E,))
        L.router = w(p + "ffn_gate_inp.weight", (m.N, m.E))
        # HF's fused gate_up_proj[e] is (hidden, 2F): gate = h @ [:, :F], up = h @ [:, F:];
        # the GGUF matrices are their transposes, (F, hidden) each.
        L.gate_up = np.concatenate([w(p + "ffn_gate_exps.weight", (m.N, m.Fe, m.E)),
                                    w(p + "ffn_up_exps.weight", (m.N, m.Fe, m.E))],
                                   axis=1).transpose(0, 2, 1)
        L.down = w(p + "ffn_down_exps.weight", (m.N, m.E, m.Fe)).transpose(0, 2, 1)
        m.layers.append(L)
    return m


def moe(m, L, h):
    z = L.router @ h
    e = np.exp(z - np.max(z))
    p = e / np.sum(e)
    ids = sorted(range(m.N), key=lambda x: (-p[x], x))[:m.k]
    wts = np.array([p[x] for x in ids])
    wts = wts / np.sum(wts)
    y = np.zeros(m.E)
    for x, wt in zip(ids, wts):
        gu = h @ L.gate_up[x]
        gate, up = gu[:m.Fe], gu[m.Fe:]
        y += wt * ((up * silu(gate)) @ L.down[x])
    return y


def forward(m, tokens, rotate=None):
    """Logits of every position; rotate(v, pos) replaces HF's rotary (comparisons only)."""
    if rotate is None:
        def rotate(v, pos):
            return rope(v, (pos, pos, pos), m.base, m.sections[:3])
    n = len(tokens)
    hd, group = m.hd, m.H // m.Hkv
    scale = hd ** -0.5
    x = [m.tok[t].copy() for t in tokens]
    for L in m.layers:
        qs, ks, vs = [], [], []
        for pos in range(n):
            h = rms_norm(x[pos], L.attn_norm, m.eps)
            q, k, v = L.wq @ h, L.wk @ h, L.wv @ h
            qs.append([rotate(rms_norm(q[j * hd:(j + 1) * hd], L.q_norm, m.eps), pos)
                       for j in range(m.H)])
            ks.append([rotate(rms_norm(k[j * hd:(j + 1) * hd], L.k_norm, m.eps), pos)
                       for j in range(m.Hkv)])
            vs.append([v[j * hd:(j + 1) * hd] for j in range(m.Hkv)])
        new_x = []
        for pos in range(n):
            heads = []
            for j in range(m.H):
                g = j // group
                sc = np.array([qs[pos][j] @ ks[t][g] * scale for t in range(pos + 1)])
                p = np.exp(sc - np.max(sc))
                p /= np.sum(p)
                heads.append(sum(p[t] * vs[t][g] for t in range(pos + 1)))
            xa = x[pos] + L.wo @ np.concatenate(heads)
            new_x.append(xa + moe(m, L, rms_norm(xa, L.ffn_norm, m.eps)))
        x = new_x
    return np.array([m.out @ rms_norm(v, m.out_norm, m.eps) for v in x])


def main(argv):
    return gguf_np.logits_main(argv, load, forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
