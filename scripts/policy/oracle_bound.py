#!/usr/bin/env python3
"""How far can a batch policy go on a model? An output-error oracle (docs/evaluation.md,
"An output-error oracle, or how far a batch policy can go on the 64x8").

cover (src/routing/cover.cc) values a batch's experts by routed probability mass. This script
asks what a policy that knew every expert's actual output would reach: at each decode step
and MoE layer it computes ALL experts' outputs for the batch's tokens (which no real policy
can afford) and grows the streamed set greedily by the drop of the tokens' output error
sum_t ||y_t(U) - y_t*||^2 / s_t, where y_t* is the token's exact-routing output and s_t a
scale (--scale: 'res' = ||h_t||^2, the residual the output is added to; 'one'). It keeps
cover's other rules, so the two differ only in what the greedy values: every token keeps its
confident prefix (tau of its top-k mass), takes its top-k by logit within the set and
weights renormalized over it (norm_topk), exactly k experts each.

The forward pass is the NumPy reference's (tests/reference/reference.py), run for a group of
B documents in lockstep: at layer l the tokens at position p of the B documents form one
decode batch. By causality this equals B sequences decoded step by step with every step's
batch routed by the policy (the engine's `eval --batch B`, without its refill of ended
documents: a group's batch shrinks as its documents end). Scored: the next-token NLL at every
position but the last of each document's first --max-tokens tokens.

Policies (options: tau; lambda, one value or V0/V1/... per layer; scale = res or one):
  topk                exact routing (the first --policy is the baseline of the changes)
  cover               cover's greedy on routed mass (src/routing/cover.cc); w=ftr weights
                      each token by its Fisher trace, w=probe,file=P.npy by a linear probe's
                      prediction of it (--fisher-out writes P next to F)
  oracle              the greedy on the true output error (all experts computed);
                      scale=ftr: the error times the token's Fisher trace
  fisher:S=32         the greedy on the second-order growth of the KL divergence of every
                      later prediction: the error weighted by the token's own Fisher
                      information from S sampled label sets (PyTorch; a bound, not a policy:
                      it needs the exact model's gradients); file=W.npy: on surr's outputs
  est                 the oracle's greedy with outputs modelled as orthogonal, of one size
  gram:file=G.npy     the same with the experts' average Gram matrix (--gram-out)
  surr:file=W.npy     the same with outputs predicted by a linear map per expert fitted on
                      other documents (--surr-out, --surr-rank R for a rank-R map)
  (add fisher=F.npy to oracle or surr to weight the error by each layer's mean Fisher,
  --fisher-out; add ls=1 to fit each token's weights to its exact output by least squares)

  /usr/bin/python3 scripts/policy/oracle_bound.py --data data/eval-valid --policy topk \
      --surr-out W16.npy --surr-rank 16
  /usr/bin/python3 scripts/policy/oracle_bound.py --data data/eval --batch 16 --policy topk \
      --policy cover:lambda=0.05 --policy oracle:lambda=0.01 --policy surr:file=W16.npy,lambda=0.004
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'reference'))
import reference as R  # noqa: E402
import fisher_grads  # noqa: E402  (imports PyTorch only when called)


def parse_policy(spec):
    name, _, rest = spec.partition(':')
    opts = {}
    for kv in filter(None, rest.split(',')):
        k, _, v = kv.partition('=')
        opts[k] = v
    return name, opts


def topk_by_logit(z, k):
    # stable: lower id first among equal logits (the engine's logit_before)
    return np.argsort(-z, axis=1, kind='stable')[:, :k]


class Step:
    """One decode batch at one layer: logits z (T,E), probabilities p, all outputs Y (T,E,d)."""

    def __init__(self, z, Y, h, k):
        self.z, self.Y, self.h, self.k = z, Y, h, k
        e = np.exp(z - z.max(axis=1, keepdims=True))
        self.p = e / e.sum(axis=1, keepdims=True)
        self.exact = topk_by_logit(z, k)
        T = z.shape[0]
        self.rows = np.arange(T)[:, None]
        pe = self.p[self.rows, self.exact]
        self.mass = pe.sum(axis=1)
        self.ystar = np.einsum('tk,tkd->td', pe / self.mass[:, None], Y[self.rows, self.exact])

    def prefixes(self, tau):
        """The union of the confident prefixes: the shortest prefix of each token's exact top-k
        holding tau of its top-k mass (the top-1 always)."""
        q = self.p[self.rows, self.exact] / self.mass[:, None]
        cum = np.cumsum(q, axis=1) - q  # mass before each rank
        keep = cum < tau
        keep[:, 0] = True
        u = np.zeros(self.z.shape[1], bool)
        u[self.exact[keep]] = True
        return u

    def remap(self, u):
        z = np.where(u[None, :], self.z, -np.inf)
        ids = topk_by_logit(z, self.k)
        w = self.p[self.rows, ids]
        return ids, w / w.sum(axis=1, keepdims=True)


def cover_grow(st, u, lam, wt=None):
    """cover's greedy (src/routing/cover_greedy.cc): gain(e) = sum_t max(0, q_te - floor_t),
    or sum_t wt_t max(...) with per-token weights wt."""
    k = st.k
    q = st.p / st.mass[:, None]
    best = np.sort(np.where(u[None, :], q, 0.0), axis=1)[:, ::-1][:, :k]
    while True:
        floor = best[:, k - 1:k]
        gain = np.maximum(q - floor, 0.0)
        gain = (gain if wt is None else gain * wt[:, None]).sum(axis=0)
        gain[u] = -1.0
        e = int(np.argmax(gain))
        if gain[e] < 0 or (u.sum() >= k and not (gain[e] >= lam and gain[e] > 0)):
            return u
        u[e] = True
        best = -np.sort(-np.concatenate([best, q[:, e:e + 1]], axis=1), axis=1)[:, :k]


def grow_by_error(st, u, lam, errors):
    """The greedy shared by oracle, est, gram and surr: add the expert whose entry lowers the
    batch's summed error the most while the drop is >= lam. errors(ids) gives, for the
    tokens' current sets ids (T, k), each token's error (T,) and its error were candidate e to
    replace the token's lowest-logit member (T, E); the drop counts only where e would enter."""
    if u.sum() < st.k:
        u = cover_grow(st, u, np.inf)
    rows = np.arange(st.z.shape[0])
    while True:
        ids, _ = st.remap(u)
        err, errn = errors(ids)
        last = ids[:, -1]  # remap lists each token's set by descending logit
        enter = (st.z > st.z[rows, last][:, None]) & ~u[None, :]
        gain = np.where(enter, err[:, None] - errn, 0.0).sum(axis=0)
        gain[u] = -np.inf
        e = int(np.argmax(gain))
        if not np.isfinite(gain[e]) or gain[e] < lam or gain[e] <= 0:
            return u
        u[e] = True


