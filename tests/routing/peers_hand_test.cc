// Hand-computed examples for oea, budget, ser and static-k (issue 4), on 3 decode tokens,
// 8 experts, k = 3, softmax gating.
//
// logits                 e0    e1    e2    e3    e4    e5    e6    e7     exact top-3
//   t0                  2.0   1.5   0.2  -1.0   1.8   0.0  -3.0   0.5    e0 e4 e1
//   t1                  0.1   3.0   2.6   0.0  -0.5   2.2   1.0  -2.0    e1 e2 e5
//   t2                  0.0  -0.5   0.8   0.9   1.2  -1.0   0.2  -0.6    e4 e3 e2
// Exact top-k activates {0, 1, 2, 3, 4, 5}: 6 experts.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "lynx/routing.h"

namespace lynx {
namespace {

const std::vector<float> kZ = {
    2.0f, 1.5f,  0.2f, -1.0f, 1.8f,  0.0f,  -3.0f, 0.5f,   //
    0.1f, 3.0f,  2.6f, 0.0f,  -0.5f, 2.2f,  1.0f,  -2.0f,  //
    0.0f, -0.5f, 0.8f, 0.9f,  1.2f,  -1.0f, 0.2f,  -0.6f,  //
};

test::Step run(const std::string& spec, bool norm = true, int T = 3, std::vector<float> cost = {}) {
  test::Step s(std::vector<float>(kZ.begin(), kZ.begin() + 8 * T), T,
               GatingConfig{8, 3, GatingFunc::kSoftmax, norm, 1.f});
  s.cost = std::move(cost);
  auto in = s.in();
  auto out = s.out();
  make_routing_policy(spec)->route(in, out);
  return s;
}

int distinct(const test::Step& s) {
  RoutingStats st;
  accumulate_routing_stats(
      s.in(),
      RoutingOutput{const_cast<int32_t*>(s.ids.data()), const_cast<float*>(s.weights.data())}, st);
  return int(st.distinct_policy);
}

// Softmax over the given experts of token row t, renormalized (the remap weight rule).
std::vector<double> softmax_over(int t, std::vector<int> ids) {
  double s = 0;
  std::vector<double> w;
  for (int e : ids) s += std::exp(double(kZ[t * 8 + e]));
  for (int e : ids) w.push_back(std::exp(double(kZ[t * 8 + e])) / s);
  return w;
}

void expect_weights(const test::Step& s, int t, const std::vector<double>& want) {
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(s.weights[t * 3 + j], want[j], 1e-6) << t << "," << j;
}

// k0 = 1: U0 = {e0, e1, e4} (the top-1s). t0's top-3 already lies in U0; t1 fills with
// e0 (0.1) and e4 (-0.5), t2 with e0 (0.0) and e1 (-0.5): 3 experts for the batch.
TEST(PeersHand, OeaK0One) {
  test::Step s = run("oea:k0=1");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 1, 0, 4, 4, 0, 1}));
  EXPECT_EQ(distinct(s), 3);
  expect_weights(s, 1, softmax_over(1, {1, 0, 4}));
  expect_weights(s, 2, softmax_over(2, {4, 0, 1}));
}

// k0 = 2: U0 = {0, 4} + {1, 2} + {4, 3} = {0..4}. t1 keeps e1, e2 and takes e0 (0.1 beats
// e3's 0.0 and e4's -0.5) instead of e5; t0 and t2 find their third expert in U0 already.
TEST(PeersHand, OeaK0Two) {
  test::Step s = run("oea:k0=2");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 1, 2, 0, 4, 3, 2}));
  EXPECT_EQ(distinct(s), 5);
}

// window (ours): a substitute stands in for a dropped exact choice only when its logit is at
// most W below it (best substitute for the best dropped choice). k0 = 1 as above: t1 drops e2
// (2.6) and e5 (2.2) for e0 (0.1) and e4 (-0.5): at W = 2.6 e0 replaces e2 (2.5 below) but e4
// is 2.7 below e5, so t1 keeps e5; t2 drops e3 (0.9) and e2 (0.8) for e0 (0.0, 0.9 below) and
// e1 (-0.5, 1.3 below): both within 2.6, within 1 only e0. W = 0 is exact top-k.
TEST(PeersHand, OeaWindowKeepsFarChoices) {
  test::Step wide = run("oea:k0=1,window=2.6");
  EXPECT_EQ(wide.ids, (std::vector<int32_t>{0, 4, 1, 1, 5, 0, 4, 0, 1}));
  EXPECT_EQ(distinct(wide), 4);
  expect_weights(wide, 1, softmax_over(1, {1, 5, 0}));
  test::Step narrow = run("oea:k0=1,window=1");
  EXPECT_EQ(narrow.ids, (std::vector<int32_t>{0, 4, 1, 1, 2, 5, 4, 2, 0}));
  EXPECT_EQ(distinct(narrow), 5);
  EXPECT_EQ(run("oea:k0=1,window=0").ids, run("topk").ids);
  EXPECT_EQ(run("oea:k0=1,window=1000").ids, run("oea:k0=1").ids);
  EXPECT_EQ(make_routing_policy("oea:window=1.5,k0=2")->spec(), "oea:k0=2,window=1.5");
  EXPECT_THROW(make_routing_policy("oea:k0=2,window=-1"), Error);
}

