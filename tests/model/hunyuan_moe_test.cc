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
#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/weights.h"

namespace lynx {
namespace {

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/hunyuan-moe/";
const char* const kF32 = "tiny-hunyuan-moe-f32";
const char* const kQ8 = "tiny-hunyuan-moe-q8_0";

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

// Every position's logits, three ways: one prefill batch; one token per step; and token by
// token interleaved in the same batches with a second sequence fed the tokens reversed.
TEST(HunyuanMoe, GoldensAtEveryPositionPrefillDecodeAndBatched) {
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
TEST(HunyuanMoe, IntegerPathNearTheGoldens) {
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

// Every routing policy runs a decode batch of the model (softmax router): finite logits, and in
// every layer between 1 and B x k active experts (at most N); Lynx and OEA, which only move
// choices onto experts the batch already has, no more than top-k.
TEST(HunyuanMoe, EveryPolicyRunsOnItsRouter) {
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
    for (size_t il = 0; il < st.layers.size(); ++il) {
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

// Copies a fixture, letting `edit` change or drop metadata, `drop` remove tensors, `zero` zero
// tensors' bytes and `add` add keys or tensors' replacements.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Pick = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& fixture, const std::string& name, const KvEdit& edit,
                    const Pick& drop,
                    const std::vector<std::pair<std::string, gguf::Value>>& add = {},
                    const Pick& zero = nullptr, const Pick& ones = nullptr) {
  gguf::File f = gguf::File::open(kDir + fixture + ".gguf");
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (edit(kv.key, v)) w.set(kv.key, v);
  }
  for (const auto& [k, v] : add) w.set(k, v);
  std::vector<std::vector<uint8_t>> keep;
  for (const auto& t : f.tensors()) {
    if (drop(t)) continue;
    const uint8_t* data = t.data;
    if ((zero && zero(t)) || (ones && ones(t))) {
      keep.emplace_back(t.n_bytes, uint8_t(0));
      if (ones && ones(t)) {  // F32 vectors of 1
        const float one = 1.f;
        for (size_t i = 0; i + 4 <= t.n_bytes; i += 4) std::memcpy(&keep.back()[i], &one, 4);
      }
      data = keep.back().data();
    }
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), data, t.n_bytes);
  }
  const std::string path = test::scratch_path("hunyuan_moe_" + name + ".gguf");
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
