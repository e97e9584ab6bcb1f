// The interleaved Q8_K kernel (matmul_k.h): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights stored
// kInterleaved16
// times activations quantized to Q8_K blocks. Highway with dynamic dispatch, like
// matmul_q8.cc, whose "rows in lanes" scheme it follows: a block of kNR weight rows (16 with
// AVX-512, 8 with AVX2) sits in the int32 lanes of a vector, each plane of the layout holding
// 4 weight bytes per row, and one u8 x s8 4-way product of a plane with 4 activation bytes
// broadcast to all lanes adds those 4 columns into all kNR rows at once.
//
// Per 256-element block, the kNR rows' block is unpacked once into levels form (KBlock): 64
// planes of unsigned levels (plane p: elements 4p..4p+3; Q4_K 0..15, Q5_K 0..31, Q6_K 0..63,
// its offset of 32 taken out below), the sub-block scales as int16 pairs and the mins
// (Q4_K/Q5_K) or scale pairs (Q6_K) for the activation-sum terms. Every token of the call then
// runs over it:
//   x86: vpmaddubsw (u8 x s8 -> s16 pairs) summed in int16 over SumPlanes planes (Q4_K 8 x 2 x
//        15 x 127, Q5_K 4 x 2 x 31 x 127, Q6_K 2 x 2 x 63 x 127: all < 2^15), then one
//        vpmaddwd with the lane's scale in both int16 halves: scale x sum in int32, exact.
//   Q4_K/Q5_K: msum = sum over sub-block pairs of vpmaddwd((m_2k, m_2k+1), (xs_2k, xs_2k+1)) with
//        the activation's 32-element sums (QuantizedActsK::spair).
//   Q6_K: isum = sum_sub s (dot_sub - 32 gsum_sub): the offset as vpmaddwd of scale pairs
//        with the 16-element sums (gpair), times 32.
//   Other targets (EMU128): the same sums with int32 lane products.
// The integer sums are exact, so they equal the scalar twin's whatever the order; the float
// update is matmul_k.h's, per block in order, with an exact FMA on every target, so all
// targets and the twin (ref::matmul_rows_k) agree bit for bit. IQ4_XS levels are signed
// (-127..113): as ggml does, |level| x (q with level's sign) keeps vpmaddubsw exact.
//   AVX3_DL (AVX-512 VNNI): per sub-block one vpdpbusd per plane into int32, then one vpmulld by
//        the lane's scale (Q4_K 8 + 2 uops per 32 elements instead of 8 vpmaddubsw, 7 adds and a
//        vpmaddwd); IQ4_XS levels biased to unsigned (+128) with the offset taken out through the
//        32-element activation sums, instead of a sign fix-up and a vpmaddwd per plane.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul_k.h"
#include "kernels/types.h"
#include "lynx/error.h"

#ifndef LYNX_KERNELS_MATMUL_K_I16_JOB
#define LYNX_KERNELS_MATMUL_K_I16_JOB
namespace lynx::kernels {
// One matmul_rows_k_i16 call; the activation pointers are at the call's first token.
struct MatmulKJob {
  TensorType type;
  const uint8_t* w;
  int64_t row_bytes, n_blocks;  // n_blocks of 256 columns
  int64_t r0, r1;
  const int8_t* q;
  const float* d;
  const int32_t* gpair;
  const int32_t* spair;
  int64_t cols;
  int n_tok;
  float* y;
  int64_t ldy;
};
}  // namespace lynx::kernels
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_k_i16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "hwy/cache_control.h"
#include "kernels/int_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using icommon::FmaExact;
using icommon::LoadI32;
using icommon::StoreLanes;
using icommon::WithTokenCount;

#undef LYNX_KI_VNNI
// AVX-512 VNNI (Highway's AVX3_DL target): vpdpbusd sums a sub-block's u8 x s8 products
// straight into int32, then one int32 multiply applies the lane's scale.
#if HWY_TARGET == HWY_AVX3_DL
#define LYNX_KI_VNNI 1
// As in matmul_q8.cc: Highway 1.0.3's AVX3_DL target string lacks "avx512vnni", which
// _mm512_dpbusd_epi32 needs; its runtime check of AVX3_DL does require AVX512_VNNI.
HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512vnni")
#else
#define LYNX_KI_VNNI 0
#endif

using icommon::DF;
using icommon::DI;
using icommon::kNR;
using icommon::VF;
using icommon::VI;
using DU = hn::RebindToUnsigned<DI>;
constexpr int kNT = 4;            // tokens per group
constexpr int kSuperTokens = 64;  // tokens per pass over the weights
constexpr int64_t kG = kInterleaveRows;

// A block's bytes, and the bytes of the scalar fields before the planes in an interleaved
// group-block (16 copies of each fp16 field), from the type table.
template <TensorType kType>
constexpr int64_t BlockBytes() {
  return type_row(kType)->block_bytes;
}
template <TensorType kType>
constexpr int64_t PlanesAt() {
  constexpr InterleaveSpec spec = type_row(kType)->interleave;
  static_assert(spec.fields > 0, "a type with an interleaved layout");
  return int64_t(kG) * spec.fields * spec.field_bytes;
}
// Q4_K/Q5_K: 6-bit scales and mins per 32 elements; Q2_K: 4-bit scales and mins per 16;
// Q6_K: int8 scales per 16, no mins; Q3_K: 6-bit signed scales per 16, no mins; IQ4_XS: 6-bit
// signed scales per 32 and signed levels from the IQ4_NL grid, no mins.
template <TensorType kType>
constexpr bool kHasMin =
    kType == TensorType::Q2_K || kType == TensorType::Q4_K || kType == TensorType::Q5_K;
template <TensorType kType>
constexpr bool kPer16 =
    kType == TensorType::Q2_K || kType == TensorType::Q3_K || kType == TensorType::Q6_K;
template <TensorType kType>
constexpr int kSubPlanes = kPer16<kType> ? 4 : 8;  // planes per scale
// Q6_K and Q3_K levels are stored unsigned, offset by 32 and 4: isum takes out
// offset x scale x (16-element activation sum), offset = 1 << kOffsetShift.
template <TensorType kType>
constexpr int kOffsetShift = kType == TensorType::Q6_K ? 5 : 2;
template <TensorType kType>
constexpr int kSumPlanes = kType == TensorType::Q4_K   ? 8
                           : kType == TensorType::Q5_K ? 4
                                                       : 2;

