// mistral4 (Mistral Small 4) and glm-dsa (GLM-5) run as deepseek2, as llama.cpp and
// ik_llama.cpp run them: the MLA fixtures (tests/reference/fixtures/mla, whose goldens come from
// deepseek2_ref.py) written under these architecture names give the same logits as under
// deepseek2, to the bit, and the goldens; glm-dsa's DSA indexer tensors are accepted by name and
// shape and unused, its NextN blocks skipped, its absent expert_gating_func sigmoid; bad files
// named; the real-shape presets.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "../scratch.h"
#include "family_harness.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"

namespace lynx {
namespace {

const testing_util::FamilyFixtures kFx("mla");
const std::string kDir = kFx.dir();

using testing_util::exact_ctx;
using testing_util::expect_load_error;
using testing_util::rel_err;

// Every position's logits by prefill ([n x V]).
std::vector<float> prefill_logits(const Model& m) {
  return kFx.prefill(m);
}

struct ExtraTensor {
  std::string name;
  std::vector<int64_t> ne;
};

// Copies an MLA fixture under architecture `arch` (general.architecture and the keys' prefix),
// letting `edit` change or drop (false) keys, `drop` remove tensors, `add` add keys and `extra`
// add F32 tensors of small values; `copy_layer` >= 0 appends that layer's tensors again as
// blk.<n_layer>. (a NextN block's place).
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using Drop = std::function<bool(const gguf::TensorInfo&)>;
std::string rewrite(const std::string& fixture, const std::string& arch, const std::string& name,
                    const KvEdit& edit = nullptr, const Drop& drop = nullptr,
                    const std::vector<std::pair<std::string, gguf::Value>>& add = {},
                    const std::vector<ExtraTensor>& extra = {}, int copy_layer = -1) {
  gguf::File f = gguf::File::open(kDir + fixture + ".gguf");
  const int n_layer = int(f.get_int("deepseek2.block_count"));
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    std::string k = kv.key;
    gguf::Value v = kv.value;
    if (k == "general.architecture") v = gguf::Value::str(arch);
    if (k.rfind("deepseek2.", 0) == 0) k = arch + k.substr(9);
    if (edit && !edit(k, v)) continue;
    w.set(k, v);
  }
  for (const auto& [k, v] : add) w.set(k, v);
  std::vector<std::vector<float>> keep;
  for (const auto& t : f.tensors()) {
    if (drop && drop(t)) continue;
    const std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
    const std::string p = "blk." + std::to_string(copy_layer) + ".";
    if (copy_layer >= 0 && t.name.rfind(p, 0) == 0) {
      w.add_tensor("blk." + std::to_string(n_layer) + "." + t.name.substr(p.size()), t.type, ne,
                   t.data, t.n_bytes);
    }
  }
  for (const ExtraTensor& x : extra) {
    int64_t n = 1;
    for (int64_t d : x.ne) n *= d;
    keep.emplace_back(size_t(n));
    for (size_t i = 0; i < keep.back().size(); ++i) keep.back()[i] = 0.01f * float(i % 7);
    w.add_tensor(x.name, gguf::TensorType::F32, x.ne, keep.back().data(), size_t(n) * 4);
  }
  const std::string path = test::scratch_path("mla_family_" + name + ".gguf");
  w.write(path);
  return path;
}

// GLM-5's indexer, at the fixture's size (n_embd 256, q_lora_rank 64): 2 heads of 16.
std::vector<ExtraTensor> indexer_tensors(int n_layer) {
  std::vector<ExtraTensor> out;
  for (int il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".indexer.";
    out.push_back({p + "k_norm.weight", {16}});
    out.push_back({p + "k_norm.bias", {16}});
    out.push_back({p + "proj.weight", {256, 2}});
    out.push_back({p + "attn_k.weight", {256, 16}});
    out.push_back({p + "attn_q_b.weight", {64, 32}});
  }
  return out;
}
std::vector<std::pair<std::string, gguf::Value>> indexer_keys() {
  return {{"glm-dsa.attention.indexer.head_count", gguf::Value::u32(2)},
          {"glm-dsa.attention.indexer.key_length", gguf::Value::u32(16)},
          {"glm-dsa.attention.indexer.top_k", gguf::Value::u32(2048)}};
}

void expect_same_as_deepseek2(const std::string& fixture, const std::string& path,
                              const std::string& arch) {
  auto ds = Model::load(kDir + fixture + ".gguf");
  auto m = Model::load(path);
  EXPECT_EQ(m->config().arch, arch);
  EXPECT_TRUE(m->config().mla());
  EXPECT_EQ(m->config().n_layer, ds->config().n_layer);
  EXPECT_EQ(m->config().gating.func, ds->config().gating.func);
  const auto want = prefill_logits(*ds), got = prefill_logits(*m);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin())) << arch << " " << fixture;
  // And the deepseek2 reference's goldens.
  const size_t V = size_t(m->config().n_vocab), n = got.size() / V;
  const auto gold = testing_util::read_logits(kDir + fixture + ".logits.f32", n * V);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_LT(rel_err(std::span(got).subspan(i * V, V), &gold[i * V], V), 1e-5)
        << arch << " " << fixture << " position " << i;
  }
}

