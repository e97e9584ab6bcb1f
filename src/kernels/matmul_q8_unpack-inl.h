// The per-target weight unpacking of the int8 matmul (matmul_q8.cc): for each 32-element
// weight type, the vector shape (DI, kNR lanes = rows per block), the type's block constants,
// and the decoders that turn one 32-column block of kNR rows, in either layout (kRows,
// kInterleaved16), into the planes and scales that matmul_q8.cc's DotBlock and AddBlock use
// (matmul_q8.cc's opening comment describes the planes). Compiled once per instruction set
// with matmul_q8.cc, so this header follows Highway's -inl.h convention (its guard toggles
// with HWY_TARGET_TOGGLE and it is included once per target, after hwy/highway.h). It also
// defines LYNX_INT_X86 for the target, which matmul_q8.cc's DotBlock is chosen by.
#if defined(LYNX_KERNELS_MATMUL_Q8_UNPACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LYNX_KERNELS_MATMUL_Q8_UNPACK_INL_H_
#undef LYNX_KERNELS_MATMUL_Q8_UNPACK_INL_H_
#else
#define LYNX_KERNELS_MATMUL_Q8_UNPACK_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "kernels/types/blocks.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using icommon::DF;
using icommon::DI;
using icommon::kNR;
using icommon::VF;
using icommon::VI;

// The legacy 32-element types beside Q8_0 / Q4_0 (types/*.cc): Q4_1 / Q5_1 add a min
// (value = level d + m, ggml's Q8_1 products: the min times the activation block's sum),
// Q5_0 / Q5_1 a fifth bit per element (a 32-bit word qh, bit e for element e), IQ4_NL / MXFP4
// look the nibble up in a grid of signed bytes (then computed as Q8_0 weights are), MXFP4's
// scale is an E8M0 byte.
template <TensorType kType>
constexpr int64_t BlockBytes() {
  return type_row(kType)->block_bytes;
}
template <TensorType kType>
constexpr bool kHasMin = kType == TensorType::Q4_1 || kType == TensorType::Q5_1;
template <TensorType kType>
constexpr bool kHi5 = kType == TensorType::Q5_0 || kType == TensorType::Q5_1;
template <TensorType kType>
constexpr bool kGrid = kType == TensorType::IQ4_NL || kType == TensorType::MXFP4;
// Signed weight bytes (Q8_0, the grids): the |w| x sign(w) q products without VNNI.
template <TensorType kType>
constexpr bool kSignedW = kType == TensorType::Q8_0 || kGrid<kType>;
// Bytes of the scalar fields at the block's start (the interleaved layout keeps them as 16
// values each before the planes), and of each field.
template <TensorType kType>
constexpr int64_t kFieldBytes = type_row(kType)->interleave.field_bytes;
template <TensorType kType>
constexpr int64_t kFields = type_row(kType)->interleave.fields;
static_assert(kFields<TensorType::Q4_1> == 2 && kFields<TensorType::Q8_0> == 1 &&
              kFieldBytes<TensorType::MXFP4> == 1 &&
              !type_row(TensorType::Q8_0)->interleave.at_end);
// The unsigned level's offset for the types stored biased (Q4_0 8, Q5_0 16).
template <TensorType kType>
constexpr int32_t kLevelOffset = kType == TensorType::Q4_0   ? 8
                                 : kType == TensorType::Q5_0 ? 16
                                                             : 0;

#if HWY_TARGET == HWY_AVX3_DL
// VNNI: unsigned weights (Q8_0 and the grids biased by 128), dot = vpdpbusd, offset from the
// block sum.
template <TensorType kType>
constexpr int kPlanes = 8;
template <TensorType kType>
constexpr int32_t kOffset = kSignedW<kType> ? 128 : kLevelOffset<kType>;
#elif LYNX_INT_X86
// vpmaddubsw: nibble levels with their offset; Q8_0 and the grids as |w| (planes 0-7) and w
// (planes 8-15).
template <TensorType kType>
constexpr int kPlanes = kSignedW<kType> ? 16 : 8;
template <TensorType kType>
constexpr int32_t kOffset = kSignedW<kType> ? 0 : kLevelOffset<kType>;
#else
// Generic: one int32 plane per column holding the signed weight value.
template <TensorType kType>
constexpr int kPlanes = 32;
template <TensorType kType>
constexpr int32_t kOffset = 0;
#endif

// One unpacked 32-column block of kNR rows: the planes and the rows' scales.
template <TensorType kType>
struct Block {
  VI pl[kPlanes<kType>];
  VF dw;
  VF mw;  // Q4_1 / Q5_1: the rows' mins
};

