// step35 (Step-3.5-Flash) against the independent NumPy reference (tests/reference/
// step35_ref.py, written from HF's modeling_step3p5.py; fixtures from
// make_step35_fixtures.py): logits at every position by prefill, token by token and batched
// with another sequence, in F32 and Q8_0, over full layers (4 query heads, half-head rope with
// llama3-type rope_freqs) and sliding layers (6 query heads, window 4), a head-wise attention
// gate, dense and MoE layers with clamped SwiGLU; the gate, clamps, rope factors and window
// really matter; every routing policy on its router; bad files named; the clamp by hand; the
// real-shape preset.
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
#include "model/swiglu_limit.h"
#include "model/weights.h"

namespace lynx {
namespace {

const testing_util::FamilyFixtures kFx("step35");
const char* const kF32 = "tiny-step35-f32";
const char* const kQ8 = "tiny-step35-q8_0";

using testing_util::drop_where;
using testing_util::exact_ctx;
using testing_util::expect_load_error;
using testing_util::GgufEdit;
using testing_util::rel_err;
using testing_util::replace_f32;
using testing_util::set_key;

TEST(Step35, ConfigFromTheFile) {
  auto m = kFx.load(kF32);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, "step35");
  ASSERT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.n_embd, 64);
  for (int il = 0; il < 4; ++il) {
    const bool full = il % 2 == 0;
    EXPECT_EQ(c.layer_alt(il), full) << il;
    EXPECT_EQ(c.layer_n_head(il), full ? 4 : 6) << il;
    EXPECT_EQ(c.layer_n_head_kv(il), 2) << il;
    EXPECT_EQ(c.layer_head_dim(il), 16) << il;
    EXPECT_EQ(c.layer_q_dim(il), full ? 64 : 96) << il;
    EXPECT_EQ(c.layer_kinds[size_t(il)].window, full ? 0 : 4) << il;
    EXPECT_EQ(c.layer_kinds[size_t(il)].ffn, il < 2 ? FfnKind::kDense : FfnKind::kMoeShared);
    const LayerWeights& L = m->layer(il);
    EXPECT_EQ(L.wgate.rows, full ? 4 : 6) << il;
    EXPECT_EQ(L.wgate.cols, 64) << il;
    EXPECT_NE(L.q_norm, nullptr);
    EXPECT_NE(L.k_norm, nullptr);
    // Clamps on layers 1-3: the shared / dense limit 0.6, the experts' 0.8.
    EXPECT_EQ(c.layer_swiglu_ffn(il), il >= 1 ? 0.6f : 0.f) << il;
    EXPECT_EQ(c.layer_swiglu_exp(il), il >= 1 ? 0.8f : 0.f) << il;
    EXPECT_EQ(L.expert_limit, il >= 1 ? 0.8f : 0.f) << il;
  }
  EXPECT_EQ(c.attn_gate, AttnGate::kHeadSigmoid);
  EXPECT_EQ(c.max_q_dim(), 96);
  // Sliding layers rotate the whole head at 1e4, full ones half of it at 5e6 with factors.
  EXPECT_EQ(c.rope_dim(), 16);
  EXPECT_EQ(c.rope_base, 1e4f);
  EXPECT_EQ(c.alt.n_rot, 8);
  EXPECT_EQ(c.alt.rope_base, 5e6f);
  ASSERT_EQ(c.alt.freq_factors.size(), 4u);
  // llama3 factors over 8 pairs of base 5e6 (the first 4 used), original context 64: the
  // fastest pair blended (64 / 2 pi - 1) / 31 of the way, the slow ones the full factor 2.
  EXPECT_NEAR(c.alt.freq_factors[0], 1.5428f, 1e-4);
  EXPECT_EQ(c.alt.freq_factors[3], 2.f);
  EXPECT_EQ(c.rope, RopeType::kNeox);
  EXPECT_EQ(c.qk_norm, QKNorm::kPerHead);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 4);
  EXPECT_EQ(c.n_ff, 96);
  EXPECT_EQ(c.n_ff_exp, 32);
  EXPECT_EQ(c.n_ff_shexp, 64);
  EXPECT_EQ(c.n_layer_dense_lead, 2);
  EXPECT_EQ(c.gating.func, GatingFunc::kSigmoid);
  EXPECT_TRUE(c.gating.select_bias);
  EXPECT_TRUE(c.gating.norm_topk);
  EXPECT_EQ(c.gating.weights_scale, 3.f);
  EXPECT_EQ(c.expert_act, ExpertAct::kSwiglu);
}

