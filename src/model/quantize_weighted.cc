// Importance-weighted quantizers (quantize_weighted.h). Block layouts as src/kernels/types/
// documents them per type; the packing of each is the reference encoder's.
#include "model/quantize_weighted.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"
#include "kernels/types/search.h"
#include "lynx/error.h"

namespace lynx {
namespace {

using gguf::TensorType;
using kernels::types::kGroupMaxEps;
using kernels::types::kIq4nlValues;
using kernels::types::kQK_K;
using kernels::types::load_f16;
using kernels::types::nearest_grid_index;
using kernels::types::nearest_int;
using kernels::types::search_asymmetric;
using kernels::types::store_f16;

// Symmetric levels in [-nmax, nmax - 1] (stored as level + nmax) minimizing sum w (x - d l)^2:
// the scale from the signed value of largest magnitude, then 18 nearby scales, each with its
// least-squares d (make_qx_quants with weights). Returns d.
float sym_search(int n, int nmax, const float* x, const float* w, uint8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, uint8_t(nmax));
    return 0;
  }
  std::fill(L, L + n, uint8_t(nmax));
  float best = -1, scale = 0;
  for (int is = -9; is <= 9; ++is) {
    const float iscale = -(float(nmax) + 0.1f * float(is)) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = float(std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      sumlx += w[i] * x[i] * l;
      suml2 += w[i] * l * l;
    }
    if (suml2 > 0 && (best < 0 || sumlx * sumlx > best * suml2)) {
      scale = sumlx / suml2;
      best = scale * sumlx;
      for (int i = 0; i < n; ++i) {
        L[i] = uint8_t(std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1) + nmax);
      }
    }
  }
  return scale;
}

// Non-negative values x (the sub-block scales or mins) onto levels [0, nmax] minimizing
// sum w (x - d l)^2: the max-based scale and 8 neighbours, then up to 5 passes moving one
// level at a time where the least-squares fit improves (make_qp_quants). Returns d.
float qp_search(int n, int nmax, const float* x, const float* w, uint8_t* L) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    std::fill(L, L + n, uint8_t(0));
    return 0;
  }
  auto level = [&](float iscale, int i) { return std::clamp(nearest_int(iscale * x[i]), 0, nmax); };
  float best_iscale = float(nmax) / max, best_mse = -1;
  for (int is = -4; is <= 4; ++is) {
    const float iscale = (0.1f * float(is) + float(nmax)) / max, scale = 1 / iscale;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const float d = x[i] - scale * float(level(iscale, i));
      mse += w[i] * d * d;
    }
    if (best_mse < 0 || mse < best_mse) {
      best_mse = mse;
      best_iscale = iscale;
    }
  }
  for (int i = 0; i < n; ++i) L[i] = uint8_t(level(best_iscale, i));
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    sumlx += w[i] * x[i] * L[i];
    suml2 += w[i] * float(L[i]) * L[i];
  }
  for (int pass = 0; pass < 5; ++pass) {
    bool changed = false;
    for (int i = 0; i < n; ++i) {
      const float slx = sumlx - w[i] * x[i] * L[i], sl2 = suml2 - w[i] * float(L[i]) * L[i];
      if (slx <= 0 || sl2 <= 0) continue;
      const int nl = std::clamp(nearest_int(x[i] * sl2 / slx), 0, nmax);
      if (nl == L[i]) continue;
      const float nslx = slx + w[i] * x[i] * nl, nsl2 = sl2 + w[i] * float(nl) * nl;
      if (nslx * nslx * suml2 > sumlx * sumlx * nsl2) {
        L[i] = uint8_t(nl);
        sumlx = nslx;
        suml2 = nsl2;
        changed = true;
      }
    }
    if (!changed) break;
  }
  return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

// IQ4 grid scale of 32 values under weights w (quantize_row_iq4_nl_impl's search); writes the
// grid indices to L. Returns the scale (0 for an all-zero block).
float iq4_search(const float* x, const float* w, uint8_t* L) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  std::fill(L, L + 32, uint8_t(0));
  if (amax < kGroupMaxEps) return 0;
  const float v0 = float(kIq4nlValues[0]);
  float d = 0, best = -1;
  // The scale that puts the largest value on the grid's far end, then 15 around the near end.
  for (int itry = -8; itry <= 7; ++itry) {
    const float id = itry < -7 ? -v0 / max : (float(itry) + v0) / max;
    float sumqx = 0, sumq2 = 0;
    uint8_t Lt[32];
    for (int j = 0; j < 32; ++j) {
      Lt[j] = uint8_t(nearest_grid_index(16, kIq4nlValues, id * x[j]));
      const float q = float(kIq4nlValues[Lt[j]]);
      sumqx += w[j] * q * x[j];
      sumq2 += w[j] * q * q;
    }
    if (sumq2 > 0 && (best < 0 || sumqx * sumqx > best * sumq2)) {
      d = sumqx / sumq2;
      best = d * sumqx;
      std::copy(Lt, Lt + 32, L);
    }
  }
  return d;
}

