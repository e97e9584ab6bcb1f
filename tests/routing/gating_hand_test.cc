// The gatings of DeepSeek-V3, GLM-4.5 and gpt-oss on hand-computed cases (docs/routing.md,
// "Selection keys"): the selection bias chooses but does not weigh, the group limit, softmax
// over the selected experts, sigmoid with normalization and routed scale; then every policy's
// contract on these gatings, and what Lynx's bins are on a sigmoid-with-bias router.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "helpers.h"
#include "routing/gating.h"
#include "routing/lynx.h"

namespace lynx {
namespace {

double sigm(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

// One token routed exactly with selection keys made from `bias`.
struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> w, keys;
};
Routed route_one(const GatingConfig& g, const std::vector<float>& z, const float* bias) {
  Routed r;
  r.ids.assign(size_t(g.n_expert_used), -1);
  r.w.assign(size_t(g.n_expert_used), -1.f);
  r.keys.assign(z.size(), 0.f);
  RoutingInput in;
  in.logits = z.data();
  in.n_tokens = 1;
  in.gating = &g;
  if (needs_selection_keys(g)) {
    selection_keys(g, z.data(), bias, 1, r.keys.data());
    in.select = r.keys.data();
  }
  RoutingOutput out{r.ids.data(), r.w.data()};
  route_topk(in, out);
  return r;
}

// z = [2, 1, 0, -1], sigmoid p = [.8808, .7311, .5, .2689]; bias +0.9 on e2 makes its score
// 1.4, the highest: chosen {e2, e0}. Weights from p alone: norm over {.5, .8808} times 2.5.
TEST(Gating, SigmoidBiasChoosesButDoesNotWeigh) {
  GatingConfig g{4, 2, GatingFunc::kSigmoid, true, 2.5f};
  g.select_bias = true;
  const std::vector<float> z = {2.f, 1.f, 0.f, -1.f};
  const float bias[4] = {0.f, 0.f, 0.9f, 0.f};
  const Routed r = route_one(g, z, bias);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 0}));
  const double sum = sigm(0) + sigm(2);
  EXPECT_NEAR(r.w[0], 2.5 * sigm(0) / sum, 1e-6);  // 0.905274
  EXPECT_NEAR(r.w[1], 2.5 * sigm(2) / sum, 1e-6);  // 1.594726
  // Keys of unbiased experts are their logits again (log-odds of sigmoid(z)).
  EXPECT_NEAR(r.keys[0], 2.f, 1e-4);
  EXPECT_NEAR(r.keys[1], 1.f, 1e-4);
  EXPECT_NEAR(r.keys[3], -1.f, 1e-4);
  EXPECT_GT(r.keys[2], r.keys[0]);  // score 1.4 > 1: on the linear extension, still first
}

// A negative bias can push a score below 0: the key keeps the order of p + b there too.
TEST(Gating, SelectionKeysKeepTheOrderOfBiasedScoresOutsideZeroOne) {
  GatingConfig g{4, 3, GatingFunc::kSigmoid, false, 1.f};
  g.select_bias = true;
  const std::vector<float> z = {0.f, 0.f, 0.f, 0.f};   // p = 0.5 each
  const float bias[4] = {-0.7f, -0.6f, 0.6f, -0.55f};  // scores -0.2, -0.1, 1.1, -0.05
  const Routed r = route_one(g, z, bias);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3, 1}));
  EXPECT_LT(r.keys[0], r.keys[1]);
  for (float w : r.w) EXPECT_FLOAT_EQ(w, 0.5f);  // unnormalized sigmoid, bias not in it
}

