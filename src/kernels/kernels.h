// Compute kernels over plain arrays (no graph, no model knowledge).
//
// Weights stay in their file type (any type of the type table, kernels/types.h, with the ggml
// block layouts); activations are F32. F32/F16/BF16/Q8_0/Q4_0 have SIMD decoders; every
// other type is decoded row by row to F32 first on the exact path. The types with an integer
// kernel (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 on Q8_0 activation blocks; Q2_K-Q6_K and
// IQ4_XS on Q8_K blocks: has_int_path below) multiply quantized activations instead unless a
// context asks for exact activations. Every SIMD kernel (Highway, runtime dispatch to the best
// instruction set of the machine) has a scalar twin in namespace `ref`, and tests compare the two
// over odd and aligned sizes.
//
// Block layouts (ggml/src/ggml-common.h):
//   Q8_0: 32 elements = fp16 scale d, 32 x int8 q            (34 bytes); value = q * d
//   Q4_0: 32 elements = fp16 scale d, 16 bytes of nibbles   (18 bytes); byte j holds element j
//         in its low nibble and element j + 16 in its high nibble; value = (nibble - 8) * d
// A matrix is row-major in the file (WeightLayout::kRows). Matrices whose rows the engine
// only multiplies may be repacked at load: those of a type with an integer kernel into
// WeightLayout::kInterleaved16 (below), which the integer kernels read with whole-vector loads,
// F32/F16/BF16 ones into WeightLayout::kPanel16 (kernels/weight_pack.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lynx/gguf.h"

