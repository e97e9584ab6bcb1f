// Hand-computed examples for the subst policy (docs/routing.md, "subst"): cover's example of
// tests/routing/cover_hand_test.cc (3 decode tokens, 6 experts, k = 2, softmax gating, logits
// ln(p)):
//
//   p                e0    e1    e2    e3    e4    e5    exact top-2   M (top-2 mass)
//   t0              .48   .32   .12   .04   .03   .01    e0 e1         .80
//   t1              .05   .25   .45   .20   .03   .02    e2 e1         .70
//   t2              .05   .20   .03   .30   .40   .02    e4 e3         .70
//
// At tau = 0.5, lambda = 0.6 the set is U = {e0, e1, e2, e4} (cover_hand_test.cc): t0 and t1
// keep their exact experts, t2 keeps e4 and trades e3 for the substitute e1. The weight modes
// differ only in t2's weights:
//   renorm       e4 .40/.60       e1 .20/.60       (the gating over the chosen, renormalized)
//   inherit      e4 .40/.70       e1 .30/.70       (e1 takes e3's exact weight)
//   own          e4 .40/.70       e1 .20/.70       (e1's own probability on the exact scale)
//   drop         e4 .40/.70       e1 0             (inactive)
//   drop-renorm  e4 1             e1 0
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "helpers.h"
#include "lynx/routing.h"

namespace lynx {
namespace {

const double kP[3][6] = {
    {.48, .32, .12, .04, .03, .01}, {.05, .25, .45, .20, .03, .02}, {.05, .20, .03, .30, .40, .02}};

test::Step run(const std::string& spec) {
  std::vector<float> z;
  for (const auto& row : kP) {
    for (double p : row) z.push_back(float(std::log(p)));
  }
  test::Step s(std::move(z), 3, GatingConfig{6, 2, GatingFunc::kSoftmax, true, 1.f});
  auto in = s.in();
  auto out = s.out();
  make_routing_policy(spec)->route(in, out);
  return s;
}

void expect_w(const test::Step& s, int t, double w0, double w1) {
  EXPECT_NEAR(s.weights[t * 2 + 0], w0, 1e-6) << t;
  EXPECT_NEAR(s.weights[t * 2 + 1], w1, 1e-6) << t;
}

// t0 and t1 keep their exact experts with their exact weights in every mode.
void expect_untouched(const test::Step& s) {
  expect_w(s, 0, .48 / .80, .32 / .80);
  expect_w(s, 1, .45 / .70, .25 / .70);
}

TEST(SubstHand, WeightModes) {
  struct Mode {
    const char* spec;
    double w0, w1;
  };
  const Mode modes[] = {
      {"subst:tau=0.5,lambda=0.6", .40 / .60, .20 / .60},
      {"subst:tau=0.5,lambda=0.6,weights=renorm", .40 / .60, .20 / .60},
      {"subst:tau=0.5,lambda=0.6,weights=inherit", .40 / .70, .30 / .70},
      {"subst:tau=0.5,lambda=0.6,weights=own", .40 / .70, .20 / .70},
      {"subst:tau=0.5,lambda=0.6,weights=drop", .40 / .70, 0},
      {"subst:tau=0.5,lambda=0.6,weights=drop-renorm", 1, 0},
  };
  for (const auto& m : modes) {
    SCOPED_TRACE(m.spec);
    test::Step s = run(m.spec);
    EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 1}));
    expect_untouched(s);
    expect_w(s, 2, m.w0, m.w1);
  }
}

// The same selection as cover: renorm reproduces cover bit for bit.
TEST(SubstHand, RenormIsCover) {
  for (const char* lambda : {"0.1", "0.6", "0.8"}) {
    test::Step a = run(std::string("subst:tau=0.5,lambda=") + lambda);
    test::Step b = run(std::string("cover:tau=0.5,lambda=") + lambda);
    EXPECT_EQ(a.ids, b.ids) << lambda;
    EXPECT_EQ(a.weights, b.weights) << lambda;
  }
}

// lambda = 0.8: U = {e0, e2, e4}, every token has one substitute. inherit: t0 keeps e0
// (.48/.8 = .6) and e2 takes e1's .4; t1 keeps e2 (.45/.7), e0 takes e1's .25/.7; t2 keeps e4
// (.4/.7), e0 takes e3's .3/.7. Ids stay in logit order, kept experts first.
TEST(SubstHand, InheritGivesTheDroppedWeight) {
  test::Step s = run("subst:tau=0.5,lambda=0.8,weights=inherit");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 2, 2, 0, 4, 0}));
  expect_w(s, 0, .6, .4);
  expect_w(s, 1, .45 / .7, .25 / .7);
  expect_w(s, 2, .40 / .7, .30 / .7);
}

// value=exact: a token's q is zero outside its exact top-k, so an expert's gain is the
// exact mass it gives back. U starts {e0, e2, e4}; gains e1 .400 + .357 = .757, e3 .429
// (cover's mass gains: e1 .750, then e3 only .143). lambda = 0.4: e1 joins, then e3 (.429
// >= .4): exact top-2 for everyone. With value=mass e3 stays out and t2 takes e1.
TEST(SubstHand, ValueExactCountsOnlyExactMass) {
  test::Step ex = run("subst:tau=0.5,lambda=0.4,value=exact");
  EXPECT_EQ(ex.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 3}));
  expect_w(ex, 2, .4 / .7, .3 / .7);
  test::Step mass = run("subst:tau=0.5,lambda=0.4");
  EXPECT_EQ(mass.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 1}));
}

