// The weight types' block layouts and their scalar decode / encode entry points: what the type
// table (kernels/types.h) points at, apart from the byte helpers of blocks.h so that the table
// can be a constexpr header that kernels read their geometry from at compile time.
#pragma once
#include <cstdint>

namespace lynx::kernels::types {

// ggml's block structs (ggml-common.h), byte for byte: fp16 fields are their raw bits
// (uint16_t), read with load_f16. The sizes are the GGUF format's (gguf/types.cc), which the
// static_asserts pin and tests/kernels/types_test.cc compares with the format's table; the
// kernels take field offsets from here (offsetof) rather than writing them as numbers.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // element l: low nibble of byte l, element l + 16: high nibble
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit e: the fifth bit of element e
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockMxfp4 {
  uint8_t e;  // E8M0 scale
  uint8_t qs[16];
};
struct BlockIq4_nl {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ2_K {
  uint8_t scales[16];  // per 16 elements: low nibble scale, high nibble min
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];  // 16 6-bit scales
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // 8 (scale, min) 6-bit pairs (kquants.h)
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
struct BlockIq4_xs {
  uint16_t d;
  uint16_t scales_h;  // the top 2 bits of the 8 6-bit scales
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockMxfp4) == 17 &&
              sizeof(BlockIq4_nl) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292 &&
              sizeof(BlockIq4_xs) == 136);

// decode_<type>(src, dst, n_blocks) and encode_<type>(src, dst, n_blocks) of every type file.
#define LYNX_BLOCK_TYPE(name)                                           \
  void decode_##name(const uint8_t* src, float* dst, int64_t n_blocks); \
  void encode_##name(const float* src, uint8_t* dst, int64_t n_blocks)

LYNX_BLOCK_TYPE(f32);
LYNX_BLOCK_TYPE(f16);
LYNX_BLOCK_TYPE(bf16);
LYNX_BLOCK_TYPE(q4_0);
LYNX_BLOCK_TYPE(q4_1);
LYNX_BLOCK_TYPE(q5_0);
LYNX_BLOCK_TYPE(q5_1);
LYNX_BLOCK_TYPE(q8_0);
LYNX_BLOCK_TYPE(q2_k);
LYNX_BLOCK_TYPE(q3_k);
LYNX_BLOCK_TYPE(q4_k);
LYNX_BLOCK_TYPE(q5_k);
LYNX_BLOCK_TYPE(q6_k);
LYNX_BLOCK_TYPE(q8_k);
LYNX_BLOCK_TYPE(iq4_nl);
LYNX_BLOCK_TYPE(iq4_xs);
LYNX_BLOCK_TYPE(mxfp4);

#undef LYNX_BLOCK_TYPE

// One block of a 32-element type with the integer kernel as integer levels and scales: value
// = q[e] x d, plus m for Q4_1 / Q5_1. levels_<type> is the one scalar reading of the block's
// layout: the type's float decode and the integer kernel's scalar twin (scalar.cc) both use it.
struct Levels32 {
  int8_t q[32];
  float d;
  float m;  // 0 for the types without a min
};
#define LYNX_LEVELS_TYPE(name) void levels_##name(const uint8_t* blk, Levels32& out)
LYNX_LEVELS_TYPE(q4_0);
LYNX_LEVELS_TYPE(q4_1);
LYNX_LEVELS_TYPE(q5_0);
LYNX_LEVELS_TYPE(q5_1);
LYNX_LEVELS_TYPE(q8_0);
LYNX_LEVELS_TYPE(iq4_nl);
LYNX_LEVELS_TYPE(mxfp4);
#undef LYNX_LEVELS_TYPE

// One 256-element block of a K-quant or IQ4_XS as integer levels and sub-block scales:
// value(e) = (d x scale[s]) x q[e], minus dmin x min[s] for Q2_K / Q4_K / Q5_K, with
// s = e / sub_len. levels_<type> writes it from the type's one scalar reading of its block
// (Reader<Block>, types/levels_k.h), for the integer kernel's scalar twin (matmul_k.cc); the
// float decode and the rows kernel's unpacking instantiate the same reading in their own loops.
// The SIMD unpacking of the interleaved layout (matmul_k_i16.cc) reads the same bits in vector
// lanes, and the tests hold it to the twin on every target.
struct LevelsK {
  int8_t q[256];  // Q2_K 0..3, Q3_K -4..3, Q4_K 0..15, Q5_K 0..31, Q6_K -32..31, IQ4_XS grid
  // Per sub-block; entries past 256 / sub_len are not written.
  int16_t scale[16];  // Q2_K 0..15, Q3_K / IQ4_XS -32..31, Q4_K / Q5_K 0..63, Q6_K int8
  int16_t min[16];    // 0 for the types without mins
  float d;
  float dmin;   // 0 for the types without mins
  int sub_len;  // 16 or 32 elements per scale
  bool has_min;
};
#define LYNX_LEVELS_K_TYPE(name) void levels_##name(const uint8_t* blk, LevelsK& out)
LYNX_LEVELS_K_TYPE(q2_k);
LYNX_LEVELS_K_TYPE(q3_k);
LYNX_LEVELS_K_TYPE(q4_k);
LYNX_LEVELS_K_TYPE(q5_k);
LYNX_LEVELS_K_TYPE(q6_k);
LYNX_LEVELS_K_TYPE(iq4_xs);
#undef LYNX_LEVELS_K_TYPE

}  // namespace lynx::kernels::types
