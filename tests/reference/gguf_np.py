"""Minimal GGUF v3 reader and writer in pure Python + NumPy (little-endian only).

Written for lynx-moe's reference fixtures; independent of gguf-py and llama.cpp.
Facts used (see docs/reference.md for sources):

  file   = "GGUF" u32 version=3, u64 n_tensors, u64 n_kv, kv*, tensor_info*, pad, data
  kv     = string key, u32 value type, value
  string = u64 byte length + UTF-8 bytes (no terminator)
  array  = u32 element type, u64 count, elements
  tinfo  = string name, u32 n_dims, u64 ne[n_dims] (ne0 innermost), u32 ggml type,
           u64 offset (relative to the start of the data section, multiple of alignment)
  data section starts at the first multiple of general.alignment (default 32) after the
  tensor infos; padding bytes are zero.

Tensor types: F32 (0), F16 (1), Q4_0 (2), Q8_0 (8), BF16 (30) here; the K-quants, IQ4_NL,
IQ4_XS, MXFP4, Q4_1, Q5_0, Q5_1 and Q8_K are decoded (not encoded) by types_np.py.
  Q8_0: blocks of 32 along ne0: fp16 d, 32 x int8 q; value = q * d.
  Q4_0: blocks of 32 along ne0: fp16 d, 16 bytes; byte j = element j (low nibble) |
        element j+16 (high nibble) << 4; value = (nibble - 8) * d.
The quantizers reproduce ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref arithmetic
in float32 (so blocks are meant to be byte-identical to ggml's reference quantizer).
"""

import argparse
import struct

import numpy as np

import types_np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL = range(8)
T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = 8, 9, 10, 11, 12

_SCALAR_FMT = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h",
    T_UINT32: "<I", T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?",
    T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d",
}

# ggml tensor types
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30
TYPE_NAMES = {GGML_F32: "f32", GGML_F16: "f16", GGML_Q4_0: "q4_0", GGML_Q8_0: "q8_0",
              GGML_BF16: "bf16"}
# (elements per block, bytes per block)
BLOCK = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_BF16: (1, 2),
         GGML_Q8_0: (32, 34), GGML_Q4_0: (32, 18)}
# The other block types (K-quants, IQ4, MXFP4, legacy): decoded by types_np.py.
for _id, (_name, _per, _bytes) in types_np.TYPES.items():
    TYPE_NAMES[_id] = _name
    BLOCK[_id] = (_per, _bytes)
TYPE_BY_NAME = {v: k for k, v in TYPE_NAMES.items()}
QK = 32


def _pad(n, align):
    return (n + align - 1) // align * align


def row_bytes(ggml_type, ne0):
    per, nbytes = BLOCK[ggml_type]
    if ne0 % per != 0:
        raise ValueError("ne0=%d is not a multiple of the block size %d" % (ne0, per))
    return ne0 // per * nbytes


def tensor_nbytes(ggml_type, ne):
    n_rows = 1
    for d in ne[1:]:
        n_rows *= d
    return row_bytes(ggml_type, ne[0]) * n_rows


# ---------------------------------------------------------------------------------------
# Element conversions
# ---------------------------------------------------------------------------------------

