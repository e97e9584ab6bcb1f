#!/usr/bin/python3
"""Training / held-out text for lynx-moe's small MoE models, from files Debian ships.

Sources (all read-only, from installed Debian packages):
  code  : the Python 3.11 standard library, /usr/lib/python3.11/**/*.py (package
          libpython3.11-stdlib), without test suites and site/dist-packages;
  prose : GNU manuals (/usr/share/info/*.info*.gz: coreutils, sed, grep, find, gettext, ...),
          /usr/share/common-licenses/*, Node.js API documentation in Markdown
          (/usr/share/doc/nodejs/api/*.md, package nodejs-doc/nodejs), and README / *.txt /
          *.md / *.rst files under /usr/share/doc (changelogs and copyright files excluded).
Which prose files exist depends on the packages installed; the stdlib part does not. The
manifest (data/manifest.tsv) lists every document with its split, size and SHA-256.

Split by document, deterministically: bucket = sha256("lynx-moe-split:" + path) mod 100;
buckets 0..83 train, 84..89 valid, 90..99 test. Each document is cleaned (control
characters other than tab/newline removed, CRLF -> LF) and truncated (200 KB; 100 KB for
Node.js pages, 40 KB for other /usr/share/doc files); prose sources have byte budgets.

Writes (data/ is git-ignored):
  data/{train,valid,test}.jsonl   one {"path":..., "kind": "code"|"prose", "text":...} per line
  data/eval/NNN_<name>.txt        each test document, trimmed at a line end to <= EVAL_BYTES
  data/manifest.tsv               split, kind, bytes, sha256, path
Usage: /usr/bin/python3 scripts/train/extract_data.py [--out data]
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import sys

MAX_DOC = 200_000      # bytes kept per document
EVAL_BYTES = 4096      # bytes per data/eval document
MIN_DOC = 200          # smaller documents are skipped
# Prose budgets per source (bytes; code is kept whole): (name, budget, per-document cap)
PROSE_SOURCES = (("info", 2_500_000, MAX_DOC), ("licenses", 1_000_000, MAX_DOC),
                 ("nodejs", 1_500_000, 100_000), ("doc", 2_000_000, 40_000))

_CTRL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def clean(text):
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CTRL.sub("", text)


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def code_files():
    root = "/usr/lib/python3.11"
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in ("test", "tests", "idle_test", "__pycache__",
                                          "site-packages", "dist-packages")
                             and not d.startswith("config-"))
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                out.append(os.path.join(dirpath, fn))
    return out


def prose_files(source):
    if source == "info":
        return sorted(glob.glob("/usr/share/info/*.info*.gz"))
    if source == "licenses":
        return sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p))
    if source == "nodejs":
        return sorted(glob.glob("/usr/share/doc/nodejs/api/*.md"))
    pat = re.compile(r"^(readme|.*\.txt|.*\.md|.*\.rst)(\.gz)?$", re.I)
    skip = re.compile(r"changelog|copyright|news|history|/nodejs/", re.I)
    more = []
    for dirpath, dirnames, filenames in os.walk("/usr/share/doc"):
        dirnames.sort()
        for fn in sorted(filenames):
            p = os.path.join(dirpath, fn)
            if pat.match(fn) and not skip.search(p) and os.path.isfile(p) \
                    and not os.path.islink(p):
                more.append(p)
    return more


def bucket(path):
    h = hashlib.sha256(("lynx-moe-split:" + path).encode()).digest()
    return int.from_bytes(h[:8], "little") % 100


def split_of(path):
    b = bucket(path)
    return "train" if b < 84 else ("valid" if b < 90 else "test")


def truncate_utf8(text, nbytes, at_line=True):
    b = text.encode("utf-8")
    if len(b) <= nbytes:
        return text
    cut = b[:nbytes].decode("utf-8", errors="ignore")
    if at_line and "\n" in cut:
        cut = cut[: cut.rindex("\n") + 1]
    return cut


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="data")
    args = ap.parse_args()
    docs = []
    seen = set()
    groups = [("code", code_files(), None, MAX_DOC)]
    groups += [("prose", prose_files(src), budget, cap) for src, budget, cap in PROSE_SOURCES]
    for kind, files, budget, cap in groups:
        for p in files:
            text = read_text(p)
            if text is None:
                continue
            text = truncate_utf8(clean(text), cap)
            if len(text.encode("utf-8")) < MIN_DOC:
                continue
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if digest in seen:        # identical files shipped twice (licenses, READMEs)
                continue
            if budget is not None:
                n = len(text.encode("utf-8"))
                if n > budget:
                    continue
                budget -= n
            seen.add(digest)
            docs.append((p, kind, text, digest))
    os.makedirs(os.path.join(args.out, "eval"), exist_ok=True)
    for old in glob.glob(os.path.join(args.out, "eval", "*.txt")):
        os.remove(old)
    outs = {s: open(os.path.join(args.out, s + ".jsonl"), "w", encoding="utf-8")
            for s in ("train", "valid", "test")}
    stats = {}
    n_eval = 0
    with open(os.path.join(args.out, "manifest.tsv"), "w", encoding="utf-8") as man:
        man.write("split\tkind\tbytes\tsha256\tpath\n")
        for p, kind, text, digest in docs:
            s = split_of(p)
            outs[s].write(json.dumps({"path": p, "kind": kind, "text": text}) + "\n")
            nb = len(text.encode("utf-8"))
            man.write("%s\t%s\t%d\t%s\t%s\n" % (s, kind, nb, digest, p))
            st = stats.setdefault((s, kind), [0, 0])
            st[0] += 1
            st[1] += nb
            if s == "test":
                name = re.sub(r"[^A-Za-z0-9._-]+", "_", p.strip("/"))[-60:]
                short = truncate_utf8(text, EVAL_BYTES)
                with open(os.path.join(args.out, "eval", "%03d_%s.txt" % (n_eval, name)),
                          "w", encoding="utf-8") as f:
                    f.write(short)
                n_eval += 1
    for f in outs.values():
        f.close()
    for (s, kind), (n, nb) in sorted(stats.items()):
        print("%-5s %-5s %5d docs %10d bytes" % (s, kind, n, nb))
    print("eval documents: %d in %s" % (n_eval, os.path.join(args.out, "eval")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