TEST(Mistral4, SameLogitsAsDeepseek2) {
  for (const char* fx : {"tiny-deepseek-v2", "tiny-deepseek-v3"}) {
    expect_same_as_deepseek2(fx, rewrite(fx, "mistral4", std::string("m4_") + fx), "mistral4");
  }
}

// Mistral Small 4's YaRN (factor 128 over 8192, mscale_all_dim 1) follows DeepSeek's convention
// as under deepseek2 (llama.cpp and ik_llama.cpp treat the two alike).
TEST(Mistral4, YarnAsDeepseek2) {
  auto yarn = [](const std::string& a) {
    return std::vector<std::pair<std::string, gguf::Value>>{
        {a + ".rope.scaling.type", gguf::Value::str("yarn")},
        {a + ".rope.scaling.factor", gguf::Value::f32(128.f)},
        {a + ".rope.scaling.original_context_length", gguf::Value::u32(8)},
        {a + ".rope.scaling.yarn_log_multiplier", gguf::Value::f32(0.1f)}};
  };
  auto ds = Model::load(
      rewrite("tiny-deepseek-v3", "deepseek2", "ds_yarn", nullptr, nullptr, yarn("deepseek2")));
  auto m4 = Model::load(
      rewrite("tiny-deepseek-v3", "mistral4", "m4_yarn", nullptr, nullptr, yarn("mistral4")));
  EXPECT_TRUE(m4->config().yarn.on);
  EXPECT_EQ(m4->config().yarn.kq_mul, ds->config().yarn.kq_mul);
  EXPECT_NE(m4->config().yarn.kq_mul, 1.f);
  const auto a = prefill_logits(*ds), b = prefill_logits(*m4);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));
  const auto plain = prefill_logits(*Model::load(kDir + "tiny-deepseek-v3.gguf"));
  EXPECT_FALSE(std::equal(a.begin(), a.end(), plain.begin()));  // YaRN took part
}

// Mistral Small 4's llama_4_scaling_beta (attention.temperature_scale) with its YaRN keys and an
// original context of 4 (make_mla_fixtures.py TEMP): the queries of positions 4-11 are scaled
// by 1 + 0.5 ln(1 + floor(p / 4)). The goldens (deepseek2_ref.py) at every position by prefill,
// token by token and batched; without the key positions 0-3 are the same to the bit and the
// later ones differ; deepseek2 reads the key as mistral4 does (llama.cpp's MistralMoe files).
TEST(Mistral4, AttentionTemperatureGoldensPastTheOriginalContext) {
  auto keys = [](const std::string& a, bool temp) {
    std::vector<std::pair<std::string, gguf::Value>> k = {
        {a + ".rope.scaling.type", gguf::Value::str("yarn")},
        {a + ".rope.scaling.factor", gguf::Value::f32(128.f)},
        {a + ".rope.scaling.original_context_length", gguf::Value::u32(4)},
        {a + ".rope.scaling.yarn_log_multiplier", gguf::Value::f32(0.1f)}};
    if (temp) k.push_back({a + ".attention.temperature_scale", gguf::Value::f32(0.5f)});
    return k;
  };
  auto m4 = Model::load(
      rewrite("tiny-deepseek-v3", "mistral4", "m4_temp", nullptr, nullptr, keys("mistral4", true)));
  EXPECT_EQ(m4->config().attn_temp.scale, 0.5f);
  EXPECT_EQ(m4->config().attn_temp.floor_len, 4);
  testing_util::expect_goldens_at_every_position(kFx, *m4, "tiny-deepseek-v3-temp");

  auto off = Model::load(rewrite("tiny-deepseek-v3", "mistral4", "m4_temp_off", nullptr, nullptr,
                                 keys("mistral4", false)));
  EXPECT_FALSE(off->config().attn_temp.on());
  const auto a = prefill_logits(*m4), b = prefill_logits(*off);
  const size_t V = size_t(m4->config().n_vocab), n = a.size() / V;
  ASSERT_EQ(n, 12u);
  for (size_t i = 0; i < n; ++i) {
    const bool same =
        std::equal(a.begin() + long(i * V), a.begin() + long((i + 1) * V), b.begin() + long(i * V));
    if (i < 4) {
      EXPECT_TRUE(same) << "position " << i;
    } else {
      EXPECT_GT(rel_err(std::span(a).subspan(i * V, V), &b[i * V], V), 1e-3) << "position " << i;
    }
  }
  auto ds = Model::load(rewrite("tiny-deepseek-v3", "deepseek2", "ds_temp", nullptr, nullptr,
                                keys("deepseek2", true)));
  const auto d = prefill_logits(*ds);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), d.begin()));
}

