// The shared parts of the expert tier's read backends, the thread-pool backend and the choice
// between backends (expert_reader.h).
#include "model/expert_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "lynx/error.h"

namespace lynx {

ReadSpan read_span(uint64_t off, size_t n, bool direct) {
  ReadSpan s;
  s.end = off + n;
  s.a0 = direct ? off / kDirectAlign * kDirectAlign : off;
  s.a1 = direct ? (s.end + kDirectAlign - 1) / kDirectAlign * kDirectAlign : s.end;
  return s;
}

std::string truncated_error(uint64_t at, uint64_t end) {
  return "the file ends at byte " + std::to_string(at) + ", before the expert's " +
         std::to_string(end) + " (truncated or replaced?)";
}

void lay_out(const TierMatrix& m, const uint8_t* src, uint8_t* dst) {
  switch (m.layout) {
    case kernels::WeightLayout::kInterleaved16:
      kernels::interleave16_into(m.type, src, dst, m.cols, 0, m.rows / kernels::kInterleaveRows);
      break;
    case kernels::WeightLayout::kPanel16:
      kernels::panel16_into(m.type, src, dst, m.cols, 0, m.rows / kernels::kPanelRows);
      break;
    default:
      std::memcpy(dst, src, m.mat_bytes);
  }
}

AlignedBuffer::~AlignedBuffer() {
  std::free(p_);
}

uint8_t* AlignedBuffer::get(size_t bytes) {
  if (bytes > n_) {
    std::free(p_);
    n_ = 0;
    p_ = static_cast<uint8_t*>(
        std::aligned_alloc(kDirectAlign, (bytes + kDirectAlign - 1) / kDirectAlign * kDirectAlign));
    if (!p_) throw Error("expert tier: cannot allocate a read buffer of " + std::to_string(bytes));
    n_ = bytes;
  }
  return p_;
}

namespace {

// Reads [off, off + n) of fd into buf, looping over short reads and EINTR until `needed`
// bytes are in (an O_DIRECT read of the block that holds the end of the file stops there, and
// a read from its unaligned end would fail). Returns the bytes read, or -errno.
int64_t pread_all(int fd, uint8_t* buf, size_t n, size_t needed, uint64_t off) {
  size_t got = 0;
  while (got < needed) {
    const ssize_t r = ::pread(fd, buf + got, n - got, off_t(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -int64_t(errno);
    }
    if (r == 0) break;
    got += size_t(r);
  }
  return int64_t(got);
}

// `readers` threads, each taking one expert at a time and reading its matrices one after
// the other with pread.
class ThreadReader final : public ExpertReader {
 public:
  ThreadReader(ExpertReadSource& src, ExpertFile file, const ExpertIoOptions& io)
      : src_(src), file_(file), read_(io.read), result_(io.result) {
    for (int i = 0; i < std::max(1, io.readers); ++i) threads_.emplace_back([this] { run(); });
  }
  ~ThreadReader() override {
    for (std::thread& t : threads_) t.join();
  }
  std::string describe() const override {
    return std::to_string(threads_.size()) + " reader threads";
  }
  ExpertIo kind() const override { return ExpertIo::kThreads; }

 private:
  void run() {
    AlignedBuffer staging;
    std::vector<ExpertRead> job;
    for (;;) {
      job.clear();
      if (!src_.take(1, true, job)) return;
      std::string error;
      ExpertReadCounts counts;
      try {
        for (const ExpertRead::Part& p : job[0].parts) read_part(p, staging, counts);
      } catch (const std::exception& ex) {
        error = ex.what();
      }
      src_.finish(job[0], error, counts);
    }
  }

  void read_part(const ExpertRead::Part& p, AlignedBuffer& staging, ExpertReadCounts& c) {
    const size_t n = p.m->mat_bytes;
    const uint64_t t0 = src_.now();
    const uint8_t* src = nullptr;
    if (read_) {
      uint8_t* buf = staging.get(n);
      read_(p.off, n, buf);
      src = buf;
      c.bytes += n;
    } else {
      const ReadSpan s = read_span(p.off, n, file_.direct);
      uint8_t* buf = staging.get(s.length());
      int64_t got = pread_all(file_.fd, buf, s.length(), s.needed(), s.a0);
      if (result_) got = result_(s.a0, s.length(), got);
      if (got < 0) throw Error(std::strerror(int(-got)));
      if (size_t(got) < s.needed()) throw Error(truncated_error(s.a0 + uint64_t(got), s.end));
      // Buffered reads (no O_DIRECT here): drop the pages, so the page cache does not hold
      // the experts a second time against the memory budget.
      if (!file_.direct)
        ::posix_fadvise(file_.fd, off_t(s.a0), off_t(s.length()), POSIX_FADV_DONTNEED);
      src = buf + (p.off - s.a0);
      c.bytes += s.length();
    }
    const uint64_t t1 = src_.now();
    c.read_ns += t1 - t0;
    lay_out(*p.m, src, p.dst);
    c.repack_ns += src_.now() - t1;
  }

  ExpertReadSource& src_;
  ExpertFile file_;
  TierReadFn read_;
  TierResultFn result_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<ExpertReader> make_expert_reader(ExpertReadSource& src, ExpertFile file,
                                                 const ExpertIoOptions& io, std::string* note) {
  if (io.backend == ExpertIo::kUring) {
    std::string why;
    if (io.read) {
      why = "the file reads are replaced (LoadOptions::expert_read)";
    } else if (auto r = make_uring_reader(src, file, io, &why)) {
      return r;
    }
    const std::string line = "expert tier: io_uring unavailable (" + why + "); reading with " +
                             std::to_string(std::max(1, io.readers)) + " threads instead";
    std::fprintf(stderr, "%s\n", line.c_str());
    if (note) *note = line;
  }
  return std::make_unique<ThreadReader>(src, file, io);
}

}  // namespace lynx
