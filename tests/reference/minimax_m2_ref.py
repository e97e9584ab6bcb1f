"""Reference forward pass of minimax-m2 GGUF files (MiniMax-M2, M2.1, M2.5), float64, written
plainly from Hugging Face's modeling_minimax_m2.py and independent of the engine.

    /usr/bin/python3 tests/reference/minimax_m2_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

Facts, from modeling_minimax_m2.py (MiniMaxM2Attention, MiniMaxM2TopKRouter,
MiniMaxM2SparseMoeBlock, MiniMaxM2DecoderLayer) with llama.cpp's GGUF names and keys
(llama-arch.cpp LLM_ARCH_MINIMAX_M2, convert_hf_to_gguf.py MiniMaxM2Model):
- layer: x += o_proj(attn(input_layernorm(x))); x += moe(post_attention_layernorm(x))
  (GGUF: attn_norm, attn_output, ffn_norm);
- attention: q = q_norm(q_proj(h)), k = k_norm(k_proj(h)), each an RMSNorm over the whole
  projected row (q_norm has num_attention_heads * head_dim weights, k_norm
  num_key_value_heads * head_dim), applied BEFORE the row is split into heads; v = v_proj(h);
  no biases; then rotate_half rope (GGUF: NEOX, pairs (i, i + n/2)) on the first rotary_dim
  (rope.dimension_count) dims of each head, pos * base^(-2i/n), the rest untouched; GQA;
  softmax scale head_dim^-0.5;
- MoE in every layer, no shared expert: p = sigmoid(gate(h)); the top num_experts_per_tok of
  p + e_score_correction_bias (GGUF exp_probs_b; ties here to the lower id) are chosen and
  weighed by p alone, renormalized to sum 1; each expert down(silu(w1 h) * (w3 h))
  (GGUF ffn_gate_exps = w1, ffn_up_exps = w3, ffn_down_exps = w2);
- expert_gating_func 1 would mean softmax instead of sigmoid; absent or 2 sigmoid.
Shapes are checked as the file is read; a bad one raises naming the tensor.
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


def rope_partial(v, pos, n, base):
    """HF's apply_rotary_pos_emb on the first n dims of one head: v*cos + rotate_half(v)*sin,
    with cos/sin of pos * inv_freq repeated twice (emb = cat(freqs, freqs))."""
    inv_freq = np.array([base ** (-2.0 * i / n) for i in range(n // 2)])
    freqs = pos * inv_freq
    emb = np.concatenate([freqs, freqs])
    rot = v[:n] * np.cos(emb) + rotate_half(v[:n]) * np.sin(emb)
    return np.concatenate([rot, v[n:]])


class Model:
    pass


def load(path):
    g = gguf_np.read_gguf(path)
    assert g.get("general.architecture") == "minimax-m2"
    m = Model()

    def key(k, default=None):
        v = g.get("minimax-m2." + k)
        return default if v is None else v

    def w(name, shape, required=True):
        """The tensor as float64, numpy shape = reversed ggml ne; raises naming a bad one."""
        t = g.tensors.get(name)
        if t is None:
            if required:
                raise KeyError("missing tensor " + name)
            return None
        a = t.to_numpy().astype(np.float64)
        if tuple(a.shape) != tuple(shape):
            raise ValueError("tensor %s has shape %s, expected %s" % (name, a.shape, shape))
        return a

    m.n_layer = key("block_count")
    m.E = key("embedding_length")
    m.H = key("attention.head_count")
    m.Hkv = key("attention.head_count_kv", m.H)
    m.hd = key("attention.key_length", m.E // m.H)
    m.rot = key("rope.dimension_count", m.hd)
    if m.rot > m.hd or m.rot % 2:
        raise ValueError("rope.dimension_count %d does not fit head dim %d" % (m.rot, m.hd))
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.base = float(key("rope.freq_base", 10000.0))
    m.N = key("expert_count")
    m.k = key("expert_used_count")
    m.F = key("expert_feed_forward_length", key("feed_forward_length"))
    m.sigmoid = key("expert_gating_func", 2) == 2
    tok = g.tensors["token_embd.weight"]
    m.V = tok.ne[1]
    m.tok = w("token_embd.weight", (m.V, m.E))
    m.out_norm = w("output_norm.weight", (m.E,))
    m.out = w("output.weight", (m.V, m.E), False)
    if m.out is None:
        m.out = m.tok
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
        L.q_norm = w(p + "attn_q_norm.weight", (Q,))
        L.k_norm = w(p + "attn_k_norm.weight", (KV,))
        L.ffn_norm = w(p + "ffn_norm.weight", (m.E,))
        L.router = w(p + "ffn_gate_inp.weight", (m.N, m.E))
        L.bias = w(p + "exp_probs_b.bias", (m.N,))
        L.gate_e = w(p + "ffn_gate_exps.weight", (m.N, m.F, m.E))
        L.up_e = w(p + "ffn_up_exps.weight", (m.N, m.F, m.E))
        L.down_e = w(p + "ffn_down_exps.weight", (m.N, m.E, m.F))
        m.layers.append(L)
    return m


def route(m, L, x):
    z = L.router @ x
    if m.sigmoid:
        p = 1.0 / (1.0 + np.exp(-z))
    else:
        e = np.exp(z - np.max(z))
        p = e / np.sum(e)
    s = p + L.bias
    ids = sorted(range(m.N), key=lambda e: (-s[e], e))[:m.k]
    wts = np.array([p[e] for e in ids])
    return ids, wts / np.sum(wts)


def forward(m, tokens):
    n = len(tokens)
    hd, group = m.hd, m.H // m.Hkv
    scale = hd ** -0.5
    x = [m.tok[t].copy() for t in tokens]
    for L in m.layers:
        qs, ks, vs = [], [], []
        for pos in range(n):
            h = rms_norm(x[pos], L.attn_norm, m.eps)
            q = rms_norm(L.wq @ h, L.q_norm, m.eps)  # the whole row, all heads at once
            k = rms_norm(L.wk @ h, L.k_norm, m.eps)
            v = L.wv @ h
            qs.append([rope_partial(q[j * hd:(j + 1) * hd], pos, m.rot, m.base)
                       for j in range(m.H)])
            ks.append([rope_partial(k[j * hd:(j + 1) * hd], pos, m.rot, m.base)
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
            h = rms_norm(xa, L.ffn_norm, m.eps)
            ids, wts = route(m, L, h)
            y = sum(wt * (L.down_e[e] @ (silu(L.gate_e[e] @ h) * (L.up_e[e] @ h)))
                    for e, wt in zip(ids, wts))
            new_x.append(xa + y)
        x = new_x
    return np.array([m.out @ rms_norm(v, m.out_norm, m.eps) for v in x])


def main(argv):
    return gguf_np.logits_main(argv, load, forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
