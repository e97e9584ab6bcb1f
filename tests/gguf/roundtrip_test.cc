// Writer -> reader round trips: every metadata value type, nested arrays, several tensor
// types, default and non-default alignment, file and in-memory paths, lazy tensors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>

#include "lynx/gguf.h"

namespace lynx::gguf {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("lynx_gguf_" + std::to_string(getpid()) + "_" + name))
      .string();
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 31);
  return v;
}

// A writer holding one of every value type (extremes included) and nested arrays.
Writer make_all_values() {
  Writer w;
  w.set("general.architecture", Value::str("qwen2moe"));
  w.set("v.u8", Value::u8(255));
  w.set("v.i8", Value::i8(-128));
  w.set("v.u16", Value::u16(65535));
  w.set("v.i16", Value::i16(-32768));
  w.set("v.u32", Value::u32(4294967295u));
  w.set("v.i32", Value::i32(std::numeric_limits<int32_t>::min()));
  w.set("v.u64", Value::u64(std::numeric_limits<uint64_t>::max()));
  w.set("v.i64", Value::i64(std::numeric_limits<int64_t>::min()));
  w.set("v.f32", Value::f32(1.5e-3f));
  w.set("v.f64", Value::f64(-2.718281828459045));
  w.set("v.true", Value::boolean(true));
  w.set("v.false", Value::boolean(false));
  w.set("v.str", Value::str(std::string("h\xc3\xa9llo\0world", 12)));
  w.set("v.empty_str", Value::str(""));
  w.set("v.str_arr", Value::str_array({"a", "", "ccc"}));
  w.set("v.f32_arr", Value::f32_array({0.f, -1.f, 3.25f}));
  w.set("v.i32_arr", Value::i32_array({1, -2, 2147483647}));
  w.set("v.empty_arr", Value::array(ValueType::UINT64, {}));
  w.set("v.bool_arr", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)}));
  // [[1, 2], [], [3]] of u16, and a 3-deep [[[\"x\"]]].
  w.set("v.nested", Value::array(ValueType::ARRAY,
                                 {Value::array(ValueType::UINT16, {Value::u16(1), Value::u16(2)}),
                                  Value::array(ValueType::UINT16, {}),
                                  Value::array(ValueType::UINT16, {Value::u16(3)})}));
  w.set("v.deep", Value::array(ValueType::ARRAY,
                               {Value::array(ValueType::ARRAY, {Value::str_array({"x"})})}));
  return w;
}

void check_all_values(const File& f) {
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2moe");
  EXPECT_EQ(f.get_int("v.u8"), 255);
  EXPECT_EQ(f.find("v.u8")->type, ValueType::UINT8);
  EXPECT_EQ(f.get_int("v.i8"), -128);
  EXPECT_EQ(f.find("v.i8")->type, ValueType::INT8);
  EXPECT_EQ(f.get_int("v.u16"), 65535);
  EXPECT_EQ(f.get_int("v.i16"), -32768);
  EXPECT_EQ(f.get_int("v.u32"), 4294967295LL);
  EXPECT_EQ(f.get_int("v.i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(f.find("v.u64")->as_uint(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.get_int("v.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.find("v.f32")->type, ValueType::FLOAT32);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("v.f32")), 1.5e-3f);
  EXPECT_DOUBLE_EQ(f.get_float("v.f64"), -2.718281828459045);
  EXPECT_TRUE(f.get_bool("v.true"));
  EXPECT_FALSE(f.get_bool("v.false"));
  EXPECT_EQ(f.get_string("v.str"), std::string("h\xc3\xa9llo\0world", 12));
  EXPECT_EQ(f.get_string("v.empty_str"), "");

  const auto& sa = f.get_array("v.str_arr");
  ASSERT_EQ(sa.size(), 3u);
  EXPECT_EQ(f.find("v.str_arr")->elem_type, ValueType::STRING);
  EXPECT_EQ(sa[0].as_string(), "a");
  EXPECT_EQ(sa[1].as_string(), "");
  EXPECT_EQ(sa[2].as_string(), "ccc");
  const auto& fa = f.get_array("v.f32_arr");
  ASSERT_EQ(fa.size(), 3u);
  EXPECT_EQ(fa[2].as_float(), 3.25);
  const auto& ia = f.get_array("v.i32_arr");
  ASSERT_EQ(ia.size(), 3u);
  EXPECT_EQ(ia[1].as_int(), -2);
  EXPECT_EQ(ia[2].as_int(), 2147483647);
  EXPECT_TRUE(f.get_array("v.empty_arr").empty());
  EXPECT_EQ(f.find("v.empty_arr")->elem_type, ValueType::UINT64);
  const auto& ba = f.get_array("v.bool_arr");
  ASSERT_EQ(ba.size(), 2u);
  EXPECT_TRUE(ba[0].as_bool());
  EXPECT_FALSE(ba[1].as_bool());

  const auto& nested = f.get_array("v.nested");
  ASSERT_EQ(nested.size(), 3u);
  EXPECT_EQ(f.find("v.nested")->elem_type, ValueType::ARRAY);
  ASSERT_EQ(nested[0].as_array().size(), 2u);
  EXPECT_EQ(nested[0].elem_type, ValueType::UINT16);
  EXPECT_EQ(nested[0].as_array()[1].as_int(), 2);
  EXPECT_TRUE(nested[1].as_array().empty());
  EXPECT_EQ(nested[1].elem_type, ValueType::UINT16);
  EXPECT_EQ(nested[2].as_array()[0].as_int(), 3);
  const auto& deep = f.get_array("v.deep");
  ASSERT_EQ(deep.size(), 1u);
  EXPECT_EQ(deep[0].as_array()[0].as_array()[0].as_string(), "x");
  EXPECT_EQ(f.find("v.deep")->to_string(), "[[[\"x\"]]]");
}

