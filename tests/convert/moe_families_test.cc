// `convert` for gpt-oss, GLM-4.5, MiniMax-M2 and dots.llm1 beyond the golden logits
// (convert_test.cc): the MXFP4 experts kept bit for bit or decoded by --type, the nibble layouts
// stated by hand, the NextN layer written as llama.cpp writes it and skipped by the loader, the
// keys of each family.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../model/logits_util.h"
#include "../scratch.h"
#include "hf_fixtures.h"
#include "kernels/kernels.h"
#include "lynx/context.h"
#include "lynx/convert.h"
#include "lynx/gguf.h"
#include "lynx/model.h"

namespace lynx {
namespace {

namespace fs = std::filesystem;
using gguf::TensorType;
using nlohmann::json;

const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

#define REQUIRE_CHECKPOINTS()                                                                \
  if (test::hf_checkpoints().empty()) GTEST_SKIP() << "python3 with numpy is not available"; \
  static_assert(true)

std::string hf(const std::string& name) {
  return test::hf_checkpoints() + "/" + name;
}

std::string convert_to(const std::string& name, const std::string& type) {
  const std::string out = test::scratch_path(name + "-" + type + ".gguf");
  ConvertOptions o;
  o.type = type;
  convert_hf(hf(name), out, o);
  return out;
}

std::vector<float> values(const gguf::TensorInfo& t) {
  std::vector<float> v(size_t(t.n_elements()));
  kernels::ref::dequantize_row(t.type, t.data, v.data(), t.n_elements());
  return v;
}

// Every tensor of `want` is in `got` with its shape and its values.
void expect_every_tensor(const gguf::File& got, const gguf::File& want) {
  for (const auto& b : want.tensors()) {
    const gguf::TensorInfo* a = got.find_tensor(b.name);
    ASSERT_NE(a, nullptr) << b.name;
    ASSERT_EQ(a->shape_string(), b.shape_string()) << b.name;
    EXPECT_EQ(values(*a), values(b)) << b.name;
  }
}

// Each of `keys` reads the same in `got` (after `got_prefix`) as in `want` (after
// `want_prefix`): the prefixes differ where a family is compared with another's fixture.
void expect_ints(const gguf::File& got, const std::string& got_prefix, const gguf::File& want,
                 const std::string& want_prefix, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    EXPECT_EQ(got.get_int(got_prefix + k), want.get_int(want_prefix + k)) << k;
}
void expect_floats(const gguf::File& got, const std::string& got_prefix, const gguf::File& want,
                   const std::string& want_prefix, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    EXPECT_EQ(got.get_float(got_prefix + k), want.get_float(want_prefix + k)) << k;
}

// The bytes of one tensor of a (possibly sharded) safetensors checkpoint, read here without
// the converter's reader.
std::string st_bytes(const std::string& dir, const std::string& name) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream f(e.path(), std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string h(n, '\0');
    f.read(h.data(), std::streamsize(n));
    const json j = json::parse(h);
    if (!j.contains(name)) continue;
    const auto off = j[name]["data_offsets"].get<std::vector<uint64_t>>();
    std::string data(off[1] - off[0], '\0');
    f.seekg(std::streamoff(8 + n + off[0]));
    f.read(data.data(), std::streamsize(data.size()));
    return data;
  }
  ADD_FAILURE() << "no tensor " << name << " in " << dir;
  return {};
}

// `name` converted to F32 in the split MLA layout (attn_k_b / attn_v_b), the layout of the
// deepseek2 fixtures that the MLA families' checkpoints were made from; returns the file.
std::string convert_mla_split(const std::string& name) {
  const std::string out = test::scratch_path(name + "-split.gguf");
  ConvertOptions o;
  o.type = "f32";
  o.mla_split = true;
  convert_hf(hf(name), out, o);
  return out;
}

const char* const kExpertTensors[] = {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight",
                                      "blk.0.ffn_down_exps.weight", "blk.1.ffn_gate_exps.weight",
                                      "blk.1.ffn_up_exps.weight",   "blk.1.ffn_down_exps.weight"};

// "auto" keeps the MXFP4 experts: every expert tensor equals the fixture's byte for byte (the
// fixture the HF checkpoint was made from), everything else its values; the keys are
// convert_hf_to_gguf.py's for gpt-oss.
TEST(ConvertGptOss, Mxfp4ExpertsKeptBitExact) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("gpt_oss", "auto");
  {
    const auto got = gguf::File::open(out);
    const auto want = gguf::File::open(kFixtures + "gpt-oss/tiny-gpt-oss.gguf");
    ASSERT_EQ(got.tensors().size(), want.tensors().size());
    for (const char* name : kExpertTensors) {
      const gguf::TensorInfo& a = got.tensor(name);
      const gguf::TensorInfo& b = want.tensor(name);
      EXPECT_EQ(a.type, TensorType::MXFP4) << name;
      EXPECT_EQ(a.shape_string(), b.shape_string()) << name;
      ASSERT_EQ(a.n_bytes, b.n_bytes) << name;
      EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0) << name;
    }
    ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
    const char* p = "gpt-oss.";
    EXPECT_EQ(got.get_string("general.architecture"), "gpt-oss");
    expect_ints(got, p, want, p,
                {"attention.sliding_window", "expert_feed_forward_length", "feed_forward_length",
                 "expert_count", "expert_used_count", "attention.key_length",
                 "attention.value_length", "rope.scaling.original_context_length", "block_count"});
    EXPECT_EQ(got.get_string("gpt-oss.rope.scaling.type"), "yarn");
    EXPECT_EQ(got.get_float("gpt-oss.rope.scaling.factor"), 32.0);
    EXPECT_EQ(got.get_float("gpt-oss.rope.scaling.yarn_beta_fast"), 32.0);
    EXPECT_EQ(got.get_float("gpt-oss.rope.scaling.yarn_beta_slow"), 1.0);
    EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), "gpt-4o");
    // chat_template.jinja (the file openai/gpt-oss-* ship) becomes the chat template.
    EXPECT_NE(got.get_string("tokenizer.chat_template").find("<|start|>"), std::string::npos);
    EXPECT_EQ(got.tensor("blk.0.attn_sinks.weight").type, TensorType::F32);
    EXPECT_EQ(got.tensor("blk.0.ffn_gate_exps.bias").shape_string(),
              want.tensor("blk.0.ffn_gate_exps.bias").shape_string());
  }
  fs::remove(out);
}

