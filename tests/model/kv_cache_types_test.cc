// KV cache types (ContextOptions::cache_type_k / _v): F32 chosen explicitly is the default's
// arithmetic to the bit; F16 and Q8_0 caches stay within a stated normalized MSE of the F32
// logits on the model fixtures (plain GQA, QK-norm, sliding windows with sinks, MLA), over a
// prefill step and decode steps; the cache's bytes follow the type.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/error.h"
#include "lynx/model.h"

namespace lynx {
namespace {

using gguf::TensorType;
using testing_util::nmse;

const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

constexpr int kPrefill = 12, kDecode = 20;

struct Result {
  std::vector<float> logits;  // every position's, [kPrefill + kDecode][n_vocab]
  size_t cache_bytes = 0;     // kv_cache_bytes() at the end
};

// A prefill step of kPrefill tokens (the blocked kernel), then kDecode one-token steps. F32
// activations: on the integer path a small change of a row can move the rounding of its Q8_0
// activation blocks by a step, which would blur the cache's own error.
Result run(const Model& m, TensorType k, TensorType v) {
  ContextOptions co;
  co.n_threads = 2;
  co.n_ctx = 64;
  co.exact_activations = true;
  co.cache_type_k = k;
  co.cache_type_v = v;
  Context ctx(m, co);
  const int32_t s = ctx.new_sequence();
  const int V = m.config().n_vocab;
  auto tok = [&](int i) { return int32_t((i * 11 + 3) % V); };
  Result r;
  std::vector<BatchToken> batch;
  for (int i = 0; i < kPrefill; ++i) batch.push_back({tok(i), s, i, kTokenPrefill, true});
  ctx.eval(batch);
  for (int i = 0; i < kPrefill; ++i) {
    const auto l = ctx.logits(i);
    r.logits.insert(r.logits.end(), l.begin(), l.end());
  }
  for (int i = kPrefill; i < kPrefill + kDecode; ++i) {
    const BatchToken t{tok(i), s, i, kTokenDecode, true};
    ctx.eval({&t, 1});
    const auto l = ctx.logits(0);
    r.logits.insert(r.logits.end(), l.begin(), l.end());
  }
  r.cache_bytes = ctx.kv_cache_bytes();
  return r;
}

struct Fixture {
  const char* file;
  // Stated bounds of the NMSE against the F32 cache's logits (the test prints the measured
  // values, 3-10x below them; docs/benchmarks.md, "Quantized KV cache"). Q8_0 keys cost most
  // where QK-norm makes the scores large (qwen3moe: ~1e-2 on this random tiny model).
  double f16, q8_0;
};

class KvCacheTypes : public ::testing::TestWithParam<Fixture> {};

TEST_P(KvCacheTypes, LogitsCloseToF32) {
  const Fixture& f = GetParam();
  auto m = Model::load(kFixtures + f.file);
  const Result def = run(*m, TensorType::F32, TensorType::F32);
  {
    ContextOptions co;  // the default options, not naming a cache type
    EXPECT_EQ(co.cache_type_k, TensorType::F32);
    EXPECT_EQ(co.cache_type_v, TensorType::F32);
  }
  const Result f16 = run(*m, TensorType::F16, TensorType::F16);
  const Result q8 = run(*m, TensorType::Q8_0, TensorType::Q8_0);
  const Result mixed = run(*m, TensorType::Q8_0, TensorType::F16);
  const double e16 = nmse(f16.logits, def.logits), e8 = nmse(q8.logits, def.logits);
  const double emix = nmse(mixed.logits, def.logits);
  std::printf("%s: NMSE f16 %.3g, q8_0 %.3g, q8_0/f16 %.3g\n", f.file, e16, e8, emix);
  EXPECT_LT(e16, f.f16);
  EXPECT_LT(e8, f.q8_0);
  EXPECT_LT(emix, f.q8_0);
  EXPECT_GT(e8, 0.0);  // the cache type reached the arithmetic

  // Bytes: F16 half of F32's; Q8_0 34 bytes per head block of 32 values (a head padded to
  // whole blocks).
  const ModelConfig& c = m->config();
  const int hd = c.mla() ? c.cache_k_dim() : c.head_dim;
  const int heads = c.mla() ? 1 : c.n_head_kv;
  const int kv_parts = c.mla() ? 1 : 2;
  const size_t rows = def.cache_bytes / (size_t(c.n_layer) * kv_parts * heads * hd * 4);
  ASSERT_GT(rows, 0u);
  EXPECT_EQ(def.cache_bytes, rows * c.n_layer * kv_parts * heads * size_t(hd) * 4);
  EXPECT_EQ(f16.cache_bytes * 2, def.cache_bytes);
  EXPECT_EQ(q8.cache_bytes, rows * c.n_layer * kv_parts * heads * size_t((hd + 31) / 32 * 34));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvCacheTypes,
                         ::testing::Values(Fixture{"llama-moe-f32.gguf", 1e-6, 5e-4},
                                           Fixture{"qwen3moe-f32.gguf", 1e-6, 5e-2},
                                           Fixture{"olmoe-q8_0.gguf", 1e-6, 1e-3},
                                           Fixture{"qwen2moe-bf16.gguf", 1e-6, 5e-4},
                                           Fixture{"gpt-oss/tiny-gpt-oss.gguf", 1e-6, 5e-3},
                                           Fixture{"mla/tiny-deepseek-v2.gguf", 1e-6, 3e-4},
                                           Fixture{"mla/tiny-deepseek-v3.gguf", 1e-6, 3e-4}),
                         [](const auto& info) {
                           std::string n = info.param.file;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

TEST(KvCacheTypes, UnknownTypesAreRefused) {
  EXPECT_EQ(kv_cache_type_from_name("Q8_0"), TensorType::Q8_0);
  EXPECT_EQ(kv_cache_type_from_name("f16"), TensorType::F16);
  EXPECT_THROW(kv_cache_type_from_name("q4_0"), Error);
  EXPECT_THROW(kv_cache_type_from_name("bf16"), Error);
  EXPECT_THROW(kv_cache_type_from_name("fp8"), Error);
  auto m = Model::load(kFixtures + "llama-moe-f32.gguf");
  ContextOptions co;
  co.cache_type_v = TensorType::Q4_0;
  EXPECT_THROW(Context(*m, co), Error);
}

}  // namespace
}  // namespace lynx
