// bailingmoe2 (inclusionAI Ling / Ring 2.0) against the independent NumPy reference
// (tests/reference/bailingmoe2_ref.py, written from HF's modeling_bailing_moe_v2.py; fixtures
// from make_bailingmoe2_fixtures.py): logits at every position by prefill, token by token and
// batched with another sequence, in F32 and Q8_0; the fused attn_qkv split into row views; the
// group limit, the routed scale, the selection bias and the shared expert each move the logits;
// every routing policy on its grouped sigmoid + bias router; bad files named; MTP blocks
// skipped; the real-shape preset.
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

const testing_util::FamilyFixtures kFx("bailingmoe2");
const std::string kDir = kFx.dir();
const char* const kF32 = "tiny-bailingmoe2-f32";
const char* const kQ8 = "tiny-bailingmoe2-q8_0";

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

TEST(BailingMoe2, ConfigFromTheFile) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, "bailingmoe2");
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_layer_nextn, 0);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.q_dim(), 96);
  EXPECT_EQ(c.kv_dim(), 48);
  EXPECT_EQ(c.rope_dim(), 12);
  EXPECT_EQ(c.rope, RopeType::kNeox);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.qk_norm, QKNorm::kPerHead);
  EXPECT_EQ(c.n_layer_dense_lead, 1);
  EXPECT_EQ(c.layer_kinds[0].ffn, FfnKind::kDense);
  EXPECT_EQ(c.layer_kinds[1].ffn, FfnKind::kMoeShared);
  EXPECT_EQ(c.n_ff, 64);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 3);
  EXPECT_EQ(c.n_ff_exp, 32);
  EXPECT_EQ(c.n_expert_shared, 1);
  EXPECT_EQ(c.n_ff_shexp, 32);
  EXPECT_EQ(c.gating.func, GatingFunc::kSigmoid);
  EXPECT_TRUE(c.gating.select_bias);
  EXPECT_TRUE(c.gating.norm_topk);
  EXPECT_EQ(c.gating.weights_scale, 2.5f);
  EXPECT_EQ(c.gating.n_group, 4);
  EXPECT_EQ(c.gating.n_group_used, 2);
  EXPECT_NE(m->layer(1).exp_probs_b, nullptr);
  EXPECT_NE(m->layer(0).q_norm, nullptr);
  EXPECT_TRUE(m->layer(1).up_shexp.present());
  EXPECT_EQ(m->layer(1).shexp_gate, nullptr);
}

// The fused attn_qkv is split at load into three row views of the file's tensor (q rows, then
// k, then v), not copies; the unpacked model keeps them in the mapping.
TEST(BailingMoe2, FusedQkvSplitIntoRowViews) {
  LoadOptions lo;
  lo.repack = false;
  lo.repack_float = false;
  auto m = Model::load(kDir + kF32 + std::string(".gguf"), lo);
  const gguf::TensorInfo* t = m->file().find_tensor("blk.1.attn_qkv.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne[0], 64);
  EXPECT_EQ(t->ne[1], 96 + 2 * 48);
  EXPECT_EQ(m->file().find_tensor("blk.1.attn_q.weight"), nullptr);
  const LayerWeights& l = m->layer(1);
  EXPECT_TRUE(l.qkv_fused);
  EXPECT_FALSE(l.wqkv.present());
  const auto* base = static_cast<const uint8_t*>(t->data);
  const size_t row = 64 * sizeof(float);
  EXPECT_EQ(l.wq.data, base);
  EXPECT_EQ(l.wk.data, base + 96 * row);
  EXPECT_EQ(l.wv.data, base + 144 * row);
  EXPECT_EQ(l.wq.rows, 96);
  EXPECT_EQ(l.wk.rows, 48);
  EXPECT_EQ(l.wv.rows, 48);
  EXPECT_EQ(l.wv.cols, 64);
}

// Every position's logits by prefill, token by token, and batched with another sequence.
TEST(BailingMoe2, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* name : {kF32, kQ8})
    testing_util::expect_goldens_at_every_position(kFx, name, kTol);
}

// The default path of the Q8_0 file (Q8_0 activations, integer products) stays near the exact
// reference and picks the same arg-max at every position.
TEST(BailingMoe2, IntegerPathNearTheGoldens) {
  testing_util::expect_integer_path_near_goldens(kFx, kQ8, 4e-2);
}

// Every routing policy runs a decode batch on the family's router (family_harness.h).
TEST(BailingMoe2, EveryPolicyRunsOnItsRouter) {
  testing_util::expect_every_policy_runs(kFx, kF32, 8);
}

