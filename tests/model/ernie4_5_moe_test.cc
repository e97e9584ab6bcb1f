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
#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/weights.h"
#include "routing/lynx.h"

namespace lynx {
namespace {

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/ernie4_5-moe/";
const char* const kF32 = "tiny-ernie4_5-moe-f32";
const char* const kQ8 = "tiny-ernie4_5-moe-q8_0";

std::vector<int32_t> tokens() {
  return testing_util::read_tokens(kDir + "tokens.txt");
}

std::vector<float> golden(const std::string& name, size_t n) {
  return testing_util::read_logits(kDir + name + ".logits.f32", n);
}

using testing_util::exact_ctx;
using testing_util::rel_err;

constexpr double kTol = 1e-5;

// Every position's logits by prefill ([n x V]).
std::vector<float> prefill_logits(const Model& m, const ContextOptions& o = exact_ctx()) {
  const auto toks = tokens();
  const int V = m.config().n_vocab, n = int(toks.size());
  Context ctx(m, o);
  const int32_t s = ctx.new_sequence();
  std::vector<BatchToken> batch;
  for (int i = 0; i < n; ++i) batch.push_back({toks[size_t(i)], s, i, kTokenPrefill, true});
  ctx.eval(batch);
  std::vector<float> out;
  for (int i = 0; i < n; ++i) {
    const auto l = ctx.logits(i);
    out.insert(out.end(), l.begin(), l.begin() + V);
  }
  return out;
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

// Every position's logits, three ways: one prefill batch; one token per step; and token by
// token interleaved in the same batches with a second sequence fed the tokens reversed.
TEST(Ernie45Moe, GoldensAtEveryPositionPrefillDecodeAndBatched) {
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
// reference and picks the same arg-max at every position. The rows are 32 wide here, one Q8_0
// block of activations each (largest error measured 0.043, at position 7).
TEST(Ernie45Moe, IntegerPathNearTheGoldens) {
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
    EXPECT_LT(rel_err(std::span(got).subspan(size_t(i) * V, size_t(V)), w, size_t(V)), 6e-2)
        << "position " << i;
    EXPECT_EQ(std::max_element(g, g + V) - g, std::max_element(w, w + V) - w) << "position " << i;
  }
}

// Every routing policy runs a decode batch of the model (softmax router with selection bias):
// finite logits, and in every MoE layer between 1 and B x k active experts (at most N); Lynx
// and OEA, which only move choices onto experts the batch already has, no more than top-k.
TEST(Ernie45Moe, EveryPolicyRunsOnItsRouter) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
  const auto toks = tokens();
  const int B = 8, V = m->config().n_vocab;
  const int k = m->config().n_expert_used, n_exp = m->config().n_expert;
  std::vector<int> topk_experts(3, 0);
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
    ASSERT_EQ(st.layers.size(), 3u) << spec;
    EXPECT_EQ(st.layers[0].distinct_experts, 0) << spec;  // the dense layer
    for (size_t il = 1; il < st.layers.size(); ++il) {
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

// Copies a fixture, letting `edit` change or drop metadata, `drop` remove tensors and `add`
// add keys.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Drop = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& fixture, const std::string& name, const KvEdit& edit,
                    const Drop& drop,
                    const std::vector<std::pair<std::string, gguf::Value>>& add = {}) {
  gguf::File f = gguf::File::open(kDir + fixture + ".gguf");
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (edit(kv.key, v)) w.set(kv.key, v);
  }
  for (const auto& [k, v] : add) w.set(k, v);
  for (const auto& t : f.tensors()) {
    if (drop(t)) continue;
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.n_bytes);
  }
  const std::string path = test::scratch_path("ernie4_5_moe_" + name + ".gguf");
  w.write(path);
  return path;
}
const auto kAllKv = [](const std::string&, gguf::Value&) { return true; };
const auto kNoDrop = [](const gguf::TensorInfo&) { return false; };

void expect_load_error(const std::string& path, const std::string& substring) {
  try {
    Model::load(path);
    ADD_FAILURE() << "loading " << path << " did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << substring;
  }
}

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
