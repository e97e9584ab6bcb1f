// The fuzzer's seed files (tests/gguf/corpus/*.gguf, also picked up by
// scripts/run-fuzz.sh) must stay valid. They are made by the writer; regenerate them with
//   LYNX_REGEN_CORPUS=1 build/<preset>/bin/test_gguf --gtest_filter='GgufCorpus.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lynx/gguf.h"

namespace lynx::gguf {
namespace {

const std::string kCorpus = std::string(LYNX_SOURCE_DIR) + "/tests/gguf/corpus";

std::vector<uint8_t> ramp(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 13 + 5);
  return v;
}

Writer vocab_seed() {
  Writer w;
  w.set("general.architecture", Value::str("llama"));
  w.set("general.name", Value::str("seed-vocab"));
  w.set("tokenizer.ggml.model", Value::str("gpt2"));
  w.set("tokenizer.ggml.tokens", Value::str_array({"<s>", "</s>", "a", "b", "ab", "\xc4\xa0"}));
  w.set("tokenizer.ggml.token_type", Value::i32_array({3, 3, 1, 1, 1, 1}));
  w.set("tokenizer.ggml.scores", Value::f32_array({0, 0, -1, -2, -3, -4}));
  w.set("tokenizer.ggml.merges", Value::str_array({"a b"}));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(0));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(1));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  return w;
}

Writer moe_seed() {
  Writer w;
  w.set("general.architecture", Value::str("qwen2moe"));
  w.set("qwen2moe.block_count", Value::u32(1));
  w.set("qwen2moe.embedding_length", Value::u32(32));
  w.set("qwen2moe.attention.head_count", Value::u32(2));
  w.set("qwen2moe.attention.head_count_kv", Value::u32(1));
  w.set("qwen2moe.context_length", Value::u32(64));
  w.set("qwen2moe.expert_count", Value::u32(4));
  w.set("qwen2moe.expert_used_count", Value::u32(2));
  w.set("qwen2moe.attention.layer_norm_rms_epsilon", Value::f32(1e-6f));
  const auto d = ramp(4096);
  w.add_tensor("token_embd.weight", TensorType::F16, {32, 8}, d.data(), 32 * 8 * 2);
  w.add_tensor("output_norm.weight", TensorType::F32, {32}, d.data(), 128);
  w.add_tensor("blk.0.ffn_gate_inp.weight", TensorType::F32, {32, 4}, d.data(), 512);
  w.add_tensor("blk.0.ffn_gate_exps.weight", TensorType::Q8_0, {32, 8, 4}, d.data(), 32 * 34);
  w.add_tensor("blk.0.ffn_down_exps.weight", TensorType::Q4_0, {32, 8, 4}, d.data(), 32 * 18);
  w.add_tensor("blk.0.ffn_up_shexp.weight", TensorType::BF16, {32, 2}, d.data(), 128);
  return w;
}

Writer values_seed() {
  Writer w;
  w.set_alignment(64);
  w.set("u8", Value::u8(1));
  w.set("i8", Value::i8(-1));
  w.set("u16", Value::u16(2));
  w.set("i16", Value::i16(-2));
  w.set("u32", Value::u32(3));
  w.set("i32", Value::i32(-3));
  w.set("u64", Value::u64(4));
  w.set("i64", Value::i64(-4));
  w.set("f32", Value::f32(0.5f));
  w.set("f64", Value::f64(0.25));
  w.set("bool", Value::boolean(false));
  w.set("str", Value::str("s"));
  w.set("nested", Value::array(ValueType::ARRAY, {Value::array(ValueType::UINT8, {Value::u8(9)}),
                                                  Value::array(ValueType::UINT8, {})}));
  const auto d = ramp(64);
  w.add_tensor("t", TensorType::I8, {3, 2}, d.data(), 6);
  return w;
}

const std::vector<std::pair<std::string, Writer (*)()>> kSeeds = {
    {"vocab.gguf", vocab_seed}, {"moe.gguf", moe_seed}, {"values.gguf", values_seed}};

TEST(GgufCorpus, SeedsAreValidAndCurrent) {
  const bool regen = std::getenv("LYNX_REGEN_CORPUS") != nullptr;
  if (regen) std::filesystem::create_directories(kCorpus);
  for (const auto& [name, make] : kSeeds) {
    SCOPED_TRACE(name);
    const std::string path = kCorpus + "/" + name;
    if (regen) make().write(path);
    ASSERT_TRUE(std::filesystem::exists(path)) << "missing seed; regenerate (see file header)";
    const File f = File::open(path);
    // The checked-in seed equals what the writer makes today (the writer is deterministic).
    const std::vector<uint8_t> now = make().to_bytes();
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> disk((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    EXPECT_EQ(disk, now);
    EXPECT_LT(f.file_size(), 8192u);  // seeds stay tiny
  }
}

}  // namespace
}  // namespace lynx::gguf
