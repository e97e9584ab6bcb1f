// `convert` (Hugging Face checkpoint -> GGUF) against independent references: the tiny
// checkpoints of tests/reference/make_hf_checkpoint.py are the golden fixtures' weights put
// back into HF layout by NumPy code (q/k rows un-permuted, experts unstacked, DeepSeek's kv_b
// joined), so converting them must give the goldens' logits; the dense Qwen checkpoints come
// with an expected.gguf written by the script from the same values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../model/logits_util.h"
#include "../scratch.h"
#include "hf_fixtures.h"
#include "kernels/kernels.h"
#include "lynx/context.h"
#include "lynx/convert.h"
#include "lynx/error.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/tokenizer.h"

namespace lynx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

const std::string& hf_root() {
  return test::hf_checkpoints();
}

#define REQUIRE_CHECKPOINTS()                                                   \
  if (hf_root().empty()) GTEST_SKIP() << "python3 with numpy is not available"; \
  static_assert(true)

std::string hf(const std::string& name) {
  return hf_root() + "/" + name;
}

std::string convert_to(const std::string& dir, const std::string& type, const std::string& tag) {
  const std::string out = test::scratch_path(tag + ".gguf");
  ConvertOptions o;
  o.type = type;
  convert_hf(dir, out, o);
  return out;
}

struct Golden {
  std::string fixture_gguf;  // the GGUF the goldens were computed from
  std::vector<int32_t> tokens;
  std::vector<float> logits;
};

Golden golden_of(const std::string& fixture_name) {
  std::ifstream f(kFixtures + "goldens.json");
  const json j = json::parse(f);
  for (const auto& x : j["fixtures"]) {
    if (x["name"] != fixture_name) continue;
    Golden g;
    g.fixture_gguf = kFixtures + x["file"].get<std::string>();
    g.tokens = x["tokens"].get<std::vector<int32_t>>();
    g.logits = testing_util::read_logits(kFixtures + x["logits_file"].get<std::string>(),
                                         g.tokens.size() * size_t(x["n_vocab"].get<int>()));
    return g;
  }
  ADD_FAILURE() << "no fixture " << fixture_name;
  return {};
}

// A family suite's golden: fixtures/<dir>/<shape>.gguf, .logits.f32 and tokens.txt.
Golden dir_golden(const std::string& dir, const std::string& shape) {
  Golden g;
  g.fixture_gguf = kFixtures + dir + "/" + shape + ".gguf";
  g.tokens = testing_util::read_tokens(kFixtures + dir + "/tokens.txt");
  const auto m = Model::load(g.fixture_gguf);
  g.logits = testing_util::read_logits(kFixtures + dir + "/" + shape + ".logits.f32",
                                       g.tokens.size() * size_t(m->config().n_vocab));
  return g;
}

// Largest |a - b| over the largest |b| (the MLA suite's measure).
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / den;
}

