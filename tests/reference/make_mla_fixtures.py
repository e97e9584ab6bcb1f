"""Generates the deepseek2 (MLA) goldens in tests/reference/fixtures/mla/ (deterministic).

    /usr/bin/python3 tests/reference/make_mla_fixtures.py --lynx build/release/bin/lynx-moe

The weights are `lynx-moe synth` shapes (tiny-deepseek-v2: no q compression, softmax gating;
tiny-deepseek-v3: q_lora, sigmoid with selection bias, group-limited top-k, routed scale),
reduced to 2 layers (one dense, one MoE), 8 experts and a 300-token vocabulary, Q8_0; the logits of every position come from
deepseek2_ref.py, which reads only the file (the decompressed MLA form, its own code path).
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "mla")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
SHAPES = ["tiny-deepseek-v2", "tiny-deepseek-v3"]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--lynx", required=True)
    a = ap.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    for s in SHAPES:
        g = os.path.join(OUT, s + ".gguf")
        subprocess.run([a.lynx, "synth", "--shape", s, "--layers", "2", "--experts", "8", "--vocab", "300",
                        "--type", "q8_0", "-o", g], check=True, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(HERE, "deepseek2_ref.py"), g,
                        "--tokens", TOKENS, "--out", os.path.join(OUT, s + ".logits.f32")],
                       check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
