// qwen3vlmoe (Qwen3-VL-30B-A3B / 235B-A22B, text path) against the independent NumPy reference
// (tests/reference/qwen3vlmoe_ref.py, written from HF's modeling_qwen3_vl_moe.py with its
// interleaved M-RoPE; fixtures from make_qwen3vlmoe_fixtures.py): logits at every position by
// prefill, token by token and batched with another sequence, in F32 and Q8_0; the file runs as
// qwen3moe does with the same weights (text positions make M-RoPE the NEOX rope, whatever the
// sections); every routing policy on its softmax router; bad files named; the real-shape preset.
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

namespace lynx {
namespace {

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/qwen3vlmoe/";
const char* const kF32 = "tiny-qwen3vlmoe-f32";
const char* const kQ8 = "tiny-qwen3vlmoe-q8_0";

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

// Copies the F32 fixture: `edit` may change a value or drop the key (returning false), `drop`
// removes tensors, `add` adds keys; with `arch` set, general.architecture and the keys'
// prefix are renamed first.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Drop = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& name, const KvEdit& edit, const Drop& drop = nullptr,
                    const std::vector<std::pair<std::string, gguf::Value>>& add = {},
                    const std::string& arch = "") {
  gguf::File f = gguf::File::open(kDir + kF32 + ".gguf");
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    std::string k = kv.key;
    gguf::Value v = kv.value;
    if (!arch.empty()) {
      if (k == "general.architecture") v = gguf::Value::str(arch);
      if (k.rfind("qwen3vlmoe.", 0) == 0) k = arch + k.substr(10);
    }
    if (edit && !edit(k, v)) continue;
    w.set(k, v);
  }
  for (const auto& [k, v] : add) w.set(k, v);
  for (const auto& t : f.tensors()) {
    if (drop && drop(t)) continue;
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.n_bytes);
  }
  const std::string path = test::scratch_path("qwen3vlmoe_" + name + ".gguf");
  w.write(path);
  return path;
}

TEST(Qwen3VlMoe, ConfigFromTheFile) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, "qwen3vlmoe");
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_EQ(c.kv_dim(), 64);
  EXPECT_EQ(c.rope_dim(), 32);
  EXPECT_EQ(c.rope, RopeType::kNeox);
  EXPECT_EQ(c.qk_norm, QKNorm::kPerHead);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 4);
  EXPECT_EQ(c.n_ff_exp, 32);
  EXPECT_EQ(c.n_ff_shexp, 0);
  EXPECT_EQ(c.gating.func, GatingFunc::kSoftmax);
  EXPECT_TRUE(c.gating.norm_topk);
  EXPECT_FALSE(c.gating.select_bias);
  EXPECT_EQ(c.layer_kinds[0].ffn, FfnKind::kMoe);
  const gguf::Value* sec = m->file().find("qwen3vlmoe.rope.dimension_sections");
  ASSERT_NE(sec, nullptr);
  std::vector<int64_t> s;
  for (const auto& v : sec->as_array()) s.push_back(v.as_int());
  EXPECT_EQ(s, (std::vector<int64_t>{6, 5, 5, 0}));
  EXPECT_EQ(m->file().get_int("qwen3vlmoe.n_deepstack_layers"), 2);
}

// Every position's logits, three ways: one prefill batch; one token per step; and token by
// token interleaved in the same batches with a second sequence fed the tokens reversed.
TEST(Qwen3VlMoe, GoldensAtEveryPositionPrefillDecodeAndBatched) {
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
TEST(Qwen3VlMoe, IntegerPathNearTheGoldens) {
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

// Text positions make the interleaved M-RoPE the NEOX rope: the same weights as a qwen3moe
// file give the same logits to the bit, and other sections (the released [24, 20, 20, 0]
// proportions or all on t) change nothing.
TEST(Qwen3VlMoe, RunsAsQwen3MoeWhateverTheSections) {
  auto base = Model::load(kDir + kF32 + std::string(".gguf"));
  const auto want = prefill_logits(*base);
  const std::string as_qwen3 = rewrite(
      "as_qwen3moe",
      [](const std::string& k, gguf::Value&) {
        return k != "qwen3moe.rope.dimension_sections" && k != "qwen3moe.n_deepstack_layers";
      },
      nullptr, {}, "qwen3moe");
  auto q = Model::load(as_qwen3);
  EXPECT_EQ(q->config().arch, "qwen3moe");
  const auto lq = prefill_logits(*q);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), lq.begin()));
  for (const auto& s : {std::vector<int32_t>{16, 0, 0, 0}, std::vector<int32_t>{2, 2, 2, 2}}) {
    const std::string p = rewrite("sections", [&](const std::string& k, gguf::Value& v) {
      if (k == "qwen3vlmoe.rope.dimension_sections") v = gguf::Value::i32_array(s);
      return true;
    });
    const auto l = prefill_logits(*Model::load(p));
    EXPECT_TRUE(std::equal(want.begin(), want.end(), l.begin())) << s[0];
  }
}