struct Case {
  const char* checkpoint;
  const char* golden;  // goldens.json fixture, or "<fixture dir>:<shape>"
  const char* arch;
  const char* type = "f32";
};
const Case kCases[] = {
    {"mixtral", "llama-moe-f32", "llama"},
    {"llama", "llama-dense-f32", "llama"},
    {"qwen2_moe", "qwen2moe-f32", "qwen2moe"},
    {"qwen3_moe", "qwen3moe-f32", "qwen3moe"},
    {"olmoe", "olmoe-f32", "olmoe"},
    {"deepseek_v2", "mla:tiny-deepseek-v2", "deepseek2"},
    {"deepseek_v3", "mla:tiny-deepseek-v3", "deepseek2"},
    // MXFP4 experts kept ("auto": F32 elsewhere, the checkpoint's type) and the dequantized
    // (F16 experts) layout.
    {"gpt_oss", "gpt-oss:tiny-gpt-oss", "gpt-oss", "auto"},
    {"gpt_oss_dequant", "gpt-oss:tiny-gpt-oss-f16-experts", "gpt-oss"},
    {"glm4_moe", "glm4moe:tiny-glm4moe", "glm4moe"},
    {"glm4_moe_qknorm", "glm4moe:tiny-glm4moe-qknorm", "glm4moe"},
    {"minimax_m2", "minimax-m2:tiny-minimax-m2-f32", "minimax-m2"},
    {"dots1", "dots1:tiny-dots1-f32", "dots1"},
    {"ernie4_5_moe", "ernie4_5-moe:tiny-ernie4_5-moe-f32", "ernie4_5-moe"},
    {"qwen3_vl_moe", "qwen3vlmoe:tiny-qwen3vlmoe-f32", "qwen3vlmoe"},
    {"bailing_moe_v2", "bailingmoe2:tiny-bailingmoe2-f32", "bailingmoe2"},
    // Gated DeltaNet: in_proj_qkvz split / Qwen3.5's value heads tiled, ssm_a = -exp(A_log),
    // the (1 + w) norms stored with the 1 added; Qwen3.5's experts fused outputs first.
    {"qwen3_next", "qwen3next:tiny-qwen3next-f32", "qwen3next"},
    {"qwen3_5_moe", "qwen3next:tiny-qwen35moe-f32", "qwen35moe"},
    // Per-layer heads / rope / clamps from the config lists, norms + 1, experts stacked 3-D,
    // rope_freqs computed from the llama3-type rope_scaling.
    {"step3p5", "step35:tiny-step35-f32", "step35"},
    // Gemma 4: text_config, norms as stored, gate_up_proj split, no v_proj in the full layer,
    // rope_freqs computed from the full layers' proportional rope.
    {"gemma4", "gemma4:tiny-gemma4-f32", "gemma4"},
    // Hunyuan-A13B: the released config's names and per-layer lists, the NTK alpha folded into
    // the rope base, the router mlp.gate.wg, the shared MLP.
    {"hunyuan", "hunyuan-moe:tiny-hunyuan-moe-f32", "hunyuan-moe"},
    // GLM-5 runs as deepseek2 (its indexer checked, not run): DeepSeek-V3's goldens.
    {"glm_moe_dsa", "mla:tiny-deepseek-v3", "glm-dsa"},
    // Mistral Small 4 runs as deepseek2: the multimodal layout, experts fused outputs first.
    {"mistral3", "mla:tiny-deepseek-v2", "mistral4"},
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.checkpoint;
}

class ConvertGolden : public ::testing::TestWithParam<Case> {};

// Converted at F32, the engine gives the fixture's golden logits at every position, and the
// same logits as on the fixture's own GGUF.
TEST_P(ConvertGolden, LogitsMatchReference) {
  REQUIRE_CHECKPOINTS();
  const Case& c = GetParam();
  const std::string g_name = c.golden;
  const size_t colon = g_name.find(':');
  const bool in_dir = colon != std::string::npos;
  const Golden g =
      in_dir ? dir_golden(g_name.substr(0, colon), g_name.substr(colon + 1)) : golden_of(g_name);
  const std::string out = convert_to(hf(c.checkpoint), c.type, c.checkpoint);
  const auto model = Model::load(out);
  EXPECT_EQ(model->config().arch, c.arch);
  const auto got = testing_util::prefill_logits(*model, g.tokens);
  ASSERT_EQ(got.size(), g.logits.size());
  if (in_dir) {
    EXPECT_LT(rel_err(got, g.logits), 1e-5) << c.checkpoint;
  } else {
    EXPECT_LT(testing_util::nmse(got, g.logits), 1e-5) << c.checkpoint;
  }
  // The fixture file holds the same values (F32, or Q8_0 decoded exactly): same logits.
  const auto ref = Model::load(g.fixture_gguf);
  EXPECT_LT(rel_err(got, testing_util::prefill_logits(*ref, g.tokens)), 1e-6) << c.checkpoint;
  fs::remove(out);
}

INSTANTIATE_TEST_SUITE_P(Families, ConvertGolden, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.checkpoint); });