// Copies a fixture, letting `edit` change metadata and `drop` remove tensors; `add` adds u32
// keys, `replace` gives F32 tensors other values (of the same size).
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Drop = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& fixture, const std::string& name, const KvEdit& edit,
                    const Drop& drop, const std::vector<std::pair<std::string, uint32_t>>& add = {},
                    const std::vector<std::pair<std::string, std::vector<float>>>& replace = {}) {
  testing_util::GgufEdit e{edit, {}, drop, nullptr};
  for (const auto& [k, v] : add) e.add.emplace_back(k, gguf::Value::u32(v));
  e.replace = [&replace](const gguf::TensorInfo& t) -> std::optional<testing_util::TensorData> {
    for (const auto& [tn, values] : replace) {
      if (tn == t.name && values.size() * sizeof(float) == t.n_bytes)
        return testing_util::f32_tensor(std::vector<int64_t>(t.ne, t.ne + t.n_dims), values);
    }
    return std::nullopt;
  };
  return kFx.rewrite(fixture, name, e);
}
const auto kAllKv = [](const std::string&, gguf::Value&) { return true; };
const auto kNoDrop = [](const gguf::TensorInfo&) { return false; };

// The group limit, the routed scale, the selection bias and the shared expert each move the
// logits: the goldens check them, not something the reference and the engine would share by
// accident. Without exp_probs_b (optional in llama.cpp) the file loads and chooses by sigmoid
// alone.
TEST(BailingMoe2, GroupsScaleBiasAndSharedExpertMatter) {
  const size_t V = 300, n = tokens().size();
  const auto want = golden(kF32, n * V);
  auto max_err = [&](const std::string& path) {
    auto m = Model::load(path);
    const auto got = prefill_logits(*m);
    double e = 0;
    for (size_t i = 0; i < n; ++i) {
      e = std::max(e, rel_err(std::span(got).subspan(i * V, V), &want[i * V], V));
    }
    return e;
  };
  auto set_u32 = [](const char* key, uint32_t val) {
    return [key, val](const std::string& k, gguf::Value& v) {
      if (k == key) v = gguf::Value::u32(val);
      return true;
    };
  };
  // All 4 groups open: the best 3 of 8 experts instead of the best 3 of the best 2 groups.
  const std::string no_limit =
      rewrite(kF32, "no_limit", set_u32("bailingmoe2.expert_group_used_count", 4), kNoDrop);
  EXPECT_GT(max_err(no_limit), 1e-3);
  const std::string scale1 = rewrite(
      kF32, "scale1",
      [](const std::string& k, gguf::Value& v) {
        if (k == "bailingmoe2.expert_weights_scale") v = gguf::Value::f32(1.f);
        return true;
      },
      kNoDrop);
  EXPECT_GT(max_err(scale1), 1e-3);
  // A large bias on experts 0 and 2 (two groups) makes them the choice of every token.
  const std::string biased = rewrite(kF32, "biased", kAllKv, kNoDrop, {},
                                     {{"blk.1.exp_probs_b.bias", {9, 0, 9, 0, 0, 0, 0, 0}}});
  EXPECT_GT(max_err(biased), 1e-3);
  const std::string no_bias = rewrite(kF32, "no_bias", kAllKv, [](const gguf::TensorInfo& t) {
    return t.name == "blk.1.exp_probs_b.bias";
  });
  auto nb = Model::load(no_bias);
  EXPECT_FALSE(nb->config().gating.select_bias);
  EXPECT_EQ(nb->layer(1).exp_probs_b, nullptr);
  const auto l = prefill_logits(*nb);
  EXPECT_TRUE(std::all_of(l.begin(), l.end(), [](float x) { return std::isfinite(x); }));
  // The shared expert's down projection zeroed: its output is gone.
  const gguf::File f = gguf::File::open(kDir + kF32 + ".gguf");
  const gguf::TensorInfo* d = f.find_tensor("blk.1.ffn_down_shexp.weight");
  ASSERT_NE(d, nullptr);
  const std::string no_shexp =
      rewrite(kF32, "no_shexp_out", kAllKv, kNoDrop, {},
              {{"blk.1.ffn_down_shexp.weight", std::vector<float>(d->n_bytes / 4, 0.f)}});
  EXPECT_GT(max_err(no_shexp), 1e-3);
}