// 8 experts in 4 groups of 2, 2 groups used, k = 2, softmax:
//   z = [5, -10 | 4.5, 4.4 | 4.8, -10 | -10, -10]
// group scores (sum of the two best probabilities, proportional to) e^5 = 148.4,
// e^4.5 + e^4.4 = 171.5, e^4.8 = 121.5, ~0: groups 1 and 0 stay. Plain top-2 would be
// {e0, e4}; limited it is {e0, e2}, weights softmax over those: 1/(1+e^-0.5), e^-0.5/(1+e^-0.5).
TEST(Gating, GroupLimitedTopK) {
  GatingConfig g{8, 2, GatingFunc::kSoftmax, true, 1.f};
  const std::vector<float> z = {5.f, -10.f, 4.5f, 4.4f, 4.8f, -10.f, -10.f, -10.f};
  EXPECT_EQ(route_one(g, z, nullptr).ids, (std::vector<int32_t>{0, 4}));
  g.n_group = 4;
  g.n_group_used = 2;
  const Routed r = route_one(g, z, nullptr);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2}));
  EXPECT_NEAR(r.w[0], 1 / (1 + std::exp(-0.5)), 1e-6);  // 0.622459
  EXPECT_NEAR(r.w[1], std::exp(-0.5) / (1 + std::exp(-0.5)), 1e-6);
  const float inf = std::numeric_limits<float>::infinity();
  for (int e = 4; e < 8; ++e) EXPECT_EQ(r.keys[size_t(e)], -inf) << e;
  for (int e = 0; e < 4; ++e) EXPECT_EQ(r.keys[size_t(e)], z[size_t(e)]) << e;
}

// The group limit with DeepSeek-V3's sigmoid + bias: groups ranked by biased scores.
// 4 experts, 2 groups of 2, 1 used, k = 2: z = 0 everywhere (p = 0.5), bias [0, 0, .1, .1]:
// group 1 scores 1.2 against 1.0, so {e2, e3} although the logits tie.
TEST(Gating, GroupLimitRanksGroupsByBiasedScores) {
  GatingConfig g{4, 2, GatingFunc::kSigmoid, true, 1.f};
  g.select_bias = true;
  g.n_group = 2;
  g.n_group_used = 1;
  const std::vector<float> z = {0.f, 0.f, 0.f, 0.f};
  const float bias[4] = {0.f, 0.f, 0.1f, 0.1f};
  const Routed r = route_one(g, z, bias);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));
  EXPECT_FLOAT_EQ(r.w[0], 0.5f);
  EXPECT_FLOAT_EQ(r.w[1], 0.5f);
}

// gpt-oss: chosen by logit, weighed by a softmax over the chosen logits only:
// z = [1, 3, 2, 0], k = 2 -> {e1, e2}, softmax([3, 2]) = [0.731059, 0.268941], with or without
// norm_topk (a softmax already sums to 1).
TEST(Gating, SoftmaxOverSelected) {
  for (bool norm : {false, true}) {
    GatingConfig g{4, 2, GatingFunc::kSoftmaxWeight, norm, 1.f};
    const Routed r = route_one(g, {1.f, 3.f, 2.f, 0.f}, nullptr);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
    EXPECT_NEAR(r.w[0], sigm(1), 1e-6);
    EXPECT_NEAR(r.w[1], 1 - sigm(1), 1e-6);
  }
}

// The router probability the statistics, budget, ser and cover read is the softmax over all N
// for gpt-oss's gating too (its softmax over the selected is only how it weighs), not a
// sigmoid: z = [1, 3, 2, 0] -> p_1 = e^3 / (e + e^3 + e^2 + 1).
TEST(Gating, SoftmaxWeightProbabilityIsTheSoftmaxOverAll) {
  const std::vector<float> z = {1.f, 3.f, 2.f, 0.f};
  const double sum = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  for (GatingFunc f : {GatingFunc::kSoftmax, GatingFunc::kSoftmaxWeight}) {
    const routing::RowGate rg = routing::row_gate(z.data(), 4, f);
    EXPECT_NEAR(routing::gate_prob(z[1], rg, f), std::exp(3.0) / sum, 1e-6);
    EXPECT_NEAR(routing::gate_prob(z[3], rg, f), 1.0 / sum, 1e-6);
  }
  const routing::RowGate rg = routing::row_gate(z.data(), 4, GatingFunc::kSigmoid);
  EXPECT_NEAR(routing::gate_prob(z[1], rg, GatingFunc::kSigmoid), sigm(3), 1e-6);
}

