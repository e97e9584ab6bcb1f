// The table of registered families and the lookups over it.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

// One row per family file (families.h); the order is the one error messages list.
constexpr const ArchDesc* kAll[] = {
    &kLlama,   &kQwen2Moe,    &kQwen3Moe,   &kOlmoe,      &kQwen2,  &kQwen3,      &kDeepseek2,
    &kGlm4Moe, &kGptOss,      &kMinimaxM2,  &kErnie45Moe, &kDots1,  &kQwen3VlMoe, &kMistral4,
    &kGlmDsa,  &kBailingMoe2, &kHunyuanMoe, &kGemma4,     &kStep35, &kQwen3Next,  &kQwen35Moe};

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
  if (k.alt) return a.blocks.attn_alt;
  if (k.attn == AttnKind::kDeltaNet) return a.blocks.attn_delta;
  return k.attn == AttnKind::kMla ? a.blocks.attn_mla : a.blocks.attn_gqa;
}

std::span<const TensorGroup> ffn_groups(const ArchDesc& a, const LayerKind& k) {
  return k.ffn == FfnKind::kDense ? a.blocks.ffn_dense : a.blocks.ffn_moe;
}

// An integer key in [lo, hi] (`def` when absent). Every integer the config keeps goes through
// here: a u64 above 2^32 would otherwise be truncated by the int() to a small plausible value.
int int_in(const gguf::File& f, const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  const int64_t v = f.get_int(key, def);
  if (v < lo || v > hi) {
    throw Error("metadata " + key + " = " + std::to_string(v) + " is out of range [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return int(v);
}

int positive_int(const gguf::File& f, const std::string& key) {
  f.get_int(key);  // required: throws naming the key when absent
  return int_in(f, key, 0, 1, kMaxDim);
}

// A float key that must be positive and finite (epsilons, rope base): NaN, 0 or a negative
// value would turn every activation into NaN or inf without a word.
float positive_float(const gguf::File& f, const std::string& key, double def) {
  const double v = f.get_float(key, def);
  if (!(v > 0) || !std::isfinite(float(v))) {
    throw Error("metadata " + key + " = " + std::to_string(v) +
                " must be a positive finite number");
  }
  return float(v);
}

namespace {
// The entries of a per-layer key as gguf Values (one value repeated, or the array's items).
std::vector<const gguf::Value*> per_layer_values(const gguf::File& f, const std::string& key,
                                                 int n_layer, bool& found) {
  const gguf::Value* v = f.find(key);
  found = v != nullptr;
  std::vector<const gguf::Value*> out;
  if (!v) return out;
  if (v->type != gguf::ValueType::ARRAY) {
    out.assign(size_t(n_layer), v);
    return out;
  }
  const auto& items = v->as_array(key);
  if (items.size() != size_t(n_layer)) {
    throw Error("metadata " + key + " has " + std::to_string(items.size()) + " entries for " +
                std::to_string(n_layer) + " layers");
  }
  for (const gguf::Value& x : items) out.push_back(&x);
  return out;
}
}  // namespace

std::vector<int64_t> per_layer_ints(const gguf::File& f, const std::string& key, int n_layer,
                                    std::optional<int64_t> def) {
  bool found = false;
  const auto vals = per_layer_values(f, key, n_layer, found);
  if (!found) {
    if (!def) throw Error("metadata " + key + " is required");
    return std::vector<int64_t>(size_t(n_layer), *def);
  }
  std::vector<int64_t> out;
  for (const gguf::Value* x : vals) {
    out.push_back(x->type == gguf::ValueType::BOOL ? int64_t(x->as_bool(key)) : x->as_int(key));
  }
  return out;
}

std::vector<float> per_layer_floats(const gguf::File& f, const std::string& key, int n_layer,
                                    std::optional<float> def) {
  bool found = false;
  const auto vals = per_layer_values(f, key, n_layer, found);
  if (!found) {
    if (!def) throw Error("metadata " + key + " is required");
    return std::vector<float>(size_t(n_layer), *def);
  }
  std::vector<float> out;
  for (const gguf::Value* x : vals) out.push_back(float(x->as_float(key)));
  return out;
}

void read_rope_scaling(const gguf::File& f, const ArchDesc& a, ModelConfig& c) {
  const std::string k = c.arch + ".rope.scaling.";
  const std::string type = f.get_string(k + "type", "none");
  if (type == "none") return;
  if (type != "yarn") {
    throw Error("metadata " + k + "type = '" + gguf::printable(type) +
                "' is not supported (only 'none' and 'yarn')");
  }
  if (!a.yarn_convention) {
    throw Error("metadata " + k + "type = 'yarn': YaRN rope scaling is not implemented for " +
                c.arch);
  }
  if (!f.has(k + "factor")) throw Error("metadata " + k + "factor is required with YaRN");
  RopeYarn& y = c.yarn;
  y.on = true;
  y.factor = positive_float(f, k + "factor", 1.0);
  y.orig_ctx = int_in(f, k + "original_context_length", c.n_ctx_train, 1, kMaxDim);
  y.beta_fast = positive_float(f, k + "yarn_beta_fast", 32.0);
  y.beta_slow = positive_float(f, k + "yarn_beta_slow", 1.0);
  const double log_mul = f.get_float(k + "yarn_log_multiplier", 0.0);
  if (!(log_mul >= 0) || !std::isfinite(float(log_mul))) {
    throw Error("metadata " + k + "yarn_log_multiplier = " + std::to_string(log_mul) +
                " must be a finite number >= 0");
  }
  y.log_mul = float(log_mul);
  // llama.cpp's defaults for a yarn file: the ramp fully applied, and cos / sin scaled by
  // 1 + 0.1 ln(factor) (YaRN's magnitude correction); the family may change both.
  y.ext_factor = 1.f;
  y.mscale = float(1.0 + 0.1 * std::log(double(y.factor)));
  y.kq_mul = 1.f;
  // The dimension (of n) whose pair turns `rot` times over orig_ctx positions:
  // n ln(orig_ctx / (2 pi rot)) / (2 ln base); floor / ceil, clamped to [0, n - 1].
  const double n = c.rope_dim(), lb = std::log(double(c.rope_base));
  auto corr = [&](double rot) {
    return n * std::log(double(y.orig_ctx) / (rot * 2.0 * std::numbers::pi)) / (2.0 * lb);
  };
  y.low = float(std::max(0.0, std::floor(corr(y.beta_fast))));
  y.high = float(std::min(n - 1.0, std::ceil(corr(y.beta_slow))));
  a.yarn_convention(c);
}

bool group_applies(const ModelConfig& c, const TensorGroup& g) {
  return (dim(c, g.need) > 0) != g.need_zero;
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
    case Dim::kQkv:
      return c.q_dim() + 2 * c.kv_dim();
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
    case Dim::kHeads:
      return c.n_head;
    case Dim::kQLora:
      return c.q_lora_rank;
    case Dim::kKvLora:
      return c.kv_lora_rank;
    case Dim::kKvLoraRope:
      return c.kv_lora_rank + c.qk_rope_dim;
    case Dim::kKvBMla:
      return int64_t(c.n_head) * (c.qk_nope_dim + c.v_head_dim);
    case Dim::kVMla:
      return int64_t(c.n_head) * c.v_head_dim;
    case Dim::kNopeDim:
      return c.qk_nope_dim;
    case Dim::kVHeadDim:
      return c.v_head_dim;
    case Dim::kSelectBias:
      return c.gating.select_bias ? 1 : 0;
    case Dim::kQkNorm:
      return c.qk_norm != QKNorm::kNone ? 1 : 0;
    case Dim::kEmbd2:
      return 2 * int64_t(c.n_embd);
    case Dim::kVocab:
      return c.n_vocab;
    case Dim::kQAlt:
      return int64_t(c.alt.n_head > 0 ? c.alt.n_head : c.n_head) * c.alt.head_dim;
    case Dim::kAttnGate:
      return c.attn_gate != AttnGate::kNone ? 1 : 0;
    case Dim::kHeadsAlt:
      return c.alt.n_head > 0 ? c.alt.n_head : c.n_head;
    case Dim::kKVAlt:
      return int64_t(c.alt.n_head_kv) * c.alt.head_dim;
    case Dim::kHeadDimAlt:
      return c.alt.head_dim;
    case Dim::kAltV:
      return c.alt.k_eq_v ? 0 : 1;
    case Dim::kFfExp2:
      return 2 * int64_t(c.n_ff_exp);
    case Dim::kQ2:
      return 2 * int64_t(c.q_dim());
    case Dim::kSsmConvK:
      return c.delta_net.conv_kernel;
    case Dim::kSsmConv:
      return c.delta_net.conv_dim();
    case Dim::kSsmV:
      return c.delta_net.value_dim();
    case Dim::kSsmVHeads:
      return c.delta_net.n_v_heads;
    case Dim::kSsmVHeads2:
      return 2 * int64_t(c.delta_net.n_v_heads);
    case Dim::kSsmHeadV:
      return c.delta_net.head_v_dim;
  }
  return 0;
}

}  // namespace lynx::arch
