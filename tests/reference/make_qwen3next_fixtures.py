"""Generates the qwen3next / qwen35moe goldens in tests/reference/fixtures/qwen3next/
(deterministic).

    /usr/bin/python3 tests/reference/make_qwen3next_fixtures.py --lynx build/release/bin/lynx-moe

The weights are the `lynx-moe synth` shapes tiny-qwen3next (in F32 and Q8_0) and
tiny-qwen35moe (F32): 4 layers, three Gated DeltaNet (2 key heads and 4 value heads of 8, a
conv of 4 taps) then one gated attention layer (4 query / 2 K/V heads of 16, rope on 8 dims),
8 experts, 3 per token, a gated shared expert, a 300-token vocabulary. The logits of every
position come from qwen3next_ref.py, which reads only the file; for the Q8_0 file also with
--act-quant (NAME.actq.logits.f32: activations rounded to Q8_0 blocks before every Q8_0
product, what the engine's default integer path computes).
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "qwen3next")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
FILES = [("tiny-qwen3next", "f32"), ("tiny-qwen3next", "q8_0"), ("tiny-qwen35moe", "f32")]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--lynx", required=True)
    a = ap.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    for shape, t in FILES:
        name = "%s-%s" % (shape, t)
        g = os.path.join(OUT, name + ".gguf")
        subprocess.run([a.lynx, "synth", "--shape", shape, "--type", t, "-o", g],
                       check=True, stderr=subprocess.DEVNULL)
        ref = [sys.executable, os.path.join(HERE, "qwen3next_ref.py"), g, "--tokens", TOKENS]
        subprocess.run(ref + ["--out", os.path.join(OUT, name + ".logits.f32")], check=True)
        if t != "f32":
            subprocess.run(ref + ["--act-quant", "--out",
                                  os.path.join(OUT, name + ".actq.logits.f32")], check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
