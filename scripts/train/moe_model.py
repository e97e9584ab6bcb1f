"""The decoder-only MoE language model that lynx-moe's `llama` architecture runs, in PyTorch.

Matches the engine (and llama.cpp's `llama` graph with experts) exactly:
  x = token_embd[tokens]
  per layer: h = x + attn_output(attention(rope(attn_q(n)), rope(attn_k(n)), attn_v(n))),
             n = RMSNorm(x; attn_norm, eps);
             x = h + MoE(RMSNorm(h; ffn_norm, eps))
  logits = output(RMSNorm(x; output_norm, eps))
  RMSNorm(v) = v / sqrt(mean(v^2) + eps) * w
  RoPE "NORM": pairs (2i, 2i+1) of each head, angle pos * base^(-2i/head_dim)
  attention: causal, scale 1/sqrt(head_dim), query head h uses kv head h // (n_head/n_head_kv)
  MoE: router logits = ffn_gate_inp(x); p = softmax(all experts); top-k by p; weights =
       p[top-k] / sum; out = sum_j w_j * down_j(silu(gate_j x) * up_j x)
Parameter shapes use PyTorch's (out, in) convention, which is GGUF's ne = (in, out).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, **kw):
        self.n_vocab = 4096
        self.n_ctx = 256
        self.n_embd = 128
        self.n_layer = 4
        self.n_head = 4
        self.n_head_kv = 4
        self.n_ff = 128          # per expert
        self.n_expert = 8
        self.n_expert_used = 2
        self.eps = 1e-5
        self.rope_base = 10000.0
        for k, v in kw.items():
            if not hasattr(self, k):
                raise KeyError(k)
            setattr(self, k, v)

    def to_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(n_ctx, head_dim, base):
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    theta = base ** (-2.0 * i / head_dim)
    ang = torch.arange(n_ctx, dtype=torch.float64)[:, None] * theta[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    """x: (B, H, T, hd); NORM pairing (x[2i], x[2i+1])."""
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    c = cos[: x.shape[-2]]
    s = sin[: x.shape[-2]]
    y0 = x0 * c - x1 * s
    y1 = x0 * s + x1 * c
    return torch.stack((y0, y1), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.n_head_kv = cfg.n_head, cfg.n_head_kv
        self.hd = cfg.n_embd // cfg.n_head
        self.wq = nn.Linear(cfg.n_embd, cfg.n_head * self.hd, bias=False)
        self.wk = nn.Linear(cfg.n_embd, cfg.n_head_kv * self.hd, bias=False)
        self.wv = nn.Linear(cfg.n_embd, cfg.n_head_kv * self.hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * self.hd, cfg.n_embd, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_head, self.hd).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_head_kv, self.hd).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_head_kv, self.hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if self.n_head_kv != self.n_head:
            r = self.n_head // self.n_head_kv
            k = k.repeat_interleave(r, dim=1)
            v = v.repeat_interleave(r, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
        att = att.masked_fill(mask[:T, :T], float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, D, Fd = cfg.n_expert, cfg.n_embd, cfg.n_ff
        self.E, self.k = E, cfg.n_expert_used
        self.router = nn.Linear(D, E, bias=False)
        self.gate = nn.Parameter(torch.empty(E, Fd, D))
        self.up = nn.Parameter(torch.empty(E, Fd, D))
        self.down = nn.Parameter(torch.empty(E, D, Fd))
        nn.init.normal_(self.gate, std=D ** -0.5)
        nn.init.normal_(self.up, std=D ** -0.5)
        nn.init.normal_(self.down, std=Fd ** -0.5)
        nn.init.normal_(self.router.weight, std=D ** -0.5)

    def forward(self, x):
        """x: (N, D) -> (out (N, D), router logits (N, E), top-k ids (N, k))."""
        N, D = x.shape
        E, k = self.E, self.k
        logits = self.router(x)
        probs = torch.softmax(logits, dim=-1)
        w, ids = torch.topk(probs, k, dim=-1)           # sorted descending
        w = w / w.sum(-1, keepdim=True).clamp_min(6.103515625e-5)
        # group the N*k assignments by expert, pad each group to the largest one, one bmm
        flat_e = ids.reshape(-1)
        order = torch.argsort(flat_e, stable=True)
        se = flat_e[order]
        st = torch.div(order, k, rounding_mode="floor")     # token of each sorted assignment
        counts = torch.bincount(se, minlength=E)
        C = int(counts.max())
        starts = torch.cumsum(counts, 0) - counts
        slot = se * C + (torch.arange(N * k) - starts[se])
        xin = x.new_zeros(E * C, D).index_copy(0, slot, x[st]).view(E, C, D)
        h = F.silu(torch.bmm(xin, self.gate.transpose(1, 2))) * \
            torch.bmm(xin, self.up.transpose(1, 2))
        y = torch.bmm(h, self.down.transpose(1, 2)).reshape(E * C, D)[slot]
        y = y * w.reshape(-1)[order][:, None]
        out = x.new_zeros(N, D).index_add(0, st, y)
        return out, logits, ids


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.n_embd, cfg.eps)
        self.moe = MoE(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)
        B, T, D = x.shape
        y, logits, ids = self.moe(self.ffn_norm(x).reshape(B * T, D))
        return x + y.view(B, T, D), logits, ids


class MoELM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.n_vocab, cfg.n_embd)
        nn.init.normal_(self.tok.weight, std=1.0)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.n_embd, cfg.eps)
        self.out = nn.Linear(cfg.n_embd, cfg.n_vocab, bias=False)
        nn.init.normal_(self.out.weight, std=cfg.n_embd ** -0.5)
        for b in self.blocks:
            for lin in (b.attn.wq, b.attn.wk, b.attn.wv):
                nn.init.normal_(lin.weight, std=cfg.n_embd ** -0.5)
            # residual branches scaled down with depth (GPT-2 style)
            nn.init.normal_(b.attn.wo.weight, std=cfg.n_embd ** -0.5 / math.sqrt(2 * cfg.n_layer))
            with torch.no_grad():
                b.moe.down.mul_(1.0 / math.sqrt(2 * cfg.n_layer))
        cos, sin = rope_tables(cfg.n_ctx, cfg.n_embd // cfg.n_head, cfg.rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.triu(torch.ones(cfg.n_ctx, cfg.n_ctx, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens):
        """tokens (B, T) -> logits (B, T, V), list of router logits (B*T, E), list of ids."""
        x = self.tok(tokens)
        all_logits, all_ids = [], []
        for b in self.blocks:
            x, rl, ids = b(x, self.cos, self.sin, self.mask)
            all_logits.append(rl)
            all_ids.append(ids)
        return self.out(self.norm(x)), all_logits, all_ids


def load_balancing_loss(router_logits, ids, n_expert):
    """Switch/Mixtral auxiliary loss for one layer, HF convention:
    E * sum_e f_e * P_e with f_e = (assignments to e) / tokens (sums to k) and
    P_e = mean router probability of e. Equals k when perfectly balanced."""
    probs = torch.softmax(router_logits, dim=-1)
    N = router_logits.shape[0]
    f = torch.bincount(ids.reshape(-1), minlength=n_expert).float() / N
    P = probs.mean(0)
    return n_expert * torch.sum(f * P)
