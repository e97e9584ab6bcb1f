// A planned GGUF tensor and how its bytes are made from the checkpoint's (convert.cc plans,
// fill writes): row decoding (F32/F16/BF16, FP8 with its scales, MXFP4), the permutations,
// splits and de-interleavings of the family's transforms, and the target type's encoding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "convert/family.h"
#include "convert/safetensors.h"
#include "lynx/gguf.h"

namespace lynx::convert {

// One GGUF tensor: its sources (one, or one per expert, stacked) and how rows map.
struct Planned {
  std::string name;
  std::vector<StTensor> parts;   // views: a fused expert tensor is cut into one per expert
  std::vector<StTensor> scales;  // MXFP4 sources: each part's E8M0 scales ([rows, cols / 32])
  Transform transform = Transform::kNone;
  int64_t heads = 0;           // permutation groups (kPermuteQ / kPermuteK), MLA heads
  int64_t nope = 0, vdim = 0;  // MLA split: per-head key (no-rope) and value rows of kv_b
  int64_t rows = 1, cols = 1;  // of each part; a vector is one row
  int64_t step = 1, off = 0;   // de-interleaving: output row (kFused*) or column (k*Cols) i
                               // comes from source row / column i * step + off
  std::vector<int64_t> ne;     // GGUF order
  gguf::TensorType type = gguf::TensorType::F32;
  const TensorRule* rule = nullptr;  // the family's rule that wrote it
  std::vector<int64_t> row_src;      // output row r <- source row row_src[r] (empty: r)
  std::vector<int64_t> col_src;      // output column i <- source column col_src[i] (empty: i)
  Transform op = Transform::kNone;   // kPlusOne or kNegExp on every value
  bool mxfp4_src() const { return !scales.empty(); }
};

// Row `row` of a [*, cols] checkpoint tensor as F32 (FP8 times its scale), into out.
float* row_to_f32(const StTensor& t, int64_t row, int64_t cols, float* out);

// The expert-fusing transforms: kHalf* (one tensor holding gate and up halves per expert) and,
// with them, kFused* (gpt-oss's per-expert transposed or MXFP4 tensors).
bool half(Transform t);
bool fused(Transform t);

// Fills the bytes of one planned tensor (rows of every part, in order), `n_threads` at a time.
// Each part's source pages are released once its rows are written, so what stays resident is
// the output tensor and the part in hand (for experts: one expert's matrix).
void fill(const Planned& p, uint8_t* dst, int n_threads);

}  // namespace lynx::convert