// --mla-split: kv_b_proj per head into attn_k_b / attn_v_b, the layout of the fixtures (and
// of newer llama.cpp): every value equals the fixture's, and the goldens still hold.
TEST(Convert, DeepseekSplitLayout) {
  REQUIRE_CHECKPOINTS();
  for (const char* shape : {"tiny-deepseek-v2", "tiny-deepseek-v3"}) {
    SCOPED_TRACE(shape);
    const std::string name =
        std::string(shape) == "tiny-deepseek-v2" ? "deepseek_v2" : "deepseek_v3";
    const std::string out = test::scratch_path(name + "-split.gguf");
    ConvertOptions o;
    o.type = "f32";
    o.mla_split = true;
    convert_hf(hf(name), out, o);
    const Golden g = dir_golden("mla", shape);
    {
      const auto got = gguf::File::open(out);
      const auto want = gguf::File::open(g.fixture_gguf);
      EXPECT_FALSE(got.find_tensor("blk.0.attn_kv_b.weight"));
      EXPECT_EQ(got.get_int("deepseek2.attention.head_count_kv"), 1);
      EXPECT_EQ(got.get_int("deepseek2.attention.key_length_mla"),
                want.get_int("deepseek2.attention.key_length_mla"));
      for (const char* t : {"blk.0.attn_k_b.weight", "blk.1.attn_k_b.weight",
                            "blk.0.attn_v_b.weight", "blk.1.attn_v_b.weight"}) {
        const gguf::TensorInfo& a = got.tensor(t);
        const gguf::TensorInfo& b = want.tensor(t);
        ASSERT_EQ(a.shape_string(), b.shape_string()) << t;
        std::vector<float> va(size_t(a.n_elements())), vb(va.size());
        kernels::ref::dequantize_row(a.type, a.data, va.data(), a.n_elements());
        kernels::ref::dequantize_row(b.type, b.data, vb.data(), b.n_elements());
        EXPECT_EQ(va, vb) << t;
      }
    }
    const auto model = Model::load(out);
    EXPECT_LT(rel_err(testing_util::prefill_logits(*model, g.tokens), g.logits), 1e-5);
    fs::remove(out);
  }
}

// Dense Qwen2 (F16 checkpoint) and Qwen3 (BF16): "auto" keeps the checkpoint's type, and every
// tensor equals the script's expected.gguf byte for byte.
TEST(Convert, DenseQwenMatchesExpectedGguf) {
  REQUIRE_CHECKPOINTS();
  for (const char* name : {"qwen2", "qwen3"}) {
    SCOPED_TRACE(name);
    const std::string out = convert_to(hf(name), "auto", name);
    const auto got = gguf::File::open(out);
    const auto want = gguf::File::open(hf(name) + "/expected.gguf");
    EXPECT_EQ(got.get_string("general.architecture"), name);
    ASSERT_EQ(got.tensors().size(), want.tensors().size());
    for (const auto& w : want.tensors()) {
      const gguf::TensorInfo* t = got.find_tensor(w.name);
      ASSERT_NE(t, nullptr) << w.name;
      EXPECT_EQ(t->type, w.type) << w.name;
      EXPECT_EQ(t->shape_string(), w.shape_string()) << w.name;
      ASSERT_EQ(t->n_bytes, w.n_bytes) << w.name;
      EXPECT_EQ(std::memcmp(t->data, w.data, w.n_bytes), 0) << w.name;
    }
    for (const auto& kv : want.metadata()) {
      const gguf::Value* v = got.find(kv.key);
      ASSERT_NE(v, nullptr) << kv.key;
      EXPECT_EQ(v->to_string(), kv.value.to_string()) << kv.key;
    }
    const std::vector<int32_t> toks = {1, 17, 42, 99, 5, 64};
    const auto a = Model::load(out), b = Model::load(hf(name) + "/expected.gguf");
    EXPECT_EQ(testing_util::prefill_logits(*a, toks), testing_util::prefill_logits(*b, toks));
    fs::remove(out);
  }
}

// tokenizer.ggml.*: ids padded, added tokens typed, merges, special ids, chat templates.
TEST(Convert, TokenizerKeys) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to(hf("qwen3_moe"), "f32", "tok");
  const auto f = gguf::File::open(out);
  const int64_t n = f.tensor("token_embd.weight").ne[1];
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
  const auto& toks = f.get_array("tokenizer.ggml.tokens");
  const auto& types = f.get_array("tokenizer.ggml.token_type");
  ASSERT_EQ(int64_t(toks.size()), n);
  ASSERT_EQ(int64_t(types.size()), n);
  EXPECT_EQ(toks[0].as_string(), "\xc4\xa0");  // "Ġ"
  EXPECT_EQ(types[0].as_int(), 1);
  EXPECT_EQ(toks[size_t(n - 5)].as_string(), "[PAD" + std::to_string(n - 5) + "]");
  EXPECT_EQ(types[size_t(n - 5)].as_int(), 5);
  EXPECT_EQ(toks[size_t(n - 4)].as_string(), "<tool>");
  EXPECT_EQ(types[size_t(n - 4)].as_int(), 4);  // added, not special: user-defined
  EXPECT_EQ(toks[size_t(n - 1)].as_string(), "<|im_end|>");
  EXPECT_EQ(types[size_t(n - 1)].as_int(), 3);
  const auto& merges = f.get_array("tokenizer.ggml.merges");
  ASSERT_EQ(merges.size(), 3u);
  EXPECT_EQ(merges[0].as_string(), "\xc4\xa0 t");  // written as a pair in this checkpoint
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), n - 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), n - 3);
  EXPECT_FALSE(f.has("tokenizer.ggml.bos_token_id"));
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_NE(f.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(f.get_string("tokenizer.chat_template.tool_use"), "{{ tools }}");
  // lynx's own tokenizer loads it: " the" is one merged token.
  const auto tok = Tokenizer::from_gguf(f);
  const auto ids = tok->encode(" the", false, false);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(toks[size_t(ids[0])].as_string(), "\xc4\xa0the");
  fs::remove(out);
}

