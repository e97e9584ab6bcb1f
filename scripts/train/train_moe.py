#!/usr/bin/python3
"""Trains one of lynx-moe's small MoE language models (see moe_model.py) on data/train.u16.

  /usr/bin/python3 scripts/train/train_moe.py --preset 64x8   # fine-grained: 64 experts, top-8
  /usr/bin/python3 scripts/train/train_moe.py --preset 8x2    # coarse: 8 experts, top-2

Seeded and deterministic on CPU with one thread (torch.set_num_threads(1)): batch b of step s
is drawn from numpy's default_rng([seed, s]), so a run resumed from its checkpoint
(data/ckpt/NAME.pt, written every --ckpt-minutes and at the end) continues identically.
Loss = cross-entropy + aux_coef * mean over layers of the Switch/Mixtral load-balancing loss
(E * sum_e f_e P_e; equals k when balanced). Logs to scripts/train/logs/NAME.jsonl:
SIGTERM/SIGINT checkpoint and exit cleanly; --stop-at S stops after step S of the same
schedule (so a shortened run is reproducible too).
  every --log-every steps: {"step", "loss", "aux", "lr", "tokens", "elapsed_s", "load_max",
  "load_min"} (aux normalized by k so 1.0 = perfectly balanced; load = fraction of the
  step's expert assignments that went to each expert, max/min over experts and layers);
  every --eval-every steps additionally "valid_loss" (fixed 32 windows of data/valid.u16) and
  "load" (per layer, per expert fractions).
"""
import argparse
import json
import math
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe_model import Config, MoELM, load_balancing_loss  # noqa: E402

PRESETS = {
    "64x8": dict(n_embd=128, n_layer=4, n_head=4, n_head_kv=4, n_ff=96, n_expert=64,
                 n_expert_used=8),
    "8x2": dict(n_embd=128, n_layer=4, n_head=4, n_head_kv=4, n_ff=384, n_expert=8,
                n_expert_used=2),
    # Issue 20 part 3: closer to deployed routers (Qwen3-30B-A3B's 128 experts, 8 per token),
    # wider, trained longer (see scripts/train/train_128x8.sh); ~17M parameters, F16 < 40 MB.
    "128x8": dict(n_embd=160, n_layer=4, n_head=5, n_head_kv=5, n_ff=64, n_expert=128,
                  n_expert_used=8),
}
HERE = os.path.dirname(os.path.abspath(__file__))


