// Routing over HTTP: a request's routing level or spec, its cap, the batch's rule (the
// strongest level every request allows), usage.routing, and the SLO controller's levels in
// /metrics. Levels are driven by step counts, not by time: a target of a microsecond is
// missed by every step, one of an hour by none.
#include <gtest/gtest.h>

#include <thread>

#include "lynx/error.h"
#include "util.h"

namespace lynx::test {
namespace {

// {level: decode tokens} of an answer's usage.routing.
std::map<int, int> levels_of(const json& usage) {
  std::map<int, int> m;
  for (const json& l : usage["routing"]["levels"]) m[l["level"]] = l["decode_tokens"];
  return m;
}

void expect_400(const Reply& r, const std::string& code, const std::string& says) {
  EXPECT_EQ(r.status, 400) << r.body;
  if (r.status != 400) return;
  const json e = r.j()["error"];
  EXPECT_EQ(e["code"], code) << r.body;
  EXPECT_NE(e["message"].get<std::string>().find(says), std::string::npos) << r.body;
}

std::string body(const std::string& extra, int max_tokens = 8) {
  return R"({"prompt":"route me","temperature":0,"ignore_eos":true,"max_tokens":)" +
         std::to_string(max_tokens) + (extra.empty() ? "" : "," + extra) + "}";
}

constexpr const char* kLadder = "lynx:alpha=3,beta=4@0.3;cover:lambda=0.2@1.5";

TEST(RequestRouting, WithoutTheFlagOnlyExactAndDefault) {
  ServerOptions o = tiny_options();
  o.routing = "lynx:alpha=3,beta=4";
  Running srv(o);
  expect_400(post(srv, "/v1/completions", body(R"("routing":1)")), "invalid_value",
             "--allow-request-routing");
  expect_400(post(srv, "/v1/completions", body(R"("routing":"lynx:alpha=3,beta=4")")),
             "invalid_value", "--allow-request-routing");
  expect_400(post(srv, "/v1/completions", body(R"("max_routing_level":1)")), "invalid_value",
             "--allow-request-routing");
  expect_400(post(srv, "/v1/completions", body(R"("routing":true)")), "invalid_type", "routing");
  // What it got: exact for "exact", the server's lynx (level 1) for the default.
  Reply r = post(srv, "/v1/completions", body(R"("routing":"exact")"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{0, 7}}));
  EXPECT_EQ(r.j()["usage"]["routing"]["levels"][0]["spec"], "topk");
  r = post(srv, "/v1/completions", body(R"("routing":"default")"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{1, 7}}));
  const json models = get(srv, "/v1/models").j();
  EXPECT_EQ(models["data"][0]["meta"]["routing_levels"].size(), 2u);
}

TEST(RequestRouting, InvalidLevelsAndSpecsAre400) {
  ServerOptions o = tiny_options();
  o.routing_ladder = kLadder;
  o.accuracy_budget_pct = 1.0;  // cover:lambda=0.2 (1.5%) is above it
  o.allow_request_routing = true;
  Running srv(o);
  expect_400(post(srv, "/v1/completions", body(R"("routing":7)")), "invalid_value",
             "not on this server's routing ladder");
  expect_400(post(srv, "/v1/completions", body(R"("routing":-1)")), "invalid_value",
             "not on this server's routing ladder");
  expect_400(post(srv, "/v1/completions", body(R"("routing":"oea:k0=4")")), "invalid_value",
             "not a level of this server's routing ladder");
  expect_400(post(srv, "/v1/completions", body(R"("routing":"nonsense:x=1")")), "invalid_value",
             "not a routing policy spec");
  expect_400(post(srv, "/v1/completions", body(R"("routing":2)")), "invalid_value",
             "accuracy budget");
  expect_400(post(srv, "/v1/completions", body(R"("max_routing_level":"cover:lambda=0.2")")),
             "invalid_value", "accuracy budget");
  expect_400(post(srv, "/v1/completions", body(R"("max_routing_level":1.5)")), "invalid_type",
             "max_routing_level");
  expect_400(post(srv, "/v1/completions", body(R"("max_routing_level":[1])")), "invalid_type",
             "max_routing_level");
  // The server still serves, and the refusals admitted nothing.
  Reply r = post(srv, "/v1/completions", body(R"("routing":"lynx:beta=4,alpha=3")"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{1, 7}}));
  EXPECT_EQ(metric(get(srv, "/metrics").body, "lynx_routing_max_level"), 1);
}

