// hunyuan-moe (Tencent Hunyuan-A13B) against the independent NumPy reference
// (tests/reference/hunyuan_moe_ref.py, written from the released modeling_hunyuan.py; fixtures
// from make_hunyuan_moe_fixtures.py): logits at every position by prefill, token by token and
// batched with another sequence, in F32 and Q8_0 (NEOX rope then per-head q/k RMSNorm, every
// layer MoE with softmax top-k renormalized plus an ungated shared MLP, tied embeddings); the
// q/k norms and the shared MLP really take part; every routing policy on its router; bad files
// named; the real-shape preset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "../scratch.h"
#include "family_harness.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/weights.h"

namespace lynx {
namespace {

const testing_util::FamilyFixtures kFx("hunyuan-moe");
const std::string kDir = kFx.dir();
const char* const kF32 = "tiny-hunyuan-moe-f32";
const char* const kQ8 = "tiny-hunyuan-moe-q8_0";

std::vector<int32_t> tokens() {
  return kFx.tokens();
}

std::vector<float> golden(const std::string& name, size_t n) {
  return kFx.golden(name, n);
}

using testing_util::exact_ctx;
using testing_util::expect_load_error;
using testing_util::rel_err;

constexpr double kTol = 1e-5;

std::vector<float> prefill_logits(const Model& m, const ContextOptions& o = exact_ctx()) {
  return kFx.prefill(m, o);
}

TEST(HunyuanMoe, ConfigFromTheFile) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, "hunyuan-moe");
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ(c.rope_dim(), 16);
  EXPECT_EQ(c.rope, RopeType::kNeox);
  EXPECT_NEAR(c.rope_base, 11158839.9251, 1.0);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.qk_norm, QKNorm::kPerHeadAfterRope);
  EXPECT_EQ(c.n_layer_dense_lead, 0);
  for (int il = 0; il < 3; ++il) EXPECT_EQ(c.layer_kinds[size_t(il)].ffn, FfnKind::kMoeShared);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 3);
  EXPECT_EQ(c.n_ff_exp, 32);
  EXPECT_EQ(c.n_ff_shexp, 64);
  EXPECT_EQ(c.gating.func, GatingFunc::kSoftmax);
  EXPECT_FALSE(c.gating.select_bias);
  EXPECT_TRUE(c.gating.norm_topk);
  EXPECT_EQ(c.gating.weights_scale, 1.f);
  EXPECT_TRUE(c.tied_output);
  EXPECT_NE(m->layer(0).q_norm, nullptr);
  EXPECT_NE(m->layer(0).k_norm, nullptr);
  EXPECT_TRUE(m->layer(2).up_shexp.present());
  EXPECT_EQ(m->layer(2).shexp_gate, nullptr);
  EXPECT_EQ(m->layer(1).exp_probs_b, nullptr);
}

// Every position's logits by prefill, token by token, and batched with another sequence.
TEST(HunyuanMoe, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* name : {kF32, kQ8})
    testing_util::expect_goldens_at_every_position(kFx, name, kTol);
}

// The default path of the Q8_0 file (Q8_0 activations, integer products) stays near the exact
// reference and picks the same arg-max at every position.
TEST(HunyuanMoe, IntegerPathNearTheGoldens) {
  testing_util::expect_integer_path_near_goldens(kFx, kQ8, 6e-2);
}

// Every routing policy runs a decode batch on the family's router (family_harness.h).
TEST(HunyuanMoe, EveryPolicyRunsOnItsRouter) {
  testing_util::expect_every_policy_runs(kFx, kF32, 8);
}

// Copies a fixture, letting `edit` change or drop metadata, `drop` remove tensors, `zero` zero
// tensors' bytes and `add` add keys or tensors' replacements.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Pick = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& fixture, const std::string& name, const KvEdit& edit,
                    const Pick& drop,
                    const std::vector<std::pair<std::string, gguf::Value>>& add = {},
                    const Pick& zero = nullptr, const Pick& ones = nullptr) {
  testing_util::GgufEdit e{edit, add, drop, nullptr};
  e.replace = [&](const gguf::TensorInfo& t) -> std::optional<testing_util::TensorData> {
    const bool z = zero && zero(t), o = ones && ones(t);
    if (!z && !o) return std::nullopt;
    testing_util::TensorData d{std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                               std::vector<uint8_t>(t.n_bytes, uint8_t(0))};
    if (o) {  // F32 vectors of 1
      const float one = 1.f;
      for (size_t i = 0; i + 4 <= t.n_bytes; i += 4) std::memcpy(&d.bytes[i], &one, 4);
    }
    return d;
  };
  return kFx.rewrite(fixture, name, e);
}
const auto kAllKv = [](const std::string&, gguf::Value&) { return true; };
const auto kNoDrop = [](const gguf::TensorInfo&) { return false; };

