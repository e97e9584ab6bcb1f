// Handcrafted malformed GGUF files: each must be rejected with a lynx::Error that names its
// specific problem (never a crash, hang or huge allocation). The bytes are built by hand
// here, independently of the writer, so a writer bug cannot mask a reader bug.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "lynx/gguf.h"

namespace lynx::gguf {
namespace {

// Little-endian byte builder.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    b.insert(b.end(), p, p + sizeof x);
    return *this;
  }
  Bytes& u8(uint8_t x) { return put(x); }
  Bytes& u32(uint32_t x) { return put(x); }
  Bytes& u64(uint64_t x) { return put(x); }
  Bytes& i64(int64_t x) { return put(x); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
  }
  // A metadata entry: key, value type tag; the value is appended by the caller.
  Bytes& key(const std::string& k, ValueType t) { return str(k).u32(uint32_t(t)); }
  Bytes& kv_u32(const std::string& k, uint32_t v) { return key(k, ValueType::UINT32).u32(v); }
  Bytes& tensor(const std::string& name, std::vector<int64_t> ne, TensorType t, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) i64(d);
    return u32(uint32_t(t)).u64(offset);
  }
  Bytes& pad(size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
  size_t size() const { return b.size(); }
};

// Parses `bytes` and expects a lynx::Error containing `expected` (and the file's name).
void expect_error(const Bytes& bytes, const std::string& expected) {
  try {
    File::from_memory(bytes.b.data(), bytes.b.size(), "bad.gguf");
    ADD_FAILURE() << "accepted a malformed file; expected error: " << expected;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos)
        << "message: " << msg << "\nexpected substring: " << expected;
  }
}

// A valid file with one tensor: the base the tensor tests corrupt one field of.
Bytes one_tensor(std::vector<int64_t> ne, TensorType t, uint64_t offset, size_t data_bytes) {
  Bytes f;
  f.header(1, 0).tensor("w", std::move(ne), t, offset).pad(32).zeros(data_bytes);
  return f;
}

TEST(GgufMalformed, ValidBaseFilesParse) {
  // Sanity check of the builder: the unmodified bases are accepted.
  const Bytes a = one_tensor({8, 2}, TensorType::F32, 0, 64);
  const File f = File::from_memory(a.b.data(), a.size());
  EXPECT_EQ(f.tensor("w").n_bytes, 64u);
  Bytes v2;
  v2.header(0, 1, 2).kv_u32("a", 1);
  EXPECT_EQ(File::from_memory(v2.b.data(), v2.size()).version(), 2u);
}

// ---- header ----------------------------------------------------------------------------

TEST(GgufMalformed, EmptyFile) {
  expect_error(Bytes{}, "truncated file: header magic");
}

TEST(GgufMalformed, BadMagic) {
  Bytes f;
  f.u32(0x46554748).u32(3).u64(0).u64(0);
  expect_error(f, "bad magic 0x46554748");
}

TEST(GgufMalformed, VersionOneRejected) {
  Bytes f;
  f.header(0, 0, 1);
  expect_error(f, "GGUF version 1 is not supported");
}

TEST(GgufMalformed, UnsupportedVersion) {
  Bytes f;
  f.header(0, 0, 4);
  expect_error(f, "unsupported GGUF version 4");
}

TEST(GgufMalformed, BigEndianVersion) {
  Bytes f;
  f.header(0, 0, 0x03000000u);
  expect_error(f, "(big-endian file?)");
}

TEST(GgufMalformed, TruncatedHeader) {
  Bytes f;
  f.u32(kMagic).u32(3).u64(0);  // no kv count
  expect_error(f, "truncated file: header metadata count");
}

TEST(GgufMalformed, MetadataCountCannotFit) {
  Bytes f;
  f.header(0, 1000).kv_u32("a", 1);
  expect_error(f, "metadata count 1000 cannot fit");
}

TEST(GgufMalformed, TensorCountCannotFit) {
  Bytes f;
  f.header(uint64_t(1) << 60, 0).zeros(64);
  expect_error(f, "tensor count 1152921504606846976 cannot fit");
}

// ---- metadata --------------------------------------------------------------------------

TEST(GgufMalformed, TruncatedKey) {
  Bytes f;
  f.header(0, 2).kv_u32("a.long.enough.key", 1).u32(5);  // half of the second key's length
  expect_error(f, "truncated file: metadata entry 1 key length");
}

TEST(GgufMalformed, KeyLengthPastEnd) {
  Bytes f;
  f.header(0, 1).u64(1000).zeros(20);
  expect_error(f, "metadata entry 0 key: string length 1000 at offset 24 exceeds");
}

TEST(GgufMalformed, TruncatedValue) {
  Bytes f;
  f.header(0, 1).key("a", ValueType::UINT64).u32(0);  // 4 of 8 bytes
  expect_error(f, "truncated file: metadata key 'a'");
}

