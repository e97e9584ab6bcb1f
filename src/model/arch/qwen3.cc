// qwen3 (dense Qwen3): per-head q/k RMSNorm, NEOX rope.
#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkNormPerHead}};
constexpr TensorGroup kDense[] = {{kDenseFfn}};

}  // namespace

constexpr ArchDesc kQwen3 = {
    .name = "qwen3",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kPerHead,
    .norm_topk = true,
    .moe = false,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoeOptionalShared},
};

}  // namespace lynx::arch
