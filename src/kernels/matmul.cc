// SIMD matmul over weight rows kept in their file type, and SIMD dequantization.
// Highway with dynamic dispatch: this file is compiled once per instruction set
// (foreach_target.h) and matmul_rows() calls the best one the CPU supports.
//
// The model loader stores F32/F16/BF16 matrices in 16-row panels (kPanel16, kernels.h), which
// the outer-product kernel below (PanelBlock) reads; the row kernels that follow here serve
// the file's layout (quantized rows on the float path, float matrices whose rows are not a
// multiple of 16, and LoadOptions::repack_float = false).
//
// Decode (n_tok = 1..64) is memory-bandwidth bound: every weight byte must be read from DRAM
// exactly once per call, for all tokens. So the weights of a block of kNR rows are decoded
// into registers once per step of 32 columns and multiplied into the accumulators of every
// token of a group of up to kNT tokens (kNR * kNT independent FMA chains also hide the FMA
// latency). With more tokens than one group, decoding in registers once per group would
// multiply the (quantized) decode cost, so quantized rows (and float rows beyond 32 tokens)
// are decoded chunk by chunk into an L1 buffer instead and each token group streams the decoded
// floats; the accumulators are saved between chunks, so every output sees exactly the same sequence
// of FMAs in both paths and for any row split: results never depend on threads or on how many
// tokens came along.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "kernels/types.h"
#include "lynx/error.h"

#ifndef LYNX_KERNELS_MATMUL_JOB
#define LYNX_KERNELS_MATMUL_JOB
namespace lynx::kernels {
// One matmul_rows call, validated (see kernels.h for the meaning of the fields). On a
// kPanel16 matrix rows [r0, r1) are stored, and the whole 16-row groups they touch computed.
struct MatmulJob {
  TensorType type;
  const uint8_t* w;
  int64_t row_bytes;
  int64_t cols;
  int64_t r0, r1;
  const float* x;
  int64_t ldx;
  int n_tok;
  float* y;
  int64_t ldy;
};
}  // namespace lynx::kernels
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "hwy/cache_control.h"
#include "kernels/float_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

static_assert(kN <= 16 && 16 % kN == 0, "Q4_0 decoding assumes 4, 8 or 16 f32 lanes");

// Rows per block and tokens per group: kNR * kNT accumulators + kNR decoded weight vectors
// must fit the register file (32 vectors with AVX-512, 16 with AVX2 and SSE).
#if HWY_TARGET <= HWY_AVX3
constexpr int kNR = 4;
#else
constexpr int kNR = 2;
#endif
constexpr int kNT = 4;
constexpr int64_t kChunkCols = 512;  // decoded chunk: kNR * 512 floats = 8 KiB, stays in L1
constexpr int kSuperTokens = 64;     // token groups sharing one decoded chunk
static_assert(kChunkCols % 32 == 0 && kSuperTokens % kNT == 0);
// F32/F16/BF16 rows cost one load (and one conversion) per vector to decode, so re-reading a
// row block from L1 for every token group is cheaper than the buffered path's stores and
// accumulator spills up to about 32 tokens (bench_kernels, 2048 x 2048 F16, one thread:
// 126 vs 73 GFLOPS at 5 tokens, 146 vs 126 at 16, level at 32, 178 vs 152 buffered at 64).
constexpr int kDirectMaxFloat = 32;

// Broadcasts the fp16 block scale at p to all lanes (vcvtph2ps on x86).
HWY_INLINE VF BroadcastF16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(DF(), hn::BitCast(dh, hn::Set(du16, bits)));
}

// Decoders turn kStep elements of a weight row, starting at column c (a multiple of kStep),
// into kStep / kN f32 vectors in element order.
struct DecF32 {
  static constexpr int64_t kStep = kN;
  static constexpr int64_t kElemBytes = 4;
  static constexpr int64_t Bytes(int64_t c) { return c * 4; }
  static HWY_INLINE void Decode(const uint8_t* row, int64_t c, VF* out) {
    out[0] = hn::LoadU(DF(), reinterpret_cast<const float*>(row) + c);
  }
};

struct DecF16 {
  static constexpr int64_t kStep = kN;
  static constexpr int64_t kElemBytes = 2;
  static constexpr int64_t Bytes(int64_t c) { return c * 2; }
  static HWY_INLINE void Decode(const uint8_t* row, int64_t c, VF* out) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    out[0] = hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + c));
  }
};

struct DecBF16 {
  static constexpr int64_t kStep = kN;
  static constexpr int64_t kElemBytes = 2;
  static constexpr int64_t Bytes(int64_t c) { return c * 2; }
  static HWY_INLINE void Decode(const uint8_t* row, int64_t c, VF* out) {
    // bf16 is the top half of an f32: widen and shift.
    const hn::RebindToUnsigned<DF> du32;
    const hn::Rebind<uint16_t, DF> du16;
    const auto u = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(row) + c));
    out[0] = hn::BitCast(DF(), hn::ShiftLeft<16>(u));
  }
};

