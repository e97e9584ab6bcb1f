// The prefix cache across requests: the KV cache of finished sequences, kept so that a later
// request whose prompt starts with the same tokens (the next turn of a chat, the same system
// prompt and tools of an agent, a retried request) evaluates only the rest of its prompt.
//
// An entry is a whole context sequence and the tokens its KV cache holds. A request takes the
// longest prefix any entry or any running sequence holds: an entry it covers entirely is
// handed over as is (no copy; it comes back, longer, when the request ends), a part of an
// entry or of a running sequence is copied into a new sequence (Context::copy_sequence), so
// the entry stays for the others. Entries are bounded by their bytes; the least recently used
// go first. Not thread-safe: the scheduler's thread drives it.
//
// Recurrent models (Gated DeltaNet: a state of the last position, no KV rows to cut back)
// reuse a sequence as a whole, or a part of it up to a length it holds a state snapshot of
// (Context::snapshot_sequence). The cache plans where a prefill keeps them (snapshot_plan):
// a few lengths just before the prompt's end, at gaps that double going back (the part of a
// prompt that later prompts share most often ends where its last turn begins, which can be
// short or long), and keeps at most kMaxSnapshots per entry. Their bytes count in the entry's;
// docs/serving.md has the sizes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "lynx/context.h"
#include "lynx/scheduler.h"

namespace lynx {

class PrefixCache {
 public:
  // A sequence a request may copy from: a running one, with the tokens its KV cache holds.
  struct Live {
    int32_t seq = -1;
    std::span<const int32_t> tokens;
  };
  // What a request starts from: `seq` holds the first `len` tokens of its prompt (-1, 0: none).
  struct Reuse {
    int32_t seq = -1;
    int32_t len = 0;
  };

  // At most this many state snapshots per entry (recurrent models).
  static constexpr size_t kMaxSnapshots = 4;

  // `snapshot_gap`: the smallest gap between the planned snapshots (tokens; recurrent models).
  PrefixCache(Context& ctx, size_t max_bytes, int32_t snapshot_gap = 128);
  ~PrefixCache();  // frees the cached sequences
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest prefix of `prompt`, at most max_len tokens (the prompt's last token is always
  // evaluated, for its logits), held by an entry or a `live` sequence. The returned sequence
  // belongs to the caller.
  Reuse acquire(std::span<const int32_t> prompt, int32_t max_len, std::span<const Live> live);
  // The length acquire would reuse now, taking nothing.
  int32_t longest(std::span<const int32_t> prompt, int32_t max_len,
                  std::span<const Live> live) const;
  // A finished request's sequence and the tokens its KV cache holds (the first
  // Context::sequence_length of them count). Kept, then entries evicted down to the bound
  // (this one too, if it alone is larger).
  void release(int32_t seq, std::vector<int32_t> tokens);
  // Frees every entry.
  void clear();
  // Recurrent models: the lengths (ascending) at which a request that reused `reused` tokens
  // keeps snapshots while it prefills a prompt of `prompt_len`; empty for other models.
  std::vector<int32_t> snapshot_plan(int32_t reused, int32_t prompt_len) const;
  // Of `shared` tokens of a prompt of `prompt_len` that a request is prefilling, how many a
  // later request could take from it once its prefill ends: all of them, or for recurrent
  // models the largest planned snapshot length at or below (or the whole prompt).
  int32_t usable_prefix(int32_t shared, int32_t prompt_len) const;

  const PrefixCacheStats& stats() const { return stats_; }

 private:
  struct Entry {
    int32_t seq;
    std::vector<int32_t> tokens;
    size_t bytes;
    uint64_t used;  // the use clock when last stored or read
  };
  void evict_to(size_t max_bytes);
  // The longest prefix of `n` tokens that sequence `seq` can give: n, or for recurrent models
  // n when it is the whole sequence, else its largest snapshot length at or below n.
  int32_t usable(int32_t seq, int32_t n) const;
  // Drops the snapshots of `seq` beyond kMaxSnapshots (see prefix_cache.cc).
  void thin_snapshots(int32_t seq);
  struct Best {
    int32_t len = 0;
    size_t entry = SIZE_MAX;  // an entry's index, or
    const Live* live = nullptr;
  };
  Best find(std::span<const int32_t> prompt, int32_t max_len, std::span<const Live> live) const;

  Context& ctx_;
  size_t max_bytes_;
  int32_t snapshot_gap_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace lynx
