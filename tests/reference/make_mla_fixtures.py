"""Generates the deepseek2 (MLA) goldens in tests/reference/fixtures/mla/ (deterministic).

    /usr/bin/python3 tests/reference/make_mla_fixtures.py --lynx build/release/bin/lynx-moe

The weights are `lynx-moe synth` shapes (tiny-deepseek-v2: no q compression, softmax gating;
tiny-deepseek-v3: q_lora, sigmoid with selection bias, group-limited top-k, routed scale),
reduced to 2 layers (one dense, one MoE), 8 experts and a 300-token vocabulary, Q8_0; the logits of every position come from
deepseek2_ref.py, which reads only the file (the decompressed MLA form, its own code path).

The YaRN variant adds DeepSeek-V2-Lite's rope.scaling keys (YARN below) to
tiny-deepseek-v2.gguf; only its logits are stored (tiny-deepseek-v2-yarn.logits.f32): the test
rebuilds the same file from the fixture with the same keys.

The temperature variant adds Mistral Small 4's YaRN keys and its llama_4_scaling_beta
(attention.temperature_scale) to tiny-deepseek-v3.gguf, with an original context of 4 (TEMP) so
that the query scale 1 + beta ln(1 + floor(p / 4)) is 1 at positions 0-3 and grows over 4-11;
beta 0.5 (the release: 0.1) so that the goldens tell it apart. Only its logits are stored
(tiny-deepseek-v3-temp.logits.f32); mla_families_test.cc rebuilds the file under mistral4.
"""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "mla")
TOKENS = "1,7,42,100,255,3,77,180,9,250,64,128"
SHAPES = ["tiny-deepseek-v2", "tiny-deepseek-v3"]
# DeepSeek-V2-Lite's config.json rope_scaling (factor 40, original_max_position_embeddings
# 4096, mscale_all_dim 0.707) as convert_hf_to_gguf.py writes it; mla_test.cc has the same.
YARN = [("deepseek2.rope.scaling.type", "yarn"),
        ("deepseek2.rope.scaling.factor", 40.0),
        ("deepseek2.rope.scaling.original_context_length", 4096),
        ("deepseek2.rope.scaling.yarn_log_multiplier", 0.0707)]

# Mistral Small 4's rope_parameters (factor 128, mscale_all_dim 1) with a short original context.
TEMP = [("deepseek2.rope.scaling.type", "yarn"),
        ("deepseek2.rope.scaling.factor", 128.0),
        ("deepseek2.rope.scaling.original_context_length", 4),
        ("deepseek2.rope.scaling.yarn_log_multiplier", 0.1),
        ("deepseek2.attention.temperature_scale", 0.5)]


def yarn_variant(src, logits, keys=YARN):
    g = gguf_np.read_gguf(src)
    kv = [(k, v) for k, v in g.kv.items() if k != "general.alignment"] + keys
    tensors = [(t.name, t.ne, t.type, t.raw) for t in g.tensors.values()]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "yarn.gguf")
        gguf_np.write_gguf(path, kv, tensors)
        subprocess.run([sys.executable, os.path.join(HERE, "deepseek2_ref.py"), path,
                        "--tokens", TOKENS, "--out", logits], check=True)


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
    yarn_variant(os.path.join(OUT, "tiny-deepseek-v2.gguf"),
                 os.path.join(OUT, "tiny-deepseek-v2-yarn.logits.f32"))
    yarn_variant(os.path.join(OUT, "tiny-deepseek-v3.gguf"),
                 os.path.join(OUT, "tiny-deepseek-v3-temp.logits.f32"), TEMP)
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(TOKENS + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