TEST(GgufRoundTrip, EveryValueTypeInMemory) {
  const std::vector<uint8_t> bytes = make_all_values().to_bytes();
  const File f = File::from_memory(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.path(), "mem");
  EXPECT_EQ(f.file_size(), bytes.size());
  EXPECT_FALSE(f.has("general.alignment"));  // default alignment is not written
  EXPECT_EQ(f.metadata().size(), 22u);
  EXPECT_EQ(f.metadata()[0].key, "general.architecture");  // order preserved
  EXPECT_TRUE(f.tensors().empty());
  check_all_values(f);
}

TEST(GgufRoundTrip, SetReplacesExistingKey) {
  Writer w;
  w.set("a", Value::u32(1));
  w.set("b", Value::u32(2));
  w.set("a", Value::str("one"));
  const auto bytes = w.to_bytes();
  const File f = File::from_memory(bytes.data(), bytes.size());
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].key, "a");
  EXPECT_EQ(f.get_string("a"), "one");
}

struct TensorCase {
  std::string name;
  TensorType type;
  std::vector<int64_t> ne;
};

const std::vector<TensorCase>& tensor_cases() {
  static const std::vector<TensorCase> cases = {
      {"token_embd.weight", TensorType::F16, {64, 10}},
      {"output_norm.weight", TensorType::F32, {64}},
      {"blk.0.ffn_gate_exps.weight", TensorType::Q8_0, {64, 16, 4}},
      {"blk.0.ffn_down_exps.weight", TensorType::Q4_0, {32, 64, 4}},
      {"blk.0.attn_q.weight", TensorType::BF16, {64, 3}},
      {"blk.0.ffn_up_exps.weight", TensorType::Q4_K, {256, 2, 2, 2}},
      {"blk.0.odd", TensorType::I8, {7}},  // 7 bytes: forces padding before the next
      {"blk.0.q6", TensorType::Q6_K, {512, 1}},
  };
  return cases;
}

void add_cases(Writer& w, std::vector<std::vector<uint8_t>>* payloads) {
  uint8_t seed = 1;
  for (const auto& c : tensor_cases()) {
    size_t n = row_size(c.type, c.ne[0]);
    for (size_t d = 1; d < c.ne.size(); ++d) n *= static_cast<size_t>(c.ne[d]);
    payloads->push_back(pattern(n, seed++));
    w.add_tensor(c.name, c.type, c.ne, payloads->back().data(), n);
  }
}