TEST(RequestRouting, NamedLevelsAndCapsWithStreamingUsage) {
  ServerOptions o = tiny_options();
  o.routing_ladder = kLadder;
  o.allow_request_routing = true;  // the server itself stays at --routing topk: level 0
  Running srv(o);
  Reply r = post(srv, "/v1/completions", body(R"("routing":2)"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{2, 7}}));
  // A cap below the named level wins; a cap of 0 is exact.
  r = post(srv, "/v1/completions", body(R"("routing":2,"max_routing_level":1)"));
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{1, 7}}));
  r = post(srv, "/v1/completions", body(R"("routing":"cover:lambda=0.2","max_routing_level":0)"));
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{0, 7}}));
  // Streaming: the usage chunk says the same.
  Stream s = post_stream(
      srv, "/v1/completions",
      body(
          R"("routing":"cover:lambda=0.2","stream":true,"stream_options":{"include_usage":true})"));
  ASSERT_EQ(s.status, 200);
  const auto chunks = s.chunks();
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(levels_of(chunks.back()["usage"]), (std::map<int, int>{{2, 7}}));
  // The engine counts a step after the step's requests were answered: wait for the last.
  std::string m;
  EXPECT_TRUE(eventually([&] {
    m = get(srv, "/metrics").body;
    return metric(m, "lynx_routing_level_steps_total{level=\"2\",spec=\"cover:lambda=0.2\"}") == 14;
  })) << m;
  EXPECT_EQ(metric(m, "lynx_routing_level"), 0);
}

// usage.routing's decode_steps and distinct experts per step: what the engine measured on the
// steps that made the request's tokens. tiny-moe has one MoE layer, 8 of 64 experts per token.
TEST(RoutingUsage, DistinctExpertsOfTheRequestsSteps) {
  {
    Running srv(tiny_options());  // topk
    // Alone: every decode step is this request's one token, so exactly its 8 experts.
    Reply r = post(srv, "/v1/completions", body("", 8));
    ASSERT_EQ(r.status, 200) << r.body;
    json u = r.j()["usage"]["routing"];
    EXPECT_EQ(u["decode_steps"], 7) << u;
    EXPECT_EQ(u["distinct_experts_per_step"], 8.0) << u;
    EXPECT_EQ(u["distinct_experts_exact_per_step"], 8.0) << u;
    Stream s = post_stream(srv, "/v1/completions",
                           body(R"("stream":true,"stream_options":{"include_usage":true})"));
    ASSERT_EQ(s.status, 200);
    EXPECT_EQ(s.chunks().back()["usage"]["routing"], u);
    // The first token comes from the prompt: no decode step, nothing measured.
    r = post(srv, "/v1/completions", body("", 1));
    u = r.j()["usage"]["routing"];
    EXPECT_EQ(u["decode_steps"], 0) << u;
    EXPECT_TRUE(u["distinct_experts_per_step"].is_null()) << u;
    // Two choices decode in the same steps: each step counted once, with both tokens' experts
    // (sampled, so that the two differ).
    r = post(srv, "/v1/completions",
             R"({"prompt":"route me","temperature":1,"seed":5,"n":2,"ignore_eos":true,)"
             R"("max_tokens":8})");
    ASSERT_EQ(r.status, 200) << r.body;
    u = r.j()["usage"]["routing"];
    EXPECT_EQ(u["decode_steps"], 7) << u;
    const double d = u["distinct_experts_per_step"];
    EXPECT_GT(d, 8.0) << u;
    EXPECT_LE(d, 16.0) << u;
    EXPECT_EQ(u["distinct_experts_exact_per_step"], d) << u;
  }
  // Four requests (different prompts) decoding together under lynx: they share every decode
  // step, so they report the same figures, and the policy activates no more experts than exact
  // top-k would.
  ServerOptions o = tiny_options();
  o.routing = "lynx:alpha=3,beta=4";
  Running srv(o);
  srv.server->set_paused(true);
  std::vector<json> usage(4);
  std::vector<std::thread> th;
  for (size_t i = 0; i < usage.size(); ++i) {
    th.emplace_back([&, i] {
      Reply r = post(srv, "/v1/completions",
                     R"({"prompt":"route me )" + std::to_string(i) +
                         R"(","temperature":0,"ignore_eos":true,"max_tokens":12})");
      if (r.status == 200) usage[i] = r.j()["usage"]["routing"];
    });
  }
  EXPECT_TRUE(eventually(
      [&] { return metric(get(srv, "/metrics").body, "lynx_requests_waiting") == 4.0; }));
  srv.server->set_paused(false);
  for (auto& t : th) t.join();
  ASSERT_TRUE(usage[0].is_object());
  EXPECT_EQ(usage[0]["decode_steps"], 11) << usage[0];
  const double d = usage[0]["distinct_experts_per_step"];
  const double exact = usage[0]["distinct_experts_exact_per_step"];
  EXPECT_GT(exact, 8.0) << usage[0];
  EXPECT_LE(exact, 32.0) << usage[0];
  EXPECT_GE(d, 8.0) << usage[0];
  EXPECT_LE(d, exact) << usage[0];
  for (size_t i = 1; i < usage.size(); ++i) EXPECT_EQ(usage[i], usage[0]) << i;
}