struct DecQ8_0 {
  static constexpr int64_t kStep = 32;
  static constexpr int64_t kElemBytes = 0;  // blocks only: no partial tail
  static constexpr int64_t Bytes(int64_t c) { return c / 32 * 34; }
  static HWY_INLINE void Decode(const uint8_t* row, int64_t c, VF* out) {
    const uint8_t* blk = row + (c / 32) * 34;
    const VF d = BroadcastF16(blk);
    const hn::Rebind<int8_t, DF> di8;
    const hn::RebindToSigned<DF> di32;
    const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
    for (int64_t k = 0; k < 32 / kN; ++k) {
      out[k] = hn::Mul(hn::ConvertTo(DF(), hn::PromoteTo(di32, hn::LoadU(di8, q + k * kN))), d);
    }
  }
};

struct DecQ4_0 {
  static constexpr int64_t kStep = 32;
  static constexpr int64_t kElemBytes = 0;
  static constexpr int64_t Bytes(int64_t c) { return c / 32 * 18; }
  static HWY_INLINE void Decode(const uint8_t* row, int64_t c, VF* out) {
    const uint8_t* blk = row + (c / 32) * 18;
    const VF d = BroadcastF16(blk);
    const hn::Rebind<uint8_t, DF> du8;
    const hn::RebindToSigned<DF> di32;
    const auto mask = hn::Set(di32, 0x0F);
    // (q - 8) * d as q * d + (-8 d) in one FMA: both are the exact value rounded once (-8 d is
    // exact), so this equals the reference bit for bit with one operation less.
    const VF neg8d = hn::Mul(d, hn::Set(DF(), -8.0f));
    // Byte j holds element j (low nibble) and element j + 16 (high nibble).
    for (int64_t k = 0; k < 16 / kN; ++k) {
      const auto v = hn::PromoteTo(di32, hn::LoadU(du8, blk + 2 + k * kN));
      out[k] = hn::MulAdd(hn::ConvertTo(DF(), hn::And(v, mask)), d, neg8d);
      out[16 / kN + k] = hn::MulAdd(hn::ConvertTo(DF(), hn::ShiftRight<4>(v)), d, neg8d);
    }
  }
};

// acc[r][t] += W[r][c0:c1] . x[t][c0:c1], one vector FMA per kN columns, in column order.
// With prefetch_ahead > 0, also prefetches the bytes that far past each weight read: rows are
// short (a few KiB) and read as kNR interleaved streams, which the hardware prefetchers
// follow too late; prefetching the next row block (contiguous in memory) keeps enough cache
// misses in flight to reach DRAM bandwidth on one core.
// The decoder of each type the table marks simd_decode (the kernels below are instantiated
// for kSimdDecodeTypes through it).
template <TensorType kType>
struct DecOf;
template <>
struct DecOf<TensorType::F32> {
  using type = DecF32;
};
template <>
struct DecOf<TensorType::F16> {
  using type = DecF16;
};
template <>
struct DecOf<TensorType::BF16> {
  using type = DecBF16;
};
template <>
struct DecOf<TensorType::Q8_0> {
  using type = DecQ8_0;
};
template <>
struct DecOf<TensorType::Q4_0> {
  using type = DecQ4_0;
};

template <int NR, int NT, class Dec>
HWY_INLINE void Accumulate(const uint8_t* const* rows, int64_t c0, int64_t c1, const float* x,
                           int64_t ldx, VF (&acc)[NR][NT], int64_t prefetch_ahead = 0) {
  const DF df;
  constexpr int64_t kV = Dec::kStep / kN;
  for (int64_t c = c0; c < c1; c += Dec::kStep) {
    if (prefetch_ahead > 0) {
      for (int r = 0; r < NR; ++r) hwy::Prefetch(rows[r] + Dec::Bytes(c) + prefetch_ahead);
    }
    VF w[NR][kV];
    for (int r = 0; r < NR; ++r) Dec::Decode(rows[r], c, w[r]);
    for (int64_t v = 0; v < kV; ++v) {
      for (int t = 0; t < NT; ++t) {
        const VF xv = hn::LoadU(df, x + t * ldx + c + v * kN);
        for (int r = 0; r < NR; ++r) acc[r][t] = hn::MulAdd(w[r][v], xv, acc[r][t]);
      }
    }
  }
}

