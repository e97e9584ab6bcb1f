// qwen2_moe / qwen3_moe / olmoe: experts gate_proj/up_proj/down_proj stacked; the Qwen2-MoE
//   shared expert and its sigmoid gate (shared_expert_gate -> ffn_gate_inp_shexp); OLMoE's
//   rms epsilon fixed at 1e-5 (OlmoeModel).
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr TensorRule kQwenSharedExpert[] = {
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_expert.gate_proj.weight"},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_expert.up_proj.weight"},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_expert.down_proj.weight"},
    {T::kFfnGateInpShexp, "model.layers.{L}.mlp.shared_expert_gate.weight"},
};

constexpr Rules kQwen2MoeL[] = {kGqaAttn, kQkvBias, kExperts, kQwenSharedExpert};

}  // namespace

constexpr Family kQwen2Moe = {
    .model_type = "qwen2_moe",
    .arch = "qwen2moe",
    .keys = kQwenMoeK,
    .global = kGlobal,
    .layer = kQwen2MoeL,
    .tokenizer_pre = "qwen2",
    .extra_keys = plain_extra,
    .absent = kAbsentDense,
};

}  // namespace lynx::convert::table
