// The expert tier's read backends (src/model/expert_reader.h): through io_uring the tier
// computes the fully loaded model's logits bit for bit at every pool size, with and without
// the read-ahead, at queue depths down to one read in flight, on O_DIRECT files and on tmpfs
// (buffered reads); a read error fails only that step, with either backend; a truncated file
// is a clear error; and where io_uring cannot be set up (a seccomp filter's ENOSYS, injected
// here) the tier reads with threads and says so on stderr.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "../scratch.h"
#include "lynx/error.h"
#include "model/expert_tier.h"
#include "tier_test_util.h"

namespace lynx {
namespace {

using namespace tier_test;

const bool kUringBuilt = expert_uring_built();

LoadOptions uring(LoadOptions o, int queue_depth = 16) {
  o.expert_io = ExpertIo::kUring;
  o.expert_queue_depth = queue_depth;
  return o;
}

TEST(ExpertIo, UringLogitsBitIdentical) {
  if (!kUringBuilt) GTEST_SKIP() << "built without liburing";
  const auto fixtures = moe_fixtures();
  ASSERT_GE(fixtures.size(), 8u);
  for (const MoeFixture& fx : fixtures) {
    SCOPED_TRACE(fx.name);
    const auto full = Model::load(fx.file, resident());
    const std::vector<float> want = run(*full, fx.tokens, false);
    const int all = full->config().n_expert * full->config().n_layer;
    for (const int slots : {1, 3, all}) {
      for (const int prefetch : {0, 2}) {
        // Queue depth 1: one matrix in flight, an expert's three read one after the other.
        for (const int depth : {1, 16}) {
          SCOPED_TRACE("slots " + std::to_string(slots) + " prefetch " + std::to_string(prefetch) +
                       " depth " + std::to_string(depth));
          LoadOptions o = uring(tier_of(*full, slots), depth);
          o.expert_prefetch = prefetch;
          const auto m = Model::load(fx.file, o);
          ASSERT_NE(m->expert_tier(), nullptr);
          ASSERT_EQ(m->expert_tier()->io_kind(), ExpertIo::kUring);
          EXPECT_TRUE(same_bits(run(*m, fx.tokens, false), want));
          const ExpertTierStats s = m->expert_tier()->stats();
          EXPECT_GT(s.misses, 0u);
          EXPECT_GT(s.bytes_read, 0u);
          EXPECT_EQ(s.read_errors, 0u);
          if (slots == 1) {
            EXPECT_GT(s.evictions, 0u);
          }
        }
      }
    }
  }
}

// The file on tmpfs (no O_DIRECT there): buffered reads, the same bits, through both backends.
TEST(ExpertIo, BufferedReadsOnTmpfs) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const MoeFixture fx = moe_fixtures().front();
  const std::string copy = "/dev/shm/lynx-expert-io-" + std::to_string(::getpid()) + ".gguf";
  std::filesystem::copy_file(fx.file, copy, std::filesystem::copy_options::overwrite_existing);
  const auto full = Model::load(fx.file, resident());
  const std::vector<float> want = run(*full, fx.tokens, false);
  for (const bool u : {false, true}) {
    if (u && !kUringBuilt) continue;
    SCOPED_TRACE(u ? "uring" : "threads");
    LoadOptions o = tier_of(*full, 2);
    if (u) o = uring(o, 4);
    const auto m = Model::load(copy, o);
    EXPECT_TRUE(same_bits(run(*m, fx.tokens, false), want));
    EXPECT_GT(m->expert_tier()->stats().misses, 0u);
  }
  std::filesystem::remove(copy);
}

class ExpertIoBackends : public testing::TestWithParam<ExpertIo> {
 protected:
  void SetUp() override {
    if (GetParam() == ExpertIo::kUring && !kUringBuilt) GTEST_SKIP() << "built without liburing";
  }
  LoadOptions with_backend(LoadOptions o) const {
    o.expert_io = GetParam();
    return o;
  }
};

// Reads that fail (EIO injected into their results, slowly: the step fails on the first
// while the others are still being read, and those fail after the step has gone) fail the
// step with an error naming the tier, the expert and the errno's message; no slot keeps a
// failed expert, and once reads work again the model computes the loaded model's logits.
TEST_P(ExpertIoBackends, FailedReadsFailTheStepOnly) {
  const MoeFixture fx = moe_fixtures().front();
  const auto full = Model::load(fx.file, resident());
  const std::vector<float> want = run(*full, fx.tokens, false);
  LoadOptions o = with_backend(tier_of(*full, 2));
  std::atomic<bool> fail{false};
  std::atomic<int> seen{0};
  o.expert_read_result = [&](uint64_t, size_t, int64_t res) -> int64_t {
    ++seen;
    if (!fail) return res;
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    return -EIO;
  };
  const auto m = Model::load(fx.file, o);
  ASSERT_EQ(m->expert_tier()->io_kind(), GetParam());
  fail = true;
  try {
    run(*m, fx.tokens, false);
    ADD_FAILURE() << "the step did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert tier: reading expert"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(std::strerror(EIO)), std::string::npos) << e.what();
  }
  EXPECT_GT(m->expert_tier()->stats().read_errors, 0u);
  EXPECT_EQ(m->expert_tier()->stats().resident, 0);
  fail = false;
  EXPECT_TRUE(same_bits(run(*m, fx.tokens, false), want));
  EXPECT_GT(seen.load(), 0);
}