// kNR fp16 values widened. x86 converts with F16C; the portable targets with the scalar
// conversion, because Highway's emulated one does not keep Inf and NaN (a block with such a
// scale must give the scalar twin's NaN).
HWY_INLINE VF F16ToF32(const void* p) {
#if LYNX_INT_X86
  const hn::Rebind<hwy::float16_t, DI> df16;
  return hn::PromoteTo(DF(), hn::LoadU(df16, static_cast<const hwy::float16_t*>(p)));
#else
  HWY_ALIGN float f[kNR];
  for (int i = 0; i < kNR; ++i) {
    uint16_t h;
    std::memcpy(&h, static_cast<const uint8_t*>(p) + 2 * i, 2);
    f[i] = fp16_to_fp32(h);
  }
  return hn::Load(DF(), f);
#endif
}

// The fp16 block scales of the kNR rows, read with scalar loads: a gather costs more on the
// vector side (measured on Zen 5), and these run on the integer ports next to the vector work.
HWY_INLINE VF LoadScales(const uint8_t* const* rows, int64_t boff) {
  HWY_ALIGN uint16_t h[kNR];
  for (int i = 0; i < kNR; ++i) std::memcpy(&h[i], rows[i] + boff, 2);
  return F16ToF32(h);
}

// kNR E8M0 bytes at p, as types::e8m0_half gives them, in vector ops: bits (e - 1) << 23, and
// (e + 1) << 21 for the two subnormal exponents 0 and 1 (2^-128, 2^-127). The scalar form
// spends ~5 integer ops and a store per row on it, and the vector load of those 16 stores
// cannot be forwarded: at 1-4 tokens per expert that was as much work as the nibbles.
HWY_INLINE VF LoadE8m0(const uint8_t* p) {
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const VI e = hn::PromoteTo(di, hn::LoadU(d8, p));
  const VI one = hn::Set(di, 1);
  const VI normal = hn::ShiftLeft<23>(hn::Sub(e, one));
  const VI subnormal = hn::ShiftLeft<21>(hn::Add(e, one));
  return hn::BitCast(DF(), hn::IfThenElse(hn::Gt(e, one), normal, subnormal));
}

// The block's scale (and min) from field 0 (and 1) of every row's block at boff.
template <TensorType kType>
HWY_INLINE void LoadFieldsRows(const uint8_t* const* rows, int64_t boff, Block<kType>& blk) {
  if constexpr (kType == TensorType::MXFP4) {
    HWY_ALIGN uint8_t e[kNR];
    for (int i = 0; i < kNR; ++i) e[i] = rows[i][boff];
    blk.dw = LoadE8m0(e);
  } else {
    blk.dw = LoadScales(rows, boff);
  }
  if constexpr (kHasMin<kType>) blk.mw = LoadScales(rows, boff + 2);
}

// The same from an interleaved group-block (16 values per field, row 0 first), slice `sub`.
template <TensorType kType>
HWY_INLINE void LoadFieldsI16(const uint8_t* gb, int sub, Block<kType>& blk) {
  auto f16 = [&](const uint8_t* p) { return F16ToF32(p + 2 * sub * kNR); };
  if constexpr (kType == TensorType::MXFP4) {
    blk.dw = LoadE8m0(gb + sub * kNR);
  } else {
    blk.dw = f16(gb);
  }
  if constexpr (kHasMin<kType>) blk.mw = f16(gb + 32);
}

#if LYNX_INT_X86
// The 16-byte pieces at p[0..kNR/4) in the 128-bit blocks of one vector, block m from p[m].
HWY_INLINE VI LoadPieces(const uint8_t* const* p) {
  const hn::Full128<int32_t> d128;
  auto ld = [&](int m) { return hn::LoadU(d128, reinterpret_cast<const int32_t*>(p[m])); };
#if HWY_TARGET == HWY_AVX2
  return hn::Combine(DI(), ld(1), ld(0));
#else
  const hn::Full256<int32_t> d256;
  return hn::Combine(DI(), hn::Combine(d256, ld(3), ld(2)), hn::Combine(d256, ld(1), ld(0)));
#endif
}

// 4x4 int32 transpose inside every 128-bit block: v[g] dword k <- v[k] dword g.
HWY_INLINE void Transpose4(VI* v) {
  const DI d;
  const hn::Repartition<int64_t, DI> d64;
  const VI t0 = hn::InterleaveLower(d, v[0], v[1]), t1 = hn::InterleaveUpper(d, v[0], v[1]);
  const VI t2 = hn::InterleaveLower(d, v[2], v[3]), t3 = hn::InterleaveUpper(d, v[2], v[3]);
  auto lo = [&](VI a, VI b) {
    return hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, a), hn::BitCast(d64, b)));
  };
  auto hi = [&](VI a, VI b) {
    return hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, a), hn::BitCast(d64, b)));
  };
  v[0] = lo(t0, t2);
  v[1] = hi(t0, t2);
  v[2] = lo(t1, t3);
  v[3] = hi(t1, t3);
}