// Every position's logits by prefill, token by token, and batched with another sequence (the
// 12 positions run past the window of 4).
TEST(Step35, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* name : {kF32, kQ8}) testing_util::expect_goldens_at_every_position(kFx, name);
}

// The default path of the Q8_0 file (Q8_0 activations, integer products) stays near the exact
// reference and picks the same arg-max at every position.
TEST(Step35, IntegerPathNearTheGoldens) {
  testing_util::expect_integer_path_near_goldens(kFx, kQ8, 4e-2);
}

// Every routing policy runs a decode batch on the family's router (layers 0-1 dense).
TEST(Step35, EveryPolicyRunsOnItsRouter) {
  testing_util::expect_every_policy_runs(kFx, kF32, 8);
}

// A copy of the F32 fixture with `edit` applied.
std::string rewrite(const std::string& out, const GgufEdit& edit) {
  return kFx.rewrite(kF32, out, edit);
}
double last_position_err(const Model& m) {
  const size_t V = size_t(m.config().n_vocab), n = kFx.tokens().size();
  const auto want = kFx.golden(kF32, n * V);
  const auto got = kFx.prefill(m);
  return rel_err(std::span(got).subspan((n - 1) * V, V), &want[(n - 1) * V], V);
}

// The goldens check the mechanisms, not arithmetic the reference and engine would share by
// accident: without the attention gate, without either clamp, with every rope factor 1, or
// with a window wider than the prompt, the last position's logits move.
TEST(Step35, GateClampsRopeFactorsAndWindowMatter) {
  auto no_gate = Model::load(rewrite("no_gate", drop_where([](const gguf::TensorInfo& t) {
                                       return t.name.ends_with("attn_gate.weight");
                                     })));
  EXPECT_EQ(no_gate->config().attn_gate, AttnGate::kNone);
  EXPECT_GT(last_position_err(*no_gate), 1e-3);
  auto no_exp = Model::load(rewrite("no_exp", testing_util::drop_key("step35.swiglu_clamp_exp")));
  EXPECT_TRUE(no_exp->config().swiglu_exp.empty());
  EXPECT_GT(last_position_err(*no_exp), 1e-3);
  auto no_sh = Model::load(rewrite("no_sh", testing_util::drop_key("step35.swiglu_clamp_shexp")));
  EXPECT_GT(last_position_err(*no_sh), 1e-3);
  auto flat =
      Model::load(rewrite("flat", replace_f32("rope_freqs.weight", std::vector<float>(8, 1.f))));
  EXPECT_GT(last_position_err(*flat), 1e-3);
  auto wide = Model::load(
      rewrite("wide", set_key("step35.attention.sliding_window", gguf::Value::u32(64))));
  EXPECT_GT(last_position_err(*wide), 1e-3);
}

gguf::Value u32_array(std::initializer_list<uint32_t> xs) {
  std::vector<gguf::Value> v;
  for (uint32_t x : xs) v.push_back(gguf::Value::u32(x));
  return gguf::Value::array(gguf::ValueType::UINT32, v);
}

