// Tensor bytes from checkpoint rows (fill.h).
#include "convert/fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include "kernels/kernels.h"
#include "lynx/error.h"

namespace lynx::convert {

using gguf::TensorType;

namespace {
// The HF row (or element) that GGUF row i of a permuted q/k projection comes from. HF keeps
// each head's rotary pairs as two halves (rotate_half); ggml's NORM rope wants them adjacent:
// GGUF row h*hd + 2k + j <- HF row h*hd + j*hd/2 + k (convert_hf_to_gguf.py LlamaModel.permute).
int64_t permuted_source(int64_t i, int64_t n, int64_t heads) {
  const int64_t hd = n / heads, h = i / hd, r = i % hd;
  return h * hd + (r % 2) * (hd / 2) + r / 2;
}

// float8 e4m3fn (OCP FP8, the "fn" variant: no infinities, S.1111.111 is NaN): sign, 4
// exponent bits of bias 7, 3 mantissa bits; exponent 0 is subnormal (m / 8 x 2^-6).
float e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 0x0F, m = b & 0x07;
  const float mag = e == 0                ? std::ldexp(float(m), -9)
                    : (e == 15 && m == 7) ? std::numeric_limits<float>::quiet_NaN()
                                          : std::ldexp(float(8 + m), e - 10);
  return (b & 0x80) ? -mag : mag;
}

}  // namespace

float* row_to_f32(const StTensor& t, int64_t row, int64_t cols, float* out) {
  const uint8_t* p = t.data + size_t(row) * size_t(cols) * dtype_size(t.dtype);
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out, p, size_t(cols) * 4);
      break;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, p + 2 * c, 2);
        out[c] = t.dtype == DType::kF16 ? kernels::fp16_to_fp32(h) : kernels::bf16_to_fp32(h);
      }
      break;
    case DType::kU8:  // the planner lets U8 through only as MXFP4 blocks / scales
      throw Error("tensor '" + t.name + "': U8 is not a float type");
    case DType::kF8E4M3: {
      if (t.scale.empty()) throw Error("FP8 tensor '" + t.name + "' has no weight_scale_inv");
      const int64_t grid = t.scale_cols > 0 ? (cols + t.scale_cols - 1) / t.scale_cols : 0;
      for (int64_t c = 0; c < cols; ++c) {
        const float s = t.scale.size() == 1
                            ? t.scale[0]
                            : t.scale[size_t((row / t.scale_rows) * grid + c / t.scale_cols)];
        out[c] = e4m3_to_f32(p[c]) * s;
      }
      break;
    }
  }
  return out;
}

namespace {

void store_row(TensorType type, const float* buf, uint8_t* out, int64_t cols) {
  if (type == TensorType::F32) {
    std::memcpy(out, buf, size_t(cols) * 4);
  } else {
    kernels::quantize_row(type, buf, out, cols);
  }
}

// MXFP4 (OCP microscaling FP4): 32 E2M1 codes (sign bit 3, then a 2-bit exponent and a 1-bit
// mantissa) sharing one E8M0 scale 2^(e - 127). OpenAI's checkpoints (and transformers'
// dequantizer) pack element 2k in the low nibble of byte k and element 2k + 1 in the high one;
// ggml's block_mxfp4 is the scale byte then 16 bytes with element j in the low nibble of byte j
// and element j + 16 in the high one. The codes and the scale byte are the same, so the
// conversion is a nibble shuffle, bit-exact (convert_hf_to_gguf.py's GptOssModel does the same).
constexpr float kE2M1[16] = {0.f,  0.5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                             -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};

void mxfp4_to_ggml(const uint8_t* blocks, const uint8_t* scales, int64_t n_blocks, uint8_t* out) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* q = blocks + 16 * b;
    uint8_t* o = out + 17 * b;
    o[0] = scales[b];
    auto code = [&](int k) { return (k % 2 == 0 ? q[k / 2] : q[k / 2] >> 4) & 0x0F; };
    for (int j = 0; j < 16; ++j) o[1 + j] = uint8_t(code(j) | code(j + 16) << 4);
  }
}