// Edits that must change the logits: the shared MLP's output zeroed, or the q/k norm weights
// set to 1, each moves the last position away from the goldens (so the goldens check both).
// That the norms come after the rope is checked by the goldens themselves: the reference with
// the norms before the rope gives other logits (test_reference.py).
TEST(HunyuanMoe, SharedMlpAndQkNormsTakePart) {
  const size_t n = tokens().size();
  const auto want = golden(kF32, n * 320);
  auto last_err = [&](const std::string& path) {
    auto m = Model::load(path);
    const auto got = prefill_logits(*m);
    return rel_err(std::span(got).subspan((n - 1) * 320, 320), &want[(n - 1) * 320], 320);
  };
  auto named = [](const char* part) {
    return [part](const gguf::TensorInfo& t) { return t.name.find(part) != std::string::npos; };
  };
  EXPECT_GT(last_err(rewrite(kF32, "zero_shexp", kAllKv, kNoDrop, {}, named("ffn_down_shexp"))),
            1e-3);
  EXPECT_GT(last_err(rewrite(kF32, "unit_qnorm", kAllKv, kNoDrop, {}, nullptr, named("_q_norm"))),
            1e-3);
  EXPECT_GT(last_err(rewrite(kF32, "unit_knorm", kAllKv, kNoDrop, {}, nullptr, named("_k_norm"))),
            1e-3);
}

TEST(HunyuanMoe, BadFilesAreNamed) {
  auto drop = [](const char* name) {
    return [name](const gguf::TensorInfo& t) { return t.name == name; };
  };
  auto set_u32 = [](const char* key, uint32_t val) {
    return [key, val](const std::string& k, gguf::Value& v) {
      if (k == key) v = gguf::Value::u32(val);
      return true;
    };
  };
  auto without = [](const char* key) {
    return [key](const std::string& k, gguf::Value&) { return k != key; };
  };
  expect_load_error(rewrite(kF32, "no_qnorm", kAllKv, drop("blk.1.attn_q_norm.weight")),
                    "missing tensor 'blk.1.attn_q_norm.weight'");
  expect_load_error(rewrite(kF32, "no_knorm", kAllKv, drop("blk.2.attn_k_norm.weight")),
                    "missing tensor 'blk.2.attn_k_norm.weight'");
  expect_load_error(rewrite(kF32, "no_down", kAllKv, drop("blk.1.ffn_down_exps.weight")),
                    "missing tensor 'blk.1.ffn_down_exps.weight'");
  expect_load_error(rewrite(kF32, "no_shexp", kAllKv, drop("blk.2.ffn_gate_shexp.weight")),
                    "missing tensor 'blk.2.ffn_gate_shexp.weight'");
  expect_load_error(rewrite(kF32, "no_router", kAllKv, drop("blk.0.ffn_gate_inp.weight")),
                    "missing tensor 'blk.0.ffn_gate_inp.weight'");
  // Without its key the shared MLP is feed_forward_length (32) wide, as llama.cpp sizes it:
  // the 64-wide tensors are then the wrong shape.
  expect_load_error(rewrite(kF32, "no_shexp_key",
                            without("hunyuan-moe.expert_shared_feed_forward_length"), kNoDrop),
                    "tensor 'blk.0.ffn_gate_shexp.weight' has shape");
  expect_load_error(rewrite(kF32, "heads", set_u32("hunyuan-moe.attention.head_count", 8), kNoDrop),
                    "tensor 'blk.0.attn_q.weight' has shape");
  // llama.cpp sizes the experts by feed_forward_length and requires the expert key.
  expect_load_error(
      rewrite(kF32, "ffexp", set_u32("hunyuan-moe.expert_feed_forward_length", 64), kNoDrop),
      "hunyuan-moe.expert_feed_forward_length = 64 differs from hunyuan-moe.feed_forward_length");
  expect_load_error(
      rewrite(kF32, "no_ffexp", without("hunyuan-moe.expert_feed_forward_length"), kNoDrop),
      "hunyuan-moe.expert_feed_forward_length");
  // Whole-head rope, value heads of the key size, every layer MoE, softmax renormalized.
  expect_load_error(rewrite(kF32, "rot", set_u32("hunyuan-moe.rope.dimension_count", 8), kNoDrop),
                    "hunyuan-moe.rope.dimension_count = 8 differs from the head dimension 16");
  expect_load_error(
      rewrite(kF32, "vlen", set_u32("hunyuan-moe.attention.value_length", 8), kNoDrop),
      "hunyuan-moe.attention.value_length = 8 differs from the key head dimension 16");
  expect_load_error(rewrite(kF32, "lead", kAllKv, kNoDrop,
                            {{"hunyuan-moe.leading_dense_block_count", gguf::Value::u32(1)}}),
                    "hunyuan-moe.leading_dense_block_count = 1: every hunyuan-moe layer is MoE");
  expect_load_error(rewrite(kF32, "sigmoid", kAllKv, kNoDrop,
                            {{"hunyuan-moe.expert_gating_func", gguf::Value::u32(2)}}),
                    "hunyuan-moe.expert_gating_func = 2: hunyuan-moe routes by softmax (1) only");
  expect_load_error(rewrite(kF32, "nonorm", kAllKv, kNoDrop,
                            {{"hunyuan-moe.expert_weights_norm", gguf::Value::boolean(false)}}),
                    "hunyuan-moe.expert_weights_norm = false");
}

