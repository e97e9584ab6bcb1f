// Continuous batching: requests joining and leaving between steps give the same greedy
// tokens as each request run alone; sampling is seeded; bad requests are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "lynx/context.h"
#include "lynx/scheduler.h"

namespace lynx {
namespace {

const std::string kModel =
    std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/qwen2moe-f32.gguf";

std::vector<int32_t> run_alone(const Model& m, const std::vector<int32_t>& prompt, int n,
                               const SamplingParams& sp = {}) {
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 128;
  Context ctx(m, co);
  Scheduler s(ctx, {});
  std::vector<int32_t> out;
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.sampling = sp;
  r.on_token = [&](int32_t t) {
    out.push_back(t);
    return true;
  };
  s.submit(std::move(r));
  s.run_until_idle();
  return out;
}

TEST(Scheduler, ContinuousBatchingMatchesRunningAlone) {
  auto m = Model::load(kModel);
  std::vector<std::vector<int32_t>> prompts = {
      {1, 2, 3},
      {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14, 15, 16, 17, 18},
      {42},
      {5, 5, 5, 5}};
  std::vector<int> lens = {12, 7, 20, 3};
  ContextOptions co;
  co.n_threads = 2;
  co.n_ctx = 128;
  Context ctx(*m, co);
  SchedulerOptions so;
  so.max_batch = 3;        // the 4th request waits for a free slot
  so.max_step_tokens = 5;  // the long prompt is prefilled in chunks beside decoding ones
  Scheduler s(ctx, so);
  std::map<size_t, std::vector<int32_t>> got;
  std::map<size_t, FinishReason> why;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.max_tokens = lens[i];
    r.on_token = [&got, i](int32_t t) {
      got[i].push_back(t);
      return true;
    };
    r.on_finish = [&why, i](FinishReason f) { why[i] = f; };
    s.submit(std::move(r));
  }
  int steps = 0;
  while (s.step()) {
    ASSERT_LE(int(s.n_active()), 3);
    ++steps;
  }
  EXPECT_GT(steps, 20);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i], run_alone(*m, prompts[i], lens[i])) << "request " << i;
    EXPECT_EQ(why[i], FinishReason::kLength);
  }
  EXPECT_EQ(s.stats().prefill_tokens, 3 + 18 + 1 + 4);
}

// A step whose router logits turn NaN for one sequence (a broken model seen by one request)
// fails that request with kError and a message naming the layer; the other requests of the
// same steps, including a chunked prefill that was rolled back, finish as if alone.
TEST(Scheduler, NonFiniteRowsFailOnlyTheirRequest) {
  auto m = Model::load(kModel);
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 2, 3}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14, 15, 16, 17, 18}, {42}};
  const std::vector<int> lens = {10, 6, 12};
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 128;
  Context ctx(*m, co);
  // Sequences are handed out from 0 in admission order, so request 2 decodes in sequence 2;
  // its row of layer 1 goes NaN at position 4, after it has generated 4 tokens.
  ctx.set_router_override([](int layer, std::span<const BatchToken> batch, float* logits) {
    for (size_t t = 0; t < batch.size(); ++t) {
      if (layer == 1 && batch[t].seq == 2 && batch[t].pos == 4) {
        logits[t * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
      }
    }
  });
  SchedulerOptions so;
  so.max_step_tokens = 5;  // request 1's prompt is prefilled in chunks while 2 decodes
  Scheduler s(ctx, so);
  std::map<size_t, std::vector<int32_t>> got;
  std::map<size_t, FinishReason> why;
  std::map<size_t, std::string> err;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.max_tokens = lens[i];
    r.on_token = [&got, i](int32_t t) {
      got[i].push_back(t);
      return true;
    };
    r.on_finish = [&why, i](FinishReason f) { why[i] = f; };
    r.on_error = [&err, i](const std::string& e) { err[i] = e; };
    s.submit(std::move(r));
  }
  s.run_until_idle();
  EXPECT_EQ(why[2], FinishReason::kError);
  EXPECT_NE(err[2].find("router logits of layer 1"), std::string::npos) << err[2];
  EXPECT_NE(err[2].find("sequence 2"), std::string::npos) << err[2];
  EXPECT_EQ(got[2], run_alone(*m, prompts[2], 4));
  for (size_t i : {size_t(0), size_t(1)}) {
    EXPECT_EQ(why[i], FinishReason::kLength) << i;
    EXPECT_TRUE(err[i].empty()) << err[i];
    EXPECT_EQ(got[i], run_alone(*m, prompts[i], lens[i])) << "request " << i;
  }
  EXPECT_EQ(s.stats().failed_requests, 1);
}