TEST(BailingMoe2, BadFilesAreNamed) {
  auto drop = [](const char* name) {
    return [name](const gguf::TensorInfo& t) { return t.name == name; };
  };
  auto set_u32 = [](const char* key, uint32_t val) {
    return [key, val](const std::string& k, gguf::Value& v) {
      if (k == key) v = gguf::Value::u32(val);
      return true;
    };
  };
  expect_load_error(rewrite(kF32, "no_qkv", kAllKv, drop("blk.1.attn_qkv.weight")),
                    "missing tensor 'blk.1.attn_qkv.weight'");
  expect_load_error(rewrite(kF32, "no_qnorm", kAllKv, drop("blk.1.attn_q_norm.weight")),
                    "missing tensor 'blk.1.attn_q_norm.weight'");
  expect_load_error(rewrite(kF32, "no_knorm", kAllKv, drop("blk.0.attn_k_norm.weight")),
                    "missing tensor 'blk.0.attn_k_norm.weight'");
  expect_load_error(rewrite(kF32, "no_shexp", kAllKv, drop("blk.1.ffn_up_shexp.weight")),
                    "missing tensor 'blk.1.ffn_up_shexp.weight'");
  expect_load_error(rewrite(kF32, "no_down", kAllKv, drop("blk.1.ffn_down_exps.weight")),
                    "missing tensor 'blk.1.ffn_down_exps.weight'");
  expect_load_error(rewrite(kF32, "no_dense", kAllKv, drop("blk.0.ffn_gate.weight")),
                    "missing tensor 'blk.0.ffn_gate.weight'");
  // A wrong shape: 4 key/value heads say 96 + 2 x 96 fused rows, the file has 96 + 2 x 48.
  expect_load_error(
      rewrite(kF32, "kv4", set_u32("bailingmoe2.attention.head_count_kv", 4), kNoDrop),
      "tensor 'blk.0.attn_qkv.weight' has shape");
  // The shared expert is (expert_shared_feed_forward_length) x expert_shared_count wide.
  expect_load_error(
      rewrite(kF32, "shared2", set_u32("bailingmoe2.expert_shared_count", 2), kNoDrop),
      "tensor 'blk.1.ffn_gate_shexp.weight' has shape");
  expect_load_error(
      rewrite(kF32, "rot", set_u32("bailingmoe2.rope.dimension_count", 13), kNoDrop),
      "bailingmoe2.rope.dimension_count = 13 must be even and at most the head dimension 24");
  expect_load_error(
      rewrite(kF32, "rot_big", set_u32("bailingmoe2.rope.dimension_count", 26), kNoDrop),
      "bailingmoe2.rope.dimension_count = 26");
  expect_load_error(
      rewrite(kF32, "vlen", kAllKv, kNoDrop, {{"bailingmoe2.attention.value_length", 16}}),
      "inconsistent head dimensions: bailingmoe2.attention.value_length = 16");
  // Groups that do not divide the experts, or keep too few for k.
  expect_load_error(rewrite(kF32, "groups3", set_u32("bailingmoe2.expert_group_count", 3), kNoDrop),
                    "bailingmoe2.expert_group_count = 3");
  expect_load_error(
      rewrite(kF32, "groups_used1", set_u32("bailingmoe2.expert_group_used_count", 1), kNoDrop),
      "expert_group_used_count = 1 do not fit 3 of 8 experts");
  // Required keys, as llama.cpp reads them.
  for (const char* k : {"bailingmoe2.expert_shared_count", "bailingmoe2.expert_gating_func",
                        "bailingmoe2.expert_feed_forward_length"}) {
    expect_load_error(rewrite(
                          kF32, std::string("no_key_") + k,
                          [k](const std::string& key, gguf::Value&) { return key != k; }, kNoDrop),
                      k);
  }
  // gpt-oss's gating (softmax over the selected) is not this family's.
  expect_load_error(rewrite(kF32, "gating3", set_u32("bailingmoe2.expert_gating_func", 3), kNoDrop),
                    "bailingmoe2.expert_gating_func = 3 is out of range");
}

// expert_gating_func 1 (softmax) is run as written: other logits than the sigmoid file's.
TEST(BailingMoe2, SoftmaxGatingRunsAsWritten) {
  const std::string softmax = rewrite(
      kF32, "softmax",
      [](const std::string& k, gguf::Value& v) {
        if (k == "bailingmoe2.expert_gating_func") v = gguf::Value::u32(1);
        return true;
      },
      kNoDrop);
  auto a = Model::load(kDir + kF32 + std::string(".gguf"));
  auto s = Model::load(softmax);
  EXPECT_EQ(s->config().gating.func, GatingFunc::kSoftmax);
  const auto la = prefill_logits(*a), ls = prefill_logits(*s);
  EXPECT_FALSE(std::equal(la.begin(), la.end(), ls.begin()));
}

