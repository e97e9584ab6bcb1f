// deepseek2 files without expert_gating_func (issue 33): DeepSeek-V2 / V2.5 files predate the
// key and route by softmax; GLM-4.7-Flash files lack it too and route by sigmoid with a
// selection bias. The loader decides as llama.cpp and ik_llama.cpp do (GLM-4.7-Flash's 47/48
// layers and 154880-token vocabulary) and, beyond them, by the file's exp_probs_b
// (src/model/arch/deepseek2.cc, gating_func).
#include <gtest/gtest.h>

#include <algorithm>

#include "../scratch.h"
#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"

namespace lynx {
namespace {

constexpr const char* kKey = "deepseek2.expert_gating_func";

// A synth file of `shape` (cut to 2 layers, 300 tokens) unless `o` is given.
std::string synth(const std::string& name, SynthOptions o) {
  const std::string path = test::scratch_path("ds2gating_" + name + ".gguf");
  o.type = gguf::TensorType::F32;
  write_synth_model(o, path);
  return path;
}

SynthOptions small(const char* shape) {
  SynthOptions o;
  o.shape = synth_shape(shape);
  o.shape.n_layer = 2;
  o.shape.n_vocab = 300;
  return o;
}

// A copy of `src` with expert_gating_func dropped (value < 0) or set to `value`.
std::string with_gating(const std::string& src, const std::string& name, int value) {
  gguf::File f = gguf::File::open(src);
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    if (kv.key == kKey) {
      if (value >= 0) w.set(kv.key, gguf::Value::u32(uint32_t(value)));
      continue;
    }
    w.set(kv.key, kv.value);
  }
  for (const auto& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
  }
  const std::string path = test::scratch_path("ds2gating_" + name + ".gguf");
  w.write(path);
  return path;
}

std::vector<float> logits(const Model& m) {
  Context ctx(m, testing_util::exact_ctx());
  const int32_t s = ctx.new_sequence();
  const std::vector<int32_t> toks = {1, 7, 42, 100, 255, 3};
  std::vector<BatchToken> batch;
  for (int i = 0; i < int(toks.size()); ++i)
    batch.push_back({toks[size_t(i)], s, i, kTokenPrefill, true});
  ctx.eval(batch);
  std::vector<float> out;
  for (int i = 0; i < int(toks.size()); ++i) {
    const auto l = ctx.logits(i);
    out.insert(out.end(), l.begin(), l.begin() + m.config().n_vocab);
  }
  return out;
}

// A V3-layout file (exp_probs_b in its MoE layers) without the key runs as with key 2
// (sigmoid), bit for bit, and not as with key 1; before the fix it ran softmax + bias.
TEST(Deepseek2Gating, MissingKeyWithSelectionBiasIsSigmoid) {
  const std::string v3 = synth("v3", small("tiny-deepseek-v3"));
  ASSERT_NE(gguf::File::open(v3).find(kKey), nullptr);
  const std::string none = with_gating(v3, "v3_none", -1);
  ASSERT_EQ(gguf::File::open(none).find(kKey), nullptr);
  auto a = Model::load(none);
  EXPECT_EQ(a->config().gating.func, GatingFunc::kSigmoid);
  EXPECT_TRUE(a->config().gating.select_bias);
  // 0 (llama.cpp's "none") is read like an absent key.
  EXPECT_EQ(Model::load(with_gating(v3, "v3_zero", 0))->config().gating.func, GatingFunc::kSigmoid);
  const auto la = logits(*a);
  const auto l2 = logits(*Model::load(with_gating(v3, "v3_sigmoid", 2)));
  const auto l1 = logits(*Model::load(with_gating(v3, "v3_softmax", 1)));
  EXPECT_TRUE(std::equal(la.begin(), la.end(), l2.begin()));
  EXPECT_FALSE(std::equal(la.begin(), la.end(), l1.begin()));
}

// A V2-layout file (no selection bias) without the key stays softmax, as DeepSeek-V2 / V2.5
// files need: the same logits as with key 1.
TEST(Deepseek2Gating, MissingKeyWithoutSelectionBiasIsSoftmax) {
  const std::string v2 = synth("v2", small("tiny-deepseek-v2"));
  auto a = Model::load(with_gating(v2, "v2_none", -1));
  EXPECT_EQ(a->config().gating.func, GatingFunc::kSoftmax);
  EXPECT_FALSE(a->config().gating.select_bias);
  const auto la = logits(*a);
  const auto l1 = logits(*Model::load(with_gating(v2, "v2_softmax", 1)));
  EXPECT_TRUE(std::equal(la.begin(), la.end(), l1.begin()));
}

// llama.cpp's rule: GLM-4.7-Flash is a deepseek2 file of 47 (or 48) layers and a 154880-token
// vocabulary; without the key it is sigmoid even without exp_probs_b, and the same layout with
// another vocabulary is softmax. Tiny widths keep the 47 layers cheap.
TEST(Deepseek2Gating, MissingKeyGlm47FlashShapeIsSigmoid) {
  SynthOptions o;
  o.shape = synth_shape("tiny-deepseek-v2");
  o.shape.n_layer = 47;
  o.shape.n_embd = 32;
  o.shape.n_head = 2;
  o.shape.n_head_kv = 2;
  o.shape.kv_lora_rank = 16;
  o.shape.qk_nope_dim = 8;
  o.shape.qk_rope_dim = 8;
  o.shape.head_dim = 16;
  o.shape.v_head_dim = 8;
  o.shape.n_ff = 16;
  o.shape.n_expert = 4;
  o.shape.n_expert_used = 2;
  o.shape.n_ff_exp = 16;
  o.shape.n_expert_shared = 1;
  o.shape.n_vocab = 154880;
  const std::string flash = with_gating(synth("flash", o), "flash_none", -1);
  EXPECT_EQ(Model::load(flash)->config().gating.func, GatingFunc::kSigmoid);
  o.shape.n_vocab = 300;
  const std::string other = with_gating(synth("other", o), "other_none", -1);
  EXPECT_EQ(Model::load(other)->config().gating.func, GatingFunc::kSoftmax);
}

}  // namespace
}  // namespace lynx
