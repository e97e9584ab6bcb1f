// The SLO controller and the routing ladder, fed with synthetic step times (no clock).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "lynx/error.h"
#include "lynx/routing.h"
#include "runtime/routing_control.h"

namespace lynx {
namespace {

SloControllerOptions opts(int max_level) {
  SloControllerOptions o;
  o.target_s = 0.100;  // 100 ms: a level fits at n when it is predicted <= 80 ms
  o.max_level = max_level;
  o.window = 8;
  o.raise_at = 0.8;
  o.hysteresis = 0.1;  // going down needs <= 72 ms
  o.explore_steps = 3;
  o.cold_steps = 0;  // SloController.ColdStepsAreNotLearned tests them
  return o;
}

// A synthetic machine: step time t(level, n) = scale * (a + b_level * n), decode-only.
// Smallest level within 80 ms: n 1-7 exact, 8-10 level 1, 11-15 level 2, 16-20 level 3.
struct Plant {
  std::vector<double> b = {0.008, 0.0055, 0.0038, 0.003};
  double a = 0.020;
  double scale = 1;
  double operator()(int level, int n) const { return scale * (a + b[size_t(level)] * n); }
  // The weakest level within `fit` seconds, else `max_level`.
  int best(int n, int max_level, double fit = 0.080) const {
    for (int l = 0; l <= max_level; ++l) {
      if ((*this)(l, n) <= fit) return l;
    }
    return max_level;
  }
  // No level's step at n is within 3% of `fit`: a learned model decides n without doubt.
  bool clear(int n, double fit = 0.080) const {
    for (size_t l = 0; l < b.size(); ++l) {
      if (std::abs((*this)(int(l), n) / fit - 1) < 0.03) return false;
    }
    return true;
  }
};

// One step of `n` decode tokens on the plant: the controller decides, the step runs at that
// level and its time is fed back. Returns the level.
int step(SloController& c, const Plant& p, int n) {
  const int l = c.choose(n);
  c.observe(p(l, n), n, 0, l);
  return l;
}

// Steps over every n in 1..20 in a scrambled order, `rounds` times.
void warm_up(SloController& c, const Plant& p, int rounds = 20) {
  for (int i = 0; i < 20 * rounds; ++i) step(c, p, 1 + (i * 7) % 20);
}

// The decision for n after a step at n=1 (exact), so that no hysteresis applies.
int fresh_choice(SloController& c, int n) {
  c.choose(1);
  return c.choose(n);
}

TEST(SloController, PicksTheWeakestLevelThatFitsTheBatch) {
  SloController c(opts(3));
  const Plant p;
  EXPECT_EQ(c.choose(16), 0);  // nothing known: exact first
  warm_up(c, p);
  for (int l = 0; l <= 3; ++l) EXPECT_GE(c.samples(l), 3) << l;
  for (int n = 1; n <= 20; ++n) {
    EXPECT_EQ(fresh_choice(c, n), p.best(n, 3)) << "n=" << n;
    EXPECT_EQ(c.last_n(), n);
  }
  // What it learned is the plant (a line: the interpolation between cells is exact).
  EXPECT_NEAR(c.predict(0, 5), p(0, 5), 1e-9);
  EXPECT_NEAR(c.predict(3, 18), p(3, 18), 1e-9);
  EXPECT_DOUBLE_EQ(c.scale(), 1);
  // A batch size it never saw, past every cell: extrapolated from the cells.
  EXPECT_EQ(fresh_choice(c, 22), 3);
  EXPECT_EQ(fresh_choice(c, 4), 0);  // and back to exact as soon as the batch shrinks
}

TEST(SloController, NeverAboveItsMaxLevel) {
  SloController c(opts(1));  // the budget allows level 1 only
  const Plant p;
  for (int i = 0; i < 400; ++i) {
    const int n = 1 + (i * 7) % 20;
    EXPECT_LE(step(c, p, n), 1) << i;
  }
  EXPECT_EQ(c.samples(2), 0);
  EXPECT_EQ(c.predict(2, 4), -1);     // off its ladder
  EXPECT_EQ(fresh_choice(c, 16), 1);  // nothing fits: the strongest allowed
  EXPECT_EQ(fresh_choice(c, 3), 0);
}

TEST(SloController, ExploresAStrongerLevelOnlyWhenTheKnownOnesAreTooSlow) {
  SloController c(opts(3));
  const Plant p;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(step(c, p, 2), 0);  // exact fits: nothing else tried
  EXPECT_EQ(c.samples(1), 0);
  // n=12: exact was only seen at n=2 (one cell: flat, so it is tried), then measured too
  // slow; level 1 is unknown, so it is tried, learned too slow, then level 2, which fits.
  std::vector<int> levels;
  for (int i = 0; i < 20; ++i) levels.push_back(step(c, p, 12));
  EXPECT_EQ(levels.front(), 0);
  EXPECT_EQ(levels.back(), 2);
  EXPECT_EQ(c.samples(1), 3);  // explore_steps, then passed over
  EXPECT_EQ(c.samples(3), 0);  // level 2 fits: the strongest level is never needed
  EXPECT_TRUE(std::is_sorted(levels.begin(), levels.end()));
}

TEST(SloController, FollowsAMachineThatGetsSlowerThroughTheFeedback) {
  SloController c(opts(3));
  Plant p;
  warm_up(c, p);
  p.scale = 1.3;  // every step 30% slower
  // Already 30 steps later most of the change is in the scale, and it reaches the levels
  // that do not run now.
  for (int i = 0; i < 30; ++i) step(c, p, 1 + (i * 7) % 20);
  EXPECT_GT(c.scale(), 1.2);
  warm_up(c, p, 10);
  EXPECT_NEAR(c.scale(), 1.3, 0.05);
  EXPECT_NEAR(c.predict(0, 3), p(0, 3), 0.002);
  int checked = 0;
  for (int n = 1; n <= 20; ++n) {
    if (!p.clear(n)) continue;
    EXPECT_EQ(fresh_choice(c, n), p.best(n, 3)) << "n=" << n;
    ++checked;
  }
  EXPECT_GE(checked, 15);
  EXPECT_EQ(fresh_choice(c, 6), 1);  // exact held 6 tokens before, no longer
  // And back when it is fast again.
  p.scale = 1;
  warm_up(c, p, 10);
  EXPECT_NEAR(c.scale(), 1, 0.05);
  for (int n = 1; n <= 20; ++n) {
    if (p.clear(n)) {
      EXPECT_EQ(fresh_choice(c, n), p.best(n, 3)) << "n=" << n;
    }
  }
}

TEST(SloController, FeedbackScaleIsBounded) {
  SloController c(opts(3));
  Plant p;
  warm_up(c, p);
  p.scale = 10;
  warm_up(c, p, 5);
  EXPECT_LE(c.scale(), 2.0);
  EXPECT_EQ(fresh_choice(c, 1), 3);  // every level too slow now: the strongest
}

TEST(SloController, SkewedNoiseDoesNotMakeTheScaleWander) {
  SloController c(opts(3));
  const Plant p;
  // Every fifth step stalled to 2x by another process, the others 10% fast: the scale and
  // the cells must not trade off against each other over thousands of steps.
  for (int i = 0; i < 8000; ++i) {
    const int n = 1 + (i * 7) % 19;  // 19: every n sees stalls
    const int l = c.choose(n);
    c.observe(p(l, n) * (i % 5 == 0 ? 2.0 : 0.9), n, 0, l);
    if (i >= 1000) {
      ASSERT_NEAR(c.scale(), 1, 0.2) << i;
    }
  }
  // Geometric means: at n=3, exact's 44 ms steps seen as 0.9^0.8 * 2^0.2 = 1.05x.
  EXPECT_NEAR(c.predict(0, 3), p(0, 3) * std::pow(0.9, 0.8) * std::pow(2.0, 0.2), 0.004);
}

TEST(SloController, NoFlappingNearABoundary) {
  SloController c(opts(3));
  const Plant p;
  warm_up(c, p);
  // n alternating 7 / 8: exact fits 7 (76 ms), not 8 (84 ms). After the first step at level
  // 1, 7 is not under the 72 ms needed to go down again: it stays at level 1.
  std::set<int> used;
  const int64_t before = c.changes();
  for (int i = 0; i < 200; ++i) used.insert(step(c, p, i % 2 ? 8 : 7));
  // The first step's change, and at most one refresh of an old cell (one step per 256
  // decisions: down to exact and back).
  EXPECT_LE(c.changes() - before, 3);
  EXPECT_LE(*used.rbegin() - *used.begin(), 1);
  // Noise of +-5% on steps right at a threshold (n=7, exact: 72-80 ms): no switching back
  // and forth either.
  SloController d(opts(3));
  warm_up(d, p);
  d.choose(1);
  const int64_t d0 = d.changes();
  for (int i = 0; i < 200; ++i) {
    const int l = d.choose(7);
    d.observe(p(l, 7) * (i % 2 ? 1.05 : 0.95), 7, 0, l);
  }
  EXPECT_LE(d.changes() - d0, 3);
}

TEST(SloController, PromptStepsDoNotPushItToTheTop) {
  SloController c(opts(3));
  const Plant p;
  warm_up(c, p);
  const int64_t s0 = c.samples(0);
  // Every other step carries 64 prompt tokens and takes 500 ms, five times the target.
  for (int i = 0; i < 200; ++i) {
    const int l = c.choose(2);
    EXPECT_EQ(l, 0) << i;
    c.observe(i % 2 ? 0.5 : p(l, 2), 2, i % 2 ? 64 : 0, l);
  }
  EXPECT_EQ(c.samples(0), s0 + 100);  // only the decode-only steps taught it
  EXPECT_DOUBLE_EQ(c.scale(), 1);
  EXPECT_GT(c.estimate(), 0.1);  // but they are in the measured TPOT
  // Their overhead takes at most half of the 80 ms threshold: exact (36 ms at n = 2) fits.
  EXPECT_GT(c.prompt_overhead(), 0.1);
}

// Prompts that share the decode steps add to every request's TPOT: every 4th step carries
// one and takes 40 ms more, 10 ms per step on average, so a decode step must fit in 70 ms.
// At n = 7 exact (76 ms) fit 80 ms but not 70: level 1 (58.5 ms) is chosen; without prompts
// the overhead decays and exact fits again.
TEST(SloController, PromptOverheadLeavesRoomForPrompts) {
  SloController c(opts(3));
  const Plant p;
  warm_up(c, p);
  ASSERT_EQ(fresh_choice(c, 7), 0);
  for (int i = 0; i < 400; ++i) {
    const int l = c.choose(7);
    const bool prompt = i % 4 == 3;
    c.observe(p(l, 7) + (prompt ? 0.040 : 0), 7, prompt ? 16 : 0, l);
  }
  EXPECT_NEAR(c.prompt_overhead(), 0.010, 0.003);
  EXPECT_EQ(fresh_choice(c, 7), 1);
  EXPECT_EQ(fresh_choice(c, 3), 0);  // 44 ms: exact still fits at small n
  for (int i = 0; i < 400; ++i) step(c, p, 7);
  EXPECT_LT(c.prompt_overhead(), 0.001);
  EXPECT_EQ(fresh_choice(c, 7), 0);
}

TEST(SloController, TokenWeightedEstimateIgnoresEmptySteps) {
  SloController c(opts(1));
  c.observe(0.010, 1, 0, 0);
  c.observe(0.050, 3, 0, 0);
  EXPECT_DOUBLE_EQ(c.estimate(), (0.010 * 1 + 0.050 * 3) / 4);
  c.observe(9.0, 0, 16, 0);  // a prefill-only step: no decode token waited on it
  c.observe(-1, 4, 0, 0);    // nonsense is ignored
  c.observe(0.05, 4, 0, 7);  // a level off the ladder: counted in the estimate only
  EXPECT_DOUBLE_EQ(c.estimate(), (0.010 * 1 + 0.050 * 3 + 0.05 * 4) / 8);
  EXPECT_EQ(c.samples(0), 2);
  EXPECT_EQ(c.choose(0), c.level());  // a step without decode tokens: no decision
}

TEST(SloController, ColdStepsAreNotLearned) {
  auto o = opts(3);
  o.cold_steps = 4;
  SloController c(o);
  const Plant p;
  // A fresh server's first steps are 5x slow (weights paged in): not learned from.
  for (int i = 0; i < 4; ++i) {
    const int l = c.choose(4);
    EXPECT_EQ(l, 0);
    c.observe(5 * p(l, 4), 4, 0, l);
  }
  EXPECT_EQ(c.samples(0), 0);
  EXPECT_GT(c.estimate(), 0.2);  // but measured
  for (int i = 0; i < 20; ++i) EXPECT_EQ(step(c, p, 4), 0);
  EXPECT_NEAR(c.predict(0, 4), p(0, 4), 1e-9);
}

TEST(SloController, AStaleSlowCellIsMeasuredAgain) {
  SloController c(opts(3));
  const Plant p;
  // Exact at n=3 measured at 90 ms (44 in truth) while the machine was busy: over the
  // threshold, so level 1 takes over and exact would never run at n=3 again.
  SloController d(opts(3));
  for (int i = 0; i < 8; ++i) {
    const int l = d.choose(3);
    d.observe(l == 0 ? 0.090 : p(l, 3), 3, 0, l);
  }
  std::vector<int> levels;
  for (int i = 0; i < 600; ++i) levels.push_back(step(d, p, 3));
  // Exact (44 ms in truth) was locked out as 90 ms: re-measured once its cell was old, it
  // is the level again (the feedback scale moved little: cells were young when fed).
  EXPECT_EQ(levels.front(), 1);
  EXPECT_EQ(levels.back(), 0);
  EXPECT_LE(std::count(levels.begin(), levels.begin() + 250, 0), 0);
}

// The tail loop: requests whose P90 TPOT (100 ms) is over its goal (0.85 x 100 ms) lower
// the step threshold until a stronger level runs at a batch size where exact fit before;
// requests with slack give it back.
TEST(SloController, SlowRequestsLowerTheThresholdAndSlackRestoresIt) {
  SloController c(opts(3));
  const Plant p;
  warm_up(c, p);
  ASSERT_EQ(fresh_choice(c, 7), 0);  // 76 ms fits 80
  for (int i = 0; i < 7; ++i) c.observe_request(0.2);
  EXPECT_DOUBLE_EQ(c.aim(), 1);  // fewer than tail_min_requests: no tail yet
  EXPECT_EQ(c.tail(), 0);
  for (int i = 0; i < 4; ++i) {
    step(c, p, 7);  // steps at exact between the requests: no windup
    c.observe_request(0.100);
  }
  // Four updates of 0.1 x log(0.2 / 0.085): aim 0.71, threshold 57 ms.
  EXPECT_NEAR(c.aim(), std::exp(-0.4 * std::log(0.2 / 0.085)), 1e-9);
  EXPECT_NEAR(c.tail(), 0.2, 1e-12);  // P90 of 11: the 10th of 11, one of the first seven
  EXPECT_EQ(fresh_choice(c, 7), 2);   // exact (76 ms) and level 1 (58.5) no longer fit
  EXPECT_EQ(fresh_choice(c, 2), 0);   // 36 ms still does
  for (int i = 0; i < 40; ++i) {
    step(c, p, 7);
    c.observe_request(0.040);
  }
  EXPECT_DOUBLE_EQ(c.aim(), 1);
  EXPECT_NEAR(c.tail(), 0.040, 1e-12);
  EXPECT_EQ(fresh_choice(c, 7), 0);
}

TEST(SloController, AimIsBoundedAndOneSlowRequestDoesNotSteer) {
  auto o = opts(3);
  o.aim_min = 0.5;
  SloController c(o);
  const Plant p;
  warm_up(c, p);
  for (int i = 0; i < 200; ++i) {
    step(c, p, 2);  // exact runs: the loop is not wound up
    c.observe_request(1.0);
  }
  EXPECT_DOUBLE_EQ(c.aim(), 0.5);
  for (int i = 0; i < 200; ++i) c.observe_request(0.010);
  EXPECT_DOUBLE_EQ(c.aim(), 1);
  // One request in 16 at ten times the target is the P99, not the P90: nothing moves.
  c.observe_request(1.0);
  for (int i = 0; i < 15; ++i) c.observe_request(0.050);
  EXPECT_DOUBLE_EQ(c.aim(), 1);
  EXPECT_NEAR(c.tail(), 0.050, 1e-12);
}

// When every step already runs the strongest allowed level, a lower aim changes nothing:
// it must not wind down, or the server would hold that level long after the load is gone.
TEST(SloController, NoWindupAtTheStrongestLevel) {
  SloController c(opts(1));
  const Plant p;
  warm_up(c, p);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(step(c, p, 24), 1);  // 152 ms at level 1 (n = 24): the top, over the threshold
    c.observe_request(0.150);
  }
  EXPECT_DOUBLE_EQ(c.aim(), 1);
  EXPECT_NEAR(c.tail(), 0.150, 1e-12);
}

TEST(SloController, TailLoopOff) {
  auto o = opts(3);
  o.tail_requests = 0;
  SloController c(o);
  for (int i = 0; i < 50; ++i) c.observe_request(1.0);
  EXPECT_DOUBLE_EQ(c.aim(), 1);
  EXPECT_EQ(c.tail(), 0);
}

TEST(SloController, BadOptionsAreRefused) {
  auto o = opts(2);
  o.target_s = 0;
  EXPECT_THROW(SloController{o}, Error);
  o = opts(2);
  o.hysteresis = 1;  // could never go down
  EXPECT_THROW(SloController{o}, Error);
  o = opts(2);
  o.explore_steps = 0;
  EXPECT_THROW(SloController{o}, Error);
  o = opts(2);
  o.scale_max = 0.9;
  EXPECT_THROW(SloController{o}, Error);
  o = opts(2);
  o.tail_min_requests = o.tail_requests + 1;  // would never decide
  EXPECT_THROW(SloController{o}, Error);
  o = opts(2);
  o.aim_min = 0;  // could lower the threshold to nothing
  EXPECT_THROW(SloController{o}, Error);
  o = opts(2);
  o.tail_quantile = 1.5;
  EXPECT_THROW(SloController{o}, Error);
}

TEST(RoutingLadder, ParsesCanonicalizesAndPrependsExact) {
  auto l = parse_routing_ladder("cover:lambda=0.03@0.22; cover @0.34;lynx:beta=4,alpha=3");
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].spec, "topk");
  EXPECT_EQ(l[0].cost_pct, 0);
  EXPECT_EQ(l[1].spec, "cover:lambda=0.03");
  EXPECT_DOUBLE_EQ(l[1].cost_pct, 0.22);
  EXPECT_EQ(l[2].spec, "cover");
  EXPECT_LT(l[3].cost_pct, 0);  // no cost given
  EXPECT_EQ(l[3].spec, make_routing_policy("lynx:alpha=3,beta=4")->spec());
  EXPECT_EQ(parse_routing_ladder(kDefaultRoutingLadder).size(), 5u);
}

