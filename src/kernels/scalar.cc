// Scalar kernels: fp16/bf16 conversions, type sizes and the `ref` twins of every SIMD kernel.
// What each weight type is (block size, decode, quantizer) lives in the type table
// (types.h, one file per type in types/); this file only looks it up.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/types.h"
#include "kernels/types/blocks.h"
#include "lynx/error.h"

namespace lynx::kernels {
namespace {

constexpr int64_t kQK = 32;  // elements per Q8_0 / Q4_0 block
constexpr int64_t kQ8BlockBytes = sizeof(types::BlockQ8_0);
constexpr int64_t kQ4BlockBytes = sizeof(types::BlockQ4_0);
static_assert(offsetof(types::BlockQ8_0, qs) == 2 && offsetof(types::BlockQ4_0, qs) == 2,
              "block_byte: the quants follow the fp16 scale");

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const TypeTraits& check_row(TensorType t, int64_t n) {
  const TypeTraits& tr = type_traits(t);
  if (n < 0 || n % tr.block_elems != 0) {
    throw Error("kernels: row of " + std::to_string(n) + " elements is not a multiple of the " +
                gguf::tensor_type_name(t) + " block size " + std::to_string(tr.block_elems));
  }
  return tr;
}

// Byte offset in a Q8_0/Q4_0 matrix of block b of row r: its fp16 scale (k = -1) or its quant
// byte k (k < 16 for Q4_0, < 32 for Q8_0), in either layout (kernels.h), indexed directly
// rather than through the repack functions so the ref twins check those too.
int64_t block_byte(WeightLayout layout, int64_t bb, int64_t nb, int64_t r, int64_t b, int64_t k) {
  if (layout == WeightLayout::kRows) return (r * nb + b) * bb + (k < 0 ? 0 : 2 + k);
  const int64_t i = r % kInterleaveRows;
  const int64_t blk = (r - i) * nb * bb + b * kInterleaveRows * bb;
  return k < 0 ? blk + 2 * i : blk + 32 + 64 * (k / 4) + 4 * i + k % 4;
}

// Byte k (kRows order) of block b of row r of a matrix of one of the 32-element types with the
// integer path, in either layout, read by this file's own indexing of kInterleaved16
// (kernels.h): the scalar fields (16 values each, row 0 first), then the 4-byte words of the
// rest as planes of 64 bytes (lane i = row i).
int64_t legacy_block_byte(TensorType t, WeightLayout layout, int64_t nb, int64_t r, int64_t b,
                          int64_t k) {
  const TypeTraits& tr = type_traits(t);
  const int64_t bb = tr.block_bytes;
  if (layout == WeightLayout::kRows) return (r * nb + b) * bb + k;
  const int64_t fb = tr.interleave.field_bytes, nf = tr.interleave.fields;
  const int64_t i = r % kInterleaveRows;
  const int64_t blk = (r - i) * nb * bb + b * kInterleaveRows * bb;
  if (k < nf * fb) return blk + kInterleaveRows * fb * (k / fb) + fb * i + k % fb;
  const int64_t kw = k - nf * fb;
  return blk + kInterleaveRows * nf * fb + 64 * (kw / 4) + 4 * i + kw % 4;
}

void check_layout(TensorType t, WeightLayout layout, const char* what) {
  const bool quant = t == TensorType::Q8_0 || t == TensorType::Q4_0;
  if (layout == WeightLayout::kInterleaved16 && !quant) {
    throw Error(std::string(what) + ": a " + gguf::tensor_type_name(t) +
                " matrix cannot be interleaved");
  }
  const bool flt = t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16;
  if (layout == WeightLayout::kPanel16 && !flt) {
    throw Error(std::string(what) + ": a " + gguf::tensor_type_name(t) +
                " matrix cannot be stored in 16-row panels");
  }
}

}  // namespace

bool is_compute_type(TensorType t) {
  return find_type_traits(t) != nullptr;
}

int64_t block_elems(TensorType t) {
  const TypeTraits* tr = find_type_traits(t);
  return tr ? tr->block_elems : 1;
}

size_t weight_row_bytes(TensorType t, int64_t n) {
  const TypeTraits& tr = check_row(t, n);
  return static_cast<size_t>(n / tr.block_elems * tr.block_bytes);
}

// ---------------------------------------------------------------- fp16 / bf16

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in f32.
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) {  // inf, or NaN made quiet as F16C does
    return bits_float(sign | 0x7F800000 | (mant << 13) | (mant ? 0x00400000 : 0));
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7FFFFFFF;
  if (ax > 0x7F800000) {  // NaN: keep the top payload bits, force quiet
    return sign | 0x7E00 | static_cast<uint16_t>((ax >> 13) & 0x3FF);
  }
  // 65520 (0x477FF000) is halfway between 65504 (max half, odd mantissa) and 2^16: ties to
  // even round it up to infinity.
  if (ax >= 0x477FF000) return sign | 0x7C00;
  if (ax >= 0x38800000) {  // result is a normal half (>= 2^-14)
    const uint32_t odd = (ax >> 13) & 1;
    ax += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFF + odd;  // rebias + round half even
    return sign | static_cast<uint16_t>(ax >> 13);
  }
  // Subnormal half: units of 2^-24. Scaling by 2^24 is exact, nearbyint rounds half to even
  // (default rounding mode); 1024 carries into the smallest normal (0x0400) as it should.
  const float scaled = std::fabs(f) * 16777216.0f;
  return sign | static_cast<uint16_t>(std::nearbyint(scaled));
}

