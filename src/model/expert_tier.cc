// ExpertTier (see expert_tier.h). Why direct reads and why the least recently used slot:
// docs/offload.md.
#include "model/expert_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "lynx/error.h"
#include "model/memory_budget.h"

namespace lynx {
namespace {

size_t align64(size_t n) {
  return (n + 63) / 64 * 64;
}

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

size_t ExpertTier::slot_bytes_for(std::span<const TierLayer> layers) {
  size_t most = 0;
  for (const TierLayer& l : layers) {
    if (l.layer < 0) continue;
    most = std::max(
        most, align64(l.gate.mat_bytes) + align64(l.up.mat_bytes) + align64(l.down.mat_bytes));
  }
  return most;
}

ExpertTier::ExpertTier(const std::string& path, std::vector<TierLayer> layers, int n_expert,
                       int n_slots, ExpertIoOptions io, MissCostOptions cost, TierClock clock)
    : layers_(std::move(layers)),
      n_expert_(n_expert),
      n_slots_(n_slots),
      cost_(cost),
      time_(std::move(clock)) {
  if (n_slots < 1) throw Error("expert tier: at least one slot is needed");
  if (n_expert < 1) throw Error("expert tier: the model has no routed experts");
  for (const TierLayer& l : layers_) {
    if (l.layer < 0) continue;
    for (const TierMatrix* m : {&l.gate, &l.up, &l.down}) {
      if (m->stride < m->mat_bytes) {
        throw Error("expert tier: layer " + std::to_string(l.layer) +
                    ": an expert's stride in the file is smaller than its matrix");
      }
    }
  }
  slot_bytes_ = slot_bytes_for(layers_);
  up_off_.assign(layers_.size(), 0);
  down_off_.assign(layers_.size(), 0);
  for (size_t il = 0; il < layers_.size(); ++il) {
    up_off_[il] = align64(layers_[il].gate.mat_bytes);
    down_off_[il] = up_off_[il] + align64(layers_[il].up.mat_bytes);
  }
  pool_ = std::make_unique<kernels::PackedWeights>(size_t(n_slots) * slot_bytes_);
  if (!io.read) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    direct_ = fd_ >= 0;
    if (fd_ < 0) fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // tmpfs: no O_DIRECT
    if (fd_ < 0) throw Error(path + ": cannot open for expert reads: " + std::strerror(errno));
  }
  slots_.resize(size_t(n_slots));
  where_.assign(layers_.size() * size_t(n_expert), -1);
  use_.assign(where_.size(), Use{});
  // Uses halve every 8 steps: long enough to tell a hot expert from one a single batch
  // wanted, short enough to follow the requests as they change (docs/offload.md).
  int routed = 0;
  for (const TierLayer& l : layers_) routed += l.layer >= 0;
  half_life_ = 8.0 * std::max(1, routed);
  stats_.slots = n_slots;
  stats_.slot_bytes = slot_bytes_;
  // The rate resident experts are read at: the pool's own, probed before any reader runs (a
  // quiet memory bus; the kernels' per-step rate would count their compute too). Over its
  // first ram_probe_bytes(), which the slots would write anyway: RAM's rate for a pool larger
  // than the caches, the caches' for one that fits them, as its experts are then read.
  if (cost_.fixed <= 0 && cost_.ram_bytes_per_s <= 0) {
    const size_t n = std::min(size_t(n_slots) * slot_bytes_, ram_probe_bytes());
    std::memset(pool_->data(), 0, n);
    cost_.ram_bytes_per_s = measure_read_rate(pool_->data(), n);
  }
  reader_ = make_expert_reader(*this, ExpertFile{fd_, direct_}, io, &io_note_);
}

ExpertTier::~ExpertTier() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  reader_.reset();
  if (fd_ >= 0) ::close(fd_);
}

uint64_t ExpertTier::now() const {
  return time_ ? time_() : now_ns();
}

// ---- The miss cost ----

bool ExpertTier::cost_measured_locked() const {
  return cost_.fixed <= 0 && cost_.ram_bytes_per_s > 0 && timed_reads_ >= cost_.min_reads &&
         rate_ns_ > 0 && rate_bytes_ > 0;
}

