// The prefix cache across requests (see prefix_cache.h).
#include "runtime/prefix_cache.h"

#include <algorithm>
#include <cstdint>

#include "lynx/batch_loop.h"
#include "lynx/error.h"

namespace lynx {
namespace {

int32_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b, int32_t limit) {
  const size_t n = std::min({a.size(), b.size(), size_t(std::max(limit, 0))});
  return int32_t(std::mismatch(a.begin(), a.begin() + long(n), b.begin()).first - a.begin());
}

}  // namespace

PrefixCache::PrefixCache(Context& ctx, size_t max_bytes, int32_t snapshot_gap)
    : ctx_(ctx), max_bytes_(max_bytes), snapshot_gap_(std::max(snapshot_gap, 1)) {}

std::vector<int32_t> PrefixCache::snapshot_plan(int32_t reused, int32_t prompt_len) const {
  std::vector<int32_t> plan;
  if (!ctx_.model().config().recurrent()) return plan;
  // The prompt's end less the shortest step the batch loop cuts (a retried or regenerated
  // prompt reuses all but those), then back by gap, 3 gaps, 7 gaps: a later prompt whose
  // shared part ends u tokens before this one's end loses at most about u tokens of reuse, up
  // to u of 7 gaps.
  const int32_t end = prompt_len - kMinPrefillPiece;
  for (int32_t back = 0, step = snapshot_gap_; plan.size() < kMaxSnapshots; back += step) {
    if (back > 0) step *= 2;
    const int32_t len = end - back;
    if (len <= reused || len <= 0) break;
    plan.push_back(len);
  }
  std::reverse(plan.begin(), plan.end());
  return plan;
}

int32_t PrefixCache::usable_prefix(int32_t shared, int32_t prompt_len) const {
  if (!ctx_.model().config().recurrent() || shared >= prompt_len) return shared;
  int32_t best = 0;
  for (int32_t len : snapshot_plan(0, prompt_len)) {
    if (len <= shared) best = len;
  }
  return best;
}

int32_t PrefixCache::usable(int32_t seq, int32_t n) const {
  if (!ctx_.model().config().recurrent() || n == ctx_.sequence_length(seq)) return n;
  int32_t best = 0;
  for (int32_t len : ctx_.sequence_snapshots(seq)) {
    if (len <= n) best = len;
  }
  return best;
}

// Keeps the shortest snapshot (the part most prompts share: a system prompt) and the longest
// (the latest turn), and between them drops the one closest to the one below it, so the kept
// ones stay spread out over the sequence.
void PrefixCache::thin_snapshots(int32_t seq) {
  for (auto lens = ctx_.sequence_snapshots(seq); lens.size() > kMaxSnapshots;
       lens = ctx_.sequence_snapshots(seq)) {
    size_t drop = 1;
    for (size_t i = 2; i + 1 < lens.size(); ++i) {
      if (lens[i] - lens[i - 1] < lens[drop] - lens[drop - 1]) drop = i;
    }
    ctx_.drop_snapshot(seq, lens[drop]);
  }
}

PrefixCache::~PrefixCache() {
  clear();
}

void PrefixCache::clear() {
  for (const Entry& e : entries_) ctx_.free_sequence(e.seq);
  entries_.clear();
  stats_.entries = 0;
  stats_.bytes = 0;
}

PrefixCache::Best PrefixCache::find(std::span<const int32_t> prompt, int32_t max_len,
                                    std::span<const Live> live) const {
  // The longest prefix; an entry wins a tie with a running sequence (no copy when it is whole).
  // A recurrent model's state is that of a sequence's whole length or of a snapshot
  // (Context::copy_sequence refuses other parts): usable() cuts the common prefix back to one.
  Best b;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int32_t held = std::min<int32_t>(int32_t(entries_[i].tokens.size()),
                                           ctx_.sequence_length(entries_[i].seq));
    const int32_t n =
        usable(entries_[i].seq, common_prefix(prompt, entries_[i].tokens, std::min(max_len, held)));
    if (n > b.len) b = {n, i, nullptr};
  }
  for (const Live& l : live) {
    const int32_t held = std::min<int32_t>(int32_t(l.tokens.size()), ctx_.sequence_length(l.seq));
    const int32_t n = usable(l.seq, common_prefix(prompt, l.tokens, std::min(max_len, held)));
    if (n > b.len) b = {n, SIZE_MAX, &l};
  }
  return b;
}

int32_t PrefixCache::longest(std::span<const int32_t> prompt, int32_t max_len,
                             std::span<const Live> live) const {
  return find(prompt, max_len, live).len;
}

PrefixCache::Reuse PrefixCache::acquire(std::span<const int32_t> prompt, int32_t max_len,
                                        std::span<const Live> live) {
  ++stats_.lookups;
  stats_.prompt_tokens += int64_t(prompt.size());
  const Best found = find(prompt, max_len, live);
  const int32_t best = found.len;
  const size_t best_entry = found.entry;
  const Live* best_live = found.live;
  if (best == 0) return {};
  Reuse r{-1, best};
  if (best_live == nullptr) {
    Entry& e = entries_[best_entry];
    e.used = ++clock_;
    if (best == ctx_.sequence_length(e.seq)) {  // the whole entry: hand it over
      r.seq = e.seq;
      stats_.bytes -= e.bytes;
      entries_.erase(entries_.begin() + long(best_entry));
      stats_.entries = entries_.size();
    } else {
      try {
        r.seq = ctx_.copy_sequence(e.seq, best);
      } catch (const Error&) {  // its sliding-window rings no longer hold the prefix
        return {};
      }
    }
  } else {
    try {
      r.seq = ctx_.copy_sequence(best_live->seq, best);
    } catch (const Error&) {
      return {};
    }
  }
  ++stats_.hits;
  stats_.reused_tokens += best;
  return r;
}

void PrefixCache::release(int32_t seq, std::vector<int32_t> tokens) {
  const int32_t len = ctx_.sequence_length(seq);
  if (int32_t(tokens.size()) > len) tokens.resize(size_t(len));
  if (len == 0 || int32_t(tokens.size()) < len) {  // nothing to reuse, or tokens unknown
    ctx_.free_sequence(seq);
    return;
  }
  // An entry this one extends holds nothing it does not: drop it.
  for (size_t i = entries_.size(); i-- > 0;) {
    const auto& old = entries_[i].tokens;
    if (old.size() <= tokens.size() && std::equal(old.begin(), old.end(), tokens.begin())) {
      ctx_.free_sequence(entries_[i].seq);
      stats_.bytes -= entries_[i].bytes;
      entries_.erase(entries_.begin() + long(i));
    }
  }
  thin_snapshots(seq);
  const size_t bytes = ctx_.sequence_cache_bytes(seq);
  entries_.push_back({seq, std::move(tokens), bytes, ++clock_});
  stats_.bytes += bytes;
  evict_to(max_bytes_);
  stats_.entries = entries_.size();
}

void PrefixCache::evict_to(size_t max_bytes) {
  while (stats_.bytes > max_bytes && !entries_.empty()) {
    const auto lru =
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& a, const Entry& b) { return a.used < b.used; });
    ctx_.free_sequence(lru->seq);
    stats_.bytes -= lru->bytes;
    entries_.erase(lru);
    ++stats_.evictions;
  }
  stats_.entries = entries_.size();
}

}  // namespace lynx
