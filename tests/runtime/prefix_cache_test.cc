// The prefix cache: a copied or reused prefix gives the logits of evaluating the whole prompt
// (bit-identical, every family's cache layout: plain, MLA latent, sliding-window rings), turn
// 2 of a conversation generates what it generates without the cache, running requests share
// a prefix, the bytes bound holds with eviction, and cancelled or failed requests leave
// nothing behind. Copies, truncation and turns over F16 / Q8_0 KV caches too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "feed_util.h"
#include "lynx/context.h"
#include "lynx/error.h"
#include "lynx/scheduler.h"

namespace lynx {
namespace {

const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

std::vector<int32_t> tokens(int n, int salt, int n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = int32_t((i * 7 + salt * 13 + 1) % n_vocab);
  return t;
}

using testing_util::feed;
using testing_util::same_bits;

struct CopyCase {
  const char* file;
  gguf::TensorType cache = gguf::TensorType::F32;  // K and V
};
void PrintTo(const CopyCase& c, std::ostream* os) {
  *os << c.file << " " << gguf::tensor_type_name(c.cache);
}

class CopySequence : public ::testing::TestWithParam<CopyCase> {};

// A prefix copied from another sequence, then the rest of the prompt: the logits of a
// sequence that computed the same prefix itself in the same steps, to the bit (the copy holds
// the same rows), and of the whole prompt in one step when the rest is several tokens. Rows
// made by one- or two-token steps (decode) may differ in the last bits from the same rows
// made by a longer step: some float products take other kernels there (docs/serving.md,
// "Prefix cache").
TEST_P(CopySequence, CopiedPrefixGivesTheSequencesOwnLogits) {
  auto m = Model::load(kFixtures + GetParam().file);
  ContextOptions co;
  co.n_threads = 2;
  co.n_ctx = 96;
  co.cache_type_k = co.cache_type_v = GetParam().cache;
  Context ctx(*m, co);
  const auto p = tokens(40, 1, m->config().n_vocab);
  const int32_t whole = ctx.new_sequence();
  const auto at_once = feed(ctx, whole, p, 0, 40, 40);
  for (int len : {1, 7, 21, 35, 39}) {
    SCOPED_TRACE(len);
    const int32_t own = ctx.new_sequence();
    feed(ctx, own, p, 0, len, 7);
    const auto want = feed(ctx, own, p, len, 40, 40);
    const int32_t src = ctx.new_sequence();
    feed(ctx, src, p, 0, 40, 7);  // the same steps up to len (len is 1 or a multiple of 7)
    const int32_t dst = ctx.copy_sequence(src, len);
    EXPECT_EQ(ctx.sequence_length(dst), len);
    ctx.free_sequence(src);  // the copy owns its rows
    const auto got = feed(ctx, dst, p, len, 40, 40);
    EXPECT_TRUE(same_bits(got, want));
    // Steps of several tokens compute each row as in any other multi-token step.
    if (len + 3 <= 40) {
      EXPECT_TRUE(same_bits(got, at_once));
    }
    ctx.free_sequence(dst);
    ctx.free_sequence(own);
  }
  // Truncated back to len, then the rest again: the logits of the copy (the rows past len are
  // written anew).
  for (int len : {7, 21}) {
    const int32_t src = ctx.new_sequence();
    feed(ctx, src, p, 0, 40, 7);
    const int32_t own = ctx.new_sequence();
    feed(ctx, own, p, 0, len, 7);
    const auto want = feed(ctx, own, p, len, 40, 40);
    ctx.truncate_sequence(src, len);
    EXPECT_TRUE(same_bits(feed(ctx, src, p, len, 40, 40), want)) << "truncated to " << len;
    ctx.free_sequence(src);
    ctx.free_sequence(own);
  }
  EXPECT_THROW(ctx.copy_sequence(whole, 41), Error);
  EXPECT_THROW(ctx.copy_sequence(whole + 100, 1), Error);
}

constexpr auto kF16 = gguf::TensorType::F16, kQ8 = gguf::TensorType::Q8_0;
INSTANTIATE_TEST_SUITE_P(
    Families, CopySequence,
    ::testing::Values(CopyCase{"qwen2moe-f32.gguf"}, CopyCase{"olmoe-q8_0.gguf"},
                      CopyCase{"llama-moe-q4_0.gguf"}, CopyCase{"llama-moe-bf16.gguf"},
                      CopyCase{"mla/tiny-deepseek-v2.gguf"}, CopyCase{"gpt-oss/tiny-gpt-oss.gguf"},
                      CopyCase{"qwen2moe-f32.gguf", kQ8}, CopyCase{"olmoe-q8_0.gguf", kF16},
                      CopyCase{"mla/tiny-deepseek-v2.gguf", kQ8},
                      CopyCase{"gpt-oss/tiny-gpt-oss.gguf", kQ8}));

// gpt-oss's window layers keep a ring: a prefix further back than the ring holds cannot be
// copied (the prefix cache then evaluates the prompt again).
TEST(CopySequenceWindow, RingsThatMovedOnRefuse) {
  auto m = Model::load(kFixtures + "gpt-oss/tiny-gpt-oss.gguf");
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 512;
  Context ctx(*m, co);
  const auto p = tokens(300, 2, m->config().n_vocab);
  const int32_t s = ctx.new_sequence();
  feed(ctx, s, p, 0, 300, 1);  // one token a step: the ring holds the last window + slack
  EXPECT_THROW(ctx.copy_sequence(s, 10), Error);
  EXPECT_NO_THROW(ctx.free_sequence(ctx.copy_sequence(s, 299)));
}

struct Turn {
  std::vector<int32_t> out;
  int32_t cached = -1;
  FinishReason why = FinishReason::kNone;
};

GenerationRequest request(const std::vector<int32_t>& prompt, int n, Turn& t) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.on_token = [&t](int32_t tok) {
    t.out.push_back(tok);
    return true;
  };
  r.on_admit = [&t](int32_t cached) { t.cached = cached; };
  r.on_finish = [&t](FinishReason why) { t.why = why; };
  return r;
}

// A conversation of three turns, each prompt the previous prompt + its answer + new tokens:
// with the cache, each turn reuses everything before its new tokens (the answer's rows came
// from decode steps) and generates exactly what it generates without the cache.
class ConversationTurns : public ::testing::TestWithParam<gguf::TensorType> {};

TEST_P(ConversationTurns, MatchWithoutTheCache) {
  auto m = Model::load(kFixtures + "olmoe-q8_0.gguf");
  const int V = m->config().n_vocab;
  auto run = [&](size_t cache_bytes, std::vector<Turn>& turns) {
    ContextOptions co;
    co.n_threads = 2;
    co.n_ctx = 256;
    co.cache_type_k = co.cache_type_v = GetParam();
    Context ctx(*m, co);
    SchedulerOptions so;
    so.prefix_cache_bytes = cache_bytes;
    so.max_step_tokens = 16;
    Scheduler s(ctx, so);
    std::vector<int32_t> prompt = tokens(30, 3, V);
    for (int i = 0; i < 3; ++i) {
      turns.emplace_back();
      s.submit(request(prompt, 8, turns.back()));
      s.run_until_idle();
      prompt.insert(prompt.end(), turns.back().out.begin(), turns.back().out.end());
      const auto more = tokens(12, 10 + i, V);
      prompt.insert(prompt.end(), more.begin(), more.end());
    }
    return s.prefix_cache_stats();
  };
  std::vector<Turn> plain, cached;
  const PrefixCacheStats off = run(0, plain);
  const PrefixCacheStats on = run(size_t(64) << 20, cached);
  EXPECT_EQ(off.lookups, 0);
  ASSERT_EQ(cached.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(cached[i].out, plain[i].out) << "turn " << i;
    EXPECT_EQ(cached[i].why, FinishReason::kLength);
    EXPECT_EQ(plain[i].cached, 0);
  }
  EXPECT_EQ(cached[0].cached, 0);
  // Turn 2's prompt: 30 + 8 answer + 12 new; the KV cache holds 30 + 7 (the last answer token
  // was never fed back).
  EXPECT_EQ(cached[1].cached, 37);
  EXPECT_EQ(cached[2].cached, 37 + 1 + 12 + 7);
  EXPECT_EQ(on.lookups, 3);
  EXPECT_EQ(on.hits, 2);
  EXPECT_EQ(on.reused_tokens, 37 + 57);
  EXPECT_EQ(on.entries, 1u);  // each turn's entry replaced the one it extended
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, ConversationTurns,
                         ::testing::Values(gguf::TensorType::F32, gguf::TensorType::F16,
                                           gguf::TensorType::Q8_0));

// Requests that share a system prompt while one of them runs: the later one copies the
// running one's rows, and both generate what they generate alone.
TEST(PrefixCache, RunningRequestsShareAPrefix) {
  auto m = Model::load(kFixtures + "qwen2moe-f32.gguf");
  const int V = m->config().n_vocab;
  const auto system = tokens(40, 4, V);
  auto with = [&](int salt) {
    auto p = system;
    const auto q = tokens(5, salt, V);
    p.insert(p.end(), q.begin(), q.end());
    return p;
  };
  auto alone = [&](const std::vector<int32_t>& p) {
    ContextOptions co;
    co.n_threads = 1;
    co.n_ctx = 128;
    Context ctx(*m, co);
    Scheduler s(ctx, {});
    Turn t;
    s.submit(request(p, 10, t));
    s.run_until_idle();
    return t.out;
  };
  ContextOptions co;
  co.n_threads = 2;
  co.n_ctx = 128;
  Context ctx(*m, co);
  SchedulerOptions so;
  so.prefix_cache_bytes = size_t(16) << 20;
  Scheduler s(ctx, so);
  Turn a, b;
  s.submit(request(with(20), 10, a));
  s.step();  // a's prompt is in the cache now, a decodes
  s.submit(request(with(30), 10, b));
  s.run_until_idle();
  EXPECT_EQ(a.cached, 0);
  EXPECT_EQ(b.cached, 40);
  EXPECT_EQ(a.out, alone(with(20)));
  EXPECT_EQ(b.out, alone(with(30)));
}

// Requests sent together with one prompt (the choices of an n > 1 request): the later ones
// wait for the first one's prefill and copy it instead of evaluating the prompt each; the
// request with another prompt behind them is served too.
TEST(PrefixCache, RequestsSentTogetherShareThePrompt) {
  auto m = Model::load(kFixtures + "olmoe-q8_0.gguf");
  const int V = m->config().n_vocab;
  const auto p = tokens(60, 8, V);
  ContextOptions co;
  co.n_threads = 2;
  co.n_ctx = 128;
  Context ctx(*m, co);
  SchedulerOptions so;
  so.prefix_cache_bytes = size_t(16) << 20;
  so.max_step_tokens = 16;  // the prompt takes four steps
  Scheduler s(ctx, so);
  std::vector<Turn> t(4);
  for (int i = 0; i < 3; ++i) s.submit(request(p, 6, t[size_t(i)]));
  s.submit(request(tokens(20, 9, V), 6, t[3]));
  s.run_until_idle();
  EXPECT_EQ(t[0].cached, 0);
  // They wait while the first one's prefill would give them 16 tokens or more than it holds:
  // admitted at 48 of 60 (16 a step), they evaluate the last 12 themselves.
  EXPECT_EQ(t[1].cached, 48);
  EXPECT_EQ(t[2].cached, 48);
  EXPECT_EQ(t[3].cached, 0);
  EXPECT_EQ(s.stats().prefill_tokens, 60 + 12 + 12 + 20);
  for (int i = 1; i < 3; ++i) EXPECT_EQ(t[size_t(i)].out, t[0].out);
  EXPECT_EQ(t[0].why, FinishReason::kLength);
  EXPECT_EQ(t[3].why, FinishReason::kLength);
}

// A bound smaller than two entries: the least recently used goes, the bytes held stay within
// the bound, and the context holds only what the cache holds once every request ended.
TEST(PrefixCache, BoundEvictsTheLeastRecentlyUsed) {
  auto m = Model::load(kFixtures + "qwen2moe-f32.gguf");
  const int V = m->config().n_vocab;
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 128;
  Context ctx(*m, co);
  // One entry of 24 + 3 tokens: measure it with a cache that holds everything.
  size_t one = 0;
  {
    SchedulerOptions so;
    so.prefix_cache_bytes = size_t(1) << 30;
    Scheduler s(ctx, so);
    Turn t;
    s.submit(request(tokens(24, 5, V), 4, t));
    s.run_until_idle();
    one = s.prefix_cache_stats().bytes;
    ASSERT_GT(one, 0u);
    EXPECT_EQ(ctx.kv_cache_bytes(), one);
  }
  EXPECT_EQ(ctx.kv_cache_bytes(), 0u);  // the scheduler's cache freed its sequences
  SchedulerOptions so;
  so.prefix_cache_bytes = one + one / 2;
  Scheduler s(ctx, so);
  std::vector<Turn> t(4);
  for (int i = 0; i < 3; ++i) {
    s.submit(request(tokens(24, 5 + i, V), 4, t[size_t(i)]));
    s.run_until_idle();
    EXPECT_LE(s.prefix_cache_stats().bytes, so.prefix_cache_bytes);
    EXPECT_EQ(ctx.kv_cache_bytes(), s.prefix_cache_stats().bytes);
  }
  EXPECT_EQ(s.prefix_cache_stats().entries, 1u);
  EXPECT_EQ(s.prefix_cache_stats().evictions, 2);
  // The third prompt is there: reused; the first was evicted: no reuse.
  Turn again;
  s.submit(request(tokens(24, 7, V), 2, again));
  s.run_until_idle();
  EXPECT_EQ(again.cached, 23);  // at most the prompt less its last token
  s.submit(request(tokens(24, 5, V), 2, t[3]));
  s.run_until_idle();
  EXPECT_EQ(t[3].cached, 0);
  // An entry larger than the bound alone is not kept.
  SchedulerOptions tiny;
  tiny.prefix_cache_bytes = 1;
  Scheduler s2(ctx, tiny);
  Turn u;
  const size_t before = ctx.kv_cache_bytes();
  s2.submit(request(tokens(24, 9, V), 2, u));
  s2.run_until_idle();
  EXPECT_EQ(s2.prefix_cache_stats().entries, 0u);
  EXPECT_EQ(ctx.kv_cache_bytes(), before);
}

// A cancelled request's sequence is freed, not cached, including one that took a cached
// prefix: the cache's bytes are all the context holds afterwards.
TEST(PrefixCache, CancelledRequestsLeaveNothingBehind) {
  auto m = Model::load(kFixtures + "qwen2moe-f32.gguf");
  const int V = m->config().n_vocab;
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 128;
  Context ctx(*m, co);
  SchedulerOptions so;
  so.prefix_cache_bytes = size_t(16) << 20;
  Scheduler s(ctx, so);
  Turn first;
  const auto p = tokens(30, 6, V);
  s.submit(request(p, 3, first));
  s.run_until_idle();
  const size_t held = s.prefix_cache_stats().bytes;
  auto longer = p;
  longer.insert(longer.end(), first.out.begin(), first.out.end());
  longer.push_back(1);
  Turn second;
  const int64_t id = s.submit(request(longer, 50, second));
  s.step();
  s.step();
  EXPECT_EQ(second.cached, 32);  // took the whole entry
  EXPECT_EQ(s.prefix_cache_stats().entries, 0u);
  s.cancel(id);
  s.run_until_idle();
  EXPECT_EQ(second.why, FinishReason::kCancelled);
  EXPECT_EQ(s.prefix_cache_stats().entries, 0u);
  EXPECT_EQ(ctx.kv_cache_bytes(), 0u);
  EXPECT_GT(held, 0u);
}

// A recurrent model (qwen3next: Gated DeltaNet state slots) reuses a cached sequence its
// prompt extends as a whole (a conversation's next turn), and a part of one only up to a state
// snapshot (recurrent_prefix_test.cc): a prompt that shares 20 tokens of an entry whose only
// snapshot is at 27 (the default gap of 128 plans none further back in a prompt of 30) is
// evaluated from the start (cached 0). The turns generate what they generate without the
// cache, and a cancelled request leaves no state behind.
TEST(PrefixCache, RecurrentModelsReuseOnlyWholeSequences) {
  auto m = Model::load(kFixtures + "qwen3next/tiny-qwen3next-f32.gguf");
  const int V = m->config().n_vocab;
  auto run = [&](size_t cache_bytes, std::vector<Turn>& turns) {
    ContextOptions co;
    co.n_threads = 2;
    co.n_ctx = 256;
    co.exact_activations = true;
    Context ctx(*m, co);
    SchedulerOptions so;
    so.prefix_cache_bytes = cache_bytes;
    so.max_step_tokens = 16;
    Scheduler s(ctx, so);
    std::vector<int32_t> prompt = tokens(30, 3, V);
    for (int i = 0; i < 2; ++i) {
      turns.emplace_back();
      s.submit(request(prompt, 8, turns.back()));
      s.run_until_idle();
      prompt.insert(prompt.end(), turns.back().out.begin(), turns.back().out.end());
      const auto more = tokens(12, 10 + i, V);
      prompt.insert(prompt.end(), more.begin(), more.end());
    }
    // The first 20 tokens of the first prompt, then others: a part of the cached sequence.
    std::vector<int32_t> part = tokens(30, 3, V);
    part.resize(20);
    const auto other = tokens(6, 20, V);
    part.insert(part.end(), other.begin(), other.end());
    turns.emplace_back();
    s.submit(request(part, 4, turns.back()));
    s.run_until_idle();
    // Cancelled part way: nothing of it left (only the cached entries, when there is a cache).
    const size_t held = ctx.kv_cache_bytes();
    Turn cancelled;
    const int64_t id = s.submit(request(tokens(40, 30, V), 50, cancelled));
    s.step();
    s.cancel(id);
    s.run_until_idle();
    EXPECT_EQ(cancelled.why, FinishReason::kCancelled);
    EXPECT_EQ(ctx.kv_cache_bytes(), held);  // its rows and state slots freed
    return s.prefix_cache_stats();
  };
  std::vector<Turn> plain, cached;
  run(0, plain);
  const PrefixCacheStats on = run(size_t(64) << 20, cached);
  ASSERT_EQ(cached.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(cached[i].out, plain[i].out) << "turn " << i;
  EXPECT_EQ(cached[0].cached, 0);
  EXPECT_EQ(cached[1].cached, 37);  // the whole first turn (30 + 7 fed back)
  EXPECT_EQ(cached[2].cached, 0);   // 20 of an entry's tokens: no snapshot at or below
  EXPECT_EQ(on.hits, 1);
}

}  // namespace
}  // namespace lynx