TEST(GgufMalformed, StringValueLengthPastEnd) {
  Bytes f;
  f.header(0, 1).key("name", ValueType::STRING).u64(uint64_t(1) << 62).zeros(8);
  expect_error(f, "metadata key 'name': string length 4611686018427387904");
}

TEST(GgufMalformed, ArrayLengthPastEnd) {
  Bytes f;
  f.header(0, 1).key("arr", ValueType::ARRAY).u32(uint32_t(ValueType::UINT32)).u64(1000000);
  f.zeros(100);
  expect_error(f, "metadata key 'arr': array of 1000000 u32 elements");
}

TEST(GgufMalformed, StringArrayLengthPastEnd) {
  // Each string needs at least its 8-byte length: 100 strings cannot fit in 80 bytes.
  Bytes f;
  f.header(0, 1).key("arr", ValueType::ARRAY).u32(uint32_t(ValueType::STRING)).u64(100);
  f.zeros(80);
  expect_error(f, "array of 100 string elements");
}

TEST(GgufMalformed, StringInsideArrayPastEnd) {
  Bytes f;
  f.header(0, 1).key("toks", ValueType::ARRAY).u32(uint32_t(ValueType::STRING)).u64(2);
  f.str("ok").u64(999).zeros(4);
  expect_error(f, "metadata key 'toks'[1]: string length 999");
}

TEST(GgufMalformed, UnknownValueType) {
  Bytes f;
  f.header(0, 1).str("k").u32(13).u32(0);
  expect_error(f, "metadata key 'k' value: unknown metadata value type 13");
}

TEST(GgufMalformed, UnknownArrayElementType) {
  Bytes f;
  f.header(0, 1).key("k", ValueType::ARRAY).u32(200).u64(0);
  expect_error(f, "metadata key 'k' array element: unknown metadata value type 200");
}

TEST(GgufMalformed, NestingTooDeep) {
  Bytes f;
  f.header(0, 1).key("deep", ValueType::ARRAY);
  for (int i = 0; i < 20; ++i) f.u32(uint32_t(ValueType::ARRAY)).u64(1);
  f.zeros(64);
  expect_error(f, "arrays nested deeper than 8 levels");
}

TEST(GgufMalformed, NestingAtTheLimitIsAccepted) {
  // kMaxArrayNesting levels of arrays, the innermost an empty u8 array.
  Bytes f;
  f.header(0, 1).key("deep", ValueType::ARRAY);
  for (int i = 1; i < kMaxArrayNesting; ++i) f.u32(uint32_t(ValueType::ARRAY)).u64(1);
  f.u32(uint32_t(ValueType::UINT8)).u64(0);
  const File file = File::from_memory(f.b.data(), f.size());
  const Value* v = file.find("deep");
  int depth = 0;
  while (v->type == ValueType::ARRAY && !v->as_array().empty()) {
    v = &v->as_array()[0];
    ++depth;
  }
  EXPECT_EQ(depth, kMaxArrayNesting - 1);
}

TEST(GgufMalformed, DuplicateKey) {
  Bytes f;
  f.header(0, 2).kv_u32("general.x", 1).kv_u32("general.x", 2);
  expect_error(f, "duplicate metadata key 'general.x'");
}

TEST(GgufMalformed, AlignmentWrongType) {
  Bytes f;
  f.header(0, 1).key("general.alignment", ValueType::UINT64).u64(64);
  expect_error(f, "general.alignment has type u64, expected u32");
}

TEST(GgufMalformed, AlignmentNotPowerOfTwo) {
  Bytes f;
  f.header(0, 1).kv_u32("general.alignment", 48);
  expect_error(f, "general.alignment 48 is not a power of two");
}

TEST(GgufMalformed, AlignmentZero) {
  Bytes f;
  f.header(0, 1).kv_u32("general.alignment", 0);
  expect_error(f, "general.alignment 0 is not a power of two");
}

// ---- tensor infos ----------------------------------------------------------------------

TEST(GgufMalformed, TruncatedTensorInfo) {
  Bytes f;
  // Cut inside the second dimension (the name is long enough to pass the count check).
  f.header(1, 0).str("blk.0.ffn_gate_exps.weight").u32(2).i64(8).u32(0);
  expect_error(f, "truncated file: tensor 'blk.0.ffn_gate_exps.weight' dimension 1");
}

TEST(GgufMalformed, TooManyDimensions) {
  expect_error(one_tensor({2, 2, 2, 2, 2}, TensorType::F32, 0, 128),
               "tensor 'w' has 5 dimensions (must be 1 to 4)");
}

TEST(GgufMalformed, ZeroDimensionCount) {
  expect_error(one_tensor({}, TensorType::F32, 0, 64), "tensor 'w' has 0 dimensions");
}