// The real-shape preset carries the released config, and what synth writes at that shape cut
// to a few layers (smaller dims here, the layout the same) loads back.
TEST(BailingMoe2, RealShapePreset) {
  const SynthShape s = synth_shape("ling-mini-2.0");
  EXPECT_EQ(s.arch, "bailingmoe2");
  EXPECT_EQ(s.n_layer, 20);
  EXPECT_EQ(s.n_nextn, 1);
  EXPECT_EQ(s.n_embd, 2048);
  EXPECT_EQ(s.n_head, 16);
  EXPECT_EQ(s.n_head_kv, 4);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.n_rot, 64);
  EXPECT_EQ(s.n_vocab, 157184);
  EXPECT_EQ(s.n_ff, 5120);
  EXPECT_EQ(s.n_layer_dense_lead, 1);
  EXPECT_EQ(s.n_expert, 256);
  EXPECT_EQ(s.n_expert_used, 8);
  EXPECT_EQ(s.n_ff_exp, 512);
  EXPECT_EQ(s.n_expert_shared, 1);
  EXPECT_EQ(s.n_group, 8);
  EXPECT_EQ(s.n_group_used, 4);
  EXPECT_TRUE(s.sigmoid);
  EXPECT_TRUE(s.select_bias);
  EXPECT_TRUE(s.norm_topk);
  EXPECT_EQ(s.weights_scale, 2.5f);
  EXPECT_EQ(s.rope_base, 600000.f);
  EXPECT_EQ(s.rms_eps, 1e-6f);
  // Lynx's default (alpha, beta) from k/N = 8/256 (docs/routing.md's lookup).
  const auto ab = routing::lynx_default_alpha_beta(s.n_expert_used, s.n_expert);
  EXPECT_GT(ab.alpha, 0.f);
  // What synth writes at that shape cut to a few layers (smaller dims, the layout the same,
  // the MTP block included) loads back, the MTP block skipped.
  SynthOptions o;
  o.shape = s;
  o.shape.n_layer = 3;
  o.shape.n_embd = 64;
  o.shape.n_head = 4;
  o.shape.n_head_kv = 2;
  o.shape.head_dim = 16;
  o.shape.n_rot = 8;
  o.shape.n_vocab = 300;
  o.shape.n_ff = 48;
  o.shape.n_expert = 32;
  o.shape.n_ff_exp = 16;
  const std::string path = test::scratch_path("bailingmoe2_synth.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_layer_nextn, 1);
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ(c.rope_dim(), 8);
  EXPECT_EQ(c.qk_norm, QKNorm::kPerHead);
  EXPECT_EQ(c.n_expert_used, 8);
  EXPECT_EQ(c.n_ff_shexp, 16);
  EXPECT_EQ(c.gating.n_group, 8);
  EXPECT_EQ(c.gating.n_group_used, 4);
  EXPECT_EQ(c.gating.weights_scale, 2.5f);
  EXPECT_TRUE(c.gating.norm_topk);
  EXPECT_EQ(c.gating.func, GatingFunc::kSigmoid);
  EXPECT_EQ(c.layer_kinds[0].ffn, FfnKind::kDense);
  EXPECT_EQ(c.layer_kinds[2].ffn, FfnKind::kMoeShared);
  EXPECT_EQ(m->file().find_tensor("blk.0.attn_qkv.weight")->ne[1], 64 + 2 * 32);
  EXPECT_EQ(m->file().find_tensor("blk.0.attn_q_norm.weight")->ne[0], 16);
  EXPECT_EQ(m->file().find_tensor("blk.0.ffn_up.weight")->ne[1], 48);
  EXPECT_EQ(m->file().find_tensor("blk.2.ffn_up_shexp.weight")->ne[1], 16);
  EXPECT_NE(m->file().find_tensor("blk.2.exp_probs_b.bias"), nullptr);
  // The MTP block (blk.3) is in the file, whole, and never run.
  EXPECT_NE(m->file().find_tensor("blk.3.nextn.eh_proj.weight"), nullptr);
  EXPECT_NE(m->file().find_tensor("blk.3.layer_output_norm.weight"), nullptr);
  EXPECT_NE(m->file().find_tensor("blk.3.ffn_up_exps.weight"), nullptr);
  const auto l = prefill_logits(*m);
  EXPECT_TRUE(std::all_of(l.begin(), l.end(), [](float x) { return std::isfinite(x); }));
}

}  // namespace
}  // namespace lynx
