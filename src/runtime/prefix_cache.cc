// The prefix cache across requests (see prefix_cache.h).
#include "runtime/prefix_cache.h"

#include <algorithm>
#include <cstdint>

#include "lynx/error.h"

namespace lynx {
namespace {

int32_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b, int32_t limit) {
  const size_t n = std::min({a.size(), b.size(), size_t(std::max(limit, 0))});
  return int32_t(std::mismatch(a.begin(), a.begin() + long(n), b.begin()).first - a.begin());
}

}  // namespace

PrefixCache::PrefixCache(Context& ctx, size_t max_bytes) : ctx_(ctx), max_bytes_(max_bytes) {}

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
  // A recurrent model's state is that of a sequence's whole length (Context::copy_sequence
  // refuses a part), so there only a sequence the prompt extends as a whole counts.
  const bool whole_only = ctx_.model().config().recurrent();
  auto usable = [&](int32_t n, int32_t seq) {
    return !whole_only || n == ctx_.sequence_length(seq);
  };
  Best b;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int32_t held = std::min<int32_t>(int32_t(entries_[i].tokens.size()),
                                           ctx_.sequence_length(entries_[i].seq));
    const int32_t n = common_prefix(prompt, entries_[i].tokens, std::min(max_len, held));
    if (n > b.len && usable(n, entries_[i].seq)) b = {n, i, nullptr};
  }
  for (const Live& l : live) {
    const int32_t held = std::min<int32_t>(int32_t(l.tokens.size()), ctx_.sequence_length(l.seq));
    const int32_t n = common_prefix(prompt, l.tokens, std::min(max_len, held));
    if (n > b.len && usable(n, l.seq)) b = {n, SIZE_MAX, &l};
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