// Hunyuan-A13B's tiktoken tokenizer (hy.tiktoken, no tokenizer.json): tokens in rank order in
// GPT-2's byte form, merges recovered from the ranks (the expected ones written out by hand in
// the fixture script), special tokens from added_tokens_decoder; then lynx's tokenizer on the
// converted file encodes as the script's own rank-based BPE does.
TEST(Convert, TiktokenTokenizer) {
  REQUIRE_CHECKPOINTS();
  const std::string dir = hf("hunyuan_tiktoken");
  ASSERT_FALSE(fs::exists(dir + "/tokenizer.json"));
  std::ifstream ef(dir + "/expected_tokenizer.json");
  const json e = json::parse(ef);
  const std::string out = convert_to(dir, "f32", "tiktoken");
  const auto f = gguf::File::open(out);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "hunyuan");
  const auto& toks = f.get_array("tokenizer.ggml.tokens");
  const auto& types = f.get_array("tokenizer.ggml.token_type");
  const auto& merges = f.get_array("tokenizer.ggml.merges");
  ASSERT_EQ(toks.size(), e["tokens"].size());
  ASSERT_EQ(types.size(), e["types"].size());
  for (size_t i = 0; i < toks.size(); ++i) {
    EXPECT_EQ(toks[i].as_string(), e["tokens"][i].get<std::string>()) << i;
    EXPECT_EQ(types[i].as_int(), e["types"][i].get<int>()) << i;
  }
  ASSERT_EQ(merges.size(), e["merges"].size());
  for (size_t i = 0; i < merges.size(); ++i)
    EXPECT_EQ(merges[i].as_string(), e["merges"][i].get<std::string>()) << i;
  // The merges that are not the first split of the token (" th" = " " + "th", as "th" ranks
  // below " t").
  EXPECT_EQ(merges[3].as_string(), "\xc4\xa0 th");
  EXPECT_EQ(merges[5].as_string(), "\xc4\xa0th e");
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), e["bos"].get<int64_t>());
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), e["eos"].get<int64_t>());
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), e["pad"].get<int64_t>());
  EXPECT_NE(f.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);
  const auto tok = Tokenizer::from_gguf(f);
  for (const json& c : e["encode"]) {
    const std::string text = c[0].get<std::string>();
    EXPECT_EQ(tok->encode(text, false, false), c[1].get<std::vector<int32_t>>()) << text;
  }
  fs::remove(out);
}

// Mixtral's SentencePiece tokenizer.model: pieces, scores and types, padded to the embedding.
TEST(Convert, SentencePieceTokenizer) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to(hf("mixtral"), "f32", "spm");
  const auto f = gguf::File::open(out);
  const int64_t n = f.tensor("token_embd.weight").ne[1];
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_FALSE(f.has("tokenizer.ggml.merges"));
  const auto& toks = f.get_array("tokenizer.ggml.tokens");
  const auto& types = f.get_array("tokenizer.ggml.token_type");
  const auto& scores = f.get_array("tokenizer.ggml.scores");
  ASSERT_EQ(int64_t(toks.size()), n);
  ASSERT_EQ(int64_t(scores.size()), n);
  EXPECT_EQ(toks[0].as_string(), "<unk>");
  EXPECT_EQ(types[0].as_int(), 2);
  EXPECT_EQ(types[1].as_int(), 3);
  EXPECT_EQ(toks[3].as_string(), "\xe2\x96\x81the");  // "▁the"
  EXPECT_EQ(types[3].as_int(), 1);
  EXPECT_EQ(scores[4].as_float(), -1.0);
  EXPECT_EQ(toks[size_t(n - 1)].as_string(), "[PAD" + std::to_string(n - 1) + "]");
  EXPECT_EQ(types[size_t(n - 1)].as_int(), 5);
  EXPECT_EQ(scores[size_t(n - 1)].as_float(), -1000.0);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(f.get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_NE(f.get_string("tokenizer.chat_template").find("[INST]"), std::string::npos);
  const auto tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok->encode("the", false, false), std::vector<int32_t>{3});
  fs::remove(out);
}