// The two MXFP4 layouts, stated by hand: OpenAI's byte k holds elements 2k (low nibble) and
// 2k + 1 (high); ggml's block is the E8M0 byte, then byte j holding elements j (low) and
// j + 16 (high). gate_up_proj's row 0 is gate row 0, row 1 up row 0 (interleaved).
TEST(ConvertGptOss, Mxfp4NibbleLayout) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("gpt_oss", "auto");
  const auto f = gguf::File::open(out);
  const std::string blocks =
      st_bytes(hf("gpt_oss"), "model.layers.0.mlp.experts.gate_up_proj_blocks");
  const std::string scales =
      st_bytes(hf("gpt_oss"), "model.layers.0.mlp.experts.gate_up_proj_scales");
  const int64_t nb = 128 / 32;  // blocks per row (hidden_size 128)
  ASSERT_EQ(blocks.size(), size_t(16 * 192 * nb * 16));
  auto hf_code = [&](int64_t row, int64_t k) {  // element k of HF row `row` (expert 0)
    const uint8_t b = uint8_t(blocks[size_t(row * nb * 16 + k / 2)]);
    return k % 2 == 0 ? b & 0x0F : b >> 4;
  };
  for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight"}) {
    const int64_t hf_row = std::string(name).find("up") != std::string::npos ? 1 : 0;
    const uint8_t* g = f.tensor(name).data;  // expert 0, row 0
    for (int64_t b = 0; b < nb; ++b) {
      EXPECT_EQ(g[17 * b], uint8_t(scales[size_t(hf_row * nb + b)])) << name;
      for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(g[17 * b + 1 + j] & 0x0F, hf_code(hf_row, 32 * b + j)) << name << " " << j;
        EXPECT_EQ(g[17 * b + 1 + j] >> 4, hf_code(hf_row, 32 * b + j + 16)) << name << " " << j;
      }
    }
  }
  fs::remove(out);
}

// A float --type decodes the experts (exactly: E2M1 times a power of two fits F32 and BF16),
// a quantized one keeps them MXFP4.
TEST(ConvertGptOss, TypeDecidesTheExperts) {
  REQUIRE_CHECKPOINTS();
  const auto want = gguf::File::open(kFixtures + "gpt-oss/tiny-gpt-oss.gguf");
  const auto tokens = testing_util::read_tokens(kFixtures + "gpt-oss/tokens.txt");
  const int64_t V = want.tensor("token_embd.weight").ne[1];
  const auto golden = testing_util::read_logits(kFixtures + "gpt-oss/tiny-gpt-oss.logits.f32",
                                                tokens.size() * size_t(V));
  const struct {
    const char* type;
    TensorType experts, attn;
    double max_nmse;
  } cases[] = {
      {"f32", TensorType::F32, TensorType::F32, 1e-9},
      {"bf16", TensorType::BF16, TensorType::BF16, 1e-3},
      {"q8_0", TensorType::MXFP4, TensorType::Q8_0, 1e-3},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.type);
    const std::string out = convert_to("gpt_oss", c.type);
    {
      const auto got = gguf::File::open(out);
      EXPECT_EQ(got.tensor("blk.1.attn_q.weight").type, c.attn);
      for (const char* name : kExpertTensors) {
        const gguf::TensorInfo& a = got.tensor(name);
        EXPECT_EQ(a.type, c.experts) << name;
        EXPECT_EQ(values(a), values(want.tensor(name))) << name;
      }
    }
    const auto m = Model::load(out);
    EXPECT_LT(testing_util::nmse(testing_util::prefill_logits(*m, tokens), golden), c.max_nmse);
    fs::remove(out);
  }
}

