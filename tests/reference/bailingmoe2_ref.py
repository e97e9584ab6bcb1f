"""Reference forward pass of bailingmoe2 GGUF files (inclusionAI Ling 2.0 / Ring 2.0), float64,
written plainly from Hugging Face's modeling_bailing_moe_v2.py and independent of the engine.

    /usr/bin/python3 tests/reference/bailingmoe2_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

Facts, from modeling_bailing_moe_v2.py (BailingMoeV2Attention, BailingMoeV2Gate,
BailingMoeV2SparseMoeBlock, BailingMoeV2DecoderLayer) with llama.cpp's GGUF names and keys
(llama-arch.cpp LLM_ARCH_BAILINGMOE2, convert_hf_to_gguf.py BailingMoeV2Model):
- layer: x += dense(attn(input_layernorm(x))); x += mlp(post_attention_layernorm(x))
  (GGUF: attn_norm, attn_output, ffn_norm);
- attention: one query_key_value projection without bias (GGUF attn_qkv) viewed as
  (num_heads + 2 num_key_value_heads) heads of head_dim and split in that order: query heads,
  key heads, value heads; query_layernorm / key_layernorm are RMSNorms over each head's head_dim
  values (the same weights for every head; GGUF attn_q_norm / attn_k_norm); then rope on the
  first rope_dim = head_dim x partial_rotary_factor dims of each head only (GGUF
  rope.dimension_count), rotate_half over those dims (pairs (i, i + rope_dim/2)),
  pos * base^(-2i/rope_dim), the other dims passed through; GQA; softmax scale head_dim^-0.5;
- the first first_k_dense_replace layers (GGUF leading_dense_block_count) a dense MLP
  down(silu(gate h) * up h) of intermediate_size (GGUF ffn_gate / ffn_up / ffn_down);
- the others: p = sigmoid(gate(h)) (router in float32 in HF; float64 here); s = p + expert_bias
  (GGUF exp_probs_b); group_limited_topk: the experts in n_group contiguous groups, a group's
  score the sum of its two best s, the best topk_group groups kept (GGUF expert_group_count /
  expert_group_used_count), the others' experts out; the top num_experts_per_tok of s (ties
  here to the lower id) weighed by p alone, divided by their sum (+ 1e-20) (HF always does when
  k > 1; GGUF expert_weights_norm, which the converter writes from norm_topk_prob), times
  routed_scaling_factor (GGUF expert_weights_scale); each expert down(silu(gate h) * (up h))
  (GGUF ffn_{gate,up,down}_exps); plus the shared experts, one MLP of num_shared_experts x
  moe_intermediate_size (GGUF ffn_{gate,up,down}_shexp; llama.cpp's width:
  (expert_shared_feed_forward_length or the expert width) x expert_shared_count), unscaled;
- the num_nextn_predict_layers MTP layers after the trunk (GGUF nextn_predict_layers, counted
  in block_count) take no part in the logits: they are not read;
- expert_gating_func 1 would mean softmax instead of sigmoid; 2 sigmoid.
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


def rope(v, pos, base, rope_dim):
    """HF's apply_rotary_pos_emb on one head: the first rope_dim values rotated
    (v*cos + rotate_half(v)*sin, cos/sin of pos * inv_freq repeated twice), the rest kept."""
    r, rest = v[:rope_dim], v[rope_dim:]
    inv_freq = np.array([base ** (-2.0 * i / rope_dim) for i in range(rope_dim // 2)])
    emb = np.concatenate([pos * inv_freq, pos * inv_freq])
    return np.concatenate([r * np.cos(emb) + rotate_half(r) * np.sin(emb), rest])


def mlp(gate, up, down, h):
    return down @ (silu(gate @ h) * (up @ h))


class Model:
    pass


def load(path):
    g = gguf_np.read_gguf(path)
    assert g.get("general.architecture") == "bailingmoe2"
    m = Model()

    def key(k, default=None):
        v = g.get("bailingmoe2." + k)
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

    m.n_layer = key("block_count") - key("nextn_predict_layers", 0)
    m.E = key("embedding_length")
    m.H = key("attention.head_count")
    m.Hkv = key("attention.head_count_kv", m.H)
    m.hd = key("attention.key_length", m.E // m.H)
    m.rope_dim = key("rope.dimension_count", m.hd)
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.base = float(key("rope.freq_base", 10000.0))
    m.n_dense = key("leading_dense_block_count", 0)
    m.F = key("feed_forward_length")
    m.N = key("expert_count")
    m.k = key("expert_used_count")
    m.Fe = key("expert_feed_forward_length")
    m.Fs = key("expert_shared_feed_forward_length", m.Fe) * key("expert_shared_count")
    m.norm_topk = bool(key("expert_weights_norm", False))
    m.scale = float(key("expert_weights_scale", 1.0))
    m.sigmoid = key("expert_gating_func") == 2
    m.n_group = key("expert_group_count", 1)
    m.topk_group = key("expert_group_used_count", m.n_group)
    tok = g.tensors["token_embd.weight"]
    m.V = tok.ne[1]
    m.tok = w("token_embd.weight", (m.V, m.E))
    m.out_norm = w("output_norm.weight", (m.E,))
    m.out = w("output.weight", (m.V, m.E))
    Q, KV = m.H * m.hd, m.Hkv * m.hd
    m.layers = []
    for i in range(m.n_layer):
        p = "blk.%d." % i
        L = Model()
        L.attn_norm = w(p + "attn_norm.weight", (m.E,))
        L.wqkv = w(p + "attn_qkv.weight", (Q + 2 * KV, m.E))
        L.wo = w(p + "attn_output.weight", (m.E, Q))
        L.q_norm = w(p + "attn_q_norm.weight", (m.hd,))
        L.k_norm = w(p + "attn_k_norm.weight", (m.hd,))
        L.ffn_norm = w(p + "ffn_norm.weight", (m.E,))
        L.dense = i < m.n_dense
        if L.dense:
            L.gate = w(p + "ffn_gate.weight", (m.F, m.E))
            L.up = w(p + "ffn_up.weight", (m.F, m.E))
            L.down = w(p + "ffn_down.weight", (m.E, m.F))
        else:
            L.router = w(p + "ffn_gate_inp.weight", (m.N, m.E))
            L.bias = w(p + "exp_probs_b.bias", (m.N,), False)
            if L.bias is None:
                L.bias = np.zeros(m.N)
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
    if m.sigmoid:
        p = 1.0 / (1.0 + np.exp(-z))
    else:
        e = np.exp(z - np.max(z))
        p = e / np.sum(e)
    s = p + L.bias
    allowed = list(range(m.N))
    if m.n_group > 1:
        per = m.N // m.n_group
        group_score = [np.sum(np.sort(s[g * per:(g + 1) * per])[-2:]) for g in range(m.n_group)]
        kept = sorted(range(m.n_group), key=lambda g: (-group_score[g], g))[:m.topk_group]
        allowed = [e for e in range(m.N) if e // per in kept]
    ids = sorted(allowed, key=lambda e: (-s[e], e))[:m.k]
    wts = np.array([p[e] for e in ids])
    if m.norm_topk:
        wts = wts / (np.sum(wts) + 1e-20)
    return ids, wts * m.scale


def forward(m, tokens):
    n = len(tokens)
    hd, group = m.hd, m.H // m.Hkv
    scale = hd ** -0.5
    x = [m.tok[t].copy() for t in tokens]
    for L in m.layers:
        qs, ks, vs = [], [], []
        for pos in range(n):
            h = rms_norm(x[pos], L.attn_norm, m.eps)
            heads = (L.wqkv @ h).reshape(m.H + 2 * m.Hkv, hd)
            q, k, v = heads[:m.H], heads[m.H:m.H + m.Hkv], heads[m.H + m.Hkv:]
            qs.append([rope(rms_norm(q[j], L.q_norm, m.eps), pos, m.base, m.rope_dim)
                       for j in range(m.H)])
            ks.append([rope(rms_norm(k[j], L.k_norm, m.eps), pos, m.base, m.rope_dim)
                       for j in range(m.Hkv)])
            vs.append([v[j] for j in range(m.Hkv)])
        new_x = []
        for pos in range(n):
            outs = []
            for j in range(m.H):
                g = j // group
                sc = np.array([qs[pos][j] @ ks[t][g] * scale for t in range(pos + 1)])
                p = np.exp(sc - np.max(sc))
                p /= np.sum(p)
                outs.append(sum(p[t] * vs[t][g] for t in range(pos + 1)))
            xa = x[pos] + L.wo @ np.concatenate(outs)
            h = rms_norm(xa, L.ffn_norm, m.eps)
            if L.dense:
                y = mlp(L.gate, L.up, L.down, h)
            else:
                ids, wts = route(m, L, h)
                y = sum(wt * mlp(L.gate_e[e], L.up_e[e], L.down_e[e], h)
                        for e, wt in zip(ids, wts))
                y = y + mlp(L.gate_s, L.up_s, L.down_s, h)
            new_x.append(xa + y)
        x = new_x
    return np.array([m.out @ rms_norm(v, m.out_norm, m.eps) for v in x])


def main(argv):
    return gguf_np.logits_main(argv, load, forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
