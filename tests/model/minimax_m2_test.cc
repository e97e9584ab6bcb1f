// minimax-m2 (MiniMax-M2 / M2.1 / M2.5) against the independent NumPy reference
// (tests/reference/minimax_m2_ref.py, written from HF's modeling_minimax_m2.py; fixtures from
// make_minimax_m2_fixtures.py): logits at every position by prefill, token by token and batched
// with another sequence, in F32 and Q8_0; the q/k norms really are over the whole row and the
// rotary dims really are partial; every routing policy on its sigmoid + bias router; bad files
// named; a missing expert_gating_func is sigmoid; the real-shape preset.
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

const testing_util::FamilyFixtures kFx("minimax-m2");
const std::string kDir = kFx.dir();
const char* const kF32 = "tiny-minimax-m2-f32";
const char* const kQ8 = "tiny-minimax-m2-q8_0";

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

TEST(MinimaxM2, ConfigFromTheFile) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, "minimax-m2");
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_EQ(c.kv_dim(), 64);
  EXPECT_EQ(c.rope_dim(), 16);
  EXPECT_EQ(c.rope, RopeType::kNeox);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.qk_norm, QKNorm::kFull);
  for (int il = 0; il < c.n_layer; ++il) EXPECT_EQ(c.layer_kinds[size_t(il)].ffn, FfnKind::kMoe);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 4);
  EXPECT_EQ(c.n_ff_shexp, 0);
  EXPECT_EQ(c.gating.func, GatingFunc::kSigmoid);
  EXPECT_TRUE(c.gating.select_bias);
  EXPECT_TRUE(c.gating.norm_topk);
  EXPECT_EQ(c.gating.weights_scale, 1.f);
  EXPECT_NE(m->layer(1).exp_probs_b, nullptr);
  EXPECT_NE(m->layer(1).q_norm, nullptr);
  EXPECT_FALSE(m->layer(0).up_shexp.present());
}

// Every position's logits by prefill, token by token, and batched with another sequence.
TEST(MinimaxM2, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* name : {kF32, kQ8})
    testing_util::expect_goldens_at_every_position(kFx, name, kTol);
}

// The default path of the Q8_0 file (Q8_0 activations, integer products) stays near the exact
// reference and picks the same arg-max at every position.
TEST(MinimaxM2, IntegerPathNearTheGoldens) {
  testing_util::expect_integer_path_near_goldens(kFx, kQ8, 4e-2);
}

// Every routing policy runs a decode batch on the family's router (family_harness.h).
TEST(MinimaxM2, EveryPolicyRunsOnItsRouter) {
  testing_util::expect_every_policy_runs(kFx, kF32, 8);
}

// Copies a fixture, letting `edit` change metadata and `drop` remove tensors; `replace` may
// give a tensor other contents and shape.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Drop = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& fixture, const std::string& name, const KvEdit& edit,
                    const Drop& drop,
                    const std::vector<std::pair<std::string, int64_t>>& shrink = {}) {
  testing_util::GgufEdit e{edit, {}, drop, nullptr};
  e.replace = [&shrink](const gguf::TensorInfo& t) -> std::optional<testing_util::TensorData> {
    for (const auto& [tn, cols] : shrink) {
      if (tn != t.name) continue;  // an F32 vector cut to its first `cols` values
      std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
      ne[0] = cols;
      return testing_util::TensorData{ne, std::vector<uint8_t>(t.data, t.data + cols * 4)};
    }
    return std::nullopt;
  };
  return kFx.rewrite(fixture, name, e);
}
const auto kAllKv = [](const std::string&, gguf::Value&) { return true; };
const auto kNoDrop = [](const gguf::TensorInfo&) { return false; };

