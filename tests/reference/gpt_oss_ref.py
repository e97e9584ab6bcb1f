"""Reference forward pass of gpt-oss GGUF files (float64, written plainly), independent of the
engine: every weight decoded from the file's bytes (MXFP4 experts by types_np.py), attention
over explicit key lists per head with the sink logit appended to the softmax, the sliding
window as an explicit range of positions, the router, experts and clamped SwiGLU per token.

    /usr/bin/python3 tests/reference/gpt_oss_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

Facts (llama.cpp's gpt-oss: llama-arch.cpp LLM_ARCH_OPENAI_MOE, models/openai-moe-iswa.cpp,
llama-graph.cpp build_moe_ffn, ggml's soft_max_ext with sinks and swiglu_oai; Hugging Face's
modeling_gpt_oss.py says the same):
- x += W_o attn(rms_norm(x) ...) + b_o, q / k / v with biases, NEOX rope (the two halves of each
  head rotate together) over the whole head, scale 1/sqrt(head_dim);
- per head h a learned logit s_h (attn_sinks) joins the softmax over the scores and is then
  dropped: p_j = exp(a_j) / (sum_i exp(a_i) + exp(s_h)); s_h is not scaled;
- layers 0, 2, 4, ... attend to the last `sliding_window` positions (key j is masked for
  query i when i - j >= window); the odd layers to all;
- x += MoE(rms_norm(x, post_attention_norm)): logits z = W_r h + b_r, the k largest chosen,
  weights softmax(z over the chosen), expert e: down_e(act(gate_e h + bg_e, up_e h + bu_e))
  + bd_e, act(g, u) = min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1);
- YaRN (rope.scaling.type = yarn) as llama.cpp's rope_yarn: pair i of n dims turns at
  base^(-2i/n) blended with base^(-2i/n) / factor by the ramp 1 - clip((i - low) / (high -
  low), 0, 1), low / high the floor / ceil of n ln(orig_ctx / (2 pi beta)) / (2 ln base) for
  beta 32 / 1, clamped to [0, n-1]; cos and sin times 1 + 0.1 ln(factor).
"""

import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np  # noqa: E402

ALPHA = 1.702
LIMIT = 7.0


def rms_norm(x, w, eps):
    return x / math.sqrt(float(np.mean(x * x)) + eps) * w


class Model:
    pass


def load(path):
    g = gguf_np.read_gguf(path)
    assert g.get("general.architecture") == "gpt-oss"
    m = Model()

    def key(k, default=None):
        v = g.get("gpt-oss." + k)
        if v is None:
            if default is None:
                raise KeyError("gpt-oss." + k)
            return default
        return v

    def w(name):
        t = g.tensors.get(name)
        if t is None:
            raise KeyError(name)
        return t.to_numpy().astype(np.float64)

    m.n_layer = key("block_count")
    m.E = key("embedding_length")
    m.H = key("attention.head_count")
    m.Hkv = key("attention.head_count_kv")
    m.hd = key("attention.key_length")
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.base = float(key("rope.freq_base"))
    m.window = key("attention.sliding_window")
    m.N = key("expert_count")
    m.k = key("expert_used_count")
    m.yarn = key("rope.scaling.type", "none") == "yarn"
    if m.yarn:
        m.factor = float(key("rope.scaling.factor"))
        m.orig = key("rope.scaling.original_context_length")
    m.tok = w("token_embd.weight")
    m.out_norm = w("output_norm.weight")
    m.out = w("output.weight")
    m.layers = []
    for i in range(m.n_layer):
        p = "blk.%d." % i
        L = Model()
        L.attn_norm = w(p + "attn_norm.weight")
        L.wq, L.bq = w(p + "attn_q.weight"), w(p + "attn_q.bias")
        L.wk, L.bk = w(p + "attn_k.weight"), w(p + "attn_k.bias")
        L.wv, L.bv = w(p + "attn_v.weight"), w(p + "attn_v.bias")
        L.wo, L.bo = w(p + "attn_output.weight"), w(p + "attn_output.bias")
        L.sinks = w(p + "attn_sinks.weight")
        L.ffn_norm = w(p + "post_attention_norm.weight")
        L.router, L.router_b = w(p + "ffn_gate_inp.weight"), w(p + "ffn_gate_inp.bias")
        L.gate, L.gate_b = w(p + "ffn_gate_exps.weight"), w(p + "ffn_gate_exps.bias")
        L.up, L.up_b = w(p + "ffn_up_exps.weight"), w(p + "ffn_up_exps.bias")
        L.down, L.down_b = w(p + "ffn_down_exps.weight"), w(p + "ffn_down_exps.bias")
        L.window = m.window if i % 2 == 0 else 0
        m.layers.append(L)
    return m


