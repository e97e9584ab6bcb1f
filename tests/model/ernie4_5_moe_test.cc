// ernie4_5-moe (ERNIE-4.5-21B-A3B / 300B-A47B) against the independent NumPy reference
// (tests/reference/ernie4_5_moe_ref.py, written from HF's modeling_ernie4_5_moe.py; fixtures from
// make_ernie4_5_moe_fixtures.py): logits at every position by prefill, token by token and
// batched with another sequence, in F32 and Q8_0 (a dense layer, then MoE layers with shared
// experts, softmax + selection bias, tied embeddings); the selection bias and the shared expert
// really take part; every routing policy on its router; the MoE layer pattern of
// interleave_moe_layer_step; bad files named; the real-shape preset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

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

const testing_util::FamilyFixtures kFx("ernie4_5-moe");
const std::string kDir = kFx.dir();
const char* const kF32 = "tiny-ernie4_5-moe-f32";
const char* const kQ8 = "tiny-ernie4_5-moe-q8_0";

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

TEST(Ernie45Moe, ConfigFromTheFile) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, "ernie4_5-moe");
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ(c.rope_dim(), 16);
  EXPECT_EQ(c.rope, RopeType::kNorm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.qk_norm, QKNorm::kNone);
  EXPECT_EQ(c.n_layer_dense_lead, 1);
  EXPECT_EQ(c.n_moe_layer_step, 1);
  EXPECT_EQ(c.layer_kinds[0].ffn, FfnKind::kDense);
  EXPECT_EQ(c.layer_kinds[1].ffn, FfnKind::kMoeShared);
  EXPECT_EQ(c.layer_kinds[2].ffn, FfnKind::kMoeShared);
  EXPECT_EQ(c.n_ff, 64);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 3);
  EXPECT_EQ(c.n_ff_exp, 32);
  EXPECT_EQ(c.n_ff_shexp, 64);
  EXPECT_EQ(c.gating.func, GatingFunc::kSoftmax);
  EXPECT_TRUE(c.gating.select_bias);
  EXPECT_TRUE(c.gating.norm_topk);
  EXPECT_EQ(c.gating.weights_scale, 1.f);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(m->layer(0).exp_probs_b, nullptr);
  EXPECT_NE(m->layer(1).exp_probs_b, nullptr);
  EXPECT_TRUE(m->layer(0).ffn_up.present());
  EXPECT_TRUE(m->layer(2).up_shexp.present());
  EXPECT_EQ(m->layer(2).shexp_gate, nullptr);
}

// Every position's logits by prefill, token by token, and batched with another sequence.
TEST(Ernie45Moe, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* name : {kF32, kQ8})
    testing_util::expect_goldens_at_every_position(kFx, name, kTol);
}

// The default path of the Q8_0 file (Q8_0 activations, integer products) stays near the exact
// reference and picks the same arg-max at every position.
TEST(Ernie45Moe, IntegerPathNearTheGoldens) {
  testing_util::expect_integer_path_near_goldens(kFx, kQ8, 6e-2);
}

// Every routing policy runs a decode batch on the family's router (family_harness.h).
TEST(Ernie45Moe, EveryPolicyRunsOnItsRouter) {
  testing_util::expect_every_policy_runs(kFx, kF32, 8);
}

// Copies a fixture, letting `edit` change or drop metadata, `drop` remove tensors and `add`
// add keys.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Drop = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& fixture, const std::string& name, const KvEdit& edit,
                    const Drop& drop,
                    const std::vector<std::pair<std::string, gguf::Value>>& add = {}) {
  return kFx.rewrite(fixture, name, testing_util::GgufEdit{edit, add, drop, nullptr});
}
const auto kAllKv = [](const std::string&, gguf::Value&) { return true; };
const auto kNoDrop = [](const gguf::TensorInfo&) { return false; };

