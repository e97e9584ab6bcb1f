"""Fixtures of the ggml block types beyond F32/F16/BF16/Q8_0/Q4_0 (deterministic; seeded).

    /usr/bin/python3 tests/reference/make_type_fixtures.py [--out DIR]

Writes to tests/reference/fixtures/types/:

blocks.gguf: per type T, a tensor "T" of 8 rows of random blocks (random bytes: every
  bit pattern of quants and sub-scales, some NaN/Inf/subnormal super-block scales) and a
  tensor "T.f32" (F32) with its decode by types_np.py. tests/kernels/types_test.cc checks the
  engine's decode against it bit for bit (NaN against NaN).

<model>-<type>.gguf + .logits.f32, listed in goldens.json: a tiny llama MoE (n_embd 256, so
  that the 256-element super-blocks fit) whose matrices are random blocks of the type scaled
  to the std of a float model's matrices. Matrices whose row length is not a multiple of
  the type's block take a 32-element fallback type, as llama.cpp's quantizer falls back
  (never Q8_0/Q4_0). The logits are reference.py's float64 forward pass of the decoded
  weights, and the actq logits the same with the activations of every product rounded as
  ggml's vec_dot_type of its weight type (reference.VEC_DOT_TYPE), what the engine's integer
  path computes; tests/model/types_golden_test.cc compares.
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
import make_fixtures as MF  # noqa: E402
import reference  # noqa: E402
import types_np as T  # noqa: E402

TYPE_IDS = {name: tid for tid, (name, _, _) in T.TYPES.items()}
# Type ids of the 32-element fallbacks per super-block type (see the module docstring).
FALLBACK = {"q2_K": "q5_0", "q3_K": "q5_0", "q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q5_1",
            "q8_K": "q5_1", "iq4_xs": "iq4_nl"}

# Where each type keeps its super-block scale(s): (byte offset, "f16" | "f32" | "e8m0").
# Decoded values are linear in the f16/f32 fields (d and the min or dmin scale together), so
# scaling them scales the block; MXFP4's exponent moves it by powers of two.
SCALE_FIELDS = {
    "q4_1": [(0, "f16"), (2, "f16")], "q5_0": [(0, "f16")], "q5_1": [(0, "f16"), (2, "f16")],
    "q2_K": [(80, "f16"), (82, "f16")], "q3_K": [(108, "f16")],
    "q4_K": [(0, "f16"), (2, "f16")], "q5_K": [(0, "f16"), (2, "f16")], "q6_K": [(208, "f16")],
    "q8_K": [(0, "f32")], "iq4_nl": [(0, "f16")], "iq4_xs": [(0, "f16")],
    "mxfp4": [(0, "e8m0")],
}

CFG = dict(n_embd=256, n_head=4, n_head_kv=2, n_layer=1, n_vocab=64, ctx=256,
           rope_base=10000.0, n_expert=4, n_expert_used=2, n_ff=64, eps=1e-5, tied=False,
           head_dim=64)


def set_scales(blocks, name, value):
    """blocks: (nb, bytes) uint8. Sets every scale field to `value` (f16/f32) or, for e8m0,
    to the exponent of 2^value-ish."""
    for off, kind in SCALE_FIELDS[name]:
        if kind == "f16":
            blocks[:, off:off + 2] = np.full(len(blocks), value, np.float16).view(
                np.uint8).reshape(-1, 2)
        elif kind == "f32":
            blocks[:, off:off + 4] = np.full(len(blocks), value, "<f4").view(
                np.uint8).reshape(-1, 4)
        else:
            blocks[:, off] = int(np.clip(128 + np.round(np.log2(value)), 0, 255))


def random_matrix(rng, name, rows, cols, std):
    """Random blocks of type `name` for a [rows x cols] matrix whose decoded values have
    about the given std. Returns raw bytes."""
    tid = TYPE_IDS[name]
    _, per, nbytes = T.TYPES[tid]
    nb = rows * cols // per
    blocks = rng.integers(0, 256, size=(nb, nbytes), dtype=np.uint8)
    set_scales(blocks, name, 1.0)
    unit = T.DECODERS[tid](blocks.tobytes(), rows * cols)
    s = float(np.std(unit)) or 1.0
    # one shared scale per matrix: for the min-offset types also the mean moves with it
    set_scales(blocks, name, std / s)
    return blocks.tobytes()


def write_blocks(path, rng):
    tensors = []
    for tid, (name, per, nbytes) in sorted(T.TYPES.items()):
        rows = 8
        blocks = rng.integers(0, 256, size=(rows * 2, nbytes), dtype=np.uint8)
        # Keep half the super-block scales in a normal range; the rest stay random bits
        # (NaN, Inf, subnormals among them).
        for off, kind in SCALE_FIELDS[name]:
            if kind == "f16":
                v = rng.standard_normal(rows).astype(np.float16)
                blocks[:rows, off:off + 2] = v.view(np.uint8).reshape(-1, 2)
            elif kind == "f32":
                v = rng.standard_normal(rows).astype("<f4")
                blocks[:rows, off:off + 4] = v.view(np.uint8).reshape(-1, 4)
        # one +Inf and one NaN scale (MXFP4's exponent has neither)
        off, kind = SCALE_FIELDS[name][0]
        if kind == "f16":
            blocks[rows - 1, off:off + 2] = [0x00, 0x7C]
            blocks[rows - 2, off:off + 2] = [0x00, 0x7E]
        elif kind == "f32":
            blocks[rows - 1, off:off + 4] = [0x00, 0x00, 0x80, 0x7F]
            blocks[rows - 2, off:off + 4] = [0x00, 0x00, 0xC0, 0x7F]
        raw = blocks.tobytes()
        ne = [per * 2, rows]  # two blocks per row
        dec = G.decode_tensor(raw, tid, ne)
        tensors.append((name, ne, tid, raw))
        tensors.append((name + ".f32", ne, G.GGML_F32, dec.astype("<f4").tobytes()))
    data = G.build_gguf([("general.architecture", G.string("lynx-type-blocks"))], tensors)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def encode_model(weights, wtype, rng):
    out = []
    for name, arr, quantizable in weights:
        ne = list(reversed(arr.shape))
        if not (quantizable and arr.ndim >= 2):
            out.append((name, ne, G.GGML_F32, G.encode_tensor(arr, G.GGML_F32)))
            continue
        ty = wtype
        if ne[0] % T.TYPES[TYPE_IDS[wtype]][1] != 0:
            ty = FALLBACK[wtype]
        rows = int(np.prod(ne[1:]))
        raw = random_matrix(rng, ty, rows, ne[0], float(np.std(arr)))
        out.append((name, ne, TYPE_IDS[ty], raw))
    return out


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "fixtures", "types"))
    ap.add_argument("--blocks-only", action="store_true", help="only write blocks.gguf")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    total = write_blocks(os.path.join(args.out, "blocks.gguf"), np.random.default_rng(17))
    if args.blocks_only:
        return 0
    entries = []
    weights = MF.make_weights("llama", 1701, CFG)
    for ti, (tid, (wtype, _, _)) in enumerate(sorted(T.TYPES.items())):
        if wtype == "q8_K":  # an activation type: llama.cpp never stores weights in it
            continue
        fx = "llama-moe256-%s" % wtype
        rng = np.random.default_rng(1800 + ti)
        kv = MF.make_kv(fx, "llama", CFG, "f32")
        kv = [(k, v) for k, v in kv if k != "general.file_type"]
        data = G.build_gguf(kv, encode_model(weights, wtype, rng))
        gpath = os.path.join(args.out, fx + ".gguf")
        with open(gpath, "wb") as f:
            f.write(data)
        model = reference.load_model(gpath)
        toks, _ = MF.choose_tokens(model, 1900 + ti, CFG["n_vocab"], CFG["n_expert"])
        logits, routing = reference.forward(model, toks)
        raw = logits.astype("<f4").tobytes()
        with open(os.path.join(args.out, fx + ".logits.f32"), "wb") as f:
            f.write(raw)
        total += len(data) + len(raw)
        margin = min(r["margin"] for layer in routing for r in layer)
        entry = {
            "name": fx, "file": fx + ".gguf", "type": wtype, "tokens": toks,
            "n_vocab": model.n_vocab, "logits_file": fx + ".logits.f32",
            "gguf_sha256": hashlib.sha256(data).hexdigest(),
            "argmax": [int(i) for i in np.argmax(logits, axis=1)],
            "min_route_margin": round(margin, 6),
            "routing": [[sorted(r["ids"]) for r in layer] for layer in routing],
        }
        if TYPE_IDS[wtype] in reference.VEC_DOT_TYPE:
            # The engine's integer path rounds these products' activations (Q8_K).
            logits_q, routing_q = reference.forward(model, toks, act_quant=True)
            raw_q = logits_q.astype("<f4").tobytes()
            with open(os.path.join(args.out, fx + ".logits_actq.f32"), "wb") as f:
                f.write(raw_q)
            total += len(raw_q)
            entry.update({
                "logits_actq_file": fx + ".logits_actq.f32",
                "argmax_actq": [int(i) for i in np.argmax(logits_q, axis=1)],
                "routing_actq": [[sorted(r["ids"]) for r in layer] for layer in routing_q],
            })
        entries.append(entry)
        print("%-22s %7d bytes  margin %.4f" % (fx, len(data), margin))
    manifest = {
        "format": "lynx-moe type goldens v1",
        "generator": "tests/reference/make_type_fixtures.py",
        "logits_layout": "raw little-endian float32, [n_tokens][n_vocab] row-major",
        "about_logits_file": "exact: float64 forward of the decoded weights",
        "about_logits_actq_file": "the same with the activations of products with weight types "
                                  "the engine has integer kernels for rounded as ggml does "
                                  "(reference.VEC_DOT_TYPE: Q8_K for the K-quants and IQ4_XS, "
                                  "Q8_0 for the 32-element types)",
        "fixtures": entries,
    }
    text = json.dumps(manifest, indent=1) + "\n"
    with open(os.path.join(args.out, "goldens.json"), "w") as f:
        f.write(text)
    print("total %d bytes" % (total + len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