// mass=P (ours): a token keeps the shortest prefix of its exact top-3 (at least k0) whose
// probability reaches P of the top-3's; shares of the top-3 mass, best first:
//   t0 0.412 0.338 0.250;  t1 0.472 0.316 0.212;  t2 0.415 0.307 0.278.
// P = 0.45: t0 keeps e0 e4, t1 keeps e1 alone, t2 keeps e4 e3; U0 = {0, 1, 3, 4}. t0's top-3
// lies in U0; t1 fills with e0 (0.1) and e3 (0.0) instead of e2 and e5, t2 takes e0 (0.0)
// instead of e2: 4 experts, between k0 = 1 (3) and k0 = 2 (5).
TEST(PeersHand, OeaMassKeepsAPrefixByProbability) {
  test::Step s = run("oea:mass=0.45");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 1, 0, 3, 4, 3, 0}));
  EXPECT_EQ(distinct(s), 4);
  expect_weights(s, 0, softmax_over(0, {0, 4, 1}));
  expect_weights(s, 1, softmax_over(1, {1, 0, 3}));
  expect_weights(s, 2, softmax_over(2, {4, 3, 0}));
  // P = 0.4: every top-1 reaches it, as k0 = 1; k0 stays a minimum; P = 1 is exact top-k.
  EXPECT_EQ(run("oea:mass=0.4").ids, run("oea:k0=1").ids);
  EXPECT_EQ(run("oea:k0=2,mass=0.45").ids, run("oea:k0=2").ids);
  EXPECT_EQ(run("oea:mass=1").ids, run("topk").ids);
  EXPECT_EQ(run("oea:mass=1").weights, run("topk").weights);
  // Exact tokens keep exact top-k: t1 asks for it and stays e1 e2 e5.
  test::Step f(kZ, 3, GatingConfig{8, 3, GatingFunc::kSoftmax, true, 1.f});
  f.flags = {kTokenDecode, kTokenExact, kTokenDecode};
  auto fout = f.out();
  make_routing_policy("oea:mass=0.45")->route(f.in(), fout);
  EXPECT_EQ(std::vector<int32_t>(f.ids.begin() + 3, f.ids.begin() + 6),
            (std::vector<int32_t>{1, 2, 5}));
  EXPECT_EQ(make_routing_policy("oea:mass=0.45")->spec(), "oea:k0=1,mass=0.45");
  EXPECT_THROW(make_routing_policy("oea:mass=1.5"), Error);
}

// mass-resident: a token's resident choices count toward P first. P = 0.6, e2 resident:
// without the option t0 keeps e0 e4, t1 e1 e2, t2 e4 e3 (U0 = {0..4}); with it t2's e4 (0.415)
// and resident e2 (0.278) reach 0.6, so t2 no longer keeps e3 (0.307): U0 = {0, 1, 2, 4},
// t2 takes e0 (0.0) for e3, and the batch reads 4 experts instead of 5.
TEST(PeersHand, OeaMassResidentCountsResidentChoicesFirst) {
  auto with_e2_resident = [](const std::string& spec) {
    test::Step s(kZ, 3, GatingConfig{8, 3, GatingFunc::kSoftmax, true, 1.f});
    s.resident = {0, 0, 1, 0, 0, 0, 0, 0};
    auto out = s.out();
    make_routing_policy(spec)->route(s.in(), out);
    return s;
  };
  test::Step plain = with_e2_resident("oea:mass=0.6");
  EXPECT_EQ(plain.ids, (std::vector<int32_t>{0, 4, 1, 1, 2, 0, 4, 3, 2}));
  EXPECT_EQ(distinct(plain), 5);
  test::Step res = with_e2_resident("oea:mass=0.6,mass-resident");
  EXPECT_EQ(res.ids, (std::vector<int32_t>{0, 4, 1, 1, 2, 0, 4, 2, 0}));
  EXPECT_EQ(distinct(res), 4);
  expect_weights(res, 2, softmax_over(2, {4, 2, 0}));
  // No residency: the same as mass alone; P = 1 stays exact.
  EXPECT_EQ(run("oea:mass=0.6,mass-resident").ids, run("oea:mass=0.6").ids);
  EXPECT_EQ(with_e2_resident("oea:mass=1,mass-resident").ids, run("topk").ids);
  EXPECT_EQ(make_routing_policy("oea:mass-resident,mass=0.6")->spec(),
            "oea:k0=1,mass=0.6,mass-resident=1");
  EXPECT_THROW(make_routing_policy("oea:k0=2,mass-resident"), Error);
}

