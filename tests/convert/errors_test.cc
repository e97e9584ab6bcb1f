// Bad checkpoints: each defect ends in a lynx::Error that names it, and no output file is left.
// Each test copies a good checkpoint (make_hf_checkpoint.py) to a scratch directory and breaks
// one thing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
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
void expect_error(const std::string& dir, const std::vector<std::string>& parts) {
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

// One defect of config.json: `patch` is an RFC 7386 merge patch of the good config as JSON text
// (null erases a key, a nested object patches the nested keys). A merge patch merges an object
// into an object already there, so to replace one wholesale `patch` is an array of merge patches
// applied in turn (the first erasing the key); a top-level array is never a useful merge patch.
struct ConfigCase {
  std::string patch;
  std::vector<std::string> parts;
};

// Converts a private copy of checkpoint `name` once per case, its good config.json patched by
// the case, expecting an error that names every one of the case's parts.
void expect_config_errors(const std::string& name, std::initializer_list<ConfigCase> cases) {
  CHECKPOINT(d, name);
  const json good = read_json(d + "/config.json");
  for (const ConfigCase& c : cases) {
    SCOPED_TRACE(name + " " + c.patch);
    json config = good;
    const json patch = json::parse(c.patch);
    for (const json& p : patch.is_array() ? patch : json::array({patch})) config.merge_patch(p);
    write_json(d + "/config.json", config);
    expect_error(d, c.parts);
  }
}

TEST(ConvertErrors, MissingConfigKey) {
  expect_config_errors("mixtral", {{R"({"hidden_size": null})",
                                    {"config.json", "missing key \"hidden_size\"", "mixtral"}}});
}

TEST(ConvertErrors, MistypedConfigKey) {
  expect_config_errors("olmoe",
                       {{R"({"num_hidden_layers": "two"})", {"num_hidden_layers", "integer"}}});
}

TEST(ConvertErrors, UnknownModelType) {
  expect_config_errors("qwen3",
                       {{R"({"model_type": "gpt_neox"})",
                         {"model_type 'gpt_neox'", "supported: ", "mixtral", "deepseek_v3"}}});
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
  // Layer 2 is not in the checkpoint.
  expect_config_errors("qwen3_moe",
                       {{R"({"num_hidden_layers": 3})",
                         {"model.layers.2.", "missing from the checkpoint", "blk.2."}}});
}

TEST(ConvertErrors, MissingExpert) {
  // One more expert than the checkpoint's 16.
  expect_config_errors("olmoe",
                       {{R"({"num_experts": 17})", {"mlp.experts.16.", "missing", "ffn_"}}});
}

// A size or divisor of zero was a SIGFPE (issue 29): every such field must be refused with a
// message that names it, and a head count that the key/value heads do not divide too.
TEST(ConvertErrors, ZeroSizesAndDivisorsAreNamed) {
  expect_config_errors(
      "mixtral", {{R"({"num_attention_heads": 0})", {"\"num_attention_heads\" must be at least 1"}},
                  {R"({"num_key_value_heads": 0})", {"\"num_key_value_heads\" must be at least 1"}},
                  {R"({"hidden_size": 0})", {"\"hidden_size\" must be at least 1"}},
                  // One more key/value head than the 4 heads, which never divides them.
                  {R"({"num_key_value_heads": 5})", {"not a multiple of num_key_value_heads"}}});
  expect_config_errors("qwen3_moe", {{R"({"num_attention_heads": 0})",
                                      {"\"num_attention_heads\" must be at least 1"}}});
  expect_config_errors("deepseek_v2",
                       {{R"({"moe_layer_freq": 0})", {"\"moe_layer_freq\" must be at least 1"}}});
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
  // A multiple of the key/value heads, but not of the q_proj rows: refused as the loader would
  // refuse the metadata, before any tensor is read.
  expect_config_errors("mixtral", {{R"({"num_attention_heads": 6})",
                                    {"config.json", "loader refuses", "head_count"}}});
}

TEST(ConvertErrors, NoTokenizer) {
  CHECKPOINT(d, "qwen3");
  fs::remove(d + "/tokenizer.json");
  expect_error(d, {"no tokenizer.json"});
}

// hy.tiktoken (Hunyuan-A13B) that cannot be read as ranks 0..n-1 of distinct base64 tokens.
TEST(ConvertErrors, BadTiktoken) {
  const auto edit = [](const std::string& d, const std::function<void(std::string&)>& change) {
    std::ifstream in(d + "/hy.tiktoken");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    change(text);
    std::ofstream(d + "/hy.tiktoken", std::ios::trunc) << text;
  };
  {
    CHECKPOINT(d, "hunyuan_tiktoken");
    edit(d, [](std::string& t) { t.insert(0, "a$== 999\n"); });
    expect_error(d, {"hy.tiktoken:1:", "'a$==' is not base64"});
  }
  {
    CHECKPOINT(d, "hunyuan_tiktoken");
    edit(d, [](std::string& t) { t += "eHl6eg== 3\n"; });  // "xyzz" given rank 3 again
    expect_error(d, {"hy.tiktoken:", "rank 3 given twice"});
  }
  {
    CHECKPOINT(d, "hunyuan_tiktoken");
    edit(d, [](std::string& t) { t += "eHl6eg== 280\n"; });  // ranks 275..279 missing
    expect_error(d, {"hy.tiktoken", "rank 275 is missing", "without gaps"});
  }
  {
    CHECKPOINT(d, "hunyuan_tiktoken");
    edit(d, [](std::string& t) { t += "dGg= 275\n"; });  // "th" again
    expect_error(d, {"hy.tiktoken:", "token 'th' given twice (ranks 256 and 275)"});
  }
  {
    CHECKPOINT(d, "hunyuan_tiktoken");
    edit(d, [](std::string& t) { t += "dGg=\n"; });
    expect_error(d, {"hy.tiktoken:", "not '<base64 token> <rank>'"});
  }
  {
    CHECKPOINT(d, "hunyuan_tiktoken");
    json c = read_json(d + "/tokenizer_config.json");
    c["added_tokens_decoder"]["200"] = {{"content", "<|x|>"}};  // a ranked token's id
    write_json(d + "/tokenizer_config.json", c);
    expect_error(d, {"added token '<|x|>' has id 200", "not free"});
  }
  {
    CHECKPOINT(d, "hunyuan_tiktoken");
    json c = read_json(d + "/tokenizer_config.json");
    c.erase("added_tokens_decoder");
    write_json(d + "/tokenizer_config.json", c);
    expect_error(d, {"no added_tokens_decoder", "hy.tiktoken"});
  }
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
  expect_config_errors(
      "qwen3", {{R"({"rope_scaling": {"type": "yarn", "factor": 4.0}})", {"rope_scaling"}}});
}

// transformers 5's rope_parameters beside the older keys: a value written both ways must agree.
TEST(ConvertErrors, RopeParametersDisagreeWithTheOlderKeys) {
  expect_config_errors("qwen3_moe",
                       {{R"({"rope_parameters": {"rope_type": "default", "rope_theta": 5.0}})",
                         {"rope_theta", "rope_parameters.rope_theta"}},
                        {R"({"rope_parameters": {"full_attention": {"rope_type": "default"}}})",
                         {"rope_parameters", "per layer type"}},
                        {R"({"rope_theta": null,
            "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}})",
                         {"rope_scaling"}}});
  expect_config_errors("gpt_oss", {{R"({"rope_parameters": {"rope_type": "yarn", "factor": 8.0}})",
                                    {"rope_scaling.factor", "rope_parameters.factor"}}});
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
  expect_config_errors("gpt_oss",
                       {{R"({"layer_types": ["full_attention", "sliding_attention"]})",
                         {"layer_types[0]", "full_attention", "even layers"}},
                        {R"({"layer_types": null, "swiglu_limit": 10.0})", {"swiglu_limit"}},
                        {R"([{"layer_types": null, "swiglu_limit": 7.0, "rope_scaling": null},
            {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}])",
                         {"rope_scaling", "yarn", "gpt-oss"}}});
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
  expect_config_errors(
      "glm4_moe",
      {{R"({"use_qk_norm": true})", {"self_attn.q_norm.weight", "missing", "attn_q_norm"}},
       // 19.2 of 64 dimensions.
       {R"({"use_qk_norm": false, "partial_rotary_factor": 0.3})", {"partial_rotary_factor"}},
       {R"({"use_qk_norm": false, "partial_rotary_factor": 0.5, "attention_bias": false})",
        {"attention_bias"}}});
}

