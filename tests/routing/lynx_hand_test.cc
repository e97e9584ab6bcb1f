// Lynx checked step by step on a hand-computed example (issue 4): 3 decode tokens, 8 experts,
// k = 2, alpha = 1, beta = 2, so B = 3 and h = 3^q in {1, 1/3, 1/9}.
//
// logits                 e0    e1    e2    e3    e4    e5    e6    e7
//   t0                  2.0   1.5   0.2  -1.0   1.8   0.0  -3.0   0.5   (top-2: e0, e4)
//   t1                  0.1   3.0   2.6   0.0  -0.5   2.2   1.0  -2.0   (top-2: e1, e2)
//   t2                  0.0  -0.5   0.8   0.9   1.2  -1.0   0.2  -0.6   (top-2: e4, e3)
// q = -2 if z - max <= -2 else ceil(z - max):
//   t0                    0     0    -1    -2     0    -2    -2    -1
//   t1                   -2     0     0    -2    -2     0    -2    -2
//   t2                   -1    -1     0     0     0    -2    -1    -1
// S = sum_t 3^q:  13/9  7/3  7/3  11/9  19/9  11/9  5/9  7/9
// m = q + (S - h) / 3, e.g. t0: e0 4/27, e1 4/9, e4 10/27 -- three experts in bin 0 for
// k = 2, and the bonus ranks t0's own top-1 (e0) LAST of them: without protect-top1 t0's
// critical picks are {e1, e4}; with it {e0, e1}.
// Critical picks: t1 {e1, e2} (m 4/9 each), t2 {e2 (4/9), e4 (10/27)} -- e3 (2/27) loses, no
// one else wants it. U = {0, 1, 2, 4} (protected) or {1, 2, 4} (original).
// Remap (top-2 by logit inside U):
//   protected: t0 {e0, e4}, t1 {e1, e2}, t2 {e4, e2}  -> 4 distinct experts instead of 5
//   original:  t0 {e4, e1}, t1 {e1, e2}, t2 {e4, e2}  -> 3, but t0 lost its top-1
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "helpers.h"
#include "routing/lynx.h"

namespace lynx {
namespace {

const std::vector<float> kZ = {
    2.0f, 1.5f,  0.2f, -1.0f, 1.8f,  0.0f,  -3.0f, 0.5f,   //
    0.1f, 3.0f,  2.6f, 0.0f,  -0.5f, 2.2f,  1.0f,  -2.0f,  //
    0.0f, -0.5f, 0.8f, 0.9f,  1.2f,  -1.0f, 0.2f,  -0.6f,  //
};

routing::LynxParams params(bool protect) {
  routing::LynxParams p;
  p.alpha = 1;
  p.beta = 2;
  p.protect_top1 = protect;
  return p;
}

test::Step run(routing::LynxPolicy& pol, bool norm = true) {
  test::Step s(kZ, 3, GatingConfig{8, 2, GatingFunc::kSoftmax, norm, 1.f});
  auto in = s.in();
  auto out = s.out();
  pol.route(in, out);
  return s;
}

TEST(LynxHand, BinsScoresAndCriticalSet) {
  routing::LynxPolicy pol(params(true));
  test::Step s = run(pol);
  const auto& st = pol.state();
  ASSERT_TRUE(st.applied);
  EXPECT_EQ(st.B, 3);
  EXPECT_EQ(st.rows, (std::vector<int>{0, 1, 2}));
  const std::vector<float> q = {0,  0,  -1, -2, 0,  -2, -2, -1,  //
                                -2, 0,  0,  -2, -2, 0,  -2, -2,  //
                                -1, -1, 0,  0,  0,  -2, -1, -1};
  EXPECT_EQ(st.q, q);
  for (size_t i = 0; i < q.size(); ++i) {
    EXPECT_NEAR(st.h[i], std::pow(3.0, q[i]), 1e-6) << i;
  }
  const double S[8] = {13. / 9, 7. / 3, 7. / 3, 11. / 9, 19. / 9, 11. / 9, 5. / 9, 7. / 9};
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(st.S[e], S[e], 1e-6) << e;
  for (int t = 0; t < 3; ++t) {
    for (int e = 0; e < 8; ++e) {
      const double h = std::pow(3.0, q[t * 8 + e]);
      EXPECT_NEAR(st.m[t * 8 + e], q[t * 8 + e] + (S[e] - h) / 3, 1e-6) << t << "," << e;
    }
  }
  // A few values written out, as in the comment above.
  EXPECT_NEAR(st.m[0 * 8 + 0], 4. / 27, 1e-6);
  EXPECT_NEAR(st.m[0 * 8 + 1], 4. / 9, 1e-6);
  EXPECT_NEAR(st.m[0 * 8 + 4], 10. / 27, 1e-6);
  EXPECT_NEAR(st.m[2 * 8 + 3], 2. / 27, 1e-6);
  // Critical picks (protected top-1 first) and the critical set.
  EXPECT_EQ(st.critical, (std::vector<int32_t>{0, 1, 1, 2, 4, 2}));
  EXPECT_EQ(st.U, (std::vector<int32_t>{0, 1, 2, 4}));
}

TEST(LynxHand, RemapIdsAndWeights) {
  routing::LynxPolicy pol(params(true));
  test::Step s = run(pol);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 2, 4, 2}));
  // Unchanged tokens keep their exact weights: softmax of the two logits, renormalized.
  const double w0 = 1 / (1 + std::exp(1.8 - 2.0)), w1 = 1 / (1 + std::exp(2.6 - 3.0));
  const double w2 = 1 / (1 + std::exp(0.8 - 1.2));  // t2 remapped e3 -> e2: softmax over {e4, e2}
  const std::vector<double> want = {w0, 1 - w0, w1, 1 - w1, w2, 1 - w2};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(s.weights[i], want[i], 1e-6) << i;

  RoutingStats stats;
  accumulate_routing_stats(s.in(), s.out(), stats);
  EXPECT_EQ(stats.distinct_exact, 5);
  EXPECT_EQ(stats.distinct_policy, 4);
  EXPECT_EQ(stats.assignments_changed, 1);
  EXPECT_EQ(stats.top1_kept, 3);
}