void mxfp4_to_f32(const uint8_t* blocks, const uint8_t* scales, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int e = int(scales[b]) - 127;
    for (int k = 0; k < 32; ++k) {
      const uint8_t byte = blocks[16 * b + k / 2];
      out[32 * b + k] = std::ldexp(kE2M1[(k % 2 == 0 ? byte : byte >> 4) & 0x0F], e);
    }
  }
}

bool same_encoding(DType d, TensorType t) {
  return (d == DType::kF32 && t == TensorType::F32) || (d == DType::kF16 && t == TensorType::F16) ||
         (d == DType::kBF16 && t == TensorType::BF16);
}

// attn_k_b / attn_v_b from kv_b_proj (Transform::kKvBToKB / kKvBToVB): per head h, kv_b's rows
// h*(nope+v) .. +nope are the key rows (written transposed: GGUF row l holds column l of them)
// and the next v rows the value rows (written as they are).
void fill_kv_split(const Planned& p, uint8_t* dst) {
  const StTensor& t = p.parts[0];
  const int64_t lora = t.shape[1], per_head = p.nope + p.vdim;
  const size_t row_bytes = gguf::row_size(p.type, p.cols);
  std::vector<float> buf(static_cast<size_t>(p.cols));
  std::vector<float> head;  // the key rows of one head, [nope x lora]
  for (int64_t h = 0; h < p.heads; ++h) {
    uint8_t* out0 = dst + size_t(h) * size_t(p.rows) * row_bytes;
    if (p.transform == Transform::kKvBToKB) {
      head.resize(size_t(p.nope * lora));
      for (int64_t d = 0; d < p.nope; ++d)
        row_to_f32(t, h * per_head + d, lora, &head[size_t(d * lora)]);
    }
    for (int64_t r = 0; r < p.rows; ++r) {
      if (p.transform == Transform::kKvBToKB) {
        for (int64_t d = 0; d < p.nope; ++d) buf[size_t(d)] = head[size_t(d * lora + r)];
      } else {
        row_to_f32(t, h * per_head + p.nope + r, lora, buf.data());
      }
      store_row(p.type, buf.data(), out0 + size_t(r) * row_bytes, p.cols);
    }
  }
}

// Runs work(r0, r1) over [0, rows) on up to n_threads threads.
void parallel_rows(int64_t rows, int n_threads, const std::function<void(int64_t, int64_t)>& work) {
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(n_threads, rows));
  if (n == 1) return work(0, rows);
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < n; ++i) pool.emplace_back(work, rows * i / n, rows * (i + 1) / n);
  for (auto& th : pool) th.join();
}

// gpt-oss's fused experts (Transform::kFused*), one expert (part) at a time: MXFP4 rows
// reshuffled into ggml blocks or decoded, or the dequantized [cols, rows] matrix transposed.
void fill_fused(const Planned& p, uint8_t* dst, int n_threads) {
  const size_t row_bytes = gguf::row_size(p.type, p.cols);
  const int64_t n_blocks = p.cols / 32;
  for (size_t e = 0; e < p.parts.size(); ++e) {
    const StTensor& t = p.parts[e];
    uint8_t* out0 = dst + e * size_t(p.rows) * row_bytes;
    if (p.mxfp4_src()) {
      const StTensor& sc = p.scales[e];
      parallel_rows(p.rows, n_threads, [&](int64_t r0, int64_t r1) {
        std::vector<float> buf(size_t(p.cols));
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t src = r * p.step + p.off;
          const uint8_t* blocks = t.data + size_t(src * n_blocks * 16);
          const uint8_t* scales = sc.data + size_t(src * n_blocks);
          uint8_t* out = out0 + size_t(r) * row_bytes;
          if (p.type == TensorType::MXFP4) {
            mxfp4_to_ggml(blocks, scales, n_blocks, out);
          } else {
            mxfp4_to_f32(blocks, scales, n_blocks, buf.data());
            store_row(p.type, buf.data(), out, p.cols);
          }
        }
      });
      release_pages(sc);
    } else {
      // Source [cols, rows * step]: gather the output rows (one expert's matrix in F32).
      const int64_t src_cols = t.shape[1];
      std::vector<float> m(static_cast<size_t>(p.rows * p.cols));
      std::vector<float> tmp(static_cast<size_t>(src_cols));
      for (int64_t i = 0; i < p.cols; ++i) {
        row_to_f32(t, i, src_cols, tmp.data());
        for (int64_t r = 0; r < p.rows; ++r)
          m[size_t(r * p.cols + i)] = tmp[size_t(r * p.step + p.off)];
      }
      parallel_rows(p.rows, n_threads, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          store_row(p.type, &m[size_t(r * p.cols)], out0 + size_t(r) * row_bytes, p.cols);
        }
      });
    }
    release_pages(t);
  }
}

}  // namespace

