// Every policy is total over non-finite router logits (docs/routing.md "Non-finite router
// logits"): NaN ranks after everything, -inf after the finite values, +inf first; each token
// still gets exactly k distinct valid ids with finite non-negative weights, and the result is
// deterministic. Before these rules lynx turned a NaN into an integer bin index (undefined;
// a segfault in route-sim --std inf) and the weights came out NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>

#include "helpers.h"
#include "lynx/routing.h"

namespace lynx {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

const std::vector<std::string> kSpecs = {"topk",
                                         "lynx",
                                         "lynx:protect-top1=0",
                                         "lynx:window=0.5/1",
                                         "oea:k0=1",
                                         "oea:k0=3",
                                         "oea:mass=0.7",
                                         "budget:m=2",
                                         "budget:m=12",
                                         "ser:kmin=1,t=0.5",
                                         "ser:kmin=2,t=0",
                                         "static-k:k=1",
                                         "cover",
                                         "cover:tau=0,lambda=0.05",
                                         "subst:tau=0,weights=inherit",
                                         "subst:weights=drop",
                                         "subst:value=exact,weights=own"};

// Random logits with a share of NaN, +inf and -inf, plus whole rows of one kind.
std::vector<float> hostile_logits(std::mt19937_64& rng, int T, int N) {
  auto z = test::random_logits(rng, T, N, 1.5f, true);
  std::uniform_int_distribution<int> pick(0, 9);
  for (int t = 0; t < T; ++t) {
    float* row = &z[size_t(t) * N];
    const int kind = t % 6;
    for (int e = 0; e < N; ++e) {
      if (kind == 1) row[e] = kNaN;
      if (kind == 2) row[e] = kInf;
      if (kind == 3) row[e] = -kInf;
      if (kind >= 4) {
        const int p = pick(rng);
        if (p == 0) row[e] = kNaN;
        if (p == 1) row[e] = kInf;
        if (p == 2) row[e] = -kInf;
      }
    }
  }
  return z;
}

void check_contract(const test::Step& s, const std::string& spec) {
  const int k = s.gating.n_expert_used, N = s.gating.n_expert;
  for (int t = 0; t < s.T; ++t) {
    std::set<int32_t> seen;
    for (int j = 0; j < k; ++j) {
      const int32_t id = s.ids[size_t(t) * k + j];
      const float w = s.weights[size_t(t) * k + j];
      ASSERT_GE(id, 0) << spec << " token " << t;
      ASSERT_LT(id, N) << spec << " token " << t;
      ASSERT_TRUE(std::isfinite(w)) << spec << " token " << t << " slot " << j;
      ASSERT_GE(w, 0.f) << spec << " token " << t;
      seen.insert(id);
    }
    ASSERT_EQ(int(seen.size()), k) << spec << " token " << t << ": ids not distinct";
  }
}

TEST(RoutingNonFinite, EveryPolicyKeepsTheContract) {
  std::mt19937_64 rng(11);
  int checked = 0;
  for (const GatingFunc f : {GatingFunc::kSoftmax, GatingFunc::kSigmoid}) {
    for (const bool norm : {true, false}) {
      for (const int T : {1, 6, 24}) {
        GatingConfig g{16, 4, f, norm, 1.f};
        const auto z = hostile_logits(rng, T, g.n_expert);
        for (const auto& spec : kSpecs) {
          test::Step a(z, T, g), b(z, T, g);
          auto ain = a.in();
          auto aout = a.out();
          make_routing_policy(spec)->route(ain, aout);
          check_contract(a, spec);
          auto bin = b.in();
          auto bout = b.out();
          make_routing_policy(spec)->route(bin, bout);
          EXPECT_EQ(a.ids, b.ids) << spec << ": not deterministic";
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 2 * 3 * int(kSpecs.size()));
}

// The order itself: +inf first, then finite values, then -inf, NaN last; ties by id.
TEST(RoutingNonFinite, TopkRanksInfFirstAndNaNLast) {
  GatingConfig g{6, 5, GatingFunc::kSoftmax, true, 1.f};
  test::Step s({kNaN, 1.f, -kInf, kInf, kNaN, kInf}, 1, g);
  auto in = s.in();
  auto out = s.out();
  route_topk(in, out);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{3, 5, 1, 2, 0}));
  // The two +inf experts share the mass (the softmax limit); the rest get 0.
  EXPECT_FLOAT_EQ(s.weights[0], 0.5f);
  EXPECT_FLOAT_EQ(s.weights[1], 0.5f);
  EXPECT_EQ(s.weights[2], 0.f);
  EXPECT_EQ(s.weights[4], 0.f);
}

// A row of NaNs selects experts 0..k-1 (ties by id) with weight 0: nothing to mix.
TEST(RoutingNonFinite, AllNaNRowGetsZeroWeights) {
  GatingConfig g{8, 2, GatingFunc::kSoftmax, true, 1.f};
  for (const char* spec :
       {"topk", "lynx", "oea:k0=1", "budget:m=2", "ser:kmin=1,t=0.5", "cover:tau=0"}) {
    test::Step s(std::vector<float>(16, kNaN), 2, g);
    auto in = s.in();
    auto out = s.out();
    make_routing_policy(spec)->route(in, out);
    EXPECT_EQ(s.ids, (std::vector<int32_t>{0, 1, 0, 1})) << spec;
    EXPECT_EQ(s.weights, (std::vector<float>(4, 0.f))) << spec;
  }
}

// The statistics over such a step stay finite too.
TEST(RoutingNonFinite, StatisticsStayFinite) {
  std::mt19937_64 rng(5);
  GatingConfig g{64, 8, GatingFunc::kSoftmax, true, 1.f};
  const auto z = hostile_logits(rng, 12, 64);
  test::Step s(z, 12, g);
  auto in = s.in();
  auto out = s.out();
  make_routing_policy("lynx")->route(in, out);
  RoutingStats st;
  accumulate_routing_stats(in, out, st);
  EXPECT_TRUE(std::isfinite(st.mass_kept));
  EXPECT_EQ(st.tokens, 12);
}

}  // namespace
}  // namespace lynx