// GLM-4.5: the NextN layer is written as llama.cpp writes it (blk.N after the trunk, nextn.*
// tensors, block_count counting it) and the loader skips it; the family's keys.
TEST(ConvertGlm4Moe, NextnLayerAndKeys) {
  REQUIRE_CHECKPOINTS();
  for (const char* name : {"glm4_moe", "glm4_moe_qknorm"}) {
    SCOPED_TRACE(name);
    const std::string out = convert_to(name, "f32");
    const bool qk = std::string(name) == "glm4_moe_qknorm";
    {
      const auto got = gguf::File::open(out);
      const auto want = gguf::File::open(kFixtures + "glm4moe/" +
                                         (qk ? "tiny-glm4moe-qknorm" : "tiny-glm4moe") + ".gguf");
      ASSERT_EQ(got.tensors().size(), want.tensors().size());
      ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
      expect_ints(got, "glm4moe.", want, "glm4moe.",
                  {"block_count", "nextn_predict_layers", "rope.dimension_count",
                   "leading_dense_block_count", "expert_shared_count", "expert_gating_func",
                   "expert_feed_forward_length", "attention.key_length"});
      EXPECT_EQ(got.get_int("glm4moe.block_count"), 3);
      EXPECT_EQ(got.get_float("glm4moe.expert_weights_scale"),
                want.get_float("glm4moe.expert_weights_scale"));
      EXPECT_TRUE(got.get_bool("glm4moe.expert_weights_norm"));
      EXPECT_NE(got.find_tensor("blk.2.nextn.eh_proj.weight"), nullptr);
      EXPECT_EQ(got.find_tensor("blk.0.attn_q_norm.weight") != nullptr, qk);
      EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), "glm4");
    }
    const auto m = Model::load(out);
    EXPECT_EQ(m->config().n_layer, 2);
    EXPECT_EQ(m->config().n_layer_nextn, 1);
    fs::remove(out);
  }
}

// transformers 5 writes rope_theta, rope_scaling and partial_rotary_factor inside one
// "rope_parameters" object. A checkpoint rewritten that way converts to the same metadata and
// tensors as the older layout: gpt-oss (yarn), GLM-4.5 (partial rotary), DeepSeek-V2 (yarn
// added to both, DeepSeek's "type" spelling in the old one).
TEST(ConvertRopeParameters, Transformers5LayoutGivesTheSameFile) {
  REQUIRE_CHECKPOINTS();
  for (const char* name : {"gpt_oss", "glm4_moe", "deepseek_v2"}) {
    SCOPED_TRACE(name);
    const std::string old_dir = test::scratch_path(std::string(name) + "-old");
    const std::string new_dir = test::scratch_path(std::string(name) + "-new");
    for (const std::string& d : {old_dir, new_dir}) {
      fs::remove_all(d);
      fs::copy(hf(name), d, fs::copy_options::recursive);
    }
    json c = json::parse(std::ifstream(hf(name) + "/config.json"));
    if (std::string(name) == "deepseek_v2") {
      c["rope_scaling"] = {{"type", "yarn"},
                           {"factor", 40.0},
                           {"original_max_position_embeddings", 4096},
                           {"mscale_all_dim", 0.707}};
    }
    std::ofstream(old_dir + "/config.json") << c.dump();
    json rp = {{"rope_type", "default"}};
    for (const char* k : {"rope_theta", "partial_rotary_factor"}) {
      if (c.contains(k) && !c[k].is_null()) rp[k] = c[k];
      c.erase(k);
    }
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {
      for (const auto& [k, v] : c["rope_scaling"].items()) rp[k == "type" ? "rope_type" : k] = v;
    }
    c.erase("rope_scaling");
    c["rope_parameters"] = rp;
    std::ofstream(new_dir + "/config.json") << c.dump();

    const std::string a = test::scratch_path(std::string(name) + "-old.gguf");
    const std::string b = test::scratch_path(std::string(name) + "-new.gguf");
    ConvertOptions o;
    o.type = "f32";
    convert_hf(old_dir, a, o);
    convert_hf(new_dir, b, o);
    const auto fa = gguf::File::open(a);
    const auto fb = gguf::File::open(b);
    ASSERT_EQ(fa.metadata().size(), fb.metadata().size());
    for (size_t i = 0; i < fa.metadata().size(); ++i) {
      const auto& ka = fa.metadata()[i];
      const auto& kb = fb.metadata()[i];
      EXPECT_EQ(ka.key, kb.key);
      if (ka.key == "general.name") continue;  // the directory's name
      EXPECT_EQ(ka.value.type, kb.value.type) << ka.key;
      EXPECT_EQ(ka.value.to_string(), kb.value.to_string()) << ka.key;
    }
    ASSERT_EQ(fa.tensors().size(), fb.tensors().size());
    for (const auto& t : fa.tensors()) {
      EXPECT_EQ(values(t), values(fb.tensor(t.name))) << t.name;
    }
    const std::string arch = fa.get_string("general.architecture");
    EXPECT_TRUE(fa.has(arch + ".rope.freq_base")) << arch;
    if (std::string(name) != "glm4_moe") {
      EXPECT_EQ(fb.get_string(arch + ".rope.scaling.type"), "yarn");
    }
  }
}

