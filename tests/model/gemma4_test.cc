// gemma4 (Gemma 4 26B-A4B) against the independent NumPy reference (tests/reference/
// gemma4_ref.py, written from HF's modeling_gemma4.py; fixtures from make_gemma4_fixtures.py):
// logits at every position by prefill, token by token and batched with another sequence, in
// F32 and Q8_0, over a sliding layer and a full layer of another head width whose values are
// its keys; the proportional rope, the sliding window and the soft cap really matter; every
// routing policy on its router; bad files named; fused gate/up experts; GELU and the soft cap
// by hand; the real-shape preset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "../scratch.h"
#include "family_harness.h"
#include "kernels/kernels.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/weights.h"

namespace lynx {
namespace {

const testing_util::FamilyFixtures kFx("gemma4");
const std::string kDir = kFx.dir();
const char* const kF32 = "tiny-gemma4-f32";
const char* const kQ8 = "tiny-gemma4-q8_0";

std::vector<int32_t> tokens() {
  return kFx.tokens();
}

std::vector<float> golden(const std::string& name, size_t n) {
  return kFx.golden(name, n);
}

using testing_util::drop_key;
using testing_util::drop_tensor;
using testing_util::exact_ctx;
using testing_util::expect_load_error;
using testing_util::rel_err;
using testing_util::replace_f32;
using testing_util::set_key;
using testing_util::set_keys;

constexpr double kTol = 1e-5;

std::vector<float> prefill_logits(const Model& m, const ContextOptions& o = exact_ctx()) {
  return kFx.prefill(m, o);
}

TEST(Gemma4, ConfigFromTheFile) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, "gemma4");
  ASSERT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_embd, 64);
  // Layer 0 sliding: 16-wide heads, 2 K/V heads, window 4, whole-head rope at 1e4.
  EXPECT_FALSE(c.layer_alt(0));
  EXPECT_EQ(c.layer_head_dim(0), 16);
  EXPECT_EQ(c.layer_n_head_kv(0), 2);
  EXPECT_EQ(c.layer_kinds[0].window, 4);
  EXPECT_EQ(c.rope_dim(), 16);
  EXPECT_EQ(c.rope_base, 10000.f);
  // Layer 1 full (the last layer always is): 32-wide heads, 1 K/V head, values = keys, a
  // quarter of the rope pairs rotating at 1e6.
  EXPECT_TRUE(c.layer_alt(1));
  EXPECT_EQ(c.layer_head_dim(1), 32);
  EXPECT_EQ(c.layer_n_head_kv(1), 1);
  EXPECT_EQ(c.layer_kinds[1].window, 0);
  EXPECT_EQ(c.layer_q_dim(1), 128);
  EXPECT_EQ(c.cache_k_dim(1), 32);
  EXPECT_EQ(c.cache_k_dim(0), 32);
  EXPECT_TRUE(c.alt.k_eq_v);
  EXPECT_EQ(c.alt.n_rot, 32);
  EXPECT_EQ(c.alt.rope_base, 1e6f);
  ASSERT_EQ(c.alt.freq_factors.size(), 16u);
  EXPECT_EQ(std::count(c.alt.freq_factors.begin(), c.alt.freq_factors.end(), 1.f), 4);
  EXPECT_FALSE(m->layer(1).wv.present());
  EXPECT_TRUE(m->layer(0).wv.present());
  // Gemma's conventions.
  EXPECT_FLOAT_EQ(c.embd_scale, 8.f);
  EXPECT_EQ(c.kq_scale, 1.f);
  EXPECT_TRUE(c.v_norm);
  EXPECT_EQ(c.final_softcap, 10.f);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(c.rope, RopeType::kNeox);
  EXPECT_EQ(c.qk_norm, QKNorm::kPerHead);
  EXPECT_EQ(c.dense_act, DenseAct::kGeluTanh);
  EXPECT_EQ(c.expert_act, ExpertAct::kGeglu);
  for (int il = 0; il < 2; ++il) {
    EXPECT_EQ(c.layer_kinds[size_t(il)].ffn, FfnKind::kMoeDense);
    const LayerWeights& L = m->layer(il);
    EXPECT_NE(L.post_attn_norm, nullptr);
    EXPECT_NE(L.post_ffw_norm, nullptr);
    EXPECT_NE(L.post_ffw_norm_1, nullptr);
    EXPECT_NE(L.pre_ffw_norm_2, nullptr);
    EXPECT_NE(L.post_ffw_norm_2, nullptr);
    EXPECT_NE(L.router_scale, nullptr);
    EXPECT_NE(L.down_exps_scale, nullptr);
    EXPECT_NE(L.out_scale, nullptr);
    EXPECT_TRUE(L.ffn_gate.present());
  }
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 4);
  EXPECT_EQ(c.n_ff, 64);
  EXPECT_EQ(c.n_ff_exp, 32);
  EXPECT_EQ(c.gating.func, GatingFunc::kSoftmax);
  EXPECT_TRUE(c.gating.norm_topk);
}