// Four planes from the 16 bytes at byte offset `off` of every row's block: block m of
// vector k is row 4m + k, so after the transpose lane 4m + k = row 4m + k.
HWY_INLINE void LoadPlanes4(const uint8_t* const* rows, int64_t off, VI* v) {
  for (int k = 0; k < 4; ++k) {
    const uint8_t* p[kNR / 4];
    for (int m = 0; m < kNR / 4; ++m) p[m] = rows[4 * m + k] + off;
    v[k] = LoadPieces(p);
  }
  Transpose4(v);
}

// The eight planes of the 32 bytes at byte offset `off` of every row's block: rows loaded
// whole (two per vector with AVX-512), then an 8x8 int32 transpose inside each 256-bit half.
// Fewer loads than LoadPlanes4 twice (16 instead of 56 load and insert uops with AVX-512).
HWY_INLINE void LoadPlanesQ8(const uint8_t* const* rows, int64_t off, VI* pl) {
  const DI d;
  const hn::Repartition<int64_t, DI> d64;
  const hn::Full256<int32_t> d256;
  VI z[8];
  for (int k = 0; k < 8; ++k) {
#if HWY_TARGET == HWY_AVX2
    z[k] = hn::LoadU(d256, reinterpret_cast<const int32_t*>(rows[k] + off));
#else
    // Rows k, k + 4 for k < 4 and k + 4, k + 8 above: after the transpose and the block
    // shuffle below, lane i holds row i.
    const int a = k < 4 ? k : k + 4;
    z[k] = hn::Combine(d, hn::LoadU(d256, reinterpret_cast<const int32_t*>(rows[a + 4] + off)),
                       hn::LoadU(d256, reinterpret_cast<const int32_t*>(rows[a] + off)));
#endif
  }
  auto lo = [&](VI a, VI b) {
    return hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, a), hn::BitCast(d64, b)));
  };
  auto hi = [&](VI a, VI b) {
    return hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, a), hn::BitCast(d64, b)));
  };
  VI a[4], b[4];
  for (int j = 0; j < 4; ++j) {
    a[j] = hn::InterleaveLower(d, z[2 * j], z[2 * j + 1]);
    b[j] = hn::InterleaveUpper(d, z[2 * j], z[2 * j + 1]);
  }
  // c[i] / e[i], 128-bit block m: dword 4 (m % 2) + i of the rows in z[0..4) / z[4..8)
  // (first halves for m < 2, second halves above).
  const VI c[4] = {lo(a[0], a[1]), hi(a[0], a[1]), lo(b[0], b[1]), hi(b[0], b[1])};
  const VI e[4] = {lo(a[2], a[3]), hi(a[2], a[3]), lo(b[2], b[3]), hi(b[2], b[3])};
  for (int i = 0; i < 4; ++i) {
#if HWY_TARGET == HWY_AVX2
    pl[i] = hn::ConcatLowerLower(d, e[i], c[i]);
    pl[i + 4] = hn::ConcatUpperUpper(d, e[i], c[i]);
#else
    // No Highway op picks 128-bit blocks from two vectors like this: vshufi32x4.
    pl[i] = VI{_mm512_shuffle_i32x4(c[i].raw, e[i].raw, 0x88)};      // blocks 0, 2 | 0, 2
    pl[i + 4] = VI{_mm512_shuffle_i32x4(c[i].raw, e[i].raw, 0xDD)};  // blocks 1, 3 | 1, 3
#endif
  }
}

// Bits 0-3 of every lane of t into bit 0 of its bytes 0-3: t x 0x00204081 puts bit k at bit
// 8k (the four shifted copies never overlap, so no carries).
HWY_INLINE VI SpreadBits4(VI t) {
  const DI di;
  return hn::And(hn::Mul(hn::And(t, hn::Set(di, 0xF)), hn::Set(di, 0x00204081)),
                 hn::Set(di, 0x01010101));
}