// A 256-element block of kNR rows in levels form (see the top of the file).
struct KBlock {
  VI lv[64];   // level planes, plane p = elements 4p..4p+3 (u8 quads; IQ4_XS |level| on x86)
  VI sg[64];   // IQ4_XS on x86: the signed levels (their signs move onto the activations)
  VI sc[16];   // sub-block scales (x86 without VNNI: the value in both int16 halves; else int32)
  VI aux[16];  // x86: Q4_K/Q5_K/Q2_K (m_2k, m_2k+1) int16 pairs, Q6_K/Q3_K (s_2k, s_2k+1);
               // else the mins
  VF d, dmin;
};

// Plane p of the kNR-row slice `sub` of the group-block gb, as u32 lanes.
template <TensorType kType>
HWY_INLINE hn::Vec<DU> Plane(const uint8_t* gb, int sub, int p) {
  return hn::LoadU(DU(),
                   reinterpret_cast<const uint32_t*>(gb + PlanesAt<kType>() + 64 * p) + sub * kNR);
}

// The fp16 values at p (16 rows) of slice `sub`, widened. x86 converts with F16C; the
// portable targets with the scalar conversion, because Highway's emulated one does not keep
// Inf and NaN (random-byte blocks have them; the twin's results must stay NaN).
HWY_INLINE VF LoadF16(const uint8_t* p, int sub) {
#if LYNX_INT_X86
  const hn::Rebind<hwy::float16_t, DI> df16;
  return hn::PromoteTo(DF(),
                       hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p) + sub * kNR));
#else
  HWY_ALIGN float f[kNR];
  for (int i = 0; i < kNR; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * (sub * kNR + i), 2);
    f[i] = fp16_to_fp32(h);
  }
  return hn::Load(DF(), f);
#endif
}

// (lo, hi) as int16 halves of every lane.
HWY_INLINE VI Pair(VI lo, VI hi) {
  const DI di;
  return hn::Or(hn::And(lo, hn::Set(di, 0xFFFF)), hn::ShiftLeft<16>(hi));
}

// The types whose VNNI code (BlockSumsIq4XsVnni) is faster than their vpmaddubsw code: IQ4_XS only.
// For the others VNNI does not save work on the multiply port: Q4_K needs 8 vpmaddubsw and
// one vpmaddwd per 32 elements (the adds run on another port) against 8 vpdpbusd and a vpmulld
// (2 uops); measured 3-10% slower at 4-16 tokens (docs/benchmarks.md).
template <TensorType kType>
constexpr bool kVnni = LYNX_KI_VNNI&& kType == TensorType::IQ4_XS;

// A sub-block scale as BlockSums takes it: the int32 value where it multiplies int32 dot
// products (VNNI, portable targets), else the value in both int16 halves for vpmaddwd.
template <TensorType kType>
HWY_INLINE VI ScaleLanes(VI sc) {
  if constexpr (LYNX_INT_X86 && !kVnni<kType>) return Pair(sc, sc);
  return sc;
}

HWY_INLINE VI Byte(hn::Vec<DU> v, int k) {
  return hn::BitCast(DI(), hn::And(hn::ShiftRightSame(v, 8 * k), hn::Set(DU(), 0xFFu)));
}

// IQ4_XS: d and the scales' high bits (u16) are the fields; plane 0 holds the scales' low
// nibbles, planes 1..32 the nibbles: sub-block ib's 16 bytes are planes 1 + 4ib.., byte j
// holding element 32ib + j (low nibble) and 32ib + 16 + j (high); levels kIq4nl[nibble].
// IQ4_XS: the 8 sub-blocks' signed 6-bit scales of slice `sub` (low nibbles in plane 0, high
// bits in the u16 field at 32), as int32.
HWY_INLINE void ScalesIq4Xs(const uint8_t* gb, int sub, VI (&sc)[8]) {
  const DI di;
  const DU du;
  const hn::Rebind<uint16_t, DU> d16;
  const auto sh =
      hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(gb + 32) + sub * kNR));
  const auto sl = Plane<TensorType::IQ4_XS>(gb, sub, 0);
  for (int ib = 0; ib < 8; ++ib) {
    const auto lo = hn::And(hn::ShiftRightSame(sl, 4 * ib), hn::Set(du, 0x0Fu));
    const auto hi = hn::And(hn::ShiftRightSame(sh, 2 * ib), hn::Set(du, 3u));
    sc[ib] = hn::Sub(hn::BitCast(di, hn::Or(lo, hn::ShiftLeft<4>(hi))), hn::Set(di, 32));
  }
}

#if LYNX_KI_VNNI
// IQ4_NL's grid biased to unsigned (grid + 128: 1..241) for vpdpbusd.
HWY_ALIGN static constexpr uint8_t kIq4GridU[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                    129, 141, 153, 166, 181, 197, 217, 241};
#endif

HWY_INLINE void UnpackIq4Xs(const uint8_t* gb, int sub, KBlock& k) {
  constexpr TensorType kType = TensorType::IQ4_XS;
  const DI di;
  const DU du;
  k.d = LoadF16(gb, sub);
  VI scv[8];
  ScalesIq4Xs(gb, sub, scv);
  for (int ib = 0; ib < 8; ++ib) k.sc[ib] = ScaleLanes<kType>(scv[ib]);
#if LYNX_KI_VNNI
  // The 128 offset of the biased levels comes back out with the 32-element activation sums.
  for (int p = 0; p < 4 && kVnni<kType>; ++p) k.aux[p] = Pair(scv[2 * p], scv[2 * p + 1]);
#else
  (void)scv;
#endif
  HWY_ALIGN static constexpr int8_t kGrid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};
#if LYNX_KI_VNNI
  // Levels biased to unsigned for vpdpbusd.
  const hn::Repartition<uint8_t, DI> du8;
  const auto gridu = hn::LoadDup128(du8, kIq4GridU);
  const auto m4 = hn::Set(du, 0x0F0F0F0Fu);
  for (int ib = 0; ib < 8; ++ib) {
    for (int w = 0; w < 4; ++w) {
      const auto v = Plane<kType>(gb, sub, 1 + 4 * ib + w);
      const int p = 8 * ib + w;
      k.lv[p] = hn::BitCast(di, hn::TableLookupBytes(gridu, hn::BitCast(du8, hn::And(v, m4))));
      k.lv[p + 4] = hn::BitCast(
          di, hn::TableLookupBytes(gridu, hn::BitCast(du8, hn::And(hn::ShiftRight<4>(v), m4))));
    }
  }
