// The sampler chain's stages against straightforward scalar computations on small logits:
// penalties, logit bias, top_k / typical_p / top_p / min_p, greedy with penalties, and the
// per-sequence state of the penalties in a batched scheduler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "lynx/context.h"
#include "lynx/error.h"
#include "lynx/scheduler.h"

namespace lynx {
namespace {

const std::vector<float> kLogits = {1.5f, -0.5f, 3.0f, 0.0f, 2.0f, -2.0f, 0.7f, 2.9f};

std::vector<Candidate> candidates(const std::vector<float>& l) {
  std::vector<Candidate> c;
  for (size_t i = 0; i < l.size(); ++i) c.push_back({l[i], int32_t(i)});
  return c;
}

std::set<int32_t> ids(const std::vector<Candidate>& c) {
  std::set<int32_t> s;
  for (const auto& x : c) s.insert(x.second);
  return s;
}

std::vector<double> softmax(const std::vector<float>& l) {
  double m = *std::max_element(l.begin(), l.end()), z = 0;
  std::vector<double> p;
  for (float v : l) z += std::exp(v - m);
  for (float v : l) p.push_back(std::exp(v - m) / z);
  return p;
}

TEST(SamplerStages, FrequencyAndPresencePenaltiesLowerByCountTimesPenalty) {
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  PenaltyState st(p);
  const std::vector<int32_t> prompt = {2, 2, 2, 4};
  st.accept_prompt(prompt);  // the prompt does not count (OpenAI: tokens generated so far)
  for (int32_t t : {2, 2, 6, 2}) st.accept(t);
  std::vector<float> l = kLogits;
  st.apply(l);
  for (size_t i = 0; i < l.size(); ++i) {
    const int count = i == 2 ? 3 : i == 6 ? 1 : 0;
    const float want = kLogits[i] - float(count) * 0.5f - (count > 0 ? 0.25f : 0.f);
    EXPECT_FLOAT_EQ(l[i], want) << i;
  }
  // Negative penalties raise.
  p.frequency_penalty = -1.f;
  p.presence_penalty = 0.f;
  PenaltyState neg(p);
  neg.accept(5);
  neg.accept(5);
  l = kLogits;
  neg.apply(l);
  EXPECT_FLOAT_EQ(l[5], kLogits[5] + 2.f);
}

TEST(SamplerStages, RepetitionPenaltyDividesPositiveMultipliesNegativeInTheWindow) {
  SamplingParams p;
  p.repeat_penalty = 2.f;
  p.repeat_last_n = 3;
  PenaltyState st(p);
  const std::vector<int32_t> prompt = {0, 2, 5, 3, 3};  // window: 5, 3, 3
  st.accept_prompt(prompt);
  std::vector<float> l = kLogits;
  st.apply(l);
  for (size_t i = 0; i < l.size(); ++i) {
    float want = kLogits[i];
    if (i == 5 || i == 3) want = want <= 0 ? want * 2.f : want / 2.f;  // once, not per occurrence
    EXPECT_FLOAT_EQ(l[i], want) << i;
  }
  // Generated tokens enter the window and push the oldest out: window 3, 3, 7 then 3, 7, 6.
  st.accept(7);
  st.accept(6);
  l = kLogits;
  st.apply(l);
  EXPECT_FLOAT_EQ(l[5], kLogits[5]);
  EXPECT_FLOAT_EQ(l[3], 0.f);
  EXPECT_FLOAT_EQ(l[7], kLogits[7] / 2.f);
  EXPECT_FLOAT_EQ(l[6], kLogits[6] / 2.f);
  EXPECT_FLOAT_EQ(l[1], kLogits[1]);
  // -1: every token of prompt and output; 0: off.
  p.repeat_last_n = -1;
  PenaltyState all(p);
  all.accept_prompt(prompt);
  all.accept(1);
  l = kLogits;
  all.apply(l);
  for (int i : {0, 2, 5, 3, 1}) {
    EXPECT_FLOAT_EQ(l[size_t(i)],
                    kLogits[size_t(i)] <= 0 ? kLogits[size_t(i)] * 2.f : kLogits[size_t(i)] / 2.f)
        << i;
  }
  EXPECT_FLOAT_EQ(l[4], kLogits[4]);
  p.repeat_last_n = 0;
  PenaltyState off(p);
  off.accept_prompt(prompt);
  off.accept(2);
  l = kLogits;
  off.apply(l);
  EXPECT_EQ(l, kLogits);
  EXPECT_FALSE(p.has_penalties());
}

TEST(SamplerStages, TopKTopPMinPMatchTheirDefinitions) {
  const std::vector<double> prob = softmax(kLogits);
  const double pmax = *std::max_element(prob.begin(), prob.end());
  for (float mp : {0.0f, 0.05f, 0.2f, 0.5f, 0.95f, 1.0f}) {
    auto c = candidates(kLogits);
    sampling::min_p(c, mp);
    std::set<int32_t> want;
    for (size_t i = 0; i < prob.size(); ++i) {
      if (prob[i] >= double(mp) * pmax - 1e-12) want.insert(int32_t(i));
    }
    EXPECT_EQ(ids(c), want) << mp;
  }
  // top_p: the most likely tokens until their mass reaches p.
  std::vector<size_t> order(kLogits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  for (float tp : {0.1f, 0.4f, 0.6f, 0.8f, 0.99f, 1.0f}) {
    auto c = candidates(kLogits);
    sampling::top_p(c, tp);
    std::set<int32_t> want;
    double acc = 0;
    for (size_t i : order) {
      want.insert(int32_t(i));
      acc += prob[i];
      if (acc >= double(tp)) break;
    }
    EXPECT_EQ(ids(c), want) << tp;
  }
  auto c = candidates(kLogits);
  sampling::top_k(c, 3);
  EXPECT_EQ(ids(c), (std::set<int32_t>{2, 7, 4}));
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].second, 2);  // sorted by logit
  // top_p renormalizes over what top_k kept: 3.0 vs 2.9 vs 2.0 -> the first two hold
  // e^3 / (e^3 + e^2.9) = 0.525 of the pair, so p = 0.5 keeps one.
  sampling::top_k(c, 2);
  sampling::top_p(c, 0.5f);
  EXPECT_EQ(ids(c), (std::set<int32_t>{2}));
}

// top_p and min_p on unsorted candidates (the vocabulary, no top_k before) cut only around
// the nucleus instead of sorting everything: the same tokens as on sorted candidates.
TEST(SamplerStages, UnsortedFastPathsKeepTheSameTokens) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.f, 2.5f);
  std::vector<float> l(5000);
  for (float& x : l) x = normal(gen);
  l[17] = l[99];  // a tie
  for (float p : {0.01f, 0.3f, 0.9f, 0.999f, 0.99999f}) {
    auto fast = candidates(l);
    auto sorted = candidates(l);
    sampling::sort_by_logit(sorted);
    sampling::top_p(fast, p);
    sampling::top_p(sorted, p);
    EXPECT_EQ(fast, sorted) << p;
    fast = candidates(l);
    sorted = candidates(l);
    sampling::sort_by_logit(sorted);
    sampling::min_p(fast, p);
    sampling::min_p(sorted, p);
    EXPECT_EQ(fast, sorted) << p;
  }
  // No filter: the draw over the whole vocabulary in id order still follows softmax(l / T).
  SamplingParams sp;
  sp.temperature = 1.f;
  sp.seed = 2;
  Sampler s(sp);
  const std::vector<float> three = {0.f, std::log(2.f), std::log(3.f)};
  int n[3] = {0, 0, 0};
  for (int i = 0; i < 6000; ++i) ++n[s.sample(three)];
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(n[k] / 6000.0, (k + 1) / 6.0, 0.025) << k;
}

