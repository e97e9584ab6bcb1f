// Files written by other, independent writers — llama.cpp's Python gguf writer (the vocab
// files) and lynx-moe's NumPy reference writer (tests/reference/fixtures) — are read and then
// re-encoded with our Writer: the bytes must come out identical. This checks the reader and
// the writer against the format as others implement it, not only against each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "lynx/gguf.h"

namespace lynx::gguf {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> reencode(const File& f) {
  Writer w;
  for (const KeyValue& kv : f.metadata()) w.set(kv.key, kv.value);  // file order
  for (const TensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.n_bytes);
  }
  return w.to_bytes();
}

std::vector<std::string> gguf_files(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".gguf") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GgufReencode, LlamaCppVocabFiles) {
  const auto files = gguf_files(std::string(LYNX_SHARED_DIR) + "/data/vocab");
  if (files.empty()) GTEST_SKIP() << "no vocab files";
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    const std::vector<uint8_t> orig = slurp(path);
    const File f = File::open(path);
    const std::vector<uint8_t> ours = reencode(f);
    // With no tensors llama.cpp's writer stops right after the metadata, while ours pads
    // the (empty) data section to the alignment: equal up to zero padding.
    ASSERT_GE(ours.size(), orig.size());
    ASSERT_LT(ours.size() - orig.size(), size_t(f.alignment()));
    EXPECT_TRUE(std::equal(orig.begin(), orig.end(), ours.begin()));
    EXPECT_TRUE(std::all_of(ours.begin() + orig.size(), ours.end(), [](uint8_t b) { return !b; }));
  }
}

TEST(GgufReencode, NumpyReferenceFixtures) {
  const auto files = gguf_files(std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures");
  if (files.empty()) GTEST_SKIP() << "no reference fixtures";
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    const File f = File::open(path);
    EXPECT_FALSE(f.tensors().empty());
    EXPECT_EQ(reencode(f), slurp(path));
  }
}

}  // namespace
}  // namespace lynx::gguf
