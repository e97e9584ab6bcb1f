"""Self-checks of the reference implementation (plain asserts, no pytest):

    /usr/bin/python3 tests/reference/test_reference.py

1. GGUF writer -> reader round trip (every metadata type, every tensor type, alignments
   32 and 64), and byte-exact re-serialization of every committed fixture.
2. Quantizers: ggml's byte layout and rounding on hand-made blocks, error bounds on random
   data; BF16 / F16 round-to-nearest-even.
3. RoPE: NORM vs NEOX pairing, norm preservation, relative-position property.
4. Causality: logits at position p equal those of the prefix tokens[0..p].
5. MoE sanity: identical experts == the dense FFN; top-k == n_expert with normalization is
   invariant under a permutation of the experts.
6. The committed goldens are what reference.py computes from the committed files.
"""

import hashlib
import json
import math
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_np as G  # noqa: E402
import make_fixtures as MF  # noqa: E402
import reference as R  # noqa: E402

FIXTURES = os.path.join(HERE, "fixtures")


def test_roundtrip():
    rng = np.random.default_rng(7)
    kv = [
        ("general.architecture", G.string("llama")),
        ("a.u8", G.Value(G.T_UINT8, 200)), ("a.i8", G.Value(G.T_INT8, -100)),
        ("a.u16", G.Value(G.T_UINT16, 60000)), ("a.i16", G.Value(G.T_INT16, -30000)),
        ("a.u32", G.Value(G.T_UINT32, 4000000000)), ("a.i32", G.Value(G.T_INT32, -2000000000)),
        ("a.f32", G.f32(0.1)), ("a.bool", G.Value(G.T_BOOL, True)),
        ("a.str", G.string("héllo")), ("a.u64", G.Value(G.T_UINT64, 2 ** 63 + 5)),
        ("a.i64", G.Value(G.T_INT64, -2 ** 62)), ("a.f64", G.Value(G.T_FLOAT64, 1.0 / 3)),
        ("a.arr_i32", G.Value(G.T_ARRAY, [1, -2, 3], G.T_INT32)),
        ("a.arr_str", G.Value(G.T_ARRAY, ["a", "", "ccc"], G.T_STRING)),
        ("a.arr_empty", G.Value(G.T_ARRAY, [], G.T_FLOAT32)),
    ]
    for align in (None, 32, 64):
        tensors = []
        for ty in (G.GGML_F32, G.GGML_F16, G.GGML_BF16, G.GGML_Q8_0, G.GGML_Q4_0):
            for shape in [(3, 64), (2, 3, 32), (96,)]:
                if len(shape) == 1 and ty in (G.GGML_Q8_0, G.GGML_Q4_0):
                    shape = (1, 96)
                arr = rng.standard_normal(shape).astype(np.float32)
                name = "t.%s.%s" % (G.TYPE_NAMES[ty], "x".join(map(str, shape)))
                tensors.append((name, list(reversed(shape)), ty, G.encode_tensor(arr, ty)))
        tensors.append(("odd.f32", [5], G.GGML_F32, G.encode_tensor(np.arange(5.0), G.GGML_F32)))
        data = G.build_gguf(kv, tensors, alignment=align)
        g = G.parse_gguf(data)
        expect_align = align or 32
        assert g.alignment == expect_align
        assert g.data_offset % expect_align == 0
        assert len(data) % expect_align == 0
        keys = [k for k, _ in kv] + (["general.alignment"] if align else [])
        assert list(g.kv) == keys
        for k, v in kv:
            assert g.kv[k] == v, (k, g.kv[k], v)
        assert list(g.tensors) == [t[0] for t in tensors]
        for name, ne, ty, raw in tensors:
            t = g.tensors[name]
            assert t.ne == ne and t.type == ty and t.raw == raw, name
            assert t.offset % expect_align == 0
        # re-serialize what was read: identical bytes
        again = G.build_gguf(list(g.kv.items()),
                             [(t.name, t.ne, t.type, t.raw) for t in g.tensors.values()])
        assert again == data
    # truncated or corrupted files are rejected
    for bad in (data[:10], b"GGUX" + data[4:], data[:g.data_offset + 8]):
        try:
            G.parse_gguf(bad)
        except ValueError:
            pass
        else:
            raise AssertionError("malformed file accepted")


def test_fixture_files_reserialize():
    for name in sorted(os.listdir(FIXTURES)):
        if not name.endswith(".gguf"):
            continue
        with open(os.path.join(FIXTURES, name), "rb") as f:
            data = f.read()
        g = G.parse_gguf(data)
        again = G.build_gguf(list(g.kv.items()),
                             [(t.name, t.ne, t.type, t.raw) for t in g.tensors.values()])
        assert again == data, name


