// Properties every policy must keep on any input (issue 4 "What it must show"): k distinct
// valid ids per token, finite non-negative weights normalized as the model's gating demands,
// prefill/exact tokens untouched, nothing written outside the output, and for lynx: B = 1
// equals exact top-k bit for bit, and the top-1 always survives with protect-top1.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>

#include "helpers.h"
#include "lynx/routing.h"

namespace lynx {
namespace {

const std::vector<std::string> kSpecs = {
    "topk",
    "lynx",
    "lynx:protect-top1=0",
    "lynx:piggyback-prefill=0",
    "lynx:mode=decode-only-batches",
    "lynx:alpha=0.7,beta=1",
    "lynx:alpha=3,beta=2.5",
    "oea:k0=1",
    "oea:k0=2",
    "oea:k0=2,window=1",
    "oea:mass=0.6",
    "oea:k0=2,mass=0.9,window=1",
    "oea:mass=0.7,mass-resident",
    "oea:mass=0.5,mass-resident,rescue=0.02",
    "oea:k0=2,rescue=0.3",
    "oea:k0=1/3/2",
    "budget:m=1",
    "budget:m=12",
    "ser:kmin=1,t=0.3",
    "ser:kmin=2,t=0.9",
    "static-k:k=1",
    "static-k:k=3",
    "cover",
    "cover:tau=0,lambda=0.05",
    "cover:tau=0.7,lambda=2/0.3,piggyback-prefill=0",
    "subst",
    "subst:tau=0,lambda=0.1,weights=inherit",
    "subst:lambda=0.3/0.05,weights=drop-renorm,growth=0.75",
    "subst:tau=0.3,value=exact,piggyback-prefill=0",
};

bool reduces_k(const std::string& spec) {
  return spec.rfind("ser", 0) == 0 || spec.rfind("static-k", 0) == 0;
}

struct Case {
  int N, k;
  GatingFunc func;
  bool norm;
  float scale;
};

// Checks one policy's output on one step against the contract in routing.h.
void check_step(const std::string& spec, test::Step& s, const std::vector<int32_t>& exact_ids,
                const std::vector<float>& exact_w) {
  const GatingConfig& g = s.gating;
  const int N = g.n_expert, k = g.n_expert_used;
  for (int t = 0; t < s.T; ++t) {
    SCOPED_TRACE("token " + std::to_string(t));
    const int32_t* ids = &s.ids[size_t(t) * k];
    const float* w = &s.weights[size_t(t) * k];
    std::set<int32_t> uniq(ids, ids + k);
    ASSERT_EQ(int(uniq.size()), k) << "ids not distinct";
    for (int j = 0; j < k; ++j) {
      ASSERT_GE(ids[j], 0);
      ASSERT_LT(ids[j], N);
      ASSERT_TRUE(std::isfinite(w[j]));
      ASSERT_GE(w[j], 0.f);
    }
    const bool fixed = !s.flags.empty() && s.flags[t] != kTokenDecode;
    if (fixed) {
      // Prefill and exact tokens keep exact top-k, bit for bit.
      for (int j = 0; j < k; ++j) {
        ASSERT_EQ(ids[j], exact_ids[size_t(t) * k + j]);
        ASSERT_EQ(w[j], exact_w[size_t(t) * k + j]);
      }
    }
    const float* z = &s.logits[size_t(t) * N];
    double sum = 0, exact_sum = 0;
    for (int j = 0; j < k; ++j) {
      sum += w[j];
      exact_sum += exact_w[size_t(t) * k + j];
    }
    if (g.norm_topk) {
      ASSERT_NEAR(sum, g.weights_scale, 1e-5 * g.weights_scale);
    } else if (reduces_k(spec)) {
      // The model's own gating for the kept experts: raw probabilities.
      for (int j = 0; j < k; ++j) {
        if (w[j] == 0.f) continue;
        ASSERT_NEAR(w[j], g.weights_scale * test::ref_prob(z, N, ids[j], g.func),
                    2e-5 * g.weights_scale);
      }
    } else {
      // Remapping policies keep the token's original top-k probability mass.
      ASSERT_NEAR(sum, exact_sum, 2e-5 * std::max(1.0, exact_sum));
    }
    // Every policy here keeps the exact top-1 active (lynx only with protect-top1).
    if (spec != "lynx:protect-top1=0") {
      const int32_t top1 = exact_ids[size_t(t) * k];
      bool kept = false;
      for (int j = 0; j < k; ++j) kept |= ids[j] == top1 && w[j] > 0.f;
      ASSERT_TRUE(kept) << "top-1 expert " << top1 << " dropped";
    }
  }
}

TEST(RoutingInvariants, EveryPolicyOnRandomInputs) {
  const std::vector<Case> cases = {
      {8, 2, GatingFunc::kSoftmax, true, 1.f},   {8, 1, GatingFunc::kSoftmax, false, 1.f},
      {64, 8, GatingFunc::kSoftmax, true, 1.f},  {64, 6, GatingFunc::kSoftmax, false, 1.f},
      {128, 8, GatingFunc::kSoftmax, true, 1.f}, {160, 6, GatingFunc::kSoftmax, false, 16.f},
      {64, 8, GatingFunc::kSigmoid, true, 2.5f}, {32, 4, GatingFunc::kSigmoid, false, 1.f},
      {8, 8, GatingFunc::kSoftmax, true, 1.f},
  };
  std::mt19937_64 rng(42);
  int checked = 0;
  for (const auto& c : cases) {
    for (int T : {1, 2, 5, 16, 64}) {
      for (int variant = 0; variant < 8; ++variant) {
        const bool coarse = variant & 1, mixed = variant & 2, tier = variant & 4;
        GatingConfig g{c.N, c.k, c.func, c.norm, c.scale};
        auto z = test::random_logits(rng, T, c.N, 1.5f, coarse);
        std::vector<uint8_t> flags;
        if (mixed) {
          std::uniform_int_distribution<int> pick(0, 3);
          for (int t = 0; t < T; ++t) {
            const int p = pick(rng);
            flags.push_back(p == 0 ? kTokenPrefill : p == 1 ? kTokenExact : kTokenDecode);
          }
        }
        // The expert tier: about a third of the experts resident (cost 1), the rest read from
        // disk (cost 20).
        std::vector<uint8_t> resident;
        std::vector<float> cost;
        if (tier) {
          std::uniform_int_distribution<int> pick(0, 2);
          for (int e = 0; e < c.N; ++e) {
            resident.push_back(pick(rng) == 0);
            cost.push_back(resident.back() ? 1.f : 20.f);
          }
        }
        test::Step ref(z, T, g);
        ref.flags = flags;
        auto rin = ref.in();
        auto rout = ref.out();
        route_topk(rin, rout);
        for (const auto& spec : kSpecs) {
          SCOPED_TRACE(spec + " N=" + std::to_string(c.N) + " k=" + std::to_string(c.k) +
                       " T=" + std::to_string(T) + " variant=" + std::to_string(variant));
          auto pol = make_routing_policy(spec);
          test::Step s(z, T, g);
          s.flags = flags;
          s.resident = resident;
          s.cost = cost;
          // Guard values after the [T x k] outputs: nothing may be written past them.
          s.ids.push_back(-99);
          s.weights.push_back(-99.f);
          auto in = s.in();
          auto out = s.out();
          pol->route(in, out);
          ASSERT_EQ(s.ids.back(), -99);
          ASSERT_EQ(s.weights.back(), -99.f);
          ASSERT_EQ(s.logits, z) << "policy modified the logits";
          s.ids.pop_back();
          s.weights.pop_back();
          check_step(spec, s, ref.ids, ref.weights);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 2000);
}

// mission.md: "with B = 1 the result equals exact top-k" -- ids and weights, bit for bit.
TEST(RoutingInvariants, LynxWithOneTokenIsExactTopk) {
  std::mt19937_64 rng(7);
  for (int it = 0; it < 400; ++it) {
    const int N = std::vector<int>{8, 60, 64, 128, 160}[it % 5];
    const int k = std::min(N, 1 + int(rng() % 8));
    GatingConfig g{N, k, it % 3 == 0 ? GatingFunc::kSigmoid : GatingFunc::kSoftmax, it % 2 == 0,
                   it % 4 == 0 ? 2.5f : 1.f};
    auto z = test::random_logits(rng, 1, N, 2.f, it % 2 == 1);
    test::Step a(z, 1, g), b(z, 1, g);
    auto ain = a.in();
    auto aout = a.out();
    route_topk(ain, aout);
    for (const char* spec :
         {"lynx", "lynx:protect-top1=0", "lynx:alpha=3,beta=4", "lynx:alpha=0.5,beta=8"}) {
      auto pol = make_routing_policy(spec);
      auto bin = b.in();
      auto bout = b.out();
      pol->route(bin, bout);
      ASSERT_EQ(a.ids, b.ids) << spec << " iteration " << it;
      ASSERT_EQ(a.weights, b.weights) << spec << " iteration " << it;
    }
  }
}

// A batch of exact-routed requests: lynx (and every batch-aware peer) must not touch them.
TEST(RoutingInvariants, ExactAndPrefillTokensOnlyBatchIsExact) {
  std::mt19937_64 rng(3);
  GatingConfig g{64, 8, GatingFunc::kSoftmax, true, 1.f};
  auto z = test::random_logits(rng, 16, 64, 1.5f, false);
  test::Step ref(z, 16, g);
  auto rin = ref.in();
  auto rout = ref.out();
  route_topk(rin, rout);
  for (const char* spec :
       {"lynx", "oea:k0=2", "budget:m=8", "ser:kmin=1,t=0.5", "static-k:k=2", "cover:tau=0"}) {
    test::Step s(z, 16, g);
    s.flags.assign(16, kTokenExact);
    s.flags[3] = kTokenPrefill;
    auto in = s.in();
    auto out = s.out();
    make_routing_policy(spec)->route(in, out);
    EXPECT_EQ(s.ids, ref.ids) << spec;
    EXPECT_EQ(s.weights, ref.weights) << spec;
  }
}

TEST(RoutingInvariants, RejectsBadGating) {
  std::vector<float> z(8, 0.f);
  std::vector<int32_t> ids(8);
  std::vector<float> w(8);
  RoutingOutput out{ids.data(), w.data()};
  RoutingInput in;
  in.logits = z.data();
  in.n_tokens = 1;
  auto pol = make_routing_policy("lynx");
  EXPECT_THROW(pol->route(in, out), Error);  // no gating
  GatingConfig g{8, 9, GatingFunc::kSoftmax, true, 1.f};
  in.gating = &g;
  EXPECT_THROW(pol->route(in, out), Error);  // k > N
  g.n_expert_used = 0;
  EXPECT_THROW(pol->route(in, out), Error);  // k = 0
}

// Scratch lives in the policy object: the same object routes steps of different shapes
// (growing and shrinking T, different N) with the same results as a fresh object.
TEST(RoutingInvariants, PolicyObjectsAreReusableAcrossShapes) {
  std::mt19937_64 rng(11);
  for (const auto& spec : kSpecs) {
    auto reused = make_routing_policy(spec);
    for (int it = 0; it < 12; ++it) {
      const int N = it % 2 ? 128 : 64, T = std::vector<int>{64, 3, 17, 1}[it % 4];
      GatingConfig g{N, 8, GatingFunc::kSoftmax, true, 1.f};
      auto z = test::random_logits(rng, T, N, 1.5f, false);
      test::Step a(z, T, g), b(z, T, g);
      auto ain = a.in();
      auto aout = a.out();
      auto bin = b.in();
      auto bout = b.out();
      reused->route(ain, aout);
      make_routing_policy(spec)->route(bin, bout);
      ASSERT_EQ(a.ids, b.ids) << spec;
      ASSERT_EQ(a.weights, b.weights) << spec;
    }
  }
}

}  // namespace
}  // namespace lynx
