// The one scalar reading of each 256-element block with an integer kernel (the K-quants and
// IQ4_XS): Reader<Type>::read(block, sink) calls sink.head(d, dmin) and then, for each
// sub-block s in any order, sink.sub(s, scale, min, level), where level(e) is the integer level
// of the sub-block's element e (0 <= e < kSubLen; value = d x scale x level - dmin x min, the
// min 0 for the types without one).
//
// Inline templates rather than one function per type writing LevelsK: each consumer (the float
// decode, decode_by_reader below; the rows kernel's unpacking in matmul_k.cc; LevelsK for the
// scalar twin, levels_<type>) gets the reading fused into its own loop, with no levels written
// and read again. That second pass cost Q4_K's decode and unpacking 10-25% (commit 1267782).
// The SIMD unpacking of the interleaved layout (matmul_k_i16.cc) reads the same bits in vector
// lanes; the tests hold it to the twin on every target.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"

namespace lynx::kernels::types {

template <class Block>
struct Reader;

template <>
struct Reader<BlockQ2_K> {
  static constexpr int kSubLen = 16;
  static constexpr bool kMin = true;
  // Per half of 128 elements, byte l (0..31) of its 32 quant bytes holds elements l, l + 32,
  // l + 64, l + 96 in its bit pairs; sub-block s has its scale in the low nibble of scales[s]
  // and its min in the high one.
  template <class Sink>
  static void read(const uint8_t* src, Sink& sink) {
    sink.head(load_f16(src + offsetof(BlockQ2_K, d)), load_f16(src + offsetof(BlockQ2_K, dmin)));
    const uint8_t* scales = src + offsetof(BlockQ2_K, scales);
    const uint8_t* q = src + offsetof(BlockQ2_K, qs);
    int s = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++s) {
          const uint8_t* qp = q + 16 * part;
          sink.sub(s, scales[s] & 0x0F, scales[s] >> 4,
                   [=](int e) { return (qp[e] >> shift) & 3; });
        }
      }
    }
  }
};

template <>
struct Reader<BlockQ3_K> {
  static constexpr int kSubLen = 16;
  static constexpr bool kMin = false;
  // Q2_K's 2-bit layout, minus 4 where the element's bit in hmask is clear (element 32 k + l
  // has bit k of hmask[l]); 16 6-bit scales, kquants.h unpack_q3_scales.
  template <class Sink>
  static void read(const uint8_t* src, Sink& sink) {
    sink.head(load_f16(src + offsetof(BlockQ3_K, d)), 0.0f);
    int scales[16];
    unpack_q3_scales(src + offsetof(BlockQ3_K, scales), scales);
    const uint8_t* hm = src + offsetof(BlockQ3_K, hmask);
    const uint8_t* q = src + offsetof(BlockQ3_K, qs);
    int s = 0;
    uint8_t m = 1;  // a byte mask: the compare stays in bytes, which the loops vectorize
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part, ++s) {
          const uint8_t* qp = q + 16 * part;
          const uint8_t* hp = hm + 16 * part;
          sink.sub(s, scales[s], 0,
                   [=](int e) { return ((qp[e] >> shift) & 3) - ((hp[e] & m) ? 0 : 4); });
        }
      }
    }
  }
};

template <>
struct Reader<BlockQ4_K> {
  static constexpr int kSubLen = 32;
  static constexpr bool kMin = true;
  // Each 64 elements take 32 bytes: low nibbles sub-block 2k, high nibbles sub-block 2k + 1;
  // 8 (scale, min) 6-bit pairs, kquants.h scale_min_k4.
  template <class Sink>
  static void read(const uint8_t* src, Sink& sink) {
    sink.head(load_f16(src + offsetof(BlockQ4_K, d)), load_f16(src + offsetof(BlockQ4_K, dmin)));
    const uint8_t* scales = src + offsetof(BlockQ4_K, scales);
    const uint8_t* q = src + offsetof(BlockQ4_K, qs);
    for (int k = 0; k < 4; ++k, q += 32) {
      int sc, m;
      scale_min_k4(2 * k, scales, &sc, &m);
      sink.sub(2 * k, sc, m, [=](int e) { return q[e] & 0x0F; });
      scale_min_k4(2 * k + 1, scales, &sc, &m);
      sink.sub(2 * k + 1, sc, m, [=](int e) { return q[e] >> 4; });
    }
  }
};

