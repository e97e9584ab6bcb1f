#!/usr/bin/python3
"""prefix-cache-bench.py LYNX_MOE MODEL [--tokens N] [--reps R] [--threads T]

Time to first token of turn 2 of a long conversation, with the prefix cache and without it
(`serve --cache-ram 0`), the two servers run one after the other in each repetition. Turn 1
is a completion of an N-token prompt (default 4,000 tokens of the repository's docs/),
16 tokens generated; turn 2 is turn 1's prompt, its answer and a short new question. Prints
per repetition the TTFT of both turns on both servers, the turn-2 speedup (turn 1 TTFT over
turn 2 TTFT with the cache) and whether the two servers' answers are identical."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("binary")
ap.add_argument("model")
ap.add_argument("--tokens", type=int, default=4000)
ap.add_argument("--reps", type=int, default=2)
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(cache_mib):
    cmd = [args.binary, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads),
           "--ctx", str(args.tokens + 512), "--cache-ram", str(cache_mib)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = []
    threading.Thread(target=lambda: [log.append(l) for l in p.stderr], daemon=True).start()
    deadline = time.time() + 300
    while time.time() < deadline:
        m = re.search(r"listening on http://[^\s:]+:(\d+)", "".join(log))
        if m:
            return p, int(m.group(1))
        if p.poll() is not None:
            sys.exit("serve exited: " + "".join(log))
        time.sleep(0.1)
    sys.exit("serve did not start")




def complete(port, prompt):
    """(seconds to the first streamed token, text, usage)."""
    body = {"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    ttft, text, usage = None, "", {}
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                usage = j["usage"]
            for ch in j.get("choices", []):
                if ttft is None:
                    ttft = time.time() - t0
                text += ch.get("text", "")
    return ttft, text, usage


# About N tokens of English and Markdown: the model's bytes per token measured on 2,000 bytes.
docs = "".join(open(f).read() for f in sorted(glob.glob(os.path.join(root, "docs", "*.md"))))
p, port = start(0)
try:
    per_token = 2000 / complete(port, docs[:2000])[2]["prompt_tokens"]
finally:
    p.terminate()
    p.wait()
prompt1 = docs[: int(args.tokens * per_token)]
print(f"model {args.model}, {args.threads} threads, turn 1 prompt {len(prompt1)} bytes")
print("| rep | server | turn 1 prompt tokens | turn 1 TTFT s | turn 2 cached tokens | "
      "turn 2 TTFT s | turn 1 / turn 2 |")
print("|---|---|--:|--:|--:|--:|--:|")
for rep in range(args.reps):
    answers = {}
    for name, mib in [("cache", 8192), ("no cache", 0)]:
        p, port = start(mib)
        try:
            t1, a1, u1 = complete(port, prompt1)
            prompt2 = prompt1 + a1 + "\n\nAnd what does the next section say?"
            t2, a2, u2 = complete(port, prompt2)
        finally:
            p.terminate()
            p.wait()
        answers[name] = (a1, a2)
        cached = u2.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        print(f"| {rep + 1} | {name} | {u1.get('prompt_tokens')} | {t1:.3f} | {cached} | "
              f"{t2:.3f} | {t1 / t2:.1f}x |", flush=True)
    same = answers["cache"] == answers["no cache"]
    print(f"| {rep + 1} | answers identical | {same} | | | | |", flush=True)
