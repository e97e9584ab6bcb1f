// Working memory the row kernels reuse from call to call: rows decoded to F32, a 16-row group
// copied back to rows, the AMX kernel's prepared weight panels, a K-quant row's unpacked
// scales and levels. A decode step runs hundreds of row-kernel calls, so allocating this per
// call costs time; keeping it in thread_local buffers instead made memory that grew with the
// largest matrix ever seen and lived as long as the thread, invisible to its owner. So each
// ThreadPool worker owns one Scratch (ThreadPool::scratch): it lives and dies with the pool,
// that is with the context, and ThreadPool::release_scratch frees it. A row kernel called
// outside a pool without a Scratch makes a temporary one.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace lynx::kernels {

// One buffer per use, so that a kernel that calls another (the interleaved exact path calls the
// decoded-rows kernel) never hands out memory it still reads.
enum class ScratchSlot : uint8_t {
  kDecodedRows,  // matmul_rows_decoded: 16 rows decoded to F32
  kGroupRows,    // matmul_rows on kInterleaved16: one 16-row group back in the rows layout
  kBf16Panels,   // the BF16 kernels: AMX's weight tiles, VDPBF16PS's panels in the pair layout
  kKLevels,      // matmul_rows_k: a row's unpacked levels
  kKBlocks,      // matmul_rows_k: a row's unpacked block scales
  kCount
};

class Scratch {
 public:
  // Room for n values of T in `slot`, 64-byte aligned; the contents are whatever was there.
  // Valid until the next get() of the same slot or release().
  template <class T>
  T* get(ScratchSlot slot, size_t n) {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
    std::vector<std::byte>& b = bufs_[static_cast<size_t>(slot)];
    const size_t need = n * sizeof(T) + kAlign;
    if (b.size() < need) b.resize(need);
    const auto at = reinterpret_cast<uintptr_t>(b.data());
    return reinterpret_cast<T*>(b.data() + (kAlign - at % kAlign) % kAlign);
  }
  // Bytes held over all slots.
  size_t bytes() const {
    size_t n = 0;
    for (const auto& b : bufs_) n += b.capacity();
    return n;
  }
  void release() {
    for (auto& b : bufs_) std::vector<std::byte>().swap(b);
  }

 private:
  static constexpr size_t kAlign = 64;
  std::array<std::vector<std::byte>, static_cast<size_t>(ScratchSlot::kCount)> bufs_;
};

}  // namespace lynx::kernels