// MiniMax-M2: every tensor of the fixture the checkpoint was made from comes back with its
// values (experts stacked from w1 / w3 / w2, the whole-row q/k norms, the selection bias), and
// the keys are those llama.cpp's MiniMaxM2Model writes. transformers 5's layout, without
// rotary_dim and with partial_rotary_factor in rope_parameters, gives the same rotary dims.
TEST(ConvertMinimaxM2, TensorsAndKeys) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("minimax_m2", "f32");
  {
    const auto got = gguf::File::open(out);
    const auto want = gguf::File::open(kFixtures + "minimax-m2/tiny-minimax-m2-f32.gguf");
    ASSERT_EQ(got.tensors().size(), want.tensors().size());
    ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
    EXPECT_EQ(got.get_string("general.architecture"), "minimax-m2");
    expect_ints(got, "minimax-m2.", want, "minimax-m2.",
                {"block_count", "rope.dimension_count", "expert_gating_func",
                 "expert_feed_forward_length", "expert_count", "expert_used_count",
                 "attention.key_length", "attention.value_length", "attention.head_count_kv"});
    EXPECT_EQ(got.get_int("minimax-m2.expert_gating_func"), 2);
    EXPECT_EQ(got.get_int("minimax-m2.rope.dimension_count"), 16);
    EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), "minimax-m2");
    EXPECT_EQ(got.tensor("blk.0.attn_q_norm.weight").ne[0], 128);  // 4 heads x 32
  }
  fs::remove(out);
  const std::string dir = test::scratch_path("minimax_m2-tf5");
  fs::remove_all(dir);
  fs::copy(hf("minimax_m2"), dir, fs::copy_options::recursive);
  json c = json::parse(std::ifstream(dir + "/config.json"));
  c.erase("rotary_dim");
  c["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", c["rope_theta"]}, {"partial_rotary_factor", 0.5}};
  c.erase("rope_theta");
  std::ofstream(dir + "/config.json") << c.dump();
  const std::string out5 = test::scratch_path("minimax_m2-tf5.gguf");
  ConvertOptions o;
  o.type = "f32";
  convert_hf(dir, out5, o);
  const auto f = gguf::File::open(out5);
  EXPECT_EQ(f.get_int("minimax-m2.rope.dimension_count"), 16);
  EXPECT_EQ(f.get_float("minimax-m2.rope.freq_base"), 5e6);
}

// dots.llm1: every tensor of the fixture the checkpoint was made from comes back with its
// values (experts stacked, the dense lead, the per-head q/k norms, the selection bias, the
// shared experts), and the keys are those llama.cpp's Dots1Model writes.
TEST(ConvertDots1, TensorsAndKeys) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("dots1", "f32");
  const auto got = gguf::File::open(out);
  const auto want = gguf::File::open(kFixtures + "dots1/tiny-dots1-f32.gguf");
  ASSERT_EQ(got.tensors().size(), want.tensors().size());
  ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
  EXPECT_EQ(got.get_string("general.architecture"), "dots1");
  expect_ints(
      got, "dots1.", want, "dots1.",
      {"block_count", "leading_dense_block_count", "expert_shared_count", "expert_gating_func",
       "feed_forward_length", "expert_feed_forward_length", "expert_count", "expert_used_count",
       "attention.key_length", "attention.value_length", "attention.head_count_kv"});
  EXPECT_EQ(got.get_float("dots1.expert_weights_scale"), 2.5);
  EXPECT_TRUE(got.get_bool("dots1.expert_weights_norm"));
  EXPECT_EQ(got.get_int("dots1.expert_gating_func"), 2);
  EXPECT_EQ(got.find("dots1.expert_group_count"), nullptr);
  EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(got.tensor("blk.1.attn_q_norm.weight").ne[0], 24);       // per head
  EXPECT_EQ(got.find_tensor("blk.0.ffn_gate_inp.weight"), nullptr);  // the dense lead
  fs::remove(out);
}

// Qwen3-VL-MoE: the language model's tensors come back with the fixture's values (the fused
// experts split into gate / up halves and transposed), the vision tower is left out, and the
// M-RoPE sections and deepstack count are written as llama.cpp writes them.
TEST(ConvertQwen3VlMoe, TensorsAndKeys) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("qwen3_vl_moe", "f32");
  const auto got = gguf::File::open(out);
  const auto want = gguf::File::open(kFixtures + "qwen3vlmoe/tiny-qwen3vlmoe-f32.gguf");
  ASSERT_EQ(got.tensors().size(), want.tensors().size());
  ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
  EXPECT_EQ(got.get_string("general.architecture"), "qwen3vlmoe");
  std::vector<int64_t> sec;
  for (const auto& v : got.find("qwen3vlmoe.rope.dimension_sections")->as_array()) {
    sec.push_back(v.as_int());
  }
  EXPECT_EQ(sec, (std::vector<int64_t>{6, 5, 5, 0}));
  EXPECT_EQ(got.get_int("qwen3vlmoe.n_deepstack_layers"), 2);
  expect_ints(got, "qwen3vlmoe.", want, "qwen3vlmoe.",
              {"block_count", "expert_count", "expert_used_count", "expert_feed_forward_length",
               "attention.key_length", "attention.head_count_kv"});
  EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), "qwen2");
  fs::remove(out);
}