def output_gaps(st, ids):
    """For the tokens' current sets ids: each token's output minus its exact one, D (T, d),
    and the same were candidate e to replace the token's lowest-logit member, Dn (T, E, d),
    on the outputs st.Y with weights renormalized over each set."""
    rows = np.arange(st.z.shape[0])
    pid = st.p[st.rows, ids]
    Ysum = np.einsum('tk,tkd->td', pid, st.Y[st.rows, ids])
    P = pid.sum(axis=1)
    last = ids[:, -1]
    pl = st.p[rows, last]
    Yn = Ysum[:, None, :] - pl[:, None, None] * st.Y[rows, last][:, None, :] \
        + st.p[:, :, None] * st.Y
    Pn = P[:, None] - pl[:, None] + st.p
    return Ysum / P[:, None] - st.ystar, Yn / Pn[:, :, None] - st.ystar[:, None, :]


def output_errors(st, scale):
    """oracle (and surr, on predicted st.Y): ||y_t(S) - y_t*||^2 / s_t on the outputs st.Y."""
    T = st.z.shape[0]
    s = np.sum(st.h * st.h, axis=1) if scale == 'res' else np.ones(T)
    if scale == 'ftr':  # the token's Fisher trace: its sensitivity, with no direction
        with np.errstate(divide='ignore'):  # unscored positions: zero gradient, no error
            s = 2.0 / fisher_trace(st)

    def errors(ids):
        D, Dn = output_gaps(st, ids)
        return np.sum(D * D, axis=1) / s, np.sum(Dn * Dn, axis=2) / s[:, None]
    return errors


