#include "model/kv_buffer.h"

#include <sys/mman.h>

#include <cstring>
#include <new>
#include <utility>

namespace lynx {
namespace {

constexpr size_t kSmallPage = size_t{4} << 10;
constexpr size_t kHugePage = size_t{2} << 20;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

KvBuffer::~KvBuffer() {
  reset();
}

KvBuffer::KvBuffer(const KvBuffer& o) {
  *this = o;
}

KvBuffer& KvBuffer::operator=(const KvBuffer& o) {
  if (this == &o) return *this;
  reserve(o.size_);
  if (o.huge_) advise_huge_pages();
  if (o.size_ > 0) std::memcpy(data_, o.data_, o.size_);
  return *this;
}

KvBuffer::KvBuffer(KvBuffer&& o) noexcept {
  *this = std::move(o);
}

KvBuffer& KvBuffer::operator=(KvBuffer&& o) noexcept {
  if (this == &o) return *this;
  reset();
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  std::swap(map_, o.map_);
  std::swap(map_bytes_, o.map_bytes_);
  std::swap(huge_, o.huge_);
  return *this;
}

void KvBuffer::reset() noexcept {
  if (map_ != nullptr) munmap(map_, map_bytes_);
  data_ = nullptr;
  size_ = 0;
  map_ = nullptr;
  map_bytes_ = 0;
  huge_ = false;
}

bool KvBuffer::try_reserve(size_t bytes) noexcept {
  reset();
  if (bytes == 0) return true;
  // Buffers that may take huge pages start on a 2 MiB boundary, so that every 2 MiB of them
  // can be one page: map 2 MiB more and start data_ at the first boundary inside. The slack
  // is never touched, so it is never backed.
  const size_t want = round_up(bytes, kSmallPage);
  const size_t slack = want >= 2 * kHugePage ? kHugePage : 0;
  void* p = mmap(nullptr, want + slack, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  map_ = p;
  map_bytes_ = want + slack;
  data_ = static_cast<uint8_t*>(p);
  if (slack > 0) {
    data_ = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(p), kHugePage));
  }
  size_ = bytes;
  return true;
}

void KvBuffer::reserve(size_t bytes) {
  if (!try_reserve(bytes)) throw std::bad_alloc();
}

void KvBuffer::advise_huge_pages() noexcept {
  if (huge_ || map_ == nullptr) return;
  huge_ = true;
#if defined(MADV_HUGEPAGE)
  madvise(map_, map_bytes_, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
#endif
}

}  // namespace lynx
