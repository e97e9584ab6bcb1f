// llama: Llama, and Mixtral when the file has experts (then MoE in every layer); adjacent-pair
// (NORM) rope, no q/k norm nor biases, top-k weights renormalized.
#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorGroup kAttn[] = {{kGqaTensors}};
constexpr TensorGroup kDense[] = {{kDenseFfn}};

}  // namespace

constexpr ArchDesc kLlama = {
    .name = "llama",
    .rope = RopeType::kNorm,
    .norm_topk = true,
    .moe = false,  // experts optional: a dense Llama otherwise
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoeOptionalShared},
};

}  // namespace lynx::arch
