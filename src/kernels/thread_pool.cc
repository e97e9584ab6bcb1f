// Persistent thread pool. A decode step calls parallel_for a few hundred times (every expert
// matmul), so a call must cost microseconds: workers spin briefly on an epoch counter before
// sleeping on it (C++20 atomic wait, a futex on Linux), and the caller runs chunk 0 itself.
#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/matmul_k.h"
#include "kernels/types.h"
#include "lynx/error.h"

namespace lynx::kernels {
namespace {

// Polling budget before sleeping on the futex (so an idle engine burns no CPU): 2,048 pause
// instructions, ~45 us on Zen 3 (~100 us where a pause takes ~140 cycles), bridge the gaps
// between the calls of one step. No sched_yield: under EEVDF (Linux 6.6+) a yielding thread
// hands its core to any runnable task for a whole slice, even one at nice 19, so a step's
// next call waited milliseconds whenever anything else was runnable. With a build at nice 19
// beside it, 256 pauses then 64 yields decoded at 0.65-0.9x of this (docs/benchmarks.md,
// "The thread pool's wait").
constexpr int kPauseIters = 2048;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until `a` differs from `old` and returns the new value.
template <class T>
T wait_change(const std::atomic<T>& a, T old) {
  for (int i = 0; i < kPauseIters; ++i) {
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
    cpu_relax();
  }
  T v;
  while ((v = a.load(std::memory_order_acquire)) == old) a.wait(old, std::memory_order_acquire);
  return v;
}

}  // namespace

// The claim word packs (epoch, chunk count, next chunk) so that a worker can only claim a
// chunk of the job it was woken for: a late worker's claim on a finished or newer job fails.
constexpr uint64_t pack_claim(uint32_t epoch, uint32_t n_chunks, uint32_t next) {
  return (static_cast<uint64_t>(epoch) << 32) | (static_cast<uint64_t>(n_chunks) << 16) | next;
}

struct ThreadPool::Impl {
  using Fn = std::function<void(int64_t, int64_t, int)>;

  int n_threads = 1;
  std::vector<std::thread> threads;
  std::vector<Scratch> scratch;  // one per worker

  // The current job: written by the caller before it publishes `claim` (release); read only
  // by a thread that claimed one of its chunks (acquire), which the caller waits for.
  const Fn* fn = nullptr;
  int64_t n = 0, grain = 1, units = 0;

  std::atomic<uint32_t> epoch{0};  // bumped once per job: wakes the workers
  std::atomic<uint64_t> claim{0};  // see pack_claim
  std::atomic<uint32_t> done{0};   // chunks of the current job finished
  std::atomic<bool> stop{false};
  std::atomic<bool> busy{false};
  std::mutex error_mu;
  std::exception_ptr error;

  // Claims the next chunk of job `ep`; false when none is left (or the job is not `ep`).
  bool claim_chunk(uint32_t ep, uint32_t* idx, uint32_t* n_chunks) {
    uint64_t c = claim.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t next = c & 0xFFFF, total = (c >> 16) & 0xFFFF;
      if (static_cast<uint32_t>(c >> 32) != ep || next >= total) return false;
      if (claim.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        *idx = next;
        *n_chunks = total;
        return true;
      }
    }
  }