// A GLM-5 file: the indexer's tensors and keys in every layer, a NextN block after the trunk
// (block_count 3, nextn_predict_layers 1): the deepseek2 logits, the trunk's 2 layers.
TEST(GlmDsa, SameLogitsAsDeepseek2WithIndexerAndNextN) {
  auto keys = indexer_keys();
  keys.push_back({"glm-dsa.nextn_predict_layers", gguf::Value::u32(1)});
  const std::string p = rewrite(
      "tiny-deepseek-v3", "glm-dsa", "glm5",
      [](const std::string& k, gguf::Value& v) {
        if (k == "glm-dsa.block_count") v = gguf::Value::u32(3);
        return true;
      },
      nullptr, keys, indexer_tensors(3), 1);
  expect_same_as_deepseek2("tiny-deepseek-v3", p, "glm-dsa");
  auto m = Model::load(p);
  EXPECT_EQ(m->config().n_layer, 2);
  EXPECT_EQ(m->config().n_layer_nextn, 1);
  EXPECT_NE(m->file().find_tensor("blk.0.indexer.attn_q_b.weight"), nullptr);
}

// An absent expert_gating_func is sigmoid for glm-dsa (GLM-5's router), whatever the layout:
// the fixture's key at 1 (softmax) routes otherwise.
TEST(GlmDsa, MissingGatingKeyIsSigmoid) {
  auto no_key = Model::load(rewrite(
      "tiny-deepseek-v3", "glm-dsa", "glm5_nogate",
      [](const std::string& k, gguf::Value&) { return k != "glm-dsa.expert_gating_func"; },
      [](const gguf::TensorInfo& t) { return t.name.find("exp_probs_b") != std::string::npos; }));
  EXPECT_EQ(no_key->config().gating.func, GatingFunc::kSigmoid);
  auto softmax = Model::load(rewrite("tiny-deepseek-v3", "glm-dsa", "glm5_softmax",
                                     [](const std::string& k, gguf::Value& v) {
                                       if (k == "glm-dsa.expert_gating_func")
                                         v = gguf::Value::u32(1);
                                       return true;
                                     }));
  EXPECT_EQ(softmax->config().gating.func, GatingFunc::kSoftmax);
  // deepseek2 itself would take this file (no key, no exp_probs_b) as softmax.
  auto ds = Model::load(rewrite(
      "tiny-deepseek-v3", "deepseek2", "ds_nogate",
      [](const std::string& k, gguf::Value&) { return k != "deepseek2.expert_gating_func"; },
      [](const gguf::TensorInfo& t) { return t.name.find("exp_probs_b") != std::string::npos; }));
  EXPECT_EQ(ds->config().gating.func, GatingFunc::kSoftmax);
}

TEST(GlmDsa, BadFilesAreNamed) {
  auto idx = indexer_tensors(2);
  // Another tensor under indexer. is not taken for the indexer's.
  auto unknown = idx;
  unknown.push_back({"blk.1.indexer.weights_proj.weight", {256, 2}});
  expect_load_error(rewrite("tiny-deepseek-v3", "glm-dsa", "unknown_idx", nullptr, nullptr,
                            indexer_keys(), unknown),
                    "tensor 'blk.1.indexer.weights_proj.weight' is not one of the DSA indexer's");
  auto wrong = idx;
  wrong[2].ne = {256, 3};  // blk.0.indexer.proj.weight: 3 heads, the keys say 2
  expect_load_error(
      rewrite("tiny-deepseek-v3", "glm-dsa", "wrong_idx", nullptr, nullptr, indexer_keys(), wrong),
      "tensor 'blk.0.indexer.proj.weight' has shape [256, 3], expected [256, 2]");
  expect_load_error(
      rewrite("tiny-deepseek-v3", "glm-dsa", "no_idx_keys", nullptr, nullptr, {}, idx),
      "needs metadata glm-dsa.attention.indexer.head_count");
  expect_load_error(
      rewrite("tiny-deepseek-v3", "glm-dsa", "no_kb", nullptr,
              [](const gguf::TensorInfo& t) { return t.name == "blk.1.attn_k_b.weight"; }),
      "missing tensor 'blk.1.attn_k_b.weight'");
  expect_load_error(rewrite("tiny-deepseek-v3", "glm-dsa", "nextn", nullptr, nullptr,
                            {{"glm-dsa.nextn_predict_layers", gguf::Value::u32(2)}}),
                    "glm-dsa.nextn_predict_layers = 2 is out of range [0, 1]");
}

