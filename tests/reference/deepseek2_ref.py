"""Reference forward pass of deepseek2 GGUF files (float64, written plainly), independent of
the engine: multi-head latent attention in its DECOMPRESSED form (every head's keys and
values rebuilt from the latent: k_h = [W_kb,h c ; k_rope], v_h = W_vb,h c), where the engine
uses the absorbed form on the cached latent; leading dense layers; routed experts (softmax,
or sigmoid with the selection bias exp_probs_b, group-limited top-k, renormalization and
routed scale) plus the shared expert.

    /usr/bin/python3 tests/reference/deepseek2_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab]. Facts
from llama.cpp (models/deepseek2.cpp, llama-graph.cpp build_moe_ffn): adjacent-pair rope on
the rope parts, kq scale 1/sqrt(qk_nope + qk_rope), group score = sum of a group's two best
biased scores, weights from the unbiased probabilities.

YaRN (rope.scaling.type = yarn), written from Hugging Face's modeling_deepseek.py
(DeepseekV2YarnRotaryEmbedding): per pair i of the rope part of n dims, the frequency
base^(-2i/n) kept ("extrapolated") below the dimension low, divided by the factor
("interpolated") above high, linear in between, where low = floor, high = ceil of
n ln(orig_ctx / (2 pi beta)) / (2 ln base) for beta_fast = 32 / beta_slow = 1, clamped to
[0, n-1]; cos / sin times mscale(factor, mscale) / mscale(factor, mscale_all_dim) = 1 (the
released configs have mscale = mscale_all_dim, as llama.cpp assumes); softmax scale times
mscale(factor, mscale_all_dim)^2, mscale(s, m) = 1 + 0.1 m ln s, with mscale_all_dim =
yarn_log_multiplier / 0.1 (the converter stores 0.1 * mscale_all_dim).
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


def rope_freqs(m):
    """The rotation frequency of each pair of the rope part (YaRN-blended when scaled)."""
    n = m.rope
    extra = np.array([m.base ** (-2.0 * i / n) for i in range(n // 2)])
    if not m.yarn:
        return extra
    inter = extra / m.yarn_factor

    def corr(beta):
        return n * math.log(m.yarn_orig / (beta * 2 * math.pi)) / (2 * math.log(m.base))

    low = max(math.floor(corr(m.yarn_beta_fast)), 0)
    high = min(math.ceil(corr(m.yarn_beta_slow)), n - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(n // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp  # 1: extrapolate (original frequency), 0: interpolate
    return inter * (1.0 - keep) + extra * keep


def rope_pairs(v, pos, freqs):
    out = v.copy()
    for i, f in enumerate(freqs):
        th = pos * f
        c, s = math.cos(th), math.sin(th)
        a, b = v[2 * i], v[2 * i + 1]
        out[2 * i] = a * c - b * s
        out[2 * i + 1] = a * s + b * c
    return out


class Model:
    pass


def load(path):
    g = gguf_np.read_gguf(path)
    assert g.get("general.architecture") == "deepseek2"
    m = Model()

    def key(k, default=None):
        v = g.get("deepseek2." + k)
        return default if v is None else v

    def w(name, required=True):
        t = g.tensors.get(name)
        if t is None:
            if required:
                raise KeyError(name)
            return None
        return t.to_numpy().astype(np.float64)

    m.n_layer = key("block_count")
    m.E = key("embedding_length")
    m.H = key("attention.head_count")
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.base = float(key("rope.freq_base", 10000.0))
    m.rope = key("rope.dimension_count")
    m.R = key("attention.kv_lora_rank")
    m.qlora = key("attention.q_lora_rank", 0)
    m.hk = key("attention.key_length_mla", None) or key("attention.key_length")
    m.hv = key("attention.value_length_mla", None) or key("attention.value_length")
    m.nope = m.hk - m.rope
    scaling = key("rope.scaling.type", "none")
    assert scaling in ("none", "yarn"), scaling
    m.yarn = scaling == "yarn"
    m.kq_mul = 1.0
    if m.yarn:
        m.yarn_factor = float(key("rope.scaling.factor"))
        m.yarn_orig = key("rope.scaling.original_context_length", key("context_length"))
        m.yarn_beta_fast = float(key("rope.scaling.yarn_beta_fast", 32.0))
        m.yarn_beta_slow = float(key("rope.scaling.yarn_beta_slow", 1.0))
        mscale_all_dim = float(key("rope.scaling.yarn_log_multiplier", 0.0)) / 0.1
        ms = 1.0 + 0.1 * mscale_all_dim * math.log(m.yarn_factor) if m.yarn_factor > 1 else 1.0
        m.kq_mul = ms * ms
    m.freqs = rope_freqs(m)
    # Mistral Small 4's llama_4_scaling_beta (HF modeling_mistral4 get_llama_4_attn_scale):
    # q at position p times 1 + beta ln(1 + floor(p / original_max_position_embeddings)).
    m.temp_beta = float(key("attention.temperature_scale", 0.0))
    m.temp_len = key("rope.scaling.original_context_length", key("context_length"))
    m.lead = key("leading_dense_block_count", 0)
    m.N = key("expert_count", 0)
    m.k = key("expert_used_count", 0)
    m.sigmoid = key("expert_gating_func", 1) == 2
    m.norm = bool(key("expert_weights_norm", False))
    m.scale = float(key("expert_weights_scale", 1.0))
    m.groups = key("expert_group_count", 1)
    m.groups_used = key("expert_group_used_count", m.groups)
    m.tok = w("token_embd.weight")
    m.out_norm = w("output_norm.weight")
    m.out = w("output.weight", False)
    if m.out is None:
        m.out = m.tok
    m.layers = []
    for i in range(m.n_layer):
        p = "blk.%d." % i
        L = Model()
        L.attn_norm = w(p + "attn_norm.weight")
        if m.qlora:
            L.wq_a = w(p + "attn_q_a.weight")
            L.q_a_norm = w(p + "attn_q_a_norm.weight")
            L.wq_b = w(p + "attn_q_b.weight")
        else:
            L.wq = w(p + "attn_q.weight")
        L.wkv_a = w(p + "attn_kv_a_mqa.weight")
        L.kv_norm = w(p + "attn_kv_a_norm.weight")
        kb = w(p + "attn_k_b.weight", False)
        if kb is not None:
            # (H, R, nope) and (H, v, R): per head, k_h = W_kb,h^T c, v_h = W_vb,h c
            L.k_up = [kb[h].T for h in range(m.H)]              # (nope, R)
            vb = w(p + "attn_v_b.weight")
            L.v_up = [vb[h] for h in range(m.H)]                # (v, R)
        else:
            kvb = w(p + "attn_kv_b.weight")                     # (H*(nope+v), R)
            s = m.nope + m.hv
            L.k_up = [kvb[h * s:h * s + m.nope] for h in range(m.H)]
            L.v_up = [kvb[h * s + m.nope:(h + 1) * s] for h in range(m.H)]
        L.wo = w(p + "attn_output.weight")
        L.ffn_norm = w(p + "ffn_norm.weight")
        if i < m.lead or m.N == 0:
            L.dense = (w(p + "ffn_gate.weight"), w(p + "ffn_up.weight"), w(p + "ffn_down.weight"))
        else:
            L.dense = None
            L.router = w(p + "ffn_gate_inp.weight")
            L.bias = w(p + "exp_probs_b.bias", False)
            L.gate_e = w(p + "ffn_gate_exps.weight")
            L.up_e = w(p + "ffn_up_exps.weight")
            L.down_e = w(p + "ffn_down_exps.weight")
            L.shexp = (w(p + "ffn_gate_shexp.weight"), w(p + "ffn_up_shexp.weight"),
                       w(p + "ffn_down_shexp.weight"))
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
    s = p + (L.bias if L.bias is not None else 0.0)
    allowed = np.ones(m.N, dtype=bool)
    if m.groups > 1:
        per = m.N // m.groups
        gs = [float(np.sum(np.sort(s[g * per:(g + 1) * per])[-2:])) for g in range(m.groups)]
        keep = sorted(range(m.groups), key=lambda g: (-gs[g], g))[:m.groups_used]
        allowed[:] = False
        for g in keep:
            allowed[g * per:(g + 1) * per] = True
    cand = [e for e in range(m.N) if allowed[e]]
    ids = sorted(cand, key=lambda e: (-s[e], e))[:m.k]
    wts = np.array([p[e] for e in ids])
    if m.norm:
        wts = wts / np.sum(wts)
    return ids, wts * m.scale


def forward(m, tokens):
    n = len(tokens)
    hd = m.nope + m.rope
    scale = m.kq_mul / math.sqrt(hd)
    x = [m.tok[t].copy() for t in tokens]
    for L in m.layers:
        keys, vals, qs = [], [], []
        for pos in range(n):
            h = rms_norm(x[pos], L.attn_norm, m.eps)
            if m.qlora:
                q = L.wq_b @ rms_norm(L.wq_a @ h, L.q_a_norm, m.eps)
            else:
                q = L.wq @ h
            kv = L.wkv_a @ h
            c = rms_norm(kv[:m.R], L.kv_norm, m.eps)
            kr = rope_pairs(kv[m.R:], pos, m.freqs)
            qh, kh, vh = [], [], []
            for hh in range(m.H):
                qv = q[hh * hd:(hh + 1) * hd]
                qh.append(np.concatenate([qv[:m.nope], rope_pairs(qv[m.nope:], pos, m.freqs)]))
                kh.append(np.concatenate([L.k_up[hh] @ c, kr]))
                vh.append(L.v_up[hh] @ c)
            if m.temp_beta:
                t = 1.0 + m.temp_beta * math.log(1.0 + math.floor(pos / m.temp_len))
                qh = [v * t for v in qh]
            qs.append(qh)
            keys.append(kh)
            vals.append(vh)
        new_x = []
        for pos in range(n):
            heads = []
            for hh in range(m.H):
                sc = np.array([qs[pos][hh] @ keys[j][hh] * scale for j in range(pos + 1)])
                p = np.exp(sc - np.max(sc))
                p /= np.sum(p)
                heads.append(sum(p[j] * vals[j][hh] for j in range(pos + 1)))
            xa = x[pos] + L.wo @ np.concatenate(heads)
            h = rms_norm(xa, L.ffn_norm, m.eps)
            if L.dense is not None:
                y = swiglu_ffn(*L.dense, h)
            else:
                ids, wts = route(m, L, h)
                y = sum(wt * swiglu_ffn(L.gate_e[e], L.up_e[e], L.down_e[e], h)
                        for e, wt in zip(ids, wts))
                y = y + swiglu_ffn(*L.shexp, h)
            new_x.append(xa + y)
        x = new_x
    return np.array([m.out @ rms_norm(v, m.out_norm, m.eps) for v in x])


def main(argv):
    return gguf_np.logits_main(argv, load, forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