def fisher_trace(st):
    """tr F_t of each token of the step (from its gradient samples st.g, (T, S, d))."""
    return np.mean(np.sum(st.g * st.g, axis=2), axis=1)


def fisher_errors(st):
    """fisher: a token's error is the second-order growth of the KL divergence of every later
    prediction, (y_t(S) - y_t*)^T F_t (y_t(S) - y_t*) / 2 with F_t = mean_s g_s g_s^T, g_s the
    gradient at this layer's output of the NLL of labels sampled from the exact model's own
    predictions (fisher_grads): label-free, in nats, one unit for every layer and token."""
    def errors(ids):
        D, Dn = output_gaps(st, ids)
        return (0.5 * np.mean(np.einsum('tsd,td->ts', st.g, D) ** 2, axis=1),
                0.5 * np.mean(np.einsum('tsd,ted->tes', st.g, Dn) ** 2, axis=2))
    return errors


def weight_errors(st, scale):
    """est: the outputs modelled from the logits alone, orthogonal and of one size (the
    step's mean), so a token's error is sum_e (w_e(S) - w*_e)^2 * nu^2 / s_t, kept in closed
    form through P = sum p, Q = sum p^2 and C = sum of p^2 over the exact set."""
    T, E = st.z.shape
    rows = np.arange(T)
    nu2 = float(np.mean(np.sum(st.Y[st.rows, st.exact] ** 2, axis=2)))
    s = (np.sum(st.h * st.h, axis=1) if scale == 'res' else np.ones(T)) / nu2
    ins = np.zeros((T, E), bool)
    ins[st.rows, st.exact] = True
    p2 = st.p ** 2
    M = st.mass
    Wstar = np.sum(st.p[st.rows, st.exact] ** 2, axis=1) / M ** 2

    def errors(ids):
        pid = st.p[st.rows, ids]
        P, Q = pid.sum(axis=1), (pid ** 2).sum(axis=1)
        C = np.where(ins[st.rows, ids], pid ** 2, 0).sum(axis=1)
        last = ids[:, -1]
        pl = st.p[rows, last]
        Pn = P[:, None] - pl[:, None] + st.p
        Qn = Q[:, None] - (pl ** 2)[:, None] + p2
        Cn = C[:, None] - np.where(ins[rows, last], pl ** 2, 0)[:, None] + np.where(ins, p2, 0)
        err = (Q / P ** 2 - 2 * C / (P * M) + Wstar) / s
        errn = (Qn / Pn ** 2 - 2 * Cn / (Pn * M[:, None]) + Wstar[:, None]) / s[:, None]
        return err, errn
    return errors


def gram_errors(st, G):
    """gram: the experts' output geometry from data, a token's error the quadratic form
    (w(S) - w*)^T G (w(S) - w*), G[e, f] = mean over tokens of <E_e(x), E_f(x)> for the
    layer (measured beforehand with --gram-out): sizes and overlaps of the experts' outputs
    count, but not this token's."""
    T, E = st.z.shape
    rows = np.arange(T)
    wstar = np.zeros((T, E))
    wstar[st.rows, st.exact] = st.p[st.rows, st.exact] / st.mass[:, None]

    def qf(D):  # D (..., E) -> D^T G D
        return np.einsum('...e,ef,...f->...', D, G, D)

    def errors(ids):
        pid = st.p[st.rows, ids]
        P = pid.sum(axis=1)
        w = np.zeros((T, E))
        w[st.rows, ids] = pid / P[:, None]
        last = ids[:, -1]
        # w' for every candidate e: (P w - p_l 1_l + p_e 1_e) / P'
        Pn = P[:, None] - st.p[rows, last][:, None] + st.p  # (T, E)
        Wn = np.repeat((w * P[:, None])[:, None, :], E, axis=1)  # (T, E, E): candidate, expert
        Wn[rows, :, last] -= st.p[rows, last][:, None]
        Wn[:, np.arange(E), np.arange(E)] += st.p
        Wn /= Pn[:, :, None]
        return qf(w - wstar), qf(Wn - wstar[:, None, :])
    return errors