void iq4_indices(const float* x, float d, uint8_t* L) {
  const float id = d != 0 ? 1 / d : 0.0f;
  for (int j = 0; j < 32; ++j) L[j] = uint8_t(nearest_grid_index(16, kIq4nlValues, id * x[j]));
}

void pack_nibbles32(const uint8_t* L, uint8_t* q) {
  for (int j = 0; j < 16; ++j) q[j] = uint8_t((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
}
// Fifth bits of 32 levels: bit j of the u32 is L[j] >> 4.
void pack_qh32(const uint8_t* L, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= uint32_t(L[j] >> 4) << j;
  std::memcpy(qh, &h, 4);
}

// w[j] = imp[j] * sqrt(sigma2 + x[j]^2) for n values.
void weights_of(const float* x, const float* imp, float sigma2, int n, float* w) {
  for (int j = 0; j < n; ++j) w[j] = imp[j] * std::sqrt(sigma2 + x[j] * x[j]);
}
float sum_sq(const float* x, int64_t n) {
  float s = 0;
  for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
  return s;
}

// ---- 32-element types ----

void q4_0_or_q5_0(const float* x, const float* imp, uint8_t* dst, int64_t n, bool five) {
  const float sigma2 = sum_sq(x, n) / float(n);
  const int bytes = five ? 22 : 18;
  for (int64_t b = 0; b < n / 32; ++b, x += 32, imp += 32, dst += bytes) {
    float w[32];
    uint8_t L[32];
    weights_of(x, imp, sigma2, 32, w);
    const float d = sym_search(32, five ? 16 : 8, x, w, L);
    store_f16(dst, d);
    if (five) pack_qh32(L, dst + 2);
    pack_nibbles32(L, dst + bytes - 16);
  }
}

void q4_1_or_q5_1(const float* x, const float* imp, uint8_t* dst, int64_t n, bool five) {
  const float sigma2 = sum_sq(x, n) / float(n);
  const int bytes = five ? 24 : 20;
  for (int64_t b = 0; b < n / 32; ++b, x += 32, imp += 32, dst += bytes) {
    float w[32], min_out = 0;
    uint8_t L[32];
    weights_of(x, imp, sigma2, 32, w);
    const float d =
        search_asymmetric(32, five ? 31 : 15, x, w, L, &min_out, -0.9f, 0.05f, 36, false);
    store_f16(dst, d);
    store_f16(dst + 2, -min_out);
    if (five) pack_qh32(L, dst + 4);
    pack_nibbles32(L, dst + bytes - 16);
  }
}

void iq4_nl(const float* x, const float* imp, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, imp += 32, dst += 18) {
    float w[32];
    uint8_t L[32];
    weights_of(x, imp, 2 * sum_sq(x, 32) / 32, 32, w);
    const float d = iq4_search(x, w, L);
    store_f16(dst, d);
    pack_nibbles32(L, dst + 2);
  }
}

// ---- Super-block types (256 elements) ----

void iq4_xs(const float* x, const float* imp, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K, imp += kQK_K, dst += 136) {
    const float sigma2 = 2 * sum_sq(x, kQK_K) / kQK_K;
    float scales[8], w[32], max_scale = 0, amax = 0;
    uint8_t L[32];
    for (int ib = 0; ib < 8; ++ib) {
      weights_of(x + 32 * ib, imp + 32 * ib, sigma2, 32, w);
      scales[ib] = iq4_search(x + 32 * ib, w, L);
      if (std::fabs(scales[ib]) > amax) {
        amax = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    std::memset(dst, 0, 136);
    const float d = -max_scale / 32;
    store_f16(dst, d);
    const float id = d != 0 ? 1 / d : 0.0f;
    uint16_t scales_h = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
      iq4_indices(x + 32 * ib, d * float(l), L);
      pack_nibbles32(L, dst + 8 + 16 * ib);
      const int ls = l + 32;
      dst[4 + ib / 2] |= uint8_t((ls & 0x0F) << (4 * (ib % 2)));
      scales_h = uint16_t(scales_h | ((ls >> 4) << (2 * ib)));
    }
    std::memcpy(dst + 2, &scales_h, 2);
  }
}

// Q4_K / Q5_K: per 32 a weighted (scale, min) pair, both quantized to 6 bits by the weighted
// positive search (weights: the sub-blocks' weight sums), packed as kquants.h says; then the
// levels recomputed with the stored values. Q5_K has its fifth bits in qh.
void q4_k_or_q5_k(const float* x, const float* imp, uint8_t* dst, int64_t n, bool five) {
  const int kmax = five ? 31 : 15, bytes = five ? 176 : 144;
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K, imp += kQK_K, dst += bytes) {
    const float sigma2 = 2 * sum_sq(x, kQK_K) / kQK_K;
    float scales[8], mins[8], sw[8], w[32];
    uint8_t L[kQK_K], Ls[8], Lm[8];
    for (int j = 0; j < 8; ++j) {
      weights_of(x + 32 * j, imp + 32 * j, sigma2, 32, w);
      sw[j] = 0;
      for (int l = 0; l < 32; ++l) sw[j] += w[l];
      scales[j] =
          search_asymmetric(32, kmax, x + 32 * j, w, L + 32 * j, &mins[j], -0.9f, 0.05f, 36, false);
    }
    const float d = qp_search(8, 63, scales, sw, Ls);
    const float dmin = qp_search(8, 63, mins, sw, Lm);
    std::memset(dst, 0, size_t(bytes));
    uint8_t* s = dst + 4;
    for (int j = 0; j < 8; ++j) {
      if (j < 4) {
        s[j] = Ls[j];
        s[j + 4] = Lm[j];
      } else {
        s[j + 4] = uint8_t((Ls[j] & 0x0F) | ((Lm[j] & 0x0F) << 4));
        s[j - 4] |= uint8_t((Ls[j] >> 4) << 6);
        s[j] |= uint8_t((Lm[j] >> 4) << 6);
      }
    }
    store_f16(dst, d);
    store_f16(dst + 2, dmin);
    const float dd = load_f16(dst), dm = load_f16(dst + 2);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      kernels::types::scale_min_k4(j, s, &sc, &m);
      const float ds = dd * float(sc);
      if (ds == 0) continue;
      const float ms = dm * float(m);
      for (int l = 0; l < 32; ++l) {
        L[32 * j + l] = uint8_t(std::clamp(nearest_int((x[32 * j + l] + ms) / ds), 0, kmax));
      }
    }
    uint8_t* qh = dst + 16;
    uint8_t* q = dst + (five ? 48 : 16);
    for (int k = 0; k < 4; ++k, q += 32) {
      for (int l = 0; l < 32; ++l) {
        uint8_t l1 = L[64 * k + l], l2 = L[64 * k + 32 + l];
        if (five) {
          if (l1 > 15) qh[l] |= uint8_t(1 << (2 * k));
          if (l2 > 15) qh[l] |= uint8_t(2 << (2 * k));
          l1 &= 0x0F;
          l2 &= 0x0F;
        }
        q[l] = uint8_t(l1 | (l2 << 4));
      }
    }
  }
}

