"""Generates the qwen3vlmoe goldens in tests/reference/fixtures/qwen3vlmoe/ (deterministic).

    /usr/bin/python3 tests/reference/make_qwen3vlmoe_fixtures.py --lynx build/release/bin/lynx-moe

The weights are the `lynx-moe synth` shape tiny-qwen3vlmoe (every layer routed experts, softmax
top-4 renormalized; per-head q/k RMSNorm; 4 query and 2 key/value heads of 32, so head_dim x
heads = 128 differs from n_embd = 64; rope.dimension_sections [6, 5, 5, 0]), reduced to 2
layers, 8 experts and a 300-token vocabulary, in F32 and Q8_0. The logits of every position come
from qwen3vlmoe_ref.py (Hugging Face's interleaved M-RoPE with text positions), which reads only
the file.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "qwen3vlmoe")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
SHAPE = "tiny-qwen3vlmoe"
TYPES = ["f32", "q8_0"]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--lynx", required=True)
    a = ap.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    for t in TYPES:
        name = "%s-%s" % (SHAPE, t)
        g = os.path.join(OUT, name + ".gguf")
        subprocess.run([a.lynx, "synth", "--shape", SHAPE, "--layers", "2", "--experts", "8",
                        "--vocab", "300", "--type", t, "-o", g],
                       check=True, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(HERE, "qwen3vlmoe_ref.py"), g,
                        "--tokens", TOKENS, "--out", os.path.join(OUT, name + ".logits.f32")],
                       check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
