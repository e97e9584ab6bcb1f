// The exact float path for the weight types matmul.cc has no SIMD decoder for (types.h).
#include <algorithm>

#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "kernels/types.h"

namespace lynx::kernels {

void matmul_rows_decoded(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                         const float* x, int64_t ldx, int n_tok, float* y, int64_t ldy,
                         Scratch* scratch) {
  const TypeTraits& tr = type_traits(t);
  const size_t rb = weight_row_bytes(t, cols);
  // 16 decoded rows: the F32 kernel's row blocks (2 or 4 rows) divide it, and 16 x cols floats
  // stay in L2 for every shape the engine runs (64 KiB at 1024 columns).
  constexpr int64_t kRowsPerChunk = 16;
  Scratch own;
  float* buf = (scratch ? *scratch : own)
                   .get<float>(ScratchSlot::kDecodedRows, size_t(kRowsPerChunk * cols));
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t r = r0; r < r1; r += kRowsPerChunk) {
    const int64_t n = std::min(kRowsPerChunk, r1 - r);
    for (int64_t i = 0; i < n; ++i) {
      tr.decode(wb + size_t(r + i) * rb, &buf[size_t(i * cols)], cols / tr.block_elems);
    }
    matmul_rows(TensorType::F32, buf, cols, 0, n, x, ldx, n_tok, y + r, ldy);
  }
}

}  // namespace lynx::kernels