TEST(Step35, BadFilesAreNamed) {
  auto dropped = [](const char* name) { return rewrite(name, testing_util::drop_tensor(name)); };
  // Missing tensors: the gate of one layer when the others have it, the shared expert, the
  // q/k norms, a full layer's value projection.
  expect_load_error(dropped("blk.1.attn_gate.weight"), "missing tensor 'blk.1.attn_gate.weight'");
  expect_load_error(dropped("blk.3.ffn_up_shexp.weight"),
                    "missing tensor 'blk.3.ffn_up_shexp.weight'");
  expect_load_error(dropped("blk.2.attn_q_norm.weight"),
                    "missing tensor 'blk.2.attn_q_norm.weight'");
  expect_load_error(dropped("blk.0.attn_v.weight"), "missing tensor 'blk.0.attn_v.weight'");
  // Wrong shapes: heads the tensors do not have (a full layer given the sliding count).
  expect_load_error(
      rewrite("heads", set_key("step35.attention.head_count", u32_array({6, 6, 6, 6}))),
      "tensor 'blk.0.attn_q.weight' has shape");
  // Per-layer arrays of the wrong length, or entries that do not fit.
  expect_load_error(
      rewrite("heads_len", set_key("step35.attention.head_count", u32_array({4, 6, 4}))),
      "step35.attention.head_count has 3 entries for 4 layers");
  expect_load_error(
      rewrite("hkv_len", set_key("step35.attention.head_count_kv", u32_array({2, 2}))),
      "step35.attention.head_count_kv has 2 entries for 4 layers");
  expect_load_error(rewrite("swa_len", set_key("step35.attention.sliding_window_pattern",
                                               gguf::Value::array(gguf::ValueType::BOOL,
                                                                  {gguf::Value::boolean(false)}))),
                    "step35.attention.sliding_window_pattern has 1 entries for 4 layers");
  expect_load_error(
      rewrite("clamp_len",
              set_key("step35.swiglu_clamp_exp",
                      gguf::Value::array(gguf::ValueType::FLOAT32,
                                         {gguf::Value::f32(1.f), gguf::Value::f32(1.f)}))),
      "step35.swiglu_clamp_exp has 2 entries for 4 layers");
  expect_load_error(
      rewrite("clamp_neg", set_key("step35.swiglu_clamp_shexp", gguf::Value::f32(-1.f))),
      "step35.swiglu_clamp_shexp[0] = -1.000000 must be a finite number >= 0");
  expect_load_error(
      rewrite("heads_div", set_key("step35.attention.head_count", u32_array({4, 5, 4, 6}))),
      "step35.attention.head_count[1] = 5 is out of range, does not divide");
  expect_load_error(
      rewrite("heads_mix", set_key("step35.attention.head_count", u32_array({4, 6, 2, 6}))),
      "step35.attention.head_count[2] = 2");
  expect_load_error(
      rewrite("rope_dims", set_key("step35.rope.dimension_count", gguf::Value::u32(6))),
      "must be a multiple of 4");
  expect_load_error(
      rewrite("rope_freqs", replace_f32("rope_freqs.weight", std::vector<float>(8, -1.f))),
      "rope_freqs.weight");
  expect_load_error(rewrite("yarn", set_key("step35.rope.scaling.type", gguf::Value::str("yarn"))),
                    "step35.rope.scaling.type");
}

// A file with an MTP block (block_count 5, nextn_predict_layers 1, per-layer arrays of 5 as a
// converter keeping the block writes them; the block's tensors left out) runs the same 4-layer
// trunk: the same logits.
TEST(Step35, MtpBlockCountedAndSkipped) {
  GgufEdit e;
  e.kv = [](const std::string& k, gguf::Value& v) {
    if (k == "step35.block_count") v = gguf::Value::u32(5);
    if (k == "step35.attention.head_count") v = u32_array({4, 6, 4, 6, 4});
    if (k == "step35.attention.head_count_kv") v = u32_array({2, 2, 2, 2, 2});
    return true;
  };
  e.add = {{"step35.nextn_predict_layers", gguf::Value::u32(1)}};
  auto m = Model::load(rewrite("mtp", e));
  EXPECT_EQ(m->config().n_layer, 4);
  EXPECT_EQ(m->config().n_layer_nextn, 1);
  testing_util::expect_goldens_at_every_position(kFx, *m, kF32);
}

