"""Generates the step35 goldens in tests/reference/fixtures/step35/ (deterministic).

    /usr/bin/python3 tests/reference/make_step35_fixtures.py --lynx build/release/bin/lynx-moe

The weights are the `lynx-moe synth` shape tiny-step35 (4 layers: full attention at 0 and 2
with 4 query heads and rope over 8 of 16 dims at base 5e6 divided by llama3-type rope_freqs,
sliding at 1 and 3 with 6 query heads, window 4 and whole-head rope at 1e4; 2 K/V heads; a
head-wise attention gate; layers 0-1 dense, 2-3 routed experts plus a shared expert, sigmoid
with selection bias, renormalized, times 3; SwiGLU clamps on layers 1-3), reduced to 8 experts
and a 300-token vocabulary, in F32 and Q8_0. The logits of every position come from
step35_ref.py, which reads only the file.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "step35")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
SHAPE = "tiny-step35"
TYPES = ["f32", "q8_0"]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--lynx", required=True)
    a = ap.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    for t in TYPES:
        name = "%s-%s" % (SHAPE, t)
        g = os.path.join(OUT, name + ".gguf")
        subprocess.run([a.lynx, "synth", "--shape", SHAPE, "--experts", "8",
                        "--vocab", "300", "--type", t, "-o", g],
                       check=True, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(HERE, "step35_ref.py"), g,
                        "--tokens", TOKENS, "--out", os.path.join(OUT, name + ".logits.f32")],
                       check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