// Every position's logits by prefill, token by token, and batched with another sequence.
TEST(Gemma4, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* name : {kF32, kQ8})
    testing_util::expect_goldens_at_every_position(kFx, name, kTol);
}

// The default path of the Q8_0 file (Q8_0 activations, integer products) stays near the exact
// reference and picks the same arg-max at every position.
TEST(Gemma4, IntegerPathNearTheGoldens) {
  testing_util::expect_integer_path_near_goldens(kFx, kQ8, 4e-2);
}

// Every routing policy runs a decode batch on the family's router (family_harness.h).
TEST(Gemma4, EveryPolicyRunsOnItsRouter) {
  testing_util::expect_every_policy_runs(kFx, kF32, 8);
}

double last_position_err(const Model& m) {
  const size_t V = size_t(m.config().n_vocab), n = tokens().size();
  const auto want = golden(kF32, n * V);
  const auto got = prefill_logits(m);
  return rel_err(std::span(got).subspan((n - 1) * V, V), &want[(n - 1) * V], V);
}

// The goldens check the mechanisms, not arithmetic the reference and engine would share by
// accident: with every rope pair of the full layer rotating, without the soft cap, or with a
// window wider than the prompt, the last position's logits move.
TEST(Gemma4, RopeWindowAndSoftCapMatter) {
  auto all_rotate = Model::load(kFx.rewrite(
      kF32, "all_rotate", replace_f32("rope_freqs.weight", std::vector<float>(16, 1.f))));
  EXPECT_GT(last_position_err(*all_rotate), 1e-3);
  auto no_cap =
      Model::load(kFx.rewrite(kF32, "no_cap", drop_key("gemma4.final_logit_softcapping")));
  EXPECT_EQ(no_cap->config().final_softcap, 0.f);
  EXPECT_GT(last_position_err(*no_cap), 1e-3);
  auto wide = Model::load(
      kFx.rewrite(kF32, "wide", set_key("gemma4.attention.sliding_window", gguf::Value::u32(64))));
  EXPECT_GT(last_position_err(*wide), 1e-3);
}

TEST(Gemma4, BadFilesAreNamed) {
  auto rewrite = [](const char* out, const testing_util::GgufEdit& e) {
    return kFx.rewrite(kF32, out, e);
  };
  auto u32 = [](uint32_t v) { return gguf::Value::u32(v); };
  expect_load_error(rewrite("no_post2", drop_tensor("blk.1.post_ffw_norm_2.weight")),
                    "missing tensor 'blk.1.post_ffw_norm_2.weight'");
  expect_load_error(rewrite("no_rscale", drop_tensor("blk.0.ffn_gate_inp.scale")),
                    "missing tensor 'blk.0.ffn_gate_inp.scale'");
  expect_load_error(rewrite("no_escale", drop_tensor("blk.0.ffn_down_exps.scale")),
                    "missing tensor 'blk.0.ffn_down_exps.scale'");
  expect_load_error(rewrite("no_postattn", drop_tensor("blk.1.post_attention_norm.weight")),
                    "missing tensor 'blk.1.post_attention_norm.weight'");
  // The sliding layer has its own values: attn_v is required there.
  expect_load_error(rewrite("no_v0", drop_tensor("blk.0.attn_v.weight")),
                    "missing tensor 'blk.0.attn_v.weight'");
  // Heads the tensors do not have; a full layer's heads of the sliding width (its rope and
  // its values then disagree with the keys).
  expect_load_error(rewrite("heads", set_key("gemma4.attention.head_count", u32(8))),
                    "tensor 'blk.0.attn_q.weight' has shape");
  expect_load_error(rewrite("klen", set_keys({{"gemma4.attention.key_length", u32(16)},
                                              {"gemma4.attention.value_length", u32(16)}})),
                    "gemma4.rope.dimension_count = 32 is out of range [2, 16]");
  expect_load_error(rewrite("kvlen", set_key("gemma4.attention.key_length", u32(16))),
                    "gemma4.attention.value_length = 32 differs from gemma4.attention.key_length");
  expect_load_error(
      rewrite("vlen", set_key("gemma4.attention.value_length_swa", u32(32))),
      "gemma4.attention.value_length_swa = 32 differs from gemma4.attention.key_length_swa");
  // A head_count_kv array of the wrong length, or an entry that does not divide the heads.
  auto u32s = [&](std::vector<uint32_t> vs) {
    std::vector<gguf::Value> a;
    for (uint32_t v : vs) a.push_back(u32(v));
    return gguf::Value::array(gguf::ValueType::UINT32, std::move(a));
  };
  expect_load_error(rewrite("hkv_len", set_key("gemma4.attention.head_count_kv", u32s({2}))),
                    "gemma4.attention.head_count_kv has 1 entries for 2 layers");
  expect_load_error(rewrite("hkv_div", set_key("gemma4.attention.head_count_kv", u32s({2, 3}))),
                    "gemma4.attention.head_count_kv[1] = 3 does not divide head_count = 4");
  // What is not implemented is refused by name, not run wrong.
  expect_load_error(rewrite("ple", set_key("gemma4.embedding_length_per_layer_input", u32(256))),
                    "per-layer input embeddings");
  expect_load_error(rewrite("shared_kv", set_key("gemma4.attention.shared_kv_layers", u32(1))),
                    "KV sharing across layers is not implemented");
  expect_load_error(
      rewrite("rope_freqs", replace_f32("rope_freqs.weight", std::vector<float>(16, -1.f))),
      "rope_freqs.weight");
}

