// Helpers shared by the prefix-cache tests (prefix_cache_test.cc, recurrent_prefix_test.cc):
// feeding a prompt to a sequence in chunks, and comparing logits bit for bit.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lynx/context.h"

namespace lynx::testing_util {

// Feeds tokens [from, to) of `p` to `seq` in chunks of `chunk`; returns the last logits.
inline std::vector<float> feed(Context& ctx, int32_t seq, const std::vector<int32_t>& p, int from,
                               int to, int chunk) {
  std::vector<float> last;
  for (int b = from; b < to; b += chunk) {
    std::vector<BatchToken> batch;
    for (int i = b; i < std::min(to, b + chunk); ++i) {
      BatchToken t;
      t.token = p[size_t(i)];
      t.seq = seq;
      t.pos = i;
      t.flags = kTokenPrefill;
      t.logits = i + 1 == std::min(to, b + chunk);
      batch.push_back(t);
    }
    ctx.eval(batch);
    const auto l = ctx.logits(0);
    last.assign(l.begin(), l.end());
  }
  return last;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace lynx::testing_util