void check_cases(const File& f, const std::vector<std::vector<uint8_t>>& payloads) {
  const auto& cases = tensor_cases();
  ASSERT_EQ(f.tensors().size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const TensorInfo& t = f.tensor(cases[i].name);
    EXPECT_EQ(&t, &f.tensors()[i]);  // file order preserved
    EXPECT_EQ(t.type, cases[i].type);
    ASSERT_EQ(t.n_dims, static_cast<int>(cases[i].ne.size()));
    for (int d = 0; d < kMaxDims; ++d) {
      EXPECT_EQ(t.ne[d], d < t.n_dims ? cases[i].ne[d] : 1);
    }
    EXPECT_EQ(t.offset % f.alignment(), 0u);
    EXPECT_EQ((f.data_offset() + t.offset) % f.alignment(), 0u);
    ASSERT_EQ(t.n_bytes, payloads[i].size());
    ASSERT_NE(t.data, nullptr);
    EXPECT_EQ(std::memcmp(t.data, payloads[i].data(), t.n_bytes), 0);
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufRoundTrip, TensorsDefaultAlignment) {
  Writer w;
  w.set("general.architecture", Value::str("test"));
  std::vector<std::vector<uint8_t>> payloads;
  add_cases(w, &payloads);
  const auto bytes = w.to_bytes();
  const File f = File::from_memory(bytes.data(), bytes.size());
  EXPECT_EQ(f.alignment(), 32u);
  check_cases(f, payloads);
  f.release_pages(bytes.data(), bytes.size());  // not a mapping: the buffer is left alone
  check_cases(f, payloads);
  EXPECT_EQ(f.tensor("blk.0.ffn_up_exps.weight").shape_string(), "[256, 2, 2, 2]");
  EXPECT_EQ(f.tensor("blk.0.ffn_up_exps.weight").n_elements(), 2048);
}

TEST(GgufRoundTrip, NonDefaultAlignmentThroughFile) {
  Writer w = make_all_values();
  w.set_alignment(256);
  std::vector<std::vector<uint8_t>> payloads;
  add_cases(w, &payloads);
  const std::string path = temp_path("align.gguf");
  w.write(path);
  {
    File f = File::open(path);
    EXPECT_EQ(f.path(), path);
    EXPECT_EQ(f.alignment(), 256u);
    EXPECT_EQ(f.find("general.alignment")->type, ValueType::UINT32);
    EXPECT_EQ(f.get_int("general.alignment"), 256);
    EXPECT_EQ(f.data_offset() % 256, 0u);
    EXPECT_EQ(f.file_size(), std::filesystem::file_size(path));
    check_all_values(f);
    check_cases(f, payloads);
    size_t last = 0, calls = 0;
    f.prefetch([&](size_t done, size_t total) {
      EXPECT_GE(done, last);
      EXPECT_LE(done, total);
      last = done;
      ++calls;
    });
    EXPECT_GE(calls, 1u);
    EXPECT_EQ(last, f.file_size() - f.data_offset());
    // The mapping outlives a move.
    File g = std::move(f);
    EXPECT_EQ(std::memcmp(g.tensors()[0].data, payloads[0].data(), payloads[0].size()), 0);
    // Released pages (the whole data section, pages shared with the header included or not)
    // read back as they were; ranges outside the mapping are ignored.
    const uint8_t* data = g.tensors()[0].data;
    g.release_pages(data, g.file_size() - g.data_offset());
    g.release_pages(data - g.data_offset(), g.file_size());
    g.release_pages(data, g.file_size());  // runs past the end: ignored
    check_cases(g, payloads);
  }
  // write() and to_bytes() produce the same bytes.
  const auto bytes = w.to_bytes();
  std::vector<uint8_t> disk(std::filesystem::file_size(path));
  FILE* fp = std::fopen(path.c_str(), "rb");
  ASSERT_NE(fp, nullptr);
  ASSERT_EQ(std::fread(disk.data(), 1, disk.size(), fp), disk.size());
  std::fclose(fp);
  EXPECT_EQ(disk, bytes);
  std::filesystem::remove(path);
}

TEST(GgufRoundTrip, AlignmentBackToDefaultDropsKey) {
  Writer w;
  w.set_alignment(64);
  w.set_alignment(32);
  const auto bytes = w.to_bytes();
  const File f = File::from_memory(bytes.data(), bytes.size());
  EXPECT_FALSE(f.has("general.alignment"));
  Writer w2;
  w2.set("general.alignment", Value::u32(128));
  const auto b2 = w2.to_bytes();
  EXPECT_EQ(File::from_memory(b2.data(), b2.size()).alignment(), 128u);
  EXPECT_THROW(w2.set("general.alignment", Value::u64(128)), Error);
  EXPECT_THROW(w2.set_alignment(48), Error);
}

TEST(GgufRoundTrip, LazyTensorsAreFilledAtWriteTime) {
  Writer w;
  int calls = 0;
  const std::vector<int64_t> ne = {128, 8, 4};  // f16: 8 KiB
  w.add_tensor_lazy("blk.0.ffn_gate_exps.weight", TensorType::F16, ne, [&](uint8_t* dst, size_t n) {
    ++calls;
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(i * 7);
  });
  w.add_tensor_lazy("b", TensorType::Q8_0, {32, 3}, [&](uint8_t* dst, size_t n) {
    ++calls;
    EXPECT_EQ(n, 3u * 34u);
    std::memset(dst, 0xAB, n);
  });
  EXPECT_EQ(calls, 0);
  const std::string path = temp_path("lazy.gguf");
  w.write(path);
  EXPECT_EQ(calls, 2);
  const File f = File::open(path);
  const TensorInfo& t = f.tensor("blk.0.ffn_gate_exps.weight");
  ASSERT_EQ(t.n_bytes, 128u * 8 * 4 * 2);
  for (size_t i = 0; i < t.n_bytes; ++i) ASSERT_EQ(t.data[i], static_cast<uint8_t>(i * 7));
  const TensorInfo& b = f.tensor("b");
  EXPECT_EQ(b.data[0], 0xAB);
  EXPECT_EQ(b.data[b.n_bytes - 1], 0xAB);
  std::filesystem::remove(path);
}

TEST(GgufRoundTrip, WriterRejectsBadInput) {
  Writer w;
  const std::vector<uint8_t> buf(1024);
  w.add_tensor("a", TensorType::F32, {4}, buf.data(), 16);
  EXPECT_THROW(w.add_tensor("a", TensorType::F32, {4}, buf.data(), 16), Error);    // duplicate
  EXPECT_THROW(w.add_tensor("b", TensorType::F32, {4}, buf.data(), 15), Error);    // size
  EXPECT_THROW(w.add_tensor("c", TensorType::Q8_0, {31}, buf.data(), 34), Error);  // block
  EXPECT_THROW(w.add_tensor("d", TensorType::F32, {}, buf.data(), 4), Error);      // no dims
  EXPECT_THROW(w.add_tensor("e", TensorType::F32, {1, 1, 1, 1, 1}, buf.data(), 4), Error);
  EXPECT_THROW(w.add_tensor("f", TensorType::F32, {0}, buf.data(), 0), Error);
  EXPECT_THROW(w.add_tensor("g", static_cast<TensorType>(99), {4}, buf.data(), 4), Error);
  EXPECT_THROW(Value::array(ValueType::UINT8, {Value::u16(1)}), Error);
  // A hand-built Value whose integer does not fit its declared width.
  Value bad;
  bad.type = ValueType::UINT8;
  bad.v = uint64_t{300};
  w.set("bad", bad);
  EXPECT_THROW(w.to_bytes(), Error);
  const std::string dir_path = temp_path("no_such_dir") + "/x.gguf";
  Writer ok;
  EXPECT_THROW(ok.write(dir_path), Error);
}

TEST(GgufTypes, BlockSizesAndNames) {
  int64_t be = 0, bb = 0;
  ASSERT_TRUE(tensor_type_info(TensorType::Q8_0, &be, &bb));
  EXPECT_EQ(be, 32);
  EXPECT_EQ(bb, 34);
  ASSERT_TRUE(tensor_type_info(TensorType::Q4_0, &be, &bb));
  EXPECT_EQ(bb, 18);
  ASSERT_TRUE(tensor_type_info(TensorType::Q6_K, &be, &bb));
  EXPECT_EQ(be, 256);
  EXPECT_EQ(bb, 210);
  EXPECT_FALSE(tensor_type_info(static_cast<TensorType>(5), &be, &bb));  // removed Q4_2
  EXPECT_EQ(row_size(TensorType::F16, 10), 20u);
  EXPECT_EQ(row_size(TensorType::Q8_0, 64), 68u);
  EXPECT_THROW(row_size(TensorType::Q8_0, 33), Error);
  EXPECT_STREQ(tensor_type_name(TensorType::BF16), "bf16");
  EXPECT_STREQ(tensor_type_name(static_cast<TensorType>(77)), "unknown");
  EXPECT_EQ(tensor_type_from_name("Q8_0"), TensorType::Q8_0);
  EXPECT_EQ(tensor_type_from_name("f32"), TensorType::F32);
  EXPECT_EQ(tensor_type_from_name("q4_k"), TensorType::Q4_K);
  for (uint32_t t = 0; t < 64; ++t) {
    const auto tt = static_cast<TensorType>(t);
    if (tensor_type_info(tt, nullptr, nullptr)) {
      EXPECT_EQ(tensor_type_from_name(tensor_type_name(tt)), tt);
    }
  }
  try {
    tensor_type_from_name("q9_9");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown tensor type 'q9_9'"), std::string::npos);
  }
}

TEST(GgufValue, ToStringAndConversions) {
  EXPECT_EQ(Value::str("a\"b\n").to_string(), "\"a\\\"b\\x0a\"");
  EXPECT_EQ(Value::boolean(true).to_string(), "true");
  EXPECT_EQ(Value::i8(-3).to_string(), "-3");
  EXPECT_EQ(Value::f32(0.5f).to_string(), "0.5");
  EXPECT_EQ(Value::i32_array({1, 2, 3, 4}).to_string(2), "[1, 2, ... (4 items)]");
  EXPECT_EQ(Value::u32(7).as_float(), 7.0);
  EXPECT_THROW(Value::u64(std::numeric_limits<uint64_t>::max()).as_int(), Error);
  EXPECT_THROW(Value::i32(-1).as_uint(), Error);
  EXPECT_THROW(Value::f32(1.f).as_int(), Error);
  EXPECT_THROW(Value::u8(1).as_bool(), Error);
  EXPECT_THROW(Value::u8(1).as_string(), Error);
  EXPECT_THROW(Value::str("x").as_array(), Error);
  EXPECT_THROW(Value::str("x").as_float(), Error);
}

}  // namespace
}  // namespace lynx::gguf
