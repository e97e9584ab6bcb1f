// pack_weights (see weight_pack.h). Why a copy into owned memory rather than in place in the
// (private) file mapping, and why plain 4 KiB pages: docs/benchmarks.md, "Repacking at load".
#include "kernels/weight_pack.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kernels/thread_pool.h"
#include "lynx/error.h"

namespace lynx::kernels {

PackedWeights::PackedWeights(size_t bytes) : n_(bytes) {
  void* p = mmap(nullptr, n_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw Error("cannot allocate " + std::to_string(bytes) +
                " bytes for the repacked weights: " + std::strerror(errno));
  }
  data_ = static_cast<uint8_t*>(p);
}

PackedWeights::~PackedWeights() {
  munmap(data_, n_);
}

WeightLayout preferred_layout(const MatrixRef& m, const PackOptions& opts) {
  if (opts.interleave_int && can_interleave(m.type, m.rows, m.cols)) {
    return WeightLayout::kInterleaved16;
  }
  if (opts.panel_float && can_panel16(m.type, m.rows, m.cols)) return WeightLayout::kPanel16;
  return WeightLayout::kRows;
}

std::unique_ptr<PackedWeights> pack_weights(std::span<MatrixRef* const> mats,
                                            const PackOptions& opts, size_t* packed_bytes) {
  if (packed_bytes) *packed_bytes = 0;
  std::vector<MatrixRef*> todo, aliases;
  std::map<const uint8_t*, size_t> first;  // data -> index in todo
  for (MatrixRef* m : mats) {
    if (!m->data || m->layout != WeightLayout::kRows) continue;
    if (preferred_layout(*m, opts) == WeightLayout::kRows) continue;
    if (first.emplace(m->data, todo.size()).second) {
      todo.push_back(m);
    } else {
      aliases.push_back(m);
    }
  }
  if (todo.empty()) return nullptr;

  // Each matrix at a 64-byte boundary of one allocation, in work items of about 1 MiB (whole
  // 16-row groups of one matrix) spread over the threads.
  struct Item {
    const MatrixRef* m;
    WeightLayout layout;
    size_t dst;  // offset of the matrix set in the allocation
    int64_t mat, g0, g1;
  };
  static_assert(kInterleaveRows == kPanelRows);  // 16-row groups either way
  std::vector<Item> items;
  std::vector<size_t> offsets;
  size_t total = 0, bytes = 0;
  for (const MatrixRef* m : todo) {
    const WeightLayout layout = preferred_layout(*m, opts);
    const int64_t groups = m->rows / kPanelRows;
    const size_t group_bytes = m->row_bytes * size_t(kPanelRows);
    const int64_t step = std::max<int64_t>(1, int64_t((size_t(1) << 20) / group_bytes));
    for (int64_t i = 0; i < m->n_mat; ++i) {
      if (m->keep && !m->keep[i]) continue;
      for (int64_t g = 0; g < groups; g += step) {
        items.push_back({m, layout, total, i, g, std::min(groups, g + step)});
      }
    }
    offsets.push_back(total);
    bytes += m->mat_bytes * size_t(m->n_mat);
    total += (m->mat_bytes * size_t(m->n_mat) + 63) / 64 * 64;
  }
  auto packed = std::make_unique<PackedWeights>(total);
  uint8_t* dst = packed->data();
  ThreadPool pool(opts.threads > 0 ? opts.threads
                                   : std::max(1, int(std::thread::hardware_concurrency())));
  pool.parallel_for(int64_t(items.size()), [&](int64_t b, int64_t e, int) {
    for (int64_t k = b; k < e; ++k) {
      const Item& it = items[size_t(k)];
      const uint8_t* src = it.m->data + size_t(it.mat) * it.m->mat_bytes;
      uint8_t* out = dst + it.dst + size_t(it.mat) * it.m->mat_bytes;
      if (it.layout == WeightLayout::kInterleaved16) {
        interleave16_into(it.m->type, src, out, it.m->cols, it.g0, it.g1);
      } else {
        panel16_into(it.m->type, src, out, it.m->cols, it.g0, it.g1);
      }
      // Release the item's source now rather than after the whole copy, so that the
      // resident memory does not peak at twice the repacked bytes.
      if (opts.release) {
        const size_t group_bytes = it.m->row_bytes * size_t(kPanelRows);
        opts.release(src + size_t(it.g0) * group_bytes, size_t(it.g1 - it.g0) * group_bytes);
      }
    }
  });
  for (size_t i = 0; i < todo.size(); ++i) {
    MatrixRef& m = *todo[i];
    // The pages that straddle two items (each item released only the pages wholly inside).
    if (opts.release) opts.release(m.data, m.mat_bytes * size_t(m.n_mat));
    m.layout = preferred_layout(m, opts);
    m.data = dst + offsets[i];
  }
  for (MatrixRef* a : aliases) {
    const MatrixRef& m = *todo[first.at(a->data)];
    a->layout = m.layout;
    a->data = m.data;
  }
  if (packed_bytes) *packed_bytes = bytes;
  return packed;
}

}  // namespace lynx::kernels
