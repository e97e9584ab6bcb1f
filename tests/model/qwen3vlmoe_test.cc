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
#include "family_harness.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"

namespace lynx {
namespace {

const testing_util::FamilyFixtures kFx("qwen3vlmoe");
const std::string kDir = kFx.dir();
const char* const kF32 = "tiny-qwen3vlmoe-f32";
const char* const kQ8 = "tiny-qwen3vlmoe-q8_0";

using testing_util::exact_ctx;
using testing_util::expect_load_error;
using testing_util::rel_err;

constexpr double kTol = 1e-5;

std::vector<float> prefill_logits(const Model& m, const ContextOptions& o = exact_ctx()) {
  return kFx.prefill(m, o);
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

// Every position's logits by prefill, token by token, and batched with another sequence.
TEST(Qwen3VlMoe, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* name : {kF32, kQ8})
    testing_util::expect_goldens_at_every_position(kFx, name, kTol);
}

// The default path of the Q8_0 file (Q8_0 activations, integer products) stays near the exact
// reference and picks the same arg-max at every position.
TEST(Qwen3VlMoe, IntegerPathNearTheGoldens) {
  testing_util::expect_integer_path_near_goldens(kFx, kQ8, 4e-2);
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

// Every routing policy runs a decode batch on the family's router (family_harness.h).
TEST(Qwen3VlMoe, EveryPolicyRunsOnItsRouter) {
  testing_util::expect_every_policy_runs(kFx, kF32, 8);
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
