// The eval's numbers against direct computation on a tiny fixture.
#include <gtest/gtest.h>

#include <cmath>

#include "lynx/context.h"
#include "lynx/eval.h"

namespace lynx {
namespace {

const std::string kModel =
    std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/olmoe-f32.gguf";

std::vector<std::vector<int32_t>> make_docs(int n_vocab) {
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 7; ++d) {
    std::vector<int32_t> doc;
    for (int i = 0; i < 10 + 3 * d; ++i) doc.push_back((d * 31 + i * i * 7 + i) % n_vocab);
    docs.push_back(doc);
  }
  return docs;
}

// Perplexity computed directly: each document alone, token by token, log-softmax.
double direct_ppl(const Model& m, const std::vector<std::vector<int32_t>>& docs, double* acc) {
  double nll = 0;
  int64_t n = 0, correct = 0;
  for (const auto& d : docs) {
    ContextOptions co;
    co.n_threads = 1;
    co.n_ctx = int(d.size());
    Context ctx(m, co);
    const int32_t s = ctx.new_sequence();
    for (size_t p = 0; p + 1 < d.size(); ++p) {
      BatchToken t{d[p], s, int32_t(p), kTokenDecode, true};
      ctx.eval({&t, 1});
      auto l = ctx.logits(0);
      double mx = l[0];
      size_t best = 0;
      for (size_t v = 0; v < l.size(); ++v) {
        if (l[v] > mx) mx = l[v], best = v;
      }
      double s2 = 0;
      for (float v : l) s2 += std::exp(double(v) - mx);
      nll -= double(l[size_t(d[p + 1])]) - mx - std::log(s2);
      correct += int32_t(best) == d[p + 1];
      ++n;
    }
  }
  *acc = double(correct) / double(n);
  return std::exp(nll / double(n));
}

TEST(Eval, TopkPerplexityEqualsDirectComputation) {
  auto m = Model::load(kModel);
  auto docs = make_docs(m->config().n_vocab);
  EvalOptions o;
  o.policies = {"topk"};
  o.batches = {1, 3};
  o.n_threads = 2;
  auto rows = evaluate_tokens(*m, docs, o);
  double acc = 0;
  const double ppl = direct_ppl(*m, docs, &acc);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    EXPECT_NEAR(r.ppl, ppl, 1e-4 * ppl) << "B=" << r.batch;
    EXPECT_NEAR(r.accuracy, acc, 1e-12);
    EXPECT_NEAR(r.kl, 0.0, 1e-6);
    EXPECT_NEAR(r.d_nll.mean, 0.0, 1e-6);
    EXPECT_EQ(r.tokens, 7 * 9 + 3 * (0 + 1 + 2 + 3 + 4 + 5 + 6));
  }
}

TEST(Eval, LynxAtBatchOneIsTopk) {
  auto m = Model::load(kModel);
  auto docs = make_docs(m->config().n_vocab);
  EvalOptions o;
  o.policies = {"topk", "lynx", "oea:k0=2"};
  o.batches = {1, 4};
  o.n_threads = 1;
  auto rows = evaluate_tokens(*m, docs, o);
  ASSERT_EQ(rows.size(), 6u);
  // rows: B=1 topk, lynx, oea; B=4 topk, lynx, oea
  EXPECT_DOUBLE_EQ(rows[1].ppl, rows[0].ppl);
  EXPECT_DOUBLE_EQ(rows[1].accuracy, rows[0].accuracy);
  EXPECT_NEAR(rows[1].kl, 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(rows[1].frac_changed, 0.0);
  EXPECT_DOUBLE_EQ(rows[1].distinct, rows[0].distinct);
  // At B=4 lynx activates fewer experts than exact top-k on the same steps, and changes some
  // assignments (so its KL is positive).
  EXPECT_LT(rows[4].distinct, rows[4].distinct_exact);
  EXPECT_GT(rows[4].frac_changed, 0.0);
  EXPECT_GT(rows[4].kl, 0.0);
  EXPECT_LT(rows[5].distinct, rows[5].distinct_exact);
}

// A prefix that leaves a document nothing to score skips it (it used to feed the document's
// last token and read the target past its end): doc d has 10 + 3d tokens, so with prefix 9
// document 0 is skipped and document d scores 3d targets.
TEST(Eval, PrefixAtTheDocumentEndSkipsIt) {
  auto m = Model::load(kModel);
  auto docs = make_docs(m->config().n_vocab);
  EvalOptions o;
  o.policies = {"topk"};
  o.batches = {2};
  o.n_threads = 1;
  o.prefix = 9;
  auto rows = evaluate_tokens(*m, docs, o);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].tokens, 3 * (1 + 2 + 3 + 4 + 5 + 6));
  EXPECT_TRUE(std::isfinite(rows[0].ppl));
  // max_docs 1, max_tokens 8, prefix 7 (the command): nothing left to score.
  o.max_docs = 1;
  o.max_tokens = 8;
  o.prefix = 7;
  EXPECT_THROW(evaluate_tokens(*m, docs, o), Error);
  o.prefix = 6;  // one target left
  EXPECT_EQ(evaluate_tokens(*m, docs, o)[0].tokens, 1);
}

