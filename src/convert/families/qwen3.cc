// qwen3 -> `qwen3` (dense): per-head q/k norms, NEOX rope (HF's rows as they are).
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr Rules kQwen3L[] = {kGqaAttn, kQkNorm, kDenseFfn};

}  // namespace

constexpr Family kQwen3 = {
    .model_type = "qwen3",
    .arch = "qwen3",
    .keys = kDenseK,
    .global = kGlobal,
    .layer = kQwen3L,
    .tokenizer_pre = "qwen2",
    .extra_keys = plain_extra,
    .absent = kAbsentMoe,
};

}  // namespace lynx::convert::table