def batch_at(data, step, seed, B, T):
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(data) - T - 1, size=B)
    x = np.stack([data[s:s + T + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x)


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr_min + 0.5 * (args.lr - args.lr_min) * (1 + math.cos(math.pi * min(1.0, t)))


@torch.no_grad()
def valid_loss(model, vdata, T, n=32):
    model.eval()
    rng = np.random.default_rng(12345)
    starts = rng.integers(0, len(vdata) - T - 1, size=n)
    tot = 0.0
    for i in range(0, n, 8):
        x = torch.from_numpy(np.stack([vdata[s:s + T + 1] for s in starts[i:i + 8]])
                             .astype(np.int64))
        logits, _, _ = model(x[:, :-1])
        tot += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                     x[:, 1:].reshape(-1), reduction="sum"))
    model.train()
    return tot / (n * T)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--name", default=None, help="default lynx-moe-PRESET")
    ap.add_argument("--data", default="data")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lr-min", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--ckpt-minutes", type=float, default=10.0)
    ap.add_argument("--snapshot-every", type=int, default=0,
                    help="also keep the model's weights at every N-th step "
                         "(data/ckpt/NAME.stepNNNNNN.pt), for studies through training")
    ap.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    ap.add_argument("--stop-at", type=int, default=0,
                    help="stop (and checkpoint) after this step, same schedule as --steps")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    name = args.name or "lynx-moe-" + args.preset
    cfg = Config(n_ctx=args.ctx, **PRESETS[args.preset])
    with open(os.path.join(args.data, "tokenizer.json")) as f:
        cfg.n_vocab = 256 + len(json.load(f)["merges"]) + 1
    data = np.fromfile(os.path.join(args.data, "train.u16"), dtype="<u2")
    vdata = np.fromfile(os.path.join(args.data, "valid.u16"), dtype="<u2")
    torch.manual_seed(args.seed)
    model = MoELM(cfg)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    ckdir = os.path.join(args.data, "ckpt")
    os.makedirs(ckdir, exist_ok=True)
    ckpath = os.path.join(ckdir, name + ".pt")
    logpath = os.path.join(HERE, "logs", name + ".jsonl")
    os.makedirs(os.path.dirname(logpath), exist_ok=True)
    step, elapsed0 = 0, 0.0
    if os.path.exists(ckpath) and not args.fresh:
        ck = torch.load(ckpath)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, elapsed0 = ck["step"], ck["elapsed_s"]
        print("resumed %s at step %d" % (ckpath, step), flush=True)
        # drop log lines past the checkpoint
        if os.path.exists(logpath):
            with open(logpath) as f:
                lines = [l for l in f if json.loads(l).get("step", -1) < step
                         or "config" in json.loads(l)]
            with open(logpath, "w") as f:
                f.writelines(lines)
    else:
        with open(logpath, "w") as f:
            f.write(json.dumps({"config": cfg.to_dict(), "args": vars(args), "name": name,
                                "n_params": sum(p.numel() for p in model.parameters()),
                                "train_tokens_available": int(len(data)),
                                "torch": torch.__version__}) + "\n")
    print("%s: %d parameters, %d train tokens" %
          (name, sum(p.numel() for p in model.parameters()), len(data)), flush=True)

    def save():
        tmp = ckpath + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "elapsed_s": elapsed0 + time.time() - t_start, "config": cfg.to_dict(),
                    "args": vars(args)}, tmp)
        os.replace(tmp, ckpath)

    def snapshot():
        path = os.path.join(ckdir, "%s.step%06d.pt" % (name, step))
        torch.save({"model": model.state_dict(), "step": step, "config": cfg.to_dict()},
                   path + ".tmp")
        os.replace(path + ".tmp", path)

    stop = {"now": False}

    def on_signal(signum, frame):   # SIGTERM / SIGINT: checkpoint at the end of this step
        stop["now"] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    end = min(args.steps, args.stop_at) if args.stop_at else args.steps
    t_start = time.time()
    last_ck = time.time()
    acc = {"loss": 0.0, "aux": 0.0, "n": 0}
    load_acc = torch.zeros(cfg.n_layer, cfg.n_expert)
    logf = open(logpath, "a")
    while step < end and not stop["now"]:
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch_at(data, step, args.seed, args.batch, args.ctx)
        logits, rls, idss = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), x[:, 1:].reshape(-1))
        aux = sum(load_balancing_loss(r, i, cfg.n_expert) for r, i in zip(rls, idss)) / cfg.n_layer
        opt.zero_grad(set_to_none=True)
        (loss + args.aux_coef * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        acc["loss"] += float(loss)
        acc["aux"] += float(aux) / cfg.n_expert_used
        acc["n"] += 1
        with torch.no_grad():
            for l, ids in enumerate(idss):
                load_acc[l] += torch.bincount(ids.reshape(-1), minlength=cfg.n_expert).float()
        if step % args.log_every == 0 or step == args.steps:
            load = load_acc / load_acc.sum(1, keepdim=True)
            rec = {"step": step, "loss": acc["loss"] / acc["n"], "aux": acc["aux"] / acc["n"],
                   "lr": lr, "tokens": step * args.batch * args.ctx,
                   "elapsed_s": round(elapsed0 + time.time() - t_start, 1),
                   "load_max": float(load.max()), "load_min": float(load.min())}
            if step % args.eval_every == 0 or step == args.steps:
                rec["valid_loss"] = valid_loss(model, vdata, args.ctx)
                rec["load"] = [[round(float(v), 5) for v in row] for row in load]
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
            print("step %d loss %.4f aux %.4f lr %.2e load %.4f..%.4f %s %.0fs" % (
                step, rec["loss"], rec["aux"], lr, rec["load_min"], rec["load_max"],
                ("valid %.4f" % rec["valid_loss"]) if "valid_loss" in rec else "",
                rec["elapsed_s"]), flush=True)
            acc = {"loss": 0.0, "aux": 0.0, "n": 0}
            load_acc.zero_()
        if args.snapshot_every and step % args.snapshot_every == 0:
            snapshot()
        if time.time() - last_ck > args.ckpt_minutes * 60 or step == end or stop["now"]:
            save()
            last_ck = time.time()
    logf.close()
    print("done: %d steps, %.0fs" % (step, elapsed0 + time.time() - t_start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