TEST(LynxHand, UnnormalizedModelKeepsOriginalTopkMass) {
  routing::LynxPolicy pol(params(true));
  test::Step s = run(pol, /*norm=*/false);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 2, 4, 2}));
  const float* z2 = &kZ[16];
  const double p4 = test::ref_prob(z2, 8, 4, GatingFunc::kSoftmax);
  const double p3 = test::ref_prob(z2, 8, 3, GatingFunc::kSoftmax);
  const double p2 = test::ref_prob(z2, 8, 2, GatingFunc::kSoftmax);
  // Gating over the chosen {e4, e2}, scaled so the sum is t2's original top-2 mass p4 + p3.
  EXPECT_NEAR(s.weights[4], p4 / (p4 + p2) * (p4 + p3), 1e-6);
  EXPECT_NEAR(s.weights[5], p2 / (p4 + p2) * (p4 + p3), 1e-6);
  // t0 unchanged: its raw probabilities.
  EXPECT_NEAR(s.weights[0], test::ref_prob(kZ.data(), 8, 0, GatingFunc::kSoftmax), 1e-6);
}

TEST(LynxHand, OriginalWithoutProtectionLosesTopOne) {
  routing::LynxPolicy pol(params(false));
  test::Step s = run(pol);
  const auto& st = pol.state();
  EXPECT_EQ(st.critical, (std::vector<int32_t>{1, 4, 1, 2, 2, 4}));
  EXPECT_EQ(st.U, (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(s.ids, (std::vector<int32_t>{4, 1, 1, 2, 4, 2}));
  RoutingStats stats;
  accumulate_routing_stats(s.in(), s.out(), stats);
  EXPECT_EQ(stats.distinct_policy, 3);
  EXPECT_EQ(stats.top1_kept, 2);  // t0's top-1 e0 was displaced
}

// A prefill token t3 with exact top-2 {e3, e6} joins the step.
//   default (piggyback): e3, e6 count as loaded: the bonus becomes (S - h + loaded) / (B + 1),
//     U = {0, 1, 2, 4} + {3, 6}, and t2 keeps its exact {e4, e3} -- no extra expert is streamed.
//   piggyback-prefill=0: t2 is remapped to {e4, e2} as in the all-decode step.
//   mode=decode-only-batches (the original): the whole step is exact.
TEST(LynxHand, MixedBatchPhaseAwareness) {
  std::vector<float> z = kZ;
  const float t3[8] = {-1.0f, 0.0f, -2.0f, 3.0f, 0.5f, 0.0f, 2.0f, -1.0f};
  z.insert(z.end(), t3, t3 + 8);
  const GatingConfig g{8, 2, GatingFunc::kSoftmax, true, 1.f};
  auto route = [&](routing::LynxPolicy& pol) {
    test::Step s(z, 4, g);
    s.flags = {kTokenDecode, kTokenDecode, kTokenDecode, kTokenPrefill};
    auto in = s.in();
    auto out = s.out();
    pol.route(in, out);
    return s;
  };
  auto pol = std::make_unique<routing::LynxPolicy>(params(true));
  test::Step a = route(*pol);
  EXPECT_EQ(pol->state().B, 3);
  EXPECT_EQ(pol->state().loaded, (std::vector<uint8_t>{0, 0, 0, 1, 0, 0, 1, 0}));
  // m[t2][e3] = 0 + (S[e3] - h + 1) / 4 = (11/9 - 1 + 1) / 4
  EXPECT_NEAR(pol->state().m[2 * 8 + 3], 11. / 36, 1e-6);
  EXPECT_EQ(pol->state().U, (std::vector<int32_t>{0, 1, 2, 3, 4, 6}));
  EXPECT_EQ(a.ids, (std::vector<int32_t>{0, 4, 1, 2, 4, 3, 3, 6}));

  routing::LynxParams np = params(true);
  np.piggyback_prefill = false;
  routing::LynxPolicy no_piggyback(np);
  test::Step b = route(no_piggyback);
  EXPECT_EQ(b.ids, (std::vector<int32_t>{0, 4, 1, 2, 4, 2, 3, 6}));

  routing::LynxParams op = params(true);
  op.mode = routing::LynxMode::kDecodeOnlyBatches;
  routing::LynxPolicy original(op);
  test::Step c = route(original);
  EXPECT_FALSE(original.state().applied);
  EXPECT_EQ(c.ids, (std::vector<int32_t>{0, 4, 1, 2, 4, 3, 3, 6}));
}

// window = beta / alpha per MoE layer: on the hand example (alpha 1, beta 2) window=2 is the
// same policy; a layer whose window is 0 routes exactly; the last value holds for later
// layers; a window below 1 / alpha clamps beta to 1.
TEST(LynxHand, PerLayerWindow) {
  auto route_layer = [](const routing::LynxParams& p, int layer) {
    routing::LynxPolicy pol(p);
    test::Step s(kZ, 3, GatingConfig{8, 2, GatingFunc::kSoftmax, true, 1.f});
    auto in = s.in();
    in.layer = layer;
    auto out = s.out();
    pol.route(in, out);
    return std::make_pair(s.ids, pol.state());
  };
  routing::LynxParams w = params(true);
  w.beta = 0;
  w.window = {0.f, 2.f};
  const auto [exact_ids, exact_st] = route_layer(w, 0);
  EXPECT_FALSE(exact_st.applied);
  EXPECT_EQ(exact_ids, (std::vector<int32_t>{0, 4, 1, 2, 4, 3}));  // exact top-2
  for (int layer : {1, 5}) {
    const auto [ids, st] = route_layer(w, layer);
    EXPECT_TRUE(st.applied);
    EXPECT_EQ(st.beta, 2.f);
    EXPECT_EQ(ids, (std::vector<int32_t>{0, 4, 1, 2, 4, 2})) << layer;  // = RemapIdsAndWeights
  }
  w.window = {0.25f};
  EXPECT_EQ(route_layer(w, 3).second.beta, 1.f);
}

// mission.md's reference settings are reproduced for every listed model.
TEST(LynxHand, DefaultAlphaBetaReproducesPublishedSettings) {
  struct {
    int k, n;
    float alpha, beta;
  } published[] = {{8, 64, 3, 4}, {8, 128, 3, 2}, {2, 8, 0.7f, 1}, {6, 160, 1, 2}, {4, 128, 3, 2}};
  for (const auto& p : published) {
    const auto ab = routing::lynx_default_alpha_beta(p.k, p.n);
    EXPECT_EQ(ab.alpha, p.alpha) << p.k << "/" << p.n;
    EXPECT_EQ(ab.beta, p.beta) << p.k << "/" << p.n;
  }
  // A model not in the table gets its nearest neighbour's: OLMoE (8/64) = Qwen2-57B.
  EXPECT_EQ(routing::lynx_default_alpha_beta(8, 64).beta, 4.f);
  // And the policy uses them when alpha/beta are not given.
  routing::LynxPolicy pol(routing::LynxParams{});
  test::Step s(kZ, 3, GatingConfig{8, 2, GatingFunc::kSoftmax, true, 1.f});
  auto in = s.in();
  auto out = s.out();
  pol.route(in, out);
  EXPECT_EQ(pol.state().alpha, 0.7f);
  EXPECT_EQ(pol.state().beta, 1.f);
}

// The expert tier (RoutingInput::resident): experts in memory count as loaded, so they join U.
// In the example t2's exact pair {e4, e3} loses e3 (no other token wants it); with e3 resident
// it keeps it, while the others route as before. With every expert resident lynx is exact
// top-k; with none, what it is without the flags.
TEST(LynxHand, ResidentExpertsCountAsLoaded) {
  routing::LynxPolicy pol(params(true));
  test::Step s(kZ, 3, GatingConfig{8, 2, GatingFunc::kSoftmax, true, 1.f});
  std::vector<uint8_t> resident(8, 0);
  resident[3] = 1;
  auto in = s.in();
  in.resident = resident.data();
  auto out = s.out();
  pol.route(in, out);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 1, 2, 4, 3}));

  std::mt19937_64 rng(7);
  const GatingConfig g{64, 4, GatingFunc::kSoftmax, true, 1.f};
  const std::vector<float> z = test::random_logits(rng, 16, 64, 1.5f, false);
  auto routed = [&](const uint8_t* res) {
    routing::LynxPolicy p(routing::LynxParams{});
    test::Step st(z, 16, g);
    auto i = st.in();
    i.resident = res;
    auto o = st.out();
    p.route(i, o);
    return st.ids;
  };
  test::Step exact(z, 16, g);
  {
    auto i = exact.in();
    auto o = exact.out();
    make_routing_policy("topk")->route(i, o);
  }
  const std::vector<uint8_t> all(64, 1), none(64, 0);
  EXPECT_EQ(routed(all.data()), exact.ids);
  EXPECT_EQ(routed(none.data()), routed(nullptr));
  EXPECT_NE(routed(nullptr), exact.ids);  // the batch does remap without the tier
}

}  // namespace
}  // namespace lynx