// DeepSeek-V3 / GLM-4.5 weights without bias: sigmoid, normalized, times the routed scale.
// z = [0, 2, -1, 1], k = 2 -> {e1, e3}; w = 2.5 * [.8808, .7311] / 1.6119 = [1.366138, 1.133862].
TEST(Gating, SigmoidNormalizedAndScaled) {
  GatingConfig g{4, 2, GatingFunc::kSigmoid, true, 2.5f};
  const Routed r = route_one(g, {0.f, 2.f, -1.f, 1.f}, nullptr);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(r.w[0], 2.5 * sigm(2) / (sigm(2) + sigm(1)), 1e-6);
  EXPECT_NEAR(r.w[1], 2.5 * sigm(1) / (sigm(2) + sigm(1)), 1e-6);
}

TEST(Gating, RejectsMissingKeysAndBadGroups) {
  std::vector<float> z(8, 0.f);
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  RoutingOutput out{ids.data(), w.data()};
  GatingConfig g{8, 2, GatingFunc::kSigmoid, true, 1.f};
  g.select_bias = true;
  RoutingInput in;
  in.logits = z.data();
  in.n_tokens = 1;
  in.gating = &g;
  EXPECT_THROW(route_topk(in, out), Error);  // bias but no keys
  g.select_bias = false;
  g.n_group = 3;  // does not divide 8
  std::vector<float> keys(8);
  EXPECT_THROW(selection_keys(g, z.data(), nullptr, 1, keys.data()), Error);
  g.n_group = 4;
  g.n_group_used = 1;  // 1 group of 2 experts cannot give k = 3
  g.n_expert_used = 3;
  in.select = keys.data();
  ids.resize(3);
  w.resize(3);
  out = {ids.data(), w.data()};
  EXPECT_THROW(route_topk(in, out), Error);
}

const std::vector<std::string> kSpecs = {
    "topk",     "lynx",       "lynx:protect-top1=0", "lynx:alpha=3,beta=2.5", "oea:k0=1",
    "oea:k0=3", "budget:m=1", "budget:m=12",         "ser:kmin=1,t=0.3",      "static-k:k=2",
};