TEST(Mistral4, BadFilesAreNamed) {
  expect_load_error(
      rewrite("tiny-deepseek-v3", "mistral4", "m4_no_shexp", nullptr,
              [](const gguf::TensorInfo& t) { return t.name == "blk.1.ffn_up_shexp.weight"; }),
      "missing tensor 'blk.1.ffn_up_shexp.weight'");
  expect_load_error(rewrite("tiny-deepseek-v3", "mistral4", "m4_no_lora",
                            [](const std::string& k, gguf::Value&) {
                              return k != "mistral4.attention.kv_lora_rank";
                            }),
                    "mistral4.attention.kv_lora_rank");
}

// The released shapes, and a cut of each (the layout the same, smaller dims) that loads back.
TEST(MlaFamilies, RealShapePresets) {
  const SynthShape m4 = synth_shape("mistral-small-4");
  EXPECT_EQ(m4.arch, "mistral4");
  EXPECT_EQ(m4.n_layer, 36);
  EXPECT_EQ(m4.n_embd, 4096);
  EXPECT_EQ(m4.n_head, 32);
  EXPECT_EQ(m4.q_lora_rank, 1024);
  EXPECT_EQ(m4.kv_lora_rank, 256);
  EXPECT_EQ(m4.qk_nope_dim + m4.qk_rope_dim, m4.head_dim);
  EXPECT_EQ(m4.v_head_dim, 128);
  EXPECT_EQ(m4.n_expert, 128);
  EXPECT_EQ(m4.n_expert_used, 4);
  EXPECT_EQ(m4.n_ff_exp, 2048);
  EXPECT_EQ(m4.n_expert_shared, 1);
  EXPECT_EQ(m4.n_layer_dense_lead, 0);
  EXPECT_FALSE(m4.sigmoid);
  EXPECT_EQ(m4.yarn_factor, 128.f);
  EXPECT_EQ(m4.yarn_orig_ctx, 8192);
  EXPECT_EQ(m4.n_vocab, 131072);
  const SynthShape g5 = synth_shape("glm-5");
  EXPECT_EQ(g5.arch, "glm-dsa");
  EXPECT_EQ(g5.n_embd, 6144);
  EXPECT_EQ(g5.n_head, 64);
  EXPECT_EQ(g5.q_lora_rank, 2048);
  EXPECT_EQ(g5.kv_lora_rank, 512);
  EXPECT_EQ(g5.qk_nope_dim, 192);
  EXPECT_EQ(g5.v_head_dim, 256);
  EXPECT_EQ(g5.n_expert, 256);
  EXPECT_EQ(g5.n_expert_used, 8);
  EXPECT_EQ(g5.n_layer_dense_lead, 3);
  EXPECT_TRUE(g5.sigmoid);
  EXPECT_TRUE(g5.select_bias);
  EXPECT_EQ(g5.weights_scale, 2.5f);
  EXPECT_EQ(g5.n_vocab, 154880);
  for (SynthShape s : {m4, g5}) {
    SynthOptions o;
    o.shape = s;
    o.shape.n_layer = 4;
    o.shape.n_embd = 64;
    o.shape.n_head = 2;
    o.shape.n_head_kv = 2;
    o.shape.n_vocab = 300;
    o.shape.n_ff = 64;
    o.shape.n_expert = 16;
    o.shape.n_ff_exp = 16;
    o.shape.q_lora_rank = s.q_lora_rank / 16;
    o.shape.kv_lora_rank = s.kv_lora_rank / 16;
    o.type = gguf::TensorType::F32;
    const std::string path = test::scratch_path("mla_family_synth_" + s.arch + ".gguf");
    write_synth_model(o, path);
    auto m = Model::load(path);
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.arch, s.arch);
    EXPECT_EQ(c.qk_nope_dim, s.qk_nope_dim);
    EXPECT_EQ(c.v_head_dim, s.v_head_dim);
    EXPECT_EQ(c.n_layer_dense_lead, s.n_layer_dense_lead);
    EXPECT_EQ(c.gating.func, s.sigmoid ? GatingFunc::kSigmoid : GatingFunc::kSoftmax);
    EXPECT_EQ(c.yarn.on, s.yarn_factor > 0.f);
    const auto l = prefill_logits(*m);
    EXPECT_TRUE(std::all_of(l.begin(), l.end(), [](float x) { return std::isfinite(x); }));
  }
}

}  // namespace
}  // namespace lynx