  // Runs every chunk this thread can claim. Chunk i covers grain units
  // [U*i/C, U*(i+1)/C): balanced, contiguous, fixed by (n, grain, size()).
  void run_chunks(uint32_t ep, int tid) {
    uint32_t i, total;
    while (claim_chunk(ep, &i, &total)) {
      const int64_t u0 = units * i / total, u1 = units * (i + 1) / total;
      const int64_t b = u0 * grain, e = std::min(n, u1 * grain);
      if (b < e) {
        try {
          (*fn)(b, e, tid);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!error) error = std::current_exception();
        }
      }
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == total) done.notify_one();
    }
  }

  void worker(int tid) {
    uint32_t seen = 0;
    for (;;) {
      seen = wait_change(epoch, seen);
      if (stop.load(std::memory_order_acquire)) return;
      run_chunks(seen, tid);
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
  if (n_threads < 1 || n_threads > 1024) {
    delete impl_;
    throw Error("ThreadPool: thread count must be in [1, 1024], got " + std::to_string(n_threads));
  }
  impl_->n_threads = n_threads;
  impl_->scratch.resize(size_t(n_threads));
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

Scratch& ThreadPool::scratch(int thread_id) {
  if (thread_id < 0 || thread_id >= impl_->n_threads) {
    throw Error("ThreadPool::scratch: no worker " + std::to_string(thread_id));
  }
  return impl_->scratch[size_t(thread_id)];
}

size_t ThreadPool::scratch_bytes() const {
  size_t n = 0;
  for (const Scratch& s : impl_->scratch) n += s.bytes();
  return n;
}

void ThreadPool::release_scratch() {
  if (impl_->busy.load(std::memory_order_acquire)) {
    throw Error("ThreadPool::release_scratch: called while the pool is running");
  }
  for (Scratch& s : impl_->scratch) s.release();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain, int chunks_per_thread) {
  if (chunks_per_thread < 1 || chunks_per_thread > 64) {
    throw Error("ThreadPool::parallel_for: chunks per thread must be in [1, 64], got " +
                std::to_string(chunks_per_thread));
  }
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Impl& p = *impl_;
  const int64_t units = (n + grain - 1) / grain;
  if (p.n_threads == 1 || units == 1) {  // nothing to share: no wake-up cost
    fn(0, n, 0);
    return;
  }
  if (p.busy.exchange(true, std::memory_order_acquire)) {
    throw Error(
        "ThreadPool::parallel_for: called while the pool is running (nested or concurrent)");
  }
  const auto n_chunks =
      static_cast<uint32_t>(std::min<int64_t>({units, int64_t{p.n_threads} * chunks_per_thread,
                                               int64_t{0xFFFF}}));  // 16 bits in pack_claim
  p.fn = &fn;
  p.n = n;
  p.grain = grain;
  p.units = units;
  p.error = nullptr;
  p.done.store(0, std::memory_order_relaxed);
  const uint32_t ep = p.epoch.load(std::memory_order_relaxed) + 1;
  p.claim.store(pack_claim(ep, n_chunks, 0), std::memory_order_release);
  p.epoch.store(ep, std::memory_order_release);
  p.epoch.notify_all();

  p.run_chunks(ep, 0);
  for (uint32_t d = p.done.load(std::memory_order_acquire); d != n_chunks;) {
    d = wait_change(p.done, d);
  }
  std::exception_ptr err = p.error;
  p.busy.store(false, std::memory_order_release);
  if (err) std::rethrow_exception(err);
}

// Rows in chunks of 16 keep every thread on whole row blocks (kNR of the float path, 8 or 16
// rows of the integer path) and whole 16-row groups of kInterleaved16 weights, so no thread
// runs a partial block unless rows itself is not a multiple of 16.
constexpr int64_t kMatmulGrain = 16;

void matmul(ThreadPool& pool, TensorType t, const void* w, int64_t rows, int64_t cols,
            const float* x, int64_t ldx, int n_tok, float* y, int64_t ldy, WeightLayout layout) {
  constexpr int64_t kGrain = kMatmulGrain;
  struct Args {
    TensorType t;
    const void* w;
    int64_t cols;
    const float* x;
    int64_t ldx;
    int n_tok;
    float* y;
    int64_t ldy;
    WeightLayout layout;
    ThreadPool* pool;
  } a{t, w, cols, x, ldx, n_tok, y, ldy, layout, &pool};
  // Capturing one pointer keeps the std::function in its small-buffer (no allocation).
  const Args* pa = &a;
  pool.parallel_for(
      rows,
      [pa](int64_t r0, int64_t r1, int tid) {
        matmul_rows(pa->t, pa->w, pa->cols, r0, r1, pa->x, pa->ldx, pa->n_tok, pa->y, pa->ldy,
                    pa->layout, &pa->pool->scratch(tid));
      },
      kGrain, chunks_per_thread_for(n_tok));
}

void matmul(ThreadPool& pool, TensorType t, const void* w, int64_t rows, int64_t cols,
            const QuantizedActs& x, float* y, int64_t ldy, WeightLayout layout) {
  struct Args {
    TensorType t;
    const void* w;
    int64_t cols;
    const QuantizedActs* x;
    float* y;
    int64_t ldy;
    WeightLayout layout;
    ThreadPool* pool;
  } a{t, w, cols, &x, y, ldy, layout, &pool};
  const Args* pa = &a;  // one pointer: the std::function stays in its small buffer
  pool.parallel_for(
      rows,
      [pa](int64_t r0, int64_t r1, int tid) {
        const int n_tok = act_type_is_q8k(pa->t) ? pa->x->k.n_tok : pa->x->n_tok;
        matmul_rows_q8(pa->t, pa->w, pa->cols, r0, r1, *pa->x, 0, n_tok, pa->y, pa->ldy, pa->layout,
                       &pa->pool->scratch(tid));
      },
      kMatmulGrain, chunks_per_thread_for(act_type_is_q8k(t) ? x.k.n_tok : x.n_tok));
}

void quantize_acts(ThreadPool& pool, const float* x, int64_t ldx, int n_tok, int64_t cols,
                   QuantizedActs& out) {
  out.resize(n_tok, cols);
  // A row of a few thousand values takes about a microsecond: split only when every thread
  // gets several rows.
  const int64_t grain = std::max<int64_t>(1, 4096 * 4 / std::max<int64_t>(cols, 1));
  struct Args {
    const float* x;
    int64_t ldx;
    QuantizedActs* out;
  } a{x, ldx, &out};
  const Args* pa = &a;  // one pointer: the std::function stays in its small buffer
  pool.parallel_for(
      n_tok,
      [pa](int64_t t0, int64_t t1, int) {
        quantize_acts_rows(pa->x, pa->ldx, int(t0), int(t1), *pa->out);
      },
      grain);
}

void quantize_acts_k(ThreadPool& pool, const float* x, int64_t ldx, int n_tok, int64_t cols,
                     QuantizedActsK& out) {
  out.resize(n_tok, cols);
  // Q8_K's quantizer is scalar (a row of 2048 values takes a few microseconds).
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1));
  pool.parallel_for(
      n_tok,
      [x, ldx, &out](int64_t t0, int64_t t1, int) {
        quantize_acts_k_rows(x, ldx, int(t0), int(t1), out);
      },
      grain);
}

bool act_type_is_q8k(TensorType wtype) {
  const TypeTraits* tr = find_type_traits(wtype);
  return tr && tr->act_type == TensorType::Q8_K;
}

void quantize_acts_for(ThreadPool& pool, TensorType wtype, const float* x, int64_t ldx, int n_tok,
                       int64_t cols, QuantizedActs& out) {
  if (act_type_is_q8k(wtype)) {
    quantize_acts_k(pool, x, ldx, n_tok, cols, out.k);
  } else {
    quantize_acts(pool, x, ldx, n_tok, cols, out);
  }
}

void quantize_acts_rows_for(TensorType wtype, const float* x, int64_t ldx, int t0, int t1,
                            QuantizedActs& out) {
  if (act_type_is_q8k(wtype)) {
    quantize_acts_k_rows(x, ldx, t0, t1, out.k);
  } else {
    quantize_acts_rows(x, ldx, t0, t1, out);
  }
}

}  // namespace lynx::kernels