TEST(Eval, PrefixTokensAreFedButNotScored) {
  auto m = Model::load(kModel);
  auto docs = make_docs(m->config().n_vocab);  // 7 documents of 10, 13, ..., 28 tokens
  EvalOptions o;
  o.policies = {"topk", "lynx"};
  o.batches = {3};
  o.n_threads = 1;
  o.prefix = 4;
  auto rows = evaluate_tokens(*m, docs, o);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].tokens, 7 * 5 + 3 * (0 + 1 + 2 + 3 + 4 + 5 + 6));
  EXPECT_EQ(rows[1].tokens, rows[0].tokens);
  EXPECT_NEAR(rows[0].kl, 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(rows[0].frac_changed, 0.0);
  // A prefix longer than every document leaves none a token to score.
  o.prefix = 1000;
  EXPECT_THROW(evaluate_tokens(*m, docs, o), Error);
}

// With the expert tier, each row says what its policy made the tier read: exact routing keeps
// the resident model's perplexity, and a batch-aware policy that sees residency reads less.
TEST(Eval, ExpertTierCounters) {
  auto resident = Model::load(kModel);
  auto docs = make_docs(resident->config().n_vocab);
  size_t slot = 0;
  for (int il = 0; il < resident->config().n_layer; ++il) {
    if (resident->config().layer_routed(il))
      slot = std::max(slot, resident->expert_bytes(il) + 192);
  }
  LoadOptions lo;
  lo.expert_cache = int64_t(slot) * 2 * resident->config().n_layer;  // a quarter of 8 experts
  lo.expert_miss_cost = 20.f;
  auto tiered = Model::load(kModel, lo);
  ASSERT_NE(tiered->expert_tier(), nullptr);
  EvalOptions o;
  o.policies = {"topk", "cover:lambda=0.1"};
  o.batches = {4};
  o.n_threads = 2;
  const auto plain = evaluate_tokens(*resident, docs, o);
  const auto rows = evaluate_tokens(*tiered, docs, o);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(plain[0].tier_misses, -1.0);
  EXPECT_EQ(plain[0].disk_bytes_per_token, -1.0);
  EXPECT_EQ(rows[0].ppl, plain[0].ppl);  // exact routing: bit-identical through the tier
  for (const auto& r : rows) {
    EXPECT_GT(r.tier_misses, 0.0) << r.policy;
    EXPECT_GT(r.tier_hit_rate, 0.0) << r.policy;
    EXPECT_LT(r.tier_hit_rate, 1.0) << r.policy;
    EXPECT_GT(r.disk_bytes_per_token, 0.0) << r.policy;
  }
  EXPECT_LT(rows[1].tier_misses, rows[0].tier_misses);
  EXPECT_LT(rows[1].disk_bytes_per_token, rows[0].disk_bytes_per_token);
}

TEST(Eval, BadInput) {
  auto m = Model::load(kModel);
  EvalOptions o;
  o.batches = {0};
  EXPECT_THROW(evaluate_tokens(*m, {{1, 2, 3}}, o), Error);
  o.batches = {1};
  EXPECT_THROW(evaluate_tokens(*m, {{1}}, o), Error);  // no document with two tokens
  EXPECT_THROW(read_eval_documents("/nonexistent-dir"), Error);
  o.max_tokens = -1;  // used to build an iterator before the document's start
  EXPECT_THROW(evaluate_tokens(*m, {{1, 2, 3}}, o), Error);
  o.max_tokens = 256;
  o.prefix = -1;
  EXPECT_THROW(evaluate_tokens(*m, {{1, 2, 3}}, o), Error);
}

}  // namespace
}  // namespace lynx