// The clamped SwiGLU by hand: SiLU of the gate capped from above only, up clamped both sides.
TEST(Step35, ClampedSwigluByHand) {
  const float gate[4] = {0.5f, 3.f, -4.f, 2.f}, up[4] = {2.f, -0.5f, 5.f, -3.f};
  float out[4];
  swiglu_limited(gate, up, out, 4, 1.f);
  const auto silu = [](float x) { return x / (1.f + std::exp(-x)); };
  EXPECT_NEAR(out[0], silu(0.5f) * 1.f, 1e-6);  // up clipped to 1
  EXPECT_NEAR(out[1], 1.f * -0.5f, 1e-6);       // silu(3) = 2.86 capped at 1
  EXPECT_NEAR(out[2], silu(-4.f) * 1.f, 1e-6);  // negative SiLU not raised
  EXPECT_NEAR(out[3], 1.f * -1.f, 1e-6);        // both clamped
  EXPECT_LT(silu(-4.f), -0.07f);
}

// The real-shape preset carries the released config, and what synth writes at that shape,
// cut to 6 layers at small dims, loads back with its layout.
TEST(Step35, RealShapePreset) {
  const SynthShape s = synth_shape("step-3.5-flash");
  EXPECT_EQ(s.arch, "step35");
  EXPECT_EQ(s.n_layer, 45);
  EXPECT_EQ(s.n_embd, 4096);
  EXPECT_EQ(s.n_head, 96);
  EXPECT_EQ(s.n_head_alt, 64);
  EXPECT_EQ(s.n_head_kv, 8);
  EXPECT_EQ(s.n_head_kv_alt, 8);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.n_rot_alt, 64);
  EXPECT_EQ(s.n_vocab, 128896);
  EXPECT_EQ(s.n_ff, 11264);
  EXPECT_EQ(s.n_expert, 288);
  EXPECT_EQ(s.n_expert_used, 8);
  EXPECT_EQ(s.n_ff_exp, 1280);
  EXPECT_EQ(s.n_ff_shexp, 1280);
  EXPECT_EQ(s.n_layer_dense_lead, 3);
  EXPECT_EQ(s.sliding_window, 512);
  EXPECT_EQ(s.rope_base, 1e4f);
  EXPECT_EQ(s.rope_base_alt, 5e6f);
  EXPECT_EQ(s.weights_scale, 3.f);
  EXPECT_TRUE(s.alt_first);
  EXPECT_TRUE(s.attn_gate);
  SynthOptions o;
  o.shape = s;
  o.shape.n_layer = 6;
  o.shape.n_embd = 64;
  o.shape.n_head = 6;
  o.shape.n_head_alt = 4;
  o.shape.n_head_kv = 2;
  o.shape.n_head_kv_alt = 2;
  o.shape.head_dim = 16;
  o.shape.head_dim_alt = 16;
  o.shape.n_rot_alt = 8;
  o.shape.n_vocab = 300;
  o.shape.n_expert = 16;
  o.shape.n_ff_exp = 16;
  o.shape.n_ff_shexp = 16;
  o.shape.n_ff = 32;
  const std::string path = test::scratch_path("step35_synth.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  ASSERT_EQ(c.n_layer, 6);
  for (int il = 0; il < 6; ++il) {
    EXPECT_EQ(c.layer_alt(il), il % 4 == 0) << il;
    EXPECT_EQ(c.layer_kinds[size_t(il)].window, il % 4 == 0 ? 0 : 512) << il;
    EXPECT_EQ(c.layer_routed(il), il >= 3) << il;
    EXPECT_EQ(c.layer_swiglu_exp(il), il >= 4 ? 7.f : 0.f) << il;
    EXPECT_EQ(c.layer_swiglu_ffn(il), il >= 4 ? 16.f : 0.f) << il;
  }
  EXPECT_TRUE(c.alt.freq_factors.empty());
  Context ctx(*m, exact_ctx());
  const int32_t sq = ctx.new_sequence();
  std::vector<BatchToken> batch = {{1, sq, 0, kTokenPrefill, false},
                                   {2, sq, 1, kTokenPrefill, true}};
  ctx.eval(batch);
  const auto l = ctx.logits(0);
  EXPECT_TRUE(std::all_of(l.begin(), l.begin() + 300, [](float x) { return std::isfinite(x); }));
}

}  // namespace
}  // namespace lynx