float ExpertTier::miss_cost_locked() const {
  if (cost_.fixed > 0) return cost_.fixed;
  if (!cost_measured_locked()) return cost_.initial;
  const double disk = rate_bytes_ / (rate_ns_ * 1e-9);
  return float(std::clamp(cost_.ram_bytes_per_s / disk, 1.0, double(cost_.max_cost)));
}

float ExpertTier::miss_cost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return miss_cost_locked();
}

// ---- Eviction: the least used experts' slots ----

double ExpertTier::uses(const Use& u) const {
  return u.count * std::exp2(-double(clock_ - u.at) / half_life_);
}

// Slots for the missing experts `want` of layer il: free[i] gets want[i]'s slot, or -1 when
// it has to wait for a later claim. The slots fall in two groups: kept experts, which stay
// until an expert used more comes, and transient ones, which hold whatever a step needs
// beyond them and go first (at least kMinTransient of them, so that a step's misses are read
// several at a time). A missing expert used more than the least used kept one replaces it;
// the others go to empty slots (then kept), transient ones, or kept slots turned transient
// while there are fewer than kMinTransient. Without that, a step whose experts outnumber the
// slots would evict every expert the next layers will want (a least-recently-used pool hits
// nothing when the experts of one step do not fit).
void ExpertTier::place(int il, const std::vector<int32_t>& want, std::vector<int>& free) {
  free.assign(want.size(), -1);
  if (want.empty()) return;
  std::vector<std::pair<double, int>> empty, transient, kept;  // (uses, slot)
  for (int s = 0; s < n_slots_; ++s) {
    const Slot& x = slots_[size_t(s)];
    // A slot still being read stays out even when its claimer gave up (a failed step
    // releases its claims while other reads of the step may be in flight).
    if (x.pins > 0 || x.state == Slot::kReading || x.fixed) continue;
    if (x.layer < 0) {
      empty.push_back({0.0, s});
      continue;
    }
    const double u = uses(use_[size_t(x.layer) * size_t(n_expert_) + size_t(x.expert)]);
    (x.transient ? transient : kept).push_back({u, s});
  }
  std::sort(kept.begin(), kept.end());
  std::vector<size_t> order(want.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto use_of = [&](size_t i) {
    return use_[size_t(il) * size_t(n_expert_) + size_t(want[i])].count;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return use_of(a) > use_of(b); });
  auto assign = [&](size_t i, int s, bool transient_slot) {
    free[i] = s;
    Slot& x = slots_[size_t(s)];
    n_transient_ += int(transient_slot) - int(x.transient && x.layer >= 0);
    x.transient = transient_slot;
  };
  // Empty slots first; then the most used missing experts replace kept ones used less even
  // without this claim's use (a margin of one use: else every step's experts would displace
  // the kept ones the step did not want, and the pool would churn as a least-recently-used
  // one does); the others go to transient slots, or kept slots turned transient up to the
  // minimum.
  size_t o = 0, k = 0, ie = 0, it = 0;
  for (; o < order.size() && ie < empty.size(); ++o) assign(order[o], empty[ie++].second, false);
  for (; o < order.size() && k < kept.size() && use_of(order[o]) - 1 > kept[k].first; ++o, ++k) {
    assign(order[o], kept[k].second, false);
  }
  const int min_transient = std::clamp(kMinTransient, 1, std::max(1, (n_slots_ - n_fixed_) / 2));
  for (; o < order.size(); ++o) {
    if (it < transient.size()) {
      assign(order[o], transient[it++].second, true);
    } else if (k < kept.size() && n_transient_ < min_transient) {
      assign(order[o], kept[k++].second, true);
    } else {
      break;
    }
  }
  // Progress: a claim that got nothing takes the least used kept slot.
  if (o == 0 && k < kept.size()) assign(order[0], kept[k].second, true);
}

// ---- Claims ----