#elif LYNX_INT_X86
  const hn::Repartition<int8_t, DI> d8;
  const auto grid = hn::LoadDup128(d8, kGrid);
  const auto m4 = hn::Set(du, 0x0F0F0F0Fu);
  for (int ib = 0; ib < 8; ++ib) {
    for (int w = 0; w < 4; ++w) {
      const auto v = Plane<kType>(gb, sub, 1 + 4 * ib + w);
      const int p = 8 * ib + w;
      const auto lo = hn::TableLookupBytes(grid, hn::BitCast(d8, hn::And(v, m4)));
      const auto hi =
          hn::TableLookupBytes(grid, hn::BitCast(d8, hn::And(hn::ShiftRight<4>(v), m4)));
      k.sg[p] = hn::BitCast(di, lo);
      k.sg[p + 4] = hn::BitCast(di, hi);
      k.lv[p] = hn::BitCast(di, hn::Abs(lo));
      k.lv[p + 4] = hn::BitCast(di, hn::Abs(hi));
    }
  }
#else
  // Portable targets (down to one lane): the grid looked up byte by byte.
  for (int ib = 0; ib < 8; ++ib) {
    for (int w = 0; w < 4; ++w) {
      HWY_ALIGN uint32_t in[kNR], lo[kNR], hi[kNR];
      hn::Store(Plane<kType>(gb, sub, 1 + 4 * ib + w), du, in);
      for (int i = 0; i < kNR; ++i) {
        lo[i] = hi[i] = 0;
        for (int b = 0; b < 4; ++b) {
          const uint32_t byte = (in[i] >> (8 * b)) & 0xFF;
          lo[i] |= uint32_t(uint8_t(kGrid[byte & 0x0F])) << (8 * b);
          hi[i] |= uint32_t(uint8_t(kGrid[byte >> 4])) << (8 * b);
        }
      }
      k.lv[8 * ib + w] = hn::BitCast(di, hn::Load(du, lo));
      k.lv[8 * ib + w + 4] = hn::BitCast(di, hn::Load(du, hi));
    }
  }
#endif
}

// Q2_K (fields d, dmin; planes 0-3 the scale | min << 4 bytes of the 16 sub-blocks, 4-19 the
// 2-bit quants) and Q3_K (field d; planes 0-7 the high-bit mask, 8-23 the 2-bit quants,
// 24-26 the packed 6-bit scales). Quant word w (bytes 4 (w % 8).. of 32-byte half h = w / 8)
// holds at bits 2j the elements 128h + 32j + 4 (w % 8)..: plane 32h + 8j + w % 8. Q3_K's
// high bit of that element is bit 4h + j of mask word w % 8; its level q + 4 hbit (0..7) is
// the value + 4.
template <TensorType kType>
HWY_INLINE void UnpackQ2Q3(const uint8_t* gb, int sub, KBlock& k) {
  const DI di;
  const DU du;
  constexpr bool kQ3 = kType == TensorType::Q3_K;
  k.d = LoadF16(gb, sub);
  VI sc[16], mn[16];
  if constexpr (kQ3) {
    const auto s0 = Plane<kType>(gb, sub, 24), s1 = Plane<kType>(gb, sub, 25),
               s2 = Plane<kType>(gb, sub, 26);
    for (int i = 0; i < 16; ++i) {
      const VI b = Byte((i % 8) < 4 ? s0 : s1, i % 4);
      const VI lo = i < 8 ? hn::And(b, hn::Set(di, 0x0F)) : hn::ShiftRight<4>(b);
      const VI hi = hn::And(hn::ShiftRightSame(Byte(s2, i % 4), 2 * (i / 4)), hn::Set(di, 3));
      sc[i] = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), hn::Set(di, 32));
    }
  } else {
    k.dmin = LoadF16(gb + 32, sub);
    for (int g = 0; g < 16; ++g) {
      const VI b = Byte(Plane<kType>(gb, sub, g / 4), g % 4);
      sc[g] = hn::And(b, hn::Set(di, 0x0F));
      mn[g] = hn::ShiftRight<4>(b);
    }
  }
  for (int g = 0; g < 16; ++g) k.sc[g] = ScaleLanes<kType>(sc[g]);
#if LYNX_INT_X86
  // Q2_K: (m_2k, m_2k+1) pairs for the mins; Q3_K: (s_2k, s_2k+1) for the offset.
  for (int p = 0; p < 8; ++p) {
    k.aux[p] = kQ3 ? Pair(sc[2 * p], sc[2 * p + 1]) : Pair(mn[2 * p], mn[2 * p + 1]);
  }
#else
  if constexpr (!kQ3) {
    for (int g = 0; g < 16; ++g) k.aux[g] = mn[g];
  }
#endif
  constexpr int kQs = kQ3 ? 8 : 4;
  const auto m3 = hn::Set(du, 0x03030303u), m1 = hn::Set(du, 0x01010101u);
  for (int w = 0; w < 16; ++w) {
    const auto v = Plane<kType>(gb, sub, kQs + w);
    const int h = w / 8;
    [[maybe_unused]] hn::Vec<DU> hm;
    if constexpr (kQ3) hm = Plane<kType>(gb, sub, w % 8);
    for (int j = 0; j < 4; ++j) {
      auto lv = hn::And(hn::ShiftRightSame(v, 2 * j), m3);
      if constexpr (kQ3) {
        lv = hn::Or(lv, hn::ShiftLeft<2>(hn::And(hn::ShiftRightSame(hm, 4 * h + j), m1)));
      }
      k.lv[32 * h + 8 * j + w % 8] = hn::BitCast(di, lv);
    }
  }
}

