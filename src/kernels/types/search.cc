// The scale searches of search.h. The float sums take their products in ggml's order
// ((w * x) * l and (w * l) * l, each rounded) so that the encoders give ggml's bytes: checked
// against ggml-quants.c compiled beside (docs/models.md).
#include "kernels/types/search.h"
#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"

#include <algorithm>
#include <cmath>

namespace lynx::kernels::types {

namespace {

// The value of largest magnitude (the first one on ties) into *max; false, with every level
// 0, when the group is all but zero (the symmetric searches then store a zero scale).
bool signed_max(int n, const float* x, int8_t* L, float* max) {
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      *max = x[i];
    }
  }
  if (amax >= kGroupMaxEps) return true;
  for (int i = 0; i < n; ++i) L[i] = 0;
  return false;
}

}  // namespace

float search_symmetric(int n, int nmax, const float* x, int8_t* L, int rmse_type) {
  float max = 0;
  if (!signed_max(n, x, L, &max)) return 0.0f;
  auto level = [&](float iscale, int i) {
    return std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
  };
  float iscale = -static_cast<float>(nmax) / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + level(iscale, i));
    return 1 / iscale;
  }
  // rmse_type 1: weights x^2 (the only weighting the encoders here use).
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = static_cast<int8_t>(nmax + l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + level(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float search_asymmetric(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                        float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *min_out = -min;
    return 0.0f;
  }
  auto err = [&](float d) { return use_mad ? std::fabs(d) : d * d; };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
    L[i] = static_cast<uint8_t>(l);
    best_error += w[i] * err(scale * static_cast<float>(l) + min - x[i]);
  }
  uint8_t aux[256];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float cur_error = 0;
    for (int i = 0; i < n; ++i) {
      cur_error += w[i] * err(this_scale * static_cast<float>(aux[i]) + this_min - x[i]);
    }
    if (cur_error < best_error) {
      for (int i = 0; i < n; ++i) L[i] = aux[i];
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

float search_q3(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  if (!signed_max(n, x, L, &max)) return 0.0f;
  const float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (slx <= 0) continue;
      float sl2 = suml2 - w * static_cast<float>(L[i]) * static_cast<float>(L[i]);
      const int nl = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (nl == L[i]) continue;
      slx += w * x[i] * static_cast<float>(nl);
      sl2 += w * static_cast<float>(nl) * static_cast<float>(nl);
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

int nearest_grid_index(int n, const int8_t* values, float x) {
  if (x <= values[0]) return 0;
  if (x >= values[n - 1]) return n - 1;
  int lo = 0, hi = n - 1;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < values[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - static_cast<float>(values[hi - 1]) < static_cast<float>(values[hi]) - x ? hi - 1 : hi;
}

void encode_k_scales_mins(const float* src, int kMax, float rmin, int nstep, uint8_t* dst,
                          uint8_t* L) {
  float w[32], scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* x = src + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[l] * x[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(x[l]);
    scales[j] = search_asymmetric(32, kMax, x, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  uint8_t* s = dst + 4;
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    const int ls = std::min(63, nearest_int(inv_scale * scales[j]));
    const int lm = std::min(63, nearest_int(inv_min * mins[j]));
    if (j < 4) {
      s[j] = static_cast<uint8_t>(ls);
      s[j + 4] = static_cast<uint8_t>(lm);
    } else {
      s[j + 4] = static_cast<uint8_t>((ls & 0x0F) | ((lm & 0x0F) << 4));
      s[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      s[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  store_f16(dst, max_scale / 63.0f);
  store_f16(dst + 2, max_min / 63.0f);
  const float d_all = load_f16(dst), m_all = load_f16(dst + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, s, &sc, &m);
    const float d = d_all * static_cast<float>(sc);
    if (d == 0) continue;
    const float dm = m_all * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] =
          static_cast<uint8_t>(std::clamp(nearest_int((src[32 * j + l] + dm) / d), 0, kMax));
    }
  }
}

}  // namespace lynx::kernels::types
