"""Generates the gemma4 goldens in tests/reference/fixtures/gemma4/ (deterministic).

    /usr/bin/python3 tests/reference/make_gemma4_fixtures.py --lynx build/release/bin/lynx-moe

The weights are the `lynx-moe synth` shape tiny-gemma4 (sliding layers with window 4 and
16-wide heads, 2 K/V heads, alternating with full layers with 32-wide heads, 1 K/V head whose
values are its keys, 4 of 16 rope pairs rotating; every layer a GeGLU MLP beside 16 experts,
4 per token; tied embeddings, logits capped at 10), reduced to 2 layers (one sliding, one
full), 8 experts and a 300-token vocabulary, in F32 and Q8_0. The logits of every position
come from gemma4_ref.py, which reads only the file.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "gemma4")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
SHAPE = "tiny-gemma4"
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
        subprocess.run([sys.executable, os.path.join(HERE, "gemma4_ref.py"), g,
                        "--tokens", TOKENS, "--out", os.path.join(OUT, name + ".logits.f32")],
                       check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