namespace lynx::kernels {

using gguf::TensorType;
class ThreadPool;
class Scratch;  // scratch.h

// True for the weight types the engine computes with: the rows of the type table
// (kernels/types.h: F32, F16, BF16, the legacy 32-element types, the K-quants, IQ4_NL,
// IQ4_XS, MXFP4).
bool is_compute_type(TensorType t);
// Their names, "f32, f16, ...", for error messages.
std::string compute_type_names();
// Elements per block of a compute type (1 for F32/F16/BF16, 32 or 256 for block types).
int64_t block_elems(TensorType t);
// Bytes of a row of `n` elements of a compute type; equals gguf::row_size for those types.
// Throws lynx::Error for a non-compute type or an `n` that is not a multiple of the block.
size_t weight_row_bytes(TensorType t, int64_t n);

// ---- Weight layouts ----
//
// kRows: the file's layout, row r at r * row_size(t, cols), its blocks in column order.
//
// kInterleaved16 (every type with an integer kernel, rows a multiple of 16; Q8_0 / Q4_0 are
// described first, the others after them): rows are grouped 16 at a time and
// group g starts where its first row starts in kRows (g * 16 * row_bytes), so the matrix
// keeps its size and expert matrices their offsets. Inside a group, per 32-column block b (in
// column order) come 16 * block bytes: the 16 rows' fp16 scales (32 bytes, row 0 first), then
// the quants as planes of 64 bytes where plane p holds in its 4-byte lane i the 4 quant bytes
// 4p..4p+3 of row i's block:
//   Q4_0: 4 planes (the 16 nibble bytes, packed as in kRows), 32 + 256 = 288 = 16 * 18 bytes
//   Q8_0: 8 planes (the 32 int8 quants),                      32 + 512 = 544 = 16 * 34 bytes
// The other types with an integer kernel on this layout (the K-quants, IQ4_XS; can_interleave)
// follow
// the same rule with their own block (kernels/types.h, TypeTraits::interleave): per block, the
// 16 rows' scalar fields (fp16 scales; each field as 16 values, row 0 first) and then the rest
// of the block as planes of 64 bytes, plane p holding in lane i the 4 bytes 4p..4p+3 of row
// i's remaining bytes. Q4_K: d, dmin (64 bytes), then 35 planes (3 of packed 6-bit scales
// and mins, 32 of nibbles); Q5_K the same with 8 planes of high bits before the nibbles (43);
// Q6_K: d (32 bytes), then 52 planes (32 of ql, 16 of qh, 4 of int8
// scales); IQ4_XS: d and the scales' high bits (64 bytes), then 33 planes (1 of low scale
// nibbles, 32 of nibbles); Q2_K: d, dmin (64 bytes; the block's last 4 bytes), then 20 planes
// (4 of scale | min << 4 bytes, 16 of 2-bit quants); Q3_K: d (32 bytes; its last 2), then 27
// planes (8 of the high-bit mask, 16 of 2-bit quants, 3 of packed 6-bit scales). Same size as
// kRows, so a matrix and its experts keep their offsets. That is the "rows in lanes" form the
// integer kernels compute in (matmul_q8.cc): one contiguous load per plane and one for the scales,
// instead of a transpose of 16 row loads and 16 scalar scale loads per block. The grouping is 16
// rows whatever the instruction set; a kernel with fewer lanes reads the lane slices of each plane
// it needs.
//
// kPanel16 (F32 / F16 / BF16, rows a multiple of 16): rows grouped 16 at a time, group g
// starting where its first row starts in kRows (g * 16 * row bytes, so the matrix keeps its
// size and expert matrices their offsets); inside a group, column by column, the 16 rows'
// elements of that column (row 0 first): element (r, c) sits at element index
// (r - r % 16) * cols + c * 16 + r % 16. One vector load then holds a column of 16 rows, which
// the float kernels multiply by one broadcast activation per token (outer products): no
// horizontal sums, fewer loads per FMA than dot products along rows, and each panel is one
// sequential stream.
enum class WeightLayout : uint8_t { kRows, kInterleaved16, kPanel16 };
constexpr int64_t kInterleaveRows = 16;
constexpr int64_t kPanelRows = 16;

// Tokens per pass of the integer kernels over a matrix's rows: a panel's activation rows
// (act_row_bytes each, ~256 KiB together) stay in L2 while every row block of the caller's
// rows runs over them; a longer batch takes one pass per panel, so its weights are read again
// per panel (from L3 when they fit) instead of its whole activations per row block. A multiple
// of 64 tokens (the kernels' token super-groups); every output sees the same operations.
constexpr int token_panel(int64_t act_row_bytes) {
  constexpr int64_t kBytes = 256 * 1024, kGroup = 64;
  const int64_t n = kBytes / (act_row_bytes > 0 ? act_row_bytes : 1) / kGroup * kGroup;
  return int(n < kGroup ? kGroup : n > (1 << 20) ? (1 << 20) : n);
}
// The integer kernels' token loop over those panels, written once: run(p0, n) for the panels
// of tokens [p0, p0 + n) of a call's n_tok (p0 relative to the call's first token).
template <class F>
void for_each_token_panel(int64_t act_row_bytes, int n_tok, F&& run) {
  const int panel = token_panel(act_row_bytes);
  for (int p0 = 0; p0 < n_tok; p0 += panel) run(p0, n_tok - p0 < panel ? n_tok - p0 : panel);
}

// True when a [rows x cols] matrix of type t can be stored kInterleaved16: a type with an
// interleaved layout (types.h: every type with an integer kernel), rows a positive multiple of 16,
// cols a positive multiple of the type's block.
bool can_interleave(TensorType t, int64_t rows, int64_t cols);
// Repacks the 16-row groups [g0, g1) of the matrix at w from kRows to kInterleaved16 in
// place (16 rows of scratch per call), or back (deinterleave16). Groups are independent:
// calls on disjoint group ranges may run in parallel. Throws lynx::Error if t cannot be
// interleaved or cols is not a multiple of its block.
void interleave16(TensorType t, void* w, int64_t cols, int64_t g0, int64_t g1);
void deinterleave16(TensorType t, void* w, int64_t cols, int64_t g0, int64_t g1);
// Writes groups [g0, g1) of the kRows matrix at src, interleaved, at the same offsets of dst
// (src and dst must not overlap): a repacking copy, as the model loader makes.
void interleave16_into(TensorType t, const void* src, void* dst, int64_t cols, int64_t g0,
                       int64_t g1);
// Copies group g (16 rows) of the kInterleaved16 matrix at w to dst in kRows order
// (16 * row_size bytes).
void deinterleave_group(TensorType t, const void* w, int64_t cols, int64_t g, void* dst);
// True when a [rows x cols] matrix of type t can be stored kPanel16: F32, F16 or BF16, rows a
// positive multiple of 16, cols positive.
bool can_panel16(TensorType t, int64_t rows, int64_t cols);
// Writes the 16-row groups [g0, g1) of the kRows matrix at src as kPanel16 at the same offsets
// of dst (src and dst must not overlap). Throws lynx::Error for a type other than F32/F16/BF16.
void panel16_into(TensorType t, const void* src, void* dst, int64_t cols, int64_t g0, int64_t g1);
// Copies row r of the matrix at w, stored in `layout`, to dst in kRows order (row_size bytes).
void read_row(TensorType t, WeightLayout layout, const void* w, int64_t cols, int64_t r, void* dst);

// Dequantizes `n` elements (a multiple of the type's block size) starting at `src`.
void dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
// Quantizes `n` F32 values into `dst` (row_size(t, n) bytes), as ggml does (round to
// nearest; Q8_0/Q4_0 scales from the block's absolute maximum).
void quantize_row(TensorType t, const float* src, void* dst, int64_t n);

float dot(const float* a, const float* b, int64_t n);
float sum(const float* x, int64_t n);

// Matrix product over a range of weight rows, streaming each weight row once for all tokens:
//   y[j * ldy + r] = sum_c W[r][c] * x[j * ldx + c]   for r in [r0, r1), j in [0, n_tok)
// W is row-major [rows x cols] in type t (row r starts at r * row_size(t, cols)).
// Each output depends only on its row and token, never on r0/r1 or n_tok grouping, so any
// split of the rows (threads) gives bit-identical results.
// With `layout` kInterleaved16 (a type that can_interleave, i.e. one with an integer kernel,
// else lynx::Error), W is stored so and the result is bit-identical to that on the same matrix
// in kRows: each 16-row group touched is copied back to rows first (the exact float path is
// not the fast one).
// With `layout` kPanel16 (F32/F16/BF16 only, else lynx::Error), every output is one f32 FMA
// chain over the columns in order, from 0: acc = fma(W[r][c], x[j][c], acc). That is a
// different summation order from kRows (lane-wise partial sums, then a horizontal sum), so
// the two layouts differ in the last bits; but it is the same chain on every instruction set
// (one rounding per FMA), so kPanel16 results are bit-identical across machines too. The
// 16-row groups that [r0, r1) touches are read whole (only rows [r0, r1) are stored).
// `scratch`: the calling worker's working memory (scratch.h); nullptr makes a temporary one.
void matmul_rows(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1, const float* x,
                 int64_t ldx, int n_tok, float* y, int64_t ldy,
                 WeightLayout layout = WeightLayout::kRows, Scratch* scratch = nullptr);

// ---- Integer path: weights times activations quantized to Q8_0 (or Q8_K) blocks ----
//
// What ggml's CPU backend does. For Q8_0 / Q4_0 weights (their vec_dot_type is Q8_0; the other
// 32-element types differ as has_int8_path says, the Q8_K types as matmul_k.h says): each
// activation row is quantized once per matmul input, per block of 32 exactly as
// ggml's quantize_row_q8_0_ref: amax = max|x|, d = amax / 127 (f32), id = d != 0 ? 1 / d : 0,
// q = roundf(x * id) (half away from zero, computed with the f32 d), and the scale kept is
// fp16(d) (round to nearest even). The products are then integer dot products per block
// (exact int32 sums) scaled in F32:
//   y[t][r] = sum over blocks b, in block order, of  acc = fma(dw[r][b] * dx[t][b], isum, acc)
// where dw, dx are the fp16 scales (their product is exact in f32) and isum the block's exact
// integer dot product of the weight quants (Q4_0: nibble - 8) with q. Every SIMD target and
// the scalar twin compute exactly this, so they agree bit for bit. Activations are assumed
// finite.

// True for the weight types that have the integer path against Q8_0 activation blocks in
// matmul_q8.cc: Q8_0, Q4_0 and the other 32-element types (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4).
// Q4_1 / Q5_1 (ggml's Q8_1 products) add acc = fma(m_w * dx, sum of the block's q, acc) after
// the scale term; MXFP4's scale is its E8M0 power of two.
bool has_int8_path(TensorType t);
// True for every weight type with an integer kernel (the type table's int_kernel: the Q8_0
// ones above and the Q8_K ones of matmul_k.h). matmul_rows_q8 takes them all; which form of
// the activations a type reads is its act_type (kernels/types.h).
bool has_int_path(TensorType t);

// Activation rows quantized to Q8_K blocks of 256 (bit for bit ggml's quantize_row_q8_K, the
// encoder of types/q8_k.cc), unpacked for the kernels of matmul_k.h: row t has cols int8
// levels at q[t * cols]; per block b its scale at d[t * n_blocks + b], the sums of its 16
// groups of 16 levels at gsum[(t * n_blocks + b) * 16 + g], and two packings of those sums for
// the kernels' int16 pair products: gpair[(t * n_blocks + b) * 8 + k] holds the sums of groups
// 2k (low 16 bits) and 2k + 1 (high 16 bits), spair[(t * n_blocks + b) * 4 + k] the sums of
// the 32-element sub-blocks 2k and 2k + 1 (|sum| <= 32 * 127 fits 16 bits).
struct QuantizedActsK {
  int n_tok = 0;
  int64_t cols = 0;  // a multiple of 256
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> gsum, gpair, spair;
  int64_t n_blocks() const { return cols / 256; }
  // Sets the shape; throws lynx::Error unless cols is a positive multiple of 256.
  void resize(int n_tok, int64_t cols);
  // Copies row `src_t` of `src` (same cols) into row `t`.
  void copy_row(int t, const QuantizedActsK& src, int src_t);
};

// Activation rows quantized to Q8_0 blocks, unpacked for the kernels: row t has cols int8
// quants at q[t * cols], and per block b its scale (the fp16 value, widened to f32) at
// d[t * n_blocks + b] and the sum of its 32 quants at sum[t * n_blocks + b] (the kernels use
// it for the offset of unsigned x signed dot products). Reused across calls: resize() keeps
// the capacity, so a steady state does not allocate.
struct QuantizedActs {
  int n_tok = 0;
  int64_t cols = 0;  // a multiple of 32
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
  // The same rows as Q8_K blocks, for weight types whose act_type is Q8_K (K-quants, IQ4_XS);
  // filled by quantize_acts_k when such a weight reads them. Empty otherwise.
  QuantizedActsK k;

