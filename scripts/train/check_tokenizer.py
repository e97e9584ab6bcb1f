#!/usr/bin/python3
"""Checks that the C++ tokenizer (`lynx-moe tokenize`) gives exactly the token ids of the
Python encoder (bpe.py) for the shipped models' vocabulary.

  /usr/bin/python3 scripts/train/check_tokenizer.py --model models/lynx-moe-64x8.gguf \
      --bin build/release/bin/lynx-moe [--docs 40] [--bytes 20000]

Texts: every data/eval document, --docs documents of data/train.jsonl (first --bytes bytes
each, evenly spaced), plus hand-written edge cases (contractions, Unicode letters/digits,
whitespace runs, non-ASCII spaces, control characters, invalid-UTF-8-free emoji).
The token strings/merges are read from the GGUF, so this also checks the exported vocabulary.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import bpe  # noqa: E402
import gguf_np as G  # noqa: E402

EDGE = [
    "Hello world! It's 2024, we'll see: they're 'quoted' don't I'd you've",
    "def f(x):\n    return x ** 2  \n\n\n\tdone\r\n",
    "Ünïcödé façade naïve — “quotes” ½ ² ٣ ४ 漢字 テスト 한국어",
    "tabs\t\tand  spaces   \u00a0nbsp\u2003em\u3000ideo\u2028ls\u0085nel",
    "emoji 🙂👍🏽 and math ∑∫√ ≠ ≤",
    "x  \n  y\n\n  \n",
    "a\x1cb\x1fc\x0bd\x0ce",
    "   leading and trailing   ",
    "'S 'T 'Re 's's''s 123abc abc123 1.5e-3",
]


def tokenizer_from_gguf(path):
    g = G.read_gguf(path)
    toks = g.get("tokenizer.ggml.tokens")
    merges = g.get("tokenizer.ggml.merges")
    index = {t: i for i, t in enumerate(toks)}
    pairs = []
    for m in merges:
        a, b = m.split(" ", 1)
        pairs.append((index[a], index[b]))
    specials = toks[256 + len(pairs):]
    tok = bpe.Tokenizer(pairs, specials)
    assert tok.token_strings() == toks, "vocabulary is not in bpe.py's id order"
    return tok


def cpp_ids(binary, model, text):
    with tempfile.NamedTemporaryFile("wb", delete=False, suffix=".txt") as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        out = subprocess.run([binary, "tokenize", "-m", model, "-f", path, "--ids-only",
                              "--no-bos"], check=True, capture_output=True).stdout.decode()
    finally:
        os.unlink(path)
    out = out.strip()
    return json.loads(out) if out else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", default="data")
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--bytes", type=int, default=20000)
    args = ap.parse_args()
    tok = tokenizer_from_gguf(args.model)
    texts = [("edge%d" % i, t) for i, t in enumerate(EDGE)]
    ed = os.path.join(args.data, "eval")
    for fn in sorted(os.listdir(ed)):
        texts.append((fn, open(os.path.join(ed, fn), encoding="utf-8").read()))
    with open(os.path.join(args.data, "train.jsonl"), encoding="utf-8") as f:
        train = [json.loads(l) for l in f]
    step = max(1, len(train) // max(1, args.docs))
    for d in train[::step][: args.docs]:
        texts.append((d["path"], d["text"][: args.bytes]))
    bad = 0
    n_tok = 0
    for name, text in texts:
        py = tok.encode(text)
        cc = cpp_ids(args.bin, args.model, text)
        n_tok += len(py)
        if py != cc:
            bad += 1
            i = next((j for j in range(min(len(py), len(cc))) if py[j] != cc[j]),
                     min(len(py), len(cc)))
            print("MISMATCH %s at token %d: python %s | c++ %s" %
                  (name, i, py[i:i + 8], cc[i:i + 8]))
        assert tok.decode_bytes(py) == text.encode("utf-8"), "python encoder is not lossless"
    print("%d texts, %d tokens: %d mismatches" % (len(texts), n_tok, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