// Locally typical sampling: an independent scalar version of Meister et al.'s rule.
std::set<int32_t> typical_ref(const std::vector<float>& l, double p) {
  const std::vector<double> prob = softmax(l);
  double h = 0;
  for (double x : prob) h -= x * std::log(x);
  std::vector<std::pair<double, int32_t>> by_score;
  for (size_t i = 0; i < prob.size(); ++i) {
    by_score.push_back({std::fabs(-std::log(prob[i]) - h), int32_t(i)});
  }
  std::stable_sort(by_score.begin(), by_score.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::set<int32_t> keep;
  double acc = 0;
  for (const auto& [s, i] : by_score) {
    keep.insert(i);
    acc += prob[size_t(i)];
    if (acc > p) break;
  }
  return keep;
}

TEST(SamplerStages, TypicalKeepsTokensNearTheEntropy) {
  for (float tp : {0.05f, 0.2f, 0.3f, 0.5f, 0.9f, 0.999f}) {
    auto c = candidates(kLogits);
    sampling::typical(c, tp);
    EXPECT_EQ(ids(c), typical_ref(kLogits, tp)) << tp;
    EXPECT_TRUE(std::is_sorted(c.begin(), c.end(),
                               [](const auto& a, const auto& b) { return a.first > b.first; }));
  }
  // p = 0.5, 0.2, 0.2, 0.1: H = 1.22 nats; the 0.2 tokens (-log p = 1.61) are nearest, so
  // typical_p 0.3 keeps them and drops the most likely token.
  const std::vector<float> l = {std::log(0.5f), std::log(0.2f), std::log(0.2f), std::log(0.1f)};
  auto c = candidates(l);
  sampling::typical(c, 0.3f);
  EXPECT_EQ(ids(c), (std::set<int32_t>{1, 2}));
  // Greedy with typical_p takes the largest kept logit (as llama.cpp's chain does).
  SamplingParams p;
  p.typical_p = 0.3f;
  Sampler s(p);
  EXPECT_EQ(s.sample(l), 1);
}

TEST(SamplerStages, LogitBiasBansAndForces) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.seed = 5;
  p.logit_bias = {{2, -100.f}, {7, -100.f}};  // the two most likely tokens
  Sampler ban(p);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[ban.sample(kLogits)];
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_EQ(seen.count(7), 0u);
  EXPECT_GT(seen.size(), 3u);   // still sampling among the others
  p.logit_bias = {{5, 100.f}};  // the least likely token
  Sampler force(p);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(force.sample(kLogits), 5);
  // A ban (llama-server's false) at temperature 0, and the bias adds up per entry.
  p.temperature = 0.f;
  p.logit_bias = {{2, kBanBias}};
  Sampler greedy_ban(p);
  EXPECT_EQ(greedy_ban.sample(kLogits), 7);
  EXPECT_EQ(greedy_ban.last_logprob(2), -std::numeric_limits<float>::infinity());
  std::vector<float> l = kLogits;
  const std::vector<LogitBias> twice = {{1, 0.75f}, {1, 0.5f}, {3, -1.f}};
  sampling::add_logit_bias(l, twice);
  EXPECT_FLOAT_EQ(l[1], kLogits[1] + 1.25f);
  EXPECT_FLOAT_EQ(l[3], kLogits[3] - 1.f);
  EXPECT_FLOAT_EQ(l[0], kLogits[0]);
}

