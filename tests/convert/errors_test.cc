// Bad checkpoints: each defect ends in a lynx::Error that names it, and no output file is left.
// Each test copies a good checkpoint (make_hf_checkpoint.py) to a scratch directory and breaks
// one thing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../scratch.h"
#include "hf_fixtures.h"
#include "lynx/convert.h"
#include "lynx/error.h"

namespace lynx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A private copy of checkpoint `name`.
std::string copy_of(const std::string& name) {
  const std::string root = test::hf_checkpoints();
  if (root.empty()) return {};
  const std::string dst = test::scratch_path(name);
  fs::remove_all(dst);
  fs::copy(root + "/" + name, dst, fs::copy_options::recursive);
  return dst;
}

json read_json(const std::string& p) {
  std::ifstream f(p);
  return json::parse(f);
}
void write_json(const std::string& p, const json& j) {
  std::ofstream(p) << j.dump();
}

// A safetensors file as (header JSON, data bytes), and back.
struct St {
  json header;
  std::string data;
};
St read_st(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string h(n, '\0');
  f.read(h.data(), std::streamsize(n));
  St st{json::parse(h), std::string(std::istreambuf_iterator<char>(f), {})};
  return st;
}
void write_st(const std::string& p, const St& st) {
  const std::string h = st.header.dump();
  const uint64_t n = h.size();
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << h << st.data;
}