// Q4_K/Q5_K: the 8 sub-blocks' 6-bit scales and mins of slice `sub` (planes 0-2), as int32.
template <TensorType kType>
HWY_INLINE void ScalesMinsQ4Q5(const uint8_t* gb, int sub, VI (&sc)[8], VI (&mn)[8]) {
  const DI di;
  const auto s0 = Plane<kType>(gb, sub, 0), s1 = Plane<kType>(gb, sub, 1),
             s2 = Plane<kType>(gb, sub, 2);
  for (int j = 0; j < 4; ++j) {
    sc[j] = hn::And(Byte(s0, j), hn::Set(di, 63));
    mn[j] = hn::And(Byte(s1, j), hn::Set(di, 63));
    const VI hi = Byte(s2, j);
    sc[j + 4] =
        hn::Or(hn::And(hi, hn::Set(di, 0x0F)), hn::ShiftLeft<4>(hn::ShiftRight<6>(Byte(s0, j))));
    mn[j + 4] = hn::Or(hn::ShiftRight<4>(hi), hn::ShiftLeft<4>(hn::ShiftRight<6>(Byte(s1, j))));
  }
}

template <TensorType kType>
HWY_INLINE void UnpackBlock(const uint8_t* gb, int sub, KBlock& k) {
  const DI di;
  const DU du;
  if constexpr (kType == TensorType::IQ4_XS) {
    UnpackIq4Xs(gb, sub, k);
  } else if constexpr (kType == TensorType::Q2_K || kType == TensorType::Q3_K) {
    UnpackQ2Q3<kType>(gb, sub, k);
  } else if constexpr (kHasMin<kType>) {
    k.d = LoadF16(gb, sub);
    k.dmin = LoadF16(gb + 32, sub);
    VI sc[8], mn[8];
    ScalesMinsQ4Q5<kType>(gb, sub, sc, mn);
#if LYNX_INT_X86
    for (int s = 0; s < 8; ++s) k.sc[s] = ScaleLanes<kType>(sc[s]);
    for (int p = 0; p < 4; ++p) k.aux[p] = Pair(mn[2 * p], mn[2 * p + 1]);
#else
    for (int s = 0; s < 8; ++s) {
      k.sc[s] = sc[s];
      k.aux[s] = mn[s];
    }
#endif
    // Quant word w: 64-element chunk c = w / 8, bytes 4 (w % 8)..: low nibbles are elements
    // 64c + 4 (w % 8).. (plane 16c + w % 8), high nibbles 32 further (plane 16c + 8 + w % 8).
    // Q5_K: the 32 bytes of high bits (words 3..10) before the nibbles; byte l's bit 2c is
    // the fifth bit of element 64c + l, bit 2c + 1 that of 64c + 32 + l.
    constexpr int kQs = kType == TensorType::Q5_K ? 11 : 3;
    const auto m4 = hn::Set(du, 0x0F0F0F0Fu), m1 = hn::Set(du, 0x01010101u);
    for (int w = 0; w < 32; ++w) {
      const auto v = Plane<kType>(gb, sub, kQs + w);
      const int c = w / 8, p = 16 * c + w % 8;
      auto lo = hn::And(v, m4), hi = hn::And(hn::ShiftRight<4>(v), m4);
      if constexpr (kType == TensorType::Q5_K) {
        const auto qh = Plane<kType>(gb, sub, 3 + w % 8);
        lo = hn::Or(lo, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(qh, 2 * c), m1)));
        hi = hn::Or(hi, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(qh, 2 * c + 1), m1)));
      }
      k.lv[p] = hn::BitCast(di, lo);
      k.lv[p + 8] = hn::BitCast(di, hi);
    }
  } else {  // Q6_K
    k.d = LoadF16(gb, sub);
    VI sc[16];
    for (int g = 0; g < 16; ++g) {
      const VI v = hn::BitCast(di, Plane<kType>(gb, sub, 48 + g / 4));
      sc[g] = hn::ShiftRightSame(hn::ShiftLeftSame(v, 24 - 8 * (g % 4)), 24);
    }
#if LYNX_INT_X86
    for (int g = 0; g < 16; ++g) k.sc[g] = ScaleLanes<kType>(sc[g]);
    for (int p = 0; p < 8; ++p) k.aux[p] = Pair(sc[2 * p], sc[2 * p + 1]);
#else
    for (int g = 0; g < 16; ++g) k.sc[g] = sc[g];
#endif
    // Half h, word j < 8: ql words A = 16h + j, B = 16h + 8 + j, qh word H = 32 + 8h + j give
    // elements 128h + 4j.. (A low | H bits 0-1), +32 (B low | H bits 2-3), +64 (A high | H
    // bits 4-5), +96 (B high | H bits 6-7): planes 32h + j + 8 {0, 1, 2, 3}.
    const auto m4 = hn::Set(du, 0x0F0F0F0Fu), m30 = hn::Set(du, 0x30303030u);
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 8; ++j) {
        const auto a = Plane<kType>(gb, sub, 16 * h + j);
        const auto b = Plane<kType>(gb, sub, 16 * h + 8 + j);
        const auto hb = Plane<kType>(gb, sub, 32 + 8 * h + j);
        const int p = 32 * h + j;
        k.lv[p] = hn::BitCast(di, hn::Or(hn::And(a, m4), hn::And(hn::ShiftLeft<4>(hb), m30)));
        k.lv[p + 8] = hn::BitCast(di, hn::Or(hn::And(b, m4), hn::And(hn::ShiftLeft<2>(hb), m30)));
        k.lv[p + 16] = hn::BitCast(di, hn::Or(hn::And(hn::ShiftRight<4>(a), m4), hn::And(hb, m30)));
        k.lv[p + 24] = hn::BitCast(
            di, hn::Or(hn::And(hn::ShiftRight<4>(b), m4), hn::And(hn::ShiftRight<2>(hb), m30)));
      }
    }
  }
}

#if LYNX_INT_X86
#if HWY_TARGET == HWY_AVX2
HWY_INLINE VI MaddUbs(VI w, VI x) {
  return VI{_mm256_maddubs_epi16(w.raw, x.raw)};
}
HWY_INLINE VI Add16(VI a, VI b) {
  return VI{_mm256_add_epi16(a.raw, b.raw)};
}
HWY_INLINE VI Madd(VI a, VI b) {
  return VI{_mm256_madd_epi16(a.raw, b.raw)};
}
#else
HWY_INLINE VI MaddUbs(VI w, VI x) {
  return VI{_mm512_maddubs_epi16(w.raw, x.raw)};
}
HWY_INLINE VI Add16(VI a, VI b) {
  return VI{_mm512_add_epi16(a.raw, b.raw)};
}
HWY_INLINE VI Madd(VI a, VI b) {
  return VI{_mm512_madd_epi16(a.raw, b.raw)};
}
#endif
// x with the sign of w per byte (0 where w is 0), for |w| x sign(w) x: AVX2's vpsignb; AVX-512
// has none, so negate by w's sign mask (IQ4_XS levels are never 0).
HWY_INLINE VI SignBytes(VI x, VI w) {
#if HWY_TARGET == HWY_AVX2
  return VI{_mm256_sign_epi8(x.raw, w.raw)};
#else
  return VI{_mm512_mask_sub_epi8(x.raw, _mm512_movepi8_mask(w.raw), _mm512_setzero_si512(), x.raw)};
#endif
}