class FisherFit:
    """--fisher-out: per layer, the sum over scored tokens of F_t (for the mean Fisher) and
    the normal equations of a ridge regression of log tr F_t on probe_features."""

    def __init__(self, n_layer, d):
        self.F = np.zeros((n_layer, d, d))
        self.count = np.zeros(n_layer)
        self.A = np.zeros((n_layer, d + 2, d + 2))
        self.b = np.zeros((n_layer, d + 2))
        self.y = np.zeros((n_layer, 3))  # sum, sum of squares, count of the targets

    def add(self, li, g, x, h):
        """g (T, S, d) gradient samples of T scored tokens; x, h their FFN input, residual."""
        self.F[li] += np.einsum('tsd,tse->de', g, g) / g.shape[1]
        self.count[li] += len(g)
        X = probe_features(x, h)
        y = np.log(np.mean(np.sum(g * g, axis=2), axis=1))
        self.A[li] += X.T @ X
        self.b[li] += X.T @ y
        self.y[li] += [np.sum(y), np.sum(y * y), len(y)]

    def save(self, path):
        half = []  # F^(1/2), symmetric, per layer
        for F, c in zip(self.F, self.count):
            lam, V = np.linalg.eigh(F / c)
            half.append(V @ np.diag(np.sqrt(np.maximum(lam, 0))) @ V.T)
        np.save(path, np.stack(half))
        probe = []
        for li, (A, b, y) in enumerate(zip(self.A, self.b, self.y)):
            w = np.linalg.solve(A + 1e-3 * np.trace(A) / len(b) * np.eye(len(b)), b)
            probe.append(w)
            var = y[1] / y[2] - (y[0] / y[2]) ** 2  # R^2 of the fit, on its own data
            resid = (y[1] - 2 * w @ b + w @ A @ w) / y[2]
            print(f'probe layer {li}: log tr F sd {math.sqrt(var):.3f}, R^2 {1 - resid / var:.3f}',
                  file=sys.stderr)
        np.save(path.replace('.npy', '') + '-probe.npy', np.stack(probe))


def probe_features(x, h):
    """What a per-token sensitivity probe sees at a MoE layer: the FFN's normed input x, the
    log-size of the residual h, and 1."""
    return np.concatenate([x, np.log(np.sqrt(np.sum(h * h, axis=-1, keepdims=True)) + 1e-9),
                           np.ones(x.shape[:-1] + (1,))], axis=-1)


