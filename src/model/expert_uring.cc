// The expert tier's io_uring backend (expert_reader.h, docs/offload.md "Reads"): one thread
// takes queued experts while it has room for their reads, submits each matrix's block-aligned
// read as one request (up to the queue depth in flight, each with a staging buffer of its
// own), and lays each matrix out into its slot as its read completes; an expert is handed back
// once its three matrices are in (or one failed), so the executor computes it while the
// others are still being read. Built only with liburing (pkg-config at configure time).
#include "model/expert_reader.h"

#if LYNX_HAVE_LIBURING
#include <fcntl.h>
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>

#include "lynx/error.h"
#endif

namespace lynx {

bool expert_uring_built() {
#if LYNX_HAVE_LIBURING
  return true;
#else
  return false;
#endif
}

#if LYNX_HAVE_LIBURING
namespace {

class UringReader final : public ExpertReader {
 public:
  UringReader(ExpertReadSource& src, ExpertFile file, const ExpertIoOptions& io)
      : src_(src), file_(file), result_(io.result), bufs_(size_t(io.queue_depth)) {
    ops_.resize(bufs_.size());
    for (size_t i = ops_.size(); i-- > 0;) free_ops_.push_back(int(i));
  }
  ~UringReader() override {
    if (thread_.joinable()) thread_.join();
    if (ring_ok_) io_uring_queue_exit(&ring_);
  }
  // Sets the ring up and starts the thread; false with *error set when io_uring cannot run.
  bool start(int fail_with, std::string* error) {
    const int e =
        fail_with > 0 ? -fail_with : io_uring_queue_init(unsigned(bufs_.size()), &ring_, 0);
    if (e < 0) {
      *error = std::string("io_uring_queue_init: ") + std::strerror(-e);
      return false;
    }
    ring_ok_ = true;
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    const bool reads = probe && io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe) io_uring_free_probe(probe);
    if (!reads) {
      *error = "the kernel's io_uring has no IORING_OP_READ";
      return false;
    }
    thread_ = std::thread([this] { run(); });
    return true;
  }
  std::string describe() const override {
    return "io_uring, queue depth " + std::to_string(bufs_.size());
  }
  ExpertIo kind() const override { return ExpertIo::kUring; }

 private:
  // One matrix read in flight (ops_[i] reads into bufs_[i]).
  struct Op {
    int job = -1, part = 0;
    ReadSpan span;
    size_t got = 0;
    uint64_t t0 = 0;
  };
  // One expert taken from the tier.
  struct Job {
    ExpertRead read;
    int left = 0;  // matrices not yet done
    std::string error;
    ExpertReadCounts counts;
  };

  void run() {
    std::vector<ExpertRead> taken;
    bool stopping = false;
    for (;;) {
      // Take experts while there is room for their reads; wait for one only when idle.
      const size_t room =
          free_ops_.size() > pending_.size() ? free_ops_.size() - pending_.size() : 0;
      if (!stopping && room > 0) {
        taken.clear();
        const bool idle = in_flight_ == 0 && pending_.empty();
        if (!src_.take((room + 2) / 3, idle, taken)) {
          stopping = true;
        }
        for (const ExpertRead& r : taken) add_job(r);
      }
      if (stopping) {
        pending_.clear();  // the tier is going: nothing new, only the reads in flight end
        if (in_flight_ == 0) return;
      }
      while (!pending_.empty() && !free_ops_.empty()) {
        const int o = free_ops_.back();
        free_ops_.pop_back();
        const auto [job, part] = pending_.front();
        pending_.pop_front();
        const ExpertRead::Part& p = jobs_[size_t(job)].read.parts[size_t(part)];
        Op& op = ops_[size_t(o)];
        op = Op{job, part, read_span(p.off, p.m->mat_bytes, file_.direct), 0, src_.now()};
        bufs_[size_t(o)].get(op.span.length());
        submit(o);
      }
      if (in_flight_ == 0) continue;
      io_uring_submit(&ring_);
      io_uring_cqe* cqe = nullptr;
      const int w = io_uring_wait_cqe(&ring_, &cqe);
      if (w < 0) {
        if (w == -EINTR || w == -EAGAIN) continue;
        fail_all(std::string("io_uring_wait_cqe: ") + std::strerror(-w));
        continue;
      }
      do {
        const int o = int(io_uring_cqe_get_data64(cqe));
        const int res = cqe->res;
        io_uring_cqe_seen(&ring_, cqe);
        --in_flight_;
        complete(o, res);
      } while (io_uring_peek_cqe(&ring_, &cqe) == 0);
    }
  }