// Q6_K: per 16 a weighted symmetric scale (weights: the importance itself, as ggml), the 16
// scales as int8 against the largest, the levels recomputed with the stored scales.
void q6_k(const float* x, const float* imp, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K, imp += kQK_K, dst += 210) {
    uint8_t L[kQK_K];
    float scales[16], max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = sym_search(16, 32, x + 16 * j, imp + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs) {
        max_abs = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    std::memset(dst, 0, 210);
    if (max_abs < kGroupMaxEps) continue;
    const float iscale = -128.0f / max_scale;
    store_f16(dst + 208, 1 / iscale);
    auto* sc = reinterpret_cast<int8_t*>(dst + 192);
    for (int j = 0; j < 16; ++j) sc[j] = int8_t(std::min(127, nearest_int(iscale * scales[j])));
    const float d_all = load_f16(dst + 208);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * float(sc[j]);
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = uint8_t(std::clamp(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
      }
    }
    uint8_t* ql = dst;
    uint8_t* qh = dst + 128;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32) {
      const uint8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = uint8_t((Lh[l] & 0x0F) | ((Lh[l + 64] & 0x0F) << 4));
        ql[l + 32] = uint8_t((Lh[l + 32] & 0x0F) | ((Lh[l + 96] & 0x0F) << 4));
        qh[l] = uint8_t((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                        ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

// Q3_K: per 16 a weighted symmetric scale (levels -4..3), the 16 scales to 6 bits by a
// weighted symmetric search over them (weights: the sub-blocks' weight sums); levels
// recomputed with the stored scales, the third bit into hmask (set: +0, clear: -4).
void q3_k(const float* x, const float* imp, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K, imp += kQK_K, dst += 110) {
    const float sigma2 = 2 * sum_sq(x, kQK_K) / kQK_K;
    uint8_t L[kQK_K], Ls[16];
    float scales[16], sw[16], w[16];
    for (int j = 0; j < 16; ++j) {
      weights_of(x + 16 * j, imp + 16 * j, sigma2, 16, w);
      sw[j] = 0;
      for (int l = 0; l < 16; ++l) sw[j] += w[l];
      scales[j] = sym_search(16, 4, x + 16 * j, w, L + 16 * j);
    }
    std::memset(dst, 0, 110);
    const float d_block = sym_search(16, 32, scales, sw, Ls);
    uint8_t* s = dst + 96;
    for (int j = 0; j < 16; ++j) {
      const int l = Ls[j];  // level + 32, in [0, 63]
      if (j < 8) {
        s[j] = uint8_t(l & 0x0F);
      } else {
        s[j - 8] |= uint8_t((l & 0x0F) << 4);
      }
      s[8 + j % 4] |= uint8_t((l >> 4) << (2 * (j / 4)));
    }
    store_f16(dst + 108, d_block);
    const float d_all = load_f16(dst + 108);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * float(int(Ls[j]) - 32);
      if (d == 0) {
        for (int l = 0; l < 16; ++l) L[16 * j + l] = 4;
        continue;
      }
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = uint8_t(std::clamp(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
      }
    }
    uint8_t* hm = dst;
    for (int e = 0; e < kQK_K; ++e) {
      if (L[e] > 3) {
        hm[e % 32] |= uint8_t(1 << (e / 32));
        L[e] = uint8_t(L[e] - 4);
      }
    }
    uint8_t* q = dst + 32;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        q[32 * h + l] = uint8_t(Lh[l] | (Lh[l + 32] << 2) | (Lh[l + 64] << 4) | (Lh[l + 96] << 6));
      }
    }
  }
}

// Q2_K: per 16 a weighted (scale, min) pair with levels 0..3, both to 4 bits by the weighted
// positive search; levels recomputed with the stored values.
void q2_k(const float* x, const float* imp, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K, imp += kQK_K, dst += 84) {
    const float sigma2 = sum_sq(x, kQK_K) / kQK_K;
    uint8_t L[kQK_K], Ls[16], Lm[16];
    float scales[16], mins[16], sw[16], w[16];
    for (int j = 0; j < 16; ++j) {
      weights_of(x + 16 * j, imp + 16 * j, sigma2, 16, w);
      sw[j] = 0;
      for (int l = 0; l < 16; ++l) sw[j] += w[l];
      scales[j] =
          search_asymmetric(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.9f, 0.05f, 36, false);
    }
    const float dm = qp_search(16, 15, scales, sw, Ls);
    const float mm = qp_search(16, 15, mins, sw, Lm);
    std::memset(dst, 0, 84);
    for (int j = 0; j < 16; ++j) dst[j] = uint8_t(Ls[j] | (Lm[j] << 4));
    store_f16(dst + 80, dm);
    store_f16(dst + 82, mm);
    const float d_all = load_f16(dst + 80), m_all = load_f16(dst + 82);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * float(Ls[j]);
      if (d == 0) continue;
      const float m = m_all * float(Lm[j]);
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = uint8_t(std::clamp(nearest_int((x[16 * j + l] + m) / d), 0, 3));
      }
    }
    uint8_t* q = dst + 16;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        q[32 * h + l] = uint8_t(Lh[l] | (Lh[l + 32] << 2) | (Lh[l + 64] << 4) | (Lh[l + 96] << 6));
      }
    }
  }
}

}  // namespace

