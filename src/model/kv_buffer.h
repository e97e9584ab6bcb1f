// One layer's K or V rows of a sequence (SequenceLayer): address space reserved for the
// rows the sequence may reach, of which the kernel backs only the pages that are written.
//
// A cache that grew by allocating a larger buffer and copying its rows across stalled the
// step that crossed the capacity: at 8,192 tokens of context the first decode step took
// 54-92 ms instead of 8 (docs/benchmarks.md, "The KV cache reserved, not grown"), nearly all
// of it the kernel zeroing the fresh buffer's pages. Reserving the context's whole length up
// front (an anonymous mapping, MAP_NORESERVE) lets the head-major layout keep its head offsets
// as the sequence grows, so a row is written once and never moved; untouched pages cost
// neither memory nor time, and they read as zeros.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lynx {

class KvBuffer {
 public:
  KvBuffer() = default;
  ~KvBuffer();
  KvBuffer(const KvBuffer& o);  // a copy of the first o.size() bytes (window rings)
  KvBuffer& operator=(const KvBuffer& o);
  KvBuffer(KvBuffer&& o) noexcept;
  KvBuffer& operator=(KvBuffer&& o) noexcept;

  // Replaces the buffer with `bytes` of zeros, none of them backed yet. Throws std::bad_alloc
  // when the address space cannot be had (RLIMIT_AS, strict overcommit).
  void reserve(size_t bytes);
  // Like reserve, but false instead of throwing: the caller may retry with less.
  bool try_reserve(size_t bytes) noexcept;
  // Transparent huge pages for the pages touched from now on (advice: a kernel with THP off
  // ignores it). One call per buffer: the whole mapping keeps a single flag, so it stays one
  // VMA. Pages already touched keep their size until khugepaged collapses them.
  void advise_huge_pages() noexcept;
  bool huge_pages() const { return huge_; }
  void reset() noexcept;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  uint8_t& operator[](size_t i) { return data_[i]; }
  const uint8_t& operator[](size_t i) const { return data_[i]; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // the mapping as made (aligned for huge pages: may start before data_)
  size_t map_bytes_ = 0;
  bool huge_ = false;
};

}  // namespace lynx
