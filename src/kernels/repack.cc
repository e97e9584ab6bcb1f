// Repacking block-type matrices (the types with an interleaved layout in the type table) between
// the file's row layout and the 16-row interleaved layout the integer kernels read with
// whole-vector loads, and F32/F16/BF16 matrices into the 16-row panels of the float kernels
// (kernels.h describes the layouts). Byte moves only: the values themselves are never changed.
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/types.h"
#include "lynx/error.h"

namespace lynx::kernels {
namespace {

constexpr int64_t kG = kInterleaveRows;

// The interleaved geometry of a type's block (types.h, InterleaveSpec).
struct Geometry {
  int64_t elems, bytes;         // block elements and bytes
  int64_t fields, field_bytes;  // scalar fields
  int64_t field_at;             // byte offset of the first field in the block
  int64_t words_at, planes;     // byte offset and count of the 4-byte words in the block
};

Geometry geometry(TensorType t) {
  const TypeTraits& tr = type_traits(t);
  const InterleaveSpec& sp = tr.interleave;
  Geometry g{tr.block_elems, tr.block_bytes, sp.fields, sp.field_bytes, 0, 0, 0};
  const int64_t scalars = g.fields * g.field_bytes;
  g.field_at = sp.at_end ? g.bytes - scalars : 0;
  g.words_at = sp.at_end ? 0 : scalars;
  g.planes = (g.bytes - scalars) / 4;
  return g;
}

bool has_layout(TensorType t) {
  const TypeTraits* tr = find_type_traits(t);
  return tr && tr->interleave.fields > 0;
}

int64_t block_bytes(TensorType t) {
  return type_traits(t).block_bytes;
}

void check(TensorType t, int64_t cols, const char* what) {
  if (!has_layout(t) || cols <= 0 || cols % type_traits(t).block_elems != 0) {
    throw Error(std::string(what) + ": cannot interleave a " + gguf::tensor_type_name(t) +
                " matrix of " + std::to_string(cols) +
                " columns (a type with an integer kernel, columns a positive multiple of the "
                "block)");
  }
}

// The one place that spells out the layout: row i (0..15) of the interleaved group at `grp`
// is copied out to / in from the plain row at `row` (nb blocks). Per block: the fields (16
// values each, row 0 first), then the planes (64 bytes, lane i = 4 bytes of row i).
template <bool kOut, class G, class R>
void move_row(const Geometry& geo, int64_t nb, G* grp, int64_t i, R* row) {
  const int64_t bb = geo.bytes, fb = geo.field_bytes;
  const int64_t planes_at = kG * geo.fields * fb;
  for (int64_t b = 0; b < nb; ++b) {
    G* in = grp + b * kG * bb;
    R* blk = row + b * bb;
    auto mv = [&](int64_t grp_off, int64_t row_off, size_t n) {
      if constexpr (kOut) {
        std::memcpy(blk + row_off, in + grp_off, n);
      } else {
        std::memcpy(in + grp_off, blk + row_off, n);
      }
    };
    for (int64_t f = 0; f < geo.fields; ++f) {
      mv(kG * fb * f + fb * i, geo.field_at + fb * f, size_t(fb));
    }
    for (int64_t p = 0; p < geo.planes; ++p) {
      mv(planes_at + 64 * p + 4 * i, geo.words_at + 4 * p, 4);
    }
  }
}

// The 16 rows at src (kRows, row i at src + i * row bytes) into one interleaved group at dst.
void interleave_group(TensorType t, const uint8_t* src, int64_t nb, uint8_t* dst) {
  const Geometry geo = geometry(t);
  for (int64_t i = 0; i < kG; ++i) move_row<false>(geo, nb, dst, i, src + i * nb * geo.bytes);
}

// The inverse of interleave_group.
void deinterleave_group_to(TensorType t, const uint8_t* src, int64_t nb, uint8_t* dst) {
  const Geometry geo = geometry(t);
  for (int64_t i = 0; i < kG; ++i) move_row<true>(geo, nb, src, i, dst + i * nb * geo.bytes);
}

// Rewrites groups [g0, g1) in place with `move` (one of the two above), through a copy of
// one group: a group's bytes before and after occupy the same range, so no group spills into
// another and the caller can split the groups over threads.
template <class Move>
void repack_in_place(TensorType t, void* w, int64_t cols, int64_t g0, int64_t g1, Move move) {
  const int64_t nb = cols / block_elems(t), group_bytes = kG * nb * block_bytes(t);
  std::vector<uint8_t> scratch(static_cast<size_t>(group_bytes));
  auto* base = static_cast<uint8_t*>(w);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* grp = base + g * group_bytes;
    std::memcpy(scratch.data(), grp, scratch.size());
    move(t, scratch.data(), nb, grp);
  }
}

}  // namespace

