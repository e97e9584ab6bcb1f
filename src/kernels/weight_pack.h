// The layouts the kernels prepare for the matrices they multiply: at load, each matrix that
// a faster layout exists for (kernels.h: kInterleaved16 for the block-quantized types whose traits
// describe an interleave, kPanel16 for F32/F16/BF16) is copied into memory owned by the caller, in
// that layout; the rest stay where they are (the file mapping, kRows). The model loader lists its
// matrices and keeps the returned allocation alive with the model; nothing else about layouts leaks
// into it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "kernels/kernels.h"

namespace lynx::kernels {

// n_mat matrices [rows x cols] of `type` back to back (mat_bytes apart, row_bytes per row),
// at `data`, in `layout`. pack_weights rewrites data and layout of the ones it moves.
struct MatrixRef {
  TensorType type = TensorType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0, n_mat = 1;
  size_t row_bytes = 0, mat_bytes = 0;
  WeightLayout layout = WeightLayout::kRows;
  // [n_mat] or nullptr: matrices with keep[i] == 0 are not copied (their part of the
  // allocation is never written, so never resident); for expert-parallel shards.
  const uint8_t* keep = nullptr;
};

struct PackOptions {
  bool interleave_int = true;  // quantized types with an interleave -> kInterleaved16
  bool panel_float = true;     // F32/F16/BF16 -> kPanel16 (float kernels)
  int threads = 0;             // 0: one per hardware thread
  // Called with each source byte range once it is copied (the loader drops those pages of
  // the file mapping, so the resident memory does not count them twice). May be empty.
  std::function<void(const uint8_t*, size_t)> release;
};

// Anonymous memory holding the packed matrices; unmapped on destruction.
class PackedWeights {
 public:
  explicit PackedWeights(size_t bytes);  // throws lynx::Error when the memory is not there
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return n_; }

 private:
  uint8_t* data_ = nullptr;
  size_t n_ = 0;
};

// The layout the kernels want for `m` under `opts` (kRows: none better, or not enabled).
WeightLayout preferred_layout(const MatrixRef& m, const PackOptions& opts);

// Copies every matrix of `mats` whose preferred layout is not kRows, in that layout, into one
// allocation (each matrix at a 64-byte boundary, in list order) and points its entry there.
// Entries with the same data are the same tensor bound twice: copied once, all pointed at the
// copy. Byte moves only, so products are bit-identical to those on the file's layout for the
// integer kernels; kPanel16 changes the float kernels' summation order (kernels.h). Returns
// the allocation (nullptr when nothing moved); *packed_bytes, if given, gets the bytes moved.
std::unique_ptr<PackedWeights> pack_weights(std::span<MatrixRef* const> mats,
                                            const PackOptions& opts,
                                            size_t* packed_bytes = nullptr);

}  // namespace lynx::kernels
