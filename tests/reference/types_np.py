"""NumPy decoders of the ggml block types beyond F32/F16/BF16/Q8_0/Q4_0 (pure NumPy, written
from the block layouts, independent of the engine's C++ and of ggml's code).

Each decoder maps raw bytes to float32 values with the arithmetic of ggml's
dequantize_row_<type> (same float32 products and sums, in the same order, one rounding per
operation), so its output must equal the engine's decode bit for bit. The formulation here is
per element (an index map from element to byte, bit and scale), not the block loops the C++
uses, so a layout slip in one does not repeat in the other.

Layouts (ggml-common.h; QK_K = 256, "fp16" is IEEE half, all little-endian):
  q4_1   32: fp16 d, fp16 m, 16 B nibbles            v = q*d + m
  q5_0   32: fp16 d, u32 qh, 16 B nibbles            v = (q | hbit<<4 - 16)*d
  q5_1   32: fp16 d, fp16 m, u32 qh, 16 B nibbles    v = (q | hbit<<4)*d + m
  q2_K  256: 16 B scale|min<<4, 64 B 2-bit q, fp16 d, fp16 dmin
  q3_K  256: 32 B hmask, 64 B 2-bit q, 12 B 6-bit scales, fp16 d
  q4_K  256: fp16 d, fp16 dmin, 12 B 6-bit scale/min pairs, 128 B nibbles
  q5_K  256: fp16 d, fp16 dmin, 12 B pairs, 32 B qh, 128 B nibbles
  q6_K  256: 128 B ql, 64 B qh, 16 x int8 scales, fp16 d
  q8_K  256: f32 d, 256 x int8, 16 x int16 sums      v = d*q
  iq4_nl 32: fp16 d, 16 B nibbles into a 16-value grid
  iq4_xs 256: fp16 d, u16 scales_h, 4 B scales_l, 128 B nibbles (8 sub-blocks of 32)
  mxfp4  32: u8 E8M0 exponent e, 16 B E2M1 nibbles; v = (2*e2m1)[q] * 2^(e-128)
In the 32-element nibble layout (q4_*, q5_*, iq4_*, mxfp4) element j < 16 is the low nibble
of byte j and element j >= 16 the high nibble of byte j - 16.
"""

import numpy as np

F32 = np.float32

IQ4NL_GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89,
                       113], dtype=np.int64)
# E2M1 values times 2: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
MXFP4_GRID = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int64)

# ggml type id -> (name, elements per block, bytes per block)
TYPES = {
    3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24),
    10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110), 12: ("q4_K", 256, 144),
    13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 15: ("q8_K", 256, 292),
    20: ("iq4_nl", 32, 18), 23: ("iq4_xs", 256, 136), 39: ("mxfp4", 32, 17),
}


