// qwen2 (dense Qwen2 / Qwen2.5): q/k/v biases, NEOX rope.
#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkvBias}};
constexpr TensorGroup kDense[] = {{kDenseFfn}};

}  // namespace

constexpr ArchDesc kQwen2 = {
    .name = "qwen2",
    .rope = RopeType::kNeox,
    .qkv_bias = true,
    .norm_topk = true,
    .moe = false,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoeOptionalShared},
};

}  // namespace lynx::arch
