"""Generates the minimax-m2 goldens in tests/reference/fixtures/minimax-m2/ (deterministic).

    /usr/bin/python3 tests/reference/make_minimax_m2_fixtures.py --lynx build/release/bin/lynx-moe

The weights are the `lynx-moe synth` shape tiny-minimax-m2 (every layer MoE, sigmoid gating
with selection bias, renormalized, no shared expert; RMSNorm over the whole q and k rows; 4
query and 2 key/value heads of 32, so head_dim x heads = 128 differs from n_embd = 64; rope on
16 of the 32 dims per head), reduced to 2 layers, 8 experts (4 per token) and a 300-token
vocabulary, in F32 and Q8_0. The logits of every position come from minimax_m2_ref.py, which
reads only the file.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "minimax-m2")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
SHAPE = "tiny-minimax-m2"
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
        subprocess.run([sys.executable, os.path.join(HERE, "minimax_m2_ref.py"), g,
                        "--tokens", TOKENS, "--out", os.path.join(OUT, name + ".logits.f32")],
                       check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