// ERNIE-4.5-MoE: every tensor of the fixture the checkpoint was made from comes back with its
// values (the dense lead layer, experts stacked, the [1, N] selection bias as an N-vector, the
// shared experts; no output.weight: tied), and the keys are those llama.cpp's Ernie4_5MoeModel
// writes, the shared width HF's moe_intermediate_size x moe_num_shared_experts.
TEST(ConvertErnie45Moe, TensorsAndKeys) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("ernie4_5_moe", "f32");
  const auto got = gguf::File::open(out);
  const auto want = gguf::File::open(kFixtures + "ernie4_5-moe/tiny-ernie4_5-moe-f32.gguf");
  ASSERT_EQ(got.tensors().size(), want.tensors().size());
  for (const auto& b : want.tensors()) {
    const gguf::TensorInfo* a = got.find_tensor(b.name);
    ASSERT_NE(a, nullptr) << b.name;
    EXPECT_EQ(a->n_elements(), b.n_elements()) << b.name;
    EXPECT_EQ(a->ne[0], b.ne[0]) << b.name;
    EXPECT_EQ(values(*a), values(b)) << b.name;
  }
  EXPECT_EQ(got.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(got.get_string("general.architecture"), "ernie4_5-moe");
  expect_ints(got, "ernie4_5-moe.", want, "ernie4_5-moe.",
              {"block_count", "expert_count", "expert_used_count", "expert_feed_forward_length",
               "expert_shared_feed_forward_length", "expert_shared_count",
               "leading_dense_block_count", "interleave_moe_layer_step", "feed_forward_length",
               "attention.key_length", "attention.value_length", "attention.head_count_kv"});
  EXPECT_EQ(got.get_int("ernie4_5-moe.expert_shared_feed_forward_length"), 64);
  EXPECT_EQ(got.find("ernie4_5-moe.expert_gating_func"), nullptr);
  fs::remove(out);
}

// Ling 2.0: every tensor of the fixture the checkpoint was made from comes back with its values
// (attn_qkv kept fused, Ling's own names, the group keys), the checkpoint's MTP layer is written
// after the trunk as llama.cpp writes it (block_count 3, nextn_predict_layers 1,
// layer_output_norm) and skipped by the loader, and the keys are those llama.cpp's
// BailingMoeV2Model writes.
TEST(ConvertBailingMoe2, TensorsKeysAndTheMtpLayer) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("bailing_moe_v2", "f32");
  const auto got = gguf::File::open(out);
  const auto want = gguf::File::open(kFixtures + "bailingmoe2/tiny-bailingmoe2-f32.gguf");
  ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
  EXPECT_EQ(got.get_string("general.architecture"), "bailingmoe2");
  expect_ints(got, "bailingmoe2.", want, "bailingmoe2.",
              {"leading_dense_block_count", "expert_shared_count", "expert_gating_func",
               "feed_forward_length", "expert_feed_forward_length", "expert_count",
               "expert_used_count", "attention.key_length", "attention.value_length",
               "attention.head_count_kv", "rope.dimension_count", "expert_group_count",
               "expert_group_used_count", "expert_shared_feed_forward_length"});
  EXPECT_EQ(got.get_int("bailingmoe2.rope.dimension_count"), 12);
  EXPECT_EQ(got.get_int("bailingmoe2.block_count"), 3);
  EXPECT_EQ(got.get_int("bailingmoe2.nextn_predict_layers"), 1);
  EXPECT_EQ(got.get_float("bailingmoe2.expert_weights_scale"), 2.5);
  EXPECT_TRUE(got.get_bool("bailingmoe2.expert_weights_norm"));
  EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), "bailingmoe2");
  EXPECT_EQ(got.find_tensor("blk.0.ffn_gate_inp.weight"), nullptr);  // the dense lead
  EXPECT_EQ(got.find_tensor("blk.0.attn_q.weight"), nullptr);        // kept fused
  for (const char* t :
       {"blk.2.nextn.eh_proj.weight", "blk.2.nextn.enorm.weight", "blk.2.nextn.hnorm.weight",
        "blk.2.layer_output_norm.weight", "blk.2.attn_qkv.weight", "blk.2.ffn_up_exps.weight"}) {
    EXPECT_NE(got.find_tensor(t), nullptr) << t;
  }
  EXPECT_EQ(got.tensor("blk.2.nextn.eh_proj.weight").ne[0], 128);
  auto m = Model::load(out);
  EXPECT_EQ(m->config().n_layer, 2);
  EXPECT_EQ(m->config().n_layer_nextn, 1);
  fs::remove(out);
}

