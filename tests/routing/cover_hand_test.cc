// Hand-computed examples for the cover policy (docs/routing.md, "cover"), on 3 decode tokens,
// 6 experts, k = 2, softmax gating. The logits are ln(p), so the router probabilities are p:
//
//   p                e0    e1    e2    e3    e4    e5    exact top-2   M (top-2 mass)
//   t0              .48   .32   .12   .04   .03   .01    e0 e1         .80
//   t1              .05   .25   .45   .20   .03   .02    e2 e1         .70
//   t2              .05   .20   .03   .30   .40   .02    e4 e3         .70
//
// q = p / M:        e0    e1    e2    e3    e4    e5
//   t0              .600  .400  .150  .050  .0375 .0125
//   t1              .071  .357  .643  .286  .043  .029
//   t2              .071  .286  .043  .429  .571  .029
// Exact top-2 activates {e0, e1, e2, e3, e4}: 5 experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "helpers.h"
#include "lynx/routing.h"

namespace lynx {
namespace {

const double kP[3][6] = {
    {.48, .32, .12, .04, .03, .01}, {.05, .25, .45, .20, .03, .02}, {.05, .20, .03, .30, .40, .02}};

// The logits ln(p) of the table above, [3 x 6].
std::vector<float> logits() {
  std::vector<float> z;
  for (const auto& row : kP) {
    for (double p : row) z.push_back(float(std::log(p)));
  }
  return z;
}

test::Step run(const std::string& spec, std::vector<uint8_t> flags = {},
               std::vector<float> cost = {}) {
  test::Step s(logits(), 3, GatingConfig{6, 2, GatingFunc::kSoftmax, true, 1.f});
  s.flags = std::move(flags);
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

// Remap weights of token t over experts a, b: p renormalized over the pair.
void expect_weights(const test::Step& s, int t, int a, int b) {
  const double sum = kP[t][a] + kP[t][b];
  EXPECT_NEAR(s.weights[t * 2 + 0], kP[t][a] / sum, 1e-6) << t;
  EXPECT_NEAR(s.weights[t * 2 + 1], kP[t][b] / sum, 1e-6) << t;
}

// tau = 0.5: every top-1 has q >= 0.5, so the confident experts are the top-1s and
// U = {e0, e2, e4}. Each token's two best q within U: t0 .600 .150, t1 .643 .071,
// t2 .571 .071. Gains (q above the token's second best in U, summed):
//   e1: (.400 - .150) + (.357 - .071) + (.286 - .071) = .750
//   e3: 0 + (.286 - .071) + (.429 - .071) = .571
//   e5: 0.
// lambda = 0.6: e1 joins (.750). Second bests are now t0 .400, t1 .357, t2 .286; e3 gains
// only t2's .429 - .286 = .143 < 0.6: stop. U = {e0, e1, e2, e4}; t2 trades e3 for e1.
TEST(CoverHand, GreedyAddsTheExpertWithTheMostMass) {
  test::Step s = run("cover:tau=0.5,lambda=0.6");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 1}));
  EXPECT_EQ(distinct(s), 4);
  expect_weights(s, 0, 0, 1);  // unchanged: exact weights
  expect_weights(s, 1, 2, 1);
  expect_weights(s, 2, 4, 1);
}

// The expert tier (RoutingInput::cost): e1 would be read from disk (cost 20), e3 is resident
// (1), and so is every other expert but the confident e0 (20). lambda = 0.5; U starts at the
// top-1s {e0, e2, e4} whatever they cost. Gain per unit of cost: e1 .750 / 20 = .0375,
// e3 .571, e5 0: e3 joins. Second bests in U = {e0, e2, e3, e4}: t0 .150, t1 .286, t2 .429;
// e1 now gains (.400 - .150) + (.357 - .286) = .321, / 20 = .016 < .5: stop. t0 -> {e0, e2},
// t1 -> {e2, e3}, t2 keeps {e4, e3}. Without costs e1 joins instead (.750 first, then e3's
// .143 < .5): the exact {e0, e1, e2, e1, e4, e1} of the example above.
TEST(CoverHand, CostMovesChoicesOntoResidentExperts) {
  std::vector<float> cost(6, 1.f);
  cost[0] = cost[1] = 20.f;
  test::Step s = run("cover:tau=0.5,lambda=0.5", {}, cost);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 2, 2, 3, 4, 3}));
  EXPECT_EQ(distinct(s), 4);
  expect_weights(s, 0, 0, 2);
  expect_weights(s, 1, 2, 3);
  expect_weights(s, 2, 4, 3);
  EXPECT_EQ(run("cover:tau=0.5,lambda=0.5").ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 1}));
  // Every expert at cost 1 is the same as no costs.
  EXPECT_EQ(run("cover:tau=0.5,lambda=0.5", {}, std::vector<float>(6, 1.f)).ids,
            (std::vector<int32_t>{0, 1, 2, 1, 4, 1}));
}