// MiniMax-M2 switches with one answer in the architecture are refused by name: a file converted
// past them would run another model.
TEST(ConvertErrors, MinimaxM2ConfigOutsideTheArchitecture) {
  expect_config_errors(
      "minimax_m2",
      {{R"({"use_qk_norm": false})", {"use_qk_norm", "minimax-m2"}},
       {R"({"qk_norm_type": "per_head"})", {"qk_norm_type 'per_head'"}},
       {R"({"use_routing_bias": false})", {"use_routing_bias"}},
       {R"({"shared_intermediate_size": 256})", {"shared_intermediate_size"}},
       {R"({"attn_type_list": [1, 0]})", {"attn_type_list"}},
       {R"({"rotary_dim": 48})", {"rotary_dim 48 must be even and at most head_dim 32"}},
       {R"({"partial_rotary_factor": 0.25})",
        {"rotary_dim 16 disagrees with partial_rotary_factor"}},
       {R"({"scoring_func": "softplus"})", {"scoring_func 'softplus'"}}});
  // The selection bias is required in every layer.
  CHECKPOINT(d, "minimax_m2");
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
  expect_config_errors(
      "dots1", {{R"({"scoring_func": "softmax"})", {"scoring_func 'softmax'"}},
                {R"({"attention_bias": true})", {"attention_bias", "dots1"}},
                {R"({"num_key_value_heads": 2})", {"num_key_value_heads"}},
                {R"({"n_group": 4, "topk_group": 2})", {"n_group 4 / topk_group 2"}},
                {R"({"rope_scaling": {"type": "yarn", "factor": 4.0}})", {"rope_scaling"}}});
}

