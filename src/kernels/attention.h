// Blocked attention of one GQA group (the query heads that share one KV head) over a tile of
// query tokens of one sequence, for prefill: every K/V row of a key tile is read once for all
// heads x tokens of the query tile (a small GEMM Q_tile K_tile^T, an online softmax as flash
// attention runs it, then P V accumulated), instead of once per (token, head).
#pragma once
#include <cstdint>
#include <vector>

namespace lynx::kernels {

// One group's attention. Query token i (0..n_tok) of the tile is batch row tok[i] at
// position pos[i]; its head g (0..n_head) reads q + tok[i] * q_stride + g * hd and writes
// out + tok[i] * out_stride + g * hd. It attends to the key positions p with
// lo <= p <= pos[i], lo = pos[i] - window + 1 under a sliding window (window > 0, clamped at
// 0) and 0 without. Position p's key and value are at k / v + row(p) * kv_stride, row(p) =
// p % ring for a ring buffer (ring > 0), else p. The scores are (q . k) * scale; with sinks
// (one logit per head, nullptr: none) each head's softmax has that logit in its denominator
// only, as gpt-oss's attention does.
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
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t kv_stride = 0;
  int ring = 0;
  int window = 0;
  float scale = 1.f;
  const float* sinks = nullptr;
};

// Query tokens per tile for a group of n_head heads: about 64 (head, token) rows, which fill
// the SIMD lanes of the score GEMM and reuse each K/V row that many times.
int attention_tile_tokens(int n_head);

// The blocked kernel (SIMD, dynamic dispatch). `scratch` is grown as needed and reused.
// Positions must be below 2^24 (they are compared as floats); larger ones are an error.
void attention_group(const AttentionGroup& a, std::vector<float>& scratch);

namespace ref {
// The scalar twin: per (token, head) the scores, the softmax (with the sink) and the sum of
// weighted values, as the forward pass computed them before the blocked kernel.
void attention_group(const AttentionGroup& a);
}  // namespace ref

}  // namespace lynx::kernels