// Greedy applies the penalties and the bias before the arg max; the reported logprob is the
// log-softmax of the adjusted logits.
TEST(SamplerStages, GreedyAppliesPenaltiesBeforeArgmax) {
  const std::vector<float> l = {0.f, 5.f, 4.f};
  SamplingParams p;
  p.frequency_penalty = 1.5f;
  Sampler s(p);
  // Step by step: 1 (5 vs 4), then 2 (3.5 vs 4), then 1 (3.5 vs 2.5), then 2 (2 vs 2.5).
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(s.sample(l));
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 1, 2}));
  // After 1, 2, 1, 2 the last pick was made from {0, 2, 2.5}.
  const double z = std::log(std::exp(0.0) + std::exp(2.0) + std::exp(2.5));
  EXPECT_NEAR(s.last_logprob(2), 2.5 - z, 1e-5);
  EXPECT_EQ(s.sample(l), 1);  // 2.0 vs 1.0

  SamplingParams r;
  r.repeat_penalty = 4.f;
  Sampler rep(r);
  const std::vector<int32_t> prompt = {1};
  rep.set_prompt(prompt);
  EXPECT_EQ(rep.sample(l), 2);  // 5 / 4 < 4
  SamplingParams b;
  b.logit_bias = {{0, 6.f}};
  Sampler bias(b);
  EXPECT_EQ(bias.sample(l), 0);
  EXPECT_NEAR(bias.last_logprob(0), 6.0 - std::log(std::exp(6.0) + std::exp(5.0) + std::exp(4.0)),
              1e-5);
}