// With every dim rotated (rope.dimension_count = head_dim) the logits change: the goldens
// check the partial rotation, not one the reference and engine would share by accident.
TEST(MinimaxM2, PartialRotaryMatters) {
  const std::string path = rewrite(
      kF32, "full_rope",
      [](const std::string& k, gguf::Value& v) {
        if (k == "minimax-m2.rope.dimension_count") v = gguf::Value::u32(32);
        return true;
      },
      kNoDrop);
  auto full = Model::load(path);
  EXPECT_EQ(full->config().rope_dim(), 32);
  const size_t V = size_t(full->config().n_vocab), n = tokens().size();
  const auto want = golden(kF32, n * V);
  const auto got = prefill_logits(*full);
  EXPECT_GT(rel_err(std::span(got).subspan((n - 1) * V, V), &want[(n - 1) * V], V), 1e-3);
}

// The q/k norms are one RMSNorm over the whole projected row (the goldens, from HF's code,
// check the arithmetic); a file with per-head norm weights (head_dim values, Qwen3's layout) is
// refused, not run with the weights repeated.
TEST(MinimaxM2, PerHeadQkNormWeightsAreRefused) {
  const std::string path =
      rewrite(kF32, "perhead_qnorm", kAllKv, kNoDrop, {{"blk.0.attn_q_norm.weight", 32}});
  try {
    Model::load(path);
    ADD_FAILURE() << "a per-head attn_q_norm loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q_norm.weight"), std::string::npos)
        << e.what();
  }
}

TEST(MinimaxM2, BadFilesAreNamed) {
  auto drop = [](const char* name) {
    return [name](const gguf::TensorInfo& t) { return t.name == name; };
  };
  auto set_u32 = [](const char* key, uint32_t val) {
    return [key, val](const std::string& k, gguf::Value& v) {
      if (k == key) v = gguf::Value::u32(val);
      return true;
    };
  };
  expect_load_error(rewrite(kF32, "no_qnorm", kAllKv, drop("blk.1.attn_q_norm.weight")),
                    "missing tensor 'blk.1.attn_q_norm.weight'");
  expect_load_error(rewrite(kF32, "no_knorm", kAllKv, drop("blk.0.attn_k_norm.weight")),
                    "missing tensor 'blk.0.attn_k_norm.weight'");
  expect_load_error(rewrite(kF32, "no_probs_b", kAllKv, drop("blk.1.exp_probs_b.bias")),
                    "missing tensor 'blk.1.exp_probs_b.bias'");
  expect_load_error(rewrite(kF32, "no_down", kAllKv, drop("blk.0.ffn_down_exps.weight")),
                    "missing tensor 'blk.0.ffn_down_exps.weight'");
  // A wrong shape: the head count says 8 heads of 32, attn_q has 4.
  expect_load_error(rewrite(kF32, "heads", set_u32("minimax-m2.attention.head_count", 8), kNoDrop),
                    "tensor 'blk.0.attn_q.weight' has shape");
  // Experts of another width than the metadata says, and two widths that disagree.
  expect_load_error(rewrite(
                        kF32, "ffexp",
                        [](const std::string& k, gguf::Value& v) {
                          if (k == "minimax-m2.expert_feed_forward_length" ||
                              k == "minimax-m2.feed_forward_length")
                            v = gguf::Value::u32(64);
                          return true;
                        },
                        kNoDrop),
                    "tensor 'blk.0.ffn_gate_exps.weight' has shape");
  expect_load_error(
      rewrite(kF32, "ff_mismatch", set_u32("minimax-m2.expert_feed_forward_length", 64), kNoDrop),
      "minimax-m2.expert_feed_forward_length = 64 differs from minimax-m2.feed_forward_length = "
      "32");
  // More rotary dims than a head has.
  expect_load_error(
      rewrite(kF32, "rot", set_u32("minimax-m2.rope.dimension_count", 48), kNoDrop),
      "minimax-m2.rope.dimension_count = 48 must be even and at most the head dimension 32");
  expect_load_error(
      rewrite(kF32, "vlen", set_u32("minimax-m2.attention.value_length", 16), kNoDrop),
      "inconsistent head dimensions: minimax-m2.attention.value_length = 16");
  // gpt-oss's gating (softmax over the selected) is not this family's.
  expect_load_error(rewrite(kF32, "gating3", set_u32("minimax-m2.expert_gating_func", 3), kNoDrop),
                    "minimax-m2.expert_gating_func = 3 is out of range");
}