def test_q8_0():
    # amax 127 -> d = 1 exactly; roundf rounds halves away from zero
    x = np.zeros(32, dtype=np.float32)
    x[:8] = [127, -126.5, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49]
    raw = G.quantize_q8_0(x)
    assert raw.shape == (34,)
    assert raw[0:2].view(np.float16)[0] == 1.0
    q = raw[2:].view(np.int8)
    assert list(q[:8]) == [127, -127, 1, -1, 2, 3, -3, 0], list(q[:8])
    # all-zero block: d = 0, q = 0
    z = G.quantize_q8_0(np.zeros(32, dtype=np.float32))
    assert not z.any()
    # error bound on random data: |x - q*d16| <= d/2 + 127*|d - d16| (+ f32 slack)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 32)) * rng.uniform(0.01, 10, (64, 1))).astype(np.float32)
    y = G.dequantize_q8_0(G.quantize_q8_0(x), x.size).reshape(x.shape)
    amax = np.abs(x).max(axis=1, keepdims=True)
    d = amax / 127
    d16 = d.astype(np.float16).astype(np.float64)
    bound = d / 2 + 127 * np.abs(d - d16) + 1e-6 * amax
    assert np.all(np.abs(x - y) <= bound)


def test_q4_0():
    # d = max / -8 where max is the signed value of largest magnitude; here max = -8 -> d = 1
    x = np.zeros(32, dtype=np.float32)
    for j in range(16):
        x[j] = j - 8            # nibble j
        x[16 + j] = 7 - j       # nibble 15 - j
    raw = G.quantize_q4_0(x)
    assert raw.shape == (18,)
    assert raw[0:2].view(np.float16)[0] == 1.0
    for j in range(16):
        assert raw[2 + j] == (j | ((15 - j) << 4)), (j, raw[2 + j])
    assert np.array_equal(G.dequantize_q4_0(raw, 32), x)
    # positive extreme: max = +8 -> d = -1; +8 maps to nibble 0, -8 would be nibble 16 -> 15
    y = np.zeros(32, dtype=np.float32)
    y[0], y[1], y[2] = 8.0, -8.0, 3.0
    raw = G.quantize_q4_0(y)
    assert raw[0:2].view(np.float16)[0] == -1.0
    deq = G.dequantize_q4_0(raw, 32)
    assert deq[0] == 8.0 and deq[1] == -7.0 and deq[2] == 3.0
    # the first element of largest magnitude decides the sign of d
    t = np.zeros(32, dtype=np.float32)
    t[3], t[9] = -2.0, 2.0
    assert G.quantize_q4_0(t)[0:2].view(np.float16)[0] == 0.25
    # error bound on random data: |x - deq| <= |d| (clamped side) + 8*|d - d16| (+ slack)
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((64, 32)) * rng.uniform(0.01, 10, (64, 1))).astype(np.float32)
    y = G.dequantize_q4_0(G.quantize_q4_0(x), x.size).reshape(x.shape)
    amax = np.abs(x).max(axis=1, keepdims=True)
    d = amax / 8
    d16 = d.astype(np.float16).astype(np.float64)
    bound = d + 8 * np.abs(d - d16) + 1e-6 * amax
    assert np.all(np.abs(x - y) <= bound)
    # most elements are within half a step
    assert np.mean(np.abs(x - y) <= d / 2 + 8 * np.abs(d - d16) + 1e-6 * amax) > 0.95


def test_bf16_f16():
    one = np.float32(1.0)
    step = np.float32(2.0 ** -7)  # bf16 spacing at 1.0
    vals = np.array([one + step / 2, one + 3 * step / 2, one + step / 2 + 2.0 ** -20,
                     -2.5, 0.0, np.inf], dtype=np.float32)
    back = G.bf16_bits_to_f32(G.f32_to_bf16_bits(vals))
    assert back[0] == 1.0                     # tie -> even
    assert back[1] == one + 2 * step          # tie -> even (up)
    assert back[2] == one + step              # above the tie -> up
    assert back[3] == -2.5 and back[4] == 0.0 and np.isinf(back[5])
    assert np.isnan(G.bf16_bits_to_f32(G.f32_to_bf16_bits(np.array([np.nan], np.float32))))[0]
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1000).astype(np.float32)
    b = G.bf16_bits_to_f32(G.f32_to_bf16_bits(x))
    assert np.all(np.abs(x - b) <= np.abs(x) * 2.0 ** -8)
    h = G.decode_tensor(G.encode_tensor(x, G.GGML_F16), G.GGML_F16, [1000])
    assert np.all(np.abs(x - h) <= np.abs(x) * 2.0 ** -11 + 2.0 ** -25)