template <>
struct Reader<BlockQ5_K> {
  static constexpr int kSubLen = 32;
  static constexpr bool kMin = true;
  // Q4_K's nibbles and pairs; element 64 k + l (l < 32) has its fifth bit in bit 2k of qh[l],
  // element 64 k + 32 + l in bit 2k + 1.
  template <class Sink>
  static void read(const uint8_t* src, Sink& sink) {
    sink.head(load_f16(src + offsetof(BlockQ5_K, d)), load_f16(src + offsetof(BlockQ5_K, dmin)));
    const uint8_t* scales = src + offsetof(BlockQ5_K, scales);
    const uint8_t* qh = src + offsetof(BlockQ5_K, qh);
    const uint8_t* q = src + offsetof(BlockQ5_K, qs);
    for (int k = 0; k < 4; ++k, q += 32) {
      // The fifth bit as a byte mask (a byte compare, which the loops vectorize, not a shift
      // by 2k).
      const auto u1 = static_cast<uint8_t>(1 << (2 * k)), u2 = static_cast<uint8_t>(2 << (2 * k));
      int sc, m;
      scale_min_k4(2 * k, scales, &sc, &m);
      sink.sub(2 * k, sc, m, [=](int e) { return (q[e] & 0x0F) + ((qh[e] & u1) ? 16 : 0); });
      scale_min_k4(2 * k + 1, scales, &sc, &m);
      sink.sub(2 * k + 1, sc, m, [=](int e) { return (q[e] >> 4) + ((qh[e] & u2) ? 16 : 0); });
    }
  }
};

template <>
struct Reader<BlockQ6_K> {
  static constexpr int kSubLen = 16;
  static constexpr bool kMin = false;
  // Per half of 128 elements (64 ql bytes, 32 qh bytes, 8 int8 scales), for l < 32: element l
  // is the low nibble of ql[l], l + 32 the low nibble of ql[l + 32], l + 64 the high nibble of
  // ql[l], l + 96 the high nibble of ql[l + 32]; their top bits are the bit pairs 0, 2, 4, 6
  // of qh[l]; level = q - 32.
  template <class Sink>
  static void read(const uint8_t* src, Sink& sink) {
    sink.head(load_f16(src + offsetof(BlockQ6_K, d)), 0.0f);
    const auto* sc = reinterpret_cast<const int8_t*>(src + offsetof(BlockQ6_K, scales));
    const uint8_t* ql = src + offsetof(BlockQ6_K, ql);
    const uint8_t* qh = src + offsetof(BlockQ6_K, qh);
    // The four quarters written out, so that every shift is a constant.
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32) {
      for (int part = 0; part < 2; ++part) {
        const int s = 8 * half + part;
        const uint8_t* lo = ql + 16 * part;
        const uint8_t* hi = ql + 32 + 16 * part;
        const uint8_t* h = qh + 16 * part;
        sink.sub(s, sc[s], 0, [=](int e) { return ((lo[e] & 0x0F) | ((h[e] & 3) << 4)) - 32; });
        sink.sub(s + 2, sc[s + 2], 0,
                 [=](int e) { return ((hi[e] & 0x0F) | (((h[e] >> 2) & 3) << 4)) - 32; });
        sink.sub(s + 4, sc[s + 4], 0,
                 [=](int e) { return ((lo[e] >> 4) | (((h[e] >> 4) & 3) << 4)) - 32; });
        sink.sub(s + 6, sc[s + 6], 0,
                 [=](int e) { return ((hi[e] >> 4) | (((h[e] >> 6) & 3) << 4)) - 32; });
      }
    }
  }
};