// The last cols % kN columns of F32/F16/BF16 rows: decoded from a zero-padded copy (never
// reading past the row) and multiplied with zero-padded activations.
template <int NR, int NT, class Dec>
HWY_INLINE void AccumulateTail(const uint8_t* const* rows, int64_t c_main, int64_t tail,
                               const float* x, int64_t ldx, VF (&acc)[NR][NT]) {
  if constexpr (Dec::kElemBytes > 0) {
    const DF df;
    VF w[NR];
    for (int r = 0; r < NR; ++r) {
      HWY_ALIGN uint8_t wb[kN * 4] = {};
      std::memcpy(wb, rows[r] + c_main * Dec::kElemBytes, tail * Dec::kElemBytes);
      Dec::Decode(wb, 0, &w[r]);
    }
    for (int t = 0; t < NT; ++t) {
      HWY_ALIGN float xb[kN] = {};
      std::memcpy(xb, x + t * ldx + c_main, tail * sizeof(float));
      const VF xv = hn::Load(df, xb);
      for (int r = 0; r < NR; ++r) acc[r][t] = hn::MulAdd(w[r], xv, acc[r][t]);
    }
  }
}

// Prefetch distance: whole row blocks ahead (the same column of a later block, so the
// address stays inside the stream), at least LYNX_PREFETCH_BYTES to cover DRAM latency at
// full bandwidth (about 100 ns x 20 GB/s = 2 KB per core, with margin).
#ifndef LYNX_PREFETCH_BYTES
#define LYNX_PREFETCH_BYTES 8192
#endif
HWY_INLINE int64_t PrefetchAhead(int64_t block_bytes) {
  const int64_t blocks = (LYNX_PREFETCH_BYTES + block_bytes - 1) / block_bytes;
  return std::max<int64_t>(blocks, 1) * block_bytes;
}

// Calls f.template operator()<g>(t0) with the group size g as a constant (1..kMax).
template <int G, class F>
HWY_INLINE void CallGroup(int g, int t0, F& f) {
  if constexpr (G >= 1) {
    if (g == G) return f.template operator()<G>(t0);
    CallGroup<G - 1>(g, t0, f);
  }
}

// Runs f over n tokens in groups: `lead` tokens first (if > 0), then groups of `body`, the
// last one shorter if body does not divide the rest. Group sizes are at most kMax.
template <int kMax, class F>
HWY_INLINE void ForTokenGroups(int n, int lead, int body, F&& f) {
  int t0 = 0;
  if (lead > 0) {
    CallGroup<kMax>(lead, 0, f);
    t0 = lead;
  }
  for (; t0 < n; t0 += body) CallGroup<kMax>(std::min(body, n - t0), t0, f);
}

// The token groups of F32/F16/BF16 rows read in registers (RowsDirect). The first group's
// pass brings the row block in from memory; later groups re-read it from L1. The plan (its
// measurements: docs/benchmarks.md, "Kernel and loader design measurements"):
//   1-2 tokens: one group.
//   3-5: with a row block of at most kLead2MaxBlockBytes, 2, then the rest (2+1, 2+2,
//        2+3): a lighter first pass keeps the row block's misses flowing. Longer rows (the
//        Mixtral shape: blocks of 32 and 112 KiB, past L1) keep one group of up to 4 (then
//        1), where the 2-token pass first was slower.
//   6-8: 4, then the rest (6 in one group read slower).
//   9+:  n % 6 first, then groups of 6: 6 tokens amortize each decoded weight vector over
//        24 FMAs instead of 16 (kNR 4 x 6 accumulators + 4 weights + 1 input = 29 of the 32
//        AVX-512 registers; 2 x 6 + 2 + 1 = 15 of 16 with AVX2).
// The groups never change an output's FMA sequence: each (row, token) accumulator runs over
// the columns in order whichever group it is in, so results stay bit-identical.
constexpr int64_t kLead2MaxBlockBytes = 16384;
constexpr int kMaxDirectGroup = 6;
struct GroupPlan {
  int lead, body;
};
inline GroupPlan DirectGroupPlan(int n, bool short_rows) {
  if (n <= 2) return {n, kNT};
  if (n <= 5) return {short_rows ? 2 : std::min(n, kNT), kNT};
  if (n <= 8) return {kNT, kNT};
  return {n % kMaxDirectGroup, kMaxDirectGroup};
}