// Eight requests decoding together from their first step: the batch runs the strongest level
// every request allows. A request routed "exact" does not hold the others back.
TEST(RequestRouting, TheBatchTakesTheWeakestWish) {
  ServerOptions o = tiny_options();
  o.routing_ladder = kLadder;
  o.routing = "cover:lambda=0.2";  // the server's level: 2
  o.allow_request_routing = true;
  o.max_batch = 8;
  auto run_batch = [&](const std::vector<std::string>& extras) {
    Running srv(o);
    srv.server->set_paused(true);
    std::vector<json> usage(extras.size());
    std::vector<std::thread> th;
    for (size_t i = 0; i < extras.size(); ++i) {
      th.emplace_back([&, i] {
        Reply r = post(srv, "/v1/completions", body(extras[i], 12));
        if (r.status == 200) usage[i] = r.j()["usage"];
      });
    }
    EXPECT_TRUE(eventually([&] {
      return metric(get(srv, "/metrics").body, "lynx_requests_waiting") == double(extras.size());
    }));
    srv.server->set_paused(false);
    for (auto& t : th) t.join();
    return usage;
  };
  auto u = run_batch({"", "", R"("routing":"exact")", ""});
  EXPECT_EQ(levels_of(u[0]), (std::map<int, int>{{2, 11}}));
  EXPECT_EQ(levels_of(u[2]), (std::map<int, int>{{0, 11}}));
  u = run_batch({"", R"("max_routing_level":1)", "", R"("routing":"exact")"});
  for (int i : {0, 1, 2}) EXPECT_EQ(levels_of(u[size_t(i)]), (std::map<int, int>{{1, 11}})) << i;
  EXPECT_EQ(levels_of(u[3]), (std::map<int, int>{{0, 11}}));
  // A named stronger level does not lift the others above what they allow (the server's).
  u = run_batch({R"("routing":1)", R"("routing":2)"});
  EXPECT_EQ(levels_of(u[0]), (std::map<int, int>{{1, 11}}));
  EXPECT_EQ(levels_of(u[1]), (std::map<int, int>{{1, 11}}));
}

TEST(AdaptiveRouting, TriesLevelByLevelWhenEveryStepMissesTheTarget) {
  ServerOptions o = tiny_options();
  o.routing_ladder = kLadder;
  o.tpot_slo_s = 1e-6;  // every step is slower: each level is tried, found too slow, passed
  Running srv(o);
  // One request alone, 80 tokens: 79 decode steps; the first 8 are not learned from (cold
  // steps), then a level runs 3 steps (explore_steps) before its predictions count; then,
  // nothing fitting, the strongest.
  Reply r = post(srv, "/v1/completions", body("", 80));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{0, 11}, {1, 3}, {2, 65}}));
  const std::string m = get(srv, "/metrics").body;
  EXPECT_EQ(metric(m, "lynx_routing_level"), 2) << m;
  EXPECT_EQ(metric(m, "lynx_routing_level_changes_total"), 2);
  EXPECT_EQ(metric(m, "lynx_routing_level_steps_total{level=\"1\",spec=\"lynx:alpha=3,beta=4\"}"),
            3);
  EXPECT_EQ(
      metric(m, "lynx_routing_level_info{level=\"2\",spec=\"cover:lambda=0.2\",cost_pct=\"1.5\"}"),
      1);
  EXPECT_GT(metric(m, "lynx_routing_tpot_estimate_seconds"), 0);
  EXPECT_EQ(metric(m, "lynx_routing_decision_decode_tokens"), 1);
  EXPECT_GT(metric(m, "lynx_routing_predicted_step_seconds{level=\"2\"}"), 0);
  EXPECT_EQ(get(srv, "/v1/models").j()["data"][0]["meta"]["routing"], "adaptive");
}

