"""Reference forward pass of glm4moe GGUF files (GLM-4.5, GLM-4.5-Air), float64, written
plainly and independent of the engine.

    /usr/bin/python3 tests/reference/glm4moe_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

Facts, from llama.cpp (llama-arch.cpp's GLM4_MOE tensor names, models/glm4-moe.cpp,
llama-graph.cpp build_moe_ffn, ggml's rope_neox with n_dims < head size) and Hugging Face's
modeling_glm4_moe.py:
- layer: x += Wo attn(rmsnorm(x, attn_norm)); x += FFN(rmsnorm(x, post_attention_norm));
- attention: q/k/v projections plus biases; when the file has attn_q_norm / attn_k_norm, an
  RMSNorm over each head (weights of head_dim); then NEOX rope on the first
  rope.dimension_count dims of each head only, pairs (i, i + n/2) turning by
  pos * base^(-2i/n), the remaining dims untouched; GQA; scale 1/sqrt(head_dim);
- FFN: dense SwiGLU in the first leading_dense_block_count layers; otherwise routed experts
  chosen by sigmoid(z) + exp_probs_b (top-k, ties to the lower id), weighed by sigmoid(z)
  alone, renormalized when expert_weights_norm, times expert_weights_scale; plus the shared
  expert (SwiGLU of width expert_shared_count * expert_feed_forward_length);
- expert_gating_func: absent or 0 means sigmoid for this family (1 softmax);
- block_count includes nextn_predict_layers trailing next-token-prediction blocks, which the
  main model does not run.
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


def rope_neox_partial(v, pos, n, base):
    """Rotates pairs (i, i + n/2) of the first n dims of v; v[n:] unchanged."""
    out = v.copy()
    half = n // 2
    for i in range(half):
        th = pos * base ** (-2.0 * i / n)
        c, s = math.cos(th), math.sin(th)
        a, b = v[i], v[i + half]
        out[i] = a * c - b * s
        out[i + half] = a * s + b * c
    return out


class Model:
    pass


def load(path):
    g = gguf_np.read_gguf(path)
    assert g.get("general.architecture") == "glm4moe"
    m = Model()

    def key(k, default=None):
        v = g.get("glm4moe." + k)
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

    m.nextn = key("nextn_predict_layers", 0)
    m.n_layer = key("block_count") - m.nextn
    m.E = key("embedding_length")
    m.H = key("attention.head_count")
    m.Hkv = key("attention.head_count_kv", m.H)
    m.hd = key("attention.key_length", m.E // m.H)
    if key("attention.value_length", m.hd) != m.hd:
        raise ValueError("inconsistent head dimensions: value_length != key_length")
    m.rot = key("rope.dimension_count", m.hd)
    if m.rot > m.hd or m.rot % 2:
        raise ValueError("rope.dimension_count %d does not fit head dim %d" % (m.rot, m.hd))
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.base = float(key("rope.freq_base", 10000.0))
    m.lead = key("leading_dense_block_count", 0)
    m.N = key("expert_count")
    m.k = key("expert_used_count")
    m.F = key("expert_feed_forward_length")
    m.Fd = key("feed_forward_length")
    m.Fs = key("expert_shared_count") * m.F
    m.sigmoid = key("expert_gating_func", 0) in (0, 2)
    m.norm = bool(key("expert_weights_norm", False))
    m.scale = float(key("expert_weights_scale", 1.0)) or 1.0
    tok = g.tensors["token_embd.weight"]
    m.V = tok.ne[1]
    m.tok = w("token_embd.weight", (m.V, m.E))
    m.out_norm = w("output_norm.weight", (m.E,))
    m.out = w("output.weight", (m.V, m.E), False)
    if m.out is None:
        m.out = m.tok
    m.qk_norm = "blk.0.attn_q_norm.weight" in g.tensors
    Q, KV = m.H * m.hd, m.Hkv * m.hd
    m.layers = []
    for i in range(m.n_layer):
        p = "blk.%d." % i
        L = Model()
        L.attn_norm = w(p + "attn_norm.weight", (m.E,))
        L.wq, L.bq = w(p + "attn_q.weight", (Q, m.E)), w(p + "attn_q.bias", (Q,))
        L.wk, L.bk = w(p + "attn_k.weight", (KV, m.E)), w(p + "attn_k.bias", (KV,))
        L.wv, L.bv = w(p + "attn_v.weight", (KV, m.E)), w(p + "attn_v.bias", (KV,))
        L.wo = w(p + "attn_output.weight", (m.E, Q))
        if m.qk_norm:
            L.q_norm = w(p + "attn_q_norm.weight", (m.hd,))
            L.k_norm = w(p + "attn_k_norm.weight", (m.hd,))
        L.ffn_norm = w(p + "post_attention_norm.weight", (m.E,))
        if i < m.lead:
            L.dense = (w(p + "ffn_gate.weight", (m.Fd, m.E)), w(p + "ffn_up.weight", (m.Fd, m.E)),
                       w(p + "ffn_down.weight", (m.E, m.Fd)))
        else:
            L.dense = None
            L.router = w(p + "ffn_gate_inp.weight", (m.N, m.E))
            L.bias = w(p + "exp_probs_b.bias", (m.N,))
            L.gate_e = w(p + "ffn_gate_exps.weight", (m.N, m.F, m.E))
            L.up_e = w(p + "ffn_up_exps.weight", (m.N, m.F, m.E))
            L.down_e = w(p + "ffn_down_exps.weight", (m.N, m.E, m.F))
            L.shexp = None
            if m.Fs > 0:
                L.shexp = (w(p + "ffn_gate_shexp.weight", (m.Fs, m.E)),
                           w(p + "ffn_up_shexp.weight", (m.Fs, m.E)),
                           w(p + "ffn_down_shexp.weight", (m.E, m.Fs)))
        m.layers.append(L)
    return m


def swiglu_ffn(gate, up, down, x):
    return down @ (silu(gate @ x) * (up @ x))


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
    if m.norm:
        wts = wts / np.sum(wts)
    return ids, wts * m.scale


def forward(m, tokens):
    n = len(tokens)
    hd, group = m.hd, m.H // m.Hkv
    scale = 1.0 / math.sqrt(hd)
    x = [m.tok[t].copy() for t in tokens]
    for L in m.layers:
        qs, ks, vs = [], [], []
        for pos in range(n):
            h = rms_norm(x[pos], L.attn_norm, m.eps)
            q, k, v = L.wq @ h + L.bq, L.wk @ h + L.bk, L.wv @ h + L.bv
            qh, kh = [], []
            for hh in range(m.H):
                qv = q[hh * hd:(hh + 1) * hd]
                if m.qk_norm:
                    qv = rms_norm(qv, L.q_norm, m.eps)
                qh.append(rope_neox_partial(qv, pos, m.rot, m.base))
            for hh in range(m.Hkv):
                kv = k[hh * hd:(hh + 1) * hd]
                if m.qk_norm:
                    kv = rms_norm(kv, L.k_norm, m.eps)
                kh.append(rope_neox_partial(kv, pos, m.rot, m.base))
            qs.append(qh)
            ks.append(kh)
            vs.append([v[hh * hd:(hh + 1) * hd] for hh in range(m.Hkv)])
        new_x = []
        for pos in range(n):
            heads = []
            for hh in range(m.H):
                g = hh // group
                sc = np.array([qs[pos][hh] @ ks[j][g] * scale for j in range(pos + 1)])
                p = np.exp(sc - np.max(sc))
                p /= np.sum(p)
                heads.append(sum(p[j] * vs[j][g] for j in range(pos + 1)))
            xa = x[pos] + L.wo @ np.concatenate(heads)
            h = rms_norm(xa, L.ffn_norm, m.eps)
            if L.dense is not None:
                y = swiglu_ffn(*L.dense, h)
            else:
                ids, wts = route(m, L, h)
                y = sum(wt * swiglu_ffn(L.gate_e[e], L.up_e[e], L.down_e[e], h)
                        for e, wt in zip(ids, wts))
                if L.shexp is not None:
                    y = y + swiglu_ffn(*L.shexp, h)
            new_x.append(xa + y)
        x = new_x
    return np.array([m.out @ rms_norm(v, m.out_norm, m.eps) for v in x])


def main(argv):
    return gguf_np.logits_main(argv, load, forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