void ExpertTier::claim(int il, std::vector<int32_t>& want, std::vector<Claim>& out) {
  if (il < 0 || size_t(il) >= layers_.size() || layers_[size_t(il)].layer < 0) {
    throw Error("expert tier: layer " + std::to_string(il) + " has no routed experts");
  }
  std::unique_lock<std::mutex> lk(mu_);
  ++clock_;
  for (const int32_t e : want) {
    if (e < 0 || e >= n_expert_) throw Error("expert tier: expert id out of range");
    Use& u = use_[size_t(il) * size_t(n_expert_) + size_t(e)];
    u.count = uses(u) + 1;
    u.at = clock_;
  }
  std::vector<int> free;
  for (;;) {
    const size_t before = out.size();
    // Resident (or being read by another step): pinned where they are.
    size_t kept = 0;
    for (const int32_t e : want) {
      const int s = where_[size_t(il) * size_t(n_expert_) + size_t(e)];
      if (s < 0) {
        want[kept++] = e;
        continue;
      }
      Slot& x = slots_[size_t(s)];
      ++x.pins;
      if (x.prefetched) {
        x.prefetched = false;
        ++stats_.prefetch_hits;
      }
      if (x.state == Slot::kFailed) {  // a read that failed before: read it again
        queue_read(s);
        out.push_back({e, s, false});
        ++stats_.misses;
        continue;
      }
      // A read a reader has already begun may have begun before a failure cleared: if it
      // fails, it is tried once more for this claim.
      if (x.state == Slot::kReading && !x.queued) x.rejoined = true;
      out.push_back({e, s, x.state == Slot::kReady});
      ++stats_.hits;
    }
    want.resize(kept);
    // The rest into slots (place()), read by the reader threads.
    place(il, want, free);
    for (size_t i = 0; i < free.size(); ++i) {
      if (free[i] < 0) continue;
      const int32_t e = want[i];
      const int s = free[i];
      Slot& x = slots_[size_t(s)];
      if (x.layer >= 0) {
        where_[size_t(x.layer) * size_t(n_expert_) + size_t(x.expert)] = -1;
        if (x.state == Slot::kReady) ++stats_.evictions;
      }
      x.layer = il;
      x.expert = e;
      x.pins = 1;
      x.prefetched = false;
      where_[size_t(il) * size_t(n_expert_) + size_t(e)] = s;
      queue_read(s);
      out.push_back({e, s, false});
      ++stats_.misses;
    }
    kept = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (free[i] < 0) want[kept++] = want[i];
    }
    want.resize(kept);
    if (out.size() > before) {
      lk.unlock();
      work_cv_.notify_all();
      return;
    }
    if (want.empty()) return;
    cv_.wait(lk);  // every slot pinned by other steps: wait for one to be released
  }
}

void ExpertTier::wait(const Claim& c) {
  if (c.ready) return;
  std::unique_lock<std::mutex> lk(mu_);
  const Slot& x = slots_[size_t(c.slot)];
  if (x.state == Slot::kReading) {
    const uint64_t t0 = now();
    cv_.wait(lk, [&] { return x.state != Slot::kReading; });
    stats_.wait_ns += now() - t0;
  }
  if (x.state == Slot::kFailed) {
    throw Error("expert tier: reading expert " + std::to_string(c.expert) + " of layer " +
                std::to_string(x.layer) + ": " + x.error);
  }
}

bool ExpertTier::ready(const Claim& c) {
  if (c.ready) return true;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (slots_[size_t(c.slot)].state == Slot::kReading) return false;
  }
  wait(c);  // done: throws when the read failed
  return true;
}