TEST(SamplerStages, SamplingAfterTheFiltersUsesTheTemperature) {
  // min_p 0.5 leaves tokens 2 and 7 (e^-0.1 = 0.9 of the max); at temperature 1 they are
  // drawn about e^0.1 : 1, and never another.
  SamplingParams p;
  p.temperature = 1.f;
  p.min_p = 0.5f;
  p.seed = 9;
  Sampler s(p);
  int n2 = 0, n7 = 0;
  for (int i = 0; i < 4000; ++i) {
    const int32_t t = s.sample(kLogits);
    ASSERT_TRUE(t == 2 || t == 7) << t;
    (t == 2 ? n2 : n7)++;
  }
  const double want = std::exp(0.1) / (1 + std::exp(0.1));
  EXPECT_NEAR(double(n2) / 4000, want, 0.03);
}

TEST(SamplerStages, ParametersAreChecked) {
  SamplingParams p;
  EXPECT_NO_THROW(check_sampling_params(p, 8));
  p.logit_bias = {{8, 1.f}};
  EXPECT_THROW(check_sampling_params(p, 8), Error);
  p.logit_bias = {{-1, 1.f}};
  EXPECT_THROW(check_sampling_params(p, 8), Error);
  p.logit_bias.clear();
  for (int32_t t = 0; t < 8; ++t) p.logit_bias.push_back({t, kBanBias});
  EXPECT_THROW(check_sampling_params(p, 8), Error);  // nothing left to sample
  p.logit_bias.pop_back();
  EXPECT_NO_THROW(check_sampling_params(p, 8));
  SamplingParams q;
  q.repeat_penalty = 0.f;
  EXPECT_THROW(check_sampling_params(q, 8), Error);
  q = {};
  q.min_p = 1.5f;
  EXPECT_THROW(check_sampling_params(q, 8), Error);
  q = {};
  q.typical_p = 0.f;
  EXPECT_THROW(check_sampling_params(q, 8), Error);
  q = {};
  q.frequency_penalty = std::nanf("");
  EXPECT_THROW(check_sampling_params(q, 8), Error);
}

// Each request of a batch keeps its own penalty state: with penalties, a request decoding
// beside others gives the tokens it gives alone.
TEST(SamplerStages, PenaltyStateIsPerSequenceInABatch) {
  auto m =
      Model::load(std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/qwen2moe-f32.gguf");
  SamplingParams sp;
  sp.frequency_penalty = 1.f;
  sp.presence_penalty = 0.5f;
  sp.repeat_penalty = 1.3f;
  sp.repeat_last_n = 8;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {5, 6}, {1, 2, 3}, {9}};
  auto run = [&](const std::vector<size_t>& which) {
    ContextOptions co;
    co.n_threads = 1;
    co.n_ctx = 64;
    Context ctx(*m, co);
    Scheduler s(ctx, {});
    std::vector<std::vector<int32_t>> out(which.size());
    for (size_t k = 0; k < which.size(); ++k) {
      GenerationRequest r;
      r.prompt = prompts[which[k]];
      r.max_tokens = 12;
      r.sampling = sp;
      r.on_token = [&out, k](int32_t t) {
        out[k].push_back(t);
        return true;
      };
      s.submit(std::move(r));
    }
    s.run_until_idle();
    return out;
  };
  const auto batched = run({0, 1, 2, 3});
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(batched[i], run({i})[0]) << i;
  }
  EXPECT_EQ(batched[0], batched[2]);  // the same prompt: the same tokens, no shared counts
  // The penalties change the greedy tokens (else the above would hold without them).
  sp = {};
  EXPECT_NE(run({0, 1, 2, 3}), batched);
}

