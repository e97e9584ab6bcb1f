#!/usr/bin/env python3
"""How large each routed expert's output is, on real text (docs/evaluation.md, "Tau per layer, a joint search, ...").

Runs the NumPy reference forward pass (tests/reference/reference.py) over 12 random 128-token
windows of the validation split (data/valid.u16), captures each MoE layer's normed input,
computes every expert's output on it and prints, per layer: the spread of the output norms
within a token's exact top-k, the spread of the experts' mean norms, and how the norm follows
the router probability. Writes the experts' mean norms (when routed; mean 1 per layer, one
line per layer) to the file given as the first argument (default expert-norms.txt).

  /usr/bin/python3 scripts/policy/expert_output_norms.py /tmp/expert-norms.txt
"""
import sys, numpy as np
sys.path.insert(0,'tests/reference')
import reference as R
m=R.load_model('models/lynx-moe-64x8.gguf')
d=np.fromfile('data/valid.u16',dtype=np.uint16)
rng=np.random.default_rng(0)
seqs=[d[s:s+128].tolist() for s in rng.integers(0,len(d)-200,12)]
stats={l:[] for l in range(len(m.layers))}
for toks in seqs:
    # reuse forward_fast but capture x at each MoE layer: monkeypatch matrows for gate_inp
    caps=[]
    orig=R.matrows
    def mr(mm,W,wt,X,orig=orig):
        out=orig(mm,W,wt,X)
        for L in m.layers:
            if W is L.gate_inp: caps.append(X.copy())
        return out
    R.matrows=mr
    R.forward_fast(m,toks)
    R.matrows=orig
    for l,(L,x) in enumerate(zip(m.layers,caps)):
        logits=x@L.gate_inp.T if L.gate_inp.shape[1]==x.shape[1] else None
        if logits is None: logits=R.matrows(m,L.gate_inp,L.ty['gate_inp'],x)
        p=np.exp(logits-logits.max(1,keepdims=True)); p/=p.sum(1,keepdims=True)
        norms=np.zeros((x.shape[0],m.n_expert))
        for e in range(m.n_expert):
            hh=R.silu(R.matrows(m,L.gate_exps[e],L.ty['gate_exps'],x))*R.matrows(m,L.up_exps[e],L.ty['up_exps'],x)
            y=R.matrows(m,L.down_exps[e],L.ty['down_exps'],hh)
            norms[:,e]=np.linalg.norm(y,axis=1)
        stats[l].append((p,norms))
for l in stats:
    p=np.concatenate([a for a,b in stats[l]]); n=np.concatenate([b for a,b in stats[l]])
    k=m.n_expert_used
    top=np.argsort(-p,1)[:,:k]
    tn=np.take_along_axis(n,top,1); tp=np.take_along_axis(p,top,1)
    cv_tok=np.mean(tn.std(1)/tn.mean(1))
    # per-expert mean norm when routed
    me=[]
    for e in range(m.n_expert):
        mask=(top==e)
        if mask.any(): me.append(tn[mask].mean())
    me=np.array(me)
    c=np.corrcoef(np.log(tp.ravel()),np.log(tn.ravel()))[0,1]
    print(f"layer {l}: within-token CV of top-k output norms {cv_tok:.3f}; per-expert mean norm CV {me.std()/me.mean():.3f} (min {me.min():.3f} max {me.max():.3f}); corr(log p, log norm) {c:.3f}; rank-1 norm/rank-8 norm {tn[:,0].mean()/tn[:,-1].mean():.2f}")
with open(sys.argv[1] if len(sys.argv) > 1 else 'expert-norms.txt', 'w') as f:
    for l in stats:
        p=np.concatenate([a for a,b in stats[l]]); n=np.concatenate([b for a,b in stats[l]])
        top=np.argsort(-p,1)[:,:m.n_expert_used]; tn=np.take_along_axis(n,top,1)
        me=[]
        for e in range(m.n_expert):
            mask=(top==e)
            me.append(tn[mask].mean() if mask.any() else n[:,e].mean())
        me=np.array(me); me/=me.mean()
        f.write(' '.join('%.4f'%v for v in me)+'\n')
