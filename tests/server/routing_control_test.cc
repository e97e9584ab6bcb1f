// The SLO controller and the routing ladder, fed with synthetic step times (no clock).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lynx/error.h"
#include "lynx/routing.h"
#include "server/routing_control.h"

namespace lynx::server {
namespace {

SloControllerOptions opts(int max_level) {
  SloControllerOptions o;
  o.target_s = 0.100;  // 100 ms
  o.max_level = max_level;
  o.window = 8;
  o.dwell = 8;
  o.raise_at = 0.8;
  o.lower_at = 0.5;
  return o;
}

// Feeds `n` decode steps of `step_s` seconds (16 tokens each); returns the level after each.
std::vector<int> feed(SloController& c, double step_s, int n, int waiting = 0) {
  std::vector<int> levels;
  for (int i = 0; i < n; ++i) levels.push_back(c.observe(step_s, 16, waiting));
  return levels;
}

TEST(SloController, RisesUnderLoadOneLevelPerWindow) {
  SloController c(opts(3));
  EXPECT_EQ(c.level(), 0);
  auto lv = feed(c, 0.095, 7);  // window not full yet: no decision
  EXPECT_EQ(lv.back(), 0);
  lv = feed(c, 0.095, 1);
  EXPECT_EQ(lv.back(), 1);  // 95 ms > 80 ms after a full window
  feed(c, 0.095, 8);
  EXPECT_EQ(c.level(), 2);
  feed(c, 0.095, 8);
  EXPECT_EQ(c.level(), 3);
  feed(c, 0.095, 64);  // never beyond the top of the ladder
  EXPECT_EQ(c.level(), 3);
  EXPECT_EQ(c.changes(), 3);
}

TEST(SloController, FallsToExactWithSlack) {
  SloController c(opts(3));
  feed(c, 0.2, 24);
  ASSERT_EQ(c.level(), 3);
  feed(c, 0.030, 7);
  EXPECT_EQ(c.level(), 3);  // the window since the last change is not full yet
  feed(c, 0.030, 1);
  EXPECT_EQ(c.level(), 2);
  feed(c, 0.030, 16);
  EXPECT_EQ(c.level(), 0);
  feed(c, 0.030, 64);
  EXPECT_EQ(c.level(), 0);  // never below exact
}

TEST(SloController, HysteresisHoldsInsideTheBand) {
  SloController c(opts(3));
  feed(c, 0.090, 8);
  ASSERT_EQ(c.level(), 1);
  // Between lower_at (50 ms) and raise_at (80 ms): the level stays, however long.
  const auto lv = feed(c, 0.065, 200);
  for (int l : lv) EXPECT_EQ(l, 1);
  // A level whose steps are 30% slower than the one above (a typical gap between levels):
  // lowering at 49 ms gives 64 ms at the level below, still inside the band, so no flap.
  feed(c, 0.049, 8);
  ASSERT_EQ(c.level(), 0);
  const auto after = feed(c, 0.049 * 1.3, 200);
  for (int l : after) EXPECT_EQ(l, 0);
  EXPECT_EQ(c.changes(), 2);
}

TEST(SloController, AlternatingLoadDoesNotFlapEveryStep) {
  SloController c(opts(3));
  // Steps alternating 40 / 110 ms: mean 75 ms, inside the band although half the steps
  // are above the raise threshold and half below the lowering one.
  for (int i = 0; i < 400; ++i) c.observe(i % 2 ? 0.110 : 0.040, 16, 0);
  EXPECT_EQ(c.level(), 0);
  EXPECT_EQ(c.changes(), 0);
  // Spikes every 8th step: changes are at most one per dwell.
  SloController d(opts(3));
  for (int i = 0; i < 400; ++i) d.observe(i % 8 == 0 ? 0.5 : 0.03, 16, 0);
  EXPECT_LE(d.changes(), 400 / 8);
}

TEST(SloController, QueueBlocksLowering) {
  SloController c(opts(2));
  feed(c, 0.2, 16);
  ASSERT_EQ(c.level(), 2);
  feed(c, 0.030, 40, /*waiting=*/3);
  EXPECT_EQ(c.level(), 2);
  feed(c, 0.030, 8, 0);
  EXPECT_EQ(c.level(), 1);
}

TEST(SloController, TokenWeightedEstimateIgnoresEmptySteps) {
  SloController c(opts(1));
  c.observe(0.010, 1, 0);
  c.observe(0.050, 3, 0);
  EXPECT_DOUBLE_EQ(c.estimate(), (0.010 * 1 + 0.050 * 3) / 4);
  c.observe(9.0, 0, 0);  // a prefill-only step: no decode token waited on it
  c.observe(-1, 4, 0);   // nonsense is ignored
  EXPECT_DOUBLE_EQ(c.estimate(), (0.010 * 1 + 0.050 * 3) / 4);
}

TEST(SloController, BadOptionsAreRefused) {
  auto o = opts(2);
  o.target_s = 0;
  EXPECT_THROW(SloController{o}, Error);
  o = opts(2);
  o.lower_at = 0.9;  // above raise_at: no band
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
  auto l = parse_routing_ladder(kDefaultRoutingLadder);
  RoutingControl rc(l, /*max_level=*/2, /*tpot_slo_s=*/0.1, 0);
  for (int i = 0; i < 500; ++i) rc.observe(0.5, 16, 5, rc.step_level({}));
  EXPECT_EQ(rc.server_level(), 2);  // the budget, not the ladder's top
  using W = RoutingControl::Wish;
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
}

TEST(RoutingControl, FixedLevelWithoutTarget) {
  RoutingControl rc(parse_routing_ladder("lynx"), 1, 0, 1);
  for (int i = 0; i < 100; ++i) rc.observe(10.0, 16, 0, 1);
  EXPECT_EQ(rc.server_level(), 1);
  EXPECT_EQ(rc.render().find("tpot_slo"), std::string::npos);
}

}  // namespace
}  // namespace lynx::server
