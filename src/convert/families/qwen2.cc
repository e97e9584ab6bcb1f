// qwen2 -> `qwen2` (dense): q/k/v biases, NEOX rope (HF's rows as they are).
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr Rules kQwen2L[] = {kGqaAttn, kQkvBias, kDenseFfn};

}  // namespace

constexpr Family kQwen2 = {
    .model_type = "qwen2",
    .arch = "qwen2",
    .keys = kDenseK,
    .global = kGlobal,
    .layer = kQwen2L,
    .tokenizer_pre = "qwen2",
    .extra_keys = plain_extra,
    .absent = kAbsentMoe,
};

}  // namespace lynx::convert::table
