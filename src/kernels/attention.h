// Blocked attention of one GQA group (the query heads that share one KV head) over a tile of
// query tokens of one sequence, for prefill: every K/V row of a key tile is read once for all
// heads x tokens of the query tile (a small GEMM Q_tile K_tile^T, an online softmax as flash
// attention runs it, then P V accumulated), instead of once per (token, head).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lynx/gguf.h"

namespace lynx::kernels {

// One group's attention. Query token i (0..n_tok) of the tile is batch row tok[i] at
// position pos[i]; its head g (0..n_head) reads q + tok[i] * q_stride + g * hd and writes
// out + tok[i] * out_stride + g * hd. It attends to the key positions p with
// lo <= p <= pos[i], lo = pos[i] - window + 1 under a sliding window (window > 0, clamped at
// 0) and 0 without. Position p's key and value are at k / v + row(p) * kv_stride, row(p) =
// p % ring for a ring buffer (ring > 0), else p. The scores are (q . k) * scale; with sinks
// (one logit per head, nullptr: none) each head's softmax has that logit in its denominator
// only, as gpt-oss's attention does.
//
// The cache rows hold F32 (today's arithmetic, read in place), F16 or Q8_0 elements
// (kv_cache_row_bytes): a key tile's rows are decoded to F32 in L1 as the tile is reached
// (bit for bit the scalar decoders of kernels/types), never the whole cache. The values may
// be shorter than the keys (hd_v < hd: MLA, whose values are the first kv_lora_rank elements
// of its key rows, v == k); query head g reads q + ... + g * hd, output head g writes
// out + ... + g * hd_v.
struct AttentionGroup {
  const float* q = nullptr;
  int64_t q_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  const int32_t* tok = nullptr;
  const int32_t* pos = nullptr;
  int n_tok = 0;
  int n_head = 0;
  int hd = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride = 0, v_stride = 0;  // bytes between consecutive rows
  gguf::TensorType k_type = gguf::TensorType::F32, v_type = gguf::TensorType::F32;
  int hd_v = 0;  // value (and output) dims per head; 0: hd
  int ring = 0;
  int window = 0;
  float scale = 1.f;
  const float* sinks = nullptr;
};

// The KV cache element types: F32, F16 and Q8_0.
bool is_kv_cache_type(gguf::TensorType t);
// Bytes of one cached head vector of n elements: Q8_0 rounds n up to whole blocks of 32 (the
// padding holds zeros and is never read), so every head starts on a block.
size_t kv_cache_head_bytes(gguf::TensorType t, int64_t n);
// Stores n F32 values as one cached head vector (kv_cache_head_bytes(t, n) bytes at dst):
// F32 copied, F16 rounded to nearest even, Q8_0 through the type table's quantizer (ggml's
// quantize_row_q8_0_ref).
void kv_cache_store(gguf::TensorType t, const float* src, void* dst, int64_t n);
// The scalar decode of the first n elements of a cached head vector (types' decoders).
void kv_cache_load(gguf::TensorType t, const void* src, float* dst, int64_t n);

// Query tokens per tile for a group of n_head heads: about 64 (head, token) rows, which fill
// the SIMD lanes of the score GEMM and reuse each K/V row that many times.
int attention_tile_tokens(int n_head);

// The blocked kernel (SIMD, dynamic dispatch). `scratch` is grown as needed and reused.
// Positions must be below 2^24 (they are compared as floats); larger ones are an error.
void attention_group(const AttentionGroup& a, std::vector<float>& scratch);

namespace ref {
// The scalar twin: per (token, head) the scores, the softmax (with the sink) and the sum of
// weighted values, as the forward pass computed them before the blocked kernel; each key and
// value row decoded with kv_cache_load (for Q8_0 the type table's scalar decoder).
void attention_group(const AttentionGroup& a);
}  // namespace ref

}  // namespace lynx::kernels
