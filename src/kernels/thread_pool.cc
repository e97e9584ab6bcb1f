// Persistent thread pool. A decode step calls parallel_for a few hundred times (every expert
// matmul), so a call must cost microseconds: workers spin briefly on an epoch counter before
// sleeping on it (C++20 atomic wait, a futex on Linux), and the caller runs chunk 0 itself.
#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lynx/error.h"

namespace lynx::kernels {
namespace {

// Polling budget before sleeping: ~10 us of pause instructions bridges the gap between
// back-to-back calls of one decode step; then yields, which let other runnable threads
// proceed when the machine is oversubscribed (more pool threads than free cores), before
// finally sleeping on the futex so an idle engine burns no CPU.
constexpr int kPauseIters = 256;
constexpr int kYieldIters = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until `a` differs from `old` and returns the new value.
template <class T>
T wait_change(const std::atomic<T>& a, T old) {
  for (int i = 0; i < kPauseIters + kYieldIters; ++i) {
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
    if (i < kPauseIters) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  T v;
  while ((v = a.load(std::memory_order_acquire)) == old) a.wait(old, std::memory_order_acquire);
  return v;
}

}  // namespace

struct ThreadPool::Impl {
  using Fn = std::function<void(int64_t, int64_t, int)>;

  int n_threads = 1;
  std::vector<std::thread> threads;

  // The current job: written by the caller before it bumps `epoch` (release), read by the
  // workers after they observe the new epoch (acquire).
  const Fn* fn = nullptr;
  int64_t n = 0, grain = 1, units = 0;
  int active = 0;  // threads that get a non-empty chunk

  std::atomic<uint32_t> epoch{0};
  std::atomic<int> pending{0};  // workers (not the caller) still running the current job
  std::atomic<bool> stop{false};
  std::atomic<bool> busy{false};
  std::mutex error_mu;
  std::exception_ptr error;

  // Balanced contiguous chunks of whole grains: thread i gets units [U*i/A, U*(i+1)/A).
  void run_chunk(int tid) {
    if (tid >= active) return;
    const int64_t u0 = units * tid / active, u1 = units * (tid + 1) / active;
    const int64_t b = u0 * grain, e = std::min(n, u1 * grain);
    if (b >= e) return;
    try {
      (*fn)(b, e, tid);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
  }

  void worker(int tid) {
    uint32_t seen = 0;
    for (;;) {
      seen = wait_change(epoch, seen);
      if (stop.load(std::memory_order_acquire)) return;
      run_chunk(tid);
      if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) pending.notify_one();
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
  if (n_threads < 1) {
    delete impl_;
    throw Error("ThreadPool: thread count must be at least 1, got " + std::to_string(n_threads));
  }
  impl_->n_threads = n_threads;
  impl_->threads.reserve(n_threads - 1);
  for (int t = 1; t < n_threads; ++t) impl_->threads.emplace_back([this, t] { impl_->worker(t); });
}

ThreadPool::~ThreadPool() {
  impl_->stop.store(true, std::memory_order_release);
  impl_->epoch.fetch_add(1, std::memory_order_acq_rel);
  impl_->epoch.notify_all();
  for (auto& th : impl_->threads) th.join();
  delete impl_;
}

int ThreadPool::size() const {
  return impl_->n_threads;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Impl& p = *impl_;
  const int64_t units = (n + grain - 1) / grain;
  const int active = static_cast<int>(std::min<int64_t>(p.n_threads, units));
  if (active == 1) {  // nothing to share: no wake-up cost
    fn(0, n, 0);
    return;
  }
  if (p.busy.exchange(true, std::memory_order_acquire)) {
    throw Error(
        "ThreadPool::parallel_for: called while the pool is running (nested or concurrent)");
  }
  p.fn = &fn;
  p.n = n;
  p.grain = grain;
  p.units = units;
  p.active = active;
  p.error = nullptr;
  p.pending.store(p.n_threads - 1, std::memory_order_relaxed);
  p.epoch.fetch_add(1, std::memory_order_acq_rel);
  p.epoch.notify_all();

  p.run_chunk(0);
  for (int left = p.pending.load(std::memory_order_acquire); left != 0;) {
    left = wait_change(p.pending, left);
  }
  std::exception_ptr err = p.error;
  p.busy.store(false, std::memory_order_release);
  if (err) std::rethrow_exception(err);
}

void matmul(ThreadPool& pool, TensorType t, const void* w, int64_t rows, int64_t cols,
            const float* x, int64_t ldx, int n_tok, float* y, int64_t ldy) {
  // Rows in chunks of 16 keep every thread on whole kNR row blocks (so no thread runs the
  // slow single-row remainder path unless rows itself is not a multiple of 16).
  constexpr int64_t kGrain = 16;
  struct Args {
    TensorType t;
    const void* w;
    int64_t cols;
    const float* x;
    int64_t ldx;
    int n_tok;
    float* y;
    int64_t ldy;
  } a{t, w, cols, x, ldx, n_tok, y, ldy};
  // Capturing one pointer keeps the std::function in its small-buffer (no allocation).
  const Args* pa = &a;
  pool.parallel_for(
      rows,
      [pa](int64_t r0, int64_t r1, int) {
        matmul_rows(pa->t, pa->w, pa->cols, r0, r1, pa->x, pa->ldx, pa->n_tok, pa->y, pa->ldy);
      },
      kGrain);
}

double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes) {
  const int64_t n = static_cast<int64_t>(std::max<size_t>(bytes, 1 << 20) / sizeof(float));
  std::unique_ptr<float[]> buf(new float[n]);
  // Pages are first touched by the threads that will read them (NUMA placement).
  const int64_t grain = 1 << 14;
  pool.parallel_for(
      n, [&](int64_t b, int64_t e, int) { std::fill(buf.get() + b, buf.get() + e, 1.0f); }, grain);
  std::vector<float> partial(pool.size());
  double best = 1e30;
  float check = 0.0f;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(
        n, [&](int64_t b, int64_t e, int tid) { partial[tid] = sum(buf.get() + b, e - b); }, grain);
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    for (float v : partial) check += v;
  }
  if (!(check > 0.0f)) throw Error("measure_read_bandwidth_gbps: reduction lost data");
  return static_cast<double>(n) * sizeof(float) / best / 1e9;
}

}  // namespace lynx::kernels
