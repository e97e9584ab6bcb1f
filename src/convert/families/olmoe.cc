// olmoe -> `olmoe` (OlmoeModel): experts stacked as qwen2moe.cc says, q/k norms over the
// whole row, the rms epsilon fixed at 1e-5.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

void olmoe_extra(const HfConfig& c, gguf::Writer& w) {
  no_rope_scaling(c);
  w.set(key("olmoe", "attention.layer_norm_rms_epsilon"), gguf::Value::f32(1e-5f));
}

}  // namespace

constexpr Family kOlmoe = {
    .model_type = "olmoe",
    .arch = "olmoe",
    .keys = kQwenMoeK,
    .global = kGlobal,
    .layer = kQkNormMoeL,
    .tokenizer_pre = "olmo",
    .extra_keys = olmoe_extra,
    .absent = kAbsentDenseShared,
};

}  // namespace lynx::convert::table
