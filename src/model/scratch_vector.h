// Step scratch that grows without zero-filling: a std::vector whose resize leaves new floats
// uninitialised (every step writes the rows it reads). A fresh Context's first long prefill
// grows hundreds of MB of buffers; value-initialising them was a memset over all of it on the
// step's critical path (docs/benchmarks.md, "Kernel and loader design measurements").
//
// Buffers of kHugeBytes or more are also 2 MiB aligned and advised as transparent huge pages:
// the first touch of a fresh buffer is then one fault per 2 MiB instead of one per 4 KiB
// (about 30,000 faults in a 512-token prefill of the Qwen3-30B-A3B shape; docs/benchmarks.md,
// "Prefill against ik_llama.cpp at 512 and 2048 tokens"). Where the kernel has THP off, the
// advice is ignored and nothing else changes.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lynx {

// Buffers of kHugeBytes or more 2 MiB aligned and advised as transparent huge pages; smaller
// ones from std::allocator. Elements are value-initialised as std::allocator does.
template <class T>
struct HugePageAllocator : std::allocator<T> {
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kHugeBytes = size_t{4} << 20;

  template <class U>
  struct rebind {
    using other = HugePageAllocator<U>;
  };
  using std::allocator<T>::allocator;

  T* allocate(size_t n) {
    if (n * sizeof(T) < kHugeBytes) return std::allocator<T>::allocate(n);
    const size_t bytes = (n * sizeof(T) + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, bytes);
    if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugeBytes) {
      std::allocator<T>::deallocate(p, n);
    } else {
      std::free(p);
    }
  }
};

// HugePageAllocator whose resize leaves new elements default-initialised (floats: not
// written).
template <class T>
struct DefaultInitAllocator : HugePageAllocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using HugePageAllocator<T>::HugePageAllocator;
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using ScratchFloats = std::vector<float, DefaultInitAllocator<float>>;

}  // namespace lynx