// Drops and edits that must change the logits: without the selection bias (exp_probs_b) the
// choice is the plain softmax top-k, without the shared expert (and its key) its output is
// missing; each moves the last position away from the goldens, so they check both.
TEST(Ernie45Moe, SelectionBiasAndSharedExpertTakePart) {
  const size_t n = tokens().size();
  const auto want = golden(kF32, n * 300);
  auto last_err = [&](const std::string& path) {
    auto m = Model::load(path);
    const auto got = prefill_logits(*m);
    return rel_err(std::span(got).subspan((n - 1) * 300, 300), &want[(n - 1) * 300], 300);
  };
  const std::string no_bias = rewrite(kF32, "no_bias", kAllKv, [](const gguf::TensorInfo& t) {
    return t.name.find("exp_probs_b") != std::string::npos;
  });
  EXPECT_FALSE(Model::load(no_bias)->config().gating.select_bias);
  EXPECT_GT(last_err(no_bias), 1e-4);
  const std::string no_shexp = rewrite(
      kF32, "no_shexp",
      [](const std::string& k, gguf::Value&) {
        return k != "ernie4_5-moe.expert_shared_feed_forward_length";
      },
      [](const gguf::TensorInfo& t) { return t.name.find("_shexp") != std::string::npos; });
  EXPECT_EQ(Model::load(no_shexp)->config().layer_kinds[1].ffn, FfnKind::kMoe);
  EXPECT_GT(last_err(no_shexp), 1e-4);
}

