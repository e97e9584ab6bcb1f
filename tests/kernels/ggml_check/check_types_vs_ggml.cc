// Checks lynx-moe's decoders and reference quantizers against ggml's own dequantize_row_* and
// quantize functions, compiled from ggml's source by run.sh beside this file (not a ctest).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"

// ggml's functions (their block pointers taken as void*).
extern "C" {
#define DECL(t)                                                    \
  void quantize_row_##t##_ref(const float* x, void* y, int64_t k); \
  void dequantize_row_##t(const void* x, float* y, int64_t k)
DECL(q4_0);
DECL(q4_1);
DECL(q5_0);
DECL(q5_1);
DECL(q8_0);
DECL(q2_K);
DECL(q3_K);
DECL(q4_K);
DECL(q5_K);
DECL(q6_K);
DECL(q8_K);
DECL(iq4_nl);
DECL(iq4_xs);
DECL(mxfp4);
#undef DECL
size_t quantize_iq4_nl(const float* src, void* dst, int64_t nrow, int64_t n_per_row,
                       const float* qw);
size_t quantize_iq4_xs(const float* src, void* dst, int64_t nrow, int64_t n_per_row,
                       const float* qw);
}
// What llama-quantize calls for these two (ggml_quantize_chunk, no importance matrix).
void q_iq4_nl(const float* x, void* y, int64_t k) {
  quantize_iq4_nl(x, y, 1, k, nullptr);
}
void q_iq4_xs(const float* x, void* y, int64_t k) {
  quantize_iq4_xs(x, y, 1, k, nullptr);
}

using lynx::gguf::TensorType;
struct T {
  const char* name;
  TensorType t;
  void (*q)(const float*, void*, int64_t);
  void (*dq)(const void*, float*, int64_t);
};
#define ROW(n, e) \
  { #n, TensorType::e, quantize_row_##n##_ref, dequantize_row_##n }

int main() {
  const T types[] = {ROW(q4_0, Q4_0),
                     ROW(q4_1, Q4_1),
                     ROW(q5_0, Q5_0),
                     ROW(q5_1, Q5_1),
                     ROW(q8_0, Q8_0),
                     ROW(q2_K, Q2_K),
                     ROW(q3_K, Q3_K),
                     ROW(q4_K, Q4_K),
                     ROW(q5_K, Q5_K),
                     ROW(q6_K, Q6_K),
                     ROW(q8_K, Q8_K),
                     {"iq4_nl", TensorType::IQ4_NL, q_iq4_nl, dequantize_row_iq4_nl},
                     {"iq4_xs", TensorType::IQ4_XS, q_iq4_xs, dequantize_row_iq4_xs},
                     ROW(mxfp4, MXFP4)};
  const int64_t n = 256 * 64;
  int bad = 0;
  for (const T& ty : types) {
    size_t qbytes = lynx::kernels::weight_row_bytes(ty.t, n);
    long q_diff_blocks = 0, dq_diff = 0, dq_rand_diff = 0;
    for (int trial = 0; trial < 40; ++trial) {
      std::mt19937 rng(trial);
      std::normal_distribution<float> nd(0.0f, trial % 2 ? 0.02f : 3.0f);
      std::vector<float> x(n);
      for (auto& v : x) v = nd(rng);
      if (trial % 4 == 2)
        for (int64_t i = 0; i < n; i += 97) x[i] *= 8;
      if (trial % 5 == 3)
        for (int64_t i = 0; i < 512; ++i) x[i] = 0;  // zero blocks
      std::vector<uint8_t> a(qbytes), b(qbytes);
      ty.q(x.data(), a.data(), n);
      lynx::kernels::quantize_row(ty.t, x.data(), b.data(), n);
      int64_t bb = 0, be = 0;
      lynx::gguf::tensor_type_info(ty.t, &be, &bb);
      for (size_t o = 0; o < qbytes; o += bb) q_diff_blocks += std::memcmp(&a[o], &b[o], bb) != 0;
      std::vector<float> ya(n), yb(n);
      ty.dq(a.data(), ya.data(), n);
      lynx::kernels::ref::dequantize_row(ty.t, a.data(), yb.data(), n);
      for (int64_t i = 0; i < n; ++i) dq_diff += std::memcmp(&ya[i], &yb[i], 4) != 0;
      // random bytes
      for (auto& c : a) c = uint8_t(rng());
      ty.dq(a.data(), ya.data(), n);
      lynx::kernels::ref::dequantize_row(ty.t, a.data(), yb.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const bool both_nan = std::isnan(ya[i]) && std::isnan(yb[i]);
        dq_rand_diff += !both_nan && std::memcmp(&ya[i], &yb[i], 4) != 0;
      }
    }
    std::printf(
        "%-7s quantize: %ld of %ld blocks differ; decode: %ld / %ld (random bytes) values differ\n",
        ty.name, q_diff_blocks, long(40 * n / lynx::kernels::block_elems(ty.t)), dq_diff,
        dq_rand_diff);
    bad += q_diff_blocks + dq_diff + dq_rand_diff > 0;
  }
  return bad;
}