// Rows [r, r + NR) with the weights decoded in registers, read once from memory per row block
// (F32/F16/BF16 up to kDirectMaxFloat tokens, re-read from L1 per token group; quantized rows
// up to kNT tokens).
template <int NR, class Dec>
HWY_NOINLINE void RowsDirect(const MatmulJob& j, int64_t r) {
  const DF df;
  const uint8_t* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = j.w + (r + i) * j.row_bytes;
  const int64_t tail = j.cols % Dec::kStep;
  const int64_t c_main = j.cols - tail;
  auto group = [&]<int NT>(int t0) {
    VF acc[NR][NT];
    for (int i = 0; i < NR; ++i) {
      for (int t = 0; t < NT; ++t) acc[i][t] = hn::Zero(df);
    }
    const float* x = j.x + t0 * j.ldx;
    Accumulate<NR, NT, Dec>(rows, 0, c_main, x, j.ldx, acc, PrefetchAhead(NR * j.row_bytes));
    if (tail) AccumulateTail<NR, NT, Dec>(rows, c_main, tail, x, j.ldx, acc);
    for (int i = 0; i < NR; ++i) {
      for (int t = 0; t < NT; ++t) {
        j.y[(t0 + t) * j.ldy + r + i] = hn::GetLane(hn::SumOfLanes(df, acc[i][t]));
      }
    }
  };
  // Quantized rows come here with at most kNT tokens: one group, decoded once.
  if constexpr (Dec::kElemBytes > 0) {
    const GroupPlan plan = DirectGroupPlan(j.n_tok, NR * j.row_bytes <= kLead2MaxBlockBytes);
    ForTokenGroups<kMaxDirectGroup>(j.n_tok, plan.lead, plan.body, group);
  } else {
    ForTokenGroups<kNT>(j.n_tok, 0, kNT, group);
  }
}

// Rows [r, r + NR) for n_tok > kNT: per chunk of kChunkCols columns, decode the rows once into
// an L1 buffer, then run every token group over it; accumulators live in `accbuf` between
// chunks, so the FMA sequence per output equals RowsDirect's.
template <int NR, class Dec>
HWY_NOINLINE void RowsBuffered(const MatmulJob& j, int64_t r) {
  const DF df;
  constexpr bool kIsF32 = std::is_same_v<Dec, DecF32>;
  constexpr int64_t kV = Dec::kStep / kN;
  const uint8_t* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = j.w + (r + i) * j.row_bytes;
  const int64_t tail = j.cols % Dec::kStep;
  const int64_t c_main = j.cols - tail;
  const int64_t ahead = PrefetchAhead(NR * j.row_bytes);
  HWY_ALIGN float wbuf[NR][kChunkCols];
  HWY_ALIGN float accbuf[kSuperTokens * NR * kN];  // [token][row] vectors

  for (int s0 = 0; s0 < j.n_tok; s0 += kSuperTokens) {
    const int ns = std::min(kSuperTokens, j.n_tok - s0);
    const float* xs = j.x + s0 * j.ldx;
    for (int64_t k = 0; k < ns * NR * kN; k += kN) hn::Store(hn::Zero(df), df, accbuf + k);

    // Loads the group's accumulators, runs `body` on them, stores them back.
    auto with_acc = [&]<int NT>(int t0, auto&& body) {
      VF acc[NR][NT];
      for (int t = 0; t < NT; ++t) {
        for (int i = 0; i < NR; ++i) acc[i][t] = hn::Load(df, accbuf + ((t0 + t) * NR + i) * kN);
      }
      body(acc);
      for (int t = 0; t < NT; ++t) {
        for (int i = 0; i < NR; ++i) hn::Store(acc[i][t], df, accbuf + ((t0 + t) * NR + i) * kN);
      }
    };

    for (int64_t c0 = 0; c0 < c_main; c0 += kChunkCols) {
      const int64_t len = std::min(kChunkCols, c_main - c0);
      const uint8_t* src[NR];
      for (int i = 0; i < NR; ++i) {
        if constexpr (kIsF32) {
          src[i] = rows[i] + c0 * 4;  // already f32: read in place
        } else {
          for (int64_t c = c0; c < c0 + len; c += Dec::kStep) {
            hwy::Prefetch(rows[i] + Dec::Bytes(c) + ahead);
            VF v[kV];
            Dec::Decode(rows[i], c, v);
            for (int64_t k = 0; k < kV; ++k) hn::Store(v[k], df, &wbuf[i][c - c0 + k * kN]);
          }
          src[i] = reinterpret_cast<const uint8_t*>(wbuf[i]);
        }
      }
      ForTokenGroups<kNT>(ns, 0, kNT, [&]<int NT>(int t0) {
        with_acc.template operator()<NT>(t0, [&](VF(&acc)[NR][NT]) {
          Accumulate<NR, NT, DecF32>(src, 0, len, xs + t0 * j.ldx + c0, j.ldx, acc);
        });
      });
    }
    if (tail) {
      ForTokenGroups<kNT>(ns, 0, kNT, [&]<int NT>(int t0) {
        with_acc.template operator()<NT>(t0, [&](VF(&acc)[NR][NT]) {
          AccumulateTail<NR, NT, Dec>(rows, c_main, tail, xs + t0 * j.ldx, j.ldx, acc);
        });
      });
    }
    for (int t = 0; t < ns; ++t) {
      for (int i = 0; i < NR; ++i) {
        const VF acc = hn::Load(df, accbuf + (t * NR + i) * kN);
        j.y[(s0 + t) * j.ldy + r + i] = hn::GetLane(hn::SumOfLanes(df, acc));
      }
    }
  }
}

