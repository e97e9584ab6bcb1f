// Step accounting through the public Context API (recorded by the StepObserver the forward
// pass calls): step figures, distinct experts against the recorded router logits, tokens per
// expert, weight bytes, traces, reset; and that a step does not reallocate the statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx {
namespace {

const std::string kFixtures = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/";

// Experts exact top-k picks for one token's logits (softmax is monotone: the k largest).
std::vector<int> topk_ids(const float* logits, int N, int k) {
  std::vector<int> ids(static_cast<size_t>(N));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  ids.resize(static_cast<size_t>(k));
  return ids;
}

class StepStatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model = Model::load(kFixtures + "olmoe-f32.gguf");
    ContextOptions co;
    co.n_threads = 2;
    co.record_trace = true;
    ctx = std::make_unique<Context>(*model, co);
    for (int s = 0; s < 3; ++s) seqs.push_back(ctx->new_sequence());
  }
  // One step: a 4-token prefill chunk of sequence 0 and one decode token each of 1 and 2.
  std::vector<BatchToken> step(int pos) {
    std::vector<BatchToken> b;
    for (int i = 0; i < 4; ++i) b.push_back({3 + i, seqs[0], pos * 4 + i, kTokenPrefill, i == 3});
    b.push_back({7, seqs[1], pos, kTokenDecode, true});
    b.push_back({9, seqs[2], pos, kTokenDecode, true});
    return b;
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  std::vector<int32_t> seqs;
};

TEST_F(StepStatsTest, FiguresMatchTheRecordedRouting) {
  const ModelConfig& c = model->config();
  ASSERT_TRUE(c.is_moe());
  const int N = c.n_expert, k = c.n_expert_used;
  const std::vector<BatchToken> b = step(0);
  ctx->eval(b);
  const StepStats& st = ctx->last_step();
  EXPECT_EQ(st.n_tokens, 6);
  EXPECT_EQ(st.n_decode, 2);
  ASSERT_EQ(st.layers.size(), size_t(c.n_layer));
  const std::vector<TraceRecord> trace = ctx->take_trace();
  ASSERT_EQ(trace.size(), size_t(c.n_layer));
  size_t expert_bytes = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const TraceRecord& r = trace[size_t(il)];
    EXPECT_EQ(r.layer, il);
    EXPECT_EQ(r.n_tokens, 6);
    ASSERT_EQ(r.logits.size(), size_t(6) * N);
    ASSERT_EQ(r.flags.size(), size_t(6));
    EXPECT_EQ(r.flags[0], kTokenPrefill);
    EXPECT_EQ(r.flags[5], kTokenDecode);
    // The policy routes all 6 rows; the last layer computes only the 3 that return logits
    // (the chunk's last token and the two decode tokens).
    const bool last = il == c.n_layer - 1;
    std::set<int> distinct, ran;
    std::vector<int64_t> count(size_t(N), 0);
    for (int t = 0; t < 6; ++t) {
      for (int e : topk_ids(&r.logits[size_t(t) * N], N, k)) {
        distinct.insert(e);
        if (last && !b[size_t(t)].logits) continue;
        ran.insert(e);
        ++count[size_t(e)];
      }
    }
    if (last) EXPECT_LT(ran.size(), distinct.size());  // else the test would not tell
    // topk: the policy activates what exact top-k would.
    EXPECT_EQ(st.layers[size_t(il)].distinct_experts, int(ran.size())) << il;
    EXPECT_EQ(st.layers[size_t(il)].distinct_exact, int(distinct.size())) << il;
    EXPECT_EQ(st.layers[size_t(il)].expert_bytes, ran.size() * model->expert_bytes(il));
    EXPECT_EQ(st.layers[size_t(il)].assignments, int64_t(last ? 3 : 6) * k) << il;
    const std::vector<int64_t> got(ctx->expert_tokens().begin() + int64_t(il) * N,
                                   ctx->expert_tokens().begin() + int64_t(il + 1) * N);
    EXPECT_EQ(got, count) << il;
    EXPECT_EQ(ctx->routing_stats()[size_t(il)].steps, 1);
    EXPECT_EQ(ctx->routing_stats()[size_t(il)].tokens, 6);
    expert_bytes += st.layers[size_t(il)].expert_bytes;
  }
  EXPECT_EQ(st.expert_bytes, expert_bytes);
  EXPECT_GT(st.weight_bytes, st.expert_bytes);  // attention, router, embeddings, output too
  EXPECT_GE(st.expert_seconds, 0.0);
  EXPECT_GE(st.routing_seconds, 0.0);
}

TEST_F(StepStatsTest, StepsReuseTheirStorageAndResetClearsTheTotals) {
  ctx->eval(step(0));
  const LayerStepStats* layers = ctx->last_step().layers.data();
  ctx->eval(step(1));
  EXPECT_EQ(ctx->last_step().layers.data(), layers);  // not reallocated per step
  EXPECT_EQ(ctx->last_step().n_tokens, 6);
  const ModelConfig& c = model->config();
  // Two steps of 6 tokens (3 of them computed by the last layer).
  for (int il = 0; il < c.n_layer; ++il) {
    const int64_t per_layer = 2 * (il == c.n_layer - 1 ? 3 : 6) * int64_t(c.n_expert_used);
    int64_t sum = 0;
    for (int e = 0; e < c.n_expert; ++e) sum += ctx->expert_tokens()[size_t(il * c.n_expert + e)];
    EXPECT_EQ(sum, per_layer);
    EXPECT_EQ(ctx->routing_stats()[size_t(il)].steps, 2);
  }
  EXPECT_EQ(ctx->take_trace().size(), size_t(2 * c.n_layer));
  EXPECT_TRUE(ctx->take_trace().empty());
  ctx->reset_stats();
  for (int64_t n : ctx->expert_tokens()) EXPECT_EQ(n, 0);
  for (const RoutingStats& r : ctx->routing_stats()) EXPECT_EQ(r.steps, 0);
}

}  // namespace
}  // namespace lynx
