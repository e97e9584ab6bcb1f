// qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): q/k/v biases, NEOX rope, top-k NOT renormalized
// (norm_topk_prob = false), a shared expert scaled by sigmoid(ffn_gate_inp_shexp . x).
#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkvBias}};
constexpr TensorGroup kDense[] = {{kDenseFfn}};

}  // namespace

constexpr ArchDesc kQwen2Moe = {
    .name = "qwen2moe",
    .rope = RopeType::kNeox,
    .qkv_bias = true,
    .norm_topk = false,
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoeOptionalShared},
};

}  // namespace lynx::arch