def make_policy(spec, grams=None):
    name, o = parse_policy(spec)
    # fisher=F.npy: errors weighted by each layer's mean Fisher (--fisher-out), as the
    # plain L2 error of the outputs times F^(1/2)
    fbar = np.load(o['fisher']) if 'fisher' in o else None
    tau = float(o.get('tau', 0.5))
    lams = [float(v) for v in o.get('lambda', '0.05').split('/')]
    scale = o.get('scale', 'res')

    def route(st, layer):
        if name == 'topk':
            ids = st.exact
            w = st.p[st.rows, ids]
            return ids, w / w.sum(axis=1, keepdims=True)
        lam = lams[min(layer, len(lams) - 1)]
        u = st.prefixes(tau)
        if name == 'cover' and o.get('w') == 'ftr':  # tokens weighted by their Fisher trace
            u = cover_grow(st, u, lam, fisher_trace(st))
        elif name == 'cover' and o.get('w') == 'probe':  # ... as a linear probe predicts it
            u = cover_grow(st, u, lam, np.exp(probe_features(st.x, st.h) @ grams[layer]))
        elif name == 'cover':
            u = cover_grow(st, u, lam)
        elif name == 'oracle' and fbar is not None:  # weighted by the layer's mean Fisher
            fst = Step(st.z, st.Y @ fbar[layer], st.h, st.k)
            u = grow_by_error(st, u, lam, output_errors(fst, 'one'))
        elif name == 'oracle':
            u = grow_by_error(st, u, lam, output_errors(st, scale))
        elif name == 'fisher' and 'file' in o:  # the tokens' Fisher, predicted outputs
            sur = Step(st.z, np.einsum('td,edf->tef', st.x, grams[layer]), st.h, st.k)
            sur.g = st.g
            u = grow_by_error(st, u, lam, fisher_errors(sur))
        elif name == 'fisher':
            u = grow_by_error(st, u, lam, fisher_errors(st))
        elif name == 'est':
            u = grow_by_error(st, u, lam, weight_errors(st, scale))
        elif name == 'gram':
            u = grow_by_error(st, u, lam, gram_errors(st, grams[layer]))
        elif name == 'surr':  # the oracle on predicted outputs: x W_e, fitted beforehand
            Yp = np.einsum('td,edf->tef', st.x, grams[layer])
            sur = Step(st.z, Yp if fbar is None else Yp @ fbar[layer], st.h, st.k)
            u = grow_by_error(st, u, lam, output_errors(sur, scale if fbar is None else 'one'))
        else:
            raise SystemExit(f'unknown policy {name}')
        ids, w = st.remap(u)
        if o.get('ls') == '1':  # weights fit to the exact output by least squares (a bound)
            A = st.Y[st.rows, ids]  # (T, k, d)
            G = np.einsum('tkd,tjd->tkj', A, A) + 1e-6 * np.eye(st.k)
            w = np.linalg.solve(G, np.einsum('tkd,td->tk', A, st.ystar)[..., None])[..., 0]
        return ids, w
    return route


