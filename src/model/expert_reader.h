// The expert tier's read backends (docs/offload.md "Reads"). The tier (expert_tier.h) keeps
// the slots, the queue of experts to read and what a read's end means for them; a backend
// takes queued reads, reads each expert's three matrices from the file into aligned staging
// buffers (O_DIRECT where the file system allows it, else buffered reads whose pages are
// dropped after) and lays them out into the slot, then hands the read back. Two backends,
// each in one place: threads (expert_reader.cc: a pool of threads, one pread at a time each)
// and io_uring (expert_uring.cc: one thread keeping up to a queue depth of reads in flight).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/weight_pack.h"
#include "lynx/model.h"

namespace lynx {

// Where one expert matrix of a layer is in the file and how its slot copy is laid out.
struct TierMatrix {
  gguf::TensorType type = gguf::TensorType::F32;
  uint64_t offset = 0;  // file offset of expert 0's matrix
  size_t mat_bytes = 0;
  // File bytes from one expert's matrix to the next: mat_bytes, or twice that for the gate
  // and up halves of a fused ffn_gate_up_exps (each expert's gate rows, then its up rows).
  uint64_t stride = 0;
  int64_t rows = 0, cols = 0;
  kernels::WeightLayout layout = kernels::WeightLayout::kRows;
};

// Reads n bytes at file offset `off` into dst; throws lynx::Error on failure (a short read
// included). Replaces the file reads (tests); threads backend only.
using TierReadFn = std::function<void(uint64_t off, size_t n, uint8_t* dst)>;
// A read of n bytes at `off` returned `res` (bytes, or -errno): the result to go on with
// (LoadOptions::expert_read_result).
using TierResultFn = std::function<int64_t(uint64_t off, size_t n, int64_t res)>;

struct ExpertIoOptions {
  ExpertIo backend = ExpertIo::kThreads;
  int readers = 4;           // threads: reader threads
  int queue_depth = 16;      // io_uring: matrix reads in flight, each with its staging buffer
  TierReadFn read;           // replaces the file reads (threads only; io_uring then falls back)
  TierResultFn result;       // sees every read's result
  int uring_init_error = 0;  // > 0: io_uring's set-up fails with -this (tests)
};

// One expert to read into a slot: its three matrices (gate, up, down).
struct ExpertRead {
  int slot = -1;
  struct Part {
    const TierMatrix* m = nullptr;
    uint64_t off = 0;        // the matrix's file offset
    uint8_t* dst = nullptr;  // where its layout goes in the slot
  };
  std::array<Part, 3> parts;
};
struct ExpertReadCounts {
  uint64_t bytes = 0;      // read from the file (whole aligned blocks)
  uint64_t read_ns = 0;    // each matrix read's time from its start to its data, summed
  uint64_t repack_ns = 0;  // laying the matrices out
};

// What a backend gets from the tier (ExpertTier implements it).
class ExpertReadSource {
 public:
  // Appends up to `max` queued reads to out; when `wait`, first waits until one is queued.
  // Returns false once the tier is stopping (nothing appended).
  virtual bool take(size_t max, bool wait, std::vector<ExpertRead>& out) = 0;
  // The read is over: `error` empty when the slot holds the expert's layout.
  virtual void finish(const ExpertRead& r, const std::string& error,
                      const ExpertReadCounts& counts) = 0;
  virtual uint64_t now() const = 0;

 protected:
  ~ExpertReadSource() = default;
};

// A running backend; destroying it (after the source has begun stopping) ends its threads.
class ExpertReader {
 public:
  virtual ~ExpertReader() = default;
  // "4 reader threads", "io_uring, queue depth 16", ...
  virtual std::string describe() const = 0;
  virtual ExpertIo kind() const = 0;
};

// The file the tier reads; `direct`: opened with O_DIRECT.
struct ExpertFile {
  int fd = -1;
  bool direct = false;
};

// Starts io.backend. io_uring falls back to threads, with a line on stderr that says why
// (also in *note), when its set-up fails (ENOSYS under a seccomp filter, ...), the build has
// no liburing, or io.read replaces the file reads.
std::unique_ptr<ExpertReader> make_expert_reader(ExpertReadSource& src, ExpertFile file,
                                                 const ExpertIoOptions& io, std::string* note);

// ---- Shared by the backends ----

constexpr size_t kDirectAlign = 4096;  // O_DIRECT: offsets, lengths and buffers in blocks

// The file range a read of n bytes at `off` covers: [a0, a1), block aligned when `direct`;
// a read is complete once it has reached `end` (off + n; the tail block may be cut by EOF).
struct ReadSpan {
  uint64_t a0 = 0, a1 = 0, end = 0;
  size_t length() const { return size_t(a1 - a0); }
  size_t needed() const { return size_t(end - a0); }
};
ReadSpan read_span(uint64_t off, size_t n, bool direct);
// The error of a read that stopped at file byte `at` before `end`.
std::string truncated_error(uint64_t at, uint64_t end);
// Lays a matrix read from the file (src) out into its slot (dst) in m's layout.
void lay_out(const TierMatrix& m, const uint8_t* src, uint8_t* dst);

// A buffer aligned for O_DIRECT, grown on demand.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  ~AlignedBuffer();
  uint8_t* get(size_t bytes);

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

// Whether this build has the io_uring backend (liburing found at configure time).
bool expert_uring_built();
// The io_uring backend (expert_uring.cc): nullptr with *error set when io_uring cannot be
// set up here.
std::unique_ptr<ExpertReader> make_uring_reader(ExpertReadSource& src, ExpertFile file,
                                                const ExpertIoOptions& io, std::string* error);

}  // namespace lynx
