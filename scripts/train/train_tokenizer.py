#!/usr/bin/python3
"""Trains lynx-moe's byte-level BPE tokenizer on data/train.jsonl and encodes the splits.

Vocabulary: 256 byte tokens + N_MERGES merges + specials (<|endoftext|>) = 4096 by default.
Training counts pre-tokenized words (GPT-2 regex, see bpe.py) once, then merges greedily on
the word counts: each step takes the most frequent adjacent pair (ties: smaller (a, b) ids),
updating pair counts only for the words that contain it. Deterministic.

Writes data/tokenizer.json and data/{train,valid,test}.u16 (token ids, uint16 little-endian,
documents separated by <|endoftext|>), plus data/tokenizer_stats.json.
Usage: /usr/bin/python3 scripts/train/train_tokenizer.py [--vocab 4096] [--data data]
"""
import argparse
import collections
import heapq
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

SPECIALS = ["<|endoftext|>"]


def read_docs(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def train(word_counts, n_merges, log_every=500):
    words = [list(w.encode("utf-8")) for w in word_counts]
    counts = list(word_counts.values())
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for wi, (w, c) in enumerate(zip(words, counts)):
        for i in range(len(w) - 1):
            p = (w[i], w[i + 1])
            pair_count[p] += c
            where[p].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    t0 = time.time()
    while len(merges) < n_merges and heap:
        negc, p = heapq.heappop(heap)
        if pair_count.get(p, 0) != -negc or -negc <= 0:
            continue  # stale entry
        new_id = 256 + len(merges)
        merges.append(p)
        a, b = p
        changed = collections.Counter()
        for wi in where.pop(p, ()):
            w = words[wi]
            # quick reject (stale index)
            found = any(w[i] == a and w[i + 1] == b for i in range(len(w) - 1))
            if not found:
                continue
            c = counts[wi]
            for i in range(len(w) - 1):
                changed[(w[i], w[i + 1])] -= c
            out, i = [], 0
            while i < len(w):
                if i < len(w) - 1 and w[i] == a and w[i + 1] == b:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for i in range(len(out) - 1):
                q = (out[i], out[i + 1])
                changed[q] += c
                where[q].add(wi)
        for q, d in changed.items():
            if d == 0:
                continue
            pair_count[q] += d
            if pair_count[q] <= 0:
                del pair_count[q]
            else:
                heapq.heappush(heap, (-pair_count[q], q))
        pair_count.pop(p, None)
        if len(merges) % log_every == 0:
            print("  %d merges, last count %d, %.1fs" % (len(merges), -negc, time.time() - t0),
                  flush=True)
    return merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--data", default="data")
    args = ap.parse_args()
    t0 = time.time()
    wc = collections.Counter()
    n_bytes = 0
    for text in read_docs(os.path.join(args.data, "train.jsonl")):
        n_bytes += len(text.encode("utf-8"))
        wc.update(bpe.pretokenize(text))
    # deterministic order: by count descending, then the word
    word_counts = dict(sorted(wc.items(), key=lambda kv: (-kv[1], kv[0])))
    print("pre-tokenized %d bytes: %d words, %d distinct (%.1fs)"
          % (n_bytes, sum(wc.values()), len(wc), time.time() - t0), flush=True)
    n_merges = args.vocab - 256 - len(SPECIALS)
    merges = train(word_counts, n_merges)
    tok = bpe.Tokenizer(merges, SPECIALS)
    assert tok.n_vocab == args.vocab
    tok.save(os.path.join(args.data, "tokenizer.json"))
    print("trained %d merges (%.1fs)" % (len(merges), time.time() - t0), flush=True)
    eot = tok.special_ids["<|endoftext|>"]
    stats = {"vocab": tok.n_vocab, "merges": len(merges), "eot": eot}
    for split in ("train", "valid", "test"):
        ids, nb, nd = [], 0, 0
        for text in read_docs(os.path.join(args.data, split + ".jsonl")):
            ids.append(eot)
            ids.extend(tok.encode(text))
            nb += len(text.encode("utf-8"))
            nd += 1
        arr = np.array(ids, dtype="<u2")
        arr.tofile(os.path.join(args.data, split + ".u16"))
        stats[split] = {"docs": nd, "bytes": nb, "tokens": len(ids),
                        "bytes_per_token": nb / max(1, len(ids))}
        print("%s: %d docs, %d bytes -> %d tokens (%.2f bytes/token)"
              % (split, nd, nb, len(ids), nb / max(1, len(ids))), flush=True)
    with open(os.path.join(args.data, "tokenizer_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print("done in %.1fs" % (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