int ExpertTier::prefetch(int il, std::span<const int32_t> experts, int max_reads) {
  if (il < 0 || size_t(il) >= layers_.size() || layers_[size_t(il)].layer < 0) return 0;
  int queued = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Empty slots first, then transient ones by their experts' uses, least first.
    std::vector<std::pair<double, int>> spare;
    for (int s = 0; s < n_slots_; ++s) {
      const Slot& x = slots_[size_t(s)];
      if (x.pins > 0 || x.state == Slot::kReading || x.fixed) continue;
      if (x.layer < 0) {
        spare.push_back({-1.0, s});
      } else if (x.transient) {
        spare.push_back({uses(use_[size_t(x.layer) * size_t(n_expert_) + size_t(x.expert)]), s});
      }
    }
    std::sort(spare.begin(), spare.end());
    size_t next = 0;
    for (const int32_t e : experts) {
      if (queued >= max_reads || next >= spare.size()) break;
      if (e < 0 || e >= n_expert_) continue;
      if (!held_.empty() && !held_[size_t(il) * size_t(n_expert_) + size_t(e)]) continue;
      int32_t& w = where_[size_t(il) * size_t(n_expert_) + size_t(e)];
      if (w >= 0) continue;
      const int s = spare[next++].second;
      Slot& x = slots_[size_t(s)];
      if (x.layer >= 0) {
        where_[size_t(x.layer) * size_t(n_expert_) + size_t(x.expert)] = -1;
        if (x.state == Slot::kReady) ++stats_.evictions;
      }
      n_transient_ += 1 - int(x.transient && x.layer >= 0);
      x.transient = true;
      x.layer = il;
      x.expert = e;
      x.prefetched = true;
      w = s;
      queue_read(s);
      ++stats_.prefetches;
      ++queued;
    }
  }
  if (queued > 0) work_cv_.notify_all();
  return queued;
}

void ExpertTier::pin(std::span<const std::vector<int32_t>> experts) {
  std::vector<int> read;
  {
    std::unique_lock<std::mutex> lk(mu_);
    const uint64_t bytes0 = stats_.bytes_read, read0 = stats_.read_ns, repack0 = stats_.repack_ns;
    for (size_t il = 0; il < experts.size() && il < layers_.size(); ++il) {
      if (experts[il].empty()) continue;
      if (layers_[il].layer < 0) {
        throw Error("expert tier: layer " + std::to_string(il) + " has no routed experts to pin");
      }
      for (const int32_t e : experts[il]) {
        if (e < 0 || e >= n_expert_) throw Error("expert tier: pinned expert id out of range");
        if (!held_.empty() && !held_[il * size_t(n_expert_) + size_t(e)]) continue;
        if (where_[il * size_t(n_expert_) + size_t(e)] >= 0) continue;
        int s = 0;
        while (s < n_slots_ && slots_[size_t(s)].layer >= 0) ++s;
        // One slot at least stays for the steps' other experts.
        if (s >= n_slots_ || n_fixed_ + 1 >= n_slots_) {
          throw Error("expert tier: " + std::to_string(n_fixed_ + 1) +
                      " pinned experts leave no slot of " + std::to_string(n_slots_) +
                      " for the others");
        }
        Slot& x = slots_[size_t(s)];
        x.layer = int(il);
        x.expert = e;
        x.fixed = true;
        x.pins = 1;  // until read: a failed read then stays kFailed, for the error below
        ++n_fixed_;
        where_[il * size_t(n_expert_) + size_t(e)] = s;
        queue_read(s);
        read.push_back(s);
      }
    }
    work_cv_.notify_all();
    cv_.wait(lk, [&] {
      return std::all_of(read.begin(), read.end(),
                         [&](int s) { return slots_[size_t(s)].state != Slot::kReading; });
    });
    stats_.pinned = n_fixed_;
    stats_.pin_bytes += stats_.bytes_read - bytes0;
    stats_.bytes_read = bytes0;
    stats_.read_ns = read0;
    stats_.repack_ns = repack0;
    for (const int s : read) {
      Slot& x = slots_[size_t(s)];
      x.pins = 0;
      if (x.state == Slot::kFailed) {
        throw Error("expert tier: reading pinned expert " + std::to_string(x.expert) +
                    " of layer " + std::to_string(x.layer) + ": " + x.error);
      }
    }
  }
}

void ExpertTier::release(std::span<const Claim> claims) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const Claim& c : claims) {
      Slot& x = slots_[size_t(c.slot)];
      if (x.pins <= 0 || --x.pins > 0) continue;
      // A failed read leaves nothing; a read nobody waits for any more (the step failed
      // before it was taken) is not made: either way the slot is empty.
      if (x.state == Slot::kFailed) {
        empty_slot(x);
      } else if (x.state == Slot::kReading && x.queued) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), c.slot));
        empty_slot(x);
      }
    }
  }
  cv_.notify_all();
}

