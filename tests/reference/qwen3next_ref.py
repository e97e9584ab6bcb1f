"""Reference forward pass of qwen3next and qwen35moe GGUF files (Qwen3-Next-80B-A3B,
Qwen3-Coder-Next; Qwen3.5 35B-A3B / 122B / 397B), float64, written plainly from Hugging Face's
modeling_qwen3_next.py and modeling_qwen3_5_moe.py and independent of the engine.

    /usr/bin/python3 tests/reference/qwen3next_ref.py MODEL.gguf --tokens 1,2,3 --out L.f32

writes the logits of every position, raw little-endian float32 [n_tokens][n_vocab].

The file's tensors are first turned back into the checkpoint's (what llama.cpp's converter,
conversion/qwen.py Qwen3NextModel / _LinearAttentionVReorderBase, did to them, undone):
- every norm weight but the DeltaNet's gated norm had 1 added: HF's Qwen3NextRMSNorm computes
  rmsnorm(x) (1 + w), so w = stored - 1 here;
- ssm_a = -exp(A_log): A_log = log(-ssm_a); ssm_dt.bias is dt_bias; ssm_conv1d is the conv
  weight [conv_dim, 1, K] squeezed;
- qwen3next: in_proj_qkvz (per key head g: q_g, k_g, then its n_v/n_k value heads' v and z)
  was split into attn_qkv (all q, all k, all v) and attn_gate (z): rebuilt here; in_proj_ba
  (per key head its n_v/n_k b, then as many a) is ssm_ba as it was;
- qwen35moe: in_proj_qkv / in_proj_z / in_proj_b / in_proj_a are attn_qkv / attn_gate /
  ssm_beta / ssm_alpha, but the value heads were reordered from grouped by key head
  (g r + j) to tiled (j n_k + g) in v's rows, z, b, a, A_log, dt_bias, the conv's v channels and
  out_proj's columns: put back here.
Then the model, as HF computes it:
- layer: h = x + mixer(input_layernorm(x)); x = h + moe(post_attention_layernorm(h));
  layer_types: every full_attention_interval-th layer full attention, the others linear;
- Qwen3NextGatedDeltaNet (torch_causal_conv1d_update / torch_recurrent_gated_delta_rule):
  mixed_qkv = conv1d(cat(q, k, v)) over the last K positions (causal, no bias), SiLU; q, k
  L2-normed per head (x / sqrt(sum x^2 + 1e-6)), q times head_k_dim^-0.5; q, k heads repeated
  (repeat_interleave) to the value heads; beta = sigmoid(b), g = -exp(A_log) softplus(a +
  dt_bias); per value head S = S exp(g); d = (v - S^T k) beta; S += k d^T; o = S^T q;
  o = rmsnorm(o) w silu(z) (Qwen3NextRMSNormGated, per head); out_proj;
- Qwen3NextAttention: q_proj gives per head [query, gate] (head_dim each); q, k RMS-normed
  per head (1 + w); rotate_half rope on the first partial_rotary_factor x head_dim dims
  (inv_freq over that rotary dim); qwen35moe's interleaved M-RoPE with the three position
  components equal for text (computed as HF does, apply_interleaved_mrope); GQA softmax
  scaled by head_dim^-0.5; output times sigmoid(gate); o_proj;
- Qwen3NextSparseMoeBlock: p = softmax(gate(x)); top k (ties to the lower id), renormalized
  (norm_topk_prob); SwiGLU experts; + sigmoid(shared_expert_gate(x)) shared_expert(x);
- logits = lm_head(norm(x)) (tied to embed_tokens without output.weight).

--act-quant rounds the activation operand of every product with a weight of a type with an
integer kernel as ggml's CPU backend does before its dot products (reference.round_activation:
Q8_0 blocks for Q8_0 / Q4_0 weights, Q8_K for the K-quants; F32 / F16 / BF16 weights keep
float activations, as on the engine's default path): its goldens separate the engine's own
error from the error of 8-bit activations.
"""

