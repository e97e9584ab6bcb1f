"""Generates the bailingmoe2 goldens in tests/reference/fixtures/bailingmoe2/ (deterministic).

    /usr/bin/python3 tests/reference/make_bailingmoe2_fixtures.py --lynx build/release/bin/lynx-moe

The weights are the `lynx-moe synth` shape tiny-bailingmoe2 (layer 0 dense, layer 1 routed
experts plus one shared expert of the expert width; sigmoid gating with selection bias, 3
experts per token within the best 2 of 4 groups, renormalized, routed scale 2.5; one fused
attn_qkv of 4 query and 2 key/value heads of 24, so head_dim x heads = 96 differs from
n_embd = 64; per-head q/k RMSNorm; NEOX rope on 12 of 24 dims), reduced to 2 layers, 8 experts
(2 per group) and a 300-token vocabulary, in F32 and Q8_0. The logits of every position come
from bailingmoe2_ref.py, which reads only the file.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "bailingmoe2")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
SHAPE = "tiny-bailingmoe2"
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
        subprocess.run([sys.executable, os.path.join(HERE, "bailingmoe2_ref.py"), g,
                        "--tokens", TOKENS, "--out", os.path.join(OUT, name + ".logits.f32")],
                       check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
