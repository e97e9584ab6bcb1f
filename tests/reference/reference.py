"""Reference forward pass (float64, written plainly) for the GGUF architectures lynx-moe runs:
`llama` (dense, or Mixtral-style with experts), `qwen2moe`, `qwen3moe`, `olmoe`.

Every fact this relies on, with its source in llama.cpp, is listed in docs/reference.md.

    /usr/bin/python3 tests/reference/reference.py MODEL.gguf TOKEN [TOKEN ...]

prints, per position, the arg-max token and the experts chosen in each layer.

Conventions: a GGUF tensor with ggml ne=[in, out] is read as a numpy array of shape
(out, in) (numpy C order is reversed ne), so y = W @ x. Expert tensors ne=[in, out, n_expert]
become (n_expert, out, in).
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402

ROPE_NORM = "norm"   # rotate pairs (2i, 2i+1)
ROPE_NEOX = "neox"   # rotate pairs (i, i + n_rot/2)

# Per-architecture behaviour (see docs/reference.md for the llama.cpp sources).
ARCH = {
    # rope mode, normalize top-k weights, q/k norm kind
    "llama":    {"rope": ROPE_NORM, "norm_topk": True,  "qk_norm": None},
    "qwen2moe": {"rope": ROPE_NEOX, "norm_topk": False, "qk_norm": None},
    "qwen3moe": {"rope": ROPE_NEOX, "norm_topk": True,  "qk_norm": "per_head"},
    "olmoe":    {"rope": ROPE_NEOX, "norm_topk": False, "qk_norm": "whole"},
}

# Lower bound ggml puts on the sum of the top-k weights before dividing (llama-graph.cpp
# build_moe_ffn: ggml_clamp(weights_sum, 6.103515625e-5, INFINITY)).
WEIGHTS_SUM_MIN = 6.103515625e-5


class Model:
    pass


# ggml's CPU backend converts the activation operand of a matrix product to the weight's
# "vec_dot_type" before the dot products (ggml-cpu.c type_traits_cpu): F16 -> F16,
# BF16 -> BF16, Q8_0 -> Q8_0, Q4_0 -> Q8_0 (F32 weights: activations stay F32).
# forward(..., act_quant=True) reproduces that rounding (not the summation order), giving
# the goldens an engine with ggml-style kernels should match closely.
VEC_DOT_TYPE = {gguf_np.GGML_F16: gguf_np.GGML_F16, gguf_np.GGML_BF16: gguf_np.GGML_BF16,
                gguf_np.GGML_Q8_0: gguf_np.GGML_Q8_0, gguf_np.GGML_Q4_0: gguf_np.GGML_Q8_0}
# Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS -> Q8_K (ggml type ids 10, 11, 12, 13, 14, 23 -> 15).
# ggml converts for every K-quant and IQ4_XS; the table lists the block types the engine has
# integer kernels for (its type table's int_kernel), so that the actq goldens are what its
# default path computes.
GGML_Q2_K, GGML_Q3_K, GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_Q8_K = 10, 11, 12, 13, 14, 15
GGML_IQ4_XS = 23
VEC_DOT_TYPE.update({GGML_Q2_K: GGML_Q8_K, GGML_Q3_K: GGML_Q8_K, GGML_Q4_K: GGML_Q8_K,
                     GGML_Q5_K: GGML_Q8_K, GGML_Q6_K: GGML_Q8_K, GGML_IQ4_XS: GGML_Q8_K})
# Q4_1 / Q5_1 -> Q8_1 and Q5_0 / IQ4_NL / MXFP4 -> Q8_0 (ids 3, 7 and 6, 20, 39). Q8_1 rounds
# the activations exactly as Q8_0 does (same d, same q; it adds the block sum for the min
# term), so both are Q8_0 here.
GGML_Q4_1, GGML_Q5_0, GGML_Q5_1, GGML_IQ4_NL, GGML_MXFP4 = 3, 6, 7, 20, 39
VEC_DOT_TYPE.update({t: gguf_np.GGML_Q8_0
                     for t in (GGML_Q4_1, GGML_Q5_0, GGML_Q5_1, GGML_IQ4_NL, GGML_MXFP4)})


def round_q8_k(x32):
    """ggml's quantize_row_q8_K, dequantized (float64): per 256 values, the value of largest
    magnitude (the first one) m, iscale = -127 / m (f32), q = min(127, round-half-even(iscale
    * x)) in f32, d = 1 / iscale (f32); an all-zero block stays zero."""
    b = np.ascontiguousarray(x32, dtype=np.float32).reshape(-1, 256)
    idx = np.argmax(np.abs(b), axis=1)
    mx = b[np.arange(b.shape[0]), idx]
    out = np.zeros(b.shape, dtype=np.float64)
    nz = mx != 0
    iscale = (np.float32(-127.0) / mx[nz]).astype(np.float32)
    q = np.minimum(np.float32(127), np.rint((b[nz] * iscale[:, None]).astype(np.float32)))
    d = (np.float32(1.0) / iscale).astype(np.float32)
    out[nz] = d[:, None].astype(np.float64) * q.astype(np.float64)
    return out


def round_activation(x, wtype):
    """Rounds activations (last axis = the product's inner dimension) as ggml does before a
    product with a weight of ggml type wtype. Returns float64."""
    vt = VEC_DOT_TYPE.get(wtype)
    x32 = np.asarray(x, dtype=np.float32)
    if vt is None:
        return x32.astype(np.float64) if wtype != gguf_np.GGML_F32 else np.asarray(x, np.float64)
    if vt == gguf_np.GGML_F16:
        return x32.astype(np.float16).astype(np.float64)
    if vt == gguf_np.GGML_BF16:
        return gguf_np.bf16_bits_to_f32(gguf_np.f32_to_bf16_bits(x32)).astype(np.float64)
    if vt == GGML_Q8_K:
        return round_q8_k(x32.reshape(-1)).reshape(x32.shape)
    raw = gguf_np.quantize_q8_0(x32.reshape(-1))
    return gguf_np.dequantize_q8_0(raw, x32.size).reshape(x32.shape).astype(np.float64)


def matvec(m, W, wtype, x):
    """y = W @ x, with ggml-style activation rounding when m.act_quant is set."""
    if m.act_quant and wtype != gguf_np.GGML_F32:
        x = round_activation(x, wtype)
    return W @ x


def matrows(m, W, wtype, X):
    """Rows of X times W^T (vectorized matvec)."""
    if m.act_quant and wtype != gguf_np.GGML_F32:
        X = round_activation(X, wtype)
    return X @ W.T


def load_model(path):
    """Reads a GGUF file and dequantizes every tensor to float64."""
    g = gguf_np.read_gguf(path)
    arch = g.get("general.architecture")
    if arch not in ARCH:
        raise ValueError("unsupported architecture %r" % arch)
    m = Model()
    m.path = path
    m.arch = arch
    m.gguf = g
    m.act_quant = False

    def key(name, default=None, required=True):
        v = g.get(arch + "." + name)
        if v is None:
            if required and default is None:
                raise KeyError(arch + "." + name)
            return default
        return v

    m.n_layer = key("block_count")
    m.n_embd = key("embedding_length")
    m.n_head = key("attention.head_count")
    m.n_head_kv = key("attention.head_count_kv", m.n_head, required=False)
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.rope_base = float(key("rope.freq_base", 10000.0, required=False))
    m.n_expert = key("expert_count", 0, required=False)
    m.n_expert_used = key("expert_used_count", 0, required=False)
    m.n_ff = key("feed_forward_length", 0, required=False)
    m.n_ctx_train = key("context_length")
    # head sizes: default n_embd / n_head, overridden by key_length / value_length
    m.head_dim_k = key("attention.key_length", m.n_embd // m.n_head, required=False)
    m.head_dim_v = key("attention.value_length", m.n_embd // m.n_head, required=False)
    m.n_rot = key("rope.dimension_count", m.head_dim_k, required=False)
    if m.head_dim_k != m.head_dim_v or m.n_rot != m.head_dim_k:
        raise ValueError("these architectures require key_length == value_length == n_rot")
    m.head_dim = m.head_dim_k
    m.rope = ARCH[arch]["rope"]
    m.norm_topk = ARCH[arch]["norm_topk"]
    m.qk_norm = ARCH[arch]["qk_norm"]

    def w(name, required=True):
        t = g.tensors.get(name)
        if t is None:
            if required:
                raise KeyError("missing tensor " + name)
            return None
        return t.to_numpy().astype(np.float64)

    def ty(name):
        t = g.tensors.get(name)
        return None if t is None else t.type

    m.tok_embd = w("token_embd.weight")              # (n_vocab, n_embd)
    m.n_vocab = m.tok_embd.shape[0]
    m.output_norm = w("output_norm.weight")
    m.output = w("output.weight", required=False)
    m.output_type = ty("output.weight")
    if m.output is None:
        m.output = m.tok_embd                         # tied embeddings
        m.output_type = ty("token_embd.weight")
    m.layers = []
    for i in range(m.n_layer):
        p = "blk.%d." % i
        L = Model()
        L.ty = {a: ty(p + n + ".weight") for a, n in (
            ("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"), ("wo", "attn_output"),
            ("gate_exps", "ffn_gate_exps"), ("up_exps", "ffn_up_exps"),
            ("down_exps", "ffn_down_exps"), ("gate_shexp", "ffn_gate_shexp"),
            ("up_shexp", "ffn_up_shexp"), ("down_shexp", "ffn_down_shexp"),
            ("ffn_gate", "ffn_gate"), ("ffn_up", "ffn_up"), ("ffn_down", "ffn_down"),
            ("gate_inp", "ffn_gate_inp"), ("gate_inp_shexp", "ffn_gate_inp_shexp"))}
        L.attn_norm = w(p + "attn_norm.weight")
        L.wq = w(p + "attn_q.weight")
        L.wk = w(p + "attn_k.weight")
        L.wv = w(p + "attn_v.weight")
        L.wo = w(p + "attn_output.weight")
        L.bq = w(p + "attn_q.bias", required=False)
        L.bk = w(p + "attn_k.bias", required=False)
        L.bv = w(p + "attn_v.bias", required=False)
        L.bo = w(p + "attn_output.bias", required=False)
        L.q_norm = w(p + "attn_q_norm.weight", required=m.qk_norm is not None)
        L.k_norm = w(p + "attn_k_norm.weight", required=m.qk_norm is not None)
        L.ffn_norm = w(p + "ffn_norm.weight")
        L.gate_inp = w(p + "ffn_gate_inp.weight", required=False)    # (n_expert, n_embd)
        if L.gate_inp is not None:
            L.gate_exps = w(p + "ffn_gate_exps.weight")   # (n_expert, n_ff_exp, n_embd)
            L.up_exps = w(p + "ffn_up_exps.weight")       # (n_expert, n_ff_exp, n_embd)
            L.down_exps = w(p + "ffn_down_exps.weight")   # (n_expert, n_embd, n_ff_exp)
            L.gate_inp_shexp = w(p + "ffn_gate_inp_shexp.weight", required=False)
            L.gate_shexp = w(p + "ffn_gate_shexp.weight", required=False)
            L.up_shexp = w(p + "ffn_up_shexp.weight", required=False)
            L.down_shexp = w(p + "ffn_down_shexp.weight", required=False)
            if arch == "qwen2moe" and (L.gate_shexp is None or L.gate_inp_shexp is None):
                raise KeyError("qwen2moe requires the shared expert tensors")
        else:
            if arch != "llama" or m.n_expert != 0:
                raise KeyError("missing tensor %sffn_gate_inp.weight" % p)
            L.ffn_gate = w(p + "ffn_gate.weight")
            L.ffn_up = w(p + "ffn_up.weight")
            L.ffn_down = w(p + "ffn_down.weight")
        m.layers.append(L)
    return m


# ---------------------------------------------------------------------------------------
# Building blocks (one vector at a time)
# ---------------------------------------------------------------------------------------

def rms_norm(x, weight, eps):
    return x / math.sqrt(float(np.mean(x * x)) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def rope(vec, pos, mode, base):
    """Rotates one head vector (length n_rot) for position pos."""
    n = vec.shape[0]
    out = vec.copy()
    for i in range(n // 2):
        theta = pos * base ** (-2.0 * i / n)
        c, s = math.cos(theta), math.sin(theta)
        if mode == ROPE_NORM:
            a, b = 2 * i, 2 * i + 1
        else:
            a, b = i, i + n // 2
        x0, x1 = vec[a], vec[b]
        out[a] = x0 * c - x1 * s
        out[b] = x0 * s + x1 * c
    return out


def topk_ids(scores, k):
    """Indices of the k largest scores, descending; ties broken by the lower index."""
    order = sorted(range(len(scores)), key=lambda e: (-scores[e], e))
    return order[:k]


def route(m, L, x):
    """Router for one token: returns (ids, weights, router_logits, margin)."""
    logits = matvec(m, L.gate_inp, L.ty["gate_inp"], x)
    z = logits - np.max(logits)
    probs = np.exp(z) / np.sum(np.exp(z))
    ids = topk_ids(list(probs), m.n_expert_used)
    weights = np.array([probs[e] for e in ids])
    if m.norm_topk:
        weights = weights / max(float(np.sum(weights)), WEIGHTS_SUM_MIN)
    srt = sorted(logits, reverse=True)
    k = m.n_expert_used
    margin = float(srt[k - 1] - srt[k]) if k < len(srt) else float("inf")
    return ids, weights, logits, margin


def moe_ffn(m, L, x, info):
    ids, weights, logits, margin = route(m, L, x)
    out = np.zeros(m.n_embd)
    for e, we in zip(ids, weights):
        h = silu(matvec(m, L.gate_exps[e], L.ty["gate_exps"], x)) * \
            matvec(m, L.up_exps[e], L.ty["up_exps"], x)
        out += we * matvec(m, L.down_exps[e], L.ty["down_exps"], h)
    if L.gate_shexp is not None:
        h = silu(matvec(m, L.gate_shexp, L.ty["gate_shexp"], x)) * \
            matvec(m, L.up_shexp, L.ty["up_shexp"], x)
        shared = matvec(m, L.down_shexp, L.ty["down_shexp"], h)
        if L.gate_inp_shexp is not None:
            g = float(matvec(m, L.gate_inp_shexp, L.ty["gate_inp_shexp"], x))
            shared = shared * sigmoid(g)
        out += shared
    info.append({"ids": list(ids), "weights": [float(v) for v in weights],
                 "margin": margin})
    return out


def dense_ffn(m, L, x):
    h = silu(matvec(m, L.ffn_gate, L.ty["ffn_gate"], x)) * matvec(m, L.ffn_up, L.ty["ffn_up"], x)
    return matvec(m, L.ffn_down, L.ty["ffn_down"], h)


# ---------------------------------------------------------------------------------------
# Forward pass
# ---------------------------------------------------------------------------------------

def forward(m, tokens, act_quant=False):
    """Logits at every position of `tokens` (one sequence, positions 0..n-1).

    Returns (logits [n_tokens, n_vocab] float64, routing) where routing[layer][pos] is
    {"ids": [...], "weights": [...], "margin": float} for MoE layers (empty list for
    dense layers). act_quant: round activations as ggml does (see VEC_DOT_TYPE)."""
    m.act_quant = act_quant
    n = len(tokens)
    hd = m.head_dim
    group = m.n_head // m.n_head_kv
    scale = 1.0 / math.sqrt(hd)
    hidden = [m.tok_embd[t].copy() for t in tokens]
    routing = []
    for L in m.layers:
        # --- attention ---
        qs, ks, vs = [], [], []
        for p in range(n):
            x = rms_norm(hidden[p], L.attn_norm, m.eps)
            q = matvec(m, L.wq, L.ty["wq"], x)
            k = matvec(m, L.wk, L.ty["wk"], x)
            v = matvec(m, L.wv, L.ty["wv"], x)
            if L.bq is not None:
                q = q + L.bq
            if L.bk is not None:
                k = k + L.bk
            if L.bv is not None:
                v = v + L.bv
            if m.qk_norm == "whole":
                q = rms_norm(q, L.q_norm, m.eps)
                k = rms_norm(k, L.k_norm, m.eps)
            q_heads, k_heads, v_heads = [], [], []
            for h in range(m.n_head):
                qh = q[h * hd:(h + 1) * hd]
                if m.qk_norm == "per_head":
                    qh = rms_norm(qh, L.q_norm, m.eps)
                q_heads.append(rope(qh, p, m.rope, m.rope_base))
            for h in range(m.n_head_kv):
                kh = k[h * hd:(h + 1) * hd]
                if m.qk_norm == "per_head":
                    kh = rms_norm(kh, L.k_norm, m.eps)
                k_heads.append(rope(kh, p, m.rope, m.rope_base))
                v_heads.append(v[h * hd:(h + 1) * hd])
            qs.append(q_heads)
            ks.append(k_heads)
            vs.append(v_heads)
        attn_out = []
        for p in range(n):
            heads = []
            for h in range(m.n_head):
                kvh = h // group
                scores = np.array([float(qs[p][h] @ ks[j][kvh]) * scale for j in range(p + 1)])
                scores = np.exp(scores - np.max(scores))
                probs = scores / np.sum(scores)
                o = np.zeros(hd)
                for j in range(p + 1):
                    o += probs[j] * vs[j][kvh]
                heads.append(o)
            a = matvec(m, L.wo, L.ty["wo"], np.concatenate(heads))
            if L.bo is not None:
                a = a + L.bo
            attn_out.append(a)
        # --- feed-forward ---
        info = []
        for p in range(n):
            hidden[p] = hidden[p] + attn_out[p]
            x = rms_norm(hidden[p], L.ffn_norm, m.eps)
            if L.gate_inp is not None:
                f = moe_ffn(m, L, x, info)
            else:
                f = dense_ffn(m, L, x)
            hidden[p] = hidden[p] + f
        routing.append(info)
    logits = np.zeros((n, m.n_vocab))
    for p in range(n):
        logits[p] = matvec(m, m.output, m.output_type, rms_norm(hidden[p], m.output_norm, m.eps))
    return logits, routing


def forward_fast(m, tokens, act_quant=False):
    """The same computation vectorized over positions (used to search token sequences and
    as a cross-check of `forward`). Returns (logits, min routing margin, routing ids)."""
    m.act_quant = act_quant
    n = len(tokens)
    hd = m.head_dim
    group = m.n_head // m.n_head_kv
    pos = np.arange(n, dtype=np.float64)

    def norm_rows(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + m.eps) * w

    inv = m.rope_base ** (-2.0 * np.arange(hd // 2) / hd)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope_all(t):  # t: (n, heads, hd)
        if m.rope == ROPE_NORM:
            x0, x1 = t[..., 0::2], t[..., 1::2]
            out = np.empty_like(t)
            out[..., 0::2] = x0 * cos - x1 * sin
            out[..., 1::2] = x0 * sin + x1 * cos
        else:
            x0, x1 = t[..., :hd // 2], t[..., hd // 2:]
            out = np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)
        return out

    h = m.tok_embd[np.array(tokens)]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    min_margin = float("inf")
    all_ids = []
    for L in m.layers:
        x = norm_rows(h, L.attn_norm)
        q = matrows(m, L.wq, L.ty["wq"], x)
        k = matrows(m, L.wk, L.ty["wk"], x)
        v = matrows(m, L.wv, L.ty["wv"], x)
        if L.bq is not None:
            q, k, v = q + L.bq, k + L.bk, v + L.bv
        if m.qk_norm == "whole":
            q, k = norm_rows(q, L.q_norm), norm_rows(k, L.k_norm)
        q = q.reshape(n, m.n_head, hd)
        k = k.reshape(n, m.n_head_kv, hd)
        v = v.reshape(n, m.n_head_kv, hd)
        if m.qk_norm == "per_head":
            q, k = norm_rows(q, L.q_norm), norm_rows(k, L.k_norm)
        q, k = rope_all(q), rope_all(k)
        kk = np.repeat(k, group, axis=1)
        vv = np.repeat(v, group, axis=1)
        s = np.einsum("phd,jhd->hpj", q, kk) / math.sqrt(hd) + mask[None]
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s = s / s.sum(axis=-1, keepdims=True)
        o = np.einsum("hpj,jhd->phd", s, vv).reshape(n, m.n_head * hd)
        a = matrows(m, L.wo, L.ty["wo"], o)
        if L.bo is not None:
            a = a + L.bo
        h = h + a
        x = norm_rows(h, L.ffn_norm)
        if L.gate_inp is None:
            hh = silu(matrows(m, L.ffn_gate, L.ty["ffn_gate"], x)) * \
                matrows(m, L.ffn_up, L.ty["ffn_up"], x)
            f = matrows(m, L.ffn_down, L.ty["ffn_down"], hh)
            all_ids.append(None)
        else:
            logits = matrows(m, L.gate_inp, L.ty["gate_inp"], x)
            probs = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = probs / probs.sum(axis=1, keepdims=True)
            k_used = m.n_expert_used
            # stable sort on -p keeps lower ids first among ties
            order = np.argsort(-probs, axis=1, kind="stable")[:, :k_used]
            wts = np.take_along_axis(probs, order, axis=1)
            if m.norm_topk:
                wts = wts / np.maximum(wts.sum(axis=1, keepdims=True), WEIGHTS_SUM_MIN)
            srt = -np.sort(-logits, axis=1)
            if k_used < m.n_expert:
                min_margin = min(min_margin, float(np.min(srt[:, k_used - 1] - srt[:, k_used])))
            f = np.zeros_like(x)
            for p in range(n):
                for e, we in zip(order[p], wts[p]):
                    hh = silu(matvec(m, L.gate_exps[e], L.ty["gate_exps"], x[p])) * \
                        matvec(m, L.up_exps[e], L.ty["up_exps"], x[p])
                    f[p] += we * matvec(m, L.down_exps[e], L.ty["down_exps"], hh)
            if L.gate_shexp is not None:
                hh = silu(matrows(m, L.gate_shexp, L.ty["gate_shexp"], x)) * \
                    matrows(m, L.up_shexp, L.ty["up_shexp"], x)
                sh = matrows(m, L.down_shexp, L.ty["down_shexp"], hh)
                if L.gate_inp_shexp is not None:
                    gs = matrows(m, L.gate_inp_shexp, L.ty["gate_inp_shexp"], x)
                    sh = sh * (1.0 / (1.0 + np.exp(-gs)))[:, None]
                f = f + sh
            all_ids.append(order)
        h = h + f
    out = matrows(m, m.output, m.output_type, norm_rows(h, m.output_norm))
    return out, min_margin, all_ids


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    m = load_model(argv[1])
    tokens = [int(t) for t in argv[2:]]
    logits, routing = forward(m, tokens)
    for p in range(len(tokens)):
        experts = " ".join(str(r[p]["ids"]) for r in routing if r)
        print("pos %d token %d argmax %d max %.6f %s"
              % (p, tokens[p], int(np.argmax(logits[p])), float(np.max(logits[p])), experts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