def test_rope():
    rng = np.random.default_rng(4)
    v = rng.standard_normal(16)
    for mode in (R.ROPE_NORM, R.ROPE_NEOX):
        assert np.allclose(R.rope(v, 0, mode, 10000.0), v)
        assert abs(np.linalg.norm(R.rope(v, 7, mode, 10000.0)) - np.linalg.norm(v)) < 1e-12
        q, k = rng.standard_normal(16), rng.standard_normal(16)
        a = R.rope(q, 9, mode, 10000.0) @ R.rope(k, 4, mode, 10000.0)
        b = R.rope(q, 25, mode, 10000.0) @ R.rope(k, 20, mode, 10000.0)
        assert abs(a - b) < 1e-9
    # NEOX on v == NORM on the interleaved vector, de-interleaved
    perm = np.empty(16, dtype=int)
    perm[0::2] = np.arange(8)
    perm[1::2] = np.arange(8) + 8
    norm_out = R.rope(v[perm], 5, R.ROPE_NORM, 10000.0)
    neox_out = R.rope(v, 5, R.ROPE_NEOX, 10000.0)
    assert np.allclose(norm_out, neox_out[perm])
    # pair 0 rotates by exactly pos radians, pair i by pos * base^(-2i/n)
    e = np.zeros(16)
    e[2] = 1.0
    r = R.rope(e, 3, R.ROPE_NORM, 10000.0)
    th = 3 * 10000.0 ** (-2.0 / 16)
    assert abs(r[2] - np.cos(th)) < 1e-12 and abs(r[3] - np.sin(th)) < 1e-12


def _fixture(name):
    m = json.load(open(os.path.join(FIXTURES, "goldens.json")))
    for f in m["fixtures"]:
        if f["name"] == name:
            return f
    raise KeyError(name)


def test_causality():
    for name in ("llama-moe-f32", "llama-dense-q4_0", "qwen2moe-f32", "qwen3moe-q8_0",
                 "olmoe-bf16"):
        f = _fixture(name)
        m = R.load_model(os.path.join(FIXTURES, f["file"]))
        toks = f["tokens"]
        full, routing = R.forward(m, toks)
        for p in (0, 1, 6, len(toks) - 1):
            part, proute = R.forward(m, toks[:p + 1])
            assert np.max(np.abs(part[p] - full[p])) < 1e-11, (name, p)
            for layer_full, layer_part in zip(routing, proute):
                if layer_full:
                    assert layer_full[p]["ids"] == layer_part[p]["ids"]
        # a different future does not change the past
        other = toks[:8] + [(t + 1) % f["n_vocab"] for t in toks[8:]]
        alt, _ = R.forward(m, other)
        assert np.max(np.abs(alt[:8] - full[:8])) < 1e-11
        assert np.max(np.abs(alt[8:] - full[8:])) > 1e-3


def _write_model(path, name, arch, c, weights):
    kv = MF.make_kv(name, arch, c, "f32")
    G.write_gguf(path, kv, MF.encode(weights, "f32"), alignment=c.get("alignment"))
    return R.load_model(path)


def test_moe_identical_experts_equal_dense():
    tmp = tempfile.mkdtemp(prefix="lynx-ref-")
    for arch, k in (("llama", 2), ("llama", 8), ("olmoe", 8)):
        c = dict(MF.COMMON)
        c.update(n_expert=8, n_expert_used=k, n_ff=32, eps=1e-5, tied=False, head_dim=16)
        w = MF.make_weights(arch, 77, c)
        moe = []
        for name, arr, qz in w:
            if name.endswith("_exps.weight"):
                arr = np.repeat(arr[:1], arr.shape[0], axis=0)
            moe.append((name, arr, qz))
        mm = _write_model(os.path.join(tmp, "moe.gguf"), "moe", arch, c, moe)
        toks = [3, 17, 99, 5, 5, 64, 127, 0]
        lm, routing = R.forward(mm, toks)
        if arch == "llama":
            # the same model with a dense FFN made of expert 0
            dense = []
            for name, arr, qz in moe:
                if name.endswith("ffn_gate_inp.weight"):
                    continue
                if name.endswith("_exps.weight"):
                    name = name.replace("_exps.weight", ".weight")
                    arr = arr[0]
                dense.append((name, arr, qz))
            cd = dict(c)
            cd.update(n_expert=0, n_expert_used=0)
            md = _write_model(os.path.join(tmp, "dense.gguf"), "dense", arch, cd, dense)
            ld, _ = R.forward(md, toks)
            assert np.max(np.abs(lm - ld)) < 1e-10, (arch, k)
        # k == n_expert: every weight sums to one, with or without normalization
        if k == 8:
            for layer in routing:
                for r in layer:
                    assert abs(sum(r["weights"]) - 1.0) < 1e-12
                    assert sorted(r["ids"]) == list(range(8))