// rescue=L (ours): k0 = 1 drops e2 for t1 (share 0.316 of its top-3 mass) and t2 (0.278),
// e3 for t2 (0.307), e5 for t1 (0.212). e2 carries 0.594 of a token's mass in all: at L = 0.5 it
// joins U0 = {0, 1, 2, 4}, t1 -> {e1, e2, e0}, t2 -> {e4, e2, e0}; at L = 0.3 e3 joins too;
// at L = 0.6 nothing does. With a read cost of 20 for e2, L = 0.5 needs 10: e2 stays out.
TEST(PeersHand, OeaRescueReadsAChoiceSeveralTokensShare) {
  test::Step s = run("oea:k0=1,rescue=0.5");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 1, 2, 0, 4, 2, 0}));
  EXPECT_EQ(distinct(s), 4);
  expect_weights(s, 1, softmax_over(1, {1, 2, 0}));
  EXPECT_EQ(run("oea:k0=1,rescue=0.3").ids, (std::vector<int32_t>{0, 4, 1, 1, 2, 0, 4, 3, 2}));
  EXPECT_EQ(run("oea:k0=1,rescue=0.6").ids, run("oea:k0=1").ids);
  std::vector<float> cost(8, 1.f);
  cost[2] = 20.f;
  EXPECT_EQ(run("oea:k0=1,rescue=0.5", true, 3, cost).ids, run("oea:k0=1").ids);
  EXPECT_EQ(make_routing_policy("oea:rescue=0.5,k0=1")->spec(), "oea:k0=1,rescue=0.5");
}

// k0 per MoE layer (K0/K1/...; the last holds for later layers): layer 0 routes as k0 = 1,
// layers 1 and later as k0 = 2.
TEST(PeersHand, OeaK0PerLayer) {
  auto at_layer = [](const std::string& spec, int layer) {
    test::Step s(kZ, 3, GatingConfig{8, 3, GatingFunc::kSoftmax, true, 1.f});
    RoutingInput in = s.in();
    in.layer = layer;
    auto out = s.out();
    make_routing_policy(spec)->route(in, out);
    return s.ids;
  };
  EXPECT_EQ(at_layer("oea:k0=1/2", 0), run("oea:k0=1").ids);
  EXPECT_EQ(at_layer("oea:k0=1/2", 1), run("oea:k0=2").ids);
  EXPECT_EQ(at_layer("oea:k0=1/2", 5), run("oea:k0=2").ids);
  EXPECT_EQ(at_layer("oea:k0=1/3", 1), run("topk").ids);  // k0 = k: exact
  EXPECT_EQ(make_routing_policy("oea:k0=1/2")->spec(), "oea:k0=1/2");
  GatingConfig g{8, 3, GatingFunc::kSoftmax, true, 1.f};
  EXPECT_THROW(make_routing_policy("oea:k0=1/4", g), Error);  // above k in one layer
  EXPECT_THROW(make_routing_policy("oea:k0=1/2.5"), Error);
}

// One token: U0 = {e0} offers too few experts, so the fallback takes t0's next best overall.
TEST(PeersHand, OeaFallsBackToNextBestOverall) {
  test::Step s = run("oea:k0=1", true, 1);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1}));
}

// m = 3 = k: the three top-1s {e0, e1, e4} fill the budget; every token takes its top-3
// inside it.
TEST(PeersHand, BudgetTopOnesFillTheBudget) {
  test::Step s = run("budget:m=3");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 1, 0, 4, 4, 0, 1}));
  EXPECT_EQ(distinct(s), 3);
  // m = 1 < k: the set still grows to k experts (here the same 3), k per token.
  EXPECT_EQ(run("budget:m=1").ids, s.ids);
}

// m = 4: after the top-1s, coverage of the remaining top-k assignments:
//   e2: p1[e2] + p2[e2] = 0.2796 + 0.1894 = 0.469,  e3: p2[e3] = 0.209,  e5: p1[e5] = 0.187
// so e2 joins. t1 -> {e1, e2, e0}, t2 -> {e4, e2, e0}.
TEST(PeersHand, BudgetGreedyCoverage) {
  const double p1e2 = test::ref_prob(&kZ[8], 8, 2, GatingFunc::kSoftmax);
  const double p2e2 = test::ref_prob(&kZ[16], 8, 2, GatingFunc::kSoftmax);
  EXPECT_NEAR(p1e2 + p2e2, 0.469, 1e-3);
  test::Step s = run("budget:m=4");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 1, 2, 0, 4, 2, 0}));
  EXPECT_EQ(distinct(s), 4);
  expect_weights(s, 2, softmax_over(2, {4, 2, 0}));
}

