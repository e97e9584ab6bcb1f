#!/usr/bin/env python3
"""Writes the validation documents as data/eval-valid/NNN_<name>.txt, cut like data/eval.

data/eval holds the test split, on which docs/evaluation.md reports every policy. Settings of
a policy (Lynx's window per layer, for one) should be chosen on other documents: this gives
`lynx-moe eval --data data/eval-valid` the validation split (never trained on either) in the
same form. Reads data/valid.jsonl (scripts/train/extract_data.py).

    /usr/bin/python3 scripts/train/valid_docs.py [--data data]
"""
import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extract_data import EVAL_BYTES, truncate_utf8  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data")
    args = ap.parse_args()
    out = os.path.join(args.data, "eval-valid")
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, "*.txt")):
        os.remove(old)
    n = 0
    with open(os.path.join(args.data, "valid.jsonl"), encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            name = re.sub(r"[^A-Za-z0-9._-]+", "_", d["path"].strip("/"))[-60:]
            with open(os.path.join(out, "%03d_%s.txt" % (n, name)), "w", encoding="utf-8") as g:
                g.write(truncate_utf8(d["text"], EVAL_BYTES))
            n += 1
    print("validation documents: %d in %s" % (n, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
