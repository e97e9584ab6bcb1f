// The policy registry (spec strings and their errors) and the statistics on a hand example.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "lynx/routing.h"

namespace lynx {
namespace {

TEST(Registry, NamesAndCanonicalSpecs) {
  EXPECT_EQ(routing_policy_names(),
            (std::vector<std::string>{"topk", "lynx", "oea", "budget", "ser", "static-k", "cover",
                                      "subst"}));
  const std::pair<const char*, const char*> cases[] = {
      {"topk", "topk"},
      {" lynx ", "lynx"},
      {"lynx:alpha=3,beta=4", "lynx:alpha=3,beta=4"},
      {"lynx:beta=2, alpha=0.7", "lynx:alpha=0.7,beta=2"},
      {"lynx:alpha=auto,beta=auto", "lynx"},
      {"lynx:protect-top1=off,piggyback-prefill=0", "lynx:protect-top1=0,piggyback-prefill=0"},
      {"lynx:protect-top1", "lynx"},
      {"lynx:mode=decode-only-batches", "lynx:mode=decode-only-batches"},
      {"lynx:mode=decode-tokens", "lynx"},
      {"lynx:window=1", "lynx:window=1"},
      {"lynx:alpha=3,window=1.33/0.67/ 0 /1.5", "lynx:alpha=3,window=1.33/0.67/0/1.5"},
      {"oea:k0=4", "oea:k0=4"},
      {"budget:m=24", "budget:m=24"},
      {"ser:kmin=4,t=0.2", "ser:kmin=4,t=0.2"},
      {"ser:t=0.25,kmin=2", "ser:kmin=2,t=0.25"},
      {"static-k:k=6", "static-k:k=6"},
      {"cover", "cover"},
      {"cover:tau=0.5,lambda=0.05", "cover"},
      {"cover:lambda=0.1/0.2/ 0 ,tau=0.7", "cover:tau=0.7,lambda=0.1/0.2/0"},
      {"cover:piggyback-prefill=off", "cover:piggyback-prefill=0"},
      {"cover:growth=0.75,lambda=0.06", "cover:lambda=0.06,growth=0.75"},
  };
  for (const auto& [spec, canon] : cases) {
    auto p = make_routing_policy(spec);
    EXPECT_EQ(p->spec(), canon) << spec;
    // The canonical spec reads back to the same policy.
    EXPECT_EQ(make_routing_policy(p->spec())->spec(), canon);
  }
}

// Each bad spec must be rejected with a message that names the problem.
TEST(Registry, ParseErrorsNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty"},
      {"   ", "empty"},
      {"foo", "unknown routing policy 'foo'"},
      {"Lynx", "unknown routing policy 'Lynx'"},
      {"lynx:", "nothing after ':'"},
      {"lynx:gamma=1", "unknown option 'gamma'"},
      {"lynx:gamma=1", "known: alpha, beta"},
      {"topk:k=3", "takes no options"},
      {"lynx:alpha=abc", "'abc' is not a number"},
      {"lynx:alpha=3x", "'3x' is not a number"},
      {"lynx:alpha=-1", "out of range"},
      {"lynx:alpha=0", "out of range"},
      {"lynx:beta=0.5", "out of range"},
      {"lynx:alpha", "needs a value"},
      {"lynx:alpha=", "empty value"},
      {"lynx:alpha=1,alpha=2", "given twice"},
      {"lynx:alpha=1,,beta=2", "stray ','"},
      {"lynx:=3", "without a name"},
      {"lynx:mode=fast", "not one of: decode-tokens, decode-only-batches"},
      {"lynx:protect-top1=maybe", "not a boolean"},
      {"lynx:beta=2,window=1", "not both"},
      {"lynx:window=1//2", "'' is not a number"},
      {"lynx:window=1/-2", "out of range"},
      {"lynx:window", "needs a value"},
      {"oea", "needs k0"},
      {"oea:k0=0", "out of range"},
      {"oea:k0=2.5", "not an integer"},
      {"budget", "needs m"},
      {"budget:m=-3", "out of range"},
      {"ser:kmin=2", "needs t"},
      {"ser:t=0.2", "needs kmin"},
      {"ser:kmin=2,t=1.5", "out of range"},
      {"static-k", "needs k"},
      {"static-k:k=nan", "not an integer"},
      {"cover:tau=1.5", "out of range"},
      {"cover:tau=nan", "not a number"},
      {"cover:lambda=-0.1", "out of range"},
      {"cover:lambda=0.1//0.2", "'' is not a number"},
      {"cover:k0=2", "unknown option"},
      {"cover:growth=-1", "out of range"},
  };
  for (const auto& [spec, msg] : cases) {
    try {
      make_routing_policy(spec);
      ADD_FAILURE() << "accepted bad spec '" << spec << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos)
          << "spec '" << spec << "': message '" << e.what() << "' lacks '" << msg << "'";
    }
  }
}