// The expert tier (RoutingInput::cost): e2 and e5 would be read from disk (cost 20), e3 is
// resident. Coverage per unit of cost: e2 0.469 / 20 = 0.023, e3 0.209, e5 0.187 / 20 =
// 0.009, so e3 takes the fourth slot: t1 -> {e1, e0, e3} (logits 3.0, 0.1, 0.0), t2 ->
// {e4, e3, e0}. A top-1 that is not resident (e0 at cost 20) still joins first.
TEST(PeersHand, BudgetPrefersResidentExperts) {
  std::vector<float> cost(8, 1.f);
  cost[0] = cost[2] = cost[5] = 20.f;
  test::Step s = run("budget:m=4", true, 3, cost);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 1, 0, 3, 4, 3, 0}));
  EXPECT_EQ(distinct(s), 4);
  expect_weights(s, 1, softmax_over(1, {1, 0, 3}));
  // Every expert at the same cost routes as without costs.
  EXPECT_EQ(run("budget:m=4", true, 3, std::vector<float>(8, 7.f)).ids, run("budget:m=4").ids);
}

// t = 0.5: probability ratios to the top-1 are exp(z - z_top1):
//   t0: e4 0.819, e1 0.607 -> keep both;  t1: e2 0.670 keep, e5 0.449 drop;
//   t2: e3 0.741, e2 0.670 -> keep both.
// Dropped slots keep their id with weight 0; kept weights renormalized (norm_topk model).
TEST(PeersHand, SerThreshold) {
  test::Step s = run("ser:kmin=1,t=0.5");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 1, 2, 5, 4, 3, 2}));
  const auto w1 = softmax_over(1, {1, 2});
  expect_weights(s, 1, {w1[0], w1[1], 0.0});
  expect_weights(s, 0, softmax_over(0, {0, 4, 1}));
  EXPECT_EQ(s.weights[5], 0.f);
  // t = 0.7 drops e1 (0.607) for t0, e2 (0.670) for t1 and t2; kmin = 1 keeps the top-1.
  test::Step s7 = run("ser:kmin=1,t=0.7");
  expect_weights(s7, 1, {1.0, 0.0, 0.0});
  const auto w0 = softmax_over(0, {0, 4});
  expect_weights(s7, 0, {w0[0], w0[1], 0.0});
  // kmin = 2 keeps two whatever t says.
  test::Step k2 = run("ser:kmin=2,t=0.99");
  const auto w2 = softmax_over(2, {4, 3});
  expect_weights(k2, 2, {w2[0], w2[1], 0.0});
  RoutingStats st;
  accumulate_routing_stats(s7.in(), s7.out(), st);
  EXPECT_EQ(st.assignments_active, 2 + 1 + 2);
  EXPECT_EQ(st.distinct_policy, 4);  // {0, 4} + {1} + {4, 3}
}

// Unnormalized model: SER keeps the raw probabilities of the kept experts.
TEST(PeersHand, SerUnnormalizedKeepsRawProbabilities) {
  test::Step s = run("ser:kmin=1,t=0.5", /*norm=*/false);
  const float* z1 = &kZ[8];
  EXPECT_NEAR(s.weights[3], test::ref_prob(z1, 8, 1, GatingFunc::kSoftmax), 1e-6);
  EXPECT_NEAR(s.weights[4], test::ref_prob(z1, 8, 2, GatingFunc::kSoftmax), 1e-6);
  EXPECT_EQ(s.weights[5], 0.f);
}

TEST(PeersHand, StaticK) {
  test::Step s = run("static-k:k=1");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 1, 2, 5, 4, 3, 2}));
  for (int t = 0; t < 3; ++t) expect_weights(s, t, {1.0, 0.0, 0.0});
  EXPECT_EQ(distinct(s), 3);  // only the top-1s stay active: e0, e1, e4
}

TEST(PeersHand, StaticKTwoUnnormalized) {
  test::Step s = run("static-k:k=2", /*norm=*/false);
  const float* z0 = &kZ[0];
  EXPECT_NEAR(s.weights[0], test::ref_prob(z0, 8, 0, GatingFunc::kSoftmax), 1e-6);
  EXPECT_NEAR(s.weights[1], test::ref_prob(z0, 8, 4, GatingFunc::kSoftmax), 1e-6);
  EXPECT_EQ(s.weights[2], 0.f);
  // k' >= k is exact top-k.
  EXPECT_EQ(run("static-k:k=5").weights, run("topk").weights);
}

}  // namespace
}  // namespace lynx