constexpr int64_t kOneRowMaxBytes = 16384;

template <class Dec>
void RunRows(const MatmulJob& j) {
  int64_t r = j.r0;
  if (Dec::kElemBytes > 0 && j.n_tok <= 2 && j.row_bytes <= kOneRowMaxBytes) {
    // F32/F16/BF16 with 1-2 tokens: one row at a time, so a thread's rows are a single
    // sequential stream through memory, which the hardware prefetchers follow well (kNR
    // streams a row apart stream slower from DRAM). But one row has one FMA chain per token,
    // so from 3 tokens a fast memory could outrun it; up to 2 tokens it keeps up. Same
    // operations per output, so the results do not change. Only for rows up to
    // kOneRowMaxBytes: very long rows (Mixtral's down projection) read slower one at a time.
    // Figures: docs/benchmarks.md, "Kernel and loader design measurements".
    for (; r < j.r1; ++r) RowsDirect<1, Dec>(j, r);
    return;
  }
  if (j.n_tok <= (Dec::kElemBytes > 0 ? kDirectMaxFloat : kNT)) {
    for (; r + kNR <= j.r1; r += kNR) RowsDirect<kNR, Dec>(j, r);
    for (; r < j.r1; ++r) RowsDirect<1, Dec>(j, r);
  } else {
    for (; r + kNR <= j.r1; r += kNR) RowsBuffered<kNR, Dec>(j, r);
    for (; r < j.r1; ++r) RowsBuffered<1, Dec>(j, r);
  }
}

void MatmulRowsT(const MatmulJob& j) {
  // A type without a decoder here is rejected by matmul_rows.
  dispatch_type<kSimdDecodeTypes>(
      j.type, [&]<TensorType kType>() { RunRows<typename DecOf<kType>::type>(j); });
}

// ---- kPanel16: outer products on 16-row panels (layout in kernels.h) ----
//
// Per column k a block of panels gives kBV weight vectors (16 rows each panel); each token of
// a group broadcasts its x[k] (AVX-512 folds it into the FMA) and does kBV FMAs. Every output
// is one FMA chain over k in order whatever the group, the block or the target, so results
// never depend on threads, token grouping or instruction set. Against the dot products on rows
// (RowsDirect: 4 rows x 6 tokens per 16 columns take 4 weight and 6 activation loads, then 24
// horizontal sums) this needs 2 weight vectors and 14 broadcasts per 28 FMAs and no sums. A
// scratch test of the two inner loops in L1 (AVX-512, one core) ran at 243-261 GFLOPS against
// 143-158 for the dot products; in the engine, bench_kernels in cache gives 240-249 against
// 155-195 for RowsDirect from 8 tokens (the FMA peak of a core is 272).
constexpr int kPV = int(16 / kN);      // vectors per panel column: 1 (AVX-512), 2, 4
constexpr int kPP = kPV == 1 ? 2 : 1;  // panels per block: two with AVX-512
constexpr int kBV = kPP * kPV;         // weight vectors per block column
// Tokens per group: kBV * kPT accumulators + kBV weights (+ 1 broadcast register without
// AVX-512's embedded broadcasts) within 32 (AVX-512) or 16 registers.
#if HWY_TARGET <= HWY_AVX3
constexpr int kPT = 14;
#else
constexpr int kPT = std::max(1, (16 - kBV - 1) / kBV);
#endif
// Columns per chunk when the tokens need several groups: the block's chunk (2 panels x 256
// columns of F16 = 16 KiB) stays in L1 while every group runs over it; the accumulators wait
// in a buffer between chunks (a store and a load are exact, so the chains do not change).
constexpr int64_t kPanelChunk = 256;
// Software prefetch distance in each panel stream: with only the hardware prefetchers, 1-6
// tokens read 1024x2048 F16 panels from DRAM at 65-76% of the read bandwidth (2 threads);
// 4096 bytes ahead: 96-107%, 16 tokens 394 against 237 GFLOPS; 1024 was short (79-95%),
// 8192 and 16384 no better than 4096.
#ifndef LYNX_PANEL_PREFETCH
#define LYNX_PANEL_PREFETCH 4096
#endif
constexpr int kPanelSuper = 64;  // tokens whose accumulators share the buffer

