"""Generates the gpt-oss goldens in tests/reference/fixtures/gpt-oss/ (deterministic).

    /usr/bin/python3 tests/reference/make_gpt_oss_fixtures.py --lynx build/release/bin/lynx-moe

The weights are the `lynx-moe synth` shape tiny-gpt-oss (2 layers: layer 0 a sliding window
of 4 positions, layer 1 full; 16 experts, 4 per token; YaRN factor 32; a 300-token
vocabulary) twice: as the released files store it (MXFP4 experts, Q8_0 elsewhere), and with
F32 matrices and F16 experts on request (8 experts, to keep the file small).
The logits of every position come from gpt_oss_ref.py, which reads only the file. The 12
tokens reach past the window, so the mask is exercised. The 80 tokens of LONG (logits of
tiny-gpt-oss.gguf in tiny-gpt-oss.long.logits.f32) reach past the sliding-window layer's ring
of KV rows (window - 1 + 64 for decode), so the ring's wrap-around is checked too.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "gpt-oss")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
LONG = ",".join(str((i * 37 + 11) % 300) for i in range(80))
VARIANTS = [("tiny-gpt-oss", ["--type", "q8_0"]),
            ("tiny-gpt-oss-f16-experts", ["--type", "f32", "--expert-type", "f16", "--experts", "8"])]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--lynx", required=True)
    a = ap.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    for name, args in VARIANTS:
        g = os.path.join(OUT, name + ".gguf")
        subprocess.run([a.lynx, "synth", "--shape", "tiny-gpt-oss", "--vocab", "300"] + args +
                       ["-o", g], check=True, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(HERE, "gpt_oss_ref.py"), g,
                        "--tokens", TOKENS, "--out", os.path.join(OUT, name + ".logits.f32")],
                       check=True)
    subprocess.run([sys.executable, os.path.join(HERE, "gpt_oss_ref.py"),
                    os.path.join(OUT, "tiny-gpt-oss.gguf"), "--tokens", LONG,
                    "--out", os.path.join(OUT, "tiny-gpt-oss.long.logits.f32")], check=True)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    with open(os.path.join(OUT, "tokens_long.txt"), "w") as f:
        f.write(LONG + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