// The 4 planes of nibble bytes v into the 8 planes of the block (byte j holds column j in its
// low nibble and column j + 16 in its high nibble); Q5_0 / Q5_1 add the fifth bits from qh
// (lane i: row i's 32-bit qh); IQ4_NL / MXFP4 map the nibbles through their grid.
template <TensorType kType>
HWY_INLINE void SplitNibbles(const VI* v, VI qh, Block<kType>& blk) {
  const DI di;
  const hn::RebindToUnsigned<DI> du;
#if HWY_TARGET == HWY_AVX3_DL
  if constexpr (kGrid<kType>) {
    // vpermb (AVX512_VBMI, part of this target) reads only bits 0-5 of each index byte: with
    // the 16 biased grid bytes repeated 4 times, a byte looks up its low nibble as it is and
    // its high nibble after a 4-bit shift of the dword, whatever the bits above the nibble.
    // No masks, so 4 fewer vector ops per plane pair than an AND + vpshufb lookup.
    // The table as constants (a table filled on the stack costs 64 stores per block).
    constexpr const int8_t* grid =
        kType == TensorType::MXFP4 ? types::kMxfp4Values : types::kIq4nlValues;
    constexpr auto b = [](int k) { return static_cast<char>(grid[k] ^ 0x80); };
    const __m512i tbl =
        _mm512_broadcast_i32x4(_mm_setr_epi8(b(0), b(1), b(2), b(3), b(4), b(5), b(6), b(7), b(8),
                                             b(9), b(10), b(11), b(12), b(13), b(14), b(15)));
    for (int g = 0; g < 4; ++g) {
      blk.pl[g] = VI{_mm512_permutexvar_epi8(v[g].raw, tbl)};
      blk.pl[g + 4] = VI{_mm512_permutexvar_epi8(_mm512_srli_epi32(v[g].raw, 4), tbl)};
    }
    return;
  }
#endif
  const VI mask = hn::Set(di, 0x0F0F0F0F);
  for (int g = 0; g < 4; ++g) {
    blk.pl[g] = hn::And(v[g], mask);
    blk.pl[g + 4] = hn::And(hn::BitCast(di, hn::ShiftRight<4>(hn::BitCast(du, v[g]))), mask);
    if constexpr (kHi5<kType>) {
      const VI lo = hn::BitCast(di, hn::ShiftRightSame(hn::BitCast(du, qh), 4 * g));
      const VI hi = hn::BitCast(di, hn::ShiftRightSame(hn::BitCast(du, qh), 16 + 4 * g));
      blk.pl[g] = hn::Or(blk.pl[g], hn::ShiftLeft<4>(SpreadBits4(lo)));
      blk.pl[g + 4] = hn::Or(blk.pl[g + 4], hn::ShiftLeft<4>(SpreadBits4(hi)));
    }
  }
#if HWY_TARGET != HWY_AVX3_DL  // (AVX3_DL looked the grids up above)
  if constexpr (kGrid<kType>) {
    const int8_t* grid = kType == TensorType::MXFP4 ? types::kMxfp4Values : types::kIq4nlValues;
    const hn::Repartition<int8_t, DI> d8;
    HWY_ALIGN int8_t copy[16];
    std::memcpy(copy, grid, 16);
    const auto tbl = hn::LoadDup128(d8, copy);
    for (int g = 0; g < 8; ++g) {
      const auto w = hn::TableLookupBytes(tbl, hn::BitCast(d8, blk.pl[g]));
      blk.pl[8 + g] = hn::BitCast(di, w);
      blk.pl[g] = hn::BitCast(di, hn::Abs(w));
    }
  }
#endif
}

// Row i's 32-bit word at byte offset off of its block, in lane i.
HWY_INLINE VI LoadWordRows(const uint8_t* const* rows, int64_t off) {
  HWY_ALIGN int32_t h[kNR];
  for (int i = 0; i < kNR; ++i) std::memcpy(&h[i], rows[i] + off, 4);
  return hn::Load(DI(), h);
}

// Q8_0: the 8 planes of signed quants in blk.pl[0..8) into what DotBlock takes.
template <TensorType kType>
HWY_INLINE void FinishQ8Planes(Block<kType>& blk) {
  const DI di;
#if HWY_TARGET == HWY_AVX3_DL
  for (int g = 0; g < 8; ++g) blk.pl[g] = hn::Xor(blk.pl[g], hn::Set(di, int32_t(0x80808080u)));
#else
  const hn::Repartition<int8_t, DI> d8;
  for (int g = 0; g < 8; ++g) {
    blk.pl[8 + g] = blk.pl[g];
    blk.pl[g] = hn::BitCast(di, hn::Abs(hn::BitCast(d8, blk.pl[g])));
  }
#endif
}