// Qwen3-VL-MoE: the M-RoPE and the layer pattern llama.cpp's graph runs; the fused experts'
// layout.
TEST(ConvertErrors, Qwen3VlMoeConfigOutsideTheArchitecture) {
  expect_config_errors(
      "qwen3_vl_moe", {{R"([{"text_config": {"rope_scaling": null}},
            {"text_config": {"rope_scaling": {"mrope_section": [6, 5, 5],
                                              "mrope_interleaved": false}}}])",
                        {"mrope_interleaved false"}},
                       {R"([{"text_config": {"rope_scaling": null}},
            {"text_config": {"rope_scaling": {"rope_type": "yarn", "mrope_section": [6, 5, 5]}}}])",
                        {"rope type 'yarn'"}},
                       {R"([{"text_config": {"rope_scaling": null}},
            {"text_config": {"rope_scaling": {"mrope_section": [6, 5]}}}])",
                        {"mrope_section must be 3"}},
                       {R"({"text_config": {"mlp_only_layers": [0]}})", {"mlp_only_layers"}},
                       {R"({"text_config": {"rope_scaling": null}})", {"mrope_section", "missing"}},
                       {R"({"text_config": null})", {"text_config"}},
                       // The fused experts are 32 wide.
                       {R"({"text_config": {"moe_intermediate_size": 16}})",
                        {"gate_up_proj", "gate then up outputs"}}});
}

// ERNIE-4.5-MoE switches llama.cpp's graph has one answer to are refused by name.
TEST(ConvertErrors, Ernie45MoeConfigOutsideTheArchitecture) {
  expect_config_errors("ernie4_5_moe",
                       {{R"({"use_bias": true})", {"use_bias", "ernie4_5-moe"}},
                        {R"({"hidden_act": "gelu"})", {"hidden_act 'gelu'"}},
                        {R"({"moe_layer_end_index": 1})", {"moe_layer_end_index 1"}},
                        {R"({"moe_layer_interval": 0})", {"moe_layer_interval"}},
                        {R"({"moe_layer_start_index": null})", {"moe_layer_start_index"}}});
}