TEST(GgufMalformed, ZeroDimension) {
  expect_error(one_tensor({8, 0}, TensorType::F32, 0, 64),
               "tensor 'w' dimension 1 is 0 (must be positive)");
}

TEST(GgufMalformed, NegativeDimension) {
  expect_error(one_tensor({-4}, TensorType::F32, 0, 64), "tensor 'w' dimension 0 is -4");
}

TEST(GgufMalformed, ElementCountOverflow) {
  expect_error(one_tensor({int64_t(1) << 32, int64_t(1) << 32}, TensorType::I8, 0, 64),
               "tensor 'w' element count [4294967296, 4294967296] overflows int64");
}

TEST(GgufMalformed, ByteSizeOverflow) {
  // 2^62 f32 elements fit int64 but their 2^64 bytes do not.
  expect_error(one_tensor({int64_t(1) << 31, int64_t(1) << 31}, TensorType::F32, 0, 64),
               "tensor 'w' byte size overflows");
}

TEST(GgufMalformed, RowNotMultipleOfBlock) {
  expect_error(one_tensor({33, 2}, TensorType::Q8_0, 0, 128),
               "tensor 'w' row of 33 elements is not a multiple of q8_0's block size 32");
}

TEST(GgufMalformed, UnknownTensorType) {
  expect_error(one_tensor({8}, static_cast<TensorType>(99), 0, 64),
               "tensor 'w' has unknown tensor type 99");
}

TEST(GgufMalformed, MisalignedTensorOffset) {
  expect_error(one_tensor({4}, TensorType::F32, 4, 64),
               "tensor 'w' data offset 4 is not a multiple of the alignment 32");
}

TEST(GgufMalformed, MisalignedUnderCustomAlignment) {
  Bytes f;
  f.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {4}, TensorType::F32, 32);
  f.pad(64).zeros(128);
  expect_error(f, "data offset 32 is not a multiple of the alignment 64");
}

TEST(GgufMalformed, TensorDataPastEnd) {
  expect_error(one_tensor({16}, TensorType::F32, 0, 60),
               "tensor 'w' data [0, +64) extends past the end of the file");
}

TEST(GgufMalformed, TensorOffsetPastEnd) {
  expect_error(one_tensor({4}, TensorType::F32, uint64_t(1) << 63, 64),
               "extends past the end of the file");
}

TEST(GgufMalformed, DataSectionPastEnd) {
  Bytes f;
  f.header(1, 0).tensor("w", {4}, TensorType::F32, 0);  // no padding, no data
  expect_error(f, "truncated file: data section starts at offset 64");
}

TEST(GgufMalformed, OverlappingTensors) {
  Bytes f;
  f.header(2, 0)
      .tensor("a", {16}, TensorType::F32, 0)  // [0, 64)
      .tensor("b", {8}, TensorType::F32, 32)  // [32, 64)
      .pad(32)
      .zeros(64);
  expect_error(f, "tensor 'a' data overlaps tensor 'b'");
}

TEST(GgufMalformed, DuplicateTensorNames) {
  Bytes f;
  f.header(2, 0)
      .tensor("w", {8}, TensorType::F32, 0)
      .tensor("w", {8}, TensorType::F32, 32)
      .pad(32)
      .zeros(64);
  expect_error(f, "duplicate tensor name 'w'");
}

// ---- sweeps ------------------------------------------------------------------------------

// A small valid file with every section: metadata of each kind and three tensors.
std::vector<uint8_t> sample_file(size_t* data_end) {
  Writer w;
  w.set("general.architecture", Value::str("olmoe"));
  w.set("a.u32", Value::u32(7));
  w.set("a.strs", Value::str_array({"x", "yy"}));
  w.set("a.nested", Value::array(ValueType::ARRAY, {Value::i32_array({1, 2})}));
  const std::vector<uint8_t> data(64 * 34, 1);
  w.add_tensor("t0", TensorType::F32, {4, 2}, data.data(), 32);
  w.add_tensor("t1", TensorType::Q8_0, {64, 2}, data.data(), 4 * 34);
  w.add_tensor("t2", TensorType::I8, {5}, data.data(), 5);
  std::vector<uint8_t> bytes = w.to_bytes();
  const File f = File::from_memory(bytes.data(), bytes.size());
  const TensorInfo& last = f.tensors().back();
  *data_end = f.data_offset() + last.offset + last.n_bytes;
  return bytes;
}

TEST(GgufMalformed, EveryTruncationIsRejected) {
  size_t data_end = 0;
  const std::vector<uint8_t> bytes = sample_file(&data_end);
  for (size_t n = 0; n < data_end; ++n) {
    // A copy of exactly n bytes, so ASan would catch any read past the truncated end.
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    EXPECT_THROW(File::from_memory(cut.data(), cut.size()), Error) << "prefix of " << n;
  }
}