import argparse
import copy
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np  # noqa: E402
from reference import GGML_Q8_K, VEC_DOT_TYPE, round_activation  # noqa: E402


def rms_norm(x, w, eps):
    return x * (float(np.mean(x * x)) + eps) ** -0.5 * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def l2norm(x):
    return x / math.sqrt(float(np.sum(x * x)) + 1e-6)


def rotate_half(v):
    half = len(v) // 2
    return np.concatenate([-v[half:], v[:half]])


class Model:
    pass


def act_rounding(wtype):
    """The 8-bit blocks that activations are rounded to before a product with a weight of
    ggml type wtype on the integer path (GGML_Q8_0 or GGML_Q8_K), None for float products."""
    vt = VEC_DOT_TYPE.get(wtype)
    return vt if vt in (gguf_np.GGML_Q8_0, GGML_Q8_K) else None


class Mat:
    """A weight matrix (float64, numpy shape [out, in] or [n, out, in]), its file type and
    tensor name; `mat @ x` first rounds x to 8-bit blocks where `act_quant` and the type has
    them. mat[i] is matrix i of a stack, with the same settings."""

    def __init__(self, a, wtype, act_quant, name):
        self.a, self.wtype, self.act_quant, self.name = a, wtype, act_quant, name

    def rounds(self):
        return self.act_quant and act_rounding(self.wtype) is not None

    def __matmul__(self, x):
        if self.rounds():
            x = round_activation(x, self.wtype)
        return self.a @ x

    def __getitem__(self, i):
        c = copy.copy(self)
        c.a = self.a[i]
        return c


def untile(a, axis, n_k, r, width):
    """The value heads of `a` along `axis` (n_k r blocks of `width`) from the tiled order
    (block j n_k + g) back to grouped (block g r + j)."""
    a = np.moveaxis(a, axis, 0)
    rest = a.shape[1:]
    b = a.reshape((r, n_k, width) + rest)          # [j, g, w]
    b = np.swapaxes(b, 0, 1).reshape(a.shape)      # [g, j, w]
    return np.moveaxis(b, 0, axis)