#if LYNX_KI_VNNI
HWY_INLINE VI Dpbusd(VI acc, VI u8, VI s8) {
  return VI{_mm512_dpbusd_epi32(acc.raw, u8.raw, s8.raw)};
}

// IQ4_XS's integer sums for one token with VNNI: per sub-block, its planes' biased levels
// (u8) x q summed into int32 by vpdpbusd, times the lane's scale (vpmulld: |dot x scale| <
// 2^25); the 128 offset out with the 32-element activation sums.
HWY_INLINE void BlockSumsIq4XsVnni(const KBlock& k, const int8_t* xq, const int32_t* sp, VI& isum,
                                   VI& msum) {
  const DI di;
  auto X = [&](int p) { return hn::Set(di, LoadI32(xq + 4 * p)); };
  VI acc = hn::Zero(di);
  for (int s = 0; s < 8; ++s) {
    VI dot = Dpbusd(hn::Zero(di), k.lv[8 * s], X(8 * s));
    for (int p = 1; p < 8; ++p) dot = Dpbusd(dot, k.lv[8 * s + p], X(8 * s + p));
    acc = hn::Add(acc, hn::Mul(dot, k.sc[s]));
  }
  VI corr = Madd(k.aux[0], hn::Set(di, sp[0]));
  for (int p = 1; p < 4; ++p) corr = hn::Add(corr, Madd(k.aux[p], hn::Set(di, sp[p])));
  isum = hn::Sub(acc, hn::ShiftLeft<7>(corr));
  msum = hn::Zero(di);
}
#endif  // LYNX_KI_VNNI

// The block's integer sums for one token: isum (scale x level x q) and, with mins, msum.
template <TensorType kType>
HWY_INLINE void BlockSums(const KBlock& k, const int8_t* xq, const int32_t* gp, const int32_t* sp,
                          VI& isum, VI& msum) {
  const DI di;
  auto X = [&](int p) { return hn::Set(di, LoadI32(xq + 4 * p)); };
  VI acc = hn::Zero(di);
#if LYNX_KI_VNNI
  if constexpr (kVnni<kType>) {
    BlockSumsIq4XsVnni(k, xq, sp, isum, msum);
    return;
  }
#endif
  if constexpr (kType == TensorType::IQ4_XS) {
    // |level| x |q| pairs stay below 2 x 127 x 127 < 2^15: one plane per vpmaddwd.
    for (int p = 0; p < 64; ++p) {
      acc = hn::Add(acc, Madd(MaddUbs(k.lv[p], SignBytes(X(p), k.sg[p])), k.sc[p / 8]));
    }
    isum = acc;
    msum = hn::Zero(di);
  } else if constexpr (kType == TensorType::Q2_K || kType == TensorType::Q3_K) {
    // Levels <= 7: the 4 planes of a sub-block summed in int16 (<= 4 x 2 x 7 x 127).
    for (int g = 0; g < 16; ++g) {
      VI s16 = MaddUbs(k.lv[4 * g], X(4 * g));
      for (int p = 1; p < 4; ++p) s16 = Add16(s16, MaddUbs(k.lv[4 * g + p], X(4 * g + p)));
      acc = hn::Add(acc, Madd(s16, k.sc[g]));
    }
    VI m = Madd(k.aux[0], hn::Set(di, gp[0]));
    for (int p = 1; p < 8; ++p) m = hn::Add(m, Madd(k.aux[p], hn::Set(di, gp[p])));
    if constexpr (kType == TensorType::Q2_K) {
      isum = acc;
      msum = m;
    } else {
      isum = hn::Sub(acc, hn::ShiftLeft<kOffsetShift<kType>>(m));
      msum = hn::Zero(di);
    }
  } else if constexpr (kHasMin<kType>) {
    constexpr int kSum = kSumPlanes<kType>;
    for (int s = 0; s < 8; ++s) {
      for (int h = 0; h < 8; h += kSum) {
        const int p0 = 8 * s + h;
        VI s16 = MaddUbs(k.lv[p0], X(p0));
        for (int p = 1; p < kSum; ++p) s16 = Add16(s16, MaddUbs(k.lv[p0 + p], X(p0 + p)));
        acc = hn::Add(acc, Madd(s16, k.sc[s]));
      }
    }
    VI m = Madd(k.aux[0], hn::Set(di, sp[0]));
    for (int p = 1; p < 4; ++p) m = hn::Add(m, Madd(k.aux[p], hn::Set(di, sp[p])));
    isum = acc;
    msum = m;
  } else {
    for (int g = 0; g < 16; ++g) {
      const VI a = Add16(MaddUbs(k.lv[4 * g], X(4 * g)), MaddUbs(k.lv[4 * g + 1], X(4 * g + 1)));
      const VI b =
          Add16(MaddUbs(k.lv[4 * g + 2], X(4 * g + 2)), MaddUbs(k.lv[4 * g + 3], X(4 * g + 3)));
      acc = hn::Add(acc, hn::Add(Madd(a, k.sc[g]), Madd(b, k.sc[g])));
    }
    VI corr = Madd(k.aux[0], hn::Set(di, gp[0]));
    for (int p = 1; p < 8; ++p) corr = hn::Add(corr, Madd(k.aux[p], hn::Set(di, gp[p])));
    isum = hn::Sub(acc, hn::ShiftLeft<kOffsetShift<kType>>(corr));
    msum = hn::Zero(di);
  }
}
#else
// Generic: each plane's 4 bytes (signed for IQ4_XS) times the 4 activation values, in int32
// lanes.
template <bool kSigned>
HWY_INLINE VI PlaneDot(VI v, const int8_t* x) {
  const DI di;
  auto byte = [&](int b) {
    if constexpr (kSigned) return hn::ShiftRightSame(hn::ShiftLeftSame(v, 24 - 8 * b), 24);
    return Byte(hn::BitCast(DU(), v), b);
  };
  VI s = hn::Mul(byte(0), hn::Set(di, int32_t{x[0]}));
  for (int b = 1; b < 4; ++b) s = hn::Add(s, hn::Mul(byte(b), hn::Set(di, int32_t{x[b]})));
  return s;
}

