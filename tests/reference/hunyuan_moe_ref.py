"""Reference forward pass of hunyuan-moe GGUF files (Tencent Hunyuan-A13B, 80B-A13B), float64,
written plainly from the released modeling_hunyuan.py (tencent/Hunyuan-A13B-Instruct) and
transformers' modeling_hunyuan_v1_moe.py, independent of the engine.

    /usr/bin/python3 tests/reference/hunyuan_moe_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

Facts, with llama.cpp's GGUF names and keys (llama-arch.cpp LLM_ARCH_HUNYUAN_MOE,
convert_hf_to_gguf.py HunYuanMoEModel):
- layer: x += o_proj(attn(input_layernorm(x))); x += mlp(post_attention_layernorm(x))
  (GGUF: attn_norm, attn_output, ffn_norm);
- attention: q, k, v projections (biases when attention_bias: none in the release); HF's
  rotate_half rope (GGUF: NEOX, pairs (i, i + d/2)) on the whole head, angle
  pos * base^(-2i/d); the NTK alpha scaling (base * alpha^(d/(d-2))) is already in the file's
  rope.freq_base, as llama.cpp's converter folds it; then query_layernorm / key_layernorm, an
  RMSNorm per head (head_dim weights, rms_norm_eps), AFTER the rope as the released
  modeling_hunyuan.py orders them (transformers' port norms before: rope_first=False here);
  GQA; scale head_dim^-0.5;
- every layer is MoE (moe_layer_num_skipped 0): p = softmax(gate.wg(h)) over all experts
  (float32 router in HF), the top moe_topk chosen (ties to the lower id here), weighed by p
  divided by max(sum, eps) (topkgating's gates / gates_s), each expert
  down(silu(gate h) * (up h)); plus the shared_mlp (use_mixed_mlp_moe) of
  intermediate_size (GGUF expert_shared_feed_forward_length), ungated. HF's expert capacity
  (tokens beyond max(k, k T / E) per expert dropped) is not modelled: llama.cpp has none;
- the output projection is token_embd when output.weight is absent (tie_word_embeddings).
Shapes are checked as the file is read; a bad one raises naming the tensor.
"""

import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np  # noqa: E402

ARCH = "hunyuan-moe"


def rms_norm(x, w, eps):
    return x / math.sqrt(float(np.mean(x * x)) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotate_half(v):
    h = len(v) // 2
    return np.concatenate([-v[h:], v[:h]])


def rope(v, pos, base):
    """apply_rotary_pos_emb on one head: v*cos + rotate_half(v)*sin, cos/sin of
    cat(freqs, freqs), freqs = pos * base^(-2i/d)."""
    d = len(v)
    freqs = pos * np.array([base ** (-2.0 * i / d) for i in range(d // 2)])
    emb = np.concatenate([freqs, freqs])
    return v * np.cos(emb) + rotate_half(v) * np.sin(emb)


def ntk_alpha_base(base, alpha, d):
    """The released HunYuanDynamicNTKAlphaRotaryEmbedding's base (llama.cpp's converter writes
    it as rope.freq_base)."""
    return base * alpha ** (d / (d - 2))


class Model:
    pass


def load(path):
    g = gguf_np.read_gguf(path)
    assert g.get("general.architecture") == ARCH
    m = Model()

    def key(k, default=None):
        v = g.get(ARCH + "." + k)
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
    if key("rope.dimension_count", m.hd) != m.hd:
        raise ValueError("rope.dimension_count must be the head dim %d" % m.hd)
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.base = float(key("rope.freq_base", 10000.0))
    m.N = key("expert_count")
    m.k = key("expert_used_count")
    m.F = key("feed_forward_length")
    m.Fe = key("expert_feed_forward_length")
    m.Fs = key("expert_shared_feed_forward_length", m.F)
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
        L.bq = w(p + "attn_q.bias", (Q,), False)
        L.bk = w(p + "attn_k.bias", (KV,), False)
        L.bv = w(p + "attn_v.bias", (KV,), False)
        L.q_norm = w(p + "attn_q_norm.weight", (m.hd,))
        L.k_norm = w(p + "attn_k_norm.weight", (m.hd,))
        L.ffn_norm = w(p + "ffn_norm.weight", (m.E,))
        L.router = w(p + "ffn_gate_inp.weight", (m.N, m.E))
        L.gate_e = w(p + "ffn_gate_exps.weight", (m.N, m.Fe, m.E))
        L.up_e = w(p + "ffn_up_exps.weight", (m.N, m.Fe, m.E))
        L.down_e = w(p + "ffn_down_exps.weight", (m.N, m.E, m.Fe))
        L.gate_s = w(p + "ffn_gate_shexp.weight", (m.Fs, m.E))
        L.up_s = w(p + "ffn_up_shexp.weight", (m.Fs, m.E))
        L.down_s = w(p + "ffn_down_shexp.weight", (m.E, m.Fs))
        m.layers.append(L)
    return m


def route(m, L, x):
    z = L.router @ x
    e = np.exp(z - np.max(z))
    p = e / np.sum(e)
    ids = sorted(range(m.N), key=lambda j: (-p[j], j))[:m.k]
    wts = np.array([p[j] for j in ids])
    return ids, wts / max(np.sum(wts), np.finfo(np.float32).eps)


def ffn(m, L, h):
    ids, wts = route(m, L, h)
    y = sum(wt * (L.down_e[e] @ (silu(L.gate_e[e] @ h) * (L.up_e[e] @ h)))
            for e, wt in zip(ids, wts))
    return y + L.down_s @ (silu(L.gate_s @ h) * (L.up_s @ h))


def head(v, pos, base, norm_w, eps, rope_first):
    if rope_first:
        return rms_norm(rope(v, pos, base), norm_w, eps)
    return rope(rms_norm(v, norm_w, eps), pos, base)


def forward(m, tokens, rope_first=True):
    n = len(tokens)
    hd, group = m.hd, m.H // m.Hkv
    scale = hd ** -0.5
    x = [m.tok[t].copy() for t in tokens]
    for L in m.layers:
        qs, ks, vs = [], [], []
        for pos in range(n):
            h = rms_norm(x[pos], L.attn_norm, m.eps)
            q, k, v = L.wq @ h, L.wk @ h, L.wv @ h
            if L.bq is not None:
                q, k, v = q + L.bq, k + L.bk, v + L.bv
            qs.append([head(q[j * hd:(j + 1) * hd], pos, m.base, L.q_norm, m.eps, rope_first)
                       for j in range(m.H)])
            ks.append([head(k[j * hd:(j + 1) * hd], pos, m.base, L.k_norm, m.eps, rope_first)
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
            new_x.append(xa + ffn(m, L, rms_norm(xa, L.ffn_norm, m.eps)))
        x = new_x
    return np.array([m.out @ rms_norm(v, m.out_norm, m.eps) for v in x])


def main(argv):
    return gguf_np.logits_main(argv, load, forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
