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
#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/swiglu_limit.h"
#include "model/weights.h"

namespace lynx {
namespace {

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/step35/";
const char* const kF32 = "tiny-step35-f32";
const char* const kQ8 = "tiny-step35-q8_0";

std::vector<int32_t> tokens() {
  return testing_util::read_tokens(kDir + "tokens.txt");
}

std::vector<float> golden(const std::string& name, size_t n) {
  return testing_util::read_logits(kDir + name + ".logits.f32", n);
}

using testing_util::exact_ctx;
using testing_util::rel_err;

constexpr double kTol = 1e-5;

std::vector<float> prefill_logits(const Model& m, const ContextOptions& o = exact_ctx()) {
  return testing_util::prefill_logits(m, tokens(), o);
}

TEST(Step35, ConfigFromTheFile) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
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

// Every position's logits, three ways: one prefill batch; one token per step; and token by
// token interleaved in the same batches with a second sequence fed the tokens reversed. The
// 12 positions run past the window of 4.
TEST(Step35, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* name : {kF32, kQ8}) {
    auto m = Model::load(kDir + name + ".gguf");
    const auto toks = tokens();
    const int V = m->config().n_vocab, n = int(toks.size());
    const auto want = golden(name, size_t(n) * V);
    const auto pre = prefill_logits(*m);
    for (int i = 0; i < n; ++i) {
      EXPECT_LT(rel_err(std::span(pre).subspan(size_t(i) * V, size_t(V)), &want[size_t(i) * V],
                        size_t(V)),
                kTol)
          << name << " prefill position " << i;
    }
    Context a(*m, exact_ctx()), b(*m, exact_ctx());
    const int32_t sa = a.new_sequence();
    const int32_t sb0 = b.new_sequence(), sb1 = b.new_sequence();
    for (int i = 0; i < n; ++i) {
      std::vector<BatchToken> one = {{toks[size_t(i)], sa, i, kTokenDecode, true}};
      a.eval(one);
      std::vector<BatchToken> two = {{toks[size_t(n - 1 - i)], sb1, i, kTokenDecode, true},
                                     {toks[size_t(i)], sb0, i, kTokenDecode, true}};
      b.eval(two);
      EXPECT_LT(rel_err(a.logits(0), &want[size_t(i) * V], size_t(V)), kTol)
          << name << " decode position " << i;
      const auto la = a.logits(0), lb = b.logits(1);
      ASSERT_TRUE(std::equal(la.begin(), la.end(), lb.begin())) << name << " position " << i;
    }
  }
}

// The default path of the Q8_0 file (Q8_0 activations, integer products) stays near the exact
// reference and picks the same arg-max at every position.
TEST(Step35, IntegerPathNearTheGoldens) {
  auto m = Model::load(kDir + kQ8 + std::string(".gguf"));
  const auto toks = tokens();
  const int V = m->config().n_vocab, n = int(toks.size());
  const auto want = golden(kQ8, size_t(n) * V);
  ContextOptions o = exact_ctx();
  o.exact_activations = false;
  const auto got = prefill_logits(*m, o);
  for (int i = 0; i < n; ++i) {
    const float* g = &got[size_t(i) * V];
    const float* w = &want[size_t(i) * V];
    EXPECT_LT(rel_err(std::span(got).subspan(size_t(i) * V, size_t(V)), w, size_t(V)), 4e-2)
        << "position " << i;
    EXPECT_EQ(std::max_element(g, g + V) - g, std::max_element(w, w + V) - w) << "position " << i;
  }
}

// Every routing policy runs a decode batch of the model: finite logits, and in every MoE layer
// between 1 and B x k active experts (at most N); Lynx and OEA, which only move choices onto
// experts the batch already has, no more than top-k.
TEST(Step35, EveryPolicyRunsOnItsRouter) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
  const auto toks = tokens();
  const int B = 8, V = m->config().n_vocab;
  const int k = m->config().n_expert_used, n_exp = m->config().n_expert;
  std::vector<int> topk_experts(4, 0);
  for (const char* spec : {"topk", "lynx", "oea:k0=2", "budget:m=6", "ser:kmin=2,t=0.5",
                           "static-k:k=2", "cover", "subst"}) {
    ContextOptions o = exact_ctx();
    o.routing = spec;
    Context ctx(*m, o);
    std::vector<int32_t> seqs;
    std::vector<BatchToken> batch;
    for (int b = 0; b < B; ++b) {
      seqs.push_back(ctx.new_sequence());
      batch.push_back({toks[size_t(b)], seqs.back(), 0, kTokenPrefill, false});
    }
    ctx.eval(batch);
    batch.clear();
    for (int b = 0; b < B; ++b)
      batch.push_back({toks[size_t(b + 1)], seqs[size_t(b)], 1, kTokenDecode, true});
    ctx.eval(batch);
    for (int b = 0; b < B; ++b) {
      const auto l = ctx.logits(b);
      EXPECT_TRUE(std::all_of(l.begin(), l.begin() + V, [](float x) { return std::isfinite(x); }))
          << spec;
    }
    const StepStats& st = ctx.last_step();
    ASSERT_EQ(st.layers.size(), 4u) << spec;
    for (size_t il = 2; il < st.layers.size(); ++il) {  // layers 0-1 are dense
      const int d = st.layers[il].distinct_experts;
      EXPECT_GE(d, 1) << spec << " " << il;
      EXPECT_LE(d, std::min(B * k, n_exp)) << spec << " " << il;
      if (std::string(spec) == "topk") topk_experts[il] = d;
      if (std::string(spec) == "lynx" || std::string(spec) == "oea:k0=2") {
        EXPECT_LE(d, topk_experts[il]) << spec << " " << il;
      }
    }
  }
}

