// Step scratch that grows without zero-filling: a std::vector whose resize leaves new floats
// uninitialised (every step writes the rows it reads). A fresh Context's first long prefill
// grows hundreds of MB of buffers; value-initialising them was a memset over all of it on the
// step's critical path (docs/benchmarks.md, "Kernel and loader design measurements").
#pragma once
#include <memory>
#include <utility>
#include <vector>

namespace lynx {

template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
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
