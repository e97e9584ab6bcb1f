// A fixed pool of worker threads for data-parallel loops. The calling thread takes part as
// worker 0, so ThreadPool(1) runs everything inline. Owned by the engine context (no global
// pool).
#pragma once
#include <cstdint>
#include <functional>

#include "kernels/kernels.h"

namespace lynx::kernels {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // Splits [0, n) into contiguous chunks, one per thread, and runs fn(begin, end, thread_id)
  // on each; returns when all are done. Chunks are aligned to `grain` elements.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1);

 private:
  struct Impl;
  Impl* impl_;
};

// y[j*ldy + r] = W[r] . x[j*ldx]  for all rows r of W (rows x cols), split across the pool.
void matmul(ThreadPool& pool, TensorType t, const void* w, int64_t rows, int64_t cols,
            const float* x, int64_t ldx, int n_tok, float* y, int64_t ldy);

}  // namespace lynx::kernels
