// The expert tier (docs/offload.md): for a model file larger than the memory the process may
// use, the routed experts stay in the file and a fixed pool of slots holds the ones in use,
// each slot one expert's gate, up and down matrices in the layout the kernels read (the same
// bytes the resident loader would have packed, so products are bit-identical). A step claims
// the slots of the experts its plan needs: resident ones are pinned (hits), the others take
// the unpinned slots whose experts are used least (a use count per expert, resident or not,
// halved every few steps) and are read with direct I/O by a read backend (expert_reader.h:
// reader threads or io_uring) (misses), while the step computes what is already there.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/weight_pack.h"
#include "lynx/model.h"
#include "model/expert_reader.h"

namespace lynx {

struct TierLayer {
  int layer = -1;  // -1: a layer without routed experts
  TierMatrix gate, up, down;
};

// Nanoseconds of a monotonic clock; empty: std::chrono::steady_clock. The tier times its reads
// and waits with it (tests pass a clock their reader advances, so the rates are exact).
using TierClock = std::function<uint64_t()>;

// What the routing is told a miss costs (RoutingInput::cost, in units of a resident expert):
// a fixed figure, or the rate a resident expert is read at from RAM over the rate the
// readers read experts from the file, measured as the tier runs (docs/offload.md).
struct MissCostOptions {
  float fixed = 0.f;     // > 0: this cost, nothing measured (--expert-miss-cost)
  float initial = 20.f;  // until min_reads reads were timed
  int min_reads = 8;
  // Bytes per second a resident expert is read at; 0: measured once, when the tier is made,
  // over its slot pool (measure_read_rate).
  double ram_bytes_per_s = 0;
  // The measured cost stays within [1, max_cost]: a page-cached file reads near RAM speed,
  // a stalled disk must not make every miss unthinkable.
  float max_cost = 1000.f;
};

struct ExpertTierStats {
  uint64_t hits = 0, misses = 0;  // expert claims found resident / read from the file
  uint64_t bytes_read = 0;        // bytes read from the file (whole aligned blocks)
  uint64_t read_ns = 0;           // reader threads' time in reads, summed over threads
  uint64_t repack_ns = 0;         // reader threads' time laying slots out, summed
  uint64_t wait_ns = 0;           // steps' time waiting for reads
  uint64_t evictions = 0;         // resident experts replaced
  uint64_t read_errors = 0;
  uint64_t prefetches = 0;     // reads started by prefetch() (their bytes are in bytes_read)
  uint64_t prefetch_hits = 0;  // prefetched experts a claim found (read or being read)
  // Experts pinned at load (pin()): their slots are never evicted. Their reads are counted
  // here, not in bytes_read / read_ns / repack_ns, which count the steps' reads only.
  int pinned = 0;
  uint64_t pin_bytes = 0;
  int slots = 0;
  size_t slot_bytes = 0;
  int resident = 0;                 // slots holding an expert now
  float miss_cost = 0;              // what the routing sees now (ExpertTier::miss_cost)
  bool miss_cost_measured = false;  // from the rates below (else fixed, or not enough reads)
  double read_bytes_per_s = 0;      // one reader's rate, decayed average over reads (0: none yet)
  double ram_bytes_per_s = 0;       // what the cost divides by it (0: fixed cost, not measured)
};

class ExpertTier : private ExpertReadSource {
 public:
  // `layers` [n_layer] (routed layers with layer >= 0), n_expert experts each, `n_slots`
  // slots (at least 1), read from `path` by the backend `io` names (io.read set: through it,
  // and `path` is not opened).
  ExpertTier(const std::string& path, std::vector<TierLayer> layers, int n_expert, int n_slots,
             ExpertIoOptions io, MissCostOptions cost = {}, TierClock clock = {});
  ~ExpertTier();
  ExpertTier(const ExpertTier&) = delete;
  ExpertTier& operator=(const ExpertTier&) = delete;

  // Bytes of one slot for these layers (the largest expert, each matrix 64-byte aligned).
  static size_t slot_bytes_for(std::span<const TierLayer> layers);

  struct Claim {
    int32_t expert = 0;
    int slot = 0;
    bool ready = false;  // resident when claimed (else being read)
  };
  // Claims slots for experts of `want` (layer il): every one already resident is pinned, the
  // others take unpinned slots (least used experts first) and are queued for reading, as many
  // as there are slots to take; the claims are appended to `out` and the claimed experts
  // removed from `want`. Blocks while no slot at all can be claimed (others' steps hold every
  // slot), so each call claims at least one expert of a non-empty `want`.
  void claim(int il, std::vector<int32_t>& want, std::vector<Claim>& out);
  // Waits until the claim's read is done; throws lynx::Error naming the layer, the expert and
  // the read's error when it failed (the claim is then released).
  void wait(const Claim& c);
  // Whether the claim's read is done, without waiting (throws as wait does when it failed).
  bool ready(const Claim& c);
  // Starts reading experts of layer il that are not in a slot, most wanted first, at most
  // `max_reads` of them, into slots no step needs now: empty ones, then transient ones whose
  // experts are used least; never a kept expert, a pinned slot or one being read. Nothing is
  // pinned: a claim that comes for the expert finds it read or being read (a hit), and an
  // expert no claim wants is the first to go. Returns how many reads were queued.
  int prefetch(int il, std::span<const int32_t> experts, int max_reads);
  // Reads experts[il] of each layer il into empty slots that are never evicted afterwards
  // (LoadOptions::expert_pin_uses: the experts a routing trace uses most), and waits for the
  // reads. Called once, before any step; at least one slot stays unpinned. Throws lynx::Error
  // when a read fails or more experts are asked than that leaves room for.
  void pin(std::span<const std::vector<int32_t>> experts);
  // Unpins the claims (their experts stay resident until evicted).
  void release(std::span<const Claim> claims);
  // The slot's matrices (valid while the claim is held).
  const uint8_t* gate(int slot) const { return slot_ptr(slot); }
  const uint8_t* up(int slot, int il) const { return slot_ptr(slot) + up_off_[size_t(il)]; }
  const uint8_t* down(int slot, int il) const { return slot_ptr(slot) + down_off_[size_t(il)]; }