// What llama.cpp's bailingmoe2 cannot run is refused by name: another router, biases, no q/k
// norm, another activation, rope scaling; Ling 1.x under the shared model_type name.
TEST(ConvertErrors, BailingMoe2ConfigOutsideTheArchitecture) {
  expect_config_errors(
      "bailing_moe_v2",
      {{R"({"score_function": "softmax"})", {"score_function 'softmax'"}},
       {R"({"use_qkv_bias": true})", {"use_qkv_bias", "bailingmoe2"}},
       {R"({"use_qk_norm": false})", {"use_qk_norm"}},
       {R"({"hidden_act": "gelu"})", {"hidden_act 'gelu'"}},
       {R"({"partial_rotary_factor": 0.3})", {"partial_rotary_factor"}},
       {R"({"rope_scaling": {"type": "yarn", "factor": 4.0}})", {"rope_scaling"}},
       {R"({"model_type": "bailing_moe", "architectures": ["BailingMoeForCausalLM"]})",
        {"BailingMoeV2ForCausalLM", "Ling 1.x"}}});
}

// Qwen3-Next / Qwen3.5: a projection whose rows do not fit the config's heads is refused naming
// the layout it should have; switches the architecture has one answer to are refused by name.
TEST(ConvertErrors, Qwen3NextLayoutAndConfig) {
  expect_config_errors("qwen3_next",
                       {// 2 value heads of 8 instead of 4: in_proj_qkvz has rows for 4.
                        {R"({"linear_num_value_heads": 2})",
                         {"in_proj_qkvz", "per key head: q, k, then its value heads' v and z"}},
                        {R"({"mlp_only_layers": [1]})", {"mlp_only_layers"}},
                        {R"({"full_attention_interval": 2})", {"layer_types[1]", "full_attention"}},
                        {R"({"rope_scaling": {"type": "yarn", "factor": 4.0}})", {"rope_scaling"}},
                        {R"({"hidden_act": "gelu"})", {"hidden_act 'gelu'"}}});
  expect_config_errors(
      "qwen3_5_moe",
      {{R"({"text_config": {"rope_parameters": {"mrope_section": null}}})", {"mrope_section"}}});
}

// Step-3.5: config lists the architecture cannot express are refused by name.
TEST(ConvertErrors, Step35ConfigOutsideTheArchitecture) {
  expect_config_errors(
      "step3p5",
      {{R"({"moe_layers_enum": "1,3"})", {"moe_layers_enum", "dense lead"}},
       {R"({"layer_types": ["full_attention", "sliding_attention"]})",
        {"layer_types must list every layer"}},
       {R"({"rope_theta": [5e6, 1e4, 4e6, 1e4]})", {"rope_theta differs"}},
       {R"([{"rope_scaling": null}, {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}])",
        {"llama3"}},
       {R"({"partial_rotary_factors": [0.75, 1.0, 0.75, 1.0]})", {"partial_rotary_factors"}},
       {R"({"attention_other_setting": {"head_dim": 32}})", {"attention_other_setting.head_dim"}}});
}

// Gemma 4: what the architecture does not run (the dense and the small E2B / E4B models, a
// sliding last layer, another rope or activation) is refused by name from text_config.
TEST(ConvertErrors, Gemma4ConfigOutsideTheArchitecture) {
  expect_config_errors(
      "gemma4",
      {{R"({"text_config": {"enable_moe_block": false}})", {"enable_moe_block", "dense Gemma 4"}},
       {R"({"text_config": {"num_kv_shared_layers": 2}})", {"num_kv_shared_layers", "KV sharing"}},
       {R"({"text_config": {"hidden_size_per_layer_input": 256}})", {"per-layer input embeddings"}},
       {R"({"text_config": {"layer_types": ["full_attention", "sliding_attention"]}})",
        {"layer_types ends with a sliding layer"}},
       {R"({"text_config": {"hidden_activation": "silu"}})", {"hidden_activation 'silu'"}},
       {R"({"text_config": {"global_head_dim": null}})", {"missing key \"global_head_dim\""}},
       {R"({"text_config": {"num_global_key_value_heads": null}})", {"num_global_key_value_heads"}},
       {R"({"text_config": {"rope_parameters": {"full_attention": {"rope_type": "default"}}}})",
        {"rope_parameters.full_attention.rope_type"}},
       {R"({"text_config": {"rope_parameters": {"sliding_attention": {"partial_rotary_factor": 0.5}}}})",
        {"sliding_attention.partial_rotary_factor"}},
       {R"({"text_config": {"rope_parameters": {"sliding_attention": null}}})",
        {"rope_parameters.sliding_attention"}}});
}

