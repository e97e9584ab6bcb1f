// The table of registered families and the lookups over it.
#include "model/arch/families.h"

namespace lynx::arch {
namespace {

// One row per family file (families.h); the order is the one error messages list.
constexpr const ArchDesc* kAll[] = {&kLlama, &kQwen2Moe, &kQwen3Moe, &kOlmoe, &kQwen2, &kQwen3};

}  // namespace

std::span<const ArchDesc* const> all() {
  return kAll;
}

const ArchDesc& find(const std::string& name) {
  for (const ArchDesc* a : kAll) {
    if (name == a->name) return *a;
  }
  std::string list;
  for (const ArchDesc* a : kAll) list += std::string(list.empty() ? "" : ", ") + a->name;
  throw Error("unsupported architecture '" + gguf::printable(name) + "' (supported: " + list + ")");
}

LayerKind layer_kind(const ArchDesc& a, const ModelConfig& c, int il) {
  if (a.layer_kind) return a.layer_kind(c, il);
  LayerKind k;
  k.ffn = c.n_expert > 0 ? FfnKind::kMoe : FfnKind::kDense;
  return k;
}

std::span<const TensorGroup> attn_groups(const ArchDesc& a, const LayerKind& k) {
  (void)k;  // one attention kind so far
  return a.blocks.attn_gqa;
}

std::span<const TensorGroup> ffn_groups(const ArchDesc& a, const LayerKind& k) {
  return k.ffn == FfnKind::kDense ? a.blocks.ffn_dense : a.blocks.ffn_moe;
}

int64_t dim(const ModelConfig& c, Dim d) {
  switch (d) {
    case Dim::kOne:
      return 1;
    case Dim::kEmbd:
      return c.n_embd;
    case Dim::kQ:
      return c.q_dim();
    case Dim::kKV:
      return c.kv_dim();
    case Dim::kHeadDim:
      return c.head_dim;
    case Dim::kFf:
      return c.n_ff;
    case Dim::kFfExp:
      return c.n_ff_exp;
    case Dim::kFfShexp:
      return c.n_ff_shexp;
    case Dim::kExpert:
      return c.n_expert;
  }
  return 0;
}

}  // namespace lynx::arch