// Qwen3-Next / Qwen3.5: every tensor of the converted file is the fixture's (the checkpoint was
// made from it by qwen3next_ref.py's load(), independent code), by name, shape and value: exact
// but for the two transforms that round, w + 1 and -exp(A_log) (at most 2 ulp of float32).
// A transform applied wrongly (a sign of ssm_a, a missing + 1, the value heads left grouped,
// q/k/v/z split at the wrong rows) shows here by tensor; the keys are llama.cpp's.
TEST(ConvertQwen3Next, EveryTensorIsTheFixtures) {
  REQUIRE_CHECKPOINTS();
  for (const char* name : {"qwen3_next", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    const bool q35 = std::string(name) == "qwen3_5_moe";
    const std::string out = convert_to(name, "f32");
    {
      const auto got = gguf::File::open(out);
      const auto want = gguf::File::open(kFixtures + "qwen3next/tiny-" +
                                         (q35 ? "qwen35moe" : "qwen3next") + "-f32.gguf");
      const std::string a = q35 ? "qwen35moe" : "qwen3next";
      EXPECT_EQ(got.get_string("general.architecture"), a);
      EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), q35 ? "qwen35" : "qwen2");
      expect_ints(got, a + ".", want, a + ".",
                  {"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank",
                   "ssm.inner_size", "rope.dimension_count", "expert_count", "expert_used_count",
                   "expert_feed_forward_length", "expert_shared_feed_forward_length",
                   "attention.key_length", "attention.head_count_kv"});
      if (q35) {
        const auto& s = got.get_array("qwen35moe.rope.dimension_sections");
        const auto& w = want.get_array("qwen35moe.rope.dimension_sections");
        ASSERT_EQ(s.size(), w.size());
        for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i].as_int(), w[i].as_int());
      }
      size_t n_want = 0;
      for (const auto& b : want.tensors()) {
        int il = -1;
        if (std::sscanf(b.name.c_str(), "blk.%d.", &il) == 1 &&
            il >= int(got.get_int(a + ".block_count"))) {
          continue;  // the fixture's NextN blocks: the converter drops the MTP module
        }
        ++n_want;
        const gguf::TensorInfo* t = got.find_tensor(b.name);
        ASSERT_NE(t, nullptr) << b.name;
        ASSERT_EQ(t->shape_string(), b.shape_string()) << b.name;
        const std::vector<float> x = values(*t), y = values(b);
        const bool rounds = b.name.ends_with("norm.weight") || b.name.ends_with("ssm_a");
        for (size_t i = 0; i < x.size(); ++i) {
          const float tol = rounds ? 2.5e-7f * std::max(1.f, std::fabs(y[i])) : 0.f;
          ASSERT_LE(std::fabs(x[i] - y[i]), tol) << b.name << " [" << i << "]";
        }
      }
      EXPECT_EQ(got.tensors().size(), n_want);
    }
    fs::remove(out);
  }
}

// Step-3.5: every tensor of the fixture back, by name, shape and value (the norms' + 1 within
// 2 ulp; rope_freqs computed from the llama3-type rope_scaling, within 1e-6), the MTP layer
// dropped; the per-layer keys as the fixture has them.
TEST(ConvertStep35, EveryTensorAndKeyIsTheFixtures) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("step3p5", "f32");
  {
    const auto got = gguf::File::open(out);
    const auto want = gguf::File::open(kFixtures + "step35/tiny-step35-f32.gguf");
    for (const char* k :
         {"attention.head_count", "attention.head_count_kv", "attention.sliding_window_pattern",
          "swiglu_clamp_exp", "swiglu_clamp_shexp"}) {
      const auto& a = got.get_array(std::string("step35.") + k);
      const auto& b = want.get_array(std::string("step35.") + k);
      ASSERT_EQ(a.size(), b.size()) << k;
      for (size_t i = 0; i < a.size(); ++i) {
        if (b[i].type == gguf::ValueType::FLOAT32) {
          EXPECT_EQ(a[i].as_float(), b[i].as_float()) << k << "[" << i << "]";
        } else if (b[i].type == gguf::ValueType::BOOL) {
          EXPECT_EQ(a[i].as_bool(), b[i].as_bool()) << k << "[" << i << "]";
        } else {
          EXPECT_EQ(a[i].as_int(), b[i].as_int()) << k << "[" << i << "]";
        }
      }
    }
    expect_ints(got, "step35.", want, "step35.",
                {"rope.dimension_count", "leading_dense_block_count", "attention.sliding_window",
                 "expert_gating_func", "expert_count"});
    EXPECT_EQ(got.get_float("step35.rope.freq_base"), want.get_float("step35.rope.freq_base"));
    EXPECT_EQ(got.get_float("step35.rope.freq_base_swa"),
              want.get_float("step35.rope.freq_base_swa"));
    EXPECT_EQ(got.tensors().size(), want.tensors().size());
    for (const auto& b : want.tensors()) {
      const gguf::TensorInfo* t = got.find_tensor(b.name);
      ASSERT_NE(t, nullptr) << b.name;
      ASSERT_EQ(t->shape_string(), b.shape_string()) << b.name;
      const std::vector<float> x = values(*t), y = values(b);
      const bool rounds = b.name.ends_with("norm.weight") || b.name == "rope_freqs.weight";
      for (size_t i = 0; i < x.size(); ++i) {
        const float tol = rounds ? 2.5e-7f * std::max(1.f, std::fabs(y[i])) : 0.f;
        ASSERT_LE(std::fabs(x[i] - y[i]), tol) << b.name << " [" << i << "]";
      }
    }
  }
  fs::remove(out);
}