// lambda = 0.1: e3's .143 also passes, U = {e0..e4} and every token keeps its exact top-2.
TEST(CoverHand, SmallLambdaIsExact) {
  test::Step s = run("cover:tau=0.5,lambda=0.1");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 3}));
  EXPECT_EQ(distinct(s), 5);
}

// lambda = 0.8: even e1 (.750) does not pay for itself, U stays {e0, e2, e4} (3 >= k).
// Each token takes its best two there: t0 e0 e2, t1 e2 e0 (.071 > e4's .043), t2 e4 e0.
TEST(CoverHand, LargeLambdaKeepsOnlyTheConfidentUnion) {
  test::Step s = run("cover:tau=0.5,lambda=0.8");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 2, 2, 0, 4, 0}));
  EXPECT_EQ(distinct(s), 3);
  expect_weights(s, 0, 0, 2);
  expect_weights(s, 1, 2, 0);
  expect_weights(s, 2, 4, 0);
}

// Confident = the shortest prefix of the exact top-k whose q reaches tau. With tau = 0.58,
// t0 (.600) and t1 (.643) are confident in their top-1 alone, t2 (.571 < .58) in both of its
// experts: U = {e0, e2, e4, e3}. Second bests in U: t0 .150 (e2), t1 .286 (e3), t2 .429.
// e1 gains .250 + .071 + 0 = .321 < 0.8: stop. t2 keeps e3, the choice lambda = 0.8 took
// from it at tau = 0.5 above; t1 takes e3 instead of e1.
TEST(CoverHand, ConfidentPrefixIsKept) {
  test::Step s = run("cover:tau=0.58,lambda=0.8");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 2, 2, 3, 4, 3}));
  EXPECT_EQ(distinct(s), 4);
  expect_weights(s, 1, 2, 3);
}

// tau = 1 keeps every exact choice; so does lambda = 0 (the layer is routed exactly).
TEST(CoverHand, TauOneOrLambdaZeroIsExact) {
  for (const char* spec : {"cover:tau=1,lambda=0.8", "cover:lambda=0"}) {
    test::Step s = run(spec);
    EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 3})) << spec;
  }
}

// One decode token (t0, t2 exact, their experts not counted): U starts with t1's top-1, fewer
// than k, so the greedy adds its best remaining expert whatever lambda is: exact top-k.
TEST(CoverHand, OneTokenIsExact) {
  test::Step s =
      run("cover:tau=0,lambda=1000,piggyback-prefill=0", {kTokenExact, kTokenDecode, kTokenExact});
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 3}));
}

// t0 is a prefill token: it keeps exact top-2, and with piggyback-prefill its experts
// {e0, e1} are in U for free: U = {e0, e1, e2, e4}. Second bests: t1 .357 (e1), t2 .286
// (e1); e3 gains .429 - .286 = .143 < 0.8, so t2 takes e1 and t1 is exact.
// piggyback-prefill=0: U = {e2, e4}; second bests t1 .043, t2 .043; gains e1 .314 + .243 =
// .557, e3 .243 + .386 = .629, both < 0.8: t1 takes e2 e4, t2 e4 e2.
TEST(CoverHand, PrefillExpertsJoinTheSet) {
  const std::vector<uint8_t> f = {kTokenPrefill, kTokenDecode, kTokenDecode};
  test::Step s = run("cover:tau=0.5,lambda=0.8", f);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 1}));
  test::Step off = run("cover:tau=0.5,lambda=0.8,piggyback-prefill=0", f);
  EXPECT_EQ(off.ids, (std::vector<int32_t>{0, 1, 2, 4, 4, 2}));
  expect_weights(off, 1, 2, 4);
}