def test_moe_permutation_invariance():
    tmp = tempfile.mkdtemp(prefix="lynx-ref-")
    c = dict(MF.COMMON)
    c.update(n_expert=8, n_expert_used=8, n_ff=32, eps=1e-5, tied=False, head_dim=16)
    w = MF.make_weights("llama", 78, c)
    perm = np.array([3, 7, 0, 5, 1, 6, 2, 4])
    pw = []
    for name, arr, qz in w:
        if name.endswith("_exps.weight") or name.endswith("ffn_gate_inp.weight"):
            arr = arr[perm]
        pw.append((name, arr, qz))
    m1 = _write_model(os.path.join(tmp, "a.gguf"), "a", "llama", c, w)
    m2 = _write_model(os.path.join(tmp, "b.gguf"), "b", "llama", c, pw)
    toks = [1, 2, 3, 4, 100, 50, 25, 12]
    l1, r1 = R.forward(m1, toks)
    l2, r2 = R.forward(m2, toks)
    assert np.max(np.abs(l1 - l2)) < 1e-10
    inv = np.argsort(perm)  # expert e of model 1 is expert inv[e] of model 2
    for a, b in zip(r1, r2):
        for ra, rb in zip(a, b):
            assert [int(inv[e]) for e in ra["ids"]] == rb["ids"]
    # and with top-2: the same experts (mapped) are chosen
    c2 = dict(c)
    c2.update(n_expert_used=2)
    m3 = _write_model(os.path.join(tmp, "c.gguf"), "c", "llama", c2, w)
    m4 = _write_model(os.path.join(tmp, "d.gguf"), "d", "llama", c2, pw)
    l3, r3 = R.forward(m3, toks)
    l4, r4 = R.forward(m4, toks)
    assert np.max(np.abs(l3 - l4)) < 1e-10
    assert np.max(np.abs(l3 - l1)) > 1e-3


def test_topk_ties():
    assert R.topk_ids([0.5, 0.9, 0.9, 0.1, 0.9], 2) == [1, 2]
    assert R.topk_ids([0.2, 0.2, 0.2], 3) == [0, 1, 2]


def test_goldens_up_to_date():
    m = json.load(open(os.path.join(FIXTURES, "goldens.json")))
    names = set()
    for f in m["fixtures"]:
        names.add((f["model"], f["type"]))
        path = os.path.join(FIXTURES, f["file"])
        data = open(path, "rb").read()
        assert hashlib.sha256(data).hexdigest() == f["gguf_sha256"], f["name"]
        raw = open(os.path.join(FIXTURES, f["logits_file"]), "rb").read()
        assert len(raw) == 4 * f["n_tokens"] * f["n_vocab"]
        assert hashlib.sha256(raw).hexdigest() == f["logits_sha256"], f["name"]
        gold = np.frombuffer(raw, dtype="<f4").reshape(f["n_tokens"], f["n_vocab"])
        model = R.load_model(path)
        assert model.arch == f["arch"]
        logits, routing = R.forward(model, f["tokens"])
        assert np.array_equal(logits.astype(np.float32), gold), f["name"]
        assert [[sorted(r["ids"]) for r in layer] for layer in routing] == f["routing"]
        lq, rq = R.forward(model, f["tokens"], act_quant=True)
        gq = np.fromfile(os.path.join(FIXTURES, f["logits_actq_file"]), dtype="<f4")
        assert np.array_equal(lq.astype(np.float32).reshape(-1), gq), f["name"]
        assert [[sorted(r["ids"]) for r in layer] for layer in rq] == f["routing_actq"]
        if f["type"] == "f32":
            assert np.array_equal(lq, logits)
        assert [int(i) for i in np.argmax(gold, axis=1)] == f["argmax"]
        g = model.gguf
        for t in g.tensors.values():
            quantizable = t.name.endswith(".weight") and len(t.ne) >= 2 and \
                "_norm" not in t.name and "ffn_gate_inp" not in t.name
            want = G.TYPE_BY_NAME[f["type"]] if quantizable else G.GGML_F32
            assert t.type == want, (f["name"], t.name, t.type)
    expected = {(a[0], t) for a in MF.ARCHS for t in MF.TYPES}
    assert names == expected, names ^ expected


def _f16_bytes(v):
    return list(np.array([v], dtype=np.float16).view(np.uint8))


