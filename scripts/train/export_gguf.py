#!/usr/bin/python3
"""Exports a trained checkpoint (data/ckpt/NAME.pt) + tokenizer (data/tokenizer.json) to GGUF
with the project's own writer (tests/reference/gguf_np.py).

  /usr/bin/python3 scripts/train/export_gguf.py --ckpt data/ckpt/lynx-moe-64x8.pt \
      --out models/lynx-moe-64x8.gguf [--verify] [--type f16]

general.architecture "llama" with experts: 2-D/3-D weights F16 (or --type q8_0/f32), norms
and the router (ffn_gate_inp) F32. No q/k permutation: the model is trained with RoPE NORM
pairing (2i, 2i+1), which is what the `llama` graph applies to the stored attn_q / attn_k.
Tensor shapes (GGUF ne, innermost first): token_embd / output (n_embd, n_vocab),
attn_q (n_embd, n_head*hd), attn_k / attn_v (n_embd, n_head_kv*hd), attn_output
(n_head*hd, n_embd), ffn_gate_inp (n_embd, n_expert), ffn_gate_exps / ffn_up_exps
(n_embd, n_ff, n_expert), ffn_down_exps (n_ff, n_embd, n_expert).

--verify: computes logits for a token sequence of held-out text with the PyTorch model loaded
with the exported (rounded) weights and with tests/reference/reference.py reading the GGUF,
and reports their NMSE (must be < 1e-4) and the NMSE against the unrounded checkpoint.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import bpe  # noqa: E402
import gguf_np as G  # noqa: E402
from moe_model import Config, MoELM  # noqa: E402

FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7}


def load_ckpt(path):
    ck = torch.load(path, map_location="cpu")
    cfg = Config(**ck["config"])
    model = MoELM(cfg)
    model.load_state_dict(ck["model"])
    model.eval()
    return model, cfg, ck


def weights(model, cfg):
    """(gguf name, numpy float32 array in GGUF-reversed order, quantizable)."""
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = [("token_embd.weight", sd["tok.weight"], True)]
    for i in range(cfg.n_layer):
        p, q = "blk.%d." % i, "blocks.%d." % i
        out += [
            (p + "attn_norm.weight", sd[q + "attn_norm.weight"], False),
            (p + "attn_q.weight", sd[q + "attn.wq.weight"], True),
            (p + "attn_k.weight", sd[q + "attn.wk.weight"], True),
            (p + "attn_v.weight", sd[q + "attn.wv.weight"], True),
            (p + "attn_output.weight", sd[q + "attn.wo.weight"], True),
            (p + "ffn_norm.weight", sd[q + "ffn_norm.weight"], False),
            (p + "ffn_gate_inp.weight", sd[q + "moe.router.weight"], False),
            (p + "ffn_gate_exps.weight", sd[q + "moe.gate"], True),
            (p + "ffn_up_exps.weight", sd[q + "moe.up"], True),
            (p + "ffn_down_exps.weight", sd[q + "moe.down"], True),
        ]
    out += [("output_norm.weight", sd["norm.weight"], False),
            ("output.weight", sd["out.weight"], True)]
    return out


def metadata(cfg, tok, name, ftype, ck):
    a = "llama."
    U32, I32, STR = G.T_UINT32, G.T_INT32, G.T_STRING
    types = [1] * (tok.n_vocab - len(tok.specials)) + [3] * len(tok.specials)
    eot = tok.special_ids["<|endoftext|>"]
    return [
        ("general.architecture", G.string("llama")),
        ("general.name", G.string(name)),
        ("general.description", G.string(
            "lynx-moe small MoE LM trained on Debian-shipped Python stdlib code and docs "
            "(scripts/train, %d steps)" % ck["step"])),
        ("general.file_type", G.u32(FILE_TYPE[ftype])),
        (a + "vocab_size", G.u32(cfg.n_vocab)),
        (a + "context_length", G.u32(cfg.n_ctx)),
        (a + "embedding_length", G.u32(cfg.n_embd)),
        (a + "block_count", G.u32(cfg.n_layer)),
        (a + "feed_forward_length", G.u32(cfg.n_ff)),
        (a + "attention.head_count", G.u32(cfg.n_head)),
        (a + "attention.head_count_kv", G.u32(cfg.n_head_kv)),
        (a + "attention.layer_norm_rms_epsilon", G.f32(cfg.eps)),
        (a + "rope.freq_base", G.f32(cfg.rope_base)),
        (a + "rope.dimension_count", G.u32(cfg.n_embd // cfg.n_head)),
        (a + "expert_count", G.u32(cfg.n_expert)),
        (a + "expert_used_count", G.u32(cfg.n_expert_used)),
        ("tokenizer.ggml.model", G.string("gpt2")),
        ("tokenizer.ggml.pre", G.string("gpt-2")),
        ("tokenizer.ggml.tokens", G.Value(G.T_ARRAY, tok.token_strings(), STR)),
        ("tokenizer.ggml.token_type", G.Value(G.T_ARRAY, types, I32)),
        ("tokenizer.ggml.merges", G.Value(G.T_ARRAY, tok.merge_strings(), STR)),
        ("tokenizer.ggml.bos_token_id", G.Value(U32, eot)),
        ("tokenizer.ggml.eos_token_id", G.Value(U32, eot)),
        ("tokenizer.ggml.add_bos_token", G.Value(G.T_BOOL, False)),
        ("tokenizer.ggml.add_eos_token", G.Value(G.T_BOOL, False)),
    ]


def export(model, cfg, ck, tok, out, ftype, name):
    gtype = G.TYPE_BY_NAME[ftype]
    tensors = []
    for tname, arr, quantizable in weights(model, cfg):
        ty = gtype if quantizable else G.GGML_F32
        tensors.append((tname, list(reversed(arr.shape)), ty, G.encode_tensor(arr, ty)))
    n = G.write_gguf(out, metadata(cfg, tok, name, ftype, ck), tensors)
    return n


def load_rounded(model, cfg, path):
    """Copies the GGUF's (dequantized) weights back into the PyTorch model."""
    g = G.read_gguf(path)
    names = {t: n for t, n in zip([w[0] for w in weights(model, cfg)], _torch_names(cfg))}
    sd = model.state_dict()
    for gname, tname in names.items():
        sd[tname] = torch.from_numpy(g.tensors[gname].to_numpy().copy())
    model.load_state_dict(sd)


