// glm4moe (GLM-4.5 / GLM-4.5-Air) against the independent NumPy reference
// (tests/reference/glm4moe_ref.py; fixtures from make_glm4moe_fixtures.py): logits at every
// position by prefill, token by token and batched with another sequence, with and without
// per-head q/k norms; the next-token-prediction block is skipped (the same logits with and
// without it); partial rotary dims really are partial; bad files named; the real-shape presets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "../scratch.h"
#include "family_harness.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/weights.h"
#include "routing/lynx.h"

namespace lynx {
namespace {

const testing_util::FamilyFixtures kFx("glm4moe");
const std::string kDir = kFx.dir();
const char* const kAir = "tiny-glm4moe";
const char* const kQkNorm = "tiny-glm4moe-qknorm";

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

// Every position's logits by prefill ([n x V]).
std::vector<float> prefill_logits(const Model& m) {
  return kFx.prefill(m);
}

void check_goldens(const Model& m, const std::string& shape) {
  testing_util::expect_goldens_at_every_position(kFx, m, shape, kTol);
}

TEST(Glm4Moe, ConfigFromTheFile) {
  auto m = Model::load(kDir + kAir + std::string(".gguf"));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, "glm4moe");
  EXPECT_EQ(c.n_layer, 2);  // block_count 3 = 2 + nextn_predict_layers 1
  EXPECT_EQ(c.n_layer_nextn, 1);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_rot, 32);
  EXPECT_EQ(c.rope_dim(), 32);
  EXPECT_EQ(c.rope, RopeType::kNeox);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.qk_norm, QKNorm::kNone);
  EXPECT_EQ(c.layer_kinds[0].ffn, FfnKind::kDense);  // leading_dense_block_count = 1
  EXPECT_EQ(c.layer_kinds[1].ffn, FfnKind::kMoeShared);
  EXPECT_EQ(c.gating.func, GatingFunc::kSigmoid);
  EXPECT_TRUE(c.gating.select_bias);
  EXPECT_TRUE(c.gating.norm_topk);
  EXPECT_EQ(c.gating.weights_scale, 1.f);
  EXPECT_NE(m->layer(1).exp_probs_b, nullptr);
  EXPECT_NE(m->layer(0).bq, nullptr);
  auto q = Model::load(kDir + kQkNorm + std::string(".gguf"));
  EXPECT_EQ(q->config().qk_norm, QKNorm::kPerHead);
  EXPECT_EQ(q->config().gating.weights_scale, 2.5f);
  EXPECT_NE(q->layer(1).q_norm, nullptr);
}

TEST(Glm4Moe, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* shape : {kAir, kQkNorm}) {
    auto m = Model::load(kDir + shape + ".gguf");
    check_goldens(*m, shape);
  }
}

// The default path (Q8_0 activations, integer products) stays near the exact reference and
// picks the same arg-max at every position (measured: 1.8e-2 and 2.0e-2 of the largest logit).
TEST(Glm4Moe, IntegerPathNearTheGoldens) {
  for (const char* shape : {kAir, kQkNorm}) {
    testing_util::expect_integer_path_near_goldens(kFx, shape, 4e-2);
  }
}

// Every routing policy runs a decode batch on its sigmoid + bias router (family_harness.h).
TEST(Glm4Moe, EveryPolicyRunsOnTheModel) {
  testing_util::expect_every_policy_runs(kFx, kAir);
}

// Copies a fixture, letting `edit` change metadata and `drop` remove tensors.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Drop = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& shape, const std::string& name, const KvEdit& edit,
                    const Drop& drop) {
  gguf::File f = gguf::File::open(kDir + shape + ".gguf");
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (edit(kv.key, v)) w.set(kv.key, v);
  }
  for (const auto& t : f.tensors()) {
    if (drop(t)) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
  }
  const std::string path = test::scratch_path("glm4moe_" + name + ".gguf");
  w.write(path);
  return path;
}
const auto kAllKv = [](const std::string&, gguf::Value&) { return true; };
const auto kNoDrop = [](const gguf::TensorInfo&) { return false; };

