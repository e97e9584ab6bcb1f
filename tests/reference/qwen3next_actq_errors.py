"""Where the error of 8-bit activations comes from in a qwen3next / qwen35moe file: the
reference forward pass (qwen3next_ref.py) with and without --act-quant's rounding, compared
per product, per layer and at the logits (the figures in docs/models.md, qwen3next section).

    /usr/bin/python3 tests/reference/qwen3next_actq_errors.py \\
        tests/reference/fixtures/qwen3next/tiny-qwen3next-q8_0.gguf

1. per product (tensor name, all layers): the relative RMS error of the rounded input and of
   the product's output, and the input's max / RMS (large = a wide range within a block);
2. per layer: the relative RMS error of the mixer (DeltaNet or attention) and MoE outputs,
   and the positions whose top-k experts differ from the exact pass;
3. at the logits (largest error / largest logit, as tests/model/qwen3next_test.cc) with every
   product rounded, with one tensor's products rounded, and with all but one.
"""

import argparse
import os
import re
import sys
from collections import defaultdict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import qwen3next_ref as R  # noqa: E402
from reference import round_activation  # noqa: E402


def short(name):
    """blk.3.ffn_up_exps.weight -> ffn_up_exps (+ joined for rebuilt matrices)."""
    return "+".join(re.sub(r"^blk\.\d+\.|\.weight$", "", n) for n in name.split("+"))


def mats(m):
    for L in m.layers:
        for v in vars(L).values():
            if isinstance(v, R.Mat):
                yield v
    yield m.out


class Probe(R.Mat):
    """A Mat that rounds as its settings say and records what the rounding did."""

    def __matmul__(self, x):
        if self.act_quant and R.act_rounding(self.wtype) is not None:
            xr = round_activation(x, self.wtype)
            y, yr = self.a @ x, self.a @ xr
            self.log[short(self.name)].append((
                np.linalg.norm(xr - x) / np.linalg.norm(x),
                np.linalg.norm(yr - y) / max(np.linalg.norm(y), 1e-300),
                np.max(np.abs(x)) / np.sqrt(np.mean(x * x))))
            return yr
        return self.a @ x


def load(path, rounded, log):
    """The model with the products of the tensors in `rounded` (short names) rounded."""
    m = R.load(path, True)
    for mat in mats(m):
        mat.__class__ = Probe
        mat.act_quant = short(mat.name) in rounded
        mat.log = log
    return m


def forward(m, toks, trace):
    """qwen3next_ref.forward, recording each layer's mixer and MoE outputs and routing."""
    xs = [m.tok[t].copy() for t in toks]
    for L in m.layers:
        hs = [R.norm1(x, L.in_norm, m.eps) for x in xs]
        mix = R.delta_net(m, L, hs) if L.linear else R.attention(m, L, hs)
        xs = [x + a for x, a in zip(xs, mix)]
        hs = [R.norm1(x, L.post_norm, m.eps) for x in xs]
        ys = [R.moe(m, L, h) for h in hs]
        sel = [tuple(sorted(np.argsort(-(L.router @ h), kind="stable")[:m.k])) for h in hs]
        trace.append((L.linear, np.array(mix), np.array(ys), sel))
        xs = [x + y for x, y in zip(xs, ys)]
    return np.array([m.out @ R.norm1(x, m.out_norm, m.eps) for x in xs])


def rel_max(a, b):
    return np.max(np.abs(a - b), axis=1) / np.max(np.abs(b), axis=1)


def rel_rms(a, b):
    return np.sqrt(np.sum((a - b) ** 2, axis=-1) / np.sum(b ** 2, axis=-1))


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", default="1,7,42,100,255,3,77,180,9,250,64,128")
    a = ap.parse_args(argv)
    toks = [int(t) for t in a.tokens.split(",")]
    names = sorted({short(x.name) for x in mats(R.load(a.model, True))
                    if R.act_rounding(x.wtype) is not None})
    exact_trace, log = [], defaultdict(list)
    exact = forward(load(a.model, set(), log), toks, exact_trace)
    q_trace = []
    q = forward(load(a.model, set(names), log), toks, q_trace)

    print("1. per product: input error, output error (relative RMS, median / max), max/RMS")
    for n in names:
        v = np.array(log[n])
        print("  %-28s %4d  %.4f / %.4f   %.4f / %.4f   %.2f" % (
            n, len(v), np.median(v[:, 0]), v[:, 0].max(), np.median(v[:, 1]), v[:, 1].max(),
            np.median(v[:, 2])))
    print("2. per layer: mixer output, MoE output (relative RMS, median / max), routing changes")
    for il, ((linear, me, ye, se), (_, mq, yq, sq)) in enumerate(zip(exact_trace, q_trace)):
        em, ey = rel_rms(mq, me), rel_rms(yq, ye)
        moved = [p for p in range(len(toks)) if se[p] != sq[p]]
        print("  layer %d %-9s %.4f / %.4f   %.4f / %.4f   positions %s" % (
            il, "deltanet" if linear else "attention", np.median(em), em.max(),
            np.median(ey), ey.max(), moved or "none"))

    def row(label, lg):
        e = rel_max(lg, exact)
        same = int(np.sum(np.argmax(lg, axis=1) == np.argmax(exact, axis=1)))
        print("  %-36s median %.4f max %.4f (position %d) arg-max %d/%d" % (
            label, np.median(e), e.max(), int(np.argmax(e)), same, len(toks)))

    print("3. logits against the exact pass: largest error / largest logit")
    row("every product rounded", q)
    for n in names:
        row("only " + n, forward(load(a.model, {n}, log), toks, []))
    for n in names:
        row("all but " + n, forward(load(a.model, set(names) - {n}, log), toks, []))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