// Copies a fixture, letting `edit` change metadata and `drop` remove tensors; `replace` gives
// a tensor other F32 contents of its shape.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Drop = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& fixture, const std::string& name, const KvEdit& edit,
                    const Drop& drop, const std::string& replace = {},
                    const std::vector<float>& values = {}) {
  gguf::File f = gguf::File::open(kDir + fixture + ".gguf");
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (edit(kv.key, v)) w.set(kv.key, v);
  }
  for (const auto& t : f.tensors()) {
    if (drop(t)) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.name == replace) {
      w.add_tensor(t.name, gguf::TensorType::F32, ne, values.data(), values.size() * 4);
    } else {
      w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
    }
  }
  const std::string path = test::scratch_path("step35_" + name + ".gguf");
  w.write(path);
  return path;
}
// A copy of a fixture with one more metadata key.
std::string with_key(const std::string& fixture, const std::string& name, const std::string& key,
                     const gguf::Value& value) {
  gguf::File f = gguf::File::open(kDir + fixture + ".gguf");
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  }
  w.set(key, value);
  for (const auto& t : f.tensors()) {
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.n_bytes);
  }
  const std::string path = test::scratch_path("step35_" + name + ".gguf");
  w.write(path);
  return path;
}
const auto kAllKv = [](const std::string&, gguf::Value&) { return true; };
const auto kNoDrop = [](const gguf::TensorInfo&) { return false; };
KvEdit without(const std::string& key) {
  return [key](const std::string& k, gguf::Value&) { return k != key; };
}

double last_position_err(const Model& m) {
  const size_t V = size_t(m.config().n_vocab), n = tokens().size();
  const auto want = golden(kF32, n * V);
  const auto got = prefill_logits(m);
  return rel_err(std::span(got).subspan((n - 1) * V, V), &want[(n - 1) * V], V);
}

// The goldens check the mechanisms, not arithmetic the reference and engine would share by
// accident: without the attention gate, without either clamp, with every rope factor 1, or
// with a window wider than the prompt, the last position's logits move.
TEST(Step35, GateClampsRopeFactorsAndWindowMatter) {
  auto no_gate = Model::load(rewrite(kF32, "no_gate", kAllKv, [](const gguf::TensorInfo& t) {
    return t.name.ends_with("attn_gate.weight");
  }));
  EXPECT_EQ(no_gate->config().attn_gate, AttnGate::kNone);
  EXPECT_GT(last_position_err(*no_gate), 1e-3);
  auto no_exp = Model::load(rewrite(kF32, "no_exp", without("step35.swiglu_clamp_exp"), kNoDrop));
  EXPECT_TRUE(no_exp->config().swiglu_exp.empty());
  EXPECT_GT(last_position_err(*no_exp), 1e-3);
  auto no_sh = Model::load(rewrite(kF32, "no_sh", without("step35.swiglu_clamp_shexp"), kNoDrop));
  EXPECT_GT(last_position_err(*no_sh), 1e-3);
  auto flat = Model::load(
      rewrite(kF32, "flat", kAllKv, kNoDrop, "rope_freqs.weight", std::vector<float>(8, 1.f)));
  EXPECT_GT(last_position_err(*flat), 1e-3);
  auto wide = Model::load(rewrite(
      kF32, "wide",
      [](const std::string& k, gguf::Value& v) {
        if (k == "step35.attention.sliding_window") v = gguf::Value::u32(64);
        return true;
      },
      kNoDrop));
  EXPECT_GT(last_position_err(*wide), 1e-3);
}