// --type: F16 / BF16 / Q8_0 matrices, norms and routers F32, general.file_type as llama.cpp's;
// a quantized conversion stays close to the goldens; a K-quant mix loads.
TEST(Convert, WeightTypes) {
  REQUIRE_CHECKPOINTS();
  const Golden g = golden_of("llama-moe-f32");
  const struct {
    const char* type;
    gguf::TensorType want;
    int64_t ftype;
    double max_nmse;
  } cases[] = {
      {"f16", gguf::TensorType::F16, 1, 1e-4},
      {"bf16", gguf::TensorType::BF16, 32, 1e-3},
      {"q8_0", gguf::TensorType::Q8_0, 7, 1e-3},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.type);
    const std::string out = convert_to(hf("mixtral"), c.type, c.type);
    {
      const auto f = gguf::File::open(out);
      EXPECT_EQ(f.get_int("general.file_type"), c.ftype);
      EXPECT_EQ(f.tensor("blk.0.attn_q.weight").type, c.want);
      EXPECT_EQ(f.tensor("blk.1.ffn_down_exps.weight").type, c.want);
      EXPECT_EQ(f.tensor("blk.0.attn_norm.weight").type, gguf::TensorType::F32);
      EXPECT_EQ(f.tensor("blk.0.ffn_gate_inp.weight").type, gguf::TensorType::F32);
    }
    const auto m = Model::load(out);
    EXPECT_LT(testing_util::nmse(testing_util::prefill_logits(*m, g.tokens), g.logits), c.max_nmse);
    fs::remove(out);
  }
  const std::string out = convert_to(hf("qwen2_moe"), "Q4_K_M", "q4km");
  const auto f = gguf::File::open(out);
  EXPECT_EQ(f.get_int("general.file_type"), 15);
  EXPECT_EQ(f.get_int("general.quantization_version"), 2);
  EXPECT_NO_THROW(Model::load(out));
  fs::remove(out);
}

// FP8 releases: float8_e4m3fn weights times their weight_scale_inv, per tensor (Mistral Small
// 4: a scalar, one per expert for the fused experts; its activation scales dropped) or per block
// (GLM-5-FP8, DeepSeek-V3: a grid, ragged at the edge), convert to the same file as a twin
// checkpoint holding those values in F32 (make_hf_checkpoint_more.py decodes the codes with its
// own table), tensor by tensor; "auto" makes an FP8 checkpoint BF16 where nothing is F32.
TEST(Convert, Fp8IsDequantizedAsTheTwin) {
  REQUIRE_CHECKPOINTS();
  for (const char* name : {"mistral3_fp8", "glm_moe_dsa_fp8"}) {
    SCOPED_TRACE(name);
    const std::string a = convert_to(hf(name), "f32", name);
    const std::string b = convert_to(hf(std::string(name) + "_dequant"), "f32", "twin");
    {
      const auto got = gguf::File::open(a), want = gguf::File::open(b);
      ASSERT_EQ(got.tensors().size(), want.tensors().size());
      for (const auto& w : want.tensors()) {
        const gguf::TensorInfo* t = got.find_tensor(w.name);
        ASSERT_NE(t, nullptr) << w.name;
        ASSERT_EQ(t->shape_string(), w.shape_string()) << w.name;
        ASSERT_EQ(t->n_bytes, w.n_bytes) << w.name;
        EXPECT_EQ(std::memcmp(t->data, w.data, w.n_bytes), 0) << w.name;
      }
    }
    EXPECT_NO_THROW(Model::load(a));
    fs::remove(a);
    fs::remove(b);
  }
}

TEST(Convert, ListsItsModelTypes) {
  const auto types = convert_model_types();
  for (const char* t : {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "qwen2", "qwen3",
                        "deepseek_v2", "deepseek_v3"}) {
    EXPECT_NE(std::find(types.begin(), types.end(), t), types.end()) << t;
  }
}

}  // namespace
}  // namespace lynx
