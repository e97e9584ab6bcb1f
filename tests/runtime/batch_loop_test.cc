// The shared step loop: how it forms batches (mixed and separate prefill), teacher forcing
// through its hooks gives the logits of running each sequence alone, and ended sequences are
// freed and reported.
#include <gtest/gtest.h>

#include "lynx/batch_loop.h"
#include "lynx/scheduler.h"

namespace lynx {
namespace {

const std::string kModel =
    std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/qwen2moe-f32.gguf";

ContextOptions options() {
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 64;
  return co;
}

// Greedy continuation of n tokens after `prompt`, fed one token per step.
std::vector<int32_t> greedy_alone(const Model& m, const std::vector<int32_t>& prompt, int n) {
  Context ctx(m, options());
  const int32_t s = ctx.new_sequence();
  std::vector<BatchToken> b;
  for (size_t i = 0; i < prompt.size(); ++i) {
    b.push_back({prompt[i], s, int32_t(i), kTokenPrefill, i + 1 == prompt.size()});
  }
  ctx.eval(b);
  std::vector<int32_t> out{argmax(ctx.logits(0))};
  while (int(out.size()) < n) {
    BatchToken t{out.back(), s, ctx.sequence_length(s), kTokenDecode, true};
    ctx.eval({&t, 1});
    out.push_back(argmax(ctx.logits(0)));
  }
  return out;
}

LoopSequence greedy_sequence(std::vector<int32_t> prompt, int n, std::vector<int32_t>& out) {
  LoopSequence ls;
  ls.prompt = std::move(prompt);
  ls.on_logits = [&out, n](std::span<const float> l) {
    out.push_back(argmax(l));
    return int(out.size()) == n ? kEndSequence : out.back();
  };
  return ls;
}

TEST(BatchLoop, MixedStepsPutDecodeTokensFirstThenPromptChunksWithinTheBudget) {
  auto m = Model::load(kModel);
  Context ctx(*m, options());
  BatchLoop loop(ctx, {4, true});
  std::vector<int32_t> a, b;
  loop.add(greedy_sequence({1, 2}, 3, a));
  loop.add(greedy_sequence({3, 4, 5, 6, 7}, 2, b));
  // Step 1: a's prompt (2), then 2 of b's 5 prompt tokens.
  StepReport r = loop.step();
  EXPECT_EQ(r.n_prefill, 4);
  EXPECT_EQ(r.n_decode, 0);
  EXPECT_EQ(a.size(), 1u);
  EXPECT_TRUE(b.empty());
  // Step 2: a decodes, then 3 more of b's prompt (its last: b gets its first token).
  r = loop.step();
  EXPECT_EQ(r.n_decode, 1);
  EXPECT_EQ(r.n_prefill, 3);
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(b.size(), 1u);
  // Step 3: both decode; both end (a after 3 tokens, b after 2) and are freed.
  r = loop.step();
  EXPECT_EQ(r.n_decode, 2);
  EXPECT_EQ(r.n_prefill, 0);
  EXPECT_EQ(loop.size(), 0u);
  EXPECT_EQ(loop.step().n_decode + loop.step().n_prefill, 0);
  EXPECT_EQ(a, greedy_alone(*m, {1, 2}, 3));
  EXPECT_EQ(b, greedy_alone(*m, {3, 4, 5, 6, 7}, 2));
}

TEST(BatchLoop, SeparatePrefillRunsEachPromptAloneBeforeAnyDecodeStep) {
  auto m = Model::load(kModel);
  Context ctx(*m, options());
  BatchLoop loop(ctx, {64, false});
  std::vector<int32_t> a, b;
  loop.add(greedy_sequence({1, 2, 3}, 4, a));
  loop.add(greedy_sequence({9, 8}, 4, b));
  EXPECT_TRUE(loop.prefill_pending());
  StepReport r = loop.step();
  EXPECT_EQ(r.n_prefill, 3);
  EXPECT_EQ(r.n_decode, 0);
  r = loop.step();
  EXPECT_EQ(r.n_prefill, 2);
  EXPECT_EQ(r.n_decode, 0);
  EXPECT_FALSE(loop.prefill_pending());
  for (int i = 0; i < 3; ++i) {
    r = loop.step();
    EXPECT_EQ(r.n_prefill, 0);
    EXPECT_EQ(r.n_decode, 2);
  }
  EXPECT_EQ(loop.size(), 0u);
  EXPECT_EQ(a, greedy_alone(*m, {1, 2, 3}, 4));
  EXPECT_EQ(b, greedy_alone(*m, {9, 8}, 4));
}

TEST(BatchLoop, TeacherForcingFeedsTheGivenTokensAndComputesNoPromptLogits) {
  auto m = Model::load(kModel);
  const std::vector<int32_t> doc = {5, 17, 3, 3, 40, 2, 11};
  // Reference: the logits after each token of the document, one token per step.
  std::vector<std::vector<float>> want;
  {
    Context ctx(*m, options());
    const int32_t s = ctx.new_sequence();
    for (size_t i = 0; i + 1 < doc.size(); ++i) {
      BatchToken t{doc[i], s, int32_t(i), kTokenDecode, true};
      ctx.eval({&t, 1});
      want.emplace_back(ctx.logits(0).begin(), ctx.logits(0).end());
    }
  }
  Context ctx(*m, options());
  BatchLoop loop(ctx, {64, false});
  const int pre = 2;
  LoopSequence ls;
  ls.prompt.assign(doc.begin(), doc.begin() + pre);
  ls.next = doc[pre];
  std::vector<std::vector<float>> got;
  int pos = pre;
  bool ended = false;
  ls.on_logits = [&](std::span<const float> l) {
    got.emplace_back(l.begin(), l.end());
    ++pos;
    return pos + 1 >= int(doc.size()) ? kEndSequence : doc[size_t(pos)];
  };
  ls.on_end = [&] { ended = true; };
  loop.add(std::move(ls));
  const StepReport r = loop.step();
  EXPECT_EQ(r.n_prefill, pre);
  EXPECT_EQ(ctx.n_logits(), 0);  // the first decode token is known: no prompt logits
  while (loop.size() > 0) loop.step();
  EXPECT_TRUE(ended);
  ASSERT_EQ(got.size(), want.size() - pre);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i + pre].size());
    for (size_t v = 0; v < got[i].size(); ++v) {
      EXPECT_NEAR(got[i][v], want[i + pre][v], 1e-4f) << "row " << i << " logit " << v;
    }
  }
}