TEST(RoutingLadder, BadLaddersAreRefused) {
  for (const char* bad : {"", "topk;;cover", "nonsense", "cover;cover", "cover;topk", "cover@x",
                          "cover@-1", "cover:lambda=0.1@0.8;cover@0.3"}) {
    EXPECT_THROW(parse_routing_ladder(bad), Error) << bad;
  }
}

TEST(RoutingLadder, BudgetPicksTheHighestAffordableLevel) {
  auto l = parse_routing_ladder(kDefaultRoutingLadder);
  EXPECT_EQ(max_level_for_budget(l, -1), 4);
  EXPECT_EQ(max_level_for_budget(l, 0.5), 2);
  EXPECT_EQ(max_level_for_budget(l, 0.1), 0);
  EXPECT_THROW(max_level_for_budget(parse_routing_ladder("cover;lynx"), 0.5), Error);
}

TEST(RoutingControl, NeverExceedsTheBudgetAndTakesTheMinimumOfTheBatch) {
  using W = RoutingControl::Wish;
  auto l = parse_routing_ladder(kDefaultRoutingLadder);
  RoutingControl rc(l, /*max_level=*/2, /*tpot_slo_s=*/0.1, 0);
  for (int i = 0; i < 500; ++i) rc.observe(0.5, 16, 0, rc.step_level({}, 16));
  EXPECT_EQ(rc.server_level(), 2);  // the budget, not the ladder's top
  EXPECT_EQ(rc.step_level({}, 16), 2);
  EXPECT_EQ(rc.step_level({W{}, W{-1, 1}}, 16), 1);
  EXPECT_EQ(rc.step_level({}), 2);
  EXPECT_EQ(rc.step_level({W{}, W{}}), 2);
  EXPECT_EQ(rc.step_level({W{}, W{-1, 1}}), 1);       // one request caps at 1
  EXPECT_EQ(rc.step_level({W{4, -1}, W{3, -1}}), 2);  // named levels stay within the budget
  EXPECT_EQ(rc.step_level({W{1, -1}, W{}}), 1);       // a named weaker level holds the batch
  const std::string m = rc.render();
  EXPECT_NE(m.find("lynx_routing_level 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("lynx_routing_level_steps_total{level=\"2\",spec=\"cover\"}"),
            std::string::npos);
  EXPECT_NE(m.find("lynx_routing_tpot_slo_seconds 0.1"), std::string::npos);
  EXPECT_NE(m.find("lynx_routing_decision_decode_tokens 16\n"), std::string::npos) << m;
  EXPECT_NE(m.find("lynx_routing_predicted_step_seconds{level=\"2\"} 0.5\n"), std::string::npos)
      << m;
  EXPECT_EQ(m.find("lynx_routing_predicted_step_seconds{level=\"3\"}"), std::string::npos);
  EXPECT_NE(m.find("lynx_routing_model_scale 1\n"), std::string::npos) << m;
}

TEST(RoutingControl, FixedLevelWithoutTarget) {
  RoutingControl rc(parse_routing_ladder("lynx"), 1, 0, 1);
  for (int i = 0; i < 100; ++i) rc.observe(10.0, 16, 0, rc.step_level({}, 16));
  EXPECT_EQ(rc.server_level(), 1);
  EXPECT_EQ(rc.render().find("tpot_slo"), std::string::npos);
}

}  // namespace
}  // namespace lynx