// growth = 1 scales lambda by B / 16: with 3 decode tokens lambda = 3.2 acts as 0.6 (the
// first example: U = {e0, e1, e2, e4}), with growth = 0 as 3.2 (nothing joins: U = {e0, e2,
// e4}, as for lambda = 0.8 above).
TEST(CoverHand, LambdaGrowsWithTheBatch) {
  test::Step s = run("cover:tau=0.5,lambda=3.2,growth=1");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 1}));
  test::Step flat = run("cover:tau=0.5,lambda=3.2");
  EXPECT_EQ(flat.ids, (std::vector<int32_t>{0, 2, 2, 0, 4, 0}));
}

// Per-layer lambda: the last value holds for later layers; 0 routes the layer exactly.
TEST(CoverHand, PerLayerLambda) {
  const std::vector<float> z = logits();
  auto policy = make_routing_policy("cover:tau=0.5,lambda=0/0.8");
  for (int layer : {0, 1, 5}) {
    test::Step s(z, 3, GatingConfig{6, 2, GatingFunc::kSoftmax, true, 1.f});
    auto in = s.in();
    in.layer = layer;
    auto out = s.out();
    policy->route(in, out);
    EXPECT_EQ(distinct(s), layer == 0 ? 5 : 3) << layer;
  }
}

// Per-layer tau, like lambda: layer 0 at tau 0.5 and layer 1 at tau 0.58 give the two
// examples above at lambda 0.8 (U = {e0, e2, e4} and {e0, e2, e3, e4}); later layers take
// the last value. The spec lists both.
TEST(CoverHand, PerLayerTau) {
  const std::vector<float> z = logits();
  auto policy = make_routing_policy("cover:tau=0.5/0.58,lambda=0.8");
  EXPECT_EQ(policy->spec(), "cover:tau=0.5/0.58,lambda=0.8");
  for (int layer : {0, 1, 3}) {
    test::Step s(z, 3, GatingConfig{6, 2, GatingFunc::kSoftmax, true, 1.f});
    auto in = s.in();
    in.layer = layer;
    auto out = s.out();
    policy->route(in, out);
    if (layer == 0) {
      EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 2, 2, 0, 4, 0}));
    } else {
      EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 2, 2, 3, 4, 3})) << layer;
    }
  }
  EXPECT_THROW(make_routing_policy("cover:tau=0.5/1.5"), Error);
}

// The contract on random batches: every decode token keeps its confident prefix (computed
// here in double from the definition), whatever lambda; a prefix whose mass lies within 1e-4
// of tau is skipped (float and double may round it to different sides).
TEST(CoverHand, ConfidentPrefixKeptOnRandomBatches) {
  std::mt19937_64 rng(11);
  for (const GatingConfig g : {GatingConfig{64, 8, GatingFunc::kSoftmax, true, 1.f},
                               GatingConfig{32, 4, GatingFunc::kSigmoid, false, 1.f}}) {
    for (const auto& [spec, tau] :
         {std::pair<const char*, double>{"cover:tau=0.3,lambda=0.5", 0.3},
          std::pair<const char*, double>{"cover:tau=0.6,lambda=3", 0.6}}) {
      for (int T : {1, 4, 16, 32}) {
        const int N = g.n_expert, k = g.n_expert_used;
        test::Step s(test::random_logits(rng, T, N, 1.f, false), T, g);
        test::Step ref = s;
        auto in = s.in();
        auto out = s.out();
        make_routing_policy(spec)->route(in, out);
        auto rin = ref.in();
        auto rout = ref.out();
        route_topk(rin, rout);
        for (int t = 0; t < T; ++t) {
          const float* z = &s.logits[size_t(t) * N];
          const int32_t* ex = &ref.ids[size_t(t) * k];
          double m = 0;
          for (int j = 0; j < k; ++j) m += test::ref_prob(z, N, ex[j], g.func);
          double cum = 0;
          for (int j = 0; j < k; ++j) {
            if (j > 0 && std::fabs(cum / m - tau) < 1e-4) break;
            if (j > 0 && cum / m >= tau) break;
            const int32_t* ids = &s.ids[size_t(t) * k];
            EXPECT_NE(std::find(ids, ids + k, ex[j]), ids + k)
                << spec << " T=" << T << " token " << t << " confident expert " << ex[j];
            cum += test::ref_prob(z, N, ex[j], g.func);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lynx