// The fixture has a NextN block (blk.2: a full MoE layer plus nextn.*). Without it (block_count
// 2, no nextn_predict_layers, no blk.2 tensors) the model is the same and so are its logits,
// bit for bit: the block is skipped, not run.
TEST(Glm4Moe, NextNBlockIsSkippedCleanly) {
  for (const char* shape : {kAir, kQkNorm}) {
    gguf::File src = gguf::File::open(kDir + shape + ".gguf");
    ASSERT_NE(src.find_tensor("blk.2.nextn.eh_proj.weight"), nullptr);
    ASSERT_NE(src.find_tensor("blk.2.ffn_up_exps.weight"), nullptr);
    auto with = Model::load(kDir + shape + ".gguf");
    const std::string path = rewrite(
        shape, std::string("no_nextn_") + shape,
        [](const std::string& k, gguf::Value& v) {
          if (k == "glm4moe.nextn_predict_layers") return false;
          if (k == "glm4moe.block_count") v = gguf::Value::u32(2);
          return true;
        },
        [](const gguf::TensorInfo& t) { return t.name.rfind("blk.2.", 0) == 0; });
    auto without = Model::load(path);
    EXPECT_EQ(without->config().n_layer, 2);
    EXPECT_EQ(without->config().n_layer_nextn, 0);
    const auto a = prefill_logits(*with), b = prefill_logits(*without);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << shape;
  }
}

// With every dim rotated (rope.dimension_count = head_dim) the logits change: the goldens
// check the partial rotation, not a rotation the reference and engine would share by accident.
TEST(Glm4Moe, PartialRotaryMatters) {
  const std::string path = rewrite(
      kAir, "full_rope",
      [](const std::string& k, gguf::Value& v) {
        if (k == "glm4moe.rope.dimension_count") v = gguf::Value::u32(64);
        return true;
      },
      kNoDrop);
  auto full = Model::load(path);
  EXPECT_EQ(full->config().rope_dim(), 64);
  const auto toks = tokens();
  const size_t V = size_t(full->config().n_vocab), n = toks.size();
  const auto want = golden(kAir, n * V);
  const auto got = prefill_logits(*full);
  EXPECT_GT(rel_err(std::span(got).subspan((n - 1) * V, V), &want[(n - 1) * V], V), 1e-3);
}

TEST(Glm4Moe, BadFilesAreNamed) {
  auto drop = [](const char* name) {
    return [name](const gguf::TensorInfo& t) { return t.name == name; };
  };
  auto set_u32 = [](const char* key, uint32_t val) {
    return [key, val](const std::string& k, gguf::Value& v) {
      if (k == key) v = gguf::Value::u32(val);
      return true;
    };
  };
  expect_load_error(rewrite(kAir, "no_bias", kAllKv, drop("blk.1.attn_k.bias")),
                    "missing tensor 'blk.1.attn_k.bias'");
  expect_load_error(rewrite(kAir, "no_probs_b", kAllKv, drop("blk.1.exp_probs_b.bias")),
                    "missing tensor 'blk.1.exp_probs_b.bias'");
  expect_load_error(rewrite(kAir, "no_post_norm", kAllKv, drop("blk.0.post_attention_norm.weight")),
                    "missing tensor 'blk.0.post_attention_norm.weight'");
  expect_load_error(rewrite(kAir, "no_shexp", kAllKv, drop("blk.1.ffn_down_shexp.weight")),
                    "missing tensor 'blk.1.ffn_down_shexp.weight'");
  // q/k norms in blk.0 make them required in every layer.
  expect_load_error(rewrite(kQkNorm, "no_knorm", kAllKv, drop("blk.1.attn_k_norm.weight")),
                    "missing tensor 'blk.1.attn_k_norm.weight'");
  // A wrong shape: the head count says 8 heads of 64, attn_q has 4.
  expect_load_error(rewrite(kAir, "heads", set_u32("glm4moe.attention.head_count", 8), kNoDrop),
                    "tensor 'blk.0.attn_q.weight' has shape");
  // Inconsistent head dimensions: value heads of another size than key heads.
  expect_load_error(rewrite(kAir, "vlen", set_u32("glm4moe.attention.value_length", 32), kNoDrop),
                    "inconsistent head dimensions: glm4moe.attention.value_length = 32");
  // More rotary dims than a head has.
  expect_load_error(
      rewrite(kAir, "rot", set_u32("glm4moe.rope.dimension_count", 96), kNoDrop),
      "glm4moe.rope.dimension_count = 96 must be even and at most the head dimension 64");
  // The NextN count must leave a trunk.
  expect_load_error(rewrite(kAir, "nextn", set_u32("glm4moe.nextn_predict_layers", 3), kNoDrop),
                    "glm4moe.nextn_predict_layers = 3 is out of range");
  expect_load_error(
      rewrite(
          kAir, "no_shared_count",
          [](const std::string& k, gguf::Value&) { return k != "glm4moe.expert_shared_count"; },
          kNoDrop),
      "glm4moe.expert_shared_count");
}

