// Model summary (lynx-moe inspect): hyper-parameters, MoE layout and byte accounting on a
// writer-made MoE file, and on a real llama.cpp vocab file.
#include <gtest/gtest.h>

#include <filesystem>

#include "gguf/inspect.h"

namespace lynx::gguf {
namespace {

std::vector<uint8_t> moe_file() {
  Writer w;
  w.set("general.architecture", Value::str("deepseek2"));
  w.set("general.name", Value::str("tiny-moe"));
  w.set("deepseek2.block_count", Value::u32(2));
  w.set("deepseek2.embedding_length", Value::u32(64));
  w.set("deepseek2.attention.head_count", Value::u32(4));
  w.set("deepseek2.context_length", Value::u32(128));
  w.set("deepseek2.expert_count", Value::u32(8));
  w.set("deepseek2.expert_used_count", Value::u32(2));
  w.set("deepseek2.expert_shared_count", Value::u32(1));
  const std::vector<uint8_t> d(64 * 1024);
  auto add = [&](const std::string& name, TensorType t, std::vector<int64_t> ne) {
    size_t n = row_size(t, ne[0]);
    for (size_t i = 1; i < ne.size(); ++i) n *= static_cast<size_t>(ne[i]);
    w.add_tensor(name, t, ne, d.data(), n);
  };
  add("token_embd.weight", TensorType::F16, {64, 100});              // 12800 B
  add("blk.0.ffn_up.weight", TensorType::Q8_0, {64, 32});            // dense first layer, 2176 B
  add("blk.1.ffn_gate_inp.weight", TensorType::F32, {64, 8});        // 2048 B
  add("blk.1.ffn_up_exps.weight", TensorType::Q8_0, {64, 16, 8});    // 8704 B
  add("blk.1.ffn_down_exps.weight", TensorType::Q4_0, {32, 64, 8});  // 9216 B
  add("blk.1.ffn_up_shexp.weight", TensorType::Q8_0, {64, 16});      // 1088 B
  return w.to_bytes();
}

TEST(GgufInspect, SummarizesMoeLayout) {
  const auto bytes = moe_file();
  const File f = File::from_memory(bytes.data(), bytes.size(), "tiny.gguf");
  const ModelSummary s = summarize(f);
  EXPECT_EQ(s.architecture, "deepseek2");
  EXPECT_EQ(s.name, "tiny-moe");
  EXPECT_EQ(s.version, 3u);
  EXPECT_EQ(s.file_size, bytes.size());
  EXPECT_EQ(s.n_layer, 2);
  EXPECT_EQ(s.n_embd, 64);
  EXPECT_EQ(s.n_head, 4);
  EXPECT_EQ(s.n_head_kv, 4);  // absent: equals head_count
  EXPECT_EQ(s.n_ctx, 128);
  EXPECT_EQ(s.n_vocab, 100);  // from token_embd.weight, no tokenizer in the file
  EXPECT_EQ(s.n_expert, 8);
  EXPECT_EQ(s.n_expert_used, 2);
  EXPECT_EQ(s.n_expert_shared, 1);
  EXPECT_EQ(s.shexp_up_tensor, "blk.1.ffn_up_shexp.weight");  // found beyond blk.0
  EXPECT_EQ(s.shexp_gate_inp_tensor, "");
  EXPECT_EQ(s.n_tensors, 6u);
  EXPECT_EQ(s.expert_bytes, 8704u + 9216u);
  EXPECT_EQ(s.shared_expert_bytes, 1088u);
  EXPECT_EQ(s.other_bytes, 12800u + 2176u + 2048u);
  EXPECT_EQ(s.tensor_bytes, s.expert_bytes + s.shared_expert_bytes + s.other_bytes);
  ASSERT_EQ(s.types.size(), 4u);  // f32, f16, q4_0, q8_0 in type order
  EXPECT_EQ(s.types[0].type, TensorType::F32);
  EXPECT_EQ(s.types[3].type, TensorType::Q8_0);
  EXPECT_EQ(s.types[3].count, 3u);
  EXPECT_EQ(s.types[3].bytes, 2176u + 8704u + 1088u);

  const std::string text = format_summary(f, s, {.tensors = true, .metadata = true});
  EXPECT_NE(text.find("deepseek2"), std::string::npos);
  EXPECT_NE(text.find("8, 2 per token, shared 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ffn_up_shexp yes"), std::string::npos);
  EXPECT_NE(text.find("blk.1.ffn_down_exps.weight"), std::string::npos);
  EXPECT_NE(text.find("[32, 64, 8]"), std::string::npos);
  EXPECT_NE(text.find("deepseek2.expert_count (u32) = 8"), std::string::npos);
  const std::string brief = format_summary(f, s, {});
  EXPECT_EQ(brief.find("blk.1.ffn_down_exps.weight"), std::string::npos);

  const auto j = summary_json(f, s, {});
  EXPECT_EQ(j["n_expert"], 8);
  EXPECT_EQ(j["expert_bytes"], s.expert_bytes);
  EXPECT_TRUE(j["has_ffn_up_shexp"].get<bool>());
  ASSERT_EQ(j["tensors"].size(), 6u);  // always listed in JSON
  EXPECT_EQ(j["tensors"][4]["name"], "blk.1.ffn_down_exps.weight");
  EXPECT_EQ(j["tensors"][4]["shape"], nlohmann::ordered_json::array({32, 64, 8}));
  EXPECT_EQ(j["tensors"][4]["type"], "q4_0");
  EXPECT_FALSE(j.contains("metadata"));
  const auto jm = summary_json(f, s, {.metadata = true});
  EXPECT_EQ(jm["metadata"]["general.name"], "tiny-moe");
}

TEST(GgufInspect, RealVocabFile) {
  const std::string path = std::string(LYNX_SHARED_DIR) + "/data/vocab/ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const File f = File::open(path);
  const ModelSummary s = summarize(f);
  EXPECT_EQ(s.architecture, "gpt2");
  EXPECT_EQ(s.n_layer, 12);
  EXPECT_EQ(s.n_embd, 768);
  EXPECT_EQ(s.n_vocab, 50257);
  EXPECT_FALSE(s.n_expert.has_value());
  EXPECT_EQ(s.n_tensors, 0u);
  // Every metadata value converts to JSON, and the dump survives arbitrary token bytes.
  const std::string dump =
      summary_json(f, s, {.metadata = true})
          .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  EXPECT_NE(dump.find("\"tokenizer.ggml.merges\""), std::string::npos);
}

TEST(GgufInspect, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(uint64_t(3) << 30), "3.00 GiB");
}

}  // namespace
}  // namespace lynx::gguf