void expect_load_error(const std::string& path, const std::string& substring) {
  try {
    Model::load(path);
    ADD_FAILURE() << "loading " << path << " did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << substring;
  }
}

gguf::Value u32_array(std::initializer_list<uint32_t> xs) {
  std::vector<gguf::Value> v;
  for (uint32_t x : xs) v.push_back(gguf::Value::u32(x));
  return gguf::Value::array(gguf::ValueType::UINT32, v);
}

KvEdit set(const std::string& key, const gguf::Value& val) {
  return [key, val](const std::string& k, gguf::Value& v) {
    if (k == key) v = val;
    return true;
  };
}

TEST(Step35, BadFilesAreNamed) {
  auto drop = [](const char* name) {
    return [name](const gguf::TensorInfo& t) { return t.name == name; };
  };
  // Missing tensors: the gate of one layer when the others have it, the shared expert, the
  // q/k norms, a full layer's value projection.
  expect_load_error(rewrite(kF32, "no_gate1", kAllKv, drop("blk.1.attn_gate.weight")),
                    "missing tensor 'blk.1.attn_gate.weight'");
  expect_load_error(rewrite(kF32, "no_shexp", kAllKv, drop("blk.3.ffn_up_shexp.weight")),
                    "missing tensor 'blk.3.ffn_up_shexp.weight'");
  expect_load_error(rewrite(kF32, "no_qnorm", kAllKv, drop("blk.2.attn_q_norm.weight")),
                    "missing tensor 'blk.2.attn_q_norm.weight'");
  expect_load_error(rewrite(kF32, "no_v", kAllKv, drop("blk.0.attn_v.weight")),
                    "missing tensor 'blk.0.attn_v.weight'");
  // Wrong shapes: heads the tensors do not have (a full layer given the sliding count).
  expect_load_error(
      rewrite(kF32, "heads", set("step35.attention.head_count", u32_array({6, 6, 6, 6})), kNoDrop),
      "tensor 'blk.0.attn_q.weight' has shape");
  // Per-layer arrays of the wrong length, or entries that do not fit.
  expect_load_error(
      rewrite(kF32, "heads_len", set("step35.attention.head_count", u32_array({4, 6, 4})), kNoDrop),
      "step35.attention.head_count has 3 entries for 4 layers");
  expect_load_error(
      rewrite(kF32, "hkv_len", set("step35.attention.head_count_kv", u32_array({2, 2})), kNoDrop),
      "step35.attention.head_count_kv has 2 entries for 4 layers");
  expect_load_error(
      rewrite(kF32, "swa_len",
              set("step35.attention.sliding_window_pattern",
                  gguf::Value::array(gguf::ValueType::BOOL, {gguf::Value::boolean(false)})),
              kNoDrop),
      "step35.attention.sliding_window_pattern has 1 entries for 4 layers");
  expect_load_error(rewrite(kF32, "clamp_len",
                            set("step35.swiglu_clamp_exp",
                                gguf::Value::array(gguf::ValueType::FLOAT32,
                                                   {gguf::Value::f32(1.f), gguf::Value::f32(1.f)})),
                            kNoDrop),
                    "step35.swiglu_clamp_exp has 2 entries for 4 layers");
  expect_load_error(
      rewrite(kF32, "clamp_neg", set("step35.swiglu_clamp_shexp", gguf::Value::f32(-1.f)), kNoDrop),
      "step35.swiglu_clamp_shexp[0] = -1.000000 must be a finite number >= 0");
  expect_load_error(rewrite(kF32, "heads_div",
                            set("step35.attention.head_count", u32_array({4, 5, 4, 6})), kNoDrop),
                    "step35.attention.head_count[1] = 5 is out of range, does not divide");
  expect_load_error(rewrite(kF32, "heads_mix",
                            set("step35.attention.head_count", u32_array({4, 6, 2, 6})), kNoDrop),
                    "step35.attention.head_count[2] = 2");
  expect_load_error(
      rewrite(kF32, "rope_dims", set("step35.rope.dimension_count", gguf::Value::u32(6)), kNoDrop),
      "must be a multiple of 4");
  expect_load_error(rewrite(kF32, "rope_freqs", kAllKv, kNoDrop, "rope_freqs.weight",
                            std::vector<float>(8, -1.f)),
                    "rope_freqs.weight");
  expect_load_error(with_key(kF32, "yarn", "step35.rope.scaling.type", gguf::Value::str("yarn")),
                    "step35.rope.scaling.type");
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
