// Repacking at load (LoadOptions::repack): which matrices the loader interleaves, that the
// file on disk is left alone, and that a repacked Q8_0/Q4_0 model computes the same logits,
// bit for bit, as the model in the file's layout, on both activation paths, every SIMD
// target, one or several threads, prefill and decode. And the 16-row panels of F32/F16/BF16
// matrices (LoadOptions::repack_float): which matrices, and logits that agree with the
// file's layout to float rounding and do not change by a bit with the thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../simd_target.h"
#include "kernels/kernels.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "model/weights.h"

namespace lynx {
namespace {

using kernels::WeightLayout;

const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

// The Q8_0/Q4_0 fixtures: every architecture, MoE and dense, tied output (llama-dense) and not.
const char* const kIntFixtures[] = {
    "olmoe-q4_0",    "olmoe-q8_0",     "qwen2moe-q4_0",  "qwen2moe-q8_0",    "qwen3moe-q4_0",
    "qwen3moe-q8_0", "llama-moe-q4_0", "llama-moe-q8_0", "llama-dense-q4_0", "llama-dense-q8_0"};

// The F32/F16/BF16 fixtures (LoadOptions::repack_float).
const char* const kFloatFixtures[] = {
    "olmoe-f16",    "olmoe-bf16",    "olmoe-f32",      "qwen2moe-f16",    "qwen3moe-bf16",
    "qwen3moe-f32", "llama-moe-f16", "llama-moe-bf16", "llama-dense-f32", "llama-dense-f16"};

std::unique_ptr<Model> load(const std::string& name, bool repack, bool repack_float = true) {
  LoadOptions o;
  o.repack = repack;
  o.repack_float = repack_float;
  return Model::load(kFixtures + name + ".gguf", o);
}

// Logits of a prefill of `n` tokens, then of 3 decode steps, concatenated.
std::vector<float> run(const Model& m, int threads, bool exact) {
  ContextOptions co;
  co.n_threads = threads;
  co.n_ctx = 64;
  co.exact_activations = exact;
  Context ctx(m, co);
  const int32_t seq = ctx.new_sequence();
  const int n_vocab = m.config().n_vocab;
  std::vector<BatchToken> batch;
  for (int i = 0; i < 9; ++i) {
    batch.push_back({int32_t((i * 37 + 5) % n_vocab), seq, int32_t(i), kTokenPrefill, true});
  }
  ctx.eval(batch);
  std::vector<float> out;
  for (int i = 0; i < ctx.n_logits(); ++i)
    out.insert(out.end(), ctx.logits(i).begin(), ctx.logits(i).end());
  for (int p = 9; p < 12; ++p) {
    BatchToken t{int32_t((p * 11) % n_vocab), seq, int32_t(p), kTokenDecode, true};
    ctx.eval({&t, 1});
    out.insert(out.end(), ctx.logits(0).begin(), ctx.logits(0).end());
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ModelRepack, InterleavesMatmulWeightsOnlyAndLeavesTheFileAlone) {
  for (const char* name : kIntFixtures) {
    SCOPED_TRACE(name);
    auto packed = load(name, true);
    auto plain = load(name, false);
    const LayerWeights& lp = packed->layer(0);
    const LayerWeights& lr = plain->layer(0);
    EXPECT_EQ(lp.wq.layout, WeightLayout::kInterleaved16);
    EXPECT_EQ(lp.wo.layout, WeightLayout::kInterleaved16);
    EXPECT_EQ(lr.wq.layout, WeightLayout::kRows);
    // An embedding tied to the output is packed with it (the output's product reads all of
    // it every step); alone it is only looked up by rows and stays in the file's layout.
    const bool tied = packed->config().tied_output;
    EXPECT_EQ(packed->token_embd().layout,
              tied ? WeightLayout::kInterleaved16 : WeightLayout::kRows);
    EXPECT_EQ(packed->output().layout, WeightLayout::kInterleaved16);
    if (tied) EXPECT_EQ(packed->output().data, packed->token_embd().data);
    if (packed->config().is_moe()) {
      EXPECT_EQ(lp.down_exps.layout, WeightLayout::kInterleaved16);
      EXPECT_NE(std::memcmp(lp.down_exps.data, lr.down_exps.data, lp.down_exps.mat_bytes), 0);
    }
    // Same size, other bytes; the row lookups of token_embd see the file's rows.
    EXPECT_NE(std::memcmp(lp.wq.data, lr.wq.data, lp.wq.mat_bytes), 0);
    const Weight& ep = packed->token_embd();
    std::vector<uint8_t> erow(ep.row_bytes);
    for (int64_t r = 0; r < ep.rows; ++r) {
      kernels::read_row(ep.type, ep.layout, ep.data, ep.cols, r, erow.data());
      ASSERT_EQ(std::memcmp(erow.data(), plain->token_embd().data + r * ep.row_bytes, erow.size()),
                0)
          << r;
    }
    // The repacked copy is the model's own; the file (the model's mapping of it, and a fresh
    // map) still has the rows.
    const gguf::TensorInfo& q = packed->file().tensor("blk.0.attn_q.weight");
    EXPECT_NE(q.data, lp.wq.data);
    EXPECT_EQ(std::memcmp(q.data, lr.wq.data, lr.wq.mat_bytes), 0);
    const gguf::File f = gguf::File::open(kFixtures + name + ".gguf");
    EXPECT_EQ(std::memcmp(f.tensor("blk.0.attn_q.weight").data, lr.wq.data, lr.wq.mat_bytes), 0);
    std::vector<uint8_t> row(lp.wq.row_bytes);
    for (int64_t r = 0; r < lp.wq.rows; ++r) {
      kernels::read_row(lp.wq.type, lp.wq.layout, lp.wq.data, lp.wq.cols, r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), lr.wq.data + r * lr.wq.row_bytes, row.size()), 0) << r;
    }
  }
}

TEST(ModelRepack, LogitsBitIdenticalWithAndWithoutRepack) {
  for (const char* name : kIntFixtures) {
    auto packed = load(name, true);
    auto plain = load(name, false);
    for (bool exact : {false, true}) {
      for (int threads : {1, 3}) {
        SCOPED_TRACE(std::string(name) + (exact ? " exact" : " int") + " threads " +
                     std::to_string(threads));
        EXPECT_TRUE(same_bits(run(*packed, threads, exact), run(*plain, threads, exact)));
      }
    }
  }
}

// The integer kernels differ per instruction set, and so does the lane slice of a 16-row
// group each one reads.
TEST(ModelRepack, IntegerPathBitIdenticalOnEverySimdTarget) {
  for (int64_t target : kernels::available_simd_targets()) {
    test::force_simd_target(target);
    for (const char* name : {"olmoe-q4_0", "qwen2moe-q8_0"}) {
      SCOPED_TRACE(std::string(name) + " on " + kernels::simd_target_name(target));
      auto packed = load(name, true);
      auto plain = load(name, false);
      EXPECT_TRUE(same_bits(run(*packed, 2, false), run(*plain, 2, false)));
    }
  }
  test::force_simd_target(0);
}

TEST(ModelPanels, PanelsMatmulWeightsOnly) {
  for (const char* name : kFloatFixtures) {
    SCOPED_TRACE(name);
    auto packed = load(name, true);
    auto plain = load(name, true, false);
    const LayerWeights& lp = packed->layer(0);
    const LayerWeights& lr = plain->layer(0);
    EXPECT_EQ(lp.wq.layout, WeightLayout::kPanel16);
    EXPECT_EQ(lr.wq.layout, WeightLayout::kRows);
    const bool tied = packed->config().tied_output;
    EXPECT_EQ(packed->token_embd().layout, tied ? WeightLayout::kPanel16 : WeightLayout::kRows);
    EXPECT_EQ(packed->output().layout, WeightLayout::kPanel16);
    if (packed->config().is_moe()) {
      EXPECT_EQ(lp.gate_exps.layout, WeightLayout::kPanel16);
      // Routers of fewer than 16 experts (or not a multiple) stay rows.
      EXPECT_EQ(lp.router.layout,
                lp.router.rows % 16 == 0 ? WeightLayout::kPanel16 : WeightLayout::kRows);
    }
    std::vector<uint8_t> row(lp.wo.row_bytes);
    for (int64_t r = 0; r < lp.wo.rows; ++r) {
      kernels::read_row(lp.wo.type, lp.wo.layout, lp.wo.data, lp.wo.cols, r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), lr.wo.data + r * lr.wo.row_bytes, row.size()), 0) << r;
    }
  }
}

// Panels change the summation order only: logits within float rounding of the file's
// layout's, the same bits for every thread count. (Across instruction sets the panel matmuls
// agree bit for bit, tests/kernels/matmul_panel_test.cc, but the model's other kernels, dot
// products on rows among them, do not.)
TEST(ModelPanels, LogitsMatchTheRowsLayoutAndDoNotDependOnThreads) {
  for (const char* name : kFloatFixtures) {
    SCOPED_TRACE(name);
    auto packed = load(name, true);
    auto plain = load(name, true, false);
    const std::vector<float> a = run(*packed, 2, false), b = run(*plain, 2, false);
    ASSERT_EQ(a.size(), b.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      norm += double(b[i]) * b[i];
    }
    EXPECT_GT(norm, 0.0);
    EXPECT_LT(err / norm, 1e-10) << "NMSE";
    EXPECT_TRUE(same_bits(run(*packed, 1, false), a));
    EXPECT_TRUE(same_bits(run(*packed, 3, false), a));
  }
}

}  // namespace
}  // namespace lynx