template <TensorType kType>
HWY_INLINE void BlockSums(const KBlock& k, const int8_t* xq, const int32_t* gp, const int32_t* sp,
                          VI& isum, VI& msum) {
  const DI di;
  VI acc = hn::Zero(di);
  constexpr int kPer = kSubPlanes<kType>;
  for (int s = 0; s < 64 / kPer; ++s) {
    VI dot = hn::Zero(di);
    for (int p = 0; p < kPer; ++p)
      dot = hn::Add(
          dot, PlaneDot<kType == TensorType::IQ4_XS>(k.lv[kPer * s + p], xq + 4 * (kPer * s + p)));
    acc = hn::Add(acc, hn::Mul(dot, k.sc[s]));
  }
  // The 16- and 32-element activation sums back out of their int16 pairs.
  auto half = [](int32_t v, int hi) {
    return int32_t(int16_t(uint16_t(uint32_t(v) >> (16 * hi))));
  };
  VI m = hn::Zero(di);
  if constexpr (kType == TensorType::IQ4_XS) {
    isum = acc;
    msum = m;
  } else if constexpr (kType == TensorType::Q2_K) {
    for (int g = 0; g < 16; ++g)
      m = hn::Add(m, hn::Mul(k.aux[g], hn::Set(di, half(gp[g / 2], g % 2))));
    isum = acc;
    msum = m;
  } else if constexpr (kHasMin<kType>) {
    for (int s = 0; s < 8; ++s)
      m = hn::Add(m, hn::Mul(k.aux[s], hn::Set(di, half(sp[s / 2], s % 2))));
    isum = acc;
    msum = m;
  } else {
    for (int g = 0; g < 16; ++g)
      m = hn::Add(m, hn::Mul(k.sc[g], hn::Set(di, half(gp[g / 2], g % 2))));
    isum = hn::Sub(acc, hn::ShiftLeft<kOffsetShift<kType>>(m));
    msum = hn::Zero(di);
  }
}
#endif

#if LYNX_KI_VNNI
// The levels form (KBlock) stores each block's 64 planes to memory and loads them back per
// group of tokens; at a few tokens that round trip, not the weights' bytes, set the rate (Q4_K
// at one token: 59-71% of the read bandwidth on a Zen 5), and on that CPU unpacking again per
// group costs less than the loads even at 64 tokens for Q4_K and IQ4_XS.
// FusedBlock computes the same integer sums straight from the group-block's planes in
// registers, with vpdpbusd into one int32 accumulator per sub-block and token, then the
// lane's scale: exact integer sums like BlockSums's, so the float update, and every output
// bit, stay the same. Measured in docs/benchmarks.md (Q4_K one token: 98-117%).
template <TensorType kType>
constexpr bool kFused = kType == TensorType::Q4_K || kType == TensorType::Q5_K ||
                        kType == TensorType::Q6_K || kType == TensorType::IQ4_XS;
// Tokens up to which a fused type takes this path, in groups of kNT (each group unpacks the
// planes again, from L1/L2 after the first). Measured on a Zen 5 (768x2048, two threads,
// against the levels form): Q4_K and IQ4_XS win at every count up to a super-pass (+18-20% and
// +8-12% at 64 tokens); Q5_K, whose fifth bit costs more per plane, up to 16 (ahead at 5-8
// and 24, -5-9% at 64); Q6_K only up to 4 (-3-18% at 5-16).
template <TensorType kType>
constexpr int kFusedMaxTokens = kType == TensorType::Q6_K   ? kNT
                                : kType == TensorType::Q5_K ? 16
                                                            : kSuperTokens;

