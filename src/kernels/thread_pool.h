// A fixed pool of worker threads for data-parallel loops. The calling thread takes part as
// worker 0, so ThreadPool(1) runs everything inline. Owned by the engine context (no global
// pool).
#pragma once
#include <cstdint>
#include <functional>

#include "kernels/kernels.h"
#include "kernels/scratch.h"

namespace lynx::kernels {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // Chunks per thread of parallel_for: more than one, so that when a thread is descheduled
  // (a busy machine) the others take over its share; few, so that each chunk stays a long
  // contiguous stream and a short call pays few claims.
  static constexpr int kChunksPerThread = 4;
  // For the long products of a step over many tokens (chunks_per_thread_for): a call ends
  // when its last chunk does, so with 4 chunks per thread the other thread waited for up to
  // an eighth of every GEMM (experts' chunks differ in tokens; docs/benchmarks.md, issue 31).
  static constexpr int kFineChunksPerThread = 32;

  // Splits [0, n) into balanced contiguous chunks aligned to `grain` elements (up to
  // chunks_per_thread per thread, in [1, 64]) and runs fn(begin, end, thread_id) on each;
  // returns when all are done. thread_id is in [0, size()) and unique among concurrently
  // running chunks (per-thread scratch is safe). Threads claim chunks dynamically, so a
  // worker that starts late on a busy machine does not hold the others up; the chunk
  // boundaries themselves depend only on n, grain, chunks_per_thread and size(). Not
  // reentrant: a nested or concurrent call throws lynx::Error.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1, int chunks_per_thread = kChunksPerThread);

  // The working memory of worker `thread_id` (scratch.h) for the row kernels its chunks call:
  // thread_id is unique among running chunks, so no two share one. It grows to what the
  // largest matrix needs and is freed with the pool, or by release_scratch.
  Scratch& scratch(int thread_id);
  size_t scratch_bytes() const;
  void release_scratch();

 private:
  struct Impl;
  Impl* impl_;
};

// The chunks per thread for a product over a step of n_tok tokens: kFineChunksPerThread
// from kFineChunkTokens tokens on (prefill), else ThreadPool::kChunksPerThread (decode keeps
// its few long chunks).
constexpr int kFineChunkTokens = 64;
constexpr int chunks_per_thread_for(int64_t n_tok) {
  return n_tok >= kFineChunkTokens ? ThreadPool::kFineChunksPerThread
                                   : ThreadPool::kChunksPerThread;
}

// y[j*ldy + r] = W[r] . x[j*ldx]  for all rows r of W (rows x cols, stored in `layout`),
// split across the pool. Bit-identical to a single matmul_rows call over all rows, for any
// pool size. This is the exact float path for every weight type; the integer path is the
// overload below, on activations quantized once with quantize_acts (the caller decides which
// path a weight takes: src/model/forward.cc).
void matmul(ThreadPool& pool, TensorType t, const void* w, int64_t rows, int64_t cols,
            const float* x, int64_t ldx, int n_tok, float* y, int64_t ldy,
            WeightLayout layout = WeightLayout::kRows);

// The integer path with activations quantized beforehand (several weights sharing one
// input quantize it once): y[j*ldy + r] = W[r] . x[j] for all x.n_tok tokens; t must be
// a type with an integer path (has_int_path; x holds the form it reads). Bit-identical to one
// matmul_rows_q8 call over all rows, for any pool size.
void matmul(ThreadPool& pool, TensorType t, const void* w, int64_t rows, int64_t cols,
            const QuantizedActs& x, float* y, int64_t ldy,
            WeightLayout layout = WeightLayout::kRows);

// quantize_acts with the rows split across the pool (bit-identical to the serial one).
void quantize_acts(ThreadPool& pool, const float* x, int64_t ldx, int n_tok, int64_t cols,
                   QuantizedActs& out);
// The same into the Q8_K form (quantize_acts_k, matmul_k.h).
void quantize_acts_k(ThreadPool& pool, const float* x, int64_t ldx, int n_tok, int64_t cols,
                     QuantizedActsK& out);
// Quantizes the rows into the form the integer kernel of weight type `wtype` reads (its
// act_type, kernels/types.h: Q8_0 into `out`, Q8_K into out.k).
void quantize_acts_for(ThreadPool& pool, TensorType wtype, const float* x, int64_t ldx, int n_tok,
                       int64_t cols, QuantizedActs& out);
// Rows [t0, t1) of quantize_acts_for (out, or out.k, already has its shape).
void quantize_acts_rows_for(TensorType wtype, const float* x, int64_t ldx, int t0, int t1,
                            QuantizedActs& out);

// True when the integer kernel of `wtype` reads Q8_K activations (QuantizedActs::k).
bool act_type_is_q8k(TensorType wtype);

// The input of one or more matmuls: n_tok rows of `cols` F32 activations (row t at
// x + t * cols) and their Q8_0 quantization into *q, made by the first weight that takes the
// integer path, so weights sharing an input (q/k/v, gate/up, router/experts/shared expert)
// quantize it once.
struct ActRows {
  const float* x = nullptr;
  int n_tok = 0;
  int64_t cols = 0;
  QuantizedActs* q = nullptr;
  bool quantized = false;    // the Q8_0 form in *q
  bool quantized_k = false;  // the Q8_K form in q->k

  const QuantizedActs& quantize(ThreadPool& pool) {
    if (!quantized) quantize_acts(pool, x, cols, n_tok, cols, *q);
    quantized = true;
    return *q;
  }
  // The form the integer kernel of weight type `wtype` reads (quantize_acts_for), made once.
  const QuantizedActs& quantize(ThreadPool& pool, TensorType wtype) {
    if (act_type_is_q8k(wtype)) {
      if (!quantized_k) quantize_acts_k(pool, x, cols, n_tok, cols, q->k);
      quantized_k = true;
      return *q;
    }
    return quantize(pool);
  }
};

}  // namespace lynx::kernels