def f32_to_bf16_bits(x):
    """float32 -> bf16 bits, round to nearest even (NaN -> quiet NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16) & 0xFFFF
    nan_bits = ((u >> 16) | 64) & 0xFFFF
    return np.where(is_nan, nan_bits, rounded).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _round_half_away(x):
    """C roundf (half away from zero) of float32 values, returned as float64 integers."""
    x64 = np.asarray(x, dtype=np.float64)
    return np.sign(x64) * np.floor(np.abs(x64) + 0.5)


def quantize_q8_0(x):
    """x: float32 array whose last axis is a multiple of 32 -> raw bytes (uint8 array)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    blocks = x.reshape(-1, QK)
    amax = np.max(np.abs(blocks), axis=1)                       # float32, exact
    d = (amax / np.float32(127.0)).astype(np.float32)           # f32 division
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    scaled = (blocks * inv[:, None]).astype(np.float32)          # f32 product
    q = _round_half_away(scaled).astype(np.int8)
    out = np.zeros((blocks.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:34] = q.view(np.uint8)
    return out.reshape(-1)


def dequantize_q8_0(raw, n):
    blocks = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(-1, 34)[: n // QK]
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(-1)
    q = blocks[:, 2:34].copy().view(np.int8).astype(np.float32)
    return (q * d[:, None]).reshape(-1)


def quantize_q4_0(x):
    """x: float32 array whose last axis is a multiple of 32 -> raw bytes (uint8 array)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    blocks = x.reshape(-1, QK)
    nb = blocks.shape[0]
    # signed value of the (first) element with the largest magnitude
    idx = np.argmax(np.abs(blocks), axis=1)          # argmax returns the first maximum
    vmax = blocks[np.arange(nb), idx].astype(np.float32)
    d = (vmax / np.float32(-8.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    scaled = (blocks * inv[:, None]).astype(np.float32)
    shifted = (scaled + np.float32(8.5)).astype(np.float32)
    qi = np.trunc(shifted.astype(np.float64)).astype(np.int64)   # (int8_t) cast truncates
    qi = np.minimum(15, qi)
    if np.any(qi < 0):
        raise AssertionError("q4_0 nibble below 0")
    lo = qi[:, :16].astype(np.uint8)
    hi = qi[:, 16:].astype(np.uint8)
    out = np.zeros((nb, 18), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:18] = lo | (hi << 4)
    return out.reshape(-1)


def dequantize_q4_0(raw, n):
    blocks = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(-1, 18)[: n // QK]
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(-1)
    qs = blocks[:, 2:18]
    lo = (qs & 0x0F).astype(np.float32) - 8.0
    hi = (qs >> 4).astype(np.float32) - 8.0
    vals = np.concatenate([lo, hi], axis=1)
    return (vals * d[:, None]).reshape(-1)


def encode_tensor(values, ggml_type):
    """values: float array in numpy C order = reversed ggml ne. Returns raw bytes."""
    v = np.ascontiguousarray(values, dtype=np.float32)
    if ggml_type == GGML_F32:
        return v.astype("<f4").tobytes()
    if ggml_type == GGML_F16:
        return v.astype("<f2").tobytes()
    if ggml_type == GGML_BF16:
        return f32_to_bf16_bits(v).astype("<u2").tobytes()
    if ggml_type == GGML_Q8_0:
        return quantize_q8_0(v).tobytes()
    if ggml_type == GGML_Q4_0:
        return quantize_q4_0(v).tobytes()
    raise ValueError("unsupported ggml type %r" % ggml_type)


def decode_tensor(raw, ggml_type, ne):
    """raw bytes -> float32 array of numpy shape reversed(ne)."""
    n = 1
    for d in ne:
        n *= d
    shape = tuple(reversed(ne))
    if ggml_type == GGML_F32:
        out = np.frombuffer(bytes(raw), dtype="<f4", count=n).astype(np.float32)
    elif ggml_type == GGML_F16:
        out = np.frombuffer(bytes(raw), dtype="<f2", count=n).astype(np.float32)
    elif ggml_type == GGML_BF16:
        out = bf16_bits_to_f32(np.frombuffer(bytes(raw), dtype="<u2", count=n))
    elif ggml_type == GGML_Q8_0:
        out = dequantize_q8_0(raw, n)
    elif ggml_type == GGML_Q4_0:
        out = dequantize_q4_0(raw, n)
    elif ggml_type in types_np.DECODERS:
        with np.errstate(over="ignore", invalid="ignore"):  # NaN/Inf scales decode as such
            out = types_np.DECODERS[ggml_type](raw, n)
    else:
        raise ValueError("unsupported ggml type %r" % ggml_type)
    return out.reshape(shape)


# ---------------------------------------------------------------------------------------
# Metadata values
# ---------------------------------------------------------------------------------------

class Value:
    """A typed metadata value: vtype is a GGUF value type; for arrays, etype is the
    element type and value a list."""

    def __init__(self, vtype, value, etype=None):
        self.vtype, self.value, self.etype = vtype, value, etype

    def __eq__(self, other):
        return (isinstance(other, Value) and self.vtype == other.vtype
                and self.etype == other.etype and self.value == other.value)

    def __repr__(self):
        return "Value(%r, %r, %r)" % (self.vtype, self.value, self.etype)


def u32(v):
    return Value(T_UINT32, int(v))


def f32(v):
    return Value(T_FLOAT32, float(np.float32(v)))


def string(v):
    return Value(T_STRING, str(v))


def _auto_value(v):
    if isinstance(v, Value):
        return v
    if isinstance(v, bool):
        return Value(T_BOOL, v)
    if isinstance(v, int):
        return Value(T_UINT32 if v >= 0 else T_INT32, v)
    if isinstance(v, float):
        return f32(v)
    if isinstance(v, str):
        return string(v)
    raise TypeError("cannot infer GGUF type of %r" % (v,))


def _write_string(out, s):
    b = s.encode("utf-8")
    out += struct.pack("<Q", len(b))
    out += b


def _write_scalar(out, vtype, v):
    if vtype == T_STRING:
        _write_string(out, v)
    else:
        out += struct.pack(_SCALAR_FMT[vtype], v)


def _write_value(out, val):
    out += struct.pack("<I", val.vtype)
    if val.vtype == T_ARRAY:
        out += struct.pack("<IQ", val.etype, len(val.value))
        for item in val.value:
            if val.etype == T_ARRAY:
                raise ValueError("nested arrays are not supported by this writer")
            _write_scalar(out, val.etype, item)
    else:
        _write_scalar(out, val.vtype, val.value)


class _Cursor:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise ValueError("truncated GGUF at offset %d (+%d)" % (self.pos, n))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        r = struct.unpack(fmt, self.take(size))
        return r[0] if len(r) == 1 else r

    def string(self):
        n = self.unpack("<Q")
        return self.take(n).decode("utf-8")

    def scalar(self, vtype):
        if vtype == T_STRING:
            return self.string()
        if vtype not in _SCALAR_FMT:
            raise ValueError("bad GGUF value type %d" % vtype)
        return self.unpack(_SCALAR_FMT[vtype])

    def value(self, vtype):
        if vtype == T_ARRAY:
            etype, count = self.unpack("<IQ")
            if etype == T_ARRAY:
                raise ValueError("nested arrays are not supported by this reader")
            return Value(T_ARRAY, [self.scalar(etype) for _ in range(count)], etype)
        return Value(vtype, self.scalar(vtype))


# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------

class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset, raw=None):
        self.name, self.ne, self.type, self.offset, self.raw = name, list(ne), ggml_type, offset, raw

    @property
    def nbytes(self):
        return tensor_nbytes(self.type, self.ne)

    def to_numpy(self):
        """Dequantized float32 values, numpy shape reversed(ne)."""
        return decode_tensor(self.raw, self.type, self.ne)


class GGUFFile:
    def __init__(self, kv, tensors, alignment, data_offset):
        self.kv = kv                  # dict key -> Value (insertion order = file order)
        self.tensors = tensors        # dict name -> TensorInfo (file order)
        self.alignment = alignment
        self.data_offset = data_offset

    def get(self, key, default=None):
        v = self.kv.get(key)
        return default if v is None else v.value


def read_gguf(path):
    with open(path, "rb") as f:
        buf = f.read()
    return parse_gguf(buf)


def parse_gguf(buf):
    c = _Cursor(buf)
    if c.take(4) != GGUF_MAGIC:
        raise ValueError("not a GGUF file")
    version = c.unpack("<I")
    if version != GGUF_VERSION:
        raise ValueError("unsupported GGUF version %d" % version)
    n_tensors, n_kv = c.unpack("<QQ")
    kv = {}
    for _ in range(n_kv):
        key = c.string()
        vtype = c.unpack("<I")
        if key in kv:
            raise ValueError("duplicate key %s" % key)
        kv[key] = c.value(vtype)
    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in kv:
        a = kv["general.alignment"]
        if a.vtype != T_UINT32 or a.value == 0 or (a.value & (a.value - 1)) != 0:
            raise ValueError("bad general.alignment")
        alignment = a.value
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        n_dims = c.unpack("<I")
        if not 1 <= n_dims <= 4:
            raise ValueError("bad n_dims %d for %s" % (n_dims, name))
        ne = [c.unpack("<Q") for _ in range(n_dims)]
        ggml_type, offset = c.unpack("<IQ")
        if offset % alignment != 0:
            raise ValueError("tensor %s offset %d not aligned" % (name, offset))
        infos.append(TensorInfo(name, ne, ggml_type, offset))
    data_offset = _pad(c.pos, alignment)
    tensors = {}
    for t in infos:
        start = data_offset + t.offset
        end = start + t.nbytes
        if end > len(buf):
            raise ValueError("tensor %s data out of bounds" % t.name)
        t.raw = buf[start:end]
        if t.name in tensors:
            raise ValueError("duplicate tensor %s" % t.name)
        tensors[t.name] = t
    return GGUFFile(kv, tensors, alignment, data_offset)


def build_gguf(kv, tensors, alignment=None):
    """kv: list of (key, Value or python scalar) in file order.
    tensors: list of (name, ne list, ggml_type, raw bytes) in file order.
    If alignment is given (and not already among kv), general.alignment is written.
    Returns the file as bytes."""
    kv = [(k, _auto_value(v)) for k, v in kv]
    keys = [k for k, _ in kv]
    if alignment is not None and "general.alignment" not in keys:
        kv.append(("general.alignment", u32(alignment)))
    align = DEFAULT_ALIGNMENT
    for k, v in kv:
        if k == "general.alignment":
            align = v.value
    out = bytearray()
    out += GGUF_MAGIC
    out += struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kv))
    for k, v in kv:
        _write_string(out, k)
        _write_value(out, v)
    offset = 0
    offsets = []
    for name, ne, ggml_type, raw in tensors:
        if len(raw) != tensor_nbytes(ggml_type, ne):
            raise ValueError("tensor %s: %d bytes, expected %d"
                             % (name, len(raw), tensor_nbytes(ggml_type, ne)))
        offsets.append(offset)
        offset = _pad(offset + len(raw), align)
    for (name, ne, ggml_type, raw), off in zip(tensors, offsets):
        _write_string(out, name)
        out += struct.pack("<I", len(ne))
        for d in ne:
            out += struct.pack("<Q", d)
        out += struct.pack("<IQ", ggml_type, off)
    out += b"\0" * (_pad(len(out), align) - len(out))
    data_start = len(out)
    for (name, ne, ggml_type, raw), off in zip(tensors, offsets):
        out += b"\0" * (data_start + off - len(out))
        out += raw
    out += b"\0" * (_pad(len(out) - data_start, align) - (len(out) - data_start))
    return bytes(out)


def write_gguf(path, kv, tensors, alignment=None):
    data = build_gguf(kv, tensors, alignment)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def logits_main(argv, load, forward):
    """The command line of every family reference: MODEL --tokens 1,2,3 --out FILE writes the
    logits of every position, [n x V] little-endian F32, from forward(load(MODEL), tokens)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    toks = [int(t) for t in a.tokens.split(",")]
    logits = forward(load(a.model), toks)
    with open(a.out, "wb") as f:
        f.write(logits.astype("<f4").tobytes())
    print("%d positions, argmax %s" % (len(toks), list(np.argmax(logits, axis=1))))
    return 0