bool half(Transform t) {
  return t == Transform::kHalfGate || t == Transform::kHalfUp || t == Transform::kHalfDown;
}

bool fused(Transform t) {
  return t == Transform::kFusedGate || t == Transform::kFusedUp || t == Transform::kFusedDown ||
         half(t);
}

void fill(const Planned& p, uint8_t* dst, int n_threads) {
  if (p.transform == Transform::kKvBToKB || p.transform == Transform::kKvBToVB) {
    return fill_kv_split(p, dst);
  }
  if (fused(p.transform)) return fill_fused(p, dst, n_threads);
  const size_t row_bytes = gguf::row_size(p.type, p.cols);
  const bool strided = p.transform == Transform::kEvenCols || p.transform == Transform::kOddCols;
  const bool permute = p.transform == Transform::kPermuteQ || p.transform == Transform::kPermuteK;
  const bool vec_permute = permute && p.rows == 1;
  const bool gather = !p.col_src.empty() || p.op != Transform::kNone;
  for (size_t part = 0; part < p.parts.size(); ++part) {
    const StTensor& t = p.parts[part];
    uint8_t* out0 = dst + part * size_t(p.rows) * row_bytes;
    parallel_rows(p.rows, n_threads, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf(size_t(p.cols)), tmp;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t src = !p.row_src.empty()        ? p.row_src[size_t(r)]
                            : permute && !vec_permute ? permuted_source(r, p.rows, p.heads)
                                                      : r;
        uint8_t* out = out0 + size_t(r) * row_bytes;
        if (!vec_permute && !strided && !gather && same_encoding(t.dtype, p.type)) {  // a copy
          std::memcpy(out, t.data + size_t(src) * row_bytes, row_bytes);
          continue;
        }
        if (strided) {
          tmp.resize(size_t(p.cols * p.step));
          row_to_f32(t, src, p.cols * p.step, tmp.data());
          for (int64_t i = 0; i < p.cols; ++i) buf[size_t(i)] = tmp[size_t(i * p.step + p.off)];
        } else {
          row_to_f32(t, src, p.cols, buf.data());
        }
        if (vec_permute) {
          tmp = buf;
          for (int64_t i = 0; i < p.cols; ++i) {
            buf[size_t(i)] = tmp[size_t(permuted_source(i, p.cols, p.heads))];
          }
        }
        if (!p.col_src.empty()) {
          tmp = buf;
          for (int64_t i = 0; i < p.cols; ++i) buf[size_t(i)] = tmp[size_t(p.col_src[size_t(i)])];
        }
        if (p.op == Transform::kPlusOne) {
          for (float& v : buf) v += 1.f;
        } else if (p.op == Transform::kNegExp) {
          for (float& v : buf) v = -std::exp(v);
        }
        store_row(p.type, buf.data(), out, p.cols);
      }
    });
    release_pages(t);
  }
}

}  // namespace lynx::convert