def _blocks(raw, n, per, nbytes):
    b = np.frombuffer(bytes(raw), dtype=np.uint8)[: n // per * nbytes]
    return b.reshape(-1, nbytes).astype(np.int64)


def _f16(blocks, off):
    lo = blocks[:, off].astype(np.uint16) | (blocks[:, off + 1].astype(np.uint16) << 8)
    return lo.view(np.float16).astype(F32)


def _u16(blocks, off):
    return blocks[:, off] | (blocks[:, off + 1] << 8)


def _u32(blocks, off):
    return blocks[:, off] | (blocks[:, off + 1] << 8) | (blocks[:, off + 2] << 16) | (
        blocks[:, off + 3] << 24)


def _nibbles32(blocks, off):
    """(nb, 32) nibble of each element of a 32-element nibble block starting at byte off."""
    j = np.arange(32)
    byte = blocks[:, off + (j % 16)]
    return np.where(j < 16, byte & 15, byte >> 4)


def _f(x):
    return np.asarray(x).astype(F32)


def decode_q4_1(raw, n):
    b = _blocks(raw, n, 32, 20)
    d, m = _f16(b, 0), _f16(b, 2)
    return (_f(_nibbles32(b, 4)) * d[:, None] + m[:, None]).reshape(-1)


def _q5_values(b, qh_off, qs_off):
    bit = (_u32(b, qh_off)[:, None] >> np.arange(32)) & 1
    return _nibbles32(b, qs_off) | (bit << 4)


def decode_q5_0(raw, n):
    b = _blocks(raw, n, 32, 22)
    d = _f16(b, 0)
    return (_f(_q5_values(b, 2, 6) - 16) * d[:, None]).reshape(-1)


def decode_q5_1(raw, n):
    b = _blocks(raw, n, 32, 24)
    d, m = _f16(b, 0), _f16(b, 2)
    return (_f(_q5_values(b, 4, 8)) * d[:, None] + m[:, None]).reshape(-1)


# Element e of a 256-element super-block in the 2-bit layout of q2_K/q3_K: half h = e // 128,
# bit pair j = (e % 128) // 32, byte l = e % 32 of the half; sub-block of 16 = 8h + 2j + l//16.
_E = np.arange(256)
_H, _J, _L = _E // 128, (_E % 128) // 32, _E % 32
_SUB16 = 8 * _H + 2 * _J + _L // 16


def decode_q2_K(raw, n):
    b = _blocks(raw, n, 256, 84)
    d, dmin = _f16(b, 80), _f16(b, 82)
    q = (b[:, 16 + 32 * _H + _L] >> (2 * _J)) & 3
    sc = b[:, _SUB16]
    dl = d[:, None] * _f(sc & 15)
    ml = dmin[:, None] * _f(sc >> 4)
    return (dl * _f(q) - ml).reshape(-1)


def _q3_scales(b):
    """(nb, 16) signed scales: 6 bits (low nibble, then 2 high bits) minus 32."""
    i = np.arange(16)
    s = b[:, 96:108]
    lo = np.where(i < 8, s[:, i % 8] & 15, s[:, i % 8] >> 4)
    hi = (s[:, 8 + i % 4] >> (2 * (i // 4))) & 3
    return (lo | (hi << 4)) - 32


def decode_q3_K(raw, n):
    b = _blocks(raw, n, 256, 110)
    d = _f16(b, 108)
    q = (b[:, 32 + 32 * _H + _L] >> (2 * _J)) & 3
    hbit = (b[:, _L] >> (4 * _H + _J)) & 1
    v = q - np.where(hbit == 1, 0, 4)
    dl = d[:, None] * _f(_q3_scales(b)[:, _SUB16])
    return (dl * _f(v)).reshape(-1)


def _k4_scale_min(b, off):
    """(nb, 8) scales and (nb, 8) mins of the 12-byte 6-bit packing of q4_K/q5_K."""
    s = b[:, off:off + 12]
    sc = np.zeros((b.shape[0], 8), dtype=np.int64)
    mn = np.zeros_like(sc)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, mn


# q4_K/q5_K: element e is in chunk k = e // 64 (32 bytes), sub-block 2k + (e % 64) // 32,
# byte l = e % 32 of the chunk, its low nibble for (e % 64) < 32.
_K, _R = _E // 64, _E % 64
_SUB32 = 2 * _K + _R // 32


def _k4_values(b, qs_off):
    byte = b[:, qs_off + 32 * _K + _L]
    return np.where(_R < 32, byte & 15, byte >> 4)


def _k4_decode(b, q):
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, mn = _k4_scale_min(b, 4)
    d1 = d[:, None] * _f(sc[:, _SUB32])
    m1 = dmin[:, None] * _f(mn[:, _SUB32])
    return (d1 * _f(q) - m1).reshape(-1)


def decode_q4_K(raw, n):
    b = _blocks(raw, n, 256, 144)
    return _k4_decode(b, _k4_values(b, 16))


def decode_q5_K(raw, n):
    b = _blocks(raw, n, 256, 176)
    hbit = (b[:, 16 + _L] >> _SUB32) & 1
    return _k4_decode(b, _k4_values(b, 48) + 16 * hbit)


def decode_q6_K(raw, n):
    b = _blocks(raw, n, 256, 210)
    d = _f16(b, 208)
    g = _J  # quarter of the half: 0..3
    lo_byte = b[:, 64 * _H + _L + 32 * (g % 2)]
    nib = np.where(g < 2, lo_byte & 15, lo_byte >> 4)
    top = (b[:, 128 + 32 * _H + _L] >> (2 * g)) & 3
    q = (nib | (top << 4)) - 32
    sc = b[:, 192 + 8 * _H + _L // 16 + 2 * g]
    sc = np.where(sc >= 128, sc - 256, sc)
    return ((d[:, None] * _f(sc)) * _f(q)).reshape(-1)


def decode_q8_K(raw, n):
    b = _blocks(raw, n, 256, 292)
    d = b[:, 0:4].astype(np.uint8).copy().view("<f4").reshape(-1).astype(F32)
    q = b[:, 4:260]
    q = np.where(q >= 128, q - 256, q)
    return (d[:, None] * _f(q)).reshape(-1)


def decode_iq4_nl(raw, n):
    b = _blocks(raw, n, 32, 18)
    d = _f16(b, 0)
    return (d[:, None] * _f(IQ4NL_GRID[_nibbles32(b, 2)])).reshape(-1)


def decode_iq4_xs(raw, n):
    b = _blocks(raw, n, 256, 136)
    d = _f16(b, 0)
    ib = np.arange(8)
    ls = ((b[:, 4 + ib // 2] >> (4 * (ib % 2))) & 15) | (((_u16(b, 2)[:, None] >> (2 * ib)) & 3) << 4)
    dl = d[:, None] * _f(ls - 32)                                  # (nb, 8)
    sub = _E // 32
    j = _E % 32
    byte = b[:, 8 + 16 * sub + j % 16]
    nib = np.where(j < 16, byte & 15, byte >> 4)
    return (dl[:, sub] * _f(IQ4NL_GRID[nib])).reshape(-1)


def decode_mxfp4(raw, n):
    b = _blocks(raw, n, 32, 17)
    scale = np.ldexp(np.ones(b.shape[0]), b[:, 0] - 128).astype(F32)  # exact powers of two
    return (_f(MXFP4_GRID[_nibbles32(b, 1)]) * scale[:, None]).reshape(-1)


DECODERS = {3: decode_q4_1, 6: decode_q5_0, 7: decode_q5_1, 10: decode_q2_K, 11: decode_q3_K,
            12: decode_q4_K, 13: decode_q5_K, 14: decode_q6_K, 15: decode_q8_K,
            20: decode_iq4_nl, 23: decode_iq4_xs, 39: decode_mxfp4}