// The real-shape preset carries the released config, and what synth writes at that shape cut
// to a few layers (smaller dims here, the layout the same) loads back and runs.
TEST(HunyuanMoe, RealShapePreset) {
  const SynthShape s = synth_shape("hunyuan-a13b");
  EXPECT_EQ(s.arch, "hunyuan-moe");
  EXPECT_EQ(s.n_layer, 32);
  EXPECT_EQ(s.n_embd, 4096);
  EXPECT_EQ(s.n_head, 32);
  EXPECT_EQ(s.n_head_kv, 8);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.n_vocab, 128167);
  EXPECT_EQ(s.n_ff, 3072);
  EXPECT_EQ(s.n_expert, 64);
  EXPECT_EQ(s.n_expert_used, 8);
  EXPECT_EQ(s.n_ff_exp, 3072);
  EXPECT_EQ(s.n_ff_shexp, 3072);
  EXPECT_EQ(s.n_expert_shared, 1);
  EXPECT_EQ(s.n_layer_dense_lead, 0);
  EXPECT_FALSE(s.sigmoid);
  EXPECT_FALSE(s.select_bias);
  EXPECT_TRUE(s.norm_topk);
  EXPECT_TRUE(s.tied_output);
  // llama.cpp's converter: 1e4 * alpha^(d / (d - 2)) with alpha 1000, d 128.
  EXPECT_NEAR(s.rope_base, 1e4 * std::pow(1000.0, 128.0 / 126.0), 2.0);
  EXPECT_EQ(s.rms_eps, 1e-5f);
  SynthOptions o;
  o.shape = s;
  o.shape.n_layer = 2;
  o.shape.n_embd = 64;
  o.shape.n_head = 8;
  o.shape.n_head_kv = 2;
  o.shape.head_dim = 16;
  o.shape.n_vocab = 320;
  o.shape.n_expert = 16;
  o.shape.n_ff = 32;
  o.shape.n_ff_exp = 32;
  o.shape.n_ff_shexp = 32;
  const std::string path = test::scratch_path("hunyuan_moe_synth.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_EQ(c.n_expert_used, 8);
  EXPECT_EQ(c.qk_norm, QKNorm::kPerHeadAfterRope);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(m->file().find_tensor("output.weight"), nullptr);
  EXPECT_EQ(m->file().find_tensor("blk.1.ffn_up_shexp.weight")->ne[1], 32);
  const auto l = prefill_logits(*m);
  EXPECT_TRUE(std::all_of(l.begin(), l.end(), [](float x) { return std::isfinite(x); }));
}

}  // namespace
}  // namespace lynx