// Files without expert_gating_func route by sigmoid, the family's router: the same logits, bit
// for bit, as with the key at 2; with the key at 1 (softmax) they differ.
TEST(MinimaxM2, MissingGatingKeyIsSigmoid) {
  const std::string without = rewrite(
      kF32, "no_gating",
      [](const std::string& k, gguf::Value&) { return k != "minimax-m2.expert_gating_func"; },
      kNoDrop);
  ASSERT_EQ(gguf::File::open(without).find("minimax-m2.expert_gating_func"), nullptr);
  auto a = Model::load(kDir + kF32 + std::string(".gguf"));
  auto b = Model::load(without);
  EXPECT_EQ(b->config().gating.func, GatingFunc::kSigmoid);
  const auto la = prefill_logits(*a), lb = prefill_logits(*b);
  EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin()));
  const std::string softmax = rewrite(
      kF32, "softmax",
      [](const std::string& k, gguf::Value& v) {
        if (k == "minimax-m2.expert_gating_func") v = gguf::Value::u32(1);
        return true;
      },
      kNoDrop);
  auto s = Model::load(softmax);
  EXPECT_EQ(s->config().gating.func, GatingFunc::kSoftmax);
  const auto ls = prefill_logits(*s);
  EXPECT_FALSE(std::equal(la.begin(), la.end(), ls.begin()));
}

// The real-shape preset carries the released config, and what synth writes at that shape cut
// to a few layers (smaller dims here, the layout the same) loads back.
TEST(MinimaxM2, RealShapePreset) {
  const SynthShape s = synth_shape("minimax-m2");
  EXPECT_EQ(s.arch, "minimax-m2");
  EXPECT_EQ(s.n_layer, 62);
  EXPECT_EQ(s.n_embd, 3072);
  EXPECT_EQ(s.n_head, 48);
  EXPECT_EQ(s.n_head_kv, 8);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.n_rot, 64);
  EXPECT_EQ(s.n_vocab, 200064);
  EXPECT_EQ(s.n_expert, 256);
  EXPECT_EQ(s.n_expert_used, 8);
  EXPECT_EQ(s.n_ff_exp, 1536);
  EXPECT_EQ(s.n_ff_shexp, 0);
  EXPECT_EQ(s.n_expert_shared, 0);
  EXPECT_TRUE(s.sigmoid);
  EXPECT_TRUE(s.select_bias);
  EXPECT_TRUE(s.norm_topk);
  EXPECT_EQ(s.rope_base, 5e6f);
  // Lynx's default (alpha, beta) from k/N = 8/256 (docs/routing.md's lookup).
  const auto ab = routing::lynx_default_alpha_beta(s.n_expert_used, s.n_expert);
  EXPECT_GT(ab.alpha, 0.f);
  SynthOptions o;
  o.shape = s;
  o.shape.n_layer = 3;
  o.shape.n_embd = 64;
  o.shape.n_head = 6;
  o.shape.n_head_kv = 2;
  o.shape.head_dim = 16;
  o.shape.n_rot = 8;
  o.shape.n_vocab = 300;
  o.shape.n_expert = 16;
  o.shape.n_ff_exp = 16;
  o.shape.n_ff = 16;
  const std::string path = test::scratch_path("minimax_m2_synth.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.q_dim(), 96);
  EXPECT_EQ(c.rope_dim(), 8);
  EXPECT_EQ(c.qk_norm, QKNorm::kFull);
  EXPECT_EQ(c.n_expert_used, 8);
  EXPECT_EQ(c.gating.func, GatingFunc::kSigmoid);
  EXPECT_EQ(m->file().find_tensor("blk.0.attn_q_norm.weight")->ne[0], 96);
  EXPECT_EQ(m->file().find_tensor("blk.0.attn_k_norm.weight")->ne[0], 32);
  EXPECT_EQ(m->file().find_tensor("blk.2.ffn_up_shexp.weight"), nullptr);
}

}  // namespace
}  // namespace lynx