// The experts' gate and up fused in one tensor, as llama.cpp's converter writes them
// (ffn_gate_up_exps: per expert its gate rows, then its up rows), give the same logits bit for
// bit as the two tensors, loaded or through the expert tier; both layouts at once, or neither,
// are refused by name.
std::string fuse_gate_up(const std::string& fixture, const std::string& name, bool keep_split,
                         bool drop_all = false) {
  gguf::File f = gguf::File::open(kDir + fixture + ".gguf");
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  }
  for (const auto& t : f.tensors()) {
    const bool gate = t.name.ends_with("ffn_gate_exps.weight");
    const bool up = t.name.ends_with("ffn_up_exps.weight");
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (!(gate || up) || keep_split) w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
    if (!gate || drop_all) continue;
    const std::string p =
        t.name.substr(0, t.name.size() - std::string("ffn_gate_exps.weight").size());
    const gguf::TensorInfo* u = f.find_tensor(p + "ffn_up_exps.weight");
    const size_t mat = t.n_bytes / size_t(t.ne[2]);
    std::vector<uint8_t> fused;
    for (int64_t e = 0; e < t.ne[2]; ++e) {
      fused.insert(fused.end(), t.data + size_t(e) * mat, t.data + size_t(e + 1) * mat);
      fused.insert(fused.end(), u->data + size_t(e) * mat, u->data + size_t(e + 1) * mat);
    }
    w.add_tensor(p + "ffn_gate_up_exps.weight", t.type, {t.ne[0], 2 * t.ne[1], t.ne[2]},
                 fused.data(), fused.size());
  }
  const std::string path = test::scratch_path("gemma4_" + name + ".gguf");
  w.write(path);
  return path;
}

TEST(Gemma4, FusedGateUpExpertsGiveTheSameLogits) {
  for (const char* name : {kF32, kQ8}) {
    auto split = Model::load(kDir + name + ".gguf");
    auto fused = Model::load(fuse_gate_up(name, std::string(name) + "_fused", false));
    EXPECT_TRUE(fused->layer(0).gate_up_fused);
    EXPECT_FALSE(split->layer(0).gate_up_fused);
    EXPECT_EQ(fused->layer(1).gate_exps.rows, 32);
    for (const bool exact : {true, false}) {
      ContextOptions o = exact_ctx();
      o.exact_activations = exact;
      const auto a = prefill_logits(*split, o), b = prefill_logits(*fused, o);
      EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << name << " exact " << exact;
    }
  }
  expect_load_error(fuse_gate_up(kF32, "both", true), "one layout or the other");
  expect_load_error(fuse_gate_up(kF32, "neither", false, true),
                    "missing tensor 'blk.0.ffn_gate_exps.weight' (or 'blk.0.ffn_gate_up_exps");
  // The expert tier reads fused experts from the file (expert_tier_test.cc tests it at every
  // pool size and weight type).
  LoadOptions lo;
  lo.expert_cache = 1 << 20;
  const auto tiered = Model::load(fuse_gate_up(kF32, "tier", false), lo);
  ASSERT_NE(tiered->expert_tier(), nullptr);
  EXPECT_TRUE(tiered->layer(0).gate_up_fused);
  const auto split = Model::load(kDir + kF32 + ".gguf");
  const auto a = prefill_logits(*split), b = prefill_logits(*tiered);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
}