float bf16_to_fp32(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

uint16_t fp32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

// ---------------------------------------------------------------- reference twins
namespace ref {

void dequantize_row(TensorType t, const void* src, float* dst, int64_t n) {
  const TypeTraits& tr = check_row(t, n);
  tr.decode(static_cast<const uint8_t*>(src), dst, n / tr.block_elems);
}

void quantize_row(TensorType t, const float* src, void* dst, int64_t n) {
  const TypeTraits& tr = check_row(t, n);
  if (!tr.encode) {
    throw Error(std::string("kernels: no quantizer for ") + gguf::tensor_type_name(t));
  }
  tr.encode(src, static_cast<uint8_t*>(dst), n / tr.block_elems);
}

float dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

float sum(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return static_cast<float>(s);
}

void matmul_rows(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1, const float* x,
                 int64_t ldx, int n_tok, float* y, int64_t ldy, WeightLayout layout) {
  const size_t rb = weight_row_bytes(t, cols);
  check_layout(t, layout, "ref::matmul_rows");
  const auto* wb = static_cast<const uint8_t*>(w);
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<uint8_t> plain(rb);
  for (int64_t r = r0; r < r1; ++r) {
    if (layout == WeightLayout::kRows) {
      std::memcpy(plain.data(), wb + r * rb, rb);
    } else if (layout == WeightLayout::kPanel16) {  // element c of row r: (r - i) cols + 16 c + i
      const int64_t es = int64_t(rb) / cols, i = r % kPanelRows;
      for (int64_t c = 0; c < cols; ++c) {
        std::memcpy(&plain[size_t(c * es)], wb + ((r - i) * cols + c * kPanelRows + i) * es,
                    size_t(es));
      }
    } else {  // gather the row's blocks
      const int64_t bb = t == TensorType::Q8_0 ? kQ8BlockBytes : kQ4BlockBytes, nb = cols / kQK;
      for (int64_t b = 0; b < nb; ++b) {
        for (int64_t k = -1; k < bb - 2; ++k) {
          const int64_t o = block_byte(layout, bb, nb, r, b, k);
          if (k < 0) {
            std::memcpy(&plain[b * bb], wb + o, 2);
          } else {
            plain[b * bb + 2 + k] = wb[o];
          }
        }
      }
    }
    dequantize_row(t, plain.data(), row.data(), cols);
    for (int j = 0; j < n_tok; ++j) y[j * ldy + r] = dot(row.data(), x + j * ldx, cols);
  }
}

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void softmax_inplace(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    s += x[i];
  }
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

// In double, with 0.5 (1 + tanh z) written as 1 / (1 + exp(-2z)) (the same function; the
// tanh form's 1 + tanh z cancels to 0 where the value is still ~1e-20, z < -19).
void geglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double z = 0.7978845608028654 * (g + 0.044715 * g * g * g);
    out[i] = static_cast<float>(g / (1.0 + std::exp(-2.0 * z)) * up[i]);
  }
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(cap * std::tanh(double(x[i]) / cap));
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The quantizer of quantize_row(Q8_0) above, keeping the widened fp16 scale and the sum.
void quantize_acts_rows(const float* x, int64_t ldx, int t0, int t1, QuantizedActs& out) {
  const int64_t nb = out.n_blocks();
  for (int t = t0; t < t1; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + t * ldx + b * kQK;
      int8_t* q = &out.q[static_cast<size_t>(t * out.cols + b * kQK)];
      bool finite = true;
      for (int j = 0; j < kQK; ++j) finite &= std::isfinite(v[j]);
      if (!finite) {  // as the SIMD twin: zeros and a NaN scale, never a NaN-to-int conversion
        std::memset(q, 0, kQK);
        out.d[static_cast<size_t>(t * nb + b)] = std::numeric_limits<float>::quiet_NaN();
        out.sum[static_cast<size_t>(t * nb + b)] = 0;
        continue;
      }
      float amax = 0.0f;
      for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int32_t s = 0;
      for (int j = 0; j < kQK; ++j) {
        q[j] = static_cast<int8_t>(std::roundf(v[j] * id));
        s += q[j];
      }
      out.d[static_cast<size_t>(t * nb + b)] = fp16_to_fp32(fp32_to_fp16(d));
      out.sum[static_cast<size_t>(t * nb + b)] = s;
    }
  }
}