// Gemma 4: every tensor of the fixture back, by name, shape and value, exactly (no transform
// changes a value: the norms are Gemma4RMSNorm's w as stored; gate_up_proj split into rows;
// rope_freqs computed from the proportional rope's partial_rotary_factor), the vision and
// audio tensors left out, and the keys of both attention geometries as the fixture has them.
TEST(ConvertGemma4, EveryTensorAndKeyIsTheFixtures) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("gemma4", "f32");
  {
    const auto got = gguf::File::open(out);
    const auto want = gguf::File::open(kFixtures + "gemma4/tiny-gemma4-f32.gguf");
    for (const char* k : {"attention.head_count_kv", "attention.sliding_window_pattern"}) {
      const auto& a = got.get_array(std::string("gemma4.") + k);
      const auto& b = want.get_array(std::string("gemma4.") + k);
      ASSERT_EQ(a.size(), b.size()) << k;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].to_string(), b[i].to_string()) << k << "[" << i << "]";
      }
    }
    expect_ints(
        got, "gemma4.", want, "gemma4.",
        {"block_count", "embedding_length", "feed_forward_length", "attention.head_count",
         "attention.key_length", "attention.value_length", "attention.key_length_swa",
         "attention.value_length_swa", "attention.sliding_window", "attention.shared_kv_layers",
         "embedding_length_per_layer_input", "rope.dimension_count", "rope.dimension_count_swa",
         "expert_count", "expert_used_count", "expert_feed_forward_length"});
    expect_floats(got, "gemma4.", want, "gemma4.",
                  {"rope.freq_base", "rope.freq_base_swa", "final_logit_softcapping",
                   "attention.layer_norm_rms_epsilon"});
    EXPECT_EQ(got.tensors().size(), want.tensors().size());
    ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
  }
  fs::remove(out);
}

// Hunyuan-A13B: every tensor of the fixture back, by name, shape and value, exactly (no transform
// changes a value), and the keys as the fixture has them: the rope base from rope_theta and the
// NTK alpha, the widths from the per-layer lists and intermediate_size x num_shared_expert.
TEST(ConvertHunyuanMoe, EveryTensorAndKeyIsTheFixtures) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_to("hunyuan", "f32");
  {
    const auto got = gguf::File::open(out);
    const auto want = gguf::File::open(kFixtures + "hunyuan-moe/tiny-hunyuan-moe-f32.gguf");
    EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), "hunyuan");
    expect_ints(
        got, "hunyuan-moe.", want, "hunyuan-moe.",
        {"block_count", "embedding_length", "feed_forward_length", "attention.head_count",
         "attention.head_count_kv", "attention.key_length", "attention.value_length",
         "rope.dimension_count", "expert_count", "expert_used_count", "expert_feed_forward_length",
         "expert_shared_feed_forward_length", "expert_shared_count"});
    expect_floats(got, "hunyuan-moe.", want, "hunyuan-moe.",
                  {"rope.freq_base", "attention.layer_norm_rms_epsilon"});
    EXPECT_EQ(got.get_int("hunyuan-moe.expert_gating_func"), 1);
    EXPECT_TRUE(got.get_bool("hunyuan-moe.expert_weights_norm"));
    EXPECT_EQ(got.tensors().size(), want.tensors().size());
    ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
  }
  fs::remove(out);
}

// GLM-5 (glm_moe_dsa), in the split MLA layout the fixture has: every tensor of the deepseek2
// fixture back exactly, the DSA indexer's five tensors of each layer written as the checkpoint
// holds them (F32: byte for byte), the MTP layer dropped; the keys are the fixture's under
// glm-dsa plus the indexer's, and the file loads as glm-dsa.
TEST(ConvertGlmDsa, EveryTensorTheIndexerAndTheKeys) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_mla_split("glm_moe_dsa");
  {
    const auto got = gguf::File::open(out);
    const auto want = gguf::File::open(kFixtures + "mla/tiny-deepseek-v3.gguf");
    EXPECT_EQ(got.get_string("general.architecture"), "glm-dsa");
    EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), "glm4");
    expect_ints(
        got, "glm-dsa.", want, "deepseek2.",
        {"block_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
         "attention.key_length_mla", "attention.value_length_mla", "attention.q_lora_rank",
         "attention.kv_lora_rank", "rope.dimension_count", "leading_dense_block_count",
         "expert_count", "expert_used_count", "expert_shared_count", "expert_gating_func",
         "expert_group_count", "expert_group_used_count"});
    EXPECT_EQ(got.get_float("glm-dsa.expert_weights_scale"),
              want.get_float("deepseek2.expert_weights_scale"));
    EXPECT_EQ(got.get_int("glm-dsa.attention.indexer.head_count"), 2);
    EXPECT_EQ(got.get_int("glm-dsa.attention.indexer.key_length"), 16);
    EXPECT_EQ(got.get_int("glm-dsa.attention.indexer.top_k"), 2048);
    ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
    const std::pair<const char*, const char*> indexer[] = {{"k_norm.weight", "k_norm.weight"},
                                                           {"k_norm.bias", "k_norm.bias"},
                                                           {"proj.weight", "weights_proj.weight"},
                                                           {"attn_k.weight", "wk.weight"},
                                                           {"attn_q_b.weight", "wq_b.weight"}};
    for (int il = 0; il < 2; ++il) {
      for (const auto& [g, h] : indexer) {
        const std::string name = "blk." + std::to_string(il) + ".indexer." + g;
        const gguf::TensorInfo* t = got.find_tensor(name);
        ASSERT_NE(t, nullptr) << name;
        ASSERT_EQ(t->type, gguf::TensorType::F32) << name;
        const std::string src = st_bytes(
            hf("glm_moe_dsa"), "model.layers." + std::to_string(il) + ".self_attn.indexer." + h);
        ASSERT_EQ(src.size(), t->n_bytes) << name;
        EXPECT_EQ(std::memcmp(src.data(), t->data, t->n_bytes), 0) << name;
      }
    }
    EXPECT_EQ(got.tensors().size(), want.tensors().size() + 2 * std::size(indexer));
    EXPECT_EQ(got.find_tensor("blk.2.attn_norm.weight"), nullptr);
  }
  const auto m = Model::load(out);
  EXPECT_EQ(m->config().arch, "glm-dsa");
  EXPECT_EQ(m->config().n_layer, 2);
  fs::remove(out);
}