// Every policy on DeepSeek-V3-like gatings (sigmoid, bias, 8 groups of which 4 are used, k of
// 64) and gpt-oss's: k distinct ids, finite non-negative weights, every ACTIVE expert in one of
// the token's allowed groups (keys finite), prefill/exact tokens exactly top-k, and the top-1
// kept (except lynx without protect-top1).
TEST(Gating, EveryPolicyKeepsItsContractOnTheNewGatings) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nb(0.f, 0.3f);
  struct G {
    GatingFunc func;
    bool bias;
    int groups, used;
  };
  int checked = 0;
  for (const G& gc :
       {G{GatingFunc::kSigmoid, true, 8, 4}, G{GatingFunc::kSigmoid, true, 1, 1},
        G{GatingFunc::kSoftmax, false, 8, 3}, G{GatingFunc::kSoftmaxWeight, false, 1, 1},
        G{GatingFunc::kSigmoid, false, 4, 1}}) {
    for (int T : {1, 4, 16, 48}) {
      const int N = 64, k = gc.used == 1 && gc.groups == 4 ? 6 : 8;
      GatingConfig g{N, k, gc.func, gc.func != GatingFunc::kSoftmaxWeight, 2.5f};
      g.select_bias = gc.bias;
      g.n_group = gc.groups;
      g.n_group_used = gc.used;
      auto z = test::random_logits(rng, T, N, 1.5f, T == 16);
      std::vector<float> bias(static_cast<size_t>(N));
      for (float& b : bias) b = nb(rng);
      std::vector<float> keys(z.size());
      selection_keys(g, z.data(), gc.bias ? bias.data() : nullptr, T, keys.data());
      std::vector<uint8_t> flags(size_t(T), kTokenDecode);
      for (int t = 0; t < T; t += 5) flags[size_t(t)] = t % 2 ? kTokenExact : kTokenPrefill;
      test::Step ref(z, T, g);
      ref.flags = flags;
      auto rin = ref.in();
      rin.select = keys.data();
      auto rout = ref.out();
      route_topk(rin, rout);
      for (const auto& spec : kSpecs) {
        SCOPED_TRACE(spec + " T=" + std::to_string(T) + " groups=" + std::to_string(gc.groups));
        test::Step s(z, T, g);
        s.flags = flags;
        auto in = s.in();
        in.select = keys.data();
        auto out = s.out();
        make_routing_policy(spec, g)->route(in, out);
        for (int t = 0; t < T; ++t) {
          const int32_t* ids = &s.ids[size_t(t) * k];
          const float* w = &s.weights[size_t(t) * k];
          ASSERT_EQ(int(std::set<int32_t>(ids, ids + k).size()), k);
          for (int j = 0; j < k; ++j) {
            ASSERT_TRUE(ids[j] >= 0 && ids[j] < N);
            ASSERT_TRUE(std::isfinite(w[j]) && w[j] >= 0.f);
            if (w[j] > 0.f) {
              ASSERT_TRUE(std::isfinite(keys[size_t(t) * N + size_t(ids[j])]))
                  << "expert " << ids[j] << " outside the token's groups";
            }
          }
          if (flags[size_t(t)] != kTokenDecode) {
            for (int j = 0; j < k; ++j) ASSERT_EQ(ids[j], ref.ids[size_t(t) * k + j]);
          }
          if (spec != "lynx:protect-top1=0") {
            bool kept = false;
            for (int j = 0; j < k; ++j) kept |= ids[j] == ref.ids[size_t(t) * k] && w[j] > 0.f;
            ASSERT_TRUE(kept);
          }
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 5 * 4 * int(kSpecs.size()));
}

// Lynx's bins on a sigmoid-with-bias router are on the selection keys, the log-odds of
// p + b: q = ceil(alpha (L(p_e + b_e) - L(p_top + b_top))), floored at -beta. Two decode tokens,
// 4 experts, k = 1, alpha = 1, beta = 2; bias [0, 0, 0.3, 0]:
//   t0 z = [2, -.5, 0, -2]: scores .8808, .3775, .8, .1192 -> L = 2, -.5, 1.386, -2
//                           -> q = 0, -2 (floor), 0 (ceil -.614), -2
//   t1 z = [-.5, 1, -1, -.3]: scores .3775, .7311, .5689, .4256 -> L = -.5, 1, .2776, -.3
//                           -> q = -1, 0, 0 (ceil -.722), -1
TEST(Gating, LynxBinsOnSigmoidWithBiasAreOnTheLogOddsOfTheBiasedScore) {
  GatingConfig g{4, 1, GatingFunc::kSigmoid, true, 1.f};
  g.select_bias = true;
  const std::vector<float> z = {2.f, -0.5f, 0.f, -2.f, -0.5f, 1.f, -1.f, -0.3f};
  const float bias[4] = {0.f, 0.f, 0.3f, 0.f};
  std::vector<float> keys(8);
  selection_keys(g, z.data(), bias, 2, keys.data());
  routing::LynxParams p;
  p.alpha = 1;
  p.beta = 2;
  routing::LynxPolicy pol(p);
  test::Step s(z, 2, g);
  auto in = s.in();
  in.select = keys.data();
  auto out = s.out();
  pol.route(in, out);
  const auto& st = pol.state();
  ASSERT_TRUE(st.applied);
  const std::vector<float> want_q = {0, -2, 0, -2, -1, 0, 0, -1};
  for (size_t i = 0; i < 8; ++i) {
    // An independent computation in double of the same definition.
    const int t = int(i / 4), e = int(i % 4);
    auto L = [&](int x) {
      const double sc = sigm(z[size_t(t * 4 + x)]) + bias[x];
      return std::log(sc / (1 - sc));
    };
    const int top = t == 0 ? 0 : 1;
    const double gq = L(e) - L(top);
    EXPECT_EQ(st.q[i], gq <= -2 ? -2.f : float(std::ceil(gq)) + 0.f) << i;
    EXPECT_EQ(st.q[i], want_q[i]) << i;
  }
}

}  // namespace
}  // namespace lynx