template <>
struct Reader<BlockIq4_xs> {
  static constexpr int kSubLen = 32;
  static constexpr bool kMin = false;
  // Sub-block ib (16 bytes of qs): low nibbles elements 0-15, high nibbles 16-31, through the
  // IQ4_NL grid; its 6-bit scale ls - 32 has the low nibble from scales_l[ib / 2] (low nibble
  // for even ib) and the top 2 bits from scales_h bits 2 ib, 2 ib + 1.
  template <class Sink>
  static void read(const uint8_t* src, Sink& sink) {
    sink.head(load_f16(src + offsetof(BlockIq4_xs, d)), 0.0f);
    const uint16_t scales_h = load_u16(src + offsetof(BlockIq4_xs, scales_h));
    const uint8_t* scales_l = src + offsetof(BlockIq4_xs, scales_l);
    const uint8_t* qs = src + offsetof(BlockIq4_xs, qs);
    for (int ib = 0; ib < 8; ++ib, qs += 16) {
      const int ls =
          ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((scales_h >> (2 * ib)) & 3) << 4);
      sink.sub(ib, ls - 32, 0, [=](int e) {
        return int{kIq4nlValues[e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4)]};
      });
    }
  }
};

// The sinks below are at namespace scope: a local class cannot have the member template sub.
template <class R>
struct LevelsSink {
  LevelsK& out;
  void head(float d, float dmin) {
    out.d = d;
    out.dmin = dmin;
  }
  template <class Level>
  void sub(int s, int scale, int min, Level level) {
    out.scale[s] = static_cast<int16_t>(scale);
    out.min[s] = static_cast<int16_t>(min);
    for (int e = 0; e < R::kSubLen; ++e) {
      out.q[R::kSubLen * s + e] = static_cast<int8_t>(level(e));
    }
  }
};

// LevelsK from a reading (levels_<type>, which the scalar twin uses).
template <class Block>
void levels_by_reader(const uint8_t* src, LevelsK& out) {
  using R = Reader<Block>;
  out.sub_len = R::kSubLen;
  out.has_min = R::kMin;
  LevelsSink<R> sink{out};
  R::read(src, sink);
}

template <class R>
struct DecodeSink {
  float* dst;
  float d, dmin;
  void head(float d_, float dmin_) {
    d = d_;
    dmin = dmin_;
  }
  template <class Level>
  void sub(int s, int scale, int min, Level level) {
    float* o = dst + R::kSubLen * s;
    const float dl = d * static_cast<float>(scale);
    // Not unrolled before the vectorizer: GCC 12 unrolls a 16-trip loop completely and then
    // leaves it scalar (Q3_K's and Q6_K's decode 2x slower).
    if constexpr (R::kMin) {
      const float ml = dmin * static_cast<float>(min);
#pragma GCC unroll 1
      for (int e = 0; e < R::kSubLen; ++e) o[e] = dl * static_cast<float>(level(e)) - ml;
    } else {
#pragma GCC unroll 1
      for (int e = 0; e < R::kSubLen; ++e) o[e] = dl * static_cast<float>(level(e));
    }
  }
};

// decode_<type>: per sub-block dl = d x scale and ml = dmin x min, then dl x q - ml, or dl x q
// without mins (no "- 0", which would turn a -0 product into +0): ggml's
// dequantize_row_<type> operations in its order.
template <class Block>
void decode_by_reader(const uint8_t* src, float* dst, int64_t n_blocks) {
  using R = Reader<Block>;
  DecodeSink<R> sink{dst, 0.0f, 0.0f};
  for (int64_t b = 0; b < n_blocks; ++b, src += sizeof(Block), sink.dst += 256) {
    R::read(src, sink);
  }
}

}  // namespace lynx::kernels::types
