// The BF16 fast mode (matmul_bf16.h): the kernel dispatch, the activation rounding, the scalar
// twin and the AMX kernel (the VDPBF16PS kernel is matmul_bf16_avx512.cc).
//
// Not compiled through Highway: Highway 1.0.3 (Debian 12) has no target with AVX512_BF16 or
// AMX, so the functions below carry their own target attributes and run only after a CPUID
// check (and, for AMX, the kernel's permission for the tile state).
//
// Tile plan of one call: output rows in pairs of 16-row panels, tokens in blocks of up to 32.
// Per 32-column step, each panel's 16 x 32 BF16 weights become one B tile in the pair layout
// TDPBF16PS reads (row kk: the 16 rows' weights of columns 2kk and 2kk + 1 side by side); one
// VPERMW per 64-byte line does that from kPanel16, where the line holds column 2kk for the 16
// rows and then column 2kk + 1. Two A tiles (16 tokens each) times two B tiles into four C
// tiles: 4 tile products per 2 KiB of weights, each 16 x 16 x 32 multiply-adds. The prepared
// B tiles of a panel pair stay in a per-thread buffer, so token blocks past the first (prefill)
// reuse them from L2 instead of preparing them again.
#include "kernels/matmul_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

#include "kernels/thread_pool.h"
#include "lynx/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LYNX_BF16_X86 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define LYNX_BF16_X86 0
#endif

