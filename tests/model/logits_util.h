// Comparing logits with the goldens of tests/reference: shared by the golden suites.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "lynx/context.h"
#include "lynx/model.h"

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

// The comma-separated token ids of a fixture's tokens.txt (its first line).
inline std::vector<int32_t> read_tokens(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  std::vector<int32_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  EXPECT_FALSE(out.empty()) << path;
  return out;
}

// Largest |a - b| relative to the golden row's largest magnitude.
inline double rel_err(std::span<const float> a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / den;
}

// F32 activations (the reference's arithmetic), a 64-token context, 2 threads.
inline ContextOptions exact_ctx() {
  ContextOptions o;
  o.n_ctx = 64;
  o.n_threads = 2;
  o.exact_activations = true;
  return o;
}

// Every position's logits of one prefill batch of toks in a fresh sequence ([n x V]).
inline std::vector<float> prefill_logits(const Model& m, const std::vector<int32_t>& toks,
                                         const ContextOptions& o = exact_ctx()) {
  Context ctx(m, o);
  const int32_t s = ctx.new_sequence();
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < toks.size(); ++i) {
    batch.push_back({toks[i], s, int32_t(i), kTokenPrefill, true});
  }
  ctx.eval(batch);
  std::vector<float> out;
  for (size_t i = 0; i < toks.size(); ++i) {
    auto l = ctx.logits(int(i));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

}  // namespace lynx::testing_util