  int64_t n_blocks() const { return cols / 32; }
  // Sets the shape (cols must be a positive multiple of 32; throws lynx::Error otherwise).
  void resize(int n_tok, int64_t cols);
  // Copies row `src_t` of `src` (same cols) into row `t`.
  void copy_row(int t, const QuantizedActs& src, int src_t);
};

// Quantizes activation rows [t0, t1) (row t at x + t * ldx, out.cols values) into the same
// rows of `out`, which must already have its shape (out.resize).
void quantize_acts_rows(const float* x, int64_t ldx, int t0, int t1, QuantizedActs& out);
// Resizes `out` to [n_tok x cols] and quantizes all rows.
void quantize_acts(const float* x, int64_t ldx, int n_tok, int64_t cols, QuantizedActs& out);

// matmul_rows with quantized activations: tokens [t0, t0 + n_tok) of x (x.cols == cols),
// output token j of the call at y + j * ldy:
//   y[j * ldy + r] = W[r] . x[t0 + j]   for r in [r0, r1)
// t must have an integer path (has_int_path; throws lynx::Error otherwise): the 32-element
// types (has_int8_path) read the Q8_0 form of x, the Q8_K types x.k (matmul_rows_k,
// matmul_k.h). Same promise as matmul_rows:
// each output depends only on its row and token, never on the row range or token grouping, and not
// on the layout either: W stored kInterleaved16 gives the bits W stored kRows gives. With
// kInterleaved16 the whole 16-row groups that [r0, r1) touches are read (and computed; only rows
// [r0, r1) are stored), so the matrix must hold them, as one that can_interleave always does.
// `scratch` as for matmul_rows.
void matmul_rows_q8(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                    const QuantizedActs& x, int t0, int n_tok, float* y, int64_t ldy,
                    WeightLayout layout = WeightLayout::kRows, Scratch* scratch = nullptr);

// y = x / sqrt(mean(x^2) + eps) * w   (w may be nullptr: no scale). y may alias x.
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax_inplace(float* x, int64_t n);
// out = silu(gate) * up. out may alias gate.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// out = gelu(gate) * up with GELU's tanh form (PyTorch's gelu(approximate="tanh"), ggml_gelu;
// GeGLU: Gemma's MLP and experts). out may alias gate.
void geglu(const float* gate, const float* up, float* out, int64_t n);
// x <- cap tanh(x / cap) (Gemma's final_logit_softcapping; cap > 0).
void softcap(float* x, int64_t n, float cap);
// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);

// Scalar reference twins: straightforward loops, the ground truth for the tests.
// Reductions accumulate in double so they are a tighter truth than any f32 order.
namespace ref {
void dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
void quantize_row(TensorType t, const float* src, void* dst, int64_t n);
float dot(const float* a, const float* b, int64_t n);
float sum(const float* x, int64_t n);
// The ref matmuls read kInterleaved16 weights in place (their own indexing of the layout, not
// the repack functions), so they also check those: ref::matmul_rows for Q8_0 / Q4_0 only (it
// throws lynx::Error for the other types in that layout, which matmul_rows accepts),
// ref::matmul_rows_q8 for the 32-element types (has_int8_path; the Q8_K types have their twin,
// ref::matmul_rows_k, in matmul_k.h).
void matmul_rows(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1, const float* x,
                 int64_t ldx, int n_tok, float* y, int64_t ldy,
                 WeightLayout layout = WeightLayout::kRows);
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax_inplace(float* x, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void geglu(const float* gate, const float* up, float* out, int64_t n);
void softcap(float* x, int64_t n, float cap);
void axpy(float a, const float* x, float* y, int64_t n);
void quantize_acts_rows(const float* x, int64_t ldx, int t0, int t1, QuantizedActs& out);
void matmul_rows_q8(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                    const QuantizedActs& x, int t0, int n_tok, float* y, int64_t ldy,
                    WeightLayout layout = WeightLayout::kRows);
}  // namespace ref

// IEEE half and bfloat16 conversions (scalar, round to nearest even, NaN kept quiet,
// denormals kept).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

// The FMA probe's inner loop (one thread; measure_fma_gflops, probes.h): `iters` rounds of 12
// independent vector FMA chains; returns the flops done and writes a checksum to *sink.
double fma_chains(int64_t iters, float seed, float* sink);

// Name of the instruction set the dispatched kernels run on ("AVX2", "AVX3", ...).
const char* simd_target_name();
// Instruction sets compiled into this binary that this CPU supports (Highway target bits,
// best first); while the tests or benchmarks force one (tests/simd_target.h: Highway's
// dispatch state is process-wide, so the engine has no such switch), only that one.
std::vector<int64_t> available_simd_targets();
const char* simd_target_name(int64_t target);

}  // namespace lynx::kernels