// Every routing policy runs a decode batch on the softmax router: finite logits and between 1
// and min(B x k, N) active experts per layer; Lynx and OEA no more than top-k.
TEST(Qwen3VlMoe, EveryPolicyRunsOnItsRouter) {
  auto m = Model::load(kDir + kF32 + std::string(".gguf"));
  const auto toks = tokens();
  const int B = 8, V = m->config().n_vocab;
  const int k = m->config().n_expert_used, n_exp = m->config().n_expert;
  std::vector<int> topk_experts;
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
    ASSERT_EQ(st.layers.size(), 2u) << spec;
    for (size_t il = 0; il < st.layers.size(); ++il) {
      const int d = st.layers[il].distinct_experts;
      EXPECT_GE(d, 1) << spec << " " << il;
      EXPECT_LE(d, std::min(B * k, n_exp)) << spec << " " << il;
      if (std::string(spec) == "topk") topk_experts.push_back(d);
      if (std::string(spec) == "lynx" || std::string(spec) == "oea:k0=2") {
        EXPECT_LE(d, topk_experts[il]) << spec << " " << il;
      }
    }
  }
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

TEST(Qwen3VlMoe, BadFilesAreNamed) {
  const std::string sk = "qwen3vlmoe.rope.dimension_sections";
  auto set = [](const std::string& key, gguf::Value val) {
    return [key, val](const std::string& k, gguf::Value& v) {
      if (k == key) v = val;
      return true;
    };
  };
  auto del = [](const std::string& key) {
    return [key](const std::string& k, gguf::Value&) { return k != key; };
  };
  auto drop = [](const char* name) {
    return [name](const gguf::TensorInfo& t) { return t.name == name; };
  };
  expect_load_error(rewrite("no_sections", del(sk)), "missing metadata " + sk);
  expect_load_error(rewrite("sections3", set(sk, gguf::Value::i32_array({6, 5, 5}))),
                    sk + " has 3 entries, expected 4");
  expect_load_error(rewrite("sections_big", set(sk, gguf::Value::i32_array({8, 5, 5, 0}))),
                    sk + " covers 18 frequencies, more than head_dim / 2 = 16");
  expect_load_error(rewrite("sections_neg", set(sk, gguf::Value::i32_array({6, -1, 5, 0}))),
                    sk + " has a negative or huge entry");
  expect_load_error(
      rewrite("rot", nullptr, nullptr, {{"qwen3vlmoe.rope.dimension_count", gguf::Value::u32(16)}}),
      "qwen3vlmoe.rope.dimension_count = 16 differs from the head dimension 32");
  expect_load_error(rewrite("deepstack", set("qwen3vlmoe.n_deepstack_layers", gguf::Value::u32(5))),
                    "qwen3vlmoe.n_deepstack_layers = 5 is out of range [0, 2]");
  expect_load_error(rewrite("no_qnorm", nullptr, drop("blk.1.attn_q_norm.weight")),
                    "missing tensor 'blk.1.attn_q_norm.weight'");
  expect_load_error(rewrite("no_up", nullptr, drop("blk.0.ffn_up_exps.weight")),
                    "missing tensor 'blk.0.ffn_up_exps.weight'");
  expect_load_error(rewrite("heads8", set("qwen3vlmoe.attention.head_count", gguf::Value::u32(8))),
                    "tensor 'blk.0.attn_q.weight' has shape");
}

// The real-shape preset carries the released text_config, and what synth writes at that shape
// cut to a few layers (smaller dims, the layout the same) loads back.
TEST(Qwen3VlMoe, RealShapePreset) {
  const SynthShape s = synth_shape("qwen3-vl-30b");
  EXPECT_EQ(s.arch, "qwen3vlmoe");
  EXPECT_EQ(s.n_layer, 48);
  EXPECT_EQ(s.n_embd, 2048);
  EXPECT_EQ(s.n_head, 32);
  EXPECT_EQ(s.n_head_kv, 4);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.n_vocab, 151936);
  EXPECT_EQ(s.n_expert, 128);
  EXPECT_EQ(s.n_expert_used, 8);
  EXPECT_EQ(s.n_ff_exp, 768);
  EXPECT_EQ(s.rope_base, 5e6f);
  EXPECT_EQ(s.rms_eps, 1e-6f);
  SynthOptions o;
  o.shape = s;
  o.shape.n_layer = 4;
  o.shape.n_embd = 64;
  o.shape.n_vocab = 300;
  o.shape.n_expert = 16;
  o.shape.n_ff_exp = 16;
  o.shape.n_head = 8;
  o.shape.n_head_kv = 2;
  const std::string path = test::scratch_path("qwen3vlmoe_synth.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  EXPECT_EQ(m->config().head_dim, 128);
  EXPECT_EQ(m->config().n_expert_used, 8);
  std::vector<int64_t> sec;
  for (const auto& v : m->file().find("qwen3vlmoe.rope.dimension_sections")->as_array())
    sec.push_back(v.as_int());
  EXPECT_EQ(sec, (std::vector<int64_t>{24, 20, 20, 0}));  // the released mrope_section
  EXPECT_EQ(m->file().get_int("qwen3vlmoe.n_deepstack_layers"), 3);
}

}  // namespace
}  // namespace lynx
