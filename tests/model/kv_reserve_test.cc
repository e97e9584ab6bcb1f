// The KV cache reserves the context limit's rows and backs only the pages written (KvBuffer):
// a sequence that grows through several capacities keeps every logit of a context whose
// limit it never nears, a context limit of millions of positions costs no memory until rows
// are written, the cache's counted bytes follow the rows the sequence may have written (not
// the reservation), and where the address space is refused the cache falls back to buffers
// of its capacity that are copied as they grow.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx {
namespace {

using gguf::TensorType;

const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LYNX_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LYNX_SANITIZED 1
#endif
#endif

struct Outcome {
  std::vector<float> logits;  // every evaluated step's last logits, in order
  size_t cache_bytes = 0;
  int32_t len = 0;
};

// Two sequences: a prefill of 40 tokens, then chunks of 37 and one-token steps that cross
// the capacities 64, 128 and 256; the second sequence is a copy of the first
// (copy_sequence, whose capacity is its length), then grows past 600 by itself. Token ids
// from a fixed formula.
Outcome run(const Model& m, int n_ctx, TensorType kv_type) {
  ContextOptions co;
  co.n_threads = 2;
  co.n_ctx = n_ctx;
  co.exact_activations = true;
  co.cache_type_k = co.cache_type_v = kv_type;
  Context ctx(m, co);
  const int V = m.config().n_vocab;
  const auto tok = [V](int i) { return int32_t((i * 7919 + 13) % V); };
  Outcome r;
  const int32_t s = ctx.new_sequence();
  int32_t pos = 0;
  const auto step = [&](int32_t seq, int n) {
    std::vector<BatchToken> b;
    for (int i = 0; i < n; ++i) {
      b.push_back({tok(pos + i + seq * 1000), seq, pos + i, kTokenPrefill, i + 1 == n});
    }
    ctx.eval(b);
    const auto l = ctx.logits(0);
    r.logits.insert(r.logits.end(), l.begin(), l.end());
    pos += n;
  };
  step(s, 40);
  for (int i = 0; i < 6; ++i) step(s, 37);
  while (pos < 300) step(s, 1);
  const int32_t c = ctx.copy_sequence(s, 300);
  for (int i = 0; i < 30; ++i) step(c, 1);
  step(c, 100);
  r.cache_bytes = ctx.kv_cache_bytes();
  r.len = ctx.sequence_length(c);
  return r;
}

// A field of /proc/self/status in KiB ("VmRSS:" resident memory, "VmSize:" address space).
size_t status_kib(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == field) {
      size_t kib = 0;
      f >> kib;
      return kib;
    }
    f.ignore(1 << 16, '\n');
  }
  return 0;
}

class KvReserveGrowth : public ::testing::TestWithParam<const char*> {};

TEST_P(KvReserveGrowth, GrowingThroughCapacitiesKeepsTheLogits) {
  auto m = Model::load(kFixtures + GetParam());
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    // 512: the capacities double 64 -> 512 as below a limit of 1M positions, whose buffers
    // reserve 2,000x the address space.
    const Outcome small = run(*m, 1024, t), large = run(*m, 1 << 20, t);
    ASSERT_EQ(small.logits.size(), large.logits.size());
    EXPECT_EQ(small.logits, large.logits) << gguf::tensor_type_name(t);
    EXPECT_EQ(small.len, 430);
    EXPECT_EQ(small.cache_bytes, large.cache_bytes) << gguf::tensor_type_name(t);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvReserveGrowth,
                         ::testing::Values("llama-moe-f32.gguf", "gpt-oss/tiny-gpt-oss.gguf",
                                           "mla/tiny-deepseek-v2.gguf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

// 64 sequences at a limit of 4M positions reserve hundreds of GB of address space; the
// memory they take is that of the rows written (with 4 KiB pages under 4 MiB of rows).
TEST(KvReserve, ReservationIsNotBacked) {
  auto m = Model::load(kFixtures + "llama-moe-f32.gguf");
  ContextOptions co;
  co.n_threads = 2;
  co.n_ctx = 1 << 22;
  Context ctx(*m, co);
  const size_t before = status_kib("VmRSS:");
  for (int s = 0; s < 64; ++s) {
    const int32_t seq = ctx.new_sequence();
    std::vector<BatchToken> b;
    for (int i = 0; i < 8; ++i) b.push_back({int32_t(i + 1), seq, i, kTokenPrefill, i == 7});
    ctx.eval(b);
  }
  const size_t grown_kib = status_kib("VmRSS:") - before;
  const ModelConfig& c = m->config();
  const size_t reserved = size_t(co.n_ctx) * c.n_layer * 2 * c.n_head_kv * c.head_dim * 4 * 64;
  std::printf("64 sequences: %zu KiB more resident, %zu GiB reserved\n", grown_kib, reserved >> 30);
  EXPECT_GT(reserved, size_t{100} << 30);
  EXPECT_LT(grown_kib, size_t{64} << 10);
  // Counted bytes: 64 rows (the first capacity) per sequence and layer.
  EXPECT_EQ(ctx.kv_cache_bytes(), size_t(64) * c.n_layer * 2 * c.n_head_kv * c.head_dim * 4 * 64);
}

// Where the address space is limited (RLIMIT_AS), the context limit's reservation is refused
// and each buffer holds its capacity, copied to a larger one as the sequence grows: the same
// logits. In a child process, whose limit does not reach the rest of the tests.
TEST(KvReserve, LimitedAddressSpaceFallsBackToGrowingBuffers) {
#if defined(LYNX_SANITIZED)
  GTEST_SKIP() << "the sanitizers reserve terabytes of address space";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto m = Model::load(kFixtures + "llama-moe-f32.gguf");
  const Outcome expect = run(*m, 1024, TensorType::F16);
  const auto limited = [&] {
    // Room for the model, the threads and small buffers, not for 2^24 positions' rows.
    rlimit lim{};
    getrlimit(RLIMIT_AS, &lim);
    lim.rlim_cur = (status_kib("VmSize:") << 10) + (size_t{512} << 20);
    if (setrlimit(RLIMIT_AS, &lim) != 0) std::_Exit(3);
    const Outcome got = run(*m, 1 << 24, TensorType::F16);
    std::_Exit(got.logits == expect.logits && got.cache_bytes == expect.cache_bytes ? 0 : 1);
  };
  EXPECT_EXIT(limited(), ::testing::ExitedWithCode(0), "");
#endif
}

}  // namespace
}  // namespace lynx