  void add_job(const ExpertRead& r) {
    int j = 0;
    if (!free_jobs_.empty()) {
      j = free_jobs_.back();
      free_jobs_.pop_back();
    } else {
      j = int(jobs_.size());
      jobs_.emplace_back();
    }
    jobs_[size_t(j)] = Job{r, int(r.parts.size()), {}, {}};
    for (int p = 0; p < int(r.parts.size()); ++p) pending_.push_back({j, p});
  }

  // Queues op o's read of what it still lacks (submitted with the others of the round).
  void submit(int o) {
    Op& op = ops_[size_t(o)];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {  // the submission queue is full: hand it to the kernel, then there is room
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    io_uring_prep_read(sqe, file_.fd, bufs_[size_t(o)].get(op.span.length()) + op.got,
                       unsigned(op.span.length() - op.got), op.span.a0 + op.got);
    io_uring_sqe_set_data64(sqe, uint64_t(o));
    ++in_flight_;
  }

  void complete(int o, int res) {
    Op& op = ops_[size_t(o)];
    int64_t r = res;
    if (result_) r = result_(op.span.a0 + op.got, op.span.length() - op.got, r);
    if (r == -EINTR || r == -EAGAIN) {
      submit(o);
      return;
    }
    Job& j = jobs_[size_t(op.job)];
    if (r < 0) {
      done(o, std::strerror(int(-r)));
      return;
    }
    op.got += size_t(r);
    if (op.got < op.span.needed()) {
      if (r > 0) {
        submit(o);  // a short read: the rest
      } else {
        done(o, truncated_error(op.span.a0 + op.got, op.span.end));
      }
      return;
    }
    const uint64_t t1 = src_.now();
    j.counts.bytes += op.span.length();
    j.counts.read_ns += t1 - op.t0;
    if (j.error.empty()) {
      // Buffered reads (no O_DIRECT): drop the pages, as the threads backend does.
      if (!file_.direct) {
        ::posix_fadvise(file_.fd, off_t(op.span.a0), off_t(op.span.length()), POSIX_FADV_DONTNEED);
      }
      const ExpertRead::Part& p = j.read.parts[size_t(op.part)];
      lay_out(*p.m, bufs_[size_t(o)].get(op.span.length()) + (p.off - op.span.a0), p.dst);
      j.counts.repack_ns += src_.now() - t1;
    }
    done(o, {});
  }

  // Op o is over (error: why it failed); the expert goes back once all its matrices are.
  void done(int o, const std::string& error) {
    const int jid = ops_[size_t(o)].job;
    free_ops_.push_back(o);
    Job& j = jobs_[size_t(jid)];
    if (j.error.empty() && !error.empty()) j.error = error;
    if (--j.left > 0) return;
    src_.finish(j.read, j.error, j.counts);
    free_jobs_.push_back(jid);
  }

  // The ring itself failed: every read in flight fails with `error`, and is not waited for
  // again (the ring is not trusted with them any more).
  void fail_all(const std::string& error) {
    for (size_t o = 0; o < ops_.size(); ++o) {
      if (std::find(free_ops_.begin(), free_ops_.end(), int(o)) != free_ops_.end()) continue;
      --in_flight_;
      done(int(o), error);
    }
  }

  ExpertReadSource& src_;
  ExpertFile file_;
  TierResultFn result_;
  io_uring ring_{};
  bool ring_ok_ = false;
  std::vector<AlignedBuffer> bufs_;
  std::vector<Op> ops_;
  std::vector<int> free_ops_;
  std::vector<Job> jobs_;
  std::vector<int> free_jobs_;
  std::deque<std::pair<int, int>> pending_;  // (job, part) not yet submitted
  int in_flight_ = 0;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<ExpertReader> make_uring_reader(ExpertReadSource& src, ExpertFile file,
                                                const ExpertIoOptions& io, std::string* error) {
  if (io.queue_depth < 1 || io.queue_depth > 4096) {
    throw Error("expert tier: io_uring queue depth " + std::to_string(io.queue_depth) +
                " is not in [1, 4096]");
  }
  auto r = std::make_unique<UringReader>(src, file, io);
  if (!r->start(io.uring_init_error, error)) return nullptr;
  return r;
}

#else

std::unique_ptr<ExpertReader> make_uring_reader(ExpertReadSource&, ExpertFile,
                                                const ExpertIoOptions&, std::string* error) {
  *error = "this build has no liburing: liburing-dev was not installed when it was configured";
  return nullptr;
}

#endif

}  // namespace lynx