void ExpertTier::empty_slot(Slot& x) {
  if (x.layer >= 0) where_[size_t(x.layer) * size_t(n_expert_) + size_t(x.expert)] = -1;
  x.layer = x.expert = -1;
  x.state = Slot::kEmpty;
  x.error.clear();
  x.queued = x.rejoined = x.prefetched = false;
  n_transient_ -= int(x.transient);
  x.transient = false;
}

void ExpertTier::queue_read(int s) {
  Slot& x = slots_[size_t(s)];
  x.state = Slot::kReading;
  x.error.clear();
  x.queued = true;
  x.rejoined = false;
  queue_.push_back(s);
}

void ExpertTier::resident(int il, std::vector<uint8_t>& out) const {
  out.assign(size_t(n_expert_), 0);
  std::lock_guard<std::mutex> lk(mu_);
  for (int e = 0; e < n_expert_; ++e) {
    out[size_t(e)] = where_[size_t(il) * size_t(n_expert_) + size_t(e)] >= 0 ? 1 : 0;
  }
}

ExpertTierStats ExpertTier::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  ExpertTierStats s = stats_;
  s.resident = 0;
  for (const Slot& x : slots_) s.resident += x.state == Slot::kReady;
  s.miss_cost = miss_cost_locked();
  s.miss_cost_measured = cost_measured_locked();
  s.read_bytes_per_s = rate_ns_ > 0 ? rate_bytes_ / (rate_ns_ * 1e-9) : 0;
  s.ram_bytes_per_s = cost_.fixed > 0 ? 0 : cost_.ram_bytes_per_s;
  return s;
}

// ---- Reads ----

bool ExpertTier::take(size_t max, bool wait, std::vector<ExpertRead>& out) {
  std::unique_lock<std::mutex> lk(mu_);
  if (wait) work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
  if (stop_) return false;
  for (; max > 0 && !queue_.empty(); --max) {
    const int s = queue_.front();
    queue_.pop_front();
    Slot& x = slots_[size_t(s)];
    x.queued = false;
    x.rejoined = false;
    const size_t il = size_t(x.layer);
    const TierLayer& l = layers_[il];
    uint8_t* dst = pool_->data() + size_t(s) * slot_bytes_;
    ExpertRead r;
    r.slot = s;
    r.parts[0] = {&l.gate, l.gate.offset + uint64_t(x.expert) * l.gate.stride, dst};
    r.parts[1] = {&l.up, l.up.offset + uint64_t(x.expert) * l.up.stride, dst + up_off_[il]};
    r.parts[2] = {&l.down, l.down.offset + uint64_t(x.expert) * l.down.stride, dst + down_off_[il]};
    out.push_back(r);
  }
  return true;
}

void ExpertTier::finish(const ExpertRead& r, const std::string& error,
                        const ExpertReadCounts& counts) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    Slot& x = slots_[size_t(r.slot)];
    if (error.empty()) {
      x.state = Slot::kReady;
    } else if (x.rejoined) {
      queue_read(r.slot);  // a claim came while this read ran: it gets a read of its own
    } else if (x.pins == 0) {
      empty_slot(x);  // the step that wanted it has failed and gone
    } else {
      x.state = Slot::kFailed;
      x.error = error;
    }
    stats_.bytes_read += counts.bytes;
    stats_.read_ns += counts.read_ns;
    stats_.repack_ns += counts.repack_ns;
    stats_.read_errors += !error.empty();
    if (error.empty() && counts.bytes > 0) {
      rate_bytes_ = rate_bytes_ * kReadDecay + double(counts.bytes);
      rate_ns_ = rate_ns_ * kReadDecay + double(std::max<uint64_t>(counts.read_ns, 1));
      ++timed_reads_;
    }
  }
  cv_.notify_all();
  // A read queued again (rejoined) needs a backend to take it.
  if (!error.empty()) work_cv_.notify_all();
}

}  // namespace lynx