template <int NP, int NT, class Dec>
HWY_INLINE void PanelAccumulate(const uint8_t* const* panels, int64_t k0, int64_t k1,
                                const float* x, int64_t ldx, VF (&acc)[NP * kPV][NT]) {
  const DF df;
  constexpr int64_t kLineCols = std::max<int64_t>(1, 64 / (16 * Dec::kElemBytes));
  for (int64_t k = k0; k < k1; ++k) {
    VF w[NP * kPV];
    if (k % kLineCols == 0) {  // one prefetch per 64-byte line of each panel
      for (int p = 0; p < NP; ++p) {
        hwy::Prefetch(panels[p] + Dec::Bytes(k * 16) + LYNX_PANEL_PREFETCH);
      }
    }
    for (int p = 0; p < NP; ++p) {
      for (int v = 0; v < kPV; ++v) Dec::Decode(panels[p], k * 16 + v * kN, &w[p * kPV + v]);
    }
    for (int t = 0; t < NT; ++t) {
      const VF xb = hn::Set(df, x[t * ldx + k]);
      for (int v = 0; v < NP * kPV; ++v) acc[v][t] = hn::MulAdd(w[v], xb, acc[v][t]);
    }
  }
}

// Runs f.template operator()<g>(t0) over n tokens in groups of at most kPT, of balanced sizes.
template <class F>
HWY_INLINE void ForPanelGroups(int n, F&& f) {
  const int groups = (n + kPT - 1) / kPT;
  for (int i = 0, t0 = 0; i < groups; ++i) {
    const int g = n / groups + (i < n % groups ? 1 : 0);
    CallGroup<kPT>(g, t0, f);
    t0 += g;
  }
}

// Rows [b0, b0 + 16 NP) (NP panels from row b0), storing those in [j.r0, j.r1).
template <int NP, class Dec>
HWY_NOINLINE void PanelBlock(const MatmulJob& j, int64_t b0) {
  const DF df;
  const uint8_t* panels[NP];
  for (int p = 0; p < NP; ++p) panels[p] = j.w + (b0 + 16 * p) * j.row_bytes;
  const int64_t lo = std::max(j.r0, b0), hi = std::min(j.r1, b0 + 16 * NP);
  const bool whole = lo == b0 && hi == b0 + 16 * NP;
  auto store = [&](const VF* v, int t) {  // the NP * 16 outputs of token t
    float* out = j.y + t * j.ldy;
    if (whole) {
      for (int i = 0; i < NP * kPV; ++i) hn::StoreU(v[i], df, out + b0 + i * kN);
    } else {
      HWY_ALIGN float tmp[16 * NP];
      for (int i = 0; i < NP * kPV; ++i) hn::Store(v[i], df, tmp + i * kN);
      std::memcpy(out + lo, tmp + (lo - b0), size_t(hi - lo) * sizeof(float));
    }
  };
  if (j.n_tok <= kPT) {  // one group: the accumulators stay in registers over all columns
    auto group = [&]<int NT>(int) {
      VF acc[NP * kPV][NT];
      for (auto& a : acc) {
        for (VF& v : a) v = hn::Zero(df);
      }
      PanelAccumulate<NP, NT, Dec>(panels, 0, j.cols, j.x, j.ldx, acc);
      for (int t = 0; t < NT; ++t) {
        VF v[NP * kPV];
        for (int i = 0; i < NP * kPV; ++i) v[i] = acc[i][t];
        store(v, t);
      }
    };
    CallGroup<kPT>(j.n_tok, 0, group);
    return;
  }
  HWY_ALIGN float accbuf[kPanelSuper * NP * 16];  // [token][row]
  for (int s0 = 0; s0 < j.n_tok; s0 += kPanelSuper) {
    const int ns = std::min(kPanelSuper, j.n_tok - s0);
    const float* xs = j.x + s0 * j.ldx;
    for (int64_t k = 0; k < ns * NP * 16; k += kN) hn::Store(hn::Zero(df), df, accbuf + k);
    for (int64_t c0 = 0; c0 < j.cols; c0 += kPanelChunk) {
      const int64_t c1 = std::min(j.cols, c0 + kPanelChunk);
      ForPanelGroups(ns, [&]<int NT>(int t0) {
        VF acc[NP * kPV][NT];
        for (int t = 0; t < NT; ++t) {
          for (int i = 0; i < NP * kPV; ++i) {
            acc[i][t] = hn::Load(df, accbuf + (t0 + t) * NP * 16 + i * kN);
          }
        }
        PanelAccumulate<NP, NT, Dec>(panels, c0, c1, xs + t0 * j.ldx, j.ldx, acc);
        for (int t = 0; t < NT; ++t) {
          for (int i = 0; i < NP * kPV; ++i) {
            hn::Store(acc[i][t], df, accbuf + (t0 + t) * NP * 16 + i * kN);
          }
        }
      });
    }
    for (int t = 0; t < ns; ++t) {
      VF v[NP * kPV];
      for (int i = 0; i < NP * kPV; ++i) v[i] = hn::Load(df, accbuf + t * NP * 16 + i * kN);
      store(v, s0 + t);
    }
  }
}

