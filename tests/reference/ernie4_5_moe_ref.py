"""Reference forward pass of ernie4_5-moe GGUF files (ERNIE-4.5-21B-A3B, 300B-A47B), float64,
written plainly from Hugging Face's modeling_ernie4_5_moe.py and independent of the engine.

    /usr/bin/python3 tests/reference/ernie4_5_moe_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

Facts, from modeling_ernie4_5_moe.py (Ernie4_5_MoeAttention, apply_rotary_pos_emb,
Ernie4_5_MoeSparseMoeBlock, Ernie4_5_MoeDecoderLayer) with llama.cpp's GGUF names and keys
(llama-arch.cpp LLM_ARCH_ERNIE4_5_MOE, convert_hf_to_gguf.py Ernie4_5MoeModel):
- layer: x += o_proj(attn(input_layernorm(x))); x += mlp(post_attention_layernorm(x))
  (GGUF: attn_norm, attn_output, ffn_norm);
- attention: q, k, v projections (biases when the file has them: use_bias), no q/k norm;
  rope on the whole head with HF's interleaved rotate_half (pairs (2i, 2i + 1), cos / sin of
  pos * base^(-2i/n) repeated per pair: GGUF's normal rope); GQA; scale head_dim^-0.5;
- layer i is the sparse MoE block when (i + 1) % moe_layer_interval == 0 and
  i >= moe_layer_start_index (GGUF interleave_moe_layer_step, leading_dense_block_count; HF's
  moe_layer_end_index is the last layer in the releases and absent from GGUF), else a dense
  SwiGLU MLP of intermediate_size (feed_forward_length);
- MoE: p = softmax(gate(h)) over all experts; the top moe_k of p + e_score_correction_bias
  (GGUF exp_probs_b, when present; ties here to the lower id) are chosen and weighed by p
  alone, divided by max(sum, 1e-12); each expert down(silu(gate h) * (up h)); plus the shared
  experts, one MLP of moe_intermediate_size * moe_num_shared_experts
  (expert_shared_feed_forward_length), ungated, when present;
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

ARCH = "ernie4_5-moe"


def rms_norm(x, w, eps):
    return x / math.sqrt(float(np.mean(x * x)) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotate_half_interleaved(v):
    """HF's rotate_half here: (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)."""
    out = np.empty_like(v)
    out[0::2] = -v[1::2]
    out[1::2] = v[0::2]
    return out


def rope(v, pos, base):
    """apply_rotary_pos_emb on one head: v*cos + rotate_half(v)*sin, cos/sin of the first half
    of cat(freqs, freqs) repeated twice each (repeat_interleave)."""
    n = len(v)
    inv_freq = np.array([base ** (-2.0 * i / n) for i in range(n // 2)])
    ang = np.repeat(pos * inv_freq, 2)
    return v * np.cos(ang) + rotate_half_interleaved(v) * np.sin(ang)


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
        if a.size == int(np.prod(shape)) and a.shape[-1] == shape[-1]:
            a = a.reshape(shape)  # [1, N] bias rows as HF stores them
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
    m.Fs = key("expert_shared_feed_forward_length", 0)
    m.lead = key("leading_dense_block_count")
    m.step = key("interleave_moe_layer_step")
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
        L.ffn_norm = w(p + "ffn_norm.weight", (m.E,))
        L.moe = i >= m.lead and (i + 1) % m.step == 0
        if L.moe:
            L.router = w(p + "ffn_gate_inp.weight", (m.N, m.E))
            L.bias = w(p + "exp_probs_b.bias", (m.N,), False)
            L.gate_e = w(p + "ffn_gate_exps.weight", (m.N, m.Fe, m.E))
            L.up_e = w(p + "ffn_up_exps.weight", (m.N, m.Fe, m.E))
            L.down_e = w(p + "ffn_down_exps.weight", (m.N, m.E, m.Fe))
            if m.Fs > 0:
                L.gate_s = w(p + "ffn_gate_shexp.weight", (m.Fs, m.E))
                L.up_s = w(p + "ffn_up_shexp.weight", (m.Fs, m.E))
                L.down_s = w(p + "ffn_down_shexp.weight", (m.E, m.Fs))
        else:
            L.gate = w(p + "ffn_gate.weight", (m.F, m.E))
            L.up = w(p + "ffn_up.weight", (m.F, m.E))
            L.down = w(p + "ffn_down.weight", (m.E, m.F))
        m.layers.append(L)
    return m


def route(m, L, x):
    z = L.router @ x
    e = np.exp(z - np.max(z))
    p = e / np.sum(e)
    s = p + L.bias if L.bias is not None else p
    ids = sorted(range(m.N), key=lambda e: (-s[e], e))[:m.k]
    wts = np.array([p[e] for e in ids])
    return ids, wts / max(np.sum(wts), 1e-12)


def ffn(m, L, h):
    if not L.moe:
        return L.down @ (silu(L.gate @ h) * (L.up @ h))
    ids, wts = route(m, L, h)
    y = sum(wt * (L.down_e[e] @ (silu(L.gate_e[e] @ h) * (L.up_e[e] @ h)))
            for e, wt in zip(ids, wts))
    if m.Fs > 0:
        y = y + L.down_s @ (silu(L.gate_s @ h) * (L.up_s @ h))
    return y


def forward(m, tokens):
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
            qs.append([rope(q[j * hd:(j + 1) * hd], pos, m.base) for j in range(m.H)])
            ks.append([rope(k[j * hd:(j + 1) * hd], pos, m.base) for j in range(m.Hkv)])
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