def _torch_names(cfg):
    out = ["tok.weight"]
    for i in range(cfg.n_layer):
        q = "blocks.%d." % i
        out += [q + s for s in ("attn_norm.weight", "attn.wq.weight", "attn.wk.weight",
                                "attn.wv.weight", "attn.wo.weight", "ffn_norm.weight",
                                "moe.router.weight", "moe.gate", "moe.up", "moe.down")]
    return out + ["norm.weight", "out.weight"]


def nmse(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.mean((a - b) ** 2) / np.mean(b ** 2))


def verify(model, cfg, path, tokens):
    import reference as R
    with torch.no_grad():
        ref_logits_ckpt = model(torch.tensor([tokens]))[0][0].double().numpy()
        load_rounded(model, cfg, path)
        torch_logits = model(torch.tensor([tokens]))[0][0].double().numpy()
    m = R.load_model(path)
    np_logits, _, _ = R.forward_fast(m, tokens)
    res = {"n_tokens": len(tokens),
           "nmse_torch_vs_reference": nmse(torch_logits, np_logits),
           "max_abs_torch_vs_reference": float(np.max(np.abs(torch_logits - np_logits))),
           "nmse_ckpt_vs_reference": nmse(np_logits, ref_logits_ckpt),
           "argmax_agree": float(np.mean(np.argmax(torch_logits, -1) == np.argmax(np_logits, -1)))}
    return res, np_logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default="data/tokenizer.json")
    ap.add_argument("--type", default="f16", choices=sorted(FILE_TYPE))
    ap.add_argument("--name", default=None)
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--verify-text", default=None, help="default: first eval document")
    ap.add_argument("--verify-tokens", type=int, default=64)
    ap.add_argument("--verify-out", default=None, help="write the check's results (JSON)")
    ap.add_argument("--engine", default=None,
                    help="lynx-moe binary: also compare `lynx-moe logits --all` with the reference")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, cfg, ck = load_ckpt(args.ckpt)
    tok = bpe.Tokenizer.load(args.tokenizer)
    assert tok.n_vocab == cfg.n_vocab
    name = args.name or os.path.basename(args.out).rsplit(".", 1)[0]
    n = export(model, cfg, ck, tok, args.out, args.type, name)
    print("wrote %s: %d bytes (%.2f MB)" % (args.out, n, n / 1e6))
    if args.verify:
        if args.verify_text:
            text = open(args.verify_text, encoding="utf-8").read()
        else:
            d = "data/eval"
            text = open(os.path.join(d, sorted(os.listdir(d))[0]), encoding="utf-8").read()
        tokens = tok.encode(text)[: args.verify_tokens]
        res, np_logits = verify(model, cfg, args.out, tokens)
        res["tokens"] = tokens
        rc = 0
        if args.engine:
            import subprocess
            import tempfile
            with tempfile.TemporaryDirectory() as td:
                of = os.path.join(td, "logits.f32")
                subprocess.run([args.engine, "logits", "-m", args.out, "--tokens",
                                " ".join(map(str, tokens)), "--all", "-t", "1", "--out", of],
                               check=True, capture_output=True)
                eng = np.fromfile(of, dtype="<f4").reshape(len(tokens), -1)
            res["nmse_engine_vs_reference"] = nmse(eng, np_logits)
            res["max_abs_engine_vs_reference"] = float(np.max(np.abs(eng - np_logits)))
            res["argmax_agree_engine"] = float(np.mean(np.argmax(eng, -1) ==
                                                       np.argmax(np_logits, -1)))
            if res["nmse_engine_vs_reference"] >= 1e-4:
                print("FAIL: lynx-moe and the NumPy reference disagree")
                rc = 1
        if args.verify_out:
            with open(args.verify_out, "w") as f:
                json.dump(res, f, indent=1)
        print(json.dumps({k: v for k, v in res.items() if k != "tokens"}))
        print("tokens:", " ".join(map(str, tokens)))
        if res["nmse_torch_vs_reference"] >= 1e-4:
            print("FAIL: PyTorch and the NumPy reference disagree")
            rc = 1
        return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
