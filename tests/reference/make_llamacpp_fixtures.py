"""Fixtures written by llama.cpp's own quantizer, with the NumPy reference's logits.

    /usr/bin/python3 tests/reference/make_llamacpp_fixtures.py \
        --llama-quantize /path/to/llama.cpp/build/bin/llama-quantize [--out DIR]

Writes a tiny llama MoE in F32 (n_embd 256 so that the 256-element super-blocks fit the
attention and gate/up rows; expert width 128, so ffn_down takes llama-quantize's 32-element
fallback; 4 experts, 2 used, 1 layer, 64-token vocabulary, seeded), has llama-quantize
(built beside the project; nothing here builds it) write it as Q4_K_M, Q6_K, IQ4_XS and Q5_0,
and stores each file (llama-<mix>.gguf) with reference.py's float64 logits of its decoded
weights (.logits.f32; .logits_actq.f32 with activations rounded to Q8_0 before products
with Q8_0/Q4_0 weights) and goldens.json (tokens, arg-max, routing, the llama.cpp commit when
known). tests/model/llamacpp_fixtures_test.cc runs the engine on them. The F32 source is not
kept (rebuilt by this script from its seed).
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np as G  # noqa: E402
import make_fixtures as MF  # noqa: E402
import reference  # noqa: E402

CFG = dict(n_embd=256, n_head=4, n_head_kv=2, n_layer=1, n_vocab=64, ctx=256,
           rope_base=10000.0, n_expert=4, n_expert_used=2, n_ff=128, eps=1e-5, tied=False,
           head_dim=64)
MIXES = ["Q4_K_M", "Q6_K", "IQ4_XS", "Q5_0"]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-quantize", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "fixtures", "llamacpp"))
    ap.add_argument("--llama-cpp-version", default="",
                    help="what to record as llama.cpp's version when its tree has no git metadata")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    qdir = os.path.dirname(os.path.abspath(args.llama_quantize))
    env = dict(os.environ, LD_LIBRARY_PATH=qdir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    commit = subprocess.run(["git", "-C", qdir, "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or args.llama_cpp_version or "unknown"
    weights = MF.make_weights("llama", 2301, CFG)
    entries, total = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "llama-f32.gguf")
        G.write_gguf(src, MF.make_kv("llamacpp-src", "llama", CFG, "f32"),
                     MF.encode(weights, "f32"))
        for i, mix in enumerate(MIXES):
            fx = "llama-%s" % mix.lower()
            out = os.path.join(args.out, fx + ".gguf")
            subprocess.run([args.llama_quantize, src, out, mix, "1"], check=True, env=env,
                           capture_output=True)
            with open(out, "rb") as f:
                data = f.read()
            model = reference.load_model(out)
            toks, _ = MF.choose_tokens(model, 2400 + i, CFG["n_vocab"], CFG["n_expert"])
            logits, routing = reference.forward(model, toks)
            raw = logits.astype("<f4").tobytes()
            with open(os.path.join(args.out, fx + ".logits.f32"), "wb") as f:
                f.write(raw)
            # Activations rounded to Q8_0 before products with Q8_0/Q4_0 weights (llama-quantize
            # writes Q8_0 where a Q6_K row falls back), as the engine's default path does.
            logits_q, _ = reference.forward(model, toks, act_quant=True)
            raw_q = logits_q.astype("<f4").tobytes()
            with open(os.path.join(args.out, fx + ".logits_actq.f32"), "wb") as f:
                f.write(raw_q)
            total += len(data) + len(raw) + len(raw_q)
            g = G.read_gguf(out)
            types = sorted({G.TYPE_NAMES.get(t.type, str(t.type)) for t in g.tensors.values()})
            entries.append({
                "name": fx, "file": fx + ".gguf", "mix": mix, "tokens": toks,
                "n_vocab": model.n_vocab, "logits_file": fx + ".logits.f32",
                "logits_actq_file": fx + ".logits_actq.f32",
                "gguf_sha256": hashlib.sha256(data).hexdigest(), "tensor_types": types,
                "argmax": [int(i) for i in np.argmax(logits, axis=1)],
                "routing": [[sorted(r["ids"]) for r in layer] for layer in routing],
            })
            print("%-18s %7d bytes  types %s" % (fx, len(data), types))
    manifest = {
        "format": "lynx-moe llama.cpp-quantized goldens v1",
        "generator": "tests/reference/make_llamacpp_fixtures.py",
        "made_with": "llama-quantize SRC OUT MIX 1 (llama.cpp %s)" % commit,
        "logits_layout": "raw little-endian float32, [n_tokens][n_vocab] row-major",
        "about_logits_file": "exact: float64 forward of the decoded weights",
        "fixtures": entries,
    }
    text = json.dumps(manifest, indent=1) + "\n"
    with open(os.path.join(args.out, "goldens.json"), "w") as f:
        f.write(text)
    print("total %d bytes" % (total + len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
