// olmoe (OLMoE-1B-7B): RMSNorm over the whole q and k projections, NEOX rope, top-k NOT
// renormalized.
#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkNormFull}};
constexpr TensorGroup kDense[] = {{kDenseFfn}};

}  // namespace

constexpr ArchDesc kOlmoe = {
    .name = "olmoe",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kFull,
    .norm_topk = false,
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoeOptionalShared},
};

}  // namespace lynx::arch
