"""Generates the golden fixtures in tests/reference/fixtures/ (deterministic; seeded).

    /usr/bin/python3 tests/reference/make_fixtures.py [--out DIR] [--only NAME_PREFIX]

For each architecture (llama-moe, llama-dense, qwen2moe, qwen3moe, olmoe) one set of
float32 random weights is drawn, then written once per weight type (f32, f16, bf16, q8_0,
q4_0: 2D/3D weight matrices in that type; norms, biases, ffn_gate_inp and
ffn_gate_inp_shexp stay F32 as llama.cpp's quantizer keeps them). The golden logits are
computed by reference.py from the file as written, so quantization is part of the model.

For each fixture the 16-token sequence is chosen among seeded random candidates to maximize
the smallest router margin (gap between the k-th and (k+1)-th router logits over all
layers and positions), so that small numerical differences in an engine do not flip the
expert choice. The margin is recorded in the manifest.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np as G  # noqa: E402
import reference  # noqa: E402

N_TOKENS = 16
N_CANDIDATES = 400         # token sequences tried per fixture
N_FINALISTS = 16           # best candidates re-scored with activation rounding
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0"]

COMMON = dict(n_embd=64, n_head=4, n_head_kv=2, n_layer=2, n_vocab=128, ctx=256,
              rope_base=10000.0)

ARCHS = [
    # name, gguf arch, seed, extra settings
    ("llama-moe", "llama", 1001, dict(
        n_expert=8, n_expert_used=2, n_ff=32, eps=1e-5, tied=False, head_dim=16)),
    ("llama-dense", "llama", 1002, dict(
        n_expert=0, n_expert_used=0, n_ff=64, eps=1e-5, tied=True, head_dim=16)),
    ("qwen2moe", "qwen2moe", 1003, dict(
        n_expert=8, n_expert_used=2, n_ff=128, n_ff_exp=32, n_ff_shexp=64, eps=1e-6,
        tied=False, head_dim=16, bias=True, alignment=64)),
    ("qwen3moe", "qwen3moe", 1004, dict(
        n_expert=8, n_expert_used=2, n_ff=128, n_ff_exp=32, eps=1e-6, tied=True,
        head_dim=32, key_length=32)),
    ("olmoe", "olmoe", 1005, dict(
        n_expert=16, n_expert_used=4, n_ff=32, eps=1e-5, tied=False, head_dim=16)),
]


def make_weights(arch, seed, c):
    """Returns an ordered list of (name, float32 numpy array in reversed-ne shape, quantizable)."""
    rng = np.random.default_rng(seed)
    E, hd = c["n_embd"], c["head_dim"]
    nq, nkv = c["n_head"] * hd, c["n_head_kv"] * hd
    V = c["n_vocab"]

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def lin(out_dim, in_dim, gain=1.0):
        return normal((out_dim, in_dim), gain / np.sqrt(in_dim))

    def normw(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = []
    # tied models reuse token_embd as the output matrix: scale it for logits of std ~2
    t.append(("token_embd.weight", normal((V, E), 0.25 if c["tied"] else 1.0), True))
    for i in range(c["n_layer"]):
        p = "blk.%d." % i
        t.append((p + "attn_norm.weight", normw(E), False))
        t.append((p + "attn_q.weight", lin(nq, E), True))
        t.append((p + "attn_k.weight", lin(nkv, E), True))
        t.append((p + "attn_v.weight", lin(nkv, E), True))
        if c.get("bias"):
            t.append((p + "attn_q.bias", normal(nq, 0.5), False))
            t.append((p + "attn_k.bias", normal(nkv, 0.5), False))
            t.append((p + "attn_v.bias", normal(nkv, 0.5), False))
        if arch == "qwen3moe":
            t.append((p + "attn_q_norm.weight", normw(hd), False))
            t.append((p + "attn_k_norm.weight", normw(hd), False))
        if arch == "olmoe":
            t.append((p + "attn_q_norm.weight", normw(nq), False))
            t.append((p + "attn_k_norm.weight", normw(nkv), False))
        t.append((p + "attn_output.weight", lin(E, nq), True))
        t.append((p + "ffn_norm.weight", normw(E), False))
        if c["n_expert"] == 0:
            F = c["n_ff"]
            t.append((p + "ffn_gate.weight", lin(F, E), True))
            t.append((p + "ffn_up.weight", lin(F, E), True))
            t.append((p + "ffn_down.weight", lin(E, F), True))
            continue
        X = c["n_expert"]
        F = c.get("n_ff_exp", c["n_ff"])
        # router logits with std ~2 (input is RMS-normalized, rms ~1)
        t.append((p + "ffn_gate_inp.weight", normal((X, E), 2.0 / np.sqrt(E)), False))
        t.append((p + "ffn_gate_exps.weight", normal((X, F, E), 1.0 / np.sqrt(E)), True))
        t.append((p + "ffn_up_exps.weight", normal((X, F, E), 1.0 / np.sqrt(E)), True))
        t.append((p + "ffn_down_exps.weight", normal((X, E, F), 1.0 / np.sqrt(F)), True))
        if arch == "qwen2moe":
            S = c["n_ff_shexp"]
            t.append((p + "ffn_gate_inp_shexp.weight", normal(E, 1.0 / np.sqrt(E)), False))
            t.append((p + "ffn_gate_shexp.weight", lin(S, E), True))
            t.append((p + "ffn_up_shexp.weight", lin(S, E), True))
            t.append((p + "ffn_down_shexp.weight", lin(E, S), True))
    t.append(("output_norm.weight", normw(E), False))
    if not c["tied"]:
        t.append(("output.weight", lin(V, E, gain=2.0), True))
    return t


def make_kv(name, arch, c, wtype):
    a = arch + "."
    kv = [
        ("general.architecture", G.string(arch)),
        ("general.name", G.string("lynx-ref-" + name)),
        (a + "context_length", G.u32(c["ctx"])),
        (a + "embedding_length", G.u32(c["n_embd"])),
        (a + "block_count", G.u32(c["n_layer"])),
        (a + "feed_forward_length", G.u32(c["n_ff"])),
        (a + "attention.head_count", G.u32(c["n_head"])),
        (a + "attention.head_count_kv", G.u32(c["n_head_kv"])),
        (a + "attention.layer_norm_rms_epsilon", G.f32(c["eps"])),
        (a + "rope.freq_base", G.f32(c["rope_base"])),
        (a + "rope.dimension_count", G.u32(c["head_dim"])),
    ]
    if "key_length" in c:
        kv.append((a + "attention.key_length", G.u32(c["key_length"])))
        kv.append((a + "attention.value_length", G.u32(c["key_length"])))
    if c["n_expert"]:
        kv.append((a + "expert_count", G.u32(c["n_expert"])))
        kv.append((a + "expert_used_count", G.u32(c["n_expert_used"])))
    if "n_ff_exp" in c:
        kv.append((a + "expert_feed_forward_length", G.u32(c["n_ff_exp"])))
    if "n_ff_shexp" in c:
        kv.append((a + "expert_shared_feed_forward_length", G.u32(c["n_ff_shexp"])))
    kv.append(("general.file_type", G.u32(FILE_TYPE_OF[wtype])))
    return kv


# llama_ftype values for general.file_type (ALL_F32=0, MOSTLY_F16=1, MOSTLY_Q4_0=2,
# MOSTLY_Q8_0=7, MOSTLY_BF16=32)
FILE_TYPE_OF = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}


def encode(weights, wtype):
    out = []
    gtype = G.TYPE_BY_NAME[wtype]
    for name, arr, quantizable in weights:
        ty = gtype if (quantizable and arr.ndim >= 2) else G.GGML_F32
        ne = list(reversed(arr.shape))
        out.append((name, ne, ty, G.encode_tensor(arr, ty)))
    return out


def choose_tokens(model, seed, n_vocab, n_expert):
    """Seeded candidates; keeps the one whose smallest router margin, over both the exact
    and the activation-rounded computation, is largest."""
    rng = np.random.default_rng(seed)
    cands = []
    for cand in range(N_CANDIDATES):
        toks = [int(t) for t in rng.integers(0, n_vocab, N_TOKENS)]
        if n_expert == 0:
            return toks, 1
        _, margin, _ = reference.forward_fast(model, toks)
        cands.append((-margin, cand, toks))
    cands.sort()
    best = None
    for neg, cand, toks in cands[:N_FINALISTS]:
        _, margin_q, _ = reference.forward_fast(model, toks, act_quant=True)
        score = min(-neg, margin_q)
        if best is None or score > best[0]:
            best = (score, toks)
    return best[1], N_CANDIDATES


def fmt_json_fixture(d):
    lines = []
    for k, v in d.items():
        lines.append("   %s: %s" % (json.dumps(k), json.dumps(v, separators=(",", ":"))))
    return "  {\n" + ",\n".join(lines) + "\n  }"


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "fixtures"))
    ap.add_argument("--only", default="")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    entries = []
    total = 0
    for ai, (name, arch, seed, extra) in enumerate(ARCHS):
        c = dict(COMMON)
        c.update(extra)
        weights = make_weights(arch, seed, c)
        for ti, wtype in enumerate(TYPES):
            fx = "%s-%s" % (name, wtype)
            if args.only and not fx.startswith(args.only):
                continue
            kv = make_kv(name, arch, c, wtype)
            tensors = encode(weights, wtype)
            data = G.build_gguf(kv, tensors, alignment=c.get("alignment"))
            gpath = os.path.join(args.out, fx + ".gguf")
            with open(gpath, "wb") as f:
                f.write(data)
            model = reference.load_model(gpath)
            toks, tries = choose_tokens(model, seed * 100 + ti, c["n_vocab"], c["n_expert"])
            logits, routing = reference.forward(model, toks)
            logits_q, routing_q = reference.forward(model, toks, act_quant=True)
            # cross-check the plain forward against the vectorized one (both modes)
            for aq, ref_l in ((False, logits), (True, logits_q)):
                fast, _, _ = reference.forward_fast(model, toks, act_quant=aq)
                err = float(np.max(np.abs(fast - ref_l)))
                assert err < 1e-9, "%s: plain vs vectorized forward differ by %g" % (fx, err)
            raw = logits.astype("<f4").tobytes()
            raw_q = logits_q.astype("<f4").tobytes()
            with open(os.path.join(args.out, fx + ".logits.f32"), "wb") as f:
                f.write(raw)
            with open(os.path.join(args.out, fx + ".logits_actq.f32"), "wb") as f:
                f.write(raw_q)
            total += len(data) + len(raw) + len(raw_q)
            moe_layers = [r for r in routing if r]
            margin = min((r["margin"] for layer in routing for r in layer), default=None)
            margin_q = min((r["margin"] for layer in routing_q for r in layer), default=None)
            entry = {
                "name": fx,
                "file": fx + ".gguf",
                "arch": arch,
                "model": name,
                "type": wtype,
                "tokens": toks,
                "n_tokens": len(toks),
                "n_vocab": model.n_vocab,
                "logits_file": fx + ".logits.f32",
                "n_layer": model.n_layer,
                "n_embd": model.n_embd,
                "head_dim": model.head_dim,
                "n_expert": model.n_expert,
                "n_expert_used": model.n_expert_used,
                "norm_topk": bool(model.norm_topk) if model.n_expert else None,
                "rope": model.rope,
                "tied_output": "output.weight" not in model.gguf.tensors,
                "alignment": model.gguf.alignment,
                "gguf_sha256": hashlib.sha256(data).hexdigest(),
                "logits_sha256": hashlib.sha256(raw).hexdigest(),
                "argmax": [int(i) for i in np.argmax(logits, axis=1)],
                "min_route_margin": (round(margin, 6) if moe_layers else None),
                "logits_actq_file": fx + ".logits_actq.f32",
                "logits_actq_sha256": hashlib.sha256(raw_q).hexdigest(),
                "argmax_actq": [int(i) for i in np.argmax(logits_q, axis=1)],
                "min_route_margin_actq": (round(margin_q, 6) if moe_layers else None),
                "max_abs_exact_vs_actq": float("%.4g" % np.max(np.abs(logits - logits_q))),
                # routing[layer][pos] = the chosen expert ids, ascending (a set: the order
                # of the k experts does not matter); routing_weights aligned with them
                "routing": [[sorted(r["ids"]) for r in layer] for layer in routing],
                "routing_weights": [[[float("%.7g" % w) for _, w in sorted(zip(r["ids"],
                                                                                r["weights"]))]
                                     for r in layer] for layer in routing],
                # router-logit gap between the k-th and (k+1)-th expert
                "routing_margins": [[float("%.5g" % r["margin"]) for r in layer]
                                    for layer in routing],
                "routing_actq": [[sorted(r["ids"]) for r in layer] for layer in routing_q],
            }
            entries.append(entry)
            print("%-18s %7d bytes  margin %-7s actq %-7s  exact-vs-actq %.3g  %s"
                  % (fx, len(data), ("%.4f" % margin) if moe_layers else "-",
                     ("%.4f" % margin_q) if moe_layers else "-",
                     entry["max_abs_exact_vs_actq"],
                     "same experts" if entry["routing"] == entry["routing_actq"]
                     else "EXPERTS DIFFER"))
    if not args.only:
        manifest = {
            "format": "lynx-moe reference goldens v1",
            "generator": "tests/reference/make_fixtures.py",
            "logits_layout": "raw little-endian float32, [n_tokens][n_vocab] row-major; "
                             "row p = logits after tokens[0..p] at positions 0..p",
            "about_logits_file": "exact: float64 forward of the dequantized weights",
            "about_logits_actq_file": "as ggml computes: each product with a non-F32 weight first "
                                "rounds its activations to the weight's vec_dot_type "
                                "(F16->F16, BF16->BF16, Q8_0/Q4_0->Q8_0 blocks)",
            "fixtures": entries,
        }
        head = {k: v for k, v in manifest.items() if k != "fixtures"}
        text = "{\n" + ",\n".join(" %s: %s" % (json.dumps(k), json.dumps(v))
                                  for k, v in head.items())
        text += ',\n "fixtures": [\n' + ",\n".join(fmt_json_fixture(e) for e in entries)
        text += "\n ]\n}\n"
        json.loads(text)  # well-formed
        with open(os.path.join(args.out, "goldens.json"), "w") as f:
            f.write(text)
        total += len(text)
    print("total %d bytes" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