// The file cut under a running model: the reads past its new end fail with a message that
// says so.
TEST_P(ExpertIoBackends, TruncatedFileIsAClearError) {
  const MoeFixture fx = moe_fixtures().front();
  const std::string copy = test::scratch_path("io_truncated.gguf");
  std::filesystem::copy_file(fx.file, copy, std::filesystem::copy_options::overwrite_existing);
  const auto full = Model::load(copy, resident());
  const auto m = Model::load(copy, with_backend(tier_of(*full, 1)));
  const gguf::File& f = m->file();
  uint64_t cut = 0, beyond = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const uint64_t end = f.data_offset() + t.offset + t.n_bytes;
    if (t.name.find("_exps.weight") != std::string::npos) {
      cut = std::max(cut, end - t.n_bytes / 2);
    } else if (t.name == "token_embd.weight") {
      beyond = std::max(beyond, end);
    }
  }
  if (beyond > cut) GTEST_SKIP() << "token_embd lies after the experts in this file";
  std::filesystem::resize_file(copy, cut);
  try {
    run(*m, fx.tokens, false);
    ADD_FAILURE() << "the step did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

// Two contexts stepping at once through a pool smaller than one step's experts.
TEST_P(ExpertIoBackends, ContextsShareThePool) {
  const MoeFixture fx = moe_fixtures().front();
  const auto full = Model::load(fx.file, resident());
  const std::vector<float> want = run(*full, fx.tokens, false);
  const auto m = Model::load(fx.file, with_backend(tier_of(*full, 2)));
  std::vector<float> got[2];
  std::thread t0([&] { got[0] = run(*m, fx.tokens, false); });
  std::thread t1([&] { got[1] = run(*m, fx.tokens, false); });
  t0.join();
  t1.join();
  EXPECT_TRUE(same_bits(got[0], want));
  EXPECT_TRUE(same_bits(got[1], want));
}

INSTANTIATE_TEST_SUITE_P(Backends, ExpertIoBackends,
                         testing::Values(ExpertIo::kThreads, ExpertIo::kUring),
                         [](const testing::TestParamInfo<ExpertIo>& i) {
                           return std::string(i.param == ExpertIo::kUring ? "uring" : "threads");
                         });

// io_uring refused (ENOSYS, as a seccomp filter answers): the tier reads with threads, says
// why on stderr and in its summary, and computes the same bits.
TEST(ExpertIo, UringUnavailableFallsBackToThreads) {
  const MoeFixture fx = moe_fixtures().front();
  const auto full = Model::load(fx.file, resident());
  LoadOptions o = uring(tier_of(*full, 3));
  o.expert_uring_init_error = ENOSYS;
  testing::internal::CaptureStderr();
  const auto m = Model::load(fx.file, o);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_NE(m->expert_tier(), nullptr);
  EXPECT_EQ(m->expert_tier()->io_kind(), ExpertIo::kThreads);
  EXPECT_NE(err.find("expert tier: io_uring unavailable"), std::string::npos) << err;
  EXPECT_NE(err.find("reading with 4 threads"), std::string::npos) << err;
  if (kUringBuilt) {
    EXPECT_NE(err.find(std::string("io_uring_queue_init: ") + std::strerror(ENOSYS)),
              std::string::npos)
        << err;
  }
  EXPECT_EQ(m->expert_tier()->io_fallback(), err.substr(0, err.find('\n')));
  EXPECT_NE(m->expert_tier_summary().find("io_uring unavailable"), std::string::npos)
      << m->expert_tier_summary();
  EXPECT_TRUE(same_bits(run(*m, fx.tokens, false), run(*full, fx.tokens, false)));
  // Asked for threads: no line.
  testing::internal::CaptureStderr();
  const auto t = Model::load(fx.file, tier_of(*full, 3));
  EXPECT_EQ(testing::internal::GetCapturedStderr().find("io_uring"), std::string::npos);
  EXPECT_TRUE(t->expert_tier()->io_fallback().empty());
  if (kUringBuilt) {
    // And io_uring that works: no line either, and the summary names it.
    testing::internal::CaptureStderr();
    const auto u = Model::load(fx.file, uring(tier_of(*full, 3)));
    EXPECT_EQ(testing::internal::GetCapturedStderr().find("unavailable"), std::string::npos);
    EXPECT_NE(u->expert_tier_summary().find("reads: io_uring, queue depth 16"), std::string::npos)
        << u->expert_tier_summary();
  }
}

}  // namespace
}  // namespace lynx
