#!/usr/bin/python3
"""lynx-moe's logits next to llama.cpp's on the same GGUF files and the same tokens.

For each model file: the text is tokenized by lynx-moe and cut into chunks of --ctx tokens
(each chunk's first token replaced by BOS when the vocabulary adds one, as llama-perplexity
does); lynx-moe computes the logits of every position (`lynx-moe logits --all`, the engine's
default path) and writes them in llama-perplexity's `--kl-divergence-base` format (per scored
position, the log-probabilities as uint16 steps between the top logit and 16 below it, with
their scale and offset; the second half of each chunk is scored). llama-perplexity then
evaluates the same tokens with the same file (`--kl-divergence`) and reports its own
perplexity (PPL(Q)), lynx-moe's (PPL(base)), the mean KL divergence from lynx-moe's
distribution to llama.cpp's, and how often the two arg-maxes agree. Tokenizer differences
cannot enter: llama.cpp reads the tokens from the base file.

llama.cpp is not part of this project; build it beside the project and pass its bin folder.

  /usr/bin/python3 scripts/llama-kld.py --llama-bin ../llama.cpp/build/bin --text FILE \
      [--ctx 256] [--chunks 40] [-t 2] MODEL.gguf...

Prints one markdown row per model: file, chunks, PPL lynx-moe, PPL llama.cpp, mean KLD,
99th-percentile-free summary (same top-1 %).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "reference"))
import gguf_np  # noqa: E402

LYNX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "release", "bin",
                    "lynx-moe")


def tokenize(model, text):
    out = subprocess.run([LYNX, "tokenize", "-m", model, "-f", text, "--ids-only"], check=True,
                         capture_output=True, text=True).stdout
    return [int(t) for t in re.findall(r"-?\d+", out)]


def quantized_log_probs(logits):
    """llama-perplexity's log_softmax(..., uint16_t* log_prob, ...) for one row: returns the
    nv uint16 values (2 floats: scale, min_log_prob; then one step count per token)."""
    n_vocab = logits.shape[0]
    nv = 2 * ((n_vocab + 1) // 2) + 4
    l = logits.astype(np.float32)
    max_logit = np.float32(l.max())
    min_logit = np.float32(max(np.float32(l.min()), np.float32(max_logit - np.float32(16))))
    sum_exp = float(np.sum(np.exp(l - max_logit, dtype=np.float32), dtype=np.float64))
    log_sum_exp = np.float32(np.log(sum_exp))
    min_log_prob = np.float32(min_logit - max_logit - log_sum_exp)
    scale = np.float32((max_logit - min_logit) / np.float32(65535))
    out = np.zeros(nv, dtype=np.uint16)
    out[:4] = np.array([scale, min_log_prob], dtype=np.float32).view(np.uint16)
    if scale != 0:
        inv = np.float32(1) / scale
        steps = np.rint(inv * (l - min_logit)).astype(np.int64)
        out[4:4 + n_vocab] = np.where(l > min_logit, steps, 0).astype(np.uint16)
    return out


def write_base(model, tokens, ctx, n_chunk, threads, path):
    """Writes the base file; returns lynx-moe's perplexity over the scored positions
    (float64 log-softmax of its float32 logits)."""
    g = gguf_np.read_gguf(model)
    add_bos = bool(g.get("tokenizer.ggml.add_bos_token", False))
    bos = int(g.get("tokenizer.ggml.bos_token_id", -1))
    n_vocab = len(g.get("tokenizer.ggml.tokens"))
    first = ctx // 2
    nll, n = 0.0, 0
    with open(path, "wb") as f, tempfile.TemporaryDirectory() as tmp:
        f.write(b"_logits_")
        f.write(np.array([ctx], dtype=np.uint32).tobytes())
        f.write(np.array([n_vocab, n_chunk], dtype=np.int32).tobytes())
        f.write(np.array(tokens[:ctx * n_chunk], dtype=np.int32).tobytes())
        for c in range(n_chunk):
            chunk = list(tokens[c * ctx:(c + 1) * ctx])
            if add_bos:
                chunk[0] = bos
            out = os.path.join(tmp, "l.f32")
            subprocess.run([LYNX, "logits", "-m", model, "--tokens", " ".join(map(str, chunk)),
                            "--all", "--out", out, "-t", str(threads)], check=True,
                           capture_output=True)
            logits = np.fromfile(out, dtype=np.float32).reshape(ctx, n_vocab)
            for i in range(first, ctx - 1):
                f.write(quantized_log_probs(logits[i]).tobytes())
                row = logits[i].astype(np.float64)
                mx = row.max()
                nll += mx + np.log(np.exp(row - mx).sum()) - row[tokens[c * ctx + i + 1]]
                n += 1
    return float(np.exp(nll / max(n, 1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", help="llama.cpp's bin folder; without: lynx-moe's PPL only")
    ap.add_argument("--text", required=True)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = (a.llama_bin or "") + ":" + env.get("LD_LIBRARY_PATH", "")
    print("| file | chunks x ctx | PPL lynx-moe | PPL llama.cpp | mean KLD | same top-1 |")
    print("|---|---|---:|---:|---:|---:|")
    for model in a.models:
        tokens = tokenize(model, a.text)
        n_chunk = min(a.chunks, len(tokens) // a.ctx)
        with tempfile.TemporaryDirectory() as tmp:
            base = os.path.join(tmp, "base.kld")
            ppl_lynx = write_base(model, tokens, a.ctx, n_chunk, a.threads, base)
            if not a.llama_bin:
                print(f"| {os.path.basename(model)} | {n_chunk} x {a.ctx} | {ppl_lynx:.4f} | - | - | - |",
                      flush=True)
                continue
            r = subprocess.run([os.path.join(a.llama_bin, "llama-perplexity"), "-m", model,
                                "--kl-divergence-base", base, "--kl-divergence", "-c",
                                str(a.ctx), "-b", str(a.ctx), "-t", str(a.threads)],
                               capture_output=True, text=True, env=env)
        log = r.stdout + r.stderr
        def grab(label):
            m = re.search(label + r"\s*:\s*([-0-9.e+]+)", log)
            return float(m.group(1)) if m else float("nan")
        if r.returncode != 0:
            print(f"| {os.path.basename(model)} | llama-perplexity failed: "
                  f"{log.strip().splitlines()[-1] if log.strip() else r.returncode} |||||")
            continue
        ppl_llama = grab(r"Mean PPL\(Q\)")
        kld, same = grab(r"Mean\s+KLD"), grab(r"Same top p")
        print(f"| {os.path.basename(model)} | {n_chunk} x {a.ctx} | {ppl_lynx:.4f} | "
              f"{ppl_llama:.4f} | {kld:.6f} | {same:.3f} % |", flush=True)


if __name__ == "__main__":
    main()
