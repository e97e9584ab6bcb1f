#!/usr/bin/python3
"""Rewrite a GGUF file's per-layer expert gate and up tensors (blk.N.ffn_gate_exps.weight,
blk.N.ffn_up_exps.weight, [n_embd x F x E] each) as one fused tensor blk.N.ffn_gate_up_exps.weight
[n_embd x 2F x E]: per expert its F gate rows, then its F up rows, the layout llama.cpp's
converter writes for checkpoints whose experts come fused (Gemma 4's experts.gate_up_proj).
`lynx-moe synth` writes the two tensors apart; ik_llama.cpp loads gemma4 only fused, so
scripts/peer-logits.sh compares a gemma4 synth file through this rewrite (lynx-moe reads both
layouts: the products are the same rows).

  /usr/bin/python3 scripts/fuse-gate-up.py IN.gguf OUT.gguf
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "reference"))
import gguf_np as g  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    f = g.read_gguf(sys.argv[1])
    out = []
    fused = 0
    for name, t in f.tensors.items():
        if name.endswith(".ffn_up_exps.weight") and \
                name.replace(".ffn_up_exps.", ".ffn_gate_exps.") in f.tensors:
            continue
        if name.endswith(".ffn_gate_exps.weight"):
            up = f.tensors.get(name.replace(".ffn_gate_exps.", ".ffn_up_exps."))
            if up is None or up.type != t.type or up.ne != t.ne or len(t.ne) != 3:
                sys.exit(f"{name}: no ffn_up_exps of the same type and shape beside it")
            n_embd, ff, n_exp = t.ne
            per = len(t.raw) // n_exp
            raw = b"".join(t.raw[e * per:(e + 1) * per] + up.raw[e * per:(e + 1) * per]
                           for e in range(n_exp))
            out.append((name.replace(".ffn_gate_exps.", ".ffn_gate_up_exps."),
                        [n_embd, 2 * ff, n_exp], t.type, raw))
            fused += 1
            continue
        out.append((name, t.ne, t.type, t.raw))
    kv = [(k, v) for k, v in f.kv.items()]
    g.write_gguf(sys.argv[2], kv, out)
    print(f"{sys.argv[2]}: {fused} layers fused")


if __name__ == "__main__":
    main()