// A constraint given as a fixed set of allowed tokens per step (from a seed), with or without
// the mask bits: the sampler's pick among the bits must be what masking a copy gives.
class SetConstraint final : public TokenConstraint {
 public:
  SetConstraint(size_t n_vocab, size_t n_index, bool bits, unsigned seed)
      : n_(n_vocab), index_(n_index), give_bits_(bits), rng_(seed) {
    next();
  }
  bool allows(int32_t t) override { return size_t(t) < index_ && on(size_t(t)); }
  bool apply(std::span<float> logits) override {
    bool any = false;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (allows(int32_t(i))) {
        any = true;
      } else {
        logits[i] = -std::numeric_limits<float>::infinity();
      }
    }
    return any;
  }
  const uint64_t* mask_bits(size_t& n) override {
    n = index_;
    return give_bits_ ? bits_.data() : nullptr;
  }
  void accept(int32_t) override { next(); }

 private:
  bool on(size_t i) const { return (bits_[i >> 6] >> (i & 63)) & 1; }
  void next() {  // a new allowed set: dense, sparse, whole words, or empty now and then
    bits_.assign((index_ + 63) / 64, 0);
    const unsigned kind = rng_() % 5;
    for (size_t i = 0; i < index_; ++i) {
      const bool a = kind == 0   ? rng_() % 2 == 0
                     : kind == 1 ? rng_() % 97 == 0
                     : kind == 2 ? (i / 64) % 3 != 1
                     : kind == 3 ? i % 5 == 2
                                 : rng_() % 1000 == 0;
      if (a) bits_[i >> 6] |= uint64_t(1) << (i & 63);
    }
  }
  size_t n_, index_;
  bool give_bits_;
  std::mt19937 rng_;
  std::vector<uint64_t> bits_;
};

TEST(SamplerConstrained, MaskBitsPickWhatTheMaskedCopyPicks) {
  const size_t n = 1000;  // logits; the constraint's vocabulary is smaller (a wider output layer)
  std::vector<SamplingParams> ps(8);
  ps[1].temperature = 1.f;
  ps[2].temperature = 0.7f;
  ps[2].top_k = 40;
  ps[3].temperature = 1.f;
  ps[3].top_p = 0.9f;
  ps[4].temperature = 1.3f;
  ps[4].min_p = 0.05f;
  ps[5].typical_p = 0.8f;
  ps[6].temperature = 1.f;
  ps[6].frequency_penalty = 0.5f;
  ps[6].logit_bias = {{3, -std::numeric_limits<float>::infinity()}, {10, 2.f}};
  ps[7].logit_bias = {{5, 1.5f}};
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 2.f);
  for (size_t k = 0; k < ps.size(); ++k) {
    ps[k].seed = 100 + k;
    Sampler with(ps[k]), without(ps[k]);
    SetConstraint cw(n, n - 37, true, unsigned(k)), co(n, n - 37, false, unsigned(k));
    int picked = 0, none = 0;
    for (int step = 0; step < 300; ++step) {
      std::vector<float> logits(n);
      for (float& x : logits) x = normal(rng);
      if (step % 7 == 0) logits[size_t(step) % n] = -std::numeric_limits<float>::infinity();
      const int32_t a = with.sample(logits, &cw);
      const int32_t b = without.sample(logits, &co);
      ASSERT_EQ(a, b) << "params " << k << " step " << step;
      if (a < 0) {  // the sampler accepted nothing: move both constraints to a new set
        cw.accept(-1);
        co.accept(-1);
        ++none;
        continue;
      }
      ++picked;
      for (int32_t t : {a, 0, 1, int32_t(n) - 1, int32_t(step)}) {
        const float la = with.last_logprob(t), lb = without.last_logprob(t);
        if (std::isinf(lb)) {
          EXPECT_EQ(la, lb);
        } else {
          EXPECT_FLOAT_EQ(la, lb) << "params " << k << " token " << t;
        }
      }
    }
    EXPECT_GT(picked, 200) << k;
    EXPECT_GT(none, 0) << k;  // some steps allow nothing: both give -1
  }
}

}  // namespace
}  // namespace lynx