TEST(Scheduler, SeededSamplingIsReproducible) {
  auto m = Model::load(kModel);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 20;
  sp.top_p = 0.9f;
  sp.seed = 1234;
  auto a = run_alone(*m, {1, 2, 3}, 16, sp);
  auto b = run_alone(*m, {1, 2, 3}, 16, sp);
  EXPECT_EQ(a, b);
  sp.seed = 99;
  auto c = run_alone(*m, {1, 2, 3}, 16, sp);
  EXPECT_NE(a, c);
}

TEST(Scheduler, StopTokenAndCallbackStop) {
  auto m = Model::load(kModel);
  auto ref = run_alone(*m, {1, 2, 3}, 10);
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 64;
  Context ctx(*m, co);
  Scheduler s(ctx, {});
  std::vector<int32_t> out;
  FinishReason why = FinishReason::kNone;
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 10;
  r.stop_tokens = {ref[4]};
  r.on_token = [&](int32_t t) {
    out.push_back(t);
    return true;
  };
  r.on_finish = [&](FinishReason f) { why = f; };
  s.submit(std::move(r));
  s.run_until_idle();
  // Stops at the first occurrence of the stop token, which is not reported.
  size_t first = std::find(ref.begin(), ref.end(), ref[4]) - ref.begin();
  EXPECT_EQ(out, std::vector<int32_t>(ref.begin(), ref.begin() + long(first)));
  EXPECT_EQ(why, FinishReason::kStop);
}

TEST(Scheduler, CancelFreesTheSlot) {
  auto m = Model::load(kModel);
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 64;
  Context ctx(*m, co);
  SchedulerOptions so;
  so.max_batch = 1;
  Scheduler s(ctx, so);
  FinishReason w1 = FinishReason::kNone, w2 = FinishReason::kNone;
  GenerationRequest a;
  a.prompt = {1, 2};
  a.max_tokens = 50;
  a.on_finish = [&](FinishReason f) { w1 = f; };
  GenerationRequest b = a;
  b.max_tokens = 2;
  b.on_finish = [&](FinishReason f) { w2 = f; };
  const int64_t ia = s.submit(std::move(a));
  s.submit(std::move(b));
  s.step();
  s.step();
  EXPECT_EQ(s.n_waiting(), 1u);
  s.cancel(ia);
  s.run_until_idle();
  EXPECT_EQ(w1, FinishReason::kCancelled);
  EXPECT_EQ(w2, FinishReason::kLength);
}

TEST(Scheduler, BeforeStepNamesTheDecodingRequests) {
  auto m = Model::load(kModel);
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 64;
  Context ctx(*m, co);
  SchedulerOptions so;
  so.max_step_tokens = 5;  // b's 6-token prompt takes two steps
  std::vector<std::vector<int64_t>> seen;
  so.before_step = [&](std::span<const int64_t> ids) { seen.emplace_back(ids.begin(), ids.end()); };
  Scheduler s(ctx, so);
  GenerationRequest a;
  a.prompt = {1, 2};
  a.max_tokens = 3;
  GenerationRequest b = a;
  b.prompt = {1, 2, 3, 4, 5, 6};
  const int64_t ia = s.submit(std::move(a));
  const int64_t ib = s.submit(std::move(b));
  s.run_until_idle();
  // Step 1: both prefill (a whole, b's first 3 tokens). Step 2: a decodes, b prefills the
  // rest and gets its first token. Step 3: both decode (a's last). Step 4: b's last token.
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_TRUE(seen[0].empty());
  EXPECT_EQ(seen[1], std::vector<int64_t>{ia});
  EXPECT_EQ(seen[2], (std::vector<int64_t>{ia, ib}));
  EXPECT_EQ(seen[3], std::vector<int64_t>{ib});
}

