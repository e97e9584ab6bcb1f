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

  PrefixCache(Context& ctx, size_t max_bytes);
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

  const PrefixCacheStats& stats() const { return stats_; }

 private:
  struct Entry {
    int32_t seq;
    std::vector<int32_t> tokens;
    size_t bytes;
    uint64_t used;  // the use clock when last stored or read
  };
  void evict_to(size_t max_bytes);
  struct Best {
    int32_t len = 0;
    size_t entry = SIZE_MAX;  // an entry's index, or
    const Live* live = nullptr;
  };
  Best find(std::span<const int32_t> prompt, int32_t max_len, std::span<const Live> live) const;

  Context& ctx_;
  size_t max_bytes_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace lynx
