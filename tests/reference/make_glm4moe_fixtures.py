"""Generates the glm4moe goldens in tests/reference/fixtures/glm4moe/ (deterministic).

    /usr/bin/python3 tests/reference/make_glm4moe_fixtures.py --lynx build/release/bin/lynx-moe

The weights are `lynx-moe synth` shapes (tiny-glm4moe: GLM-4.5-Air-like, no q/k norm, routed
scale 1; tiny-glm4moe-qknorm: GLM-4.5-like, per-head q/k norms, routed scale 2.5; both with
q/k/v biases, rope on 32 of 64 dims per head, sigmoid gating with selection bias,
renormalized, one shared expert), reduced to 2 layers (one dense, one MoE) plus the shapes'
next-token-prediction block, 8 experts and a 300-token vocabulary, Q8_0. The logits of every
position come from glm4moe_ref.py, which reads only the file.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "glm4moe")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
SHAPES = ["tiny-glm4moe", "tiny-glm4moe-qknorm"]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--lynx", required=True)
    a = ap.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    for s in SHAPES:
        g = os.path.join(OUT, s + ".gguf")
        subprocess.run([a.lynx, "synth", "--shape", s, "--layers", "2", "--experts", "8",
                        "--vocab", "300", "--type", "q8_0", "-o", g],
                       check=True, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(HERE, "glm4moe_ref.py"), g,
                        "--tokens", TOKENS, "--out", os.path.join(OUT, s + ".logits.f32")],
                       check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
