// Files with the block types beyond F32/F16/BF16/Q8_0/Q4_0 (K-quants, IQ4, MXFP4, legacy):
// a tensor whose row does not fit the type's block, or whose data the file does not hold, is
// rejected at load naming the tensor; an unknown type id is named by its number.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "lynx/error.h"
#include "lynx/gguf.h"

namespace lynx::gguf {
namespace {

// A GGUF v3 file with no metadata and one 2D tensor "blk.0.ffn_down.weight" of the given
// type id and shape, followed by `data_bytes` bytes of data.
std::vector<uint8_t> one_tensor_file(uint32_t type, int64_t ne0, int64_t ne1, size_t data_bytes) {
  std::vector<uint8_t> b;
  auto put = [&](const void* p, size_t n) {
    b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  auto u32 = [&](uint32_t v) { put(&v, 4); };
  auto u64 = [&](uint64_t v) { put(&v, 8); };
  u32(kMagic);
  u32(3);
  u64(1);  // tensors
  u64(0);  // kv
  const std::string name = "blk.0.ffn_down.weight";
  u64(name.size());
  put(name.data(), name.size());
  u32(2);
  u64(uint64_t(ne0));
  u64(uint64_t(ne1));
  u32(type);
  u64(0);  // offset
  b.resize((b.size() + 31) / 32 * 32, 0);
  b.resize(b.size() + data_bytes, 0x11);
  return b;
}

std::string load_error(const std::vector<uint8_t>& bytes) {
  try {
    File::from_memory(bytes.data(), bytes.size(), "t.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const TensorType kTypes[] = {TensorType::Q4_1,   TensorType::Q5_0, TensorType::Q5_1,
                             TensorType::Q2_K,   TensorType::Q3_K, TensorType::Q4_K,
                             TensorType::Q5_K,   TensorType::Q6_K, TensorType::IQ4_NL,
                             TensorType::IQ4_XS, TensorType::MXFP4};

TEST(GgufTypes, WellFormedTensorsOfEveryTypeLoad) {
  for (TensorType t : kTypes) {
    int64_t be = 0, bb = 0;
    ASSERT_TRUE(tensor_type_info(t, &be, &bb));
    const auto bytes = one_tensor_file(uint32_t(t), 2 * be, 3, size_t(6 * bb));
    const File f = File::from_memory(bytes.data(), bytes.size());
    EXPECT_EQ(f.tensors()[0].type, t);
    EXPECT_EQ(f.tensors()[0].n_bytes, size_t(6 * bb)) << tensor_type_name(t);
  }
}

TEST(GgufTypes, RowNotAMultipleOfTheBlockNamesTheTensor) {
  for (TensorType t : kTypes) {
    int64_t be = 0, bb = 0;
    ASSERT_TRUE(tensor_type_info(t, &be, &bb));
    const std::string e = load_error(one_tensor_file(uint32_t(t), be + 16, 2, size_t(8 * bb)));
    EXPECT_NE(e.find("blk.0.ffn_down.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("not a multiple"), std::string::npos) << e;
    EXPECT_NE(e.find(tensor_type_name(t)), std::string::npos) << e;
  }
}

TEST(GgufTypes, TruncatedDataNamesTheTensor) {
  for (TensorType t : kTypes) {
    int64_t be = 0, bb = 0;
    ASSERT_TRUE(tensor_type_info(t, &be, &bb));
    // 4 rows of one block need 4 blocks; the file holds 3 and a half.
    const std::string e = load_error(one_tensor_file(uint32_t(t), be, 4, size_t(3 * bb + bb / 2)));
    EXPECT_NE(e.find("blk.0.ffn_down.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("past the end"), std::string::npos) << e;
  }
}

TEST(GgufTypes, UnknownTypeIdIsNamed) {
  for (uint32_t id : {4u, 5u, 31u, 36u, 40u, 1000u}) {
    const std::string e = load_error(one_tensor_file(id, 32, 1, 64));
    EXPECT_NE(e.find("unknown tensor type " + std::to_string(id)), std::string::npos) << e;
    EXPECT_NE(e.find("blk.0.ffn_down.weight"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace lynx::gguf