// interleave_moe_layer_step: from leading_dense_block_count on, layer il is MoE when
// (il + 1) % step == 0 (llama.cpp's and HF's rule). A synth file with step 2 after one dense
// layer has MoE layers 1, 3, 5 and dense 0, 2, 4, and runs.
TEST(Ernie45Moe, InterleavedMoeLayers) {
  SynthOptions o;
  o.shape = synth_shape("tiny-ernie4_5-moe");
  o.shape.n_layer = 6;
  o.shape.moe_layer_step = 2;
  const std::string path = test::scratch_path("ernie4_5_moe_step2.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_moe_layer_step, 2);
  for (int il = 0; il < 6; ++il) {
    EXPECT_EQ(c.layer_kinds[size_t(il)].ffn, il % 2 ? FfnKind::kMoeShared : FfnKind::kDense) << il;
  }
  EXPECT_EQ(m->file().find_tensor("blk.2.ffn_gate_inp.weight"), nullptr);
  EXPECT_NE(m->file().find_tensor("blk.2.ffn_up.weight"), nullptr);
  const auto l = prefill_logits(*m);
  EXPECT_TRUE(std::all_of(l.begin(), l.end(), [](float x) { return std::isfinite(x); }));
  // The fixture read with step 2 wants layer 2 dense: its ffn_up.weight is missing.
  expect_load_error(rewrite(
                        kF32, "step2",
                        [](const std::string& k, gguf::Value& v) {
                          if (k == "ernie4_5-moe.interleave_moe_layer_step")
                            v = gguf::Value::u32(2);
                          return true;
                        },
                        kNoDrop),
                    "missing tensor 'blk.2.ffn_gate.weight'");
}

TEST(Ernie45Moe, BadFilesAreNamed) {
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
  // The selection bias of the first MoE layer makes it required in the others.
  expect_load_error(rewrite(kF32, "no_probs_b", kAllKv, drop("blk.2.exp_probs_b.bias")),
                    "missing tensor 'blk.2.exp_probs_b.bias'");
  expect_load_error(rewrite(kF32, "no_down", kAllKv, drop("blk.1.ffn_down_exps.weight")),
                    "missing tensor 'blk.1.ffn_down_exps.weight'");
  expect_load_error(rewrite(kF32, "no_dense", kAllKv, drop("blk.0.ffn_down.weight")),
                    "missing tensor 'blk.0.ffn_down.weight'");
  expect_load_error(rewrite(kF32, "no_shexp", kAllKv, drop("blk.2.ffn_gate_shexp.weight")),
                    "missing tensor 'blk.2.ffn_gate_shexp.weight'");
  // Shared-expert tensors without the key that sizes them.
  expect_load_error(rewrite(kF32, "no_shexp_key",
                            without("ernie4_5-moe.expert_shared_feed_forward_length"), kNoDrop),
                    "tensor 'blk.1.ffn_up_shexp.weight' without "
                    "ernie4_5-moe.expert_shared_feed_forward_length");
  // A wrong shape: the head count says 8 heads of 16, attn_q has 4.
  expect_load_error(
      rewrite(kF32, "heads", set_u32("ernie4_5-moe.attention.head_count", 8), kNoDrop),
      "tensor 'blk.0.attn_q.weight' has shape");
  expect_load_error(
      rewrite(kF32, "ffexp", set_u32("ernie4_5-moe.expert_feed_forward_length", 64), kNoDrop),
      "tensor 'blk.1.ffn_gate_exps.weight' has shape");
  // The layer pattern's keys are required, the step at least 1, and some layer must be MoE.
  expect_load_error(
      rewrite(kF32, "no_lead", without("ernie4_5-moe.leading_dense_block_count"), kNoDrop),
      "ernie4_5-moe.leading_dense_block_count");
  expect_load_error(
      rewrite(kF32, "no_step", without("ernie4_5-moe.interleave_moe_layer_step"), kNoDrop),
      "ernie4_5-moe.interleave_moe_layer_step");
  expect_load_error(
      rewrite(kF32, "step0", set_u32("ernie4_5-moe.interleave_moe_layer_step", 0), kNoDrop),
      "ernie4_5-moe.interleave_moe_layer_step = 0 is out of range");
  expect_load_error(
      rewrite(kF32, "all_dense", set_u32("ernie4_5-moe.leading_dense_block_count", 3), kNoDrop),
      "ernie4_5-moe model without an MoE layer");
  // Partial rope and value heads of another size are not this family's.
  expect_load_error(rewrite(kF32, "rot", set_u32("ernie4_5-moe.rope.dimension_count", 8), kNoDrop),
                    "ernie4_5-moe.rope.dimension_count = 8 differs from the head dimension 16");
  expect_load_error(
      rewrite(kF32, "vlen", set_u32("ernie4_5-moe.attention.value_length", 8), kNoDrop),
      "inconsistent head dimensions: ernie4_5-moe.attention.value_length = 8");
  // llama.cpp routes this family by softmax whatever the key says: another value is refused.
  expect_load_error(rewrite(kF32, "sigmoid", kAllKv, kNoDrop,
                            {{"ernie4_5-moe.expert_gating_func", gguf::Value::u32(2)}}),
                    "ernie4_5-moe.expert_gating_func = 2: ernie4_5-moe routes by softmax (1) only");
}

// The real-shape preset carries the released config, and what synth writes at that shape cut
// to a few layers (smaller dims here, the layout the same) loads back.
TEST(Ernie45Moe, RealShapePreset) {
  const SynthShape s = synth_shape("ernie4_5-moe");
  EXPECT_EQ(s.arch, "ernie4_5-moe");
  EXPECT_EQ(s.n_layer, 28);
  EXPECT_EQ(s.n_embd, 2560);
  EXPECT_EQ(s.n_head, 20);
  EXPECT_EQ(s.n_head_kv, 4);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.n_vocab, 103424);
  EXPECT_EQ(s.n_ff, 12288);
  EXPECT_EQ(s.n_expert, 64);
  EXPECT_EQ(s.n_expert_used, 6);
  EXPECT_EQ(s.n_ff_exp, 1536);
  EXPECT_EQ(s.n_ff_shexp, 3072);
  EXPECT_EQ(s.n_expert_shared, 2);
  EXPECT_EQ(s.n_layer_dense_lead, 1);
  EXPECT_EQ(s.moe_layer_step, 1);
  EXPECT_FALSE(s.sigmoid);
  EXPECT_TRUE(s.select_bias);
  EXPECT_TRUE(s.norm_topk);
  EXPECT_TRUE(s.tied_output);
  EXPECT_EQ(s.rope_base, 5e5f);
  EXPECT_EQ(s.rms_eps, 1e-5f);
  const auto ab = routing::lynx_default_alpha_beta(s.n_expert_used, s.n_expert);
  EXPECT_GT(ab.alpha, 0.f);
  SynthOptions o;
  o.shape = s;
  o.shape.n_layer = 3;
  o.shape.n_embd = 64;
  o.shape.n_head = 5;
  o.shape.n_head_kv = 1;
  o.shape.head_dim = 16;
  o.shape.n_vocab = 300;
  o.shape.n_expert = 16;
  o.shape.n_ff_exp = 16;
  o.shape.n_ff_shexp = 32;
  o.shape.n_ff = 48;
  const std::string path = test::scratch_path("ernie4_5_moe_synth.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.q_dim(), 80);
  EXPECT_EQ(c.rope_dim(), 16);
  EXPECT_EQ(c.n_expert_used, 6);
  EXPECT_EQ(c.gating.func, GatingFunc::kSoftmax);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(m->file().find_tensor("output.weight"), nullptr);
  EXPECT_EQ(c.layer_kinds[0].ffn, FfnKind::kDense);
  EXPECT_EQ(m->file().find_tensor("blk.2.ffn_up_shexp.weight")->ne[1], 32);
  EXPECT_NE(m->file().find_tensor("blk.2.exp_probs_b.bias"), nullptr);
}

}  // namespace
}  // namespace lynx
