"""Reference forward pass of step35 GGUF files (StepFun Step-3.5-Flash), float64, written
plainly from Hugging Face's modeling_step3p5.py and independent of the engine.

    /usr/bin/python3 tests/reference/step35_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

Facts, from modeling_step3p5.py (Step3p5RMSNorm, Step3p5RotaryEmbedding, Step3p5Attention,
Step3p5MLP, Step3p5MoEMLP.router_bias_func / forward, Step3p5DecoderLayer, Step3p5Model),
with llama.cpp's GGUF names and keys (llama-arch.cpp LLM_ARCH_STEP35, convert_hf_to_gguf.py
Step35Model):
- RMSNorm: x * (mean(x^2) + eps)^-0.5 * (1 + w_hf); the converter stores w_hf + 1, so here
  the GGUF weight multiplies as stored (also q_norm / k_norm, per head);
- layer: r = x; h = input_layernorm(x) (attn_norm); x = r + o_proj(attn(h));
  r = x; h = post_attention_layernorm(x) (ffn_norm); x = r + ffn(h);
- attention: layer_types (GGUF attention.sliding_window_pattern, true = sliding); sliding
  layers have attention_other_setting's heads (GGUF head_count[il], head_count_kv[il]) and see
  keys t with p - t < sliding_window; full layers the config's heads and all keys;
  q = rope(q_norm(q_proj(h))), k = rope(k_norm(k_proj(h))) per head; rotate_half rope (GGUF
  NEOX) on the first rotary_dim dims of each head (partial_rotary_factors: 0.5 full, 1.0
  sliding; GGUF: full rope.dimension_count / 2, sliding rope.dimension_count_swa, default
  rope.dimension_count), inv_freq_i = theta^(-2i/rotary_dim) (rope_theta per layer: GGUF
  rope.freq_base full, rope.freq_base_swa sliding), divided by rope_freqs[i] in the full
  layers when the file has it (llama.cpp's form of their llama3-type scaling); scaling
  head_dim^-0.5; softmax; with use_head_wise_attn_gate (GGUF attn_gate) head j's output times
  sigmoid(g_proj(h))[j] before o_proj;
- MLP (dense layers, and the shared expert beside the experts): down(g * u) with
  g = silu(gate(h)), u = up(h), and with a limit L (swiglu_limits_shared[il], GGUF
  swiglu_clamp_shexp; 0 = none) g = min(g, L), u = clip(u, -L, L);
- MoE layers (moe_layers_enum; GGUF: from leading_dense_block_count on): p = sigmoid(gate(h))
  in fp32; the top moe_top_k of p + router_bias (GGUF exp_probs_b.bias; ties here to the lower
  id) chosen, weighted by their p renormalized (p / (sum + 1e-20); GGUF expert_weights_norm,
  true when absent), times moe_router_scaling_factor (expert_weights_scale); each expert
  like the MLP with swiglu_limits[il] (swiglu_clamp_exp); plus share_expert(h);
- logits = lm_head(norm(x)).
Shapes are checked as the file is read; a bad one raises naming the tensor.
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np  # noqa: E402


def rms_norm(x, w, eps):
    return x * (float(np.mean(x * x)) + eps) ** -0.5 * w


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def rope(v, pos, inv_freq):
    """apply_rotary_pos_emb on one head: the first 2 len(inv_freq) dims rotate
    (v*cos + rotate_half(v)*sin, emb = cat(freqs, freqs)), the rest pass."""
    rd = 2 * len(inv_freq)
    r, rest = v[:rd], v[rd:]
    emb = np.concatenate([pos * inv_freq, pos * inv_freq])
    half = rd // 2
    rot = np.concatenate([-r[half:], r[:half]])
    return np.concatenate([r * np.cos(emb) + rot * np.sin(emb), rest])


def mlp(gate, up, down, h, limit):
    g = gate @ h
    g = g * sigmoid(g)
    u = up @ h
    if limit:
        g = np.minimum(g, limit)
        u = np.clip(u, -limit, limit)
    return down @ (g * u)


class Model:
    pass


def load(path):
    g = gguf_np.read_gguf(path)
    assert g.get("general.architecture") == "step35"
    m = Model()

    def key(k, default=None):
        v = g.get("step35." + k)
        return default if v is None else v

    def per_layer(k, default):
        v = key(k, default)
        return list(v) if isinstance(v, list) else [v] * m.n_layer

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
    m.hd = key("attention.key_length")
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    sliding = per_layer("attention.sliding_window_pattern", None)
    heads = per_layer("attention.head_count", None)
    hkv = per_layer("attention.head_count_kv", None)
    m.window = key("attention.sliding_window", 0)
    n_rot = key("rope.dimension_count", m.hd)
    rd_full, rd_swa = n_rot // 2, key("rope.dimension_count_swa", n_rot)
    base_full = float(key("rope.freq_base"))
    base_swa = float(key("rope.freq_base_swa", base_full))
    m.N = key("expert_count")
    m.k = key("expert_used_count")
    m.F = key("expert_feed_forward_length")
    m.Fs = key("expert_shared_feed_forward_length")
    m.Fd = key("feed_forward_length")
    m.dense_lead = key("leading_dense_block_count", 0)
    m.norm = bool(key("expert_weights_norm", True))
    m.scale = float(key("expert_weights_scale", 1.0))
    lim_exp = per_layer("swiglu_clamp_exp", 0.0)
    lim_sh = per_layer("swiglu_clamp_shexp", 0.0)
    tok = g.tensors["token_embd.weight"]
    m.V = tok.ne[1]
    m.tok = w("token_embd.weight", (m.V, m.E))
    m.out_norm = w("output_norm.weight", (m.E,))
    m.out = w("output.weight", (m.V, m.E), False)
    if m.out is None:
        m.out = m.tok
    any_swa = any(sliding)
    ff = w("rope_freqs.weight", (max(rd_full, rd_swa if any_swa else 0) // 2,), False)
    inv_full = np.array([base_full ** (-2.0 * i / rd_full) for i in range(rd_full // 2)])
    if ff is not None:
        inv_full = inv_full / ff[:rd_full // 2]
    inv_swa = np.array([base_swa ** (-2.0 * i / rd_swa) for i in range(rd_swa // 2)])
    m.layers = []
    for i in range(m.n_layer):
        p = "blk.%d." % i
        L = Model()
        L.sliding = bool(sliding[i])
        L.H, L.Hkv = heads[i], hkv[i]
        L.inv_freq = inv_swa if L.sliding else inv_full
        L.lim_exp, L.lim_sh = float(lim_exp[i]), float(lim_sh[i])
        Q, KV = L.H * m.hd, L.Hkv * m.hd
        L.attn_norm = w(p + "attn_norm.weight", (m.E,))
        L.wq = w(p + "attn_q.weight", (Q, m.E))
        L.wk = w(p + "attn_k.weight", (KV, m.E))
        L.wv = w(p + "attn_v.weight", (KV, m.E))
        L.wo = w(p + "attn_output.weight", (m.E, Q))
        L.q_norm = w(p + "attn_q_norm.weight", (m.hd,))
        L.k_norm = w(p + "attn_k_norm.weight", (m.hd,))
        L.g_proj = w(p + "attn_gate.weight", (L.H, m.E), False)
        L.ffn_norm = w(p + "ffn_norm.weight", (m.E,))
        L.moe = i >= m.dense_lead
        if not L.moe:
            L.gate = w(p + "ffn_gate.weight", (m.Fd, m.E))
            L.up = w(p + "ffn_up.weight", (m.Fd, m.E))
            L.down = w(p + "ffn_down.weight", (m.E, m.Fd))
        else:
            L.router = w(p + "ffn_gate_inp.weight", (m.N, m.E))
            b = w(p + "exp_probs_b.bias", (m.N,), False)
            L.bias = np.zeros(m.N) if b is None else b
            L.gate_e = w(p + "ffn_gate_exps.weight", (m.N, m.F, m.E))
            L.up_e = w(p + "ffn_up_exps.weight", (m.N, m.F, m.E))
            L.down_e = w(p + "ffn_down_exps.weight", (m.N, m.E, m.F))
            L.gate_s = w(p + "ffn_gate_shexp.weight", (m.Fs, m.E))
            L.up_s = w(p + "ffn_up_shexp.weight", (m.Fs, m.E))
            L.down_s = w(p + "ffn_down_shexp.weight", (m.E, m.Fs))
        m.layers.append(L)
    return m


def moe(m, L, h):
    p = sigmoid(L.router @ h)
    sel = p + L.bias
    ids = sorted(range(m.N), key=lambda e: (-sel[e], e))[:m.k]
    wts = np.array([p[e] for e in ids])
    if m.norm:
        wts = wts / (np.sum(wts) + 1e-20)
    wts = wts * m.scale
    out = sum(wt * mlp(L.gate_e[e], L.up_e[e], L.down_e[e], h, L.lim_exp)
              for e, wt in zip(ids, wts))
    return out + mlp(L.gate_s, L.up_s, L.down_s, h, L.lim_sh)


def attention(m, L, xs):
    n, hd, group = len(xs), m.hd, L.H // L.Hkv
    qs, ks, vs, gates = [], [], [], []
    for pos in range(n):
        h = rms_norm(xs[pos], L.attn_norm, m.eps)
        q, k, v = L.wq @ h, L.wk @ h, L.wv @ h
        qs.append([rope(rms_norm(q[j * hd:(j + 1) * hd], L.q_norm, m.eps), pos, L.inv_freq)
                   for j in range(L.H)])
        ks.append([rope(rms_norm(k[j * hd:(j + 1) * hd], L.k_norm, m.eps), pos, L.inv_freq)
                   for j in range(L.Hkv)])
        vs.append([v[j * hd:(j + 1) * hd] for j in range(L.Hkv)])
        gates.append(np.ones(L.H) if L.g_proj is None else sigmoid(L.g_proj @ h))
    out = []
    for pos in range(n):
        first = max(0, pos - m.window + 1) if L.sliding else 0
        heads = []
        for j in range(L.H):
            g = j // group
            sc = np.array([qs[pos][j] @ ks[t][g] for t in range(first, pos + 1)]) * hd ** -0.5
            p = np.exp(sc - np.max(sc))
            p /= np.sum(p)
            o = sum(p[t - first] * vs[t][g] for t in range(first, pos + 1))
            heads.append(o * gates[pos][j])
        out.append(L.wo @ np.concatenate(heads))
    return out


def forward(m, tokens):
    x = [m.tok[t].copy() for t in tokens]
    for L in m.layers:
        att = attention(m, L, x)
        new_x = []
        for pos, xa in enumerate(x):
            xa = xa + att[pos]
            h = rms_norm(xa, L.ffn_norm, m.eps)
            if L.moe:
                y = moe(m, L, h)
            else:
                y = mlp(L.gate, L.up, L.down, h, L.lim_sh)
            new_x.append(xa + y)
        x = new_x
    return np.array([m.out @ rms_norm(v, m.out_norm, m.eps) for v in x])


def main(argv):
    return gguf_np.logits_main(argv, load, forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