  const TierLayer& layer(int il) const { return layers_[size_t(il)]; }
  int n_slots() const { return n_slots_; }
  size_t slot_bytes() const { return slot_bytes_; }
  ExpertTierStats stats() const;
  // out[e] = 1 when expert e of layer il is in a slot (read or being read), else 0.
  void resident(int il, std::vector<uint8_t>& out) const;
  // How many experts per token the executor predicts for the next layer and prefetches
  // (LoadOptions::expert_prefetch; 0: none).
  void set_prefetch(int per_token) { prefetch_ = per_token; }
  int prefetch_per_token() const { return prefetch_; }
  // [layer * n_expert + expert] 1 = this process computes the expert (expert parallelism: its
  // shard); prefetch() reads no other. Empty (the default): every expert.
  void set_held(std::vector<uint8_t> held) { held_ = std::move(held); }
  // RoutingInput::cost of an expert not in a slot: MissCostOptions::fixed when set; else the
  // RAM read rate over the readers' (a decayed average over the reads made), clamped to
  // [1, max_cost], and MissCostOptions::initial until min_reads reads were timed.
  float miss_cost() const;
  // The read backend running ("4 reader threads", "io_uring, queue depth 16") and, when
  // io_uring was asked for and could not run, the line that said why (else empty).
  std::string io_describe() const { return reader_->describe(); }
  ExpertIo io_kind() const { return reader_->kind(); }
  const std::string& io_fallback() const { return io_note_; }

 private:
  struct Slot {
    int layer = -1, expert = -1;  // what it holds (or is being read into); -1: empty
    int pins = 0;
    enum State : uint8_t { kEmpty, kReading, kReady, kFailed } state = kEmpty;
    std::string error;
    bool transient = false;   // holds an expert beyond the kept ones (place())
    bool queued = false;      // in queue_, no reader has taken it yet
    bool rejoined = false;    // pinned by a claim while a reader had it: retry a failed read
    bool prefetched = false;  // read by prefetch(), no claim has found it yet
    bool fixed = false;       // pinned at load (pin()): never evicted
  };
  // Empties a slot holding nothing usable (a failed or cancelled read). Under mu_.
  void empty_slot(Slot& x);
  // Queues slot s for reading (its layer and expert set). Under mu_.
  void queue_read(int s);
  // Uses of an expert, decayed: `count` as of claim number `at`, halving every half_life_
  // claims.
  struct Use {
    double count = 0;
    uint64_t at = 0;
  };
  double uses(const Use& u) const;
  float miss_cost_locked() const;
  bool cost_measured_locked() const;
  const uint8_t* slot_ptr(int slot) const { return pool_->data() + size_t(slot) * slot_bytes_; }
  // ExpertReadSource: the backend takes queued slots and hands their reads back.
  bool take(size_t max, bool wait, std::vector<ExpertRead>& out) override;
  void finish(const ExpertRead& r, const std::string& error,
              const ExpertReadCounts& counts) override;
  uint64_t now() const override;
  void place(int il, const std::vector<int32_t>& want, std::vector<int>& free);
  static constexpr int kMinTransient = 16;
  static constexpr double kReadDecay = 1.0 - 1.0 / 32;

  std::vector<TierLayer> layers_;
  std::vector<size_t> up_off_, down_off_;  // per layer, within a slot
  int n_expert_ = 0;
  int n_slots_ = 0;
  MissCostOptions cost_;
  TierClock time_;
  int prefetch_ = 0;
  std::vector<uint8_t> held_;
  size_t slot_bytes_ = 0;
  std::unique_ptr<kernels::PackedWeights> pool_;
  int fd_ = -1;
  bool direct_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // slot state changes (reads done, pins released)
  std::condition_variable work_cv_;
  std::vector<Slot> slots_;
  std::vector<int32_t> where_;  // [layer * n_expert + expert] -> slot, -1: not resident
  std::deque<int> queue_;       // slots to read
  std::vector<Use> use_;        // [layer * n_expert + expert]
  double half_life_ = 1;        // in claims (one per routed layer and step)
  int n_transient_ = 0;         // slots holding an expert with transient set
  int n_fixed_ = 0;             // slots pinned at load (pin())
  uint64_t clock_ = 0;
  // The readers' rate: bytes and nanoseconds of the reads made, each sum decayed by
  // kReadDecay per read, so the rate follows the disk as it changes.
  double rate_bytes_ = 0, rate_ns_ = 0;
  int timed_reads_ = 0;
  ExpertTierStats stats_;
  bool stop_ = false;
  std::string io_note_;
  // Last: its threads start once everything above is set up, and end first (~ExpertTier).
  std::unique_ptr<ExpertReader> reader_;
};

}  // namespace lynx