// kRows: block at byte offset boff of each of the kNR rows.
template <TensorType kType>
HWY_INLINE void UnpackRows(const uint8_t* const* rows, int64_t boff, Block<kType>& blk) {
  LoadFieldsRows<kType>(rows, boff, blk);
  constexpr int64_t kWords = kFields<kType> * kFieldBytes<kType>;
  if constexpr (kType != TensorType::Q8_0) {
    VI v[4];
    LoadPlanes4(rows, boff + kWords + (kHi5<kType> ? 4 : 0), v);
    const VI qh = kHi5<kType> ? LoadWordRows(rows, boff + kWords) : hn::Zero(DI());
    SplitNibbles<kType>(v, qh, blk);
  } else {
    LoadPlanesQ8(rows, boff + 2, blk.pl);
    FinishQ8Planes(blk);
  }
}

// kInterleaved16: `gb` is the block's 16-row group-block, `sub` which kNR of its 16 rows (the
// lane slice of every plane: the whole 64 bytes with AVX-512, a 32-byte half with AVX2).
template <TensorType kType>
HWY_INLINE void UnpackI16(const uint8_t* gb, int sub, Block<kType>& blk) {
  const DI di;
  LoadFieldsI16<kType>(gb, sub, blk);
  const int32_t* q =
      reinterpret_cast<const int32_t*>(gb + kInterleaveRows * kFields<kType> * kFieldBytes<kType>) +
      sub * kNR;
  if constexpr (kType != TensorType::Q8_0) {
    // Q5_0 / Q5_1: plane 0 is qh, the nibbles follow.
    constexpr int kQs = kHi5<kType> ? 1 : 0;
    VI v[4];
    for (int g = 0; g < 4; ++g) v[g] = hn::LoadU(di, q + 16 * (kQs + g));
    SplitNibbles<kType>(v, kHi5<kType> ? hn::LoadU(di, q) : hn::Zero(di), blk);
  } else {
    for (int g = 0; g < 8; ++g) blk.pl[g] = hn::LoadU(di, q + 16 * g);
    FinishQ8Planes(blk);
  }
}

#else  // generic Highway

// Column e's signed weight in lane i; byte(i, k) is quant byte k of lane i's block.
// byte(i, k): byte k of row i's block after its fields (Q5_0 / Q5_1: qh, then the nibbles).
// Min types keep their unsigned level (the min term is separate); the others the value.
template <TensorType kType, class ByteAt>
HWY_INLINE void UnpackColumns(ByteAt byte, Block<kType>& blk) {
  const DI di;
  HWY_ALIGN int32_t w[32][kNR];
  constexpr int kQs = kHi5<kType> ? 4 : 0;
  for (int i = 0; i < kNR; ++i) {
    uint32_t qh = 0;
    if constexpr (kHi5<kType>) {
      for (int k = 0; k < 4; ++k) qh |= uint32_t(byte(i, k)) << (8 * k);
    }
    for (int e = 0; e < 32; ++e) {
      if constexpr (kType == TensorType::Q8_0) {
        w[e][i] = static_cast<int8_t>(byte(i, e));
      } else {
        int nib = e < 16 ? (byte(i, kQs + e) & 0x0F) : (byte(i, kQs + e - 16) >> 4);
        if constexpr (kType == TensorType::IQ4_NL) {
          w[e][i] = types::kIq4nlValues[nib];
        } else if constexpr (kType == TensorType::MXFP4) {
          w[e][i] = types::kMxfp4Values[nib];
        } else {
          if constexpr (kHi5<kType>) nib |= int((qh >> e) & 1) << 4;
          w[e][i] = nib - kLevelOffset<kType>;
        }
      }
    }
  }
  for (int e = 0; e < 32; ++e) blk.pl[e] = hn::Load(di, w[e]);
}

template <TensorType kType>
HWY_INLINE void UnpackRows(const uint8_t* const* rows, int64_t boff, Block<kType>& blk) {
  LoadFieldsRows<kType>(rows, boff, blk);
  constexpr int64_t kWords = kFields<kType> * kFieldBytes<kType>;
  UnpackColumns<kType>([&](int i, int k) { return rows[i][boff + kWords + k]; }, blk);
}

// kInterleaved16: lane i = row sub * kNR + i of the 16-row group-block `gb`.
template <TensorType kType>
HWY_INLINE void UnpackI16(const uint8_t* gb, int sub, Block<kType>& blk) {
  LoadFieldsI16<kType>(gb, sub, blk);
  const uint8_t* q = gb + kInterleaveRows * kFields<kType> * kFieldBytes<kType> + 4 * sub * kNR;
  UnpackColumns<kType>([&](int i, int k) { return q[64 * (k / 4) + 4 * i + k % 4]; }, blk);
}

#endif  // LYNX_INT_X86

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#endif  // LYNX_KERNELS_MATMUL_Q8_UNPACK_INL_H_
