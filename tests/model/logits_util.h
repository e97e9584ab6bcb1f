// Comparing logits with the goldens of tests/reference: shared by the golden suites.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace lynx::testing_util {

// Normalized MSE: sum (a-b)^2 / sum b^2 (the plain sum when b is all zeros).
inline double nmse(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? num / den : num;
}

// n F32 values from a golden logits file (a failed expectation when it is short or missing).
inline std::vector<float> read_logits(const std::string& path, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * 4));
  EXPECT_TRUE(f.good()) << path;
  return v;
}

}  // namespace lynx::testing_util