// Converts `dir`, expecting a lynx::Error containing every one of `parts`; no output left.
void expect_error(const std::string& dir, std::initializer_list<std::string> parts) {
  const std::string out = test::scratch_path("out.gguf");
  ConvertOptions o;
  o.type = "f32";
  try {
    convert_hf(dir, out, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

#define CHECKPOINT(var, name)            \
  const std::string var = copy_of(name); \
  if (var.empty()) GTEST_SKIP() << "python3 with numpy is not available"

TEST(ConvertErrors, MissingConfigKey) {
  CHECKPOINT(d, "mixtral");
  json c = read_json(d + "/config.json");
  c.erase("hidden_size");
  write_json(d + "/config.json", c);
  expect_error(d, {"config.json", "missing key \"hidden_size\"", "mixtral"});
}

TEST(ConvertErrors, MistypedConfigKey) {
  CHECKPOINT(d, "olmoe");
  json c = read_json(d + "/config.json");
  c["num_hidden_layers"] = "two";
  write_json(d + "/config.json", c);
  expect_error(d, {"num_hidden_layers", "integer"});
}

TEST(ConvertErrors, UnknownModelType) {
  CHECKPOINT(d, "qwen3");
  json c = read_json(d + "/config.json");
  c["model_type"] = "gpt_neox";
  write_json(d + "/config.json", c);
  expect_error(d, {"model_type 'gpt_neox'", "supported: ", "mixtral", "deepseek_v3"});
}

TEST(ConvertErrors, NoConfig) {
  CHECKPOINT(d, "qwen3");
  fs::remove(d + "/config.json");
  expect_error(d, {"no config.json"});
}

TEST(ConvertErrors, TruncatedSafetensors) {
  CHECKPOINT(d, "mixtral");
  const std::string p = d + "/model.safetensors";
  fs::resize_file(p, fs::file_size(p) - 100);
  expect_error(d, {"model.safetensors", "out of range", "truncated"});
  fs::resize_file(p, 5);  // not even the header length
  expect_error(d, {"truncated safetensors file"});
}

TEST(ConvertErrors, HeaderLengthBeyondFile) {
  CHECKPOINT(d, "mixtral");
  const std::string p = d + "/model.safetensors";
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  const uint64_t huge = uint64_t(1) << 40;
  f.write(reinterpret_cast<const char*>(&huge), 8);
  f.close();
  expect_error(d, {"header length"});
}

TEST(ConvertErrors, HeaderOffsetsOutOfRange) {
  CHECKPOINT(d, "mixtral");
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  auto& e = st.header["model.norm.weight"]["data_offsets"];
  e[1] = e[1].get<uint64_t>() + (uint64_t(1) << 32);
  write_st(p, st);
  expect_error(d, {"model.norm.weight", "data_offsets", "out of range"});
}

TEST(ConvertErrors, DtypeDoesNotMatchBytes) {
  CHECKPOINT(d, "mixtral");
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  st.header["model.norm.weight"]["dtype"] = "F16";  // the bytes are F32: twice the size
  write_st(p, st);
  expect_error(d, {"model.norm.weight", "bytes for dtype F16"});
}

TEST(ConvertErrors, UnsupportedDtype) {
  CHECKPOINT(d, "mixtral");
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  st.header["model.norm.weight"]["dtype"] = "F8_E5M2";
  write_st(p, st);
  expect_error(d, {"model.norm.weight", "F8_E5M2", "not supported"});
}

TEST(ConvertErrors, HeaderNotJson) {
  CHECKPOINT(d, "mixtral");
  const std::string p = d + "/model.safetensors";
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(8);
  f.write("{\"x\": ]", 7);
  f.close();
  expect_error(d, {"not valid JSON"});
}

TEST(ConvertErrors, MissingShard) {
  CHECKPOINT(d, "qwen2_moe");
  fs::remove(d + "/model-00002-of-00002.safetensors");
  expect_error(d, {"model-00002-of-00002.safetensors", "missing"});
}

TEST(ConvertErrors, IndexNamesATensorTheShardLacks) {
  CHECKPOINT(d, "qwen2_moe");
  json idx = read_json(d + "/model.safetensors.index.json");
  idx["weight_map"]["model.layers.0.mlp.extra.weight"] = "model-00001-of-00002.safetensors";
  write_json(d + "/model.safetensors.index.json", idx);
  expect_error(d, {"model.layers.0.mlp.extra.weight", "does not hold it"});
}

TEST(ConvertErrors, MissingTensor) {
  CHECKPOINT(d, "qwen3_moe");
  json c = read_json(d + "/config.json");
  c["num_hidden_layers"] = 3;  // layer 2 is not in the checkpoint
  write_json(d + "/config.json", c);
  expect_error(d, {"model.layers.2.", "missing from the checkpoint", "blk.2."});
}

TEST(ConvertErrors, MissingExpert) {
  CHECKPOINT(d, "olmoe");
  json c = read_json(d + "/config.json");
  c["num_experts"] = c["num_experts"].get<int>() + 1;
  write_json(d + "/config.json", c);
  expect_error(d, {"mlp.experts.16.", "missing", "ffn_"});
}

// A size or divisor of zero was a SIGFPE (issue 29): every such field must be refused with a
// message that names it, and a head count that the key/value heads do not divide too.
TEST(ConvertErrors, ZeroSizesAndDivisorsAreNamed) {
  struct Bad {
    const char* family;
    const char* key;
    int value;
    const char* expect;
  };
  const Bad cases[] = {
      {"mixtral", "num_attention_heads", 0, "\"num_attention_heads\" must be at least 1"},
      {"mixtral", "num_key_value_heads", 0, "\"num_key_value_heads\" must be at least 1"},
      {"mixtral", "hidden_size", 0, "\"hidden_size\" must be at least 1"},
      {"mixtral", "num_key_value_heads", -1, "not a multiple of num_key_value_heads"},
      {"qwen3_moe", "num_attention_heads", 0, "\"num_attention_heads\" must be at least 1"},
      {"deepseek_v2", "moe_layer_freq", 0, "\"moe_layer_freq\" must be at least 1"},
  };
  for (const auto& b : cases) {
    SCOPED_TRACE(std::string(b.family) + " " + b.key);
    CHECKPOINT(d, b.family);
    json c = read_json(d + "/config.json");
    // -1: one more key/value head than there are heads, which never divides them.
    c[b.key] = b.value >= 0 ? b.value : c["num_attention_heads"].get<int>() + 1;
    write_json(d + "/config.json", c);
    expect_error(d, {b.expect});
  }
}

TEST(ConvertErrors, UnusedTensor) {
  CHECKPOINT(d, "mixtral");
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  st.header["model.layers.0.self_attn.rotary_emb.inv_freq"] = st.header["model.norm.weight"];
  st.header["model.layers.0.mystery.weight"] = st.header["model.norm.weight"];
  write_st(p, st);
  expect_error(d, {"model.layers.0.mystery.weight", "not used by the mixtral mapping"});
}

TEST(ConvertErrors, ExpertShapesDiffer) {
  CHECKPOINT(d, "mixtral");
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  auto& e = st.header["model.layers.0.block_sparse_moe.experts.3.w1.weight"];
  const auto shape = e["shape"].get<std::vector<int64_t>>();
  e["shape"] = {shape[1], shape[0]};  // same bytes, transposed shape
  write_st(p, st);
  expect_error(d, {"experts.3.w1.weight", "stacked into blk.0.ffn_gate_exps.weight"});
}

TEST(ConvertErrors, HeadsDoNotDivideQ) {
  CHECKPOINT(d, "mixtral");
  json c = read_json(d + "/config.json");
  c["num_attention_heads"] = 6;  // a multiple of the key/value heads, but not of the q_proj rows
  write_json(d + "/config.json", c);
  // Refused as the loader would refuse the metadata, before any tensor is read.
  expect_error(d, {"config.json", "loader refuses", "head_count"});
}

TEST(ConvertErrors, NoTokenizer) {
  CHECKPOINT(d, "qwen3");
  fs::remove(d + "/tokenizer.json");
  expect_error(d, {"no tokenizer.json"});
}

TEST(ConvertErrors, TokenIdBeyondEmbedding) {
  CHECKPOINT(d, "qwen3");
  json t = read_json(d + "/tokenizer.json");
  t["added_tokens"][0]["id"] = 100000;
  write_json(d + "/tokenizer.json", t);
  expect_error(d, {"tokenizer.json", "100000", "embedding rows"});
}

TEST(ConvertErrors, UnknownType) {
  CHECKPOINT(d, "qwen3");
  const std::string out = test::scratch_path("out.gguf");
  ConvertOptions o;
  o.type = "q9_9";
  try {
    convert_hf(d, out, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q9_9"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST(ConvertErrors, MlaSplitOnlyForDeepseek) {
  CHECKPOINT(d, "qwen3");
  const std::string out = test::scratch_path("out.gguf");
  ConvertOptions o;
  o.mla_split = true;
  try {
    convert_hf(d, out, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DeepSeek models, not qwen3"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST(ConvertErrors, RopeScalingRefusedWhereUnsupported) {
  CHECKPOINT(d, "qwen3");
  json c = read_json(d + "/config.json");
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  write_json(d + "/config.json", c);
  expect_error(d, {"rope_scaling"});
}

// transformers 5's rope_parameters beside the older keys: a value written both ways must agree.
TEST(ConvertErrors, RopeParametersDisagreeWithTheOlderKeys) {
  {
    CHECKPOINT(d, "qwen3_moe");
    json c = read_json(d + "/config.json");
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5.0}};
    write_json(d + "/config.json", c);
    expect_error(d, {"rope_theta", "rope_parameters.rope_theta"});
  }
  {
    CHECKPOINT(d, "gpt_oss");
    json c = read_json(d + "/config.json");
    c["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 8.0}};
    write_json(d + "/config.json", c);
    expect_error(d, {"rope_scaling.factor", "rope_parameters.factor"});
  }
  {
    CHECKPOINT(d, "qwen3_moe");
    json c = read_json(d + "/config.json");
    c["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}}};
    write_json(d + "/config.json", c);
    expect_error(d, {"rope_parameters", "per layer type"});
  }
  {
    CHECKPOINT(d, "qwen3_moe");
    json c = read_json(d + "/config.json");
    c.erase("rope_theta");
    c["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e4}};
    write_json(d + "/config.json", c);
    expect_error(d, {"rope_scaling"});
  }
}

// The shard of a sharded checkpoint that holds `tensor`.
std::string shard_of(const std::string& dir, const std::string& tensor) {
  const json idx = read_json(dir + "/model.safetensors.index.json");
  return dir + "/" + idx["weight_map"][tensor].get<std::string>();
}

TEST(ConvertErrors, GptOssMissingScales) {
  CHECKPOINT(d, "gpt_oss");
  const std::string name = "model.layers.1.mlp.experts.gate_up_proj_scales";
  const std::string p = shard_of(d, name);
  St st = read_st(p);
  st.header.erase(name);
  write_st(p, st);
  json idx = read_json(d + "/model.safetensors.index.json");
  idx["weight_map"].erase(name);
  write_json(d + "/model.safetensors.index.json", idx);
  expect_error(d, {"'" + name + "' is missing", "blk.1.ffn_gate_exps.weight"});
}

TEST(ConvertErrors, GptOssBlocksWrongShape) {
  CHECKPOINT(d, "gpt_oss");
  const std::string name = "model.layers.0.mlp.experts.down_proj_blocks";
  const std::string p = shard_of(d, name);
  St st = read_st(p);
  st.header[name]["shape"] = {16, 64, 6, 16};  // same bytes, rows and blocks per row swapped
  write_st(p, st);
  expect_error(d, {name, "[16, 64, 6, 16]", "expected U8 [16, 128, 3, 16]"});
}

TEST(ConvertErrors, GptOssDequantizedWrongShape) {
  CHECKPOINT(d, "gpt_oss_dequant");
  const std::string name = "model.layers.1.mlp.experts.gate_up_proj";
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  st.header[name]["shape"] = {8, 192, 128};  // transposed: the [E, out, in] a reader might expect
  write_st(p, st);
  expect_error(d, {name, "[8, 192, 128]", "expected a float [8, 128, 192]", "interleaved"});
}

TEST(ConvertErrors, GptOssOddBiasWidth) {
  CHECKPOINT(d, "gpt_oss_dequant");
  const std::string name = "model.layers.0.mlp.experts.gate_up_proj_bias";
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  st.header[name]["shape"] = {16, 96};  // [8, 192] read as 16 rows
  write_st(p, st);
  expect_error(d, {name, "[16, 96]", "interleaved"});
}

TEST(ConvertErrors, U8OutsideTheExperts) {
  CHECKPOINT(d, "gpt_oss_dequant");
  const std::string name = "model.layers.0.self_attn.sinks";
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  st.header[name]["dtype"] = "U8";
  st.header[name]["shape"] = {16};  // the 4 F32 values' bytes
  write_st(p, st);
  expect_error(d, {name, "is U8", "blk.0.attn_sinks.weight"});
}

TEST(ConvertErrors, GptOssLayerPatternAndClamp) {
  CHECKPOINT(d, "gpt_oss");
  json c = read_json(d + "/config.json");
  c["layer_types"] = {"full_attention", "sliding_attention"};
  write_json(d + "/config.json", c);
  expect_error(d, {"layer_types[0]", "full_attention", "even layers"});
  c = read_json(d + "/config.json");
  c.erase("layer_types");
  c["swiglu_limit"] = 10.0;
  write_json(d + "/config.json", c);
  expect_error(d, {"swiglu_limit"});
  c["swiglu_limit"] = 7.0;
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  write_json(d + "/config.json", c);
  expect_error(d, {"rope_scaling", "yarn", "gpt-oss"});
}

TEST(ConvertErrors, GlmMissingSelectionBias) {
  CHECKPOINT(d, "glm4_moe_qknorm");
  const std::string name = "model.layers.1.mlp.gate.e_score_correction_bias";
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  st.header.erase(name);
  write_st(p, st);
  expect_error(d, {"'" + name + "' is missing", "blk.1.exp_probs_b.bias"});
}

TEST(ConvertErrors, GlmMissingNextnTensor) {
  CHECKPOINT(d, "glm4_moe_qknorm");
  const std::string name = "model.layers.2.eh_proj.weight";
  const std::string p = d + "/model.safetensors";
  St st = read_st(p);
  st.header.erase(name);
  write_st(p, st);
  expect_error(d, {"'" + name + "' is missing", "blk.2.nextn.eh_proj.weight"});
  // Without the NextN count, layer 2 is not converted and its tensors are left over: dropped
  // as DeepSeek-V3's are (the trunk converts).
  json c = read_json(d + "/config.json");
  c["num_nextn_predict_layers"] = 0;
  write_json(d + "/config.json", c);
  const std::string out = test::scratch_path("trunk.gguf");
  ConvertOptions o;
  o.type = "f32";
  convert_hf(d, out, o);
  const auto f = gguf::File::open(out);
  EXPECT_EQ(f.get_int("glm4moe.block_count"), 2);
  EXPECT_FALSE(f.find_tensor("blk.2.attn_q.weight"));
  fs::remove(out);
}

TEST(ConvertErrors, GlmQkNormFlagWithoutTensors) {
  CHECKPOINT(d, "glm4_moe");
  json c = read_json(d + "/config.json");
  c["use_qk_norm"] = true;
  write_json(d + "/config.json", c);
  expect_error(d, {"self_attn.q_norm.weight", "missing", "attn_q_norm"});
  c["use_qk_norm"] = false;
  c["partial_rotary_factor"] = 0.3;  // 19.2 of 64 dimensions
  write_json(d + "/config.json", c);
  expect_error(d, {"partial_rotary_factor"});
  c["partial_rotary_factor"] = 0.5;
  c["attention_bias"] = false;
  write_json(d + "/config.json", c);
  expect_error(d, {"attention_bias"});
}

// MiniMax-M2 switches with one answer in the architecture are refused by name: a file converted
// past them would run another model.
TEST(ConvertErrors, MinimaxM2ConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "minimax_m2");
  const json good = read_json(d + "/config.json");
  auto expect_with = [&](const char* key, const json& value, std::initializer_list<std::string> p) {
    json c = good;
    c[key] = value;
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_with("use_qk_norm", false, {"use_qk_norm", "minimax-m2"});
  expect_with("qk_norm_type", "per_head", {"qk_norm_type 'per_head'"});
  expect_with("use_routing_bias", false, {"use_routing_bias"});
  expect_with("shared_intermediate_size", 256, {"shared_intermediate_size"});
  expect_with("attn_type_list", json::array({1, 0}), {"attn_type_list"});
  expect_with("rotary_dim", 48, {"rotary_dim 48 must be even and at most head_dim 32"});
  expect_with("partial_rotary_factor", 0.25,
              {"rotary_dim 16 disagrees with partial_rotary_factor"});
  expect_with("scoring_func", "softplus", {"scoring_func 'softplus'"});
  // The selection bias is required in every layer.
  write_json(d + "/config.json", good);
  const std::string name = "model.layers.1.block_sparse_moe.e_score_correction_bias";
  for (const auto& e : fs::directory_iterator(d)) {
    if (e.path().extension() != ".safetensors") continue;
    St st = read_st(e.path().string());
    if (!st.header.contains(name)) continue;
    st.header.erase(name);
    write_st(e.path().string(), st);
  }
  json idx = read_json(d + "/model.safetensors.index.json");
  idx["weight_map"].erase(name);
  write_json(d + "/model.safetensors.index.json", idx);
  expect_error(d, {"'" + name + "' is missing", "blk.1.exp_probs_b.bias"});
}

// What llama.cpp's dots1 cannot run is refused by name: another scoring function, q/k/v biases,
// fewer key/value heads than heads, group-limited routing, rope scaling.
TEST(ConvertErrors, Dots1ConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "dots1");
  const json good = read_json(d + "/config.json");
  auto expect_with = [&](const char* key, const json& value, std::initializer_list<std::string> p) {
    json c = good;
    c[key] = value;
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_with("scoring_func", "softmax", {"scoring_func 'softmax'"});
  expect_with("attention_bias", true, {"attention_bias", "dots1"});
  expect_with("num_key_value_heads", 2, {"num_key_value_heads"});
  json c = good;
  c["n_group"] = 4;
  c["topk_group"] = 2;
  write_json(d + "/config.json", c);
  expect_error(d, {"n_group 4 / topk_group 2"});
  expect_with("rope_scaling", json{{"type", "yarn"}, {"factor", 4.0}}, {"rope_scaling"});
  write_json(d + "/config.json", good);
}

// Qwen3-VL-MoE: the M-RoPE and the layer pattern llama.cpp's graph runs; the fused experts'
// layout.
TEST(ConvertErrors, Qwen3VlMoeConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "qwen3_vl_moe");
  const json good = read_json(d + "/config.json");
  auto expect_text = [&](const char* key, const json& value, std::initializer_list<std::string> p) {
    json c = good;
    c["text_config"][key] = value;
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_text("rope_scaling", json{{"mrope_section", {6, 5, 5}}, {"mrope_interleaved", false}},
              {"mrope_interleaved false"});
  expect_text("rope_scaling", json{{"rope_type", "yarn"}, {"mrope_section", {6, 5, 5}}},
              {"rope type 'yarn'"});
  expect_text("rope_scaling", json{{"mrope_section", {6, 5}}}, {"mrope_section must be 3"});
  expect_text("mlp_only_layers", json::array({0}), {"mlp_only_layers"});
  json c = good;
  c["text_config"].erase("rope_scaling");
  write_json(d + "/config.json", c);
  expect_error(d, {"mrope_section", "missing"});
  c = good;
  c.erase("text_config");
  write_json(d + "/config.json", c);
  expect_error(d, {"text_config"});
  c = good;
  c["text_config"]["moe_intermediate_size"] = 16;  // the fused experts are 32 wide
  write_json(d + "/config.json", c);
  expect_error(d, {"gate_up_proj", "gate then up outputs"});
  write_json(d + "/config.json", good);
}

// ERNIE-4.5-MoE switches llama.cpp's graph has one answer to are refused by name.
TEST(ConvertErrors, Ernie45MoeConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "ernie4_5_moe");
  const json good = read_json(d + "/config.json");
  auto expect_with = [&](const char* key, const json& value, std::initializer_list<std::string> p) {
    json c = good;
    c[key] = value;
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_with("use_bias", true, {"use_bias", "ernie4_5-moe"});
  expect_with("hidden_act", "gelu", {"hidden_act 'gelu'"});
  expect_with("moe_layer_end_index", 1, {"moe_layer_end_index 1"});
  expect_with("moe_layer_interval", 0, {"moe_layer_interval"});
  json c = good;
  c.erase("moe_layer_start_index");
  write_json(d + "/config.json", c);
  expect_error(d, {"moe_layer_start_index"});
}

// What llama.cpp's bailingmoe2 cannot run is refused by name: another router, biases, no q/k
// norm, another activation, rope scaling; Ling 1.x under the shared model_type name.
TEST(ConvertErrors, BailingMoe2ConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "bailing_moe_v2");
  const json good = read_json(d + "/config.json");
  auto expect_with = [&](const char* key, const json& value, std::initializer_list<std::string> p) {
    json c = good;
    c[key] = value;
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_with("score_function", "softmax", {"score_function 'softmax'"});
  expect_with("use_qkv_bias", true, {"use_qkv_bias", "bailingmoe2"});
  expect_with("use_qk_norm", false, {"use_qk_norm"});
  expect_with("hidden_act", "gelu", {"hidden_act 'gelu'"});
  expect_with("partial_rotary_factor", 0.3, {"partial_rotary_factor"});
  expect_with("rope_scaling", json{{"type", "yarn"}, {"factor", 4.0}}, {"rope_scaling"});
  json v1 = good;
  v1["model_type"] = "bailing_moe";
  v1["architectures"] = json::array({"BailingMoeForCausalLM"});
  write_json(d + "/config.json", v1);
  expect_error(d, {"BailingMoeV2ForCausalLM", "Ling 1.x"});
  write_json(d + "/config.json", good);
}

// Qwen3-Next / Qwen3.5: a projection whose rows do not fit the config's heads is refused naming
// the layout it should have; switches the architecture has one answer to are refused by name.
TEST(ConvertErrors, Qwen3NextLayoutAndConfig) {
  {
    CHECKPOINT(d, "qwen3_next");
    const json good = read_json(d + "/config.json");
    auto expect_with = [&](const char* key, const json& value,
                           std::initializer_list<std::string> p) {
      json c = good;
      c[key] = value;
      write_json(d + "/config.json", c);
      expect_error(d, p);
    };
    // 2 value heads of 8 instead of 4: in_proj_qkvz has rows for 4.
    expect_with("linear_num_value_heads", 2,
                {"in_proj_qkvz", "per key head: q, k, then its value heads' v and z"});
    expect_with("mlp_only_layers", json::array({1}), {"mlp_only_layers"});
    expect_with("full_attention_interval", 2, {"layer_types[1]", "full_attention"});
    expect_with("rope_scaling", json{{"type", "yarn"}, {"factor", 4.0}}, {"rope_scaling"});
    json c = good;
    c["hidden_act"] = "gelu";
    write_json(d + "/config.json", c);
    expect_error(d, {"hidden_act 'gelu'"});
  }
  {
    CHECKPOINT(d, "qwen3_5_moe");
    json c = read_json(d + "/config.json");
    c["text_config"]["rope_parameters"].erase("mrope_section");
    write_json(d + "/config.json", c);
    expect_error(d, {"mrope_section"});
  }
}

// Step-3.5: config lists the architecture cannot express are refused by name.
TEST(ConvertErrors, Step35ConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "step3p5");
  const json good = read_json(d + "/config.json");
  auto expect_with = [&](const char* key, const json& value, std::initializer_list<std::string> p) {
    json c = good;
    c[key] = value;
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_with("moe_layers_enum", "1,3", {"moe_layers_enum", "dense lead"});
  expect_with("layer_types", json::array({"full_attention", "sliding_attention"}),
              {"layer_types must list every layer"});
  expect_with("rope_theta", json::array({5e6, 1e4, 4e6, 1e4}), {"rope_theta differs"});
  expect_with("rope_scaling", json{{"rope_type", "yarn"}, {"factor", 4.0}}, {"llama3"});
  expect_with("partial_rotary_factors", json::array({0.75, 1.0, 0.75, 1.0}),
              {"partial_rotary_factors"});
  json c = good;
  c["attention_other_setting"]["head_dim"] = 32;
  write_json(d + "/config.json", c);
  expect_error(d, {"attention_other_setting.head_dim"});
  write_json(d + "/config.json", good);
}

// Gemma 4: what the architecture does not run (the dense and the small E2B / E4B models, a
// sliding last layer, another rope or activation) is refused by name from text_config.
TEST(ConvertErrors, Gemma4ConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "gemma4");
  const json good = read_json(d + "/config.json");
  auto expect_with = [&](const json& value, const char* key, std::initializer_list<std::string> p) {
    json c = good;
    if (value.is_null()) {
      c["text_config"].erase(key);
    } else {
      c["text_config"][key] = value;
    }
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_with(false, "enable_moe_block", {"enable_moe_block", "dense Gemma 4"});
  expect_with(2, "num_kv_shared_layers", {"num_kv_shared_layers", "KV sharing"});
  expect_with(256, "hidden_size_per_layer_input", {"per-layer input embeddings"});
  expect_with(json::array({"full_attention", "sliding_attention"}), "layer_types",
              {"layer_types ends with a sliding layer"});
  expect_with("silu", "hidden_activation", {"hidden_activation 'silu'"});
  expect_with(nullptr, "global_head_dim", {"missing key \"global_head_dim\""});
  expect_with(nullptr, "num_global_key_value_heads", {"num_global_key_value_heads"});
  json rope = good["text_config"]["rope_parameters"];
  rope["full_attention"]["rope_type"] = "default";
  expect_with(rope, "rope_parameters", {"rope_parameters.full_attention.rope_type"});
  rope = good["text_config"]["rope_parameters"];
  rope["sliding_attention"]["partial_rotary_factor"] = 0.5;
  expect_with(rope, "rope_parameters", {"sliding_attention.partial_rotary_factor"});
  rope.erase("sliding_attention");
  expect_with(rope, "rope_parameters", {"rope_parameters.sliding_attention"});
  write_json(d + "/config.json", good);
}

// Hunyuan-A13B: what hunyuan-moe cannot run (cross-layer attention, per-layer widths that differ,
// no shared MLP, another rope scaling, the dense models under the same model_type) is refused
// by name.
TEST(ConvertErrors, HunyuanMoeConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "hunyuan");
  const json good = read_json(d + "/config.json");
  auto expect_with = [&](const char* key, const json& value, std::initializer_list<std::string> p) {
    json c = good;
    c[key] = value;
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_with("use_cla", true, {"use_cla", "cross-layer attention"});
  expect_with("moe_topk", json::array({3, 2, 3}), {"moe_topk [3,2,3]", "one positive value"});
  expect_with("moe_intermediate_size", json::array({32, 32}), {"lists 2 values for 3 layers"});
  expect_with("use_mixed_mlp_moe", false, {"use_mixed_mlp_moe", "shared MLP"});
  expect_with("use_qk_norm", false, {"use_qk_norm"});
  expect_with("attention_bias", true, {"attention_bias"});
  expect_with("moe_layer_num_skipped", 1, {"moe_layer_num_skipped"});
  expect_with("rope_scaling", json{{"type", "dynamic"}, {"factor", 2.0}}, {"NTK-alpha"});
  expect_with("architectures", json::array({"HunYuanDenseV1ForCausalLM"}),
              {"not HunYuanMoEV1ForCausalLM"});
  expect_with("quantization_config", json{{"quant_method", "gptq"}, {"bits", 4}},
              {"quantized", "\"gptq\"", "dequantize it to BF16 first"});
  write_json(d + "/config.json", good);
}

// GLM-5: a router or layout glm-dsa does not run is refused by name.
TEST(ConvertErrors, GlmDsaConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "glm_moe_dsa");
  const json good = read_json(d + "/config.json");
  auto expect_with = [&](const char* key, const json& value, std::initializer_list<std::string> p) {
    json c = good;
    if (value.is_null()) {
      c.erase(key);
    } else {
      c[key] = value;
    }
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_with("scoring_func", "softmax", {"scoring_func 'softmax'", "sigmoid"});
  expect_with("mlp_layer_types", json::array({"sparse", "sparse"}), {"mlp_layer_types"});
  expect_with("rope_interleave", false, {"rope_interleave is false"});
  expect_with("partial_rotary_factor", 0.5, {"partial_rotary_factor must be 1"});
  expect_with("index_n_heads", nullptr, {"missing key \"index_n_heads\""});
  expect_with("moe_layer_freq", 2, {"moe_layer_freq 2"});
  write_json(d + "/config.json", good);
}

// Mistral Small 4: Mistral 3 / Ministral 3 under the same outer model_type, the FP8 release
// and a rotate-half rope layout are refused by name.
TEST(ConvertErrors, Mistral4ConfigOutsideTheArchitecture) {
  CHECKPOINT(d, "mistral3");
  const json good = read_json(d + "/config.json");
  auto expect_with = [&](const char* key, const json& value, std::initializer_list<std::string> p) {
    json c = good;
    c["text_config"][key] = value;
    write_json(d + "/config.json", c);
    expect_error(d, p);
  };
  expect_with("model_type", "ministral3", {"text_config.model_type is not mistral4"});
  expect_with("rope_interleave", false, {"rope_interleave is false"});
  expect_with("hidden_act", "gelu", {"hidden_act 'gelu'"});
  write_json(d + "/config.json", good);
}

// FP8 checkpoints: a scale grid that does not fit weight_block_size, a block grid without
// weight_block_size, and a missing scale are refused naming the tensor.
TEST(ConvertErrors, Fp8ScalesThatDoNotFit) {
  CHECKPOINT(d, "glm_moe_dsa_fp8");
  const json good = read_json(d + "/config.json");
  json c = good;
  c["quantization_config"]["weight_block_size"] = json::array({16, 32});
  write_json(d + "/config.json", c);
  expect_error(d, {"weight_scale_inv", "(one scale per weight_block_size block of"});
  c["quantization_config"].erase("weight_block_size");
  write_json(d + "/config.json", c);
  expect_error(d, {"weight_scale_inv", "weight_block_size [rows, cols]"});
  write_json(d + "/config.json", good);
  CHECKPOINT(m, "mistral3_fp8");
  const std::string shard = m + "/model-00001-of-00002.safetensors";
  St st = read_st(shard);
  std::string victim;
  for (const auto& [k, v] : st.header.items()) {
    if (k.ends_with("q_proj.weight_scale_inv") || k.ends_with("o_proj.weight_scale_inv"))
      victim = k;
  }
  ASSERT_FALSE(victim.empty());
  st.header[victim.substr(0, victim.size() - 10) + "_scale_gone"] = st.header[victim];
  st.header.erase(victim);
  write_st(shard, st);
  json idx = read_json(m + "/model.safetensors.index.json");
  idx["weight_map"].erase(victim);
  idx["weight_map"][victim.substr(0, victim.size() - 10) + "_scale_gone"] =
      "model-00001-of-00002.safetensors";
  write_json(m + "/model.safetensors.index.json", idx);
  expect_error(m, {"'" + victim + "' is missing from the checkpoint"});
}

}  // namespace
}  // namespace lynx
