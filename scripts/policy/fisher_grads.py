"""The gradients that the `fisher` bound of oracle_bound.py weights its errors by: at each MoE
layer's output, the gradient of the summed NLL of label sets drawn from the exact-routing
model's own predictions. Their mean outer product is the Fisher information of every later
prediction with respect to that output, so (dy)^T F (dy) / 2 is, to second order, the growth
of the KL divergence that changing the layer's output by dy causes (label-free: the true next
tokens are not used). PyTorch (Debian's python3-torch), the same forward pass as
oracle_bound.run_group's in float32; its NLL on the true labels equals the NumPy pass's."""
import math
import os

import numpy as np


def fisher_grads(m, toks, lens, samples, seed):
    """Per layer, the gradients (G, n, S, d) at each MoE layer's output of the summed NLL of
    S label sets drawn from the exact-routing model's own next-token distributions (PyTorch
    autograd on the same forward pass as run_group's, float32)."""
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    T = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))  # noqa: E731
    G, n = toks.shape
    hd, H = m.head_dim, m.n_head

    def norm(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + m.eps) * T(w)

    inv = m.rope_base ** (-2.0 * np.arange(hd // 2) / hd)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = T(np.cos(ang)[None, :, None, :]), T(np.sin(ang)[None, :, None, :])

    def rope(t):
        x0, x1 = t[..., 0::2], t[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2)

    mask = torch.triu(torch.full((n, n), float('-inf')), 1)
    h = T(m.tok_embd[toks])
    deltas = []
    for L in m.layers:
        x = norm(h, L.attn_norm)
        q = rope((x @ T(L.wq).T).reshape(G, n, H, hd))
        kk = rope((x @ T(L.wk).T).reshape(G, n, H, hd))
        v = (x @ T(L.wv).T).reshape(G, n, H, hd)
        a = torch.softmax(torch.einsum('gphd,gjhd->ghpj', q, kk) / math.sqrt(hd) + mask, -1)
        h = h + torch.einsum('ghpj,gjhd->gphd', a, v).reshape(G, n, H * hd) @ T(L.wo).T
        x = norm(h, L.ffn_norm)
        z = x @ T(L.gate_inp).T
        top = torch.topk(z, m.n_expert_used, dim=-1).indices
        w = torch.gather(torch.softmax(z, -1), -1, top)
        w = w / w.sum(-1, keepdim=True)
        f = torch.zeros_like(h)
        for e in range(m.n_expert):
            sel = (top == e)
            if not sel.any():
                continue
            we = (w * sel).sum(-1, keepdim=True)
            y = (torch.nn.functional.silu(x @ T(L.gate_exps[e]).T) * (x @ T(L.up_exps[e]).T)) \
                @ T(L.down_exps[e]).T
            f = f + we * y
        d = torch.zeros_like(h, requires_grad=True)
        deltas.append(d)
        h = h + f + d
    logits = norm(h, m.output_norm) @ T(m.output).T
    valid = torch.from_numpy(np.arange(n)[None, :] < (lens[:, None] - 1))
    gen = torch.Generator().manual_seed(seed)
    probs = torch.softmax(logits.detach(), -1)[valid]
    lp = torch.log_softmax(logits, -1)[valid]
    out = [np.zeros((G, n, samples, m.n_embd), np.float32) for _ in m.layers]
    for s_ in range(samples):
        y = torch.multinomial(probs, 1, generator=gen)
        loss = -lp.gather(-1, y).sum()
        for li, gr in enumerate(torch.autograd.grad(loss, deltas, retain_graph=True)):
            out[li][:, :, s_, :] = gr.numpy()
    return out