TEST(AdaptiveRouting, TheWindowSetsTheEstimateNotThePace) {
  ServerOptions o = tiny_options();
  o.routing_ladder = kLadder;
  o.tpot_slo_s = 1e-6;
  o.slo_window_steps = 5;
  Running srv(o);
  Reply r = post(srv, "/v1/completions", body("", 40));
  ASSERT_EQ(r.status, 200) << r.body;
  // The feed-forward controller does not wait windows between levels.
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{0, 11}, {1, 3}, {2, 25}}));
}

TEST(AdaptiveRouting, BudgetAndCapsBoundTheController) {
  ServerOptions o = tiny_options();
  o.routing_ladder = kLadder;
  o.tpot_slo_s = 1e-6;
  o.accuracy_budget_pct = 0.5;  // level 1 only
  o.allow_request_routing = true;
  Running srv(o);
  Reply r = post(srv, "/v1/completions", body("", 80));
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{0, 11}, {1, 68}}));
  // The controller is at level 1 now; a request capped at exact stays exact.
  r = post(srv, "/v1/completions", body(R"("max_routing_level":0)", 20));
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{0, 19}}));
  EXPECT_EQ(metric(get(srv, "/metrics").body, "lynx_routing_level"), 1);
}

TEST(AdaptiveRouting, StaysExactWithSlack) {
  ServerOptions o = tiny_options();
  o.tpot_slo_s = 3600;  // the default ladder (cover at increasing strength)
  Running srv(o);
  Reply r = post(srv, "/v1/completions", body("", 60));
  EXPECT_EQ(levels_of(r.j()["usage"]), (std::map<int, int>{{0, 59}}));
  const std::string m = get(srv, "/metrics").body;
  EXPECT_EQ(metric(m, "lynx_routing_level"), 0);
  EXPECT_EQ(metric(m, "lynx_routing_max_level"), 4);
  EXPECT_EQ(metric(m, "lynx_routing_level_changes_total"), 0);
}

// The engine feeds each finished request's TPOT to the controller's tail loop: with slack
// the loop reads a tail and leaves the threshold alone; --slo-tail 0 turns it off.
TEST(AdaptiveRouting, FinishedRequestsFeedTheTailLoop) {
  for (int tail : {16, 0}) {
    ServerOptions o = tiny_options();
    o.tpot_slo_s = 3600;
    o.slo_tail_requests = tail;
    Running srv(o);
    for (int i = 0; i < 9; ++i) {
      Reply r = post(srv, "/v1/completions", body("", 6));
      ASSERT_EQ(r.status, 200) << r.body;
    }
    const std::string m = get(srv, "/metrics").body;
    if (tail > 0) {
      EXPECT_GT(metric(m, "lynx_routing_tail_tpot_seconds"), 0) << m;
    } else {
      EXPECT_EQ(metric(m, "lynx_routing_tail_tpot_seconds"), 0) << m;
    }
    EXPECT_EQ(metric(m, "lynx_routing_aim"), 1);
    EXPECT_EQ(metric(m, "lynx_routing_level"), 0);
  }
}

TEST(AdaptiveRouting, BadConfigurationsAreRefusedAtStartup) {
  auto bad = [](auto&& edit) {
    ServerOptions o = tiny_options();
    edit(o);
    EXPECT_THROW(Server{o}, Error);
  };
  bad([](ServerOptions& o) { o.routing_ladder = "cover;;lynx"; });
  bad([](ServerOptions& o) { o.routing_ladder = "lynx;oea:k0=99"; });  // above the model's k
  bad([](ServerOptions& o) {                                           // a budget needs costs
    o.routing_ladder = "lynx";
    o.accuracy_budget_pct = 1;
  });
  bad([](ServerOptions& o) {  // a fixed --routing must be on the ladder
    o.routing_ladder = kLadder;
    o.routing = "oea:k0=4";
  });
  bad([](ServerOptions& o) { o.tpot_slo_s = -1; });
  bad([](ServerOptions& o) { o.slo_window_steps = 0; });
  bad([](ServerOptions& o) { o.slo_tail_requests = -1; });
}

}  // namespace
}  // namespace lynx::test
