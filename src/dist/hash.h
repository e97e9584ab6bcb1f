// 64-bit FNV-1a: the cheap, portable digest the ranks compare (model header, placement,
// routing decisions). Not a cryptographic hash: it guards against mistakes, not attacks.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lynx::dist {

class Fnv1a {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace lynx::dist