// Mistral Small 4 (mistral3 with a mistral4 text_config), in the split MLA layout the fixture
// has: every tensor of the deepseek2 fixture back exactly (the fused experts cut into gate / up
// rows), nothing of the vision tower, the keys the fixture's under mistral4; the released
// rope_parameters (YaRN, DeepSeek's attention-scale convention) give llama.cpp's yarn keys.
TEST(ConvertMistral4, EveryTensorKeysAndTheReleasedYarn) {
  REQUIRE_CHECKPOINTS();
  const std::string out = convert_mla_split("mistral3");
  {
    const auto got = gguf::File::open(out);
    const auto want = gguf::File::open(kFixtures + "mla/tiny-deepseek-v2.gguf");
    EXPECT_EQ(got.get_string("general.architecture"), "mistral4");
    EXPECT_EQ(got.get_string("tokenizer.ggml.pre"), "tekken");
    expect_ints(
        got, "mistral4.", want, "deepseek2.",
        {"block_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
         "attention.key_length_mla", "attention.value_length_mla", "attention.kv_lora_rank",
         "rope.dimension_count", "leading_dense_block_count", "expert_count", "expert_used_count",
         "expert_shared_count", "expert_gating_func", "expert_feed_forward_length"});
    EXPECT_FALSE(got.has("mistral4.rope.scaling.type"));
    EXPECT_EQ(got.tensors().size(), want.tensors().size());
    ASSERT_NO_FATAL_FAILURE(expect_every_tensor(got, want));
  }
  fs::remove(out);
  // The released text_config.rope_parameters (Mistral4Config's defaults).
  const std::string dir = test::scratch_path("mistral3-yarn");
  fs::remove_all(dir);
  fs::copy(hf("mistral3"), dir, fs::copy_options::recursive);
  json c = json::parse(std::ifstream(dir + "/config.json"));
  c["text_config"]["rope_parameters"] = {{"type", "yarn"},
                                         {"rope_theta", 10000.0},
                                         {"factor", 128.0},
                                         {"original_max_position_embeddings", 8192},
                                         {"beta_fast", 32.0},
                                         {"beta_slow", 1.0},
                                         {"mscale_all_dim", 1.0},
                                         {"mscale", 1.0},
                                         {"llama_4_scaling_beta", 0.1},
                                         {"partial_rotary_factor", 1.0 / 3}};
  std::ofstream(dir + "/config.json") << c.dump();
  ConvertOptions o;
  o.type = "f32";
  convert_hf(dir, out, o);
  {
    const auto got = gguf::File::open(out);
    EXPECT_EQ(got.get_string("mistral4.rope.scaling.type"), "yarn");
    EXPECT_EQ(got.get_float("mistral4.rope.scaling.factor"), 128.f);
    EXPECT_EQ(got.get_int("mistral4.rope.scaling.original_context_length"), 8192);
    EXPECT_EQ(got.get_float("mistral4.rope.scaling.yarn_log_multiplier"), 0.1f);
    EXPECT_EQ(got.get_float("mistral4.rope.freq_base"), 10000.f);
    // llama_4_scaling_beta under llama.cpp's key; its floor is the original context above.
    EXPECT_EQ(got.get_float("mistral4.attention.temperature_scale"), 0.1f);
  }
  const auto m = Model::load(out);
  EXPECT_EQ(m->config().arch, "mistral4");
  EXPECT_TRUE(m->config().yarn.on);
  EXPECT_EQ(m->config().attn_temp.scale, 0.1f);
  EXPECT_EQ(m->config().attn_temp.floor_len, 8192);
  fs::remove(out);
  fs::remove_all(dir);
}

TEST(ConvertMoeFamilies, Listed) {
  const auto types = convert_model_types();
  for (const char* t : {"gpt_oss", "glm4_moe", "minimax_m2", "dots1", "bailing_moe_v2",
                        "bailing_moe", "ernie4_5_moe", "qwen3_next", "qwen3_5_moe", "step3p5",
                        "gemma4", "hunyuan", "hunyuan_v1_moe"}) {
    EXPECT_NE(std::find(types.begin(), types.end(), t), types.end()) << t;
  }
}

}  // namespace
}  // namespace lynx