def rope_cos_sin(m, pos):
    """cos and sin (scaled) of each pair of a head at position pos."""
    n = m.hd
    half = n // 2
    theta = []
    for i in range(half):
        extrap = m.base ** (-2.0 * i / n)
        f = extrap
        if m.yarn:
            def corr(beta):
                return n * math.log(m.orig / (beta * 2 * math.pi)) / (2 * math.log(m.base))
            low = max(0.0, math.floor(corr(32.0)))
            high = min(n - 1.0, math.ceil(corr(1.0)))
            y = (i - low) / max(0.001, high - low)
            keep = 1.0 - min(1.0, max(0.0, y))  # 1: the original frequency
            f = extrap / m.factor * (1.0 - keep) + extrap * keep
        theta.append(pos * f)
    theta = np.array(theta)
    mag = 1.0 + 0.1 * math.log(m.factor) if m.yarn else 1.0
    return np.cos(theta) * mag, np.sin(theta) * mag


def rope_neox(v, cs):
    c, s = cs
    half = len(v) // 2
    a, b = v[:half], v[half:]
    return np.concatenate([a * c - b * s, a * s + b * c])


def act(g, u):
    g = np.minimum(g, LIMIT)
    u = np.clip(u, -LIMIT, LIMIT)
    return g / (1.0 + np.exp(-ALPHA * g)) * (u + 1.0)


def moe(m, L, h):
    z = L.router @ h + L.router_b
    ids = sorted(range(m.N), key=lambda e: (-z[e], e))[:m.k]
    sel = np.array([z[e] for e in ids])
    wts = np.exp(sel - np.max(sel))
    wts /= np.sum(wts)
    y = np.zeros(m.E)
    for e, wt in zip(ids, wts):
        hidden = act(L.gate[e] @ h + L.gate_b[e], L.up[e] @ h + L.up_b[e])
        y += wt * (L.down[e] @ hidden + L.down_b[e])
    return y


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
            cs = rope_cos_sin(m, pos)
            qs.append([rope_neox(q[i * hd:(i + 1) * hd], cs) for i in range(m.H)])
            ks.append([rope_neox(k[i * hd:(i + 1) * hd], cs) for i in range(m.Hkv)])
            vs.append([v[i * hd:(i + 1) * hd] for i in range(m.Hkv)])
        new_x = []
        for pos in range(n):
            first = max(0, pos - L.window + 1) if L.window else 0
            keys = list(range(first, pos + 1))
            heads = []
            for hh in range(m.H):
                kv = hh // group
                a = np.array([qs[pos][hh] @ ks[j][kv] * scale for j in keys] + [L.sinks[hh]])
                p = np.exp(a - np.max(a))
                p /= np.sum(p)
                heads.append(sum(p[i] * vs[j][kv] for i, j in enumerate(keys)))
            xa = x[pos] + L.wo @ np.concatenate(heads) + L.bo
            new_x.append(xa + moe(m, L, rms_norm(xa, L.ffn_norm, m.eps)))
        x = new_x
    return np.array([m.out @ rms_norm(v, m.out_norm, m.eps) for v in x])


def main(argv):
    return gguf_np.logits_main(argv, load, forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