bool can_interleave(TensorType t, int64_t rows, int64_t cols) {
  return has_layout(t) && rows > 0 && rows % kG == 0 && cols > 0 &&
         cols % type_traits(t).block_elems == 0;
}

void interleave16(TensorType t, void* w, int64_t cols, int64_t g0, int64_t g1) {
  check(t, cols, "interleave16");
  repack_in_place(t, w, cols, g0, g1, interleave_group);
}

void deinterleave16(TensorType t, void* w, int64_t cols, int64_t g0, int64_t g1) {
  check(t, cols, "deinterleave16");
  repack_in_place(t, w, cols, g0, g1, deinterleave_group_to);
}

void interleave16_into(TensorType t, const void* src, void* dst, int64_t cols, int64_t g0,
                       int64_t g1) {
  check(t, cols, "interleave16_into");
  const int64_t nb = cols / block_elems(t), group_bytes = kG * nb * block_bytes(t);
  for (int64_t g = g0; g < g1; ++g) {
    interleave_group(t, static_cast<const uint8_t*>(src) + g * group_bytes, nb,
                     static_cast<uint8_t*>(dst) + g * group_bytes);
  }
}

void deinterleave_group(TensorType t, const void* w, int64_t cols, int64_t g, void* dst) {
  check(t, cols, "deinterleave_group");
  const int64_t nb = cols / block_elems(t);
  deinterleave_group_to(t, static_cast<const uint8_t*>(w) + g * kG * nb * block_bytes(t), nb,
                        static_cast<uint8_t*>(dst));
}

bool can_panel16(TensorType t, int64_t rows, int64_t cols) {
  const TypeTraits* tr = type_row(t);
  return tr && takes_panels(*tr) && rows > 0 && rows % kPanelRows == 0 && cols > 0;
}

namespace {

// The 16 rows at `rows` into the kPanel16 group at grp (E: the element's bits): the one place
// that spells out the panel layout (read_row and ref::matmul_rows index it on their own).
// Writes sequentially, reading 16 row streams.
template <class E>
void panel_group(int64_t cols, const uint8_t* rows, uint8_t* grp) {
  // Byte copies of E: the matrices need not be aligned to E (memcpy of a fixed small size
  // compiles to plain moves).
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t i = 0; i < kPanelRows; ++i) {
      std::memcpy(grp + (c * kPanelRows + i) * int64_t(sizeof(E)),
                  rows + (i * cols + c) * int64_t(sizeof(E)), sizeof(E));
    }
  }
}

int64_t panel_elem_bytes(TensorType t, int64_t cols, const char* what) {
  if (!can_panel16(t, kPanelRows, cols)) {
    throw Error(std::string(what) + ": cannot store a " + gguf::tensor_type_name(t) +
                " matrix of " + std::to_string(cols) +
                " columns in 16-row panels (F32, F16 or BF16, columns positive)");
  }
  return type_traits(t).block_bytes;  // one element per block
}

}  // namespace

void panel16_into(TensorType t, const void* src, void* dst, int64_t cols, int64_t g0, int64_t g1) {
  const int64_t es = panel_elem_bytes(t, cols, "panel16_into");
  const int64_t group_bytes = kPanelRows * cols * es;
  for (int64_t g = g0; g < g1; ++g) {
    const auto* in = static_cast<const uint8_t*>(src) + g * group_bytes;
    auto* out = static_cast<uint8_t*>(dst) + g * group_bytes;
    if (es == 4) {
      panel_group<uint32_t>(cols, in, out);
    } else {
      panel_group<uint16_t>(cols, in, out);
    }
  }
}

void read_row(TensorType t, WeightLayout layout, const void* w, int64_t cols, int64_t r,
              void* dst) {
  const size_t rb = weight_row_bytes(t, cols);  // validates t and cols
  const auto* src = static_cast<const uint8_t*>(w);
  if (layout == WeightLayout::kRows) {
    std::memcpy(dst, src + static_cast<size_t>(r) * rb, rb);
    return;
  }
  if (layout == WeightLayout::kPanel16) {
    const int64_t es = panel_elem_bytes(t, cols, "read_row"), i = r % kPanelRows;
    const uint8_t* grp = src + (r - i) * cols * es;
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(static_cast<uint8_t*>(dst) + c * es, grp + (c * kPanelRows + i) * es, size_t(es));
    }
    return;
  }
  check(t, cols, "read_row");
  const Geometry geo = geometry(t);
  const int64_t nb = cols / geo.elems, i = r % kG;
  move_row<true>(geo, nb, src + (r - i) * nb * geo.bytes, i, static_cast<uint8_t*>(dst));
}

}  // namespace lynx::kernels