bool has_weighted_quantizer(TensorType t) {
  switch (t) {
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

void quantize_row_weighted(TensorType t, const float* x, const float* imp, void* dst_v, int64_t n) {
  auto* dst = static_cast<uint8_t*>(dst_v);
  switch (t) {
    case TensorType::Q4_0:
      return q4_0_or_q5_0(x, imp, dst, n, false);
    case TensorType::Q5_0:
      return q4_0_or_q5_0(x, imp, dst, n, true);
    case TensorType::Q4_1:
      return q4_1_or_q5_1(x, imp, dst, n, false);
    case TensorType::Q5_1:
      return q4_1_or_q5_1(x, imp, dst, n, true);
    case TensorType::Q2_K:
      return q2_k(x, imp, dst, n);
    case TensorType::Q3_K:
      return q3_k(x, imp, dst, n);
    case TensorType::Q4_K:
      return q4_k_or_q5_k(x, imp, dst, n, false);
    case TensorType::Q5_K:
      return q4_k_or_q5_k(x, imp, dst, n, true);
    case TensorType::Q6_K:
      return q6_k(x, imp, dst, n);
    case TensorType::IQ4_NL:
      return iq4_nl(x, imp, dst, n);
    case TensorType::IQ4_XS:
      return iq4_xs(x, imp, dst, n);
    default:
      throw Error(std::string("no importance-weighted quantizer for ") + gguf::tensor_type_name(t));
  }
}

}  // namespace lynx