TEST(Scheduler, RejectsBadRequests) {
  auto m = Model::load(kModel);
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 16;
  Context ctx(*m, co);
  Scheduler s(ctx, {});
  GenerationRequest r;
  EXPECT_THROW(s.submit(r), Error);  // empty prompt
  r.prompt = {1, 2, 3};
  r.max_tokens = 0;
  EXPECT_THROW(s.submit(r), Error);
  r.max_tokens = 14;
  EXPECT_THROW(s.submit(r), Error);  // 3 + 14 > 16
  r.max_tokens = 2;
  r.prompt = {1, 100000};
  EXPECT_THROW(s.submit(r), Error);
  EXPECT_EQ(s.n_waiting(), 0u);
}

TEST(Sampler, GreedyAndTopK1AreArgmax) {
  std::vector<float> l = {0.1f, 2.5f, -1.f, 2.4f};
  Sampler g({});
  EXPECT_EQ(g.sample(l), 1);
  SamplingParams p;
  p.temperature = 5.f;
  p.top_k = 1;
  Sampler k1(p);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(k1.sample(l), 1);
  EXPECT_NEAR(g.last_logprob(1),
              2.5 - std::log(std::exp(0.1) + std::exp(2.5) + std::exp(-1.0) + std::exp(2.4)), 1e-5);
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  std::vector<float> l = {10.f, 9.f, -10.f, -10.f};
  SamplingParams p;
  p.temperature = 1.f;
  p.top_p = 0.5f;  // the first token alone holds ~73% of the mass
  p.seed = 3;
  Sampler s(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l), 0);
}

// Temperatures down to subnormal floats (issue 29): l / T overflowed to inf, inf - inf gave
// NaN probabilities (garbage tokens, a null logprob) or an immediate stop. Sampling at any
// positive T must tend to the greedy choice with a finite log-probability.
TEST(Sampler, TinyTemperaturesAreGreedy) {
  const std::vector<float> l = {0.1f, 2.5f, -1.f, 2.4f, -30.f, 2.5f - 1e-6f};
  const float temps[] = {1e-30f, 1e-38f, 1e-39f, 1e-44f, std::numeric_limits<float>::denorm_min()};
  for (const float t : temps) {
    SCOPED_TRACE(t);
    SamplingParams p;
    p.temperature = t;
    p.seed = 7;
    for (const int top_k : {0, 3}) {
      for (const float top_p : {1.f, 0.9f}) {
        p.top_k = top_k;
        p.top_p = top_p;
        Sampler s(p);
        for (int i = 0; i < 5; ++i) {
          EXPECT_EQ(s.sample(l), 1);
          const float lp = s.last_logprob(1);
          EXPECT_TRUE(std::isfinite(lp));
          EXPECT_LE(lp, 0.f);
          EXPECT_GT(lp, -1e-3f);
        }
      }
    }
  }
  // Exact ties at a tiny temperature: a draw between the tied tokens only, each with
  // log-probability log(1/2).
  const std::vector<float> tie = {1.f, 3.f, 3.f, -2.f};
  SamplingParams p;
  p.temperature = 1e-39f;
  Sampler s(p);
  for (int i = 0; i < 20; ++i) {
    const int32_t pick = s.sample(tie);
    EXPECT_TRUE(pick == 1 || pick == 2) << pick;
    EXPECT_NEAR(s.last_logprob(pick), std::log(0.5f), 1e-6);
  }
}

// The scaling relative to the maximum keeps ordinary temperatures' distribution: the
// log-probabilities are the log-softmax of l / T.
TEST(Sampler, LogprobIsLogSoftmaxOfScaledLogits) {
  const std::vector<float> l = {0.1f, 2.5f, -1.f, 2.4f};
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 11;
  Sampler s(p);
  const int32_t pick = s.sample(l);
  double z = 0;
  for (float v : l) z += std::exp(double(v) / 0.7);
  EXPECT_NEAR(s.last_logprob(pick), double(l[size_t(pick)]) / 0.7 - std::log(z), 1e-5);
}

}  // namespace
}  // namespace lynx