TEST(GgufMalformed, ByteCorruptionNeverCrashes) {
  // Every byte of the header and infos set to a few hostile values: each result is either
  // a valid file or a lynx::Error, never a crash (ASan/UBSan builds check the rest).
  size_t data_end = 0;
  const std::vector<uint8_t> bytes = sample_file(&data_end);
  const File clean = File::from_memory(bytes.data(), bytes.size());
  size_t rejected = 0;
  for (size_t i = 0; i < clean.data_offset(); ++i) {
    for (uint8_t x : {uint8_t(0x00), uint8_t(0x01), uint8_t(0x7f), uint8_t(0x80), uint8_t(0xff)}) {
      std::vector<uint8_t> bad = bytes;
      bad[i] = x;
      try {
        const File f = File::from_memory(bad.data(), bad.size());
        for (const auto& t : f.tensors()) {
          ASSERT_LE(f.data_offset() + t.offset + t.n_bytes, bad.size());
        }
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 0u);
}

// ---- open() and getters ------------------------------------------------------------------

TEST(GgufErrors, OpenNamesThePath) {
  try {
    File::open("/nonexistent/x.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.gguf: cannot open"), std::string::npos);
  }
  const std::string dir = std::filesystem::temp_directory_path().string();
  try {
    File::open(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos);
  }
}

class GgufGetters : public ::testing::Test {
 protected:
  void SetUp() override {
    Writer w;
    w.set("i", Value::i32(-5));
    w.set("big", Value::u64(~uint64_t{0}));
    w.set("f", Value::f32(0.25f));
    w.set("b", Value::boolean(true));
    w.set("s", Value::str("hi"));
    w.set("arr", Value::i32_array({1}));
    const std::vector<uint8_t> d(16);
    w.add_tensor("t", TensorType::F32, {4}, d.data(), d.size());
    bytes_ = w.to_bytes();
  }
  File file() const { return File::from_memory(bytes_.data(), bytes_.size(), "g.gguf"); }
  static void expect_msg(const std::function<void()>& fn, const std::string& expected) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  std::vector<uint8_t> bytes_;
};

TEST_F(GgufGetters, MissingKey) {
  const File f = file();
  expect_msg([&] { f.get_int("nope"); }, "g.gguf: missing metadata key 'nope'");
  expect_msg([&] { f.get_float("nope"); }, "missing metadata key 'nope'");
  expect_msg([&] { f.get_bool("nope"); }, "missing metadata key 'nope'");
  expect_msg([&] { f.get_string("nope"); }, "missing metadata key 'nope'");
  expect_msg([&] { f.get_array("nope"); }, "missing metadata key 'nope'");
  expect_msg([&] { f.tensor("nope"); }, "g.gguf: missing tensor 'nope'");
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_FALSE(f.has("nope"));
}

TEST_F(GgufGetters, WrongType) {
  const File f = file();
  expect_msg([&] { f.get_int("s"); }, "g.gguf: metadata key 's': expected an integer, got string");
  expect_msg([&] { f.get_float("s"); }, "metadata key 's': expected a number, got string");
  expect_msg([&] { f.get_bool("i"); }, "metadata key 'i': expected a bool, got i32");
  expect_msg([&] { f.get_string("i"); }, "metadata key 'i': expected a string, got i32");
  expect_msg([&] { f.get_array("b"); }, "metadata key 'b': expected an array, got bool");
  expect_msg([&] { f.get_int("f"); }, "expected an integer, got f32");
  expect_msg([&] { f.get_int("big"); }, "metadata key 'big': value 18446744073709551615");
}

TEST_F(GgufGetters, DefaultsOnlyForAbsentKeys) {
  const File f = file();
  EXPECT_EQ(f.get_int("nope", 42), 42);
  EXPECT_EQ(f.get_float("nope", 1.5), 1.5);
  EXPECT_TRUE(f.get_bool("nope", true));
  EXPECT_EQ(f.get_string("nope", "dflt"), "dflt");
  EXPECT_EQ(f.get_int("i", 42), -5);
  EXPECT_EQ(f.get_float("f", 1.5), 0.25);
  EXPECT_EQ(f.get_float("i", 1.5), -5.0);  // integers widen to float
  EXPECT_TRUE(f.get_bool("b", false));
  EXPECT_EQ(f.get_string("s", "dflt"), "hi");
  expect_msg([&] { f.get_int("s", 1); }, "metadata key 's': expected an integer");
  expect_msg([&] { f.get_string("i", "x"); }, "metadata key 'i': expected a string");
  expect_msg([&] { f.get_bool("s", false); }, "expected a bool");
  expect_msg([&] { f.get_float("s", 0.0); }, "expected a number");
}

}  // namespace
}  // namespace lynx::gguf