// The real-shape presets carry the released configs, and what synth writes loads back.
TEST(Glm4Moe, RealShapePresets) {
  const SynthShape air = synth_shape("glm-4.5-air"), big = synth_shape("glm-4.5");
  EXPECT_EQ(air.arch, "glm4moe");
  EXPECT_EQ(air.n_layer, 46);
  EXPECT_EQ(air.n_nextn, 1);
  EXPECT_EQ(air.n_rot, 64);
  EXPECT_EQ(air.head_dim, 128);
  EXPECT_FALSE(air.qk_norm);
  EXPECT_EQ(air.n_expert, 128);
  EXPECT_EQ(air.n_expert_used, 8);
  EXPECT_EQ(air.weights_scale, 1.f);
  EXPECT_TRUE(big.qk_norm);
  EXPECT_EQ(big.n_expert, 160);
  EXPECT_EQ(big.n_layer_dense_lead, 3);
  EXPECT_EQ(big.weights_scale, 2.5f);
  // Lynx's default (alpha, beta) for both (k/N lookup, docs/routing.md): the nearest published
  // model is Qwen3 (8 of 128): (3, 2).
  for (const SynthShape& s : {air, big}) {
    const auto ab = routing::lynx_default_alpha_beta(s.n_expert_used, s.n_expert);
    EXPECT_EQ(ab.alpha, 3.f) << s.name;
    EXPECT_EQ(ab.beta, 2.f) << s.name;
  }
  // The GLM-4.5 layout (q/k norms, 3 dense layers, NextN) at a tiny size writes and loads.
  SynthOptions o;
  o.shape = big;
  o.shape.n_layer = 4;
  o.shape.n_embd = 128;
  o.shape.n_head = 4;
  o.shape.n_head_kv = 2;
  o.shape.head_dim = 32;
  o.shape.n_rot = 16;
  o.shape.n_vocab = 300;
  o.shape.n_ff = 64;
  o.shape.n_expert = 8;
  o.shape.n_ff_exp = 32;
  const std::string path = test::scratch_path("glm4moe_synth.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.n_layer_nextn, 1);
  EXPECT_EQ(c.qk_norm, QKNorm::kPerHead);
  EXPECT_EQ(c.layer_kinds[2].ffn, FfnKind::kDense);
  EXPECT_EQ(c.layer_kinds[3].ffn, FfnKind::kMoeShared);
  EXPECT_EQ(c.gating.weights_scale, 2.5f);
  EXPECT_NE(m->file().find_tensor("blk.4.nextn.eh_proj.weight"), nullptr);
  // A family without NextN blocks refuses to write one.
  SynthOptions bad;
  bad.shape = synth_shape("tiny-moe");
  bad.shape.n_nextn = 1;
  EXPECT_THROW(write_synth_model(bad, test::scratch_path("glm4moe_bad_nextn.gguf")), Error);
}

}  // namespace
}  // namespace lynx
