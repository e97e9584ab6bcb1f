"""Reference forward pass of gemma4 GGUF files (Gemma 4 26B-A4B), float64, written plainly from
Hugging Face's modeling_gemma4.py and independent of the engine.

    /usr/bin/python3 tests/reference/gemma4_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

Facts, from modeling_gemma4.py (Gemma4RMSNorm, Gemma4TextAttention, Gemma4TextMLP,
Gemma4TextRouter, Gemma4TextExperts, Gemma4TextDecoderLayer, Gemma4TextModel,
Gemma4ForCausalLM, eager_attention_forward) and modeling_rope_utils.py
(_compute_proportional_rope_parameters), with llama.cpp's GGUF names and keys
(llama-arch.cpp LLM_ARCH_GEMMA4, conversion/gemma.py Gemma4Model):
- RMSNorm: x * (mean(x^2) + eps)^-0.5 * w, w as stored (Gemma 4 has no (1 + w); the
  converter's norm_shift is 0); v_norm and the router's norm have no weight;
- x = embed_tokens[t] * sqrt(hidden_size);
- layer: r = x; h = input_layernorm(x) (attn_norm); a = o_proj(attn(h));
  x = r + post_attention_layernorm(a) (post_attention_norm);
  r = x; m = post_feedforward_layernorm_1(mlp(pre_feedforward_layernorm(x)))
  (ffn_norm in, post_ffw_norm_1 out); e = post_feedforward_layernorm_2(experts(
  pre_feedforward_layernorm_2(x), router(x))) (pre_ffw_norm_2, post_ffw_norm_2);
  x = r + post_feedforward_layernorm(m + e) (post_ffw_norm); x = x * layer_scalar
  (layer_output_scale);
- attention: layer_types (GGUF attention.sliding_window_pattern, true = sliding); sliding
  layers: head_dim (key_length_swa), num_key_value_heads (head_count_kv[il]), rope "default"
  at rope_theta 1e4 (rope.freq_base_swa): inv_freq_i = base^(-2i/head_dim) over the whole
  head; key t visible from query p when p - t < sliding_window; full layers: global_head_dim
  (key_length), num_global_key_value_heads (head_count_kv[il]), rope "proportional" at
  rope.freq_base: int(partial_rotary_factor * head_dim // 2) angles base^(-2i/head_dim),
  the other head_dim/2 - angles 0 (GGUF rope_freqs: 1 for a rotating pair, 1e30 for the
  others; read here as that count); with attention_k_eq_v there is no v_proj (no attn_v) and
  the values are the raw k_proj output;
  q = rope(q_norm(q_proj(h))) and k = rope(k_norm(k_proj(h))) per head (GGUF attn_q_norm /
  attn_k_norm, head_dim weights), v = v_norm(v) per head without weight; rotate_half rope (GGUF
  NEOX) with emb = cat(freqs, freqs); GQA; scaling 1.0 (no 1/sqrt(d)); softmax;
- mlp: down(gelu_tanh(gate(h)) * up(h)) (hidden_activation gelu_pytorch_tanh);
- router: n = rmsnorm(x) (no weight) * scale * hidden_size^-0.5 (GGUF ffn_gate_inp.scale);
  p = softmax(proj(n)) (ffn_gate_inp); top top_k_experts of p (ties here to the lower id),
  renormalized to sum 1, each times per_expert_scale[e] (GGUF ffn_down_exps.scale);
- experts: sum_e w_e * down_e(gelu_tanh(gate_e(h)) * up_e(h)) (gate_up_proj's first half
  gate; GGUF ffn_gate_exps, ffn_up_exps, ffn_down_exps);
- logits = lm_head(norm(x)) (tied to embed_tokens without output.weight), then
  cap * tanh(logits / cap) with final_logit_softcapping.
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
    y = x * (float(np.mean(x * x)) + eps) ** -0.5
    return y if w is None else y * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rotate_half(v):
    half = len(v) // 2
    return np.concatenate([-v[half:], v[:half]])


def rope(v, pos, inv_freq):
    """HF's apply_rotary_pos_emb on one head: v*cos + rotate_half(v)*sin, cos/sin of
    pos * inv_freq repeated twice (emb = cat(freqs, freqs)); len(inv_freq) = len(v) / 2."""
    emb = np.concatenate([pos * inv_freq, pos * inv_freq])
    return v * np.cos(emb) + rotate_half(v) * np.sin(emb)


class Model:
    pass


def load(path):
    g = gguf_np.read_gguf(path)
    assert g.get("general.architecture") == "gemma4"
    m = Model()

    def key(k, default=None):
        v = g.get("gemma4." + k)
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
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    sliding = key("attention.sliding_window_pattern")
    hkv = key("attention.head_count_kv")
    if not isinstance(hkv, list):
        hkv = [hkv] * m.n_layer
    m.window = key("attention.sliding_window")
    hd_full, hd_swa = key("attention.key_length"), key("attention.key_length_swa")
    base_full = float(key("rope.freq_base"))
    base_swa = float(key("rope.freq_base_swa", 10000.0))
    m.N = key("expert_count")
    m.k = key("expert_used_count")
    m.F = key("expert_feed_forward_length")
    m.Fd = key("feed_forward_length")
    m.cap = key("final_logit_softcapping")
    tok = g.tensors["token_embd.weight"]
    m.V = tok.ne[1]
    m.tok = w("token_embd.weight", (m.V, m.E))
    m.out_norm = w("output_norm.weight", (m.E,))
    m.out = w("output.weight", (m.V, m.E), False)
    if m.out is None:
        m.out = m.tok
    # The proportional rope of the full layers: how many pairs rotate, from rope_freqs.
    ff = w("rope_freqs.weight", (hd_full // 2,), False)
    angles = hd_full // 2 if ff is None else int(np.sum(ff == 1.0))
    if ff is not None and not np.all(ff[angles:] >= 1e29):
        raise ValueError("rope_freqs.weight is not a proportional rope (1 ... then 1e30 ...)")
    inv_full = np.array([base_full ** (-2.0 * i / hd_full) if i < angles else 0.0
                         for i in range(hd_full // 2)])
    inv_swa = np.array([base_swa ** (-2.0 * i / hd_swa) for i in range(hd_swa // 2)])
    m.layers = []
    for i in range(m.n_layer):
        p = "blk.%d." % i
        L = Model()
        L.sliding = bool(sliding[i])
        L.hd = hd_swa if L.sliding else hd_full
        L.Hkv = hkv[i]
        L.inv_freq = inv_swa if L.sliding else inv_full
        Q, KV = m.H * L.hd, L.Hkv * L.hd
        L.attn_norm = w(p + "attn_norm.weight", (m.E,))
        L.wq = w(p + "attn_q.weight", (Q, m.E))
        L.wk = w(p + "attn_k.weight", (KV, m.E))
        L.wv = w(p + "attn_v.weight", (KV, m.E), L.sliding)
        L.wo = w(p + "attn_output.weight", (m.E, Q))
        L.q_norm = w(p + "attn_q_norm.weight", (L.hd,))
        L.k_norm = w(p + "attn_k_norm.weight", (L.hd,))
        L.post_attn = w(p + "post_attention_norm.weight", (m.E,))
        L.ffn_norm = w(p + "ffn_norm.weight", (m.E,))
        L.gate = w(p + "ffn_gate.weight", (m.Fd, m.E))
        L.up = w(p + "ffn_up.weight", (m.Fd, m.E))
        L.down = w(p + "ffn_down.weight", (m.E, m.Fd))
        L.post1 = w(p + "post_ffw_norm_1.weight", (m.E,))
        L.router = w(p + "ffn_gate_inp.weight", (m.N, m.E))
        L.router_scale = w(p + "ffn_gate_inp.scale", (m.E,))
        L.pre2 = w(p + "pre_ffw_norm_2.weight", (m.E,))
        L.gate_e = w(p + "ffn_gate_exps.weight", (m.N, m.F, m.E))
        L.up_e = w(p + "ffn_up_exps.weight", (m.N, m.F, m.E))
        L.down_e = w(p + "ffn_down_exps.weight", (m.N, m.E, m.F))
        L.expert_scale = w(p + "ffn_down_exps.scale", (m.N,))
        L.post2 = w(p + "post_ffw_norm_2.weight", (m.E,))
        L.post = w(p + "post_ffw_norm.weight", (m.E,))
        s = w(p + "layer_output_scale.weight", (1,), False)
        L.layer_scalar = 1.0 if s is None else float(s[0])
        m.layers.append(L)
    return m


def route(m, L, x):
    n = rms_norm(x, None, m.eps) * L.router_scale * m.E ** -0.5
    z = L.router @ n
    p = np.exp(z - np.max(z))
    p /= np.sum(p)
    ids = sorted(range(m.N), key=lambda e: (-p[e], e))[:m.k]
    wts = np.array([p[e] for e in ids])
    wts = wts / np.sum(wts)
    return ids, wts * L.expert_scale[ids]


def attention(m, L, xs):
    n, hd, group = len(xs), L.hd, m.H // L.Hkv
    qs, ks, vs = [], [], []
    for pos in range(n):
        h = rms_norm(xs[pos], L.attn_norm, m.eps)
        q = L.wq @ h
        k = L.wk @ h
        v = k.copy() if L.wv is None else L.wv @ h  # attention_k_eq_v: the raw keys
        qs.append([rope(rms_norm(q[j * hd:(j + 1) * hd], L.q_norm, m.eps), pos, L.inv_freq)
                   for j in range(m.H)])
        ks.append([rope(rms_norm(k[j * hd:(j + 1) * hd], L.k_norm, m.eps), pos, L.inv_freq)
                   for j in range(L.Hkv)])
        vs.append([rms_norm(v[j * hd:(j + 1) * hd], None, m.eps) for j in range(L.Hkv)])
    out = []
    for pos in range(n):
        first = max(0, pos - m.window + 1) if L.sliding else 0
        heads = []
        for j in range(m.H):
            g = j // group
            sc = np.array([qs[pos][j] @ ks[t][g] for t in range(first, pos + 1)])  # scaling 1
            p = np.exp(sc - np.max(sc))
            p /= np.sum(p)
            heads.append(sum(p[t - first] * vs[t][g] for t in range(first, pos + 1)))
        out.append(L.wo @ np.concatenate(heads))
    return out


def forward(m, tokens):
    x = [m.tok[t] * math.sqrt(m.E) for t in tokens]
    for L in m.layers:
        att = attention(m, L, x)
        new_x = []
        for pos, xa in enumerate(x):
            xa = xa + rms_norm(att[pos], L.post_attn, m.eps)
            h = rms_norm(xa, L.ffn_norm, m.eps)
            mlp = L.down @ (gelu_tanh(L.gate @ h) * (L.up @ h))
            mlp = rms_norm(mlp, L.post1, m.eps)
            ids, wts = route(m, L, xa)
            h2 = rms_norm(xa, L.pre2, m.eps)
            moe = sum(wt * (L.down_e[e] @ (gelu_tanh(L.gate_e[e] @ h2) * (L.up_e[e] @ h2)))
                      for e, wt in zip(ids, wts))
            moe = rms_norm(moe, L.post2, m.eps)
            y = xa + rms_norm(mlp + moe, L.post, m.eps)
            new_x.append(y * L.layer_scalar)
        x = new_x
    logits = np.array([m.out @ rms_norm(v, m.out_norm, m.eps) for v in x])
    if m.cap:
        logits = m.cap * np.tanh(logits / m.cap)
    return logits


def main(argv):
    return gguf_np.logits_main(argv, load, forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