template <class Dec>
void RunPanels(const MatmulJob& j) {
  int64_t b = j.r0 - j.r0 % 16;
  for (; b + 16 * (kPP - 1) < j.r1; b += 16 * kPP) PanelBlock<kPP, Dec>(j, b);
  for (; b < j.r1; b += 16) PanelBlock<1, Dec>(j, b);
}

void MatmulPanelsT(const MatmulJob& j) {
  dispatch_type<kPanelTypes>(
      j.type, [&]<TensorType kType>() { RunPanels<typename DecOf<kType>::type>(j); });
}

template <class Dec>
void DequantizeWith(const uint8_t* src, float* dst, int64_t n) {
  const DF df;
  constexpr int64_t kV = Dec::kStep / kN;
  const int64_t tail = n % Dec::kStep;
  int64_t c = 0;
  for (; c < n - tail; c += Dec::kStep) {
    VF v[kV];
    Dec::Decode(src, c, v);
    for (int64_t k = 0; k < kV; ++k) hn::StoreU(v[k], df, dst + c + k * kN);
  }
  if constexpr (Dec::kElemBytes > 0) {
    if (tail) {
      HWY_ALIGN uint8_t wb[kN * 4] = {};
      HWY_ALIGN float out[kN];
      std::memcpy(wb, src + c * Dec::kElemBytes, tail * Dec::kElemBytes);
      VF v;
      Dec::Decode(wb, 0, &v);
      hn::Store(v, df, out);
      std::memcpy(dst + c, out, tail * sizeof(float));
    }
  }
}

void DequantizeRowT(TensorType t, const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  dispatch_type<kSimdDecodeTypes>(
      t, [&]<TensorType kType>() { DequantizeWith<typename DecOf<kType>::type>(s, dst, n); });
}