def load(path, act_quant=False):
    g = gguf_np.read_gguf(path)
    arch = g.get("general.architecture")
    assert arch in ("qwen3next", "qwen35moe"), arch
    m = Model()
    m.arch = arch

    def key(k, default=None):
        v = g.get(arch + "." + k)
        return default if v is None else v

    def w(name, shape, required=True):
        t = g.tensors.get(name)
        if t is None:
            if required:
                raise KeyError("missing tensor " + name)
            return None
        a = t.to_numpy().astype(np.float64)
        if tuple(a.shape) != tuple(shape):
            raise ValueError("tensor %s has shape %s, expected %s" % (name, a.shape, shape))
        return a

    def mat(a, *names):
        """Mat of `a`, made from the tensors `names`, whose activations round alike."""
        types = [g.tensors[n].type for n in names]
        if act_quant and len({act_rounding(t) for t in types}) != 1:
            raise ValueError("--act-quant: %s round their activations differently" % (names,))
        return Mat(a, types[0], act_quant, "+".join(names))

    def wm(name, shape):
        return mat(w(name, shape), name)

    m.n_layer = key("block_count") - key("nextn_predict_layers", 0)
    m.E = key("embedding_length")
    m.H = key("attention.head_count")
    m.Hkv = key("attention.head_count_kv")
    m.hd = key("attention.key_length")
    m.eps = float(key("attention.layer_norm_rms_epsilon"))
    m.n_rot = key("rope.dimension_count")
    base = float(key("rope.freq_base"))
    m.inv_freq = np.array([base ** (-2.0 * i / m.n_rot) for i in range(m.n_rot // 2)])
    m.sections = key("rope.dimension_sections") if arch == "qwen35moe" else None
    m.N = key("expert_count")
    m.k = key("expert_used_count")
    m.F = key("expert_feed_forward_length")
    m.Fs = key("expert_shared_feed_forward_length")
    m.K = key("ssm.conv_kernel")
    m.dk = key("ssm.state_size")
    m.nk = key("ssm.group_count")
    m.nv = key("ssm.time_step_rank")
    m.dv = key("ssm.inner_size") // m.nv
    r = m.nv // m.nk
    every = key("full_attention_interval", 4)
    KD, VD = m.nk * m.dk, m.nv * m.dv
    CD = 2 * KD + VD
    tok = g.tensors["token_embd.weight"]
    m.V = tok.ne[1]
    m.tok = w("token_embd.weight", (m.V, m.E))
    m.out_norm = w("output_norm.weight", (m.E,)) - 1.0
    out = w("output.weight", (m.V, m.E), False)
    m.out = mat(m.tok, "token_embd.weight") if out is None else mat(out, "output.weight")
    m.layers = []
    for i in range(m.n_layer):
        p = "blk.%d." % i
        L = Model()
        L.linear = (i + 1) % every != 0
        L.in_norm = w(p + "attn_norm.weight", (m.E,)) - 1.0
        L.post_norm = w(p + "post_attention_norm.weight", (m.E,)) - 1.0
        if L.linear:
            qkv = w(p + "attn_qkv.weight", (CD, m.E))
            z = w(p + "attn_gate.weight", (VD, m.E))
            conv = w(p + "ssm_conv1d.weight", (CD, m.K))
            dt = w(p + "ssm_dt.bias", (m.nv,))
            a_log = np.log(-w(p + "ssm_a", (m.nv,)))
            out = w(p + "ssm_out.weight", (m.E, VD))
            L.norm = w(p + "ssm_norm.weight", (m.dv,))
            if arch == "qwen3next":
                ba = w(p + "ssm_ba.weight", (2 * m.nv, m.E))
                # in_proj_qkvz as the checkpoint has it: per key head q, k, v, z.
                q, k, v = qkv[:KD], qkv[KD:2 * KD], qkv[2 * KD:]
                blocks = []
                for gk in range(m.nk):
                    blocks += [q[gk * m.dk:(gk + 1) * m.dk], k[gk * m.dk:(gk + 1) * m.dk],
                               v[gk * r * m.dv:(gk + 1) * r * m.dv],
                               z[gk * r * m.dv:(gk + 1) * r * m.dv]]
                L.in_proj_qkvz = mat(np.concatenate(blocks), p + "attn_qkv.weight",
                                     p + "attn_gate.weight")
                L.in_proj_ba = mat(ba, p + "ssm_ba.weight")
            else:
                b = w(p + "ssm_beta.weight", (m.nv, m.E))
                a = w(p + "ssm_alpha.weight", (m.nv, m.E))
                qk, v = qkv[:2 * KD], untile(qkv[2 * KD:], 0, m.nk, r, m.dv)
                L.in_proj_qkv = mat(np.concatenate([qk, v]), p + "attn_qkv.weight")
                L.in_proj_z = mat(untile(z, 0, m.nk, r, m.dv), p + "attn_gate.weight")
                L.in_proj_b = mat(untile(b, 0, m.nk, r, 1), p + "ssm_beta.weight")
                L.in_proj_a = mat(untile(a, 0, m.nk, r, 1), p + "ssm_alpha.weight")
                dt = untile(dt, 0, m.nk, r, 1)
                a_log = untile(a_log, 0, m.nk, r, 1)
                conv = np.concatenate([conv[:2 * KD], untile(conv[2 * KD:], 0, m.nk, r, m.dv)])
                out = untile(out, 1, m.nk, r, m.dv)
            L.conv, L.dt_bias, L.A_log = conv, dt, a_log
            L.out_proj = mat(out, p + "ssm_out.weight")
        else:
            L.q_proj = wm(p + "attn_q.weight", (2 * m.H * m.hd, m.E))
            L.k_proj = wm(p + "attn_k.weight", (m.Hkv * m.hd, m.E))
            L.v_proj = wm(p + "attn_v.weight", (m.Hkv * m.hd, m.E))
            L.o_proj = wm(p + "attn_output.weight", (m.E, m.H * m.hd))
            L.q_norm = w(p + "attn_q_norm.weight", (m.hd,)) - 1.0
            L.k_norm = w(p + "attn_k_norm.weight", (m.hd,)) - 1.0
        L.router = wm(p + "ffn_gate_inp.weight", (m.N, m.E))
        L.gate_e = wm(p + "ffn_gate_exps.weight", (m.N, m.F, m.E))
        L.up_e = wm(p + "ffn_up_exps.weight", (m.N, m.F, m.E))
        L.down_e = wm(p + "ffn_down_exps.weight", (m.N, m.E, m.F))
        L.gate_s = wm(p + "ffn_gate_shexp.weight", (m.Fs, m.E))
        L.up_s = wm(p + "ffn_up_shexp.weight", (m.Fs, m.E))
        L.down_s = wm(p + "ffn_down_shexp.weight", (m.E, m.Fs))
        L.shared_gate = wm(p + "ffn_gate_inp_shexp.weight", (m.E,))
        m.layers.append(L)
    return m


def norm1(x, w, eps):
    """Qwen3NextRMSNorm: rmsnorm(x) (1 + w)."""
    return rms_norm(x, 1.0 + w, eps)


def rope(m, v, pos):
    """apply_rotary_pos_emb on the first n_rot dims of one head (rotate_half), the rest as is.
    qwen35moe: the angles of the interleaved M-RoPE with position components (t, h, w) all
    equal to pos, as text tokens have them (apply_interleaved_mrope)."""
    freqs = [pos * m.inv_freq] * 3
    f = freqs[0].copy()
    if m.sections is not None:
        for dim, offset in ((1, 1), (2, 2)):
            idx = slice(offset, m.sections[dim] * 3, 3)
            f[idx] = freqs[dim][idx]
    emb = np.concatenate([f, f])
    rot, rest = v[:m.n_rot], v[m.n_rot:]
    return np.concatenate([rot * np.cos(emb) + rotate_half(rot) * np.sin(emb), rest])


def attention(m, L, hs):
    n, hd, group = len(hs), m.hd, m.H // m.Hkv
    qs, gates, ks, vs = [], [], [], []
    for pos, h in enumerate(hs):
        qg = (L.q_proj @ h).reshape(m.H, 2 * hd)
        k = (L.k_proj @ h).reshape(m.Hkv, hd)
        v = (L.v_proj @ h).reshape(m.Hkv, hd)
        qs.append([rope(m, norm1(qg[j, :hd], L.q_norm, m.eps), pos) for j in range(m.H)])
        gates.append(qg[:, hd:].reshape(-1))
        ks.append([rope(m, norm1(k[j], L.k_norm, m.eps), pos) for j in range(m.Hkv)])
        vs.append(v)
    out = []
    for pos in range(n):
        heads = []
        for j in range(m.H):
            kv = j // group
            s = np.array([qs[pos][j] @ ks[t][kv] for t in range(pos + 1)]) * hd ** -0.5
            pr = np.exp(s - np.max(s))
            pr /= np.sum(pr)
            heads.append(sum(pr[t] * vs[t][kv] for t in range(pos + 1)))
        out.append(L.o_proj @ (np.concatenate(heads) * sigmoid(gates[pos])))
    return out


def delta_net(m, L, hs):
    n, r = len(hs), m.nv // m.nk
    KD = m.nk * m.dk
    mixed, zs, bs, as_ = [], [], [], []
    for h in hs:
        if m.arch == "qwen3next":  # fix_query_key_value_ordering
            qkvz = (L.in_proj_qkvz @ h).reshape(m.nk, 2 * m.dk + 2 * r * m.dv)
            q = qkvz[:, :m.dk].reshape(-1)
            k = qkvz[:, m.dk:2 * m.dk].reshape(-1)
            v = qkvz[:, 2 * m.dk:2 * m.dk + r * m.dv].reshape(-1)
            z = qkvz[:, 2 * m.dk + r * m.dv:].reshape(-1)
            ba = (L.in_proj_ba @ h).reshape(m.nk, 2 * r)
            b, a = ba[:, :r].reshape(-1), ba[:, r:].reshape(-1)
            mixed.append(np.concatenate([q, k, v]))
        else:
            mixed.append(L.in_proj_qkv @ h)
            z, b, a = L.in_proj_z @ h, L.in_proj_b @ h, L.in_proj_a @ h
        zs.append(z)
        bs.append(b)
        as_.append(a)
    X = np.array(mixed)  # [n, conv_dim]
    pad = np.concatenate([np.zeros((m.K - 1, X.shape[1])), X])
    conv = np.array([silu(np.sum(L.conv * pad[t:t + m.K].T, axis=1)) for t in range(n)])
    S = np.zeros((m.nv, m.dk, m.dv))
    out = []
    for t in range(n):
        q = conv[t, :KD].reshape(m.nk, m.dk)
        k = conv[t, KD:2 * KD].reshape(m.nk, m.dk)
        v = conv[t, 2 * KD:].reshape(m.nv, m.dv)
        q = np.repeat(np.array([l2norm(x) for x in q]), r, axis=0) * m.dk ** -0.5
        k = np.repeat(np.array([l2norm(x) for x in k]), r, axis=0)
        beta = sigmoid(bs[t])
        gdecay = -np.exp(L.A_log) * softplus(as_[t] + L.dt_bias)
        heads = []
        for j in range(m.nv):
            S[j] = S[j] * math.exp(gdecay[j])
            kv_mem = k[j] @ S[j]
            d = (v[j] - kv_mem) * beta[j]
            S[j] = S[j] + np.outer(k[j], d)
            o = q[j] @ S[j]
            heads.append(rms_norm(o, L.norm, m.eps) * silu(zs[t][j * m.dv:(j + 1) * m.dv]))
        out.append(L.out_proj @ np.concatenate(heads))
    return out


def moe(m, L, h):
    z = L.router @ h
    p = np.exp(z - np.max(z))
    p /= np.sum(p)
    ids = sorted(range(m.N), key=lambda e: (-p[e], e))[:m.k]
    wts = np.array([p[e] for e in ids])
    wts = wts / np.sum(wts)
    y = np.zeros(m.E)
    for e, wt in zip(ids, wts):
        y += wt * (L.down_e[e] @ (silu(L.gate_e[e] @ h) * (L.up_e[e] @ h)))
    shared = L.down_s @ (silu(L.gate_s @ h) * (L.up_s @ h))
    return y + sigmoid(float(L.shared_gate @ h)) * shared


def forward(m, tokens):
    xs = [m.tok[t].copy() for t in tokens]
    for L in m.layers:
        hs = [norm1(x, L.in_norm, m.eps) for x in xs]
        mix = delta_net(m, L, hs) if L.linear else attention(m, L, hs)
        xs = [x + a for x, a in zip(xs, mix)]
        xs = [x + moe(m, L, norm1(x, L.post_norm, m.eps)) for x in xs]
    return np.array([m.out @ norm1(x, m.out_norm, m.eps) for x in xs])


def main(argv):
    # --act-quant here; MODEL --tokens --out as every family reference has them.
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--act-quant", action="store_true")
    a, rest = ap.parse_known_args(argv)
    return gguf_np.logits_main(rest, lambda path: load(path, a.act_quant), forward)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