def test_type_decoders_hand_blocks():
    """types_np.py on hand-made blocks whose values follow from the layout alone."""
    import types_np as T
    one = _f16_bytes(1.0)
    # q5_0: d = 1, qh bit j set for odd j, nibble j % 16 -> (nibble | bit << 4) - 16
    qh = sum(1 << j for j in range(1, 32, 2))
    blk = one + list(np.array([qh], "<u4").view(np.uint8)) + [(j & 15) | ((15 - j) << 4)
                                                               for j in range(16)]
    v = T.decode_q5_0(bytes(blk), 32)
    want = [((j if j < 16 else 15 - (j - 16)) | ((j % 2) << 4)) - 16 for j in range(32)]
    assert list(v) == want, (list(v), want)
    # q2_K: d = 1, dmin = 1, every sub-block scale 1 and min 2; byte l holds j in bit pair j,
    # so element 32 j + l (per half) is j - 2
    blk = [0x21] * 16 + [0b11100100] * 64 + one + one
    v = T.decode_q2_K(bytes(blk), 256)
    assert list(v) == [float((e % 128) // 32 - 2) for e in range(256)]
    # q6_K: all-zero quants with d = 1, scales i -> -32 * scale of the element's 16-group
    blk = [0] * 192 + list(range(1, 17)) + one
    v = T.decode_q6_K(bytes(blk), 256)
    groups = [8 * (e // 128) + (e % 32) // 16 + 2 * ((e % 128) // 32) for e in range(256)]
    assert list(v) == [-32.0 * (g + 1) for g in groups]
    # q4_K: d = 1, dmin = 0.5, scales/mins of sub-blocks 0-3 = 1..4 / 0..3 (low 6 bits of bytes
    # 0-7), 4-7 = 5..8 / 4..7 (nibbles of bytes 8-11, top bits 0); nibbles all 3
    blk = one + _f16_bytes(0.5) + [1, 2, 3, 4, 0, 1, 2, 3] + [5 | 4 << 4, 6 | 5 << 4,
                                                               7 | 6 << 4, 8 | 7 << 4] + [0x33] * 128
    v = T.decode_q4_K(bytes(blk), 256)
    assert list(v) == [3.0 * (e // 32 + 1) - 0.5 * (e // 32) for e in range(256)]
    # mxfp4: e = 128 is scale 1 on the doubled grid; e = 0 is 2^-128
    blk = [128] + [(j & 15) | ((15 - j) << 4) for j in range(16)]
    v = T.decode_mxfp4(bytes(blk), 32)
    assert list(v[:16]) == [float(T.MXFP4_GRID[j]) for j in range(16)]
    assert T.decode_mxfp4(bytes([0] + [0x11] * 16), 32)[0] == np.float32(2.0 ** -128)
    # iq4_xs: d = 1, sub-block ib scale ls = ib + 28 (low nibble in scales_l, 2 high bits in
    # scales_h) -> (ib - 4) * grid[nibble]
    ls = [ib + 28 for ib in range(8)]
    sh = sum((l >> 4) << (2 * ib) for ib, l in enumerate(ls))
    sl = [(ls[2 * k] & 15) | ((ls[2 * k + 1] & 15) << 4) for k in range(4)]
    blk = one + list(np.array([sh], "<u2").view(np.uint8)) + sl + [0x98] * 128
    v = T.decode_iq4_xs(bytes(blk), 256)
    want = [float((e // 32 - 4) * (T.IQ4NL_GRID[8] if e % 32 < 16 else T.IQ4NL_GRID[9]))
            for e in range(256)]
    assert list(v) == want


def test_type_blocks_fixture_is_current():
    """fixtures/types/blocks.gguf: each T.f32 tensor is types_np's decode of tensor T."""
    g = G.read_gguf(os.path.join(FIXTURES, "types", "blocks.gguf"))
    n = 0
    for name, t in g.tensors.items():
        if t.type == G.GGML_F32:
            continue
        want = g.tensors[name + ".f32"].to_numpy().reshape(-1)
        got = t.to_numpy().reshape(-1)
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), name
        n += 1
    assert n == 12, n


def test_glm4moe_partial_rope_and_goldens():
    import glm4moe_ref as GLM
    rng = np.random.default_rng(11)
    v = rng.standard_normal(16)
    # The first 8 dims rotate exactly as a NEOX head of 8 (reference.py's rope), the rest stay.
    out = GLM.rope_neox_partial(v, 5, 8, 10000.0)
    assert np.allclose(out[:8], R.rope(v[:8], 5, R.ROPE_NEOX, 10000.0))
    assert np.array_equal(out[8:], v[8:])
    assert np.allclose(GLM.rope_neox_partial(v, 5, 16, 1e4), R.rope(v, 5, R.ROPE_NEOX, 1e4))
    # The stored goldens are what the reference computes from the committed files.
    d = os.path.join(FIXTURES, "glm4moe")
    toks = [int(t) for t in open(os.path.join(d, "tokens.txt")).read().split(",")]
    for name in ("tiny-glm4moe", "tiny-glm4moe-qknorm"):
        got = GLM.forward(GLM.load(os.path.join(d, name + ".gguf")), toks).astype("<f4")
        want = np.fromfile(os.path.join(d, name + ".logits.f32"), dtype="<f4")
        assert np.array_equal(got.reshape(-1), want), name


def test_minimax_m2_rope_and_goldens():
    import minimax_m2_ref as MM
    rng = np.random.default_rng(12)
    v = rng.standard_normal(32)
    # HF's rotate_half on the first 16 dims is ggml's NEOX rope of a 16-dim head (reference.py);
    # the other dims stay.
    out = MM.rope_partial(v, 7, 16, 5e6)
    assert np.allclose(out[:16], R.rope(v[:16], 7, R.ROPE_NEOX, 5e6))
    assert np.array_equal(out[16:], v[16:])
    # The stored goldens are what the reference computes from the committed files.
    d = os.path.join(FIXTURES, "minimax-m2")
    toks = [int(t) for t in open(os.path.join(d, "tokens.txt")).read().split(",")]
    for name in ("tiny-minimax-m2-f32", "tiny-minimax-m2-q8_0"):
        got = MM.forward(MM.load(os.path.join(d, name + ".gguf")), toks).astype("<f4")
        want = np.fromfile(os.path.join(d, name + ".logits.f32"), dtype="<f4")
        assert np.array_equal(got.reshape(-1), want), name


def test_gemma4_rope_and_goldens():
    import gemma4_ref as G4
    rng = np.random.default_rng(14)
    v = rng.standard_normal(32)
    # A whole-head rope (the sliding layers) is ggml's NEOX rope (reference.py).
    inv = np.array([1e4 ** (-2.0 * i / 32) for i in range(16)])
    assert np.allclose(G4.rope(v, 7, inv), R.rope(v, 7, R.ROPE_NEOX, 1e4))
    # The proportional rope (the full layers): 4 of 16 pairs (i, i + 16) turn at
    # base^(-2i/32), the others stay, as llama.cpp's rope_freqs of 1e30 leaves them.
    inv = np.array([1e6 ** (-2.0 * i / 32) if i < 4 else 0.0 for i in range(16)])
    out = G4.rope(v, 9, inv)
    for i in range(16):
        c, s_ = math.cos(9 * inv[i]), math.sin(9 * inv[i])
        assert np.isclose(out[i], v[i] * c - v[i + 16] * s_)
        assert np.isclose(out[i + 16], v[i] * s_ + v[i + 16] * c)
    assert np.array_equal(out[4:16], v[4:16]) and np.array_equal(out[20:], v[20:])
    assert abs(G4.gelu_tanh(1.0) - 0.8411920) < 1e-6
    # The stored goldens are what the reference computes from the committed files.
    d = os.path.join(FIXTURES, "gemma4")
    toks = [int(t) for t in open(os.path.join(d, "tokens.txt")).read().split(",")]
    for name in ("tiny-gemma4-f32", "tiny-gemma4-q8_0"):
        got = G4.forward(G4.load(os.path.join(d, name + ".gguf")), toks).astype("<f4")
        want = np.fromfile(os.path.join(d, name + ".logits.f32"), dtype="<f4")
        assert np.array_equal(got.reshape(-1), want), name


def test_ernie4_5_moe_rope_and_goldens():
    import ernie4_5_moe_ref as ER
    rng = np.random.default_rng(13)
    v = rng.standard_normal(16)
    # HF's interleaved rotate_half with repeat_interleave'd cos / sin is ggml's normal rope
    # (pairs (2i, 2i + 1); reference.py), over the whole head.
    assert np.allclose(ER.rope(v, 7, 5e5), R.rope(v, 7, R.ROPE_NORM, 5e5))
    # The stored goldens are what the reference computes from the committed files.
    d = os.path.join(FIXTURES, "ernie4_5-moe")
    toks = [int(t) for t in open(os.path.join(d, "tokens.txt")).read().split(",")]
    for name in ("tiny-ernie4_5-moe-f32", "tiny-ernie4_5-moe-q8_0"):
        got = ER.forward(ER.load(os.path.join(d, name + ".gguf")), toks).astype("<f4")
        want = np.fromfile(os.path.join(d, name + ".logits.f32"), dtype="<f4")
        assert np.array_equal(got.reshape(-1), want), name


def test_dots1_rope_and_goldens():
    import dots1_ref as D
    rng = np.random.default_rng(13)
    v = rng.standard_normal(24)
    # HF's rotate_half over the whole head is ggml's NEOX rope (reference.py).
    assert np.allclose(D.rope(v, 5, 1e7), R.rope(v, 5, R.ROPE_NEOX, 1e7))
    # The stored goldens are what the reference computes from the committed files.
    d = os.path.join(FIXTURES, "dots1")
    toks = [int(t) for t in open(os.path.join(d, "tokens.txt")).read().split(",")]
    for name in ("tiny-dots1-f32", "tiny-dots1-q8_0"):
        got = D.forward(D.load(os.path.join(d, name + ".gguf")), toks).astype("<f4")
        want = np.fromfile(os.path.join(d, name + ".logits.f32"), dtype="<f4")
        assert np.array_equal(got.reshape(-1), want), name


def test_qwen3vlmoe_rope_and_goldens():
    import dots1_ref as D
    import qwen3vlmoe_ref as Q
    rng = np.random.default_rng(17)
    # Text positions (t = h = w = p): HF's interleaved M-RoPE is the NEOX rope over the whole
    # head, whatever the sections (the released [24, 20, 20] of 64 frequencies, the fixtures'
    # [6, 5, 5] of 16, others).
    for d, sec in ((128, [24, 20, 20]), (32, [6, 5, 5]), (32, [8, 4, 4]), (16, [2, 3, 3])):
        for p in (0, 1, 7, 1000, 200000):
            v = rng.standard_normal(d)
            assert np.allclose(Q.rope(v, (p, p, p), 5e6, sec), D.rope(v, p, 5e6))
    # With distinct components the interleave matters (the vision path, not run here), and
    # ggml's IMROPE agrees with HF on every frequency the t / h / w interleave covers.
    v = rng.standard_normal(128)
    pa = (40, 43, 47)
    assert not np.allclose(Q.rope(v, pa, 5e6, [24, 20, 20]), D.rope(v, 40, 5e6))
    cov = [i for i in range(64) if i not in (61, 62)]
    cov = cov + [i + 64 for i in cov]
    assert np.allclose(Q.ggml_imrope(v, pa + (0,), 5e6, [24, 20, 20, 0])[cov],
                       Q.rope(v, pa, 5e6, [24, 20, 20])[cov])
    # llama.cpp gives a text token the positions [p, p, p, 0]: frequencies 61 and 62 of 64
    # (outside the interleave, 3 x 20 = 60 for h and w) take the 4th component and do not
    # rotate, where HF turns them by p x 4.1e-7 and p x 3.2e-7 rad.
    p = 8192
    a = Q.ggml_imrope(v, (p, p, p, 0), 5e6, [24, 20, 20, 0])
    b = Q.rope(v, (p, p, p), 5e6, [24, 20, 20])
    assert sorted(np.nonzero(np.abs(a - b) > 1e-12)[0].tolist()) == [61, 62, 125, 126]
    assert np.allclose(Q.ggml_imrope(v, (p, p, p, p), 5e6, [24, 20, 20, 0]), b)
    # The stored goldens are what the reference computes from the committed files.
    d = os.path.join(FIXTURES, "qwen3vlmoe")
    toks = [int(t) for t in open(os.path.join(d, "tokens.txt")).read().split(",")]
    for name in ("tiny-qwen3vlmoe-f32", "tiny-qwen3vlmoe-q8_0"):
        got = Q.forward(Q.load(os.path.join(d, name + ".gguf")), toks).astype("<f4")
        want = np.fromfile(os.path.join(d, name + ".logits.f32"), dtype="<f4")
        assert np.array_equal(got.reshape(-1), want), name


def test_bailingmoe2_partial_rope_and_goldens():
    import bailingmoe2_ref as B
    rng = np.random.default_rng(17)
    v = rng.standard_normal(24)
    # HF's rotate_half over the first 12 dims is ggml's NEOX rope on those dims (reference.py);
    # the other 12 pass through.
    got = B.rope(v, 5, 600000.0, 12)
    assert np.allclose(got[:12], R.rope(v[:12], 5, R.ROPE_NEOX, 600000.0))
    assert np.array_equal(got[12:], v[12:])
    # The stored goldens are what the reference computes from the committed files.
    d = os.path.join(FIXTURES, "bailingmoe2")
    toks = [int(t) for t in open(os.path.join(d, "tokens.txt")).read().split(",")]
    for name in ("tiny-bailingmoe2-f32", "tiny-bailingmoe2-q8_0"):
        got = B.forward(B.load(os.path.join(d, name + ".gguf")), toks).astype("<f4")
        want = np.fromfile(os.path.join(d, name + ".logits.f32"), dtype="<f4")
        assert np.array_equal(got.reshape(-1), want), name
def test_hunyuan_moe_rope_norm_order_and_goldens():
    import hunyuan_moe_ref as HY
    rng = np.random.default_rng(14)
    v = rng.standard_normal(16)
    # HF's rotate_half over the whole head is ggml's NEOX rope (reference.py).
    assert np.allclose(HY.rope(v, 5, 1.1e7), R.rope(v, 5, R.ROPE_NEOX, 1.1e7))
    # llama.cpp's converter folds NTK alpha 1000 into the base: 1e4 * 1000^(128/126).
    assert abs(HY.ntk_alpha_base(1e4, 1000.0, 128) - 11158839.9251) < 1e-3
    # The rope keeps a head's norm, so the order only matters through the norm weights: with
    # unit weights both orders agree, with the fixture's they do not.
    w = np.ones(16)
    assert np.allclose(HY.head(v, 5, 1e4, w, 1e-5, True), HY.head(v, 5, 1e4, w, 1e-5, False))
    # The stored goldens are what the reference computes from the committed files, and the
    # norms-before-rope order (transformers' port) gives other logits.
    d = os.path.join(FIXTURES, "hunyuan-moe")
    toks = [int(t) for t in open(os.path.join(d, "tokens.txt")).read().split(",")]
    for name in ("tiny-hunyuan-moe-f32", "tiny-hunyuan-moe-q8_0"):
        m = HY.load(os.path.join(d, name + ".gguf"))
        got = HY.forward(m, toks).astype("<f4")
        want = np.fromfile(os.path.join(d, name + ".logits.f32"), dtype="<f4")
        assert np.array_equal(got.reshape(-1), want), name
    other = HY.forward(m, toks, rope_first=False).astype("<f4").reshape(-1)
    assert np.max(np.abs(other - want)) > 1e-3 * np.max(np.abs(want))


def main():
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    for name, fn in tests:
        fn()
        print("ok   %s" % name)
    print("all %d reference self-checks passed" % len(tests))
    return 0


def test_qwen3next_rope_tiling_and_goldens():
    import qwen3next_ref as QN
    rng = np.random.default_rng(15)
    m = QN.Model()
    m.n_rot, m.sections = 8, None
    m.inv_freq = np.array([1e4 ** (-2.0 * i / 8) for i in range(4)])
    v = rng.standard_normal(16)
    # Partial rotary: the first 8 dims are ggml's NEOX rope over 8 dims, the rest unchanged.
    out = QN.rope(m, v, 7)
    assert np.allclose(out[:8], R.rope(v[:8], 7, R.ROPE_NEOX, 1e4))
    assert np.array_equal(out[8:], v[8:])
    # Qwen3.5's interleaved M-RoPE with equal (t, h, w) positions is the same rotation.
    m.sections = [1, 1, 2, 0]
    assert np.allclose(QN.rope(m, v, 7), out)
    # untile undoes the converter's grouped -> tiled reorder of value heads (n_k 2, r 3).
    grouped = np.arange(2 * 3 * 4).reshape(6, 4).astype(float)  # row: head g r + j
    tiled = np.concatenate([grouped[g * 3 + j:g * 3 + j + 1] for j in range(3) for g in range(2)])
    assert np.array_equal(QN.untile(tiled, 0, 2, 3, 1), grouped)
    # The stored goldens are what the reference computes from the committed files.
    d = os.path.join(FIXTURES, "qwen3next")
    toks = [int(t) for t in open(os.path.join(d, "tokens.txt")).read().split(",")]
    for name in ("tiny-qwen3next-f32", "tiny-qwen3next-q8_0", "tiny-qwen35moe-f32"):
        got = QN.forward(QN.load(os.path.join(d, name + ".gguf")), toks).astype("<f4")
        want = np.fromfile(os.path.join(d, name + ".logits.f32"), dtype="<f4")
        assert np.array_equal(got.reshape(-1), want), name
    name = "tiny-qwen3next-q8_0"
    got = QN.forward(QN.load(os.path.join(d, name + ".gguf"), True), toks).astype("<f4")
    want = np.fromfile(os.path.join(d, name + ".actq.logits.f32"), dtype="<f4")
    assert np.array_equal(got.reshape(-1), want), name + " --act-quant"


if __name__ == "__main__":
    sys.exit(main())

