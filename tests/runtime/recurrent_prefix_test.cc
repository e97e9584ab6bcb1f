// Recurrent models (qwen3next: Gated DeltaNet state slots) and the prefix cache's state
// snapshots: a sequence copied or truncated to a snapshot's length gives the logits of
// evaluating the prompt itself, to the bit; prompts that share a part of a cached or running
// sequence reuse it up to a snapshot and generate (tokens and log-probabilities) what they
// generate without the cache; snapshots count in the cache's bytes and go with evicted
// entries and cancelled requests.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "feed_util.h"
#include "lynx/context.h"
#include "lynx/error.h"
#include "lynx/scheduler.h"

namespace lynx {
namespace {

const std::string kModel =
    std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/qwen3next/tiny-qwen3next-f32.gguf";

std::vector<int32_t> tokens(int n, int salt, int n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = int32_t((i * 7 + salt * 13 + 1) % n_vocab);
  return t;
}

std::vector<int32_t> join(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The recurrence for every run (delta_rule_chunk_min = 0, the default, named here because
// these tests hold reuse to the bit, which needs every split of a prompt to sum alike); the
// chunked delta rule sums each split's runs in its own order, within float rounding of this
// (tests/model/qwen3next_test.cc: GoldensThroughTheChunkedDeltaRule and
// LongPrefillChunkedMatchesTokenByToken check its snapshots and truncation).
ContextOptions options() {
  ContextOptions co;
  co.n_threads = 2;
  co.n_ctx = 160;
  co.exact_activations = true;
  co.delta_rule_chunk_min = 0;
  return co;
}

using testing_util::feed;
using testing_util::same_bits;

TEST(RecurrentSnapshot, CopyAndTruncateToASnapshotGiveTheSequencesOwnLogits) {
  auto m = Model::load(kModel);
  Context ctx(*m, options());
  const auto p = tokens(40, 1, m->config().n_vocab);
  const int32_t whole = ctx.new_sequence();
  const auto at_once = feed(ctx, whole, p, 0, 40, 40);
  const int32_t src = ctx.new_sequence();
  feed(ctx, src, p, 0, 14, 7);
  const size_t before = ctx.sequence_cache_bytes(src);
  ctx.snapshot_sequence(src);
  const size_t one = ctx.sequence_cache_bytes(src) - before;  // the recurrent slots' bytes
  EXPECT_GT(one, 0u);
  ctx.snapshot_sequence(src);  // the same length again: nothing more
  EXPECT_EQ(ctx.sequence_cache_bytes(src), before + one);
  feed(ctx, src, p, 14, 28, 7);
  ctx.snapshot_sequence(src);
  feed(ctx, src, p, 28, 40, 7);
  EXPECT_EQ(ctx.sequence_snapshots(src), (std::vector<int32_t>{14, 28}));

  for (int len : {14, 28}) {
    SCOPED_TRACE(len);
    const int32_t own = ctx.new_sequence();
    feed(ctx, own, p, 0, len, 7);
    const auto want = feed(ctx, own, p, len, 40, 40);
    const int32_t dst = ctx.copy_sequence(src, len);
    EXPECT_EQ(ctx.sequence_length(dst), len);
    EXPECT_EQ(ctx.sequence_snapshots(dst).back(), len);  // carried: at len and below
    const auto got = feed(ctx, dst, p, len, 40, 40);
    EXPECT_TRUE(same_bits(got, want));
    EXPECT_TRUE(same_bits(got, at_once));
    ctx.free_sequence(dst);
    ctx.free_sequence(own);
  }
  // No snapshot at 20: refused, the sequence unchanged.
  EXPECT_THROW(ctx.copy_sequence(src, 20), Error);
  EXPECT_THROW(ctx.truncate_sequence(src, 20), Error);
  EXPECT_EQ(ctx.sequence_length(src), 40);
  // Back to 28, then on: the logits of the prompt at once; the snapshots above 28 go (none),
  // then back to 14: the one at 28 goes with its bytes.
  ctx.truncate_sequence(src, 28);
  EXPECT_TRUE(same_bits(feed(ctx, src, p, 28, 40, 40), at_once));
  const size_t two = ctx.sequence_cache_bytes(src);
  ctx.truncate_sequence(src, 14);
  EXPECT_EQ(ctx.sequence_snapshots(src), (std::vector<int32_t>{14}));
  EXPECT_EQ(ctx.sequence_cache_bytes(src), two - one);
  EXPECT_TRUE(same_bits(feed(ctx, src, p, 14, 40, 40), at_once));
  ctx.free_sequence(src);
  ctx.free_sequence(whole);
  EXPECT_EQ(ctx.kv_cache_bytes(), 0u);
}

struct Gen {
  std::vector<int32_t> out;
  std::vector<float> logprobs;
  int32_t cached = -1;
  FinishReason why = FinishReason::kNone;
};

GenerationRequest request(const std::vector<int32_t>& prompt, int n, Gen& r) {
  GenerationRequest q;
  q.prompt = prompt;
  q.max_tokens = n;
  q.on_token_logprob = [&r](int32_t tok, float logprob) {
    r.out.push_back(tok);
    r.logprobs.push_back(logprob);
    return true;
  };
  q.on_admit = [&r](int32_t cached) { r.cached = cached; };
  q.on_finish = [&r](FinishReason why) { r.why = why; };
  return q;
}

SchedulerOptions cached_options(size_t bytes) {
  SchedulerOptions so;
  so.prefix_cache_bytes = bytes;
  so.max_step_tokens = 16;
  so.prefix_snapshot_gap = 8;
  return so;
}

// What a prompt generates alone, without the cache.
Gen alone(const Model& m, const std::vector<int32_t>& p, int n) {
  Context ctx(m, options());
  SchedulerOptions so;
  so.max_step_tokens = 16;
  Scheduler s(ctx, so);
  Gen r;
  s.submit(request(p, n, r));
  s.run_until_idle();
  return r;
}

void expect_same(const Gen& got, const Gen& want) {
  EXPECT_EQ(got.out, want.out);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  EXPECT_EQ(
      std::memcmp(got.logprobs.data(), want.logprobs.data(), got.logprobs.size() * sizeof(float)),
      0);
}

// Two conversations with one system prompt of 40 tokens (drawn with `salt`) and different
// questions of 6: prompts of 46, whose largest planned snapshot within the shared 40 is at 35
// (snapshots at 43, 35 and 19, gap 8).
struct TwoConversations {
  std::vector<int32_t> a, b;
};
TwoConversations two_conversations(int n_vocab, int salt) {
  const auto system = tokens(40, salt, n_vocab);
  return {join(system, tokens(6, salt + 16, n_vocab)), join(system, tokens(6, salt + 26, n_vocab))};
}

// The first conversation found nothing cached, the second the shared part up to the snapshot
// at 35, and both generated (6 tokens) what they generate without the cache.
void expect_second_reused_first(const Model& m, const TwoConversations& p, const Gen& a,
                                const Gen& b) {
  EXPECT_EQ(a.cached, 0);
  EXPECT_EQ(b.cached, 35);
  expect_same(a, alone(m, p.a, 6));
  expect_same(b, alone(m, p.b, 6));
}

// Two conversations one after the other: the second takes the first's cached sequence up to
// its largest snapshot within the shared system prompt.
TEST(RecurrentPrefixCache, SharedSystemPromptReusedUpToASnapshot) {
  auto m = Model::load(kModel);
  const TwoConversations p = two_conversations(m->config().n_vocab, 4);
  Context ctx(*m, options());
  Scheduler s(ctx, cached_options(size_t(64) << 20));
  Gen a, b, again;
  s.submit(request(p.a, 6, a));
  s.run_until_idle();
  s.submit(request(p.b, 6, b));
  s.run_until_idle();
  expect_second_reused_first(*m, p, a, b);
  // The same prompt again: all but the last 3 tokens (the snapshot at 43).
  s.submit(request(p.a, 6, again));
  s.run_until_idle();
  EXPECT_EQ(again.cached, 43);
  expect_same(again, a);
  EXPECT_EQ(s.prefix_cache_stats().hits, 2);
  EXPECT_EQ(ctx.kv_cache_bytes(), s.prefix_cache_stats().bytes);
}

// Requests sent together with one system prompt: the second waits for the first's prefill to
// pass a snapshot in the shared part and copies the running sequence there.
TEST(RecurrentPrefixCache, RunningRequestsShareAPrefixAtASnapshot) {
  auto m = Model::load(kModel);
  const TwoConversations p = two_conversations(m->config().n_vocab, 5);
  Context ctx(*m, options());
  Scheduler s(ctx, cached_options(size_t(64) << 20));
  Gen a, b;
  s.submit(request(p.a, 6, a));
  s.submit(request(p.b, 6, b));
  s.run_until_idle();
  expect_second_reused_first(*m, p, a, b);
}

// A bound smaller than two entries: entries go with their snapshots (the context holds what
// the cache holds); a cancelled request, one that copied a prefix at a snapshot included,
// leaves neither state nor snapshots behind.
TEST(RecurrentPrefixCache, EvictionAndCancellationFreeSnapshots) {
  auto m = Model::load(kModel);
  const int V = m->config().n_vocab;
  Context ctx(*m, options());
  size_t one = 0;  // one entry of 46 + 1 tokens with its snapshots
  {
    Scheduler s(ctx, cached_options(size_t(1) << 30));
    Gen r;
    s.submit(request(tokens(46, 7, V), 2, r));
    s.run_until_idle();
    one = s.prefix_cache_stats().bytes;
    EXPECT_EQ(ctx.kv_cache_bytes(), one);
  }
  EXPECT_EQ(ctx.kv_cache_bytes(), 0u);
  Scheduler s(ctx, cached_options(one + one / 2));
  for (int i = 0; i < 3; ++i) {
    Gen r;
    s.submit(request(tokens(46, 7 + i, V), 2, r));
    s.run_until_idle();
    EXPECT_LE(s.prefix_cache_stats().bytes, one + one / 2);
    EXPECT_EQ(ctx.kv_cache_bytes(), s.prefix_cache_stats().bytes);
  }
  EXPECT_EQ(s.prefix_cache_stats().entries, 1u);
  EXPECT_EQ(s.prefix_cache_stats().evictions, 2);
  const size_t held = ctx.kv_cache_bytes();
  // Cancelled after a few steps of prefill (snapshots taken), one a new prompt, one that took
  // the cached entry's prefix at a snapshot.
  const auto shared = join(tokens(40, 9, V), tokens(30, 40, V));
  const std::vector<int32_t> prompts[] = {tokens(70, 50, V), shared};
  for (int k = 0; k < 2; ++k) {
    Gen r;
    const int64_t id = s.submit(request(prompts[k], 20, r));
    for (int i = 0; i < 4; ++i) s.step();
    EXPECT_GT(ctx.kv_cache_bytes(), held);
    s.cancel(id);
    s.run_until_idle();
    EXPECT_EQ(r.why, FinishReason::kCancelled);
    EXPECT_EQ(ctx.kv_cache_bytes(), held);
    EXPECT_EQ(r.cached, k == 0 ? 0 : 35);
  }
}

}  // namespace
}  // namespace lynx