// Hunyuan-A13B: what hunyuan-moe cannot run (cross-layer attention, per-layer widths that differ,
// no shared MLP, another rope scaling, the dense models under the same model_type) is refused
// by name.
TEST(ConvertErrors, HunyuanMoeConfigOutsideTheArchitecture) {
  expect_config_errors(
      "hunyuan",
      {{R"({"use_cla": true})", {"use_cla", "cross-layer attention"}},
       {R"({"moe_topk": [3, 2, 3]})", {"moe_topk [3,2,3]", "one positive value"}},
       {R"({"moe_intermediate_size": [32, 32]})", {"lists 2 values for 3 layers"}},
       {R"({"use_mixed_mlp_moe": false})", {"use_mixed_mlp_moe", "shared MLP"}},
       {R"({"use_qk_norm": false})", {"use_qk_norm"}},
       {R"({"attention_bias": true})", {"attention_bias"}},
       {R"({"moe_layer_num_skipped": 1})", {"moe_layer_num_skipped"}},
       {R"([{"rope_scaling": null}, {"rope_scaling": {"type": "dynamic", "factor": 2.0}}])",
        {"NTK-alpha"}},
       {R"({"architectures": ["HunYuanDenseV1ForCausalLM"]})", {"not HunYuanMoEV1ForCausalLM"}},
       {R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})",
        {"quantized", "\"gptq\"", "dequantize it to BF16 first"}}});
}

// GLM-5: a router or layout glm-dsa does not run is refused by name.
TEST(ConvertErrors, GlmDsaConfigOutsideTheArchitecture) {
  expect_config_errors("glm_moe_dsa",
                       {{R"({"scoring_func": "softmax"})", {"scoring_func 'softmax'", "sigmoid"}},
                        {R"({"mlp_layer_types": ["sparse", "sparse"]})", {"mlp_layer_types"}},
                        {R"({"rope_interleave": false})", {"rope_interleave is false"}},
                        {R"({"partial_rotary_factor": 0.5})", {"partial_rotary_factor must be 1"}},
                        {R"({"index_n_heads": null})", {"missing key \"index_n_heads\""}},
                        {R"({"moe_layer_freq": 2})", {"moe_layer_freq 2"}}});
}

// Mistral Small 4: Mistral 3 / Ministral 3 under the same outer model_type, the FP8 release
// and a rotate-half rope layout are refused by name.
TEST(ConvertErrors, Mistral4ConfigOutsideTheArchitecture) {
  expect_config_errors(
      "mistral3", {{R"({"text_config": {"model_type": "ministral3"}})",
                    {"text_config.model_type is not mistral4"}},
                   {R"({"text_config": {"rope_interleave": false}})", {"rope_interleave is false"}},
                   {R"({"text_config": {"hidden_act": "gelu"}})", {"hidden_act 'gelu'"}},
                   // llama_4_scaling_beta without the original context it divides by, or not a
                   // number.
                   {R"({"text_config": {"rope_parameters": {"rope_type": "default",
                        "llama_4_scaling_beta": 0.1}}})",
                    {"llama_4_scaling_beta needs a positive original_max_position_embeddings"}},
                   {R"({"text_config": {"rope_parameters": {"rope_type": "default",
                        "llama_4_scaling_beta": "0.1"}}})",
                    {"llama_4_scaling_beta must be a finite number"}}});
}

// FP8 checkpoints: a scale grid that does not fit weight_block_size, a block grid without
// weight_block_size, and a missing scale are refused naming the tensor.
TEST(ConvertErrors, Fp8ScalesThatDoNotFit) {
  expect_config_errors("glm_moe_dsa_fp8",
                       {{R"({"quantization_config": {"weight_block_size": [16, 32]}})",
                         {"weight_scale_inv", "(one scale per weight_block_size block of"}},
                        {R"({"quantization_config": {"weight_block_size": null}})",
                         {"weight_scale_inv", "weight_block_size [rows, cols]"}}});
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