TEST(BatchLoop, EndedSequencesAreFreedLastAdmittedFirstAndRemoveSkipsOnEnd) {
  auto m = Model::load(kModel);
  Context ctx(*m, options());
  BatchLoop loop(ctx, {16, true});
  std::vector<int> ends;
  std::vector<int32_t> seqs;
  for (int i = 0; i < 3; ++i) {
    LoopSequence ls;
    ls.prompt = {int32_t(i + 1)};
    ls.on_logits = [](std::span<const float>) { return kEndSequence; };
    ls.on_end = [&ends, i] { ends.push_back(i); };
    seqs.push_back(loop.add(std::move(ls)));
  }
  loop.remove(seqs[1]);
  EXPECT_EQ(loop.size(), 2u);
  loop.step();
  EXPECT_EQ(ends, (std::vector<int>{2, 0}));
  EXPECT_EQ(loop.size(), 0u);
  // Every sequence was freed: a new one gets the lowest id again.
  EXPECT_EQ(ctx.new_sequence(), seqs[0]);
}

TEST(BatchLoop, RejectsASequenceWithNothingToFeedOrNoHook) {
  auto m = Model::load(kModel);
  Context ctx(*m, options());
  EXPECT_THROW(BatchLoop(ctx, {0, true}), Error);
  BatchLoop loop(ctx, {});
  LoopSequence empty;
  empty.on_logits = [](std::span<const float>) { return kEndSequence; };
  EXPECT_THROW(loop.add(empty), Error);
  LoopSequence no_hook;
  no_hook.prompt = {1};
  EXPECT_THROW(loop.add(no_hook), Error);
  EXPECT_EQ(loop.size(), 0u);
}

}  // namespace
}  // namespace lynx
