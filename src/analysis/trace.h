// Routing traces: a model's router logits per layer and step, recorded while it runs real
// text, replayed by `lynx-moe route-sim --logits FILE` and the benchmarks (issue 4 "CLI").
//
// File format, version 1, all integers little-endian:
//   header  char magic[4] = "LXRT"; u32 version = 1; u32 n_layers; u32 n_expert (N);
//           u32 n_expert_used (k); u8 gating (0 softmax, 1 sigmoid); u8 norm_topk (0/1);
//           u16 reserved = 0; f32 weights_scale                              (28 bytes)
//   records until end of file, one per (step, MoE layer) routing call:
//           u32 step; u32 layer (< n_layers); u32 n_tokens (T); u8 flags[T] (TokenFlags);
//           f32 logits[T x N] (raw router logits, row-major)
// Steps and flags let a replay tell decode tokens from prefill chunks. The reader rejects
// bad magic/version, impossible sizes, unknown flag bits, non-finite logits and truncation
// with a lynx::Error naming the file and the problem.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "lynx/routing.h"

namespace lynx::analysis {

struct TraceHeader {
  int n_layers = 0;
  int n_expert = 0;
  int n_expert_used = 0;
  GatingFunc func = GatingFunc::kSoftmax;
  bool norm_topk = true;
  float weights_scale = 1.f;
  GatingConfig gating() const { return {n_expert, n_expert_used, func, norm_topk, weights_scale}; }
};

struct TraceRecord {
  int step = 0;
  int layer = 0;
  int n_tokens = 0;
  std::vector<uint8_t> flags;  // [T]
  std::vector<float> logits;   // [T x N]
};

class TraceWriter {
 public:
  TraceWriter(const std::string& path, const TraceHeader& header);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  // flags may be null (all decode). logits: [n_tokens x N].
  void write(int step, int layer, int n_tokens, const uint8_t* flags, const float* logits);
  // Flushes and closes; throws if the data could not be written. Called by the destructor
  // too (which swallows errors).
  void close();

 private:
  std::string path_;
  TraceHeader h_;
  std::FILE* f_ = nullptr;
};

class TraceReader {
 public:
  explicit TraceReader(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;
  const TraceHeader& header() const { return h_; }
  // Reads the next record; false at a clean end of file.
  bool next(TraceRecord& rec);

 private:
  std::string path_;
  TraceHeader h_;
  std::FILE* f_ = nullptr;
};

}  // namespace lynx::analysis