template <TensorType kType, int NT>
HWY_INLINE void FusedBlock(const MatmulKJob& j, const uint8_t* gb, int sub, int64_t tok, int64_t b,
                           VF (&acc)[NT]) {
  const DI di;
  const DU du;
  const DF df;
  const int8_t* xq[NT];
  const int32_t* gp[NT];
  const int32_t* sp[NT];
  for (int t = 0; t < NT; ++t) {
    const int64_t tb = (tok + t) * j.n_blocks + b;
    xq[t] = j.q + (tok + t) * j.cols + b * 256;
    gp[t] = j.gpair + tb * 8;
    sp[t] = j.spair + tb * 4;
  }
  auto X = [&](int t, int p) { return hn::Set(di, LoadI32(xq[t] + 4 * p)); };
  VI isum[NT], msum[NT];
  for (int t = 0; t < NT; ++t) isum[t] = msum[t] = hn::Zero(di);
  const VF d = LoadF16(gb, sub);
  [[maybe_unused]] VF dmin;
  if constexpr (kHasMin<kType>) {  // Q4_K, Q5_K: as UnpackBlock reads them
    dmin = LoadF16(gb + 32, sub);
    VI sc[8], mn[8];
    ScalesMinsQ4Q5<kType>(gb, sub, sc, mn);
    constexpr int kQs = kType == TensorType::Q5_K ? 11 : 3;
    const auto m4 = hn::Set(du, 0x0F0F0F0Fu), m1 = hn::Set(du, 0x01010101u);
    for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high)
      VI da[NT], db[NT];
      for (int t = 0; t < NT; ++t) da[t] = db[t] = hn::Zero(di);
      for (int w = 0; w < 8; ++w) {
        const auto v = Plane<kType>(gb, sub, kQs + 8 * c + w);
        auto lo = hn::And(v, m4), hi = hn::And(hn::ShiftRight<4>(v), m4);
        if constexpr (kType == TensorType::Q5_K) {
          const auto qh = Plane<kType>(gb, sub, 3 + w);
          lo = hn::Or(lo, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(qh, 2 * c), m1)));
          hi = hn::Or(hi, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(qh, 2 * c + 1), m1)));
        }
        for (int t = 0; t < NT; ++t) {
          da[t] = Dpbusd(da[t], hn::BitCast(di, lo), X(t, 16 * c + w));
          db[t] = Dpbusd(db[t], hn::BitCast(di, hi), X(t, 16 * c + 8 + w));
        }
      }
      for (int t = 0; t < NT; ++t) {
        isum[t] =
            hn::Add(isum[t], hn::Add(hn::Mul(da[t], sc[2 * c]), hn::Mul(db[t], sc[2 * c + 1])));
      }
    }
    for (int t = 0; t < NT; ++t) {
      VI m = Madd(Pair(mn[0], mn[1]), hn::Set(di, sp[t][0]));
      for (int q = 1; q < 4; ++q) {
        m = hn::Add(m, Madd(Pair(mn[2 * q], mn[2 * q + 1]), hn::Set(di, sp[t][q])));
      }
      msum[t] = m;
    }
  } else if constexpr (kType == TensorType::Q6_K) {
    VI sc[16];
    for (int g = 0; g < 16; ++g) {
      const VI v = hn::BitCast(di, Plane<kType>(gb, sub, 48 + g / 4));
      sc[g] = hn::ShiftRightSame(hn::ShiftLeftSame(v, 24 - 8 * (g % 4)), 24);
    }
    const auto m4 = hn::Set(du, 0x0F0F0F0Fu), m30 = hn::Set(du, 0x30303030u);
    // Words j0..j0 + 3 of half h fill planes 32h + j0 + {0..3} + 8i: sub-blocks 8h + j0 / 4 + 2i.
    for (int h = 0; h < 2; ++h) {
      for (int j0 = 0; j0 < 8; j0 += 4) {
        VI dot[4][NT];
        for (auto& di4 : dot) {
          for (VI& v : di4) v = hn::Zero(di);
        }
        for (int jj = 0; jj < 4; ++jj) {
          const int jw = j0 + jj, p = 32 * h + jw;
          const auto a = Plane<kType>(gb, sub, 16 * h + jw);
          const auto bq = Plane<kType>(gb, sub, 16 * h + 8 + jw);
          const auto hb = Plane<kType>(gb, sub, 32 + 8 * h + jw);
          const VI lv[4] = {
              hn::BitCast(di, hn::Or(hn::And(a, m4), hn::And(hn::ShiftLeft<4>(hb), m30))),
              hn::BitCast(di, hn::Or(hn::And(bq, m4), hn::And(hn::ShiftLeft<2>(hb), m30))),
              hn::BitCast(di, hn::Or(hn::And(hn::ShiftRight<4>(a), m4), hn::And(hb, m30))),
              hn::BitCast(di, hn::Or(hn::And(hn::ShiftRight<4>(bq), m4),
                                     hn::And(hn::ShiftRight<2>(hb), m30)))};
          for (int i = 0; i < 4; ++i) {
            for (int t = 0; t < NT; ++t) dot[i][t] = Dpbusd(dot[i][t], lv[i], X(t, p + 8 * i));
          }
        }
        for (int i = 0; i < 4; ++i) {
          const int g = 8 * h + j0 / 4 + 2 * i;
          for (int t = 0; t < NT; ++t) isum[t] = hn::Add(isum[t], hn::Mul(dot[i][t], sc[g]));
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      VI corr = Madd(Pair(sc[0], sc[1]), hn::Set(di, gp[t][0]));
      for (int q = 1; q < 8; ++q) {
        corr = hn::Add(corr, Madd(Pair(sc[2 * q], sc[2 * q + 1]), hn::Set(di, gp[t][q])));
      }
      isum[t] = hn::Sub(isum[t], hn::ShiftLeft<kOffsetShift<kType>>(corr));
    }
  } else {  // IQ4_XS: levels biased to unsigned as UnpackIq4Xs's VNNI form
    const hn::Repartition<uint8_t, DI> du8;
    const auto gridu = hn::LoadDup128(du8, kIq4GridU);
    const auto m4 = hn::Set(du, 0x0F0F0F0Fu);
    VI sc[8];
    ScalesIq4Xs(gb, sub, sc);
    for (int ib = 0; ib < 8; ++ib) {
      VI dot[NT];
      for (int t = 0; t < NT; ++t) dot[t] = hn::Zero(di);
      for (int w = 0; w < 4; ++w) {
        const auto v = Plane<kType>(gb, sub, 1 + 4 * ib + w);
        const VI lv =
            hn::BitCast(di, hn::TableLookupBytes(gridu, hn::BitCast(du8, hn::And(v, m4))));
        const VI hv = hn::BitCast(
            di, hn::TableLookupBytes(gridu, hn::BitCast(du8, hn::And(hn::ShiftRight<4>(v), m4))));
        for (int t = 0; t < NT; ++t) {
          dot[t] = Dpbusd(dot[t], lv, X(t, 8 * ib + w));
          dot[t] = Dpbusd(dot[t], hv, X(t, 8 * ib + w + 4));
        }
      }
      for (int t = 0; t < NT; ++t) isum[t] = hn::Add(isum[t], hn::Mul(dot[t], sc[ib]));
    }
    for (int t = 0; t < NT; ++t) {
      VI corr = Madd(Pair(sc[0], sc[1]), hn::Set(di, sp[t][0]));
      for (int q = 1; q < 4; ++q) {
        corr = hn::Add(corr, Madd(Pair(sc[2 * q], sc[2 * q + 1]), hn::Set(di, sp[t][q])));
      }
      isum[t] = hn::Sub(isum[t], hn::ShiftLeft<7>(corr));
    }
  }
  for (int t = 0; t < NT; ++t) {
    const VF dx = hn::Set(df, j.d[(tok + t) * j.n_blocks + b]);
    acc[t] = FmaExact(DF(), hn::Mul(d, dx), hn::ConvertTo(df, isum[t]), acc[t]);
    if constexpr (kHasMin<kType>) {
      acc[t] = FmaExact(DF(), hn::Neg(hn::Mul(dmin, dx)), hn::ConvertTo(df, msum[t]), acc[t]);
    }
  }
}
#endif  // LYNX_KI_VNNI

// Adds block b of NT tokens (from token `tok` of the job) into acc.
template <TensorType kType, int NT>
HWY_INLINE void AddBlock(const MatmulKJob& j, const KBlock& k, int64_t tok, int64_t b,
                         VF (&acc)[NT]) {
  const DF df;
  for (int t = 0; t < NT; ++t) {
    const int64_t tb = (tok + t) * j.n_blocks + b;
    VI isum, msum;
    BlockSums<kType>(k, j.q + (tok + t) * j.cols + b * 256, j.gpair + tb * 8, j.spair + tb * 4,
                     isum, msum);
    const VF dx = hn::Set(df, j.d[tb]);
    acc[t] = FmaExact(DF(), hn::Mul(k.d, dx), hn::ConvertTo(df, isum), acc[t]);
    if constexpr (kHasMin<kType>) {
      acc[t] = FmaExact(DF(), hn::Neg(hn::Mul(k.dmin, dx)), hn::ConvertTo(df, msum), acc[t]);
    }
  }
}

// The kNR-row slice holding rows [row0, row0 + kNR): slice `sub` of a 16-row group.
struct Slice {
  const uint8_t* group;
  const uint8_t* next;  // the next group (prefetched while this one computes)
  int64_t row0;
  int sub, lo, hi;
  Slice(const MatmulKJob& j, int64_t r) : row0(r) {
    group = j.w + (row0 / kG) * kG * j.row_bytes;
    next = group + kG * j.row_bytes;
    sub = static_cast<int>(row0 % kG) / kNR;
    lo = static_cast<int>(std::max<int64_t>(j.r0 - row0, 0));
    hi = static_cast<int>(std::min<int64_t>(j.r1 - row0, kNR));
  }
};

// The share of slice `sub` of the next group's block b (address order, every slice of the
// group prefetching its part): prefetches never fault, so past the matrix's end is harmless.
template <TensorType kType>
HWY_INLINE void Prefetch(const Slice& s, int64_t b) {
  constexpr int64_t kBytes = kG * BlockBytes<kType>(), kShare = kBytes / (kG / kNR);
  const uint8_t* p = s.next + b * kBytes;
  for (int64_t o = (s.sub * kShare) & ~int64_t{63}; o < (s.sub + 1) * kShare; o += 64) {
    hwy::Prefetch(p + o);
  }
}

template <TensorType kType>
HWY_NOINLINE void RunSlice(const MatmulKJob& j, const Slice& s) {
  const DF df;
  constexpr int64_t kGroupBlock = kG * BlockBytes<kType>();
  KBlock k;
  HWY_ALIGN float accbuf[kSuperTokens * kNR];  // [token][row]
  for (int s0 = 0; s0 < j.n_tok; s0 += kSuperTokens) {
    const int ns = std::min(kSuperTokens, j.n_tok - s0);
    // The fused types run up to kFusedMaxTokens as groups of at most kNT, one after the other
    // over the slice's blocks (the slice's bytes are in L1/L2 for the groups after the first).
    int few = kNT;
#if LYNX_KI_VNNI
    if constexpr (kFused<kType>) few = kFusedMaxTokens<kType>;
#endif
    if (ns <= few) {
      const int groups = (ns + kNT - 1) / kNT;
      for (int gi = 0, g0 = 0; gi < groups; ++gi) {
        const int gn = ns / groups + (gi < ns % groups ? 1 : 0);
        WithTokenCount<kNT>(gn, [&]<int NT>() {
          VF acc[NT];
          for (int t = 0; t < NT; ++t) acc[t] = hn::Zero(df);
          for (int64_t b = 0; b < j.n_blocks; ++b) {
            Prefetch<kType>(s, b);
#if LYNX_KI_VNNI
            if constexpr (kFused<kType>) {
              FusedBlock<kType, NT>(j, s.group + b * kGroupBlock, s.sub, s0 + g0, b, acc);
              continue;
            }
#endif
            UnpackBlock<kType>(s.group + b * kGroupBlock, s.sub, k);
            AddBlock<kType, NT>(j, k, s0 + g0, b, acc);
          }
          for (int t = 0; t < NT; ++t) hn::Store(acc[t], df, accbuf + (g0 + t) * kNR);
        });
        g0 += gn;
      }
    } else {
      for (int k0 = 0; k0 < ns * kNR; k0 += kNR) hn::Store(hn::Zero(df), df, accbuf + k0);
      for (int64_t b = 0; b < j.n_blocks; ++b) {
        Prefetch<kType>(s, b);
        UnpackBlock<kType>(s.group + b * kGroupBlock, s.sub, k);
        for (int t0 = 0; t0 < ns; t0 += kNT) {
          WithTokenCount<kNT>(std::min(kNT, ns - t0), [&]<int NT>() {
            VF acc[NT];
            for (int t = 0; t < NT; ++t) acc[t] = hn::Load(df, accbuf + (t0 + t) * kNR);
            AddBlock<kType, NT>(j, k, s0 + t0, b, acc);
            for (int t = 0; t < NT; ++t) hn::Store(acc[t], df, accbuf + (t0 + t) * kNR);
          });
        }
      }
    }
    for (int t = 0; t < ns; ++t) {
      StoreLanes(DF(), accbuf + t * kNR, s.lo, s.hi, j.y + (s0 + t) * j.ldy + s.row0);
    }
  }
}

void MatmulKI16T(const MatmulKJob& j) {
  // kNR divides 16, so the kNR-aligned slices from r0's tile each one group.
  static_assert(kG % kNR == 0);
  for (int64_t r = j.r0 - j.r0 % kNR; r < j.r1; r += kNR) {
    const Slice s(j, r);
    dispatch_type<kKKernelTypes>(j.type, [&]<TensorType kType>() { RunSlice<kType>(j, s); });
  }
}

#if LYNX_KI_VNNI
HWY_POP_ATTRIBUTES
#endif

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lynx::kernels {

HWY_EXPORT(MatmulKI16T);

void matmul_rows_k_i16(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                       const QuantizedActsK& x, int t0, int n_tok, float* y, int64_t ldy) {
  const int64_t nb = cols / 256;
  for_each_token_panel(cols, n_tok, [&](int p0, int n) {
    const int64_t tp = t0 + p0;
    const MatmulKJob job{t,
                         static_cast<const uint8_t*>(w),
                         static_cast<int64_t>(weight_row_bytes(t, cols)),
                         nb,
                         r0,
                         r1,
                         x.q.data() + tp * cols,
                         x.d.data() + tp * nb,
                         x.gpair.data() + tp * nb * 8,
                         x.spair.data() + tp * nb * 4,
                         cols,
                         n,
                         y + p0 * ldy,
                         ldy};
    HWY_DYNAMIC_DISPATCH(MatmulKI16T)(job);
  });
}

}  // namespace lynx::kernels
#endif  // HWY_ONCE