def run_group(m, docs, route, distinct, gram_acc=None, surr_acc=None, samples=0,
              fisher_fit=None):
    G = len(docs)
    n = max(len(d) for d in docs)
    lens = np.array([len(d) for d in docs])
    toks = np.zeros((G, n), dtype=np.int64)
    for i, d in enumerate(docs):
        toks[i, :len(d)] = d
    hd, H = m.head_dim, m.n_head
    f32 = np.float32

    def norm_rows(x, w):
        return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + m.eps) * w).astype(f32)

    pos = np.arange(n, dtype=np.float64)
    inv = m.rope_base ** (-2.0 * np.arange(hd // 2) / hd)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]

    def rope(t):
        x0, x1 = t[..., 0::2], t[..., 1::2]
        out = np.empty_like(t)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    assert m.rope == R.ROPE_NORM and m.qk_norm is None and m.n_head == m.n_head_kv
    seed = len(docs) + int(toks.sum()) % 1000003  # the same labels for every policy of a run
    grads = fisher_grads.fisher_grads(m, toks, lens, samples, seed) if samples else None
    scored = np.arange(n)[None, :] < (lens[:, None] - 1)
    mask = np.triu(np.full((n, n), -np.inf, dtype=f32), 1)
    h = m.tok_embd[toks].astype(f32)
    for li, L in enumerate(m.layers):
        x = norm_rows(h, L.attn_norm)
        q = rope((x @ L.wq.T.astype(f32)).reshape(G, n, H, hd))
        kk = rope((x @ L.wk.T.astype(f32)).reshape(G, n, H, hd))
        v = (x @ L.wv.T.astype(f32)).reshape(G, n, H, hd)
        s = np.einsum('gphd,gjhd->ghpj', q, kk) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s = s / s.sum(axis=-1, keepdims=True)
        o = np.einsum('ghpj,gjhd->gphd', s, v).reshape(G, n, H * hd)
        h = h + (o @ L.wo.T.astype(f32)).astype(f32)
        x = norm_rows(h, L.ffn_norm)
        if fisher_fit is not None:
            fisher_fit.add(li, grads[li][scored].astype(np.float64),
                           x[scored].astype(np.float64), h[scored].astype(np.float64))
        z = (x @ L.gate_inp.T.astype(f32)).astype(np.float64)
        X = x.reshape(G * n, -1)
        Y = np.empty((G * n, m.n_expert, X.shape[1]), f32)
        for e in range(m.n_expert):
            a = X @ L.gate_exps[e].T.astype(f32)
            Y[:, e, :] = ((a / (1 + np.exp(-a))) * (X @ L.up_exps[e].T.astype(f32))) \
                @ L.down_exps[e].T.astype(f32)
        if gram_acc is not None:  # over the documents' real positions only
            valid = (np.arange(n)[None, :] < lens[:, None]).reshape(-1)
            Yv = Y[valid].astype(np.float64)
            gram_acc[li] += np.einsum('ted,tfd->ef', Yv, Yv)
            gram_acc[-1][li] += len(Yv)
        if surr_acc is not None:  # normal equations of a linear map x -> E_e(x) per expert
            valid = (np.arange(n)[None, :] < lens[:, None]).reshape(-1)
            Xv = X[valid].astype(np.float64)
            surr_acc[0][li] += Xv.T @ Xv
            surr_acc[1][li] += np.einsum('td,tef->edf', Xv, Y[valid].astype(np.float64))
        Y = Y.reshape(G, n, m.n_expert, -1).astype(np.float64)
        f = np.zeros_like(h)
        for p in range(n):
            act = np.nonzero(lens > p)[0]
            st = Step(z[act, p], Y[act, p], h[act, p].astype(np.float64), m.n_expert_used)
            st.x = x[act, p].astype(np.float64)
            if grads is not None:
                st.g = grads[li][act, p].astype(np.float64)
            ids, w = route(st, li)
            f[act, p] = np.einsum('tk,tkd->td', w, Y[act, p][st.rows, ids])
            distinct[li] += len(np.unique(ids))
        h = h + f
    out = norm_rows(h, m.output_norm) @ m.output.T.astype(f32)
    out = out.astype(np.float64)
    lse = np.log(np.exp(out - out.max(axis=-1, keepdims=True)).sum(axis=-1)) + out.max(axis=-1)
    nll = []
    for i, d in enumerate(docs):
        t = np.arange(len(d) - 1)
        nll.append(float(np.sum(lse[i, t] - out[i, t, toks[i, t + 1]])))
    return nll


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('-m', '--model', default='models/lynx-moe-64x8.gguf')
    ap.add_argument('--bin', default='build/release/bin/lynx-moe')
    ap.add_argument('--data', default='data/eval')
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--max-tokens', type=int, default=128)
    ap.add_argument('--max-docs', type=int, default=0)
    ap.add_argument('--policy', action='append', required=True)
    ap.add_argument('-o', '--output', help='write the results as JSON')
    ap.add_argument('--surr-out', help="fit a linear map x -> E_e(x) per expert and layer on "
                    "the first policy's run and write it to this .npy file, for surr:file=")
    ap.add_argument('--surr-rank', type=int, default=0, help='rank of the fitted maps (0: full)')
    ap.add_argument('--gram-out', help="write the experts' output Gram matrices (the first "
                    "policy's run) to this .npy file, for gram:file=")
    ap.add_argument('--fisher-out', help="write each layer's mean Fisher information at the "
                    "MoE output, as F^(1/2) (the first policy's run, 32 label samples unless it "
                    "is fisher:S=), to this .npy file, for oracle:fisher= and surr:fisher=")
    a = ap.parse_args()
    m = R.load_model(a.model)
    docs = []
    for path in sorted(glob.glob(os.path.join(a.data, '*.txt'))):
        out = subprocess.run([a.bin, 'tokenize', '-m', a.model, '-f', path, '--ids-only'],
                             capture_output=True, text=True, check=True).stdout
        ids = json.loads(out.strip())[:a.max_tokens]
        if len(ids) >= 2:
            docs.append(ids)
    if a.max_docs:
        docs = docs[:a.max_docs]
    groups = [docs[i:i + a.batch] for i in range(0, len(docs), a.batch)]
    ntok = sum(len(d) - 1 for d in docs)
    res = []
    for spec in a.policy:
        _, o = parse_policy(spec)
        grams = np.load(o['file']) if 'file' in o else None
        route = make_policy(spec, grams)
        distinct = np.zeros(m.n_layer)
        acc = sacc = None
        d_ = m.n_embd
        if a.surr_out and spec == a.policy[0]:
            sacc = ([np.zeros((d_, d_)) for _ in range(m.n_layer)],
                    [np.zeros((m.n_expert, d_, d_)) for _ in range(m.n_layer)])
        fit = FisherFit(m.n_layer, d_) if a.fisher_out and spec == a.policy[0] else None
        if a.gram_out and spec == a.policy[0]:
            acc = [np.zeros((m.n_expert, m.n_expert)) for _ in range(m.n_layer)] + [np.zeros(m.n_layer)]
        nll = []
        for g in groups:
            needs = spec.startswith('fisher') or 'ftr' in o.values() or fit is not None
            nll += run_group(m, g, route, distinct, acc, sacc,
                             int(o.get('S', 32)) if needs else 0, fit)
        if sacc is not None:
            W = []
            for li in range(m.n_layer):
                A = sacc[0][li] + 1e-3 * np.trace(sacc[0][li]) / d_ * np.eye(d_)
                We = [np.linalg.solve(A, sacc[1][li][e]) for e in range(m.n_expert)]
                if a.surr_rank:  # reduced-rank regression: W V_r V_r^T, V_r the top right
                    # singular directions of the fitted outputs X W
                    for e in range(m.n_expert):
                        C = We[e].T @ sacc[0][li] @ We[e]
                        V = np.linalg.eigh(C)[1][:, ::-1][:, :a.surr_rank]
                        We[e] = We[e] @ V @ V.T
                W.append(np.stack(We))
            np.save(a.surr_out, np.stack(W).astype(np.float32))
        if fit is not None:
            fit.save(a.fisher_out)
        if acc is not None:
            np.save(a.gram_out, np.stack([acc[i] / acc[-1][i] for i in range(m.n_layer)]))
        res.append({'policy': spec, 'nll': nll, 'distinct': distinct.tolist()})
        base = res[0]
        ppl = math.exp(sum(nll) / ntok)
        d_nll = np.array(nll) - np.array(base['nll'])
        cnt = np.array([len(d) - 1 for d in docs])
        # paired 95% interval of the per-token dNLL, by documents (ratio estimator)
        mu = d_nll.sum() / cnt.sum()
        resid = d_nll - mu * cnt
        se = math.sqrt(np.sum(resid ** 2) * len(docs) / (len(docs) - 1)) / cnt.sum()
        cut = 1 - distinct.sum() / np.sum(base['distinct'])
        line = (f"{spec:40s} ppl {ppl:8.3f}  change {100 * (math.exp(mu) - 1):+6.2f}% "
                f"[{100 * (math.exp(mu - 1.96 * se) - 1):+.2f}, {100 * (math.exp(mu + 1.96 * se) - 1):+.2f}]"
                f"  cut {100 * cut:5.1f}%  per layer "
                + ' '.join(f"{100 * (1 - a_ / b_):.1f}" for a_, b_ in zip(distinct, base['distinct'])))
        print(line, flush=True)
        res[-1].update(ppl=ppl, change=math.exp(mu) - 1, cut=cut)
    if a.output:
        with open(a.output, 'w') as f:
            json.dump({'docs': len(docs), 'tokens': ntok, 'batch': a.batch, 'results': res}, f)


if __name__ == '__main__':
    main()