// Contract on every mode: k distinct ids, the confident top-1 kept and active, and drop
// modes leave exactly the substitutes inactive.
TEST(SubstHand, ContractAndInactiveSlots) {
  for (const char* w : {"renorm", "inherit", "own", "drop", "drop-renorm"}) {
    test::Step s = run(std::string("subst:tau=0.5,lambda=0.8,weights=") + w);
    const bool drops = std::string(w).rfind("drop", 0) == 0;
    const int top1[3] = {0, 2, 4};
    for (int t = 0; t < 3; ++t) {
      SCOPED_TRACE(std::string(w) + " t" + std::to_string(t));
      std::set<int32_t> u(s.ids.begin() + t * 2, s.ids.begin() + t * 2 + 2);
      EXPECT_EQ(u.size(), 2u);
      EXPECT_EQ(s.ids[t * 2], top1[t]);
      EXPECT_GT(s.weights[t * 2], 0.f);
      EXPECT_EQ(s.weights[t * 2 + 1] == 0.f, drops);
    }
  }
}

TEST(SubstHand, SpecRoundTripAndErrors) {
  EXPECT_EQ(make_routing_policy("subst")->spec(), "subst");
  const std::string full =
      "subst:tau=0.3,lambda=0.03/0.2,growth=0.75,piggyback-prefill=0,value=exact,"
      "weights=inherit";
  EXPECT_EQ(make_routing_policy(full)->spec(), full);
  EXPECT_EQ(make_routing_policy(make_routing_policy(full)->spec())->spec(), full);
  EXPECT_THROW(make_routing_policy("subst:weights=twin"), Error);
  EXPECT_THROW(make_routing_policy("subst:value=logit"), Error);
  EXPECT_THROW(make_routing_policy("subst:lambda=-1"), Error);
  EXPECT_THROW(make_routing_policy("subst:sigma=1"), Error);
}

// A similarity file for the 6 experts: only sim[e1][e4] = 1 (row = the dropped expert).
std::string write_sim(const std::string& name, const std::string& body) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << body;
  return path.string();
}

std::string sim_e1_e4() {
  std::string body = "lynx-moe-expert-similarity 1\nlayers 1 experts 6\n";
  for (int d = 0; d < 6; ++d) {
    for (int c = 0; c < 6; ++c) body += (d == 1 && c == 4) ? "1 " : "0 ";
    body += "\n";
  }
  return write_sim("lynx_subst_sim_test.txt", body);
}

// lambda = 0.8, U = {e0, e2, e4}. A dropped expert d takes the free expert c of U with the
// largest q[c] + beta * sim[d][c] (q = p / M):
//   t0 drops e1: e2 .12/.8 = .150, e4 .03/.8 = .0375 + beta
//   t1 drops e1: e0 .05/.7 = .0714, e4 .03/.7 = .0429 + beta
//   t2 drops e3 (no similar expert): e0 .0714, e2 .0429 -> e0
// beta = 0.2: e4 wins for t0 (.2375) and t1 (.2429); beta = 0.1: only for t1 (.1429 > .0714;
// t0's .1375 < .150). Weights inherited from the dropped expert.
TEST(SubstHand, SimilarExpertSubstitutes) {
  const std::string sim = sim_e1_e4();
  test::Step s = run("subst:tau=0.5,lambda=0.8,weights=inherit,sim=" + sim + ",beta=0.2");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 4, 2, 4, 4, 0}));
  expect_w(s, 0, .6, .4);
  expect_w(s, 1, .45 / .7, .25 / .7);
  expect_w(s, 2, .40 / .7, .30 / .7);
  test::Step weak = run("subst:tau=0.5,lambda=0.8,sim=" + sim + ",beta=0.1");
  EXPECT_EQ(weak.ids, (std::vector<int32_t>{0, 2, 2, 4, 4, 0}));
  expect_w(weak, 1, .45 / .48, .03 / .48);  // renorm over {e2, e4}
  // beta = 0: the router's order, as without a file.
  test::Step zero = run("subst:tau=0.5,lambda=0.8,sim=" + sim + ",beta=0");
  EXPECT_EQ(zero.ids, (std::vector<int32_t>{0, 2, 2, 0, 4, 0}));
  std::filesystem::remove(sim);
}

TEST(SubstHand, SimilarityFileErrors) {
  EXPECT_THROW(make_routing_policy("subst:sim=/nonexistent/lynx_sim.txt"), Error);
  EXPECT_THROW(make_routing_policy("subst:beta=0.5"), Error);  // beta without a file
  const std::string bad = write_sim("lynx_subst_bad.txt", "not-a-sim 1\nlayers 1 experts 2\n");
  EXPECT_THROW(make_routing_policy("subst:sim=" + bad), Error);
  const std::string cut =
      write_sim("lynx_subst_cut.txt", "lynx-moe-expert-similarity 1\nlayers 1 experts 2\n1 0 0\n");
  EXPECT_THROW(make_routing_policy("subst:sim=" + cut), Error);
  const std::string nan = write_sim(
      "lynx_subst_nan.txt", "lynx-moe-expert-similarity 1\nlayers 1 experts 2\n1 0 nan 1\n");
  EXPECT_THROW(make_routing_policy("subst:sim=" + nan), Error);
  const std::string ok =
      write_sim("lynx_subst_ok.txt", "lynx-moe-expert-similarity 1\nlayers 1 experts 2\n1 0 0 1\n");
  EXPECT_EQ(make_routing_policy("subst:sim=" + ok)->spec(), "subst:sim=" + ok + ",beta=1");
  // Two experts in the file, six in the model.
  EXPECT_THROW(make_routing_policy("subst:sim=" + ok, GatingConfig{6, 2}), Error);
  EXPECT_NO_THROW(make_routing_policy("subst:sim=" + ok, GatingConfig{2, 1}));
  for (const auto& p : {bad, cut, nan, ok}) std::filesystem::remove(p);
}

}  // namespace
}  // namespace lynx