namespace lynx::kernels {
namespace {

#if LYNX_BF16_X86
// Linux's per-process request for the AMX tile data state (arch/x86/include/uapi/asm/prctl.h).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

struct CpuBf16 {
  bool avx512_bf16 = false;  // AVX512F, AVX512BW, AVX512_BF16 usable
  bool amx = false;          // AMX-TILE and AMX-BF16 usable (the OS granted the tile state)
};

CpuBf16 detect_cpu() {
  CpuBf16 c;
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) return c;
  if (!__get_cpuid_count(7, 1, &a, &b, &cx, &d)) return c;
  c.avx512_bf16 = (a >> 5) & 1;
  if (!__get_cpuid_count(7, 0, &a, &b, &cx, &d)) return c;
  const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
  if (c.avx512_bf16 && amx_bf16 && amx_tile) {
    c.amx = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }
  return c;
}

const CpuBf16& cpu() {
  static const CpuBf16 c = detect_cpu();  // CPUID and the permission request, once
  return c;
}

#define LYNX_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define LYNX_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

LYNX_TARGET_BF16 void round_rows_avx512(const float* x, int64_t ldx, int t0, int t1, int64_t cols,
                                        Bf16Acts& out) {
  for (int t = t0; t < t1; ++t) {
    const float* src = x + t * ldx;
    uint16_t* dst = out.v.data() + t * out.ld;
    for (int64_t c = 0; c < out.ld; c += 32) {
      const int64_t n = std::min<int64_t>(32, cols - c);
      __m512 lo, hi;
      if (n == 32) {
        lo = _mm512_loadu_ps(src + c);
        hi = _mm512_loadu_ps(src + c + 16);
      } else {  // the tail: masked loads, zeros past cols
        const int64_t nlo = std::clamp<int64_t>(n, 0, 16), nhi = std::clamp<int64_t>(n - 16, 0, 16);
        lo = _mm512_maskz_loadu_ps(__mmask16((1u << nlo) - 1), src + c);
        hi = _mm512_maskz_loadu_ps(__mmask16((1u << nhi) - 1), src + c + 16);
      }
      _mm512_storeu_si512(dst + c, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

// Lane 2n of the result takes 16-bit element n (column 2kk, row n) and lane 2n + 1 element
// 16 + n (column 2kk + 1, row n).
LYNX_TARGET_BF16 inline __m512i pair_index() {
  alignas(64) uint16_t idx[32];
  for (int n = 0; n < 16; ++n) {
    idx[2 * n] = uint16_t(n);
    idx[2 * n + 1] = uint16_t(16 + n);
  }
  return _mm512_load_si512(idx);
}

// Software prefetch distance in the panel stream (the float kernels' measurement, matmul.cc).
constexpr int64_t kPrefetchBytes = 4096;

// The B tile (1 KiB, 16 rows of 64 bytes) of columns [k0, k0 + 32) of the panel at p.
LYNX_TARGET_BF16 inline void prepare_b(const uint8_t* p, bool f16, int64_t k0, int64_t cols,
                                       const __m512i idx, uint8_t* out) {
  for (int kk = 0; kk < 16; ++kk) {
    const int64_t c = k0 + 2 * kk;
    const uint8_t* line = p + c * 32;
    __m512i v;
    if (c + 2 <= cols) {
      _mm_prefetch(reinterpret_cast<const char*>(line + kPrefetchBytes), _MM_HINT_T0);
      v = _mm512_loadu_si512(line);
    } else if (c < cols) {
      v = _mm512_maskz_loadu_epi16(0xFFFF, line);  // one column left: never read past it
    } else {
      v = _mm512_setzero_si512();
    }
    if (f16) {  // F16 -> F32 exactly, then to BF16 to nearest even
      // (The zero-masked forms: GCC 12 warns about the undefined operand of the plain ones.)
      const __m512 lo = _mm512_maskz_cvtph_ps(0xFFFF, _mm512_maskz_extracti64x4_epi64(0xF, v, 0));
      const __m512 hi = _mm512_maskz_cvtph_ps(0xFFFF, _mm512_maskz_extracti64x4_epi64(0xF, v, 1));
      v = __m512i(_mm512_cvtne2ps_pbh(hi, lo));
    }
    _mm512_store_si512(out + kk * 64, _mm512_permutexvar_epi16(idx, v));
  }
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: C[token block][panel] in 0-3, A[token block] in 4-5, B[panel] in 6-7.
LYNX_TARGET_AMX void configure(int m0, int m1) {
  TileConfig cfg;
  auto set = [&](int tile, int rows) {
    cfg.rows[tile] = uint8_t(rows);
    cfg.colsb[tile] = rows > 0 ? 64 : 0;
  };
  set(0, m0), set(1, m0), set(2, m1), set(3, m1), set(4, m0), set(5, m1), set(6, 16), set(7, 16);
  _tile_loadconfig(&cfg);
}

using AmxJob = detail::Bf16RowsJob;

// Stores C tile rows (m tokens of 16 outputs, rows b0..b0+15 of W) for the rows in [r0, r1).
void store_c(const AmxJob& j, const float* c, int m, int tok, int64_t b0) {
  const int64_t lo = std::max(j.r0, b0), hi = std::min(j.r1, b0 + 16);
  for (int i = 0; i < m; ++i) {
    std::memcpy(j.y + (tok + i) * j.ldy + lo, c + i * 16 + (lo - b0), size_t(hi - lo) * 4);
  }
}

LYNX_TARGET_AMX void amx_rows(const AmxJob& j, Scratch& scratch) {
  const int64_t nk = (j.cols + 31) / 32, panel_bytes = 16 * j.cols * 2;
  const __m512i idx = pair_index();
  uint8_t* bbuf = scratch.get<uint8_t>(ScratchSlot::kBf16Panels, size_t(nk) * 2048);
  alignas(64) float cbuf[16 * 16];
  const int64_t lda = j.x->ld * 2;
  int cfg_m0 = -1, cfg_m1 = -1;
  for (int64_t b0 = j.r0 - j.r0 % 16; b0 < j.r1; b0 += 32) {
    const bool two = b0 + 16 < j.r1;
    const uint8_t* p0 = j.w + b0 / 16 * panel_bytes;
    const uint8_t* p1 = p0 + panel_bytes;
    for (int s0 = 0; s0 < j.n_tok; s0 += 32) {
      const int m0 = std::min(16, j.n_tok - s0), m1 = std::clamp(j.n_tok - s0 - 16, 0, 16);
      if (m0 != cfg_m0 || m1 != cfg_m1) {
        configure(m0, m1);
        cfg_m0 = m0, cfg_m1 = m1;
      }
      const uint8_t* a = reinterpret_cast<const uint8_t*>(j.x->v.data()) + (j.t0 + s0) * lda;
      _tile_zero(0);
      if (two) _tile_zero(1);
      if (m1 > 0) _tile_zero(2);
      if (m1 > 0 && two) _tile_zero(3);
      for (int64_t kb = 0; kb < nk; ++kb) {
        uint8_t* b = bbuf + kb * 2048;
        if (s0 == 0) {
          prepare_b(p0, j.f16, kb * 32, j.cols, idx, b);
          if (two) prepare_b(p1, j.f16, kb * 32, j.cols, idx, b + 1024);
        }
        _tile_loadd(6, b, 64);
        _tile_loadd(4, a + kb * 64, lda);
        _tile_dpbf16ps(0, 4, 6);
        if (two) {
          _tile_loadd(7, b + 1024, 64);
          _tile_dpbf16ps(1, 4, 7);
        }
        if (m1 > 0) {
          _tile_loadd(5, a + 16 * lda + kb * 64, lda);
          _tile_dpbf16ps(2, 5, 6);
          if (two) _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, cbuf, 64);
      store_c(j, cbuf, m0, s0, b0);
      if (two) {
        _tile_stored(1, cbuf, 64);
        store_c(j, cbuf, m0, s0, b0 + 16);
      }
      if (m1 > 0) {
        _tile_stored(2, cbuf, 64);
        store_c(j, cbuf, m1, s0 + 16, b0);
        if (two) {
          _tile_stored(3, cbuf, 64);
          store_c(j, cbuf, m1, s0 + 16, b0 + 16);
        }
      }
    }
  }
  _tile_release();
}
#endif  // LYNX_BF16_X86

bool is_half(TensorType t) {
  return t == TensorType::BF16 || t == TensorType::F16;
}

// The value the kernels multiply for weight element `bits` of type t (BF16 or F16).
float weight_bf16(TensorType t, uint16_t bits) {
  if (t == TensorType::BF16) return bf16_to_fp32(bits);
  return bf16_to_fp32(fp32_to_bf16(fp16_to_fp32(bits)));
}

}  // namespace

uint16_t round_act_bf16(float x) {
  if (std::fpclassify(x) == FP_SUBNORMAL) x = std::copysign(0.0f, x);
  return fp32_to_bf16(x);
}

void round_acts_bf16(const float* x, int64_t ldx, int n_tok, int64_t cols, Bf16Acts& out) {
  if (n_tok < 0 || cols <= 0) throw Error("round_acts_bf16: bad shape");
  out.resize(n_tok, cols);
  round_acts_bf16_rows(x, ldx, 0, n_tok, out);
}

void round_acts_bf16_rows(const float* x, int64_t ldx, int t0, int t1, Bf16Acts& out) {
  if (t0 < 0 || t1 < t0 || t1 > out.n_tok) throw Error("round_acts_bf16_rows: bad rows");
  const int64_t cols = out.cols;
#if LYNX_BF16_X86
  if (cpu().avx512_bf16) return round_rows_avx512(x, ldx, t0, t1, cols, out);
#endif
  for (int t = t0; t < t1; ++t) {
    uint16_t* dst = out.v.data() + t * out.ld;
    for (int64_t c = 0; c < cols; ++c) dst[c] = round_act_bf16(x[t * ldx + c]);
    std::fill(dst + cols, dst + out.ld, uint16_t{0});
  }
}

const char* bf16_kernel_name(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::kAmx:
      return "amx";
    case Bf16Kernel::kAvx512Bf16:
      return "avx512bf16";
    case Bf16Kernel::kNone:
      break;
  }
  return "none";
}

bool bf16_kernel_available(Bf16Kernel k) {
#if LYNX_BF16_X86
  if (k == Bf16Kernel::kAmx) return cpu().amx;
  if (k == Bf16Kernel::kAvx512Bf16) return cpu().avx512_bf16;
#endif
  return k == Bf16Kernel::kNone;
}

Bf16Kernel best_bf16_kernel() {
  if (bf16_kernel_available(Bf16Kernel::kAmx)) return Bf16Kernel::kAmx;
  if (bf16_kernel_available(Bf16Kernel::kAvx512Bf16)) return Bf16Kernel::kAvx512Bf16;
  return Bf16Kernel::kNone;
}

Bf16Kernel bf16_kernel_by_name(std::string_view name) {
  if (name.empty() || name == "auto") return best_bf16_kernel();
  for (Bf16Kernel k : {Bf16Kernel::kNone, Bf16Kernel::kAvx512Bf16, Bf16Kernel::kAmx}) {
    if (name != bf16_kernel_name(k)) continue;
    if (!bf16_kernel_available(k)) {
      throw Error("BF16 kernel " + std::string(name) + ": this CPU cannot run it (it runs " +
                  bf16_kernel_name(best_bf16_kernel()) + ")");
    }
    return k;
  }
  throw Error("BF16 kernel " + std::string(name) + ": not a kernel (auto, amx, avx512bf16, none)");
}

bool has_bf16_path(TensorType t, WeightLayout layout, Bf16Kernel k) {
  return is_half(t) && layout == WeightLayout::kPanel16 && k != Bf16Kernel::kNone;
}

void matmul_rows_bf16(Bf16Kernel k, TensorType t, const void* w, int64_t cols, int64_t r0,
                      int64_t r1, const Bf16Acts& x, int t0, int n_tok, float* y, int64_t ldy,
                      Scratch* scratch) {
  if (!is_half(t) || k == Bf16Kernel::kNone || !bf16_kernel_available(k)) {
    throw Error(std::string("matmul_rows_bf16: no ") + bf16_kernel_name(k) + " BF16 kernel for " +
                gguf::tensor_type_name(t) + " on this machine");
  }
  if (cols != x.cols || r0 < 0 || r1 < r0 || t0 < 0 || n_tok < 0 || t0 + n_tok > x.n_tok) {
    throw Error("matmul_rows_bf16: shapes disagree (" + std::to_string(cols) + " columns, " +
                std::to_string(x.cols) + " in the activations)");
  }
  if (r0 == r1 || n_tok == 0) return;
  const detail::Bf16RowsJob job{
      t == TensorType::F16, static_cast<const uint8_t*>(w), cols, r0, r1, &x, t0, n_tok, y, ldy};
  Scratch own;
#if LYNX_BF16_X86
  if (k == Bf16Kernel::kAmx) return amx_rows(job, scratch ? *scratch : own);
#endif
  detail::dpbf16_rows(job, scratch ? *scratch : own);
}

void matmul_bf16(Bf16Kernel k, ThreadPool& pool, TensorType t, const void* w, int64_t rows,
                 int64_t cols, const Bf16Acts& x, float* y, int64_t ldy) {
  struct Args {
    Bf16Kernel k;
    TensorType t;
    const void* w;
    int64_t cols;
    const Bf16Acts* x;
    float* y;
    int64_t ldy;
    ThreadPool* pool;
  } a{k, t, w, cols, &x, y, ldy, &pool};
  const Args* pa = &a;
  // 32-row chunks: whole panel pairs, the unit of the tile plan.
  pool.parallel_for(
      rows,
      [pa](int64_t r0, int64_t r1, int tid) {
        matmul_rows_bf16(pa->k, pa->t, pa->w, pa->cols, r0, r1, *pa->x, 0, pa->x->n_tok, pa->y,
                         pa->ldy, &pa->pool->scratch(tid));
      },
      32, chunks_per_thread_for(x.n_tok));
}

namespace ref {

void matmul_rows_bf16(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                      const Bf16Acts& x, int t0, int n_tok, float* y, int64_t ldy,
                      WeightLayout layout) {
  if (!is_half(t) || cols != x.cols) throw Error("ref::matmul_rows_bf16: bad type or shape");
  std::vector<uint16_t> row(static_cast<size_t>(cols));
  std::vector<float> wf(static_cast<size_t>(cols));
  for (int64_t r = r0; r < r1; ++r) {
    read_row(t, layout, w, cols, r, row.data());
    for (int64_t c = 0; c < cols; ++c) wf[size_t(c)] = weight_bf16(t, row[size_t(c)]);
    for (int j = 0; j < n_tok; ++j) {
      const uint16_t* xr = x.v.data() + (t0 + j) * x.ld;
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c) acc = std::fma(wf[size_t(c)], bf16_to_fp32(xr[c]), acc);
      y[j * ldy + r] = acc;
    }
  }
}

}  // namespace ref
}  // namespace lynx::kernels
