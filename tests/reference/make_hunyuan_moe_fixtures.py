"""Generates the hunyuan-moe goldens in tests/reference/fixtures/hunyuan-moe/ (deterministic).

    /usr/bin/python3 tests/reference/make_hunyuan_moe_fixtures.py --lynx build/release/bin/lynx-moe

The weights are the `lynx-moe synth` shape tiny-hunyuan-moe as it is (three MoE layers of 8
experts, 3 per token, softmax renormalized, one ungated shared MLP of 64 beside experts of 32;
4 query and 2 key/value heads of 16, so head_dim x heads = 64 differs from n_embd = 32; NEOX
rope then per-head q/k RMSNorm; rope base with NTK alpha 1000 folded in; tied embeddings;
320-token vocabulary), in F32 and Q8_0. The logits of every position come from
hunyuan_moe_ref.py, which reads only the file.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "hunyuan-moe")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128,300,5,319"
SHAPE = "tiny-hunyuan-moe"
TYPES = ["f32", "q8_0"]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--lynx", required=True)
    a = ap.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    for t in TYPES:
        name = "%s-%s" % (SHAPE, t)
        g = os.path.join(OUT, name + ".gguf")
        subprocess.run([a.lynx, "synth", "--shape", SHAPE, "--type", t, "-o", g],
                       check=True, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(HERE, "hunyuan_moe_ref.py"), g,
                        "--tokens", TOKENS, "--out", os.path.join(OUT, name + ".logits.f32")],
                       check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