// GELU's tanh form and the soft cap, by hand.
TEST(Gemma4, GeluAndSoftCapByHand) {
  const float g3[3] = {0.f, 1.f, -2.f}, ones[3] = {1.f, 1.f, 1.f};
  float gelu[3];
  kernels::geglu(g3, ones, gelu, 3);
  EXPECT_NEAR(gelu[0], 0.f, 1e-7);
  EXPECT_NEAR(gelu[1], 0.8411920f, 1e-6);
  EXPECT_NEAR(gelu[2], -0.0454023f, 1e-6);
  const float gate[2] = {1.f, -2.f}, up[2] = {2.f, 3.f};
  float out[2];
  kernels::geglu(gate, up, out, 2);
  EXPECT_NEAR(out[0], 1.6823840f, 1e-6);
  EXPECT_NEAR(out[1], -0.1362069f, 1e-6);
  float x[3] = {0.f, 30.f, -300.f};
  kernels::softcap(x, 3, 30.f);
  EXPECT_EQ(x[0], 0.f);
  EXPECT_NEAR(x[1], 30.f * std::tanh(1.f), 1e-5);
  EXPECT_NEAR(x[2], -30.f, 1e-5);
}

// The real-shape preset carries the released config, and what synth writes at that shape cut
// to 6 layers (smaller dims here, the layout the same) loads back with the full layer at 5.
TEST(Gemma4, RealShapePreset) {
  const SynthShape s = synth_shape("gemma4-26b-a4b");
  EXPECT_EQ(s.arch, "gemma4");
  EXPECT_EQ(s.n_layer, 30);
  EXPECT_EQ(s.n_embd, 2816);
  EXPECT_EQ(s.n_head, 16);
  EXPECT_EQ(s.n_head_kv, 8);
  EXPECT_EQ(s.head_dim, 256);
  EXPECT_EQ(s.head_dim_alt, 512);
  EXPECT_EQ(s.n_head_kv_alt, 2);
  EXPECT_EQ(s.alt_period, 6);
  EXPECT_TRUE(s.k_eq_v_alt);
  EXPECT_EQ(s.n_vocab, 262144);
  EXPECT_EQ(s.n_ff, 2112);
  EXPECT_EQ(s.n_expert, 128);
  EXPECT_EQ(s.n_expert_used, 8);
  EXPECT_EQ(s.n_ff_exp, 704);
  EXPECT_EQ(s.sliding_window, 1024);
  EXPECT_EQ(s.rope_base, 1e4f);
  EXPECT_EQ(s.rope_base_alt, 1e6f);
  EXPECT_EQ(s.rope_frac_alt, 0.25f);
  EXPECT_EQ(s.final_softcap, 30.f);
  EXPECT_EQ(s.rms_eps, 1e-6f);
  EXPECT_TRUE(s.tied_output);
  SynthOptions o;
  o.shape = s;
  o.shape.n_layer = 7;
  o.shape.n_embd = 64;
  o.shape.n_head = 4;
  o.shape.n_head_kv = 2;
  o.shape.head_dim = 16;
  o.shape.head_dim_alt = 32;
  o.shape.n_head_kv_alt = 1;
  o.shape.n_vocab = 300;
  o.shape.n_expert = 16;
  o.shape.n_ff_exp = 16;
  o.shape.n_ff = 32;
  const std::string path = test::scratch_path("gemma4_synth.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  ASSERT_EQ(c.n_layer, 7);
  for (int il = 0; il < 7; ++il) {
    EXPECT_EQ(c.layer_alt(il), il == 5 || il == 6) << il;
    EXPECT_EQ(c.layer_kinds[size_t(il)].window, c.layer_alt(il) ? 0 : 1024) << il;
  }
  EXPECT_EQ(std::count(c.alt.freq_factors.begin(), c.alt.freq_factors.end(), 1.f), 4);
  EXPECT_EQ(c.final_softcap, 30.f);
  Context ctx(*m, exact_ctx());
  const int32_t sq = ctx.new_sequence();
  std::vector<BatchToken> batch = {{1, sq, 0, kTokenPrefill, false},
                                   {2, sq, 1, kTokenPrefill, true}};
  ctx.eval(batch);
  const auto l = ctx.logits(0);
  EXPECT_TRUE(std::all_of(l.begin(), l.begin() + 300,
                          [](float x) { return std::isfinite(x) && std::abs(x) <= 30.f; }));
}

}  // namespace
}  // namespace lynx