// Group g of a kInterleaved16 Q8_0/Q4_0 matrix back to 16 rows at dst, for the float path:
// per block, each quad of rows takes a 4x4 transpose of 32-bit words from 4 planes (lanes
// 4k..4k+3 of planes 4h..4h+3 -> quant bytes 16h..16h+15 of rows 4k..4k+3), prefetching the
// next group: deinterleave_group's byte copies would cost the float path on interleaved
// weights several times more (docs/benchmarks.md, "Kernel and loader design measurements").
void DeinterleaveGroupT(TensorType t, const uint8_t* w, int64_t cols, int64_t g, uint8_t* dst) {
#if HWY_TARGET == HWY_SCALAR
  deinterleave_group(t, w, cols, g, dst);  // no 128-bit vectors
#else
  const hn::Full128<uint32_t> d;
  const hn::Full128<uint64_t> d64;
  const int64_t bb = static_cast<int64_t>(weight_row_bytes(t, 32)), nb = cols / 32, rb = nb * bb;
  const int halves = t == TensorType::Q8_0 ? 2 : 1;
  const uint8_t* src = w + g * kInterleaveRows * rb;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = src + b * kInterleaveRows * bb;
    uint8_t* out = dst + b * bb;
    // The next group, block by block (the copy is what streams from memory, the rows kernel
    // then reads the L1/L2 copy); past the matrix's end prefetches are harmless.
    for (int64_t o = 0; o < kInterleaveRows * bb; o += 64) {
      hwy::Prefetch(gb + kInterleaveRows * rb + o);
    }
    for (int i = 0; i < kInterleaveRows; ++i) std::memcpy(out + i * rb, gb + 2 * i, 2);
    for (int h = 0; h < halves; ++h) {
      for (int k = 0; k < 4; ++k) {
        auto plane = [&](int p) {
          return hn::LoadU(d,
                           reinterpret_cast<const uint32_t*>(gb + 32 + 64 * (4 * h + p)) + 4 * k);
        };
        const auto a = plane(0), bv = plane(1), c = plane(2), e = plane(3);
        const auto t0 = hn::BitCast(d64, hn::InterleaveLower(d, a, bv));
        const auto t1 = hn::BitCast(d64, hn::InterleaveUpper(d, a, bv));
        const auto t2 = hn::BitCast(d64, hn::InterleaveLower(d, c, e));
        const auto t3 = hn::BitCast(d64, hn::InterleaveUpper(d, c, e));
        const hn::Vec<decltype(d)> rows[4] = {hn::BitCast(d, hn::InterleaveLower(d64, t0, t2)),
                                              hn::BitCast(d, hn::InterleaveUpper(d64, t0, t2)),
                                              hn::BitCast(d, hn::InterleaveLower(d64, t1, t3)),
                                              hn::BitCast(d, hn::InterleaveUpper(d64, t1, t3))};
        for (int m = 0; m < 4; ++m) {
          hn::StoreU(rows[m], d, reinterpret_cast<uint32_t*>(out + (4 * k + m) * rb + 2 + 16 * h));
        }
      }
    }
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lynx::kernels {

HWY_EXPORT(MatmulRowsT);
HWY_EXPORT(DequantizeRowT);
HWY_EXPORT(DeinterleaveGroupT);
HWY_EXPORT(MatmulPanelsT);

void matmul_rows(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1, const float* x,
                 int64_t ldx, int n_tok, float* y, int64_t ldy, WeightLayout layout,
                 Scratch* scratch) {
  const size_t row_bytes = weight_row_bytes(t, cols);  // validates type and cols
  if (r0 < 0 || r1 < r0 || n_tok < 0) {
    throw Error("matmul_rows: bad range rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
                ") with " + std::to_string(n_tok) + " tokens");
  }
  if ((layout == WeightLayout::kInterleaved16 && !can_interleave(t, kInterleaveRows, cols)) ||
      (layout == WeightLayout::kPanel16 && !can_panel16(t, kPanelRows, cols))) {
    throw Error(std::string("matmul_rows: a ") + gguf::tensor_type_name(t) + " matrix cannot be " +
                (layout == WeightLayout::kPanel16 ? "stored in 16-row panels" : "interleaved"));
  }
  if (r0 == r1 || n_tok == 0) return;
  if (!type_traits(t).simd_decode) {  // the types without a decoder here (types.h)
    if (layout == WeightLayout::kRows) {
      matmul_rows_decoded(t, w, cols, r0, r1, x, ldx, n_tok, y, ldy);
      return;
    }
    // Interleaved (Q4_K, Q6_K): each 16-row group back to rows, then decoded; the bits of
    // the kRows matrix, as below.
    Scratch own;
    Scratch& s = scratch ? *scratch : own;
    uint8_t* group_rows = s.get<uint8_t>(ScratchSlot::kGroupRows, row_bytes * kInterleaveRows);
    for (int64_t g = r0 / kInterleaveRows; g * kInterleaveRows < r1; ++g) {
      const int64_t base = g * kInterleaveRows;
      deinterleave_group(t, w, cols, g, group_rows);
      matmul_rows_decoded(t, group_rows, cols, std::max(r0, base) - base,
                          std::min(r1, base + kInterleaveRows) - base, x, ldx, n_tok, y + base, ldy,
                          &s);
    }
    return;
  }
  const MatmulJob job{t,
                      static_cast<const uint8_t*>(w),
                      static_cast<int64_t>(row_bytes),
                      cols,
                      r0,
                      r1,
                      x,
                      ldx,
                      n_tok,
                      y,
                      ldy};
  if (layout == WeightLayout::kPanel16) {
    HWY_DYNAMIC_DISPATCH(MatmulPanelsT)(job);
    return;
  }
  if (layout == WeightLayout::kRows) {
    HWY_DYNAMIC_DISPATCH(MatmulRowsT)(job);
    return;
  }
  // Interleaved: each 16-row group touched goes back to rows in a per-thread buffer and the
  // rows kernel runs on the part of it in [r0, r1). Every output depends only on its row's
  // bytes, which are the same, so this gives the bits of the kRows matrix. The copy is not
  // free at a few tokens (docs/benchmarks.md), so the CLI and server keep the file's layout
  // when they run exact activations.
  Scratch own;
  uint8_t* rows_buf =
      (scratch ? *scratch : own).get<uint8_t>(ScratchSlot::kGroupRows, row_bytes * kInterleaveRows);
  for (int64_t g = r0 / kInterleaveRows; g * kInterleaveRows < r1; ++g) {
    const int64_t base = g * kInterleaveRows;
    HWY_DYNAMIC_DISPATCH(DeinterleaveGroupT)
    (t, static_cast<const uint8_t*>(w), cols, g, rows_buf);
    MatmulJob part = job;  // the group's rows, back in the rows layout
    part.w = rows_buf;
    part.r0 = std::max(r0, base) - base;
    part.r1 = std::min(r1, base + kInterleaveRows) - base;
    part.y = y + base;
    HWY_DYNAMIC_DISPATCH(MatmulRowsT)(part);
  }
}

void dequantize_row(TensorType t, const void* src, float* dst, int64_t n) {
  weight_row_bytes(t, n);  // validates type and n
  if (!type_traits(t).simd_decode) return ref::dequantize_row(t, src, dst, n);
  HWY_DYNAMIC_DISPATCH(DequantizeRowT)(t, src, dst, n);
}

}  // namespace lynx::kernels
#endif  // HWY_ONCE
