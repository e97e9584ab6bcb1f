// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): per-head q/k RMSNorm, NEOX rope, top-k
// renormalized; head_dim (attention.key_length) may differ from n_embd / n_head.
#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkNormPerHead}};
constexpr TensorGroup kDense[] = {{kDenseFfn}};

}  // namespace

constexpr ArchDesc kQwen3Moe = {
    .name = "qwen3moe",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kPerHead,
    .norm_topk = true,
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoeOptionalShared},
};

}  // namespace lynx::arch