// Hand example, N = 4, k = 2, two tokens.
//   t0 logits [1, 0, 0.5, -1]: exact {e0, e2}; the policy gives {e0, e1}  (e2 replaced)
//   t1 logits [-1, 0, 2, 1]:   exact {e2, e3}; the policy keeps both but e3 with weight 0
// distinct exact {0, 2, 3} = 3, policy {0, 1, 2} = 3 (e3 is inactive); active 3 of 4;
// changed: t0 loses e2, t1 drops e3 -> 2; top-1 kept: both; mass kept:
//   t0 (p0 + p1) / (p0 + p2), t1 p2 / (p2 + p3).
TEST(Stats, HandExample) {
  const std::vector<float> z = {1.f, 0.f, 0.5f, -1.f, -1.f, 0.f, 2.f, 1.f};
  GatingConfig g{4, 2, GatingFunc::kSoftmax, true, 1.f};
  std::vector<int32_t> ids = {0, 1, 2, 3};
  std::vector<float> w = {0.6f, 0.4f, 1.f, 0.f};
  RoutingInput in;
  in.logits = z.data();
  in.n_tokens = 2;
  in.gating = &g;
  RoutingOutput out{ids.data(), w.data()};
  RoutingStats st;
  accumulate_routing_stats(in, out, st);
  EXPECT_EQ(st.steps, 1);
  EXPECT_EQ(st.tokens, 2);
  EXPECT_EQ(st.distinct_exact, 3);
  EXPECT_EQ(st.distinct_policy, 3);
  EXPECT_EQ(st.assignments, 4);
  EXPECT_EQ(st.assignments_active, 3);
  EXPECT_EQ(st.assignments_changed, 2);
  EXPECT_EQ(st.top1_kept, 2);
  auto p = [&](int t, int e) { return test::ref_prob(&z[t * 4], 4, e, GatingFunc::kSoftmax); };
  const double m0 = (p(0, 0) + p(0, 1)) / (p(0, 0) + p(0, 2));
  const double m1 = p(1, 2) / (p(1, 2) + p(1, 3));
  EXPECT_NEAR(st.mass_kept, m0 + m1, 1e-6);
  EXPECT_NEAR(st.mean_mass_kept(), (m0 + m1) / 2, 1e-6);
  EXPECT_DOUBLE_EQ(st.frac_changed(), 0.5);
  EXPECT_DOUBLE_EQ(st.tokens_per_expert(), 1.0);
  EXPECT_DOUBLE_EQ(st.ratio_distinct(), 1.0);

  // A second step through the allocation-free accumulator adds up.
  RoutingStatsAccumulator acc;
  acc.add(in, out, st);
  EXPECT_EQ(st.steps, 2);
  EXPECT_EQ(st.distinct_policy, 6);
  EXPECT_NEAR(st.mean_mass_kept(), (m0 + m1) / 2, 1e-6);
  RoutingStats sum;
  sum.add(st);
  sum.add(st);
  EXPECT_EQ(sum.assignments_changed, 8);
  EXPECT_DOUBLE_EQ(sum.mean_distinct_policy(), 3.0);
}

// Sigmoid gating: mass is measured on the sigmoid scores.
TEST(Stats, SigmoidMass) {
  const std::vector<float> z = {2.f, 1.f, 0.f};
  GatingConfig g{3, 1, GatingFunc::kSigmoid, true, 1.f};
  std::vector<int32_t> ids = {1};
  std::vector<float> w = {1.f};
  RoutingInput in;
  in.logits = z.data();
  in.n_tokens = 1;
  in.gating = &g;
  RoutingStats st;
  accumulate_routing_stats(in, RoutingOutput{ids.data(), w.data()}, st);
  EXPECT_NEAR(st.mass_kept, (1 / (1 + std::exp(-1.0))) / (1 / (1 + std::exp(-2.0))), 1e-6);
  EXPECT_EQ(st.top1_kept, 0);
}

}  // namespace
}  // namespace lynx