void matmul_rows_q8(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                    const QuantizedActs& x, int t0, int n_tok, float* y, int64_t ldy,
                    WeightLayout layout) {
  if (!has_int8_path(t) || cols != x.cols || t0 < 0 || n_tok < 0 || t0 + n_tok > x.n_tok) {
    throw Error("ref::matmul_rows_q8: bad arguments");
  }
  weight_row_bytes(t, cols);  // validates cols
  const auto* wb = static_cast<const uint8_t*>(w);
  const TypeTraits& tr = type_traits(t);
  const int64_t nb = cols / kQK, bb = tr.block_bytes;
  const bool has_min = tr.act_type == TensorType::Q8_1;  // Q4_1 / Q5_1: ggml's Q8_1 products
  for (int64_t r = r0; r < r1; ++r) {
    for (int j = 0; j < n_tok; ++j) {
      const int tok = t0 + j;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t blk[kQ8BlockBytes];
        for (int64_t k = 0; k < bb; ++k) blk[k] = wb[legacy_block_byte(t, layout, nb, r, b, k)];
        types::Levels32 w;
        tr.levels(blk, w);
        const int8_t* q = &x.q[static_cast<size_t>(tok * x.cols + b * kQK)];
        const size_t xb = static_cast<size_t>(tok * nb + b);
        int32_t isum = 0;
        for (int e = 0; e < kQK; ++e) isum += int32_t(w.q[e]) * q[e];
        const float dx = x.d[xb];
        // dw * dx is exact (two 11-bit significands, or a power of two for MXFP4); one
        // rounding per block, and per min term.
        acc = std::fma(w.d * dx, static_cast<float>(isum), acc);
        if (has_min) acc = std::fma(w.m * dx, static_cast<float>(x.sum[xb]), acc);
      }
      y[j * ldy + r] = acc;
    }
  }
}

}  // namespace ref
}  // namespace lynx::kernels
