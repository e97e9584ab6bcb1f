// Expert parallelism simulation (docs/distributed-simulation.md): placements, per-rank counts
// and the cost model on cases small enough to compute by hand, the simulator's per-rank
// figures against the plain routing statistics, and the measured-TPOT file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "analysis/ep_model.h"
#include "analysis/placement.h"
#include "analysis/simulate.h"
#include "analysis/trace.h"

namespace lynx {
namespace {

namespace fs = std::filesystem;
using analysis::EpShape;
using analysis::EpStep;
using analysis::EpStepCounter;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("lynx_ep_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A logit row whose top-k are `hot` (10 for those, 0 for the rest).
std::vector<float> row(int n, std::initializer_list<int> hot) {
  std::vector<float> z(size_t(n), 0.f);
  for (int e : hot) z[size_t(e)] = 10.f;
  return z;
}

TEST(Placement, ContiguousSlicesWithEqualCounts) {
  EXPECT_EQ(analysis::contiguous_layer(8, 4), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  // R does not divide N: the first N % R ranks hold one more.
  EXPECT_EQ(analysis::contiguous_layer(5, 2), (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_EQ(analysis::contiguous_layer(3, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_THROW(analysis::contiguous_layer(4, 0), Error);
  EXPECT_THROW(analysis::contiguous_layer(4, 5), Error);
}

TEST(Placement, GreedyLargestFirstByHand) {
  // Loads 8..1 on 2 ranks of 4: 8->r0, 7->r1, 6->r1, 5->r0, 4->r0 (13 = 13, lower rank),
  // 3->r1, 2->r1 (16 < 17; r1 is now full), 1->r0: both ranks 18.
  const std::vector<double> count = {8, 7, 6, 5, 4, 3, 2, 1};
  const auto rank_of = analysis::balance_layer(count, {}, 2);
  EXPECT_EQ(rank_of, (std::vector<int>{0, 1, 1, 0, 0, 1, 1, 0}));
  EXPECT_DOUBLE_EQ(analysis::imbalance_factor(rank_of, count, 2), 1.0);
  // Contiguous: 26 vs 10 around a mean of 18.
  EXPECT_DOUBLE_EQ(analysis::imbalance_factor(analysis::contiguous_layer(8, 2), count, 2),
                   26.0 / 18.0);
}

analysis::TraceHeader header(int layers, int n, int k) {
  analysis::TraceHeader h;
  h.n_layers = layers;
  h.n_expert = n;
  h.n_expert_used = k;
  return h;
}

TEST(Placement, BalancedFromATraceBeatsContiguous) {
  // One layer, N = 4, k = 1: experts 0 and 1 get 3 tokens each, 2 and 3 one each.
  const std::string path = temp_path("place.lxrt");
  {
    analysis::TraceWriter w(path, header(1, 4, 1));
    std::vector<float> z;
    for (int e : {0, 0, 0, 1, 1, 1, 2, 3}) {
      const auto r = row(4, {e});
      z.insert(z.end(), r.begin(), r.end());
    }
    w.write(0, 0, 8, nullptr, z.data());
    w.close();
  }
  const auto load = analysis::expert_load_from_trace(path);
  ASSERT_EQ(load.count.size(), 1u);
  EXPECT_EQ(load.count[0], (std::vector<double>{3, 3, 1, 1}));
  EXPECT_EQ(load.tokens[0], 8);
  const auto p = analysis::balanced_placement(load, 2);
  analysis::validate_placement(p);  // every expert once, 2 per rank
  // 0->r0, 1->r1, 2->r0 (3 = 3, lower rank), 3->r1: 4 and 4.
  EXPECT_EQ(p.layers[0], (std::vector<int>{0, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(analysis::imbalance_factor(p.layers[0], load.count[0], 2), 1.0);
  const auto c = analysis::contiguous_placement(1, 4, 2);
  EXPECT_DOUBLE_EQ(analysis::imbalance_factor(c.layers[0], load.count[0], 2), 1.5);  // 6 vs 4
  // The file the MPI runtime reads.
  const auto j = nlohmann::json::parse(analysis::placement_to_json(p));
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["experts"], 4);
  EXPECT_EQ(j["layers"], nlohmann::json::parse("[[0, 1, 0, 1]]"));
  fs::remove(path);
}

TEST(Placement, CoactivationWeightGroupsOrSpreads) {
  // N = 4, k = 2: two tokens use {0, 1}, two use {2, 3}; every expert has load 2.
  const GatingConfig g{4, 2, GatingFunc::kSoftmax, true, 1.f};
  std::vector<float> z;
  for (auto r : {row(4, {0, 1}), row(4, {0, 1}), row(4, {2, 3}), row(4, {2, 3})}) {
    z.insert(z.end(), r.begin(), r.end());
  }
  std::vector<double> count, coact;
  analysis::add_expert_load(g, z.data(), 4, count, coact);
  EXPECT_EQ(count, (std::vector<double>{2, 2, 2, 2}));
  EXPECT_EQ(coact[0 * 4 + 1], 2);
  EXPECT_EQ(coact[0 * 4 + 2], 0);
  analysis::BalanceOptions spread, group;
  spread.coact_weight = 1;
  group.coact_weight = -2;
  EXPECT_EQ(analysis::balance_layer(count, coact, 2), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(analysis::balance_layer(count, coact, 2, spread), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(analysis::balance_layer(count, coact, 2, group), (std::vector<int>{0, 0, 1, 1}));
}

TEST(Placement, ValidationRejectsBrokenPlacements) {
  analysis::Placement p = analysis::contiguous_placement(2, 4, 2);
  EXPECT_NO_THROW(analysis::validate_placement(p));
  p.layers[1] = {0, 0, 0, 1};  // unequal counts
  EXPECT_THROW(analysis::validate_placement(p), Error);
  p.layers[1] = {0, 0, 1, 2};  // rank out of range
  EXPECT_THROW(analysis::validate_placement(p), Error);
  p.layers[1] = {0, 0, 1};  // an expert missing
  EXPECT_THROW(analysis::validate_placement(p), Error);
}

// Three tokens, N = 4, k = 2, experts {0, 1} on rank 0 and {2, 3} on rank 1:
// t0 -> {0, 1}, t1 -> {1, 2}, t2 -> {3, 0 inactive (weight 0)}.
struct HandStep {
  std::vector<int32_t> ids = {0, 1, 1, 2, 3, 0};
  std::vector<float> w = {0.5f, 0.5f, 0.5f, 0.5f, 1.f, 0.f};
};

TEST(Placement, FileRoundTripAndRefusals) {
  analysis::Placement p = analysis::contiguous_placement(3, 6, 4);
  p.layers[1] = {3, 2, 1, 0, 0, 1};
  const std::string text = analysis::placement_to_json(p);
  EXPECT_EQ(text.back(), '\n');
  const analysis::Placement q = analysis::placement_from_json(text, "t");
  EXPECT_EQ(q.ranks, 4);
  EXPECT_EQ(q.experts, 6);
  EXPECT_EQ(q.layers, p.layers);
  EXPECT_EQ(q.rank_of(1, 0), 3);
  EXPECT_EQ(q.experts_of(1, 1), (std::vector<int>{2, 5}));
  // With the job's shape, a file of another shape is refused; without it, a file that is not
  // a placement (each message names the defect).
  const analysis::PlacementFit fit{4, 6, 2};
  const std::pair<const char*, const char*> bad[] = {
      {"{\"ranks\": 4,", "not valid JSON"},
      {R"({"ranks": 0, "experts": 6, "layers": []})", "\"ranks\" is 0"},
      {R"({"ranks": 2, "experts": 2.0, "layers": []})", "\"experts\" is 2.0"},
      {R"({"ranks": 2, "experts": 2, "layers": {}})", "must be an array"},
      {R"({"ranks": 2, "experts": 2, "layers": [[0, 1.5]]})", "layers[0][1] = 1.5 is not a rank"},
      {R"({"ranks": 2, "experts": 2, "layers": [[0, 1, 1]]})", "layers[0] must list"},
  };
  for (const auto& [t, expect] : bad) {
    try {
      analysis::placement_from_json(t, "t");
      ADD_FAILURE() << "accepted: " << t;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("placement t: ", 0), 0u) << e.what();
    }
  }
  EXPECT_THROW(analysis::placement_from_json(text, "t", &fit), Error);  // 3 layers, not 2
  const analysis::PlacementFit fit3{4, 6, 3};
  EXPECT_EQ(analysis::placement_from_json(text, "t", &fit3).layers, p.layers);
}

TEST(EpModel, PerRankCountsByHand) {
  HandStep h;
  EpStepCounter c(4, 2);
  EpStep st;
  c.count(h.ids.data(), h.w.data(), 3, 2, {0, 0, 1, 1}, st);
  EXPECT_EQ(st.experts, (std::vector<int>{2, 2}));      // r0: 0, 1 (t2's 0 is inactive); r1: 2, 3
  EXPECT_EQ(st.tokens, (std::vector<int>{2, 2}));       // r0: t0, t1; r1: t1, t2
  EXPECT_EQ(st.assignments, (std::vector<int>{3, 2}));  // r0: t0-0, t0-1, t1-1
  // Owners t % 2: t0 on r0 (local), t1 on r1 sends to r0, t2 on r0 sends to r1.
  EXPECT_EQ(st.rows_out, (std::vector<int>{1, 1}));
  EXPECT_EQ(st.rows_in, (std::vector<int>{1, 1}));
  EXPECT_EQ(st.peers, (std::vector<int>{1, 1}));
}

TEST(EpModel, SlicedExpertsPastOneExpertPerRank) {
  EXPECT_EQ(analysis::expert_slices(8, 8), 1);
  EXPECT_EQ(analysis::expert_slices(8, 32), 4);
  EXPECT_THROW(analysis::expert_slices(8, 12), Error);
  EXPECT_THROW(analysis::expert_slices(8, 0), Error);
  // N = 2 on 4 ranks (e0 on r0, r1; e1 on r2, r3), k = 1: t0, t1 -> e0, t2 -> e1.
  const std::vector<int32_t> ids = {0, 0, 1};
  const std::vector<float> w = {1, 1, 1};
  EpStepCounter c(2, 4);
  EXPECT_EQ(c.slices(), 2);
  EpStep st;
  c.count(ids.data(), w.data(), 3, 1, {}, st);
  EXPECT_EQ(st.experts, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(st.tokens, (std::vector<int>{2, 2, 1, 1}));
  // t0 (owner r0) -> r1; t1 (owner r1) -> r0; t2 (owner r2) -> r3.
  EXPECT_EQ(st.rows_out, (std::vector<int>{1, 1, 1, 0}));
  EXPECT_EQ(st.rows_in, (std::vector<int>{1, 1, 0, 1}));
}

TEST(EpModel, CostFormulasByHand) {
  EpShape s;
  s.expert_bytes = 1e6;
  s.hidden = 1000;
  s.act_bytes = 4;
  s.moe_layers = 2;
  s.dense_bytes = 2e6;
  analysis::CostParams c;
  c.mem_bw = 1e9;
  c.link_bw = 1e8;
  c.link_lat = 1e-5;
  EXPECT_DOUBLE_EQ(analysis::expert_seconds(3, 1, s, c), 3e-3);
  EXPECT_DOUBLE_EQ(analysis::expert_seconds(3, 2, s, c), 1.5e-3);
  // 2 (R-1)/R of B x H x 4 bytes: 1.5 x 32000; 2 log2(4) = 4 latencies.
  EXPECT_DOUBLE_EQ(analysis::allreduce_bytes_per_rank(4, 8, s), 48000);
  EXPECT_NEAR(analysis::allreduce_seconds(4, 8, s, c), 48000 / 1e8 + 4e-5, 1e-12);
  EXPECT_NEAR(analysis::allreduce_seconds(3, 8, s, c), 2.0 * 2 / 3 * 32000 / 1e8 + 4e-5,
              1e-12);  // ceil(log2 3) = 2
  EXPECT_EQ(analysis::allreduce_seconds(1, 8, s, c), 0);
  // The compute roof, when given: 2 x 10 assignments x 1e6 weights / 1e10 FLOP/s = 2 ms, under
  // the 3 ms of streaming; 20 assignments take 4 ms.
  s.expert_params = 1e6;
  analysis::CostParams cf = c;
  cf.flops = 1e10;
  EXPECT_DOUBLE_EQ(analysis::expert_seconds(3, 1, s, cf, 10), 3e-3);
  EXPECT_DOUBLE_EQ(analysis::expert_seconds(3, 1, s, cf, 20), 4e-3);
  EXPECT_DOUBLE_EQ(analysis::expert_seconds(3, 2, s, cf, 20), 2e-3);
  EXPECT_DOUBLE_EQ(analysis::dense_seconds(s, c), 2e-3);
  analysis::CostParams c2 = c;
  c2.dense_s = 5e-4;
  EXPECT_DOUBLE_EQ(analysis::dense_seconds(s, c2), 5e-4);

  // The hand step on 2 ranks, B = 3: every rank streams 2 experts; all-to-all phases move
  // one 4000-byte row per rank with one peer: 4e-5 + 1e-5 each, dispatch and combine.
  HandStep h;
  EpStepCounter counter(4, 2);
  EpStep st;
  counter.count(h.ids.data(), h.w.data(), 3, 2, {0, 0, 1, 1}, st);
  EXPECT_NEAR(analysis::all_to_all_seconds(st, s, c), 1e-4, 1e-12);
  analysis::EpAccum acc;
  acc.add(st, 1, s, c);
  const auto p = analysis::predict(acc, 2, 1, 3, s, c);
  EXPECT_DOUBLE_EQ(p.experts_max, 2);
  EXPECT_DOUBLE_EQ(p.experts_mean, 2);
  EXPECT_DOUBLE_EQ(p.imbalance, 1);
  EXPECT_DOUBLE_EQ(p.stream_bytes_max, 2 * 2 * 1e6);       // 2 layers x 2 experts
  EXPECT_DOUBLE_EQ(p.allreduce_bytes, 2 * (1.0 * 12000));  // 2 layers x 2 (1/2) x 3 x 4000
  EXPECT_DOUBLE_EQ(p.a2a_bytes_max, 2 * 2 * 4000.0);       // 2 layers x (1 out + 1 in) rows
  EXPECT_NEAR(p.expert_ms, 4.0, 1e-9);                     // 2 layers x 2e6 B / 1e9 B/s
  EXPECT_NEAR(p.allreduce_ms, 2 * (12000 / 1e8 + 2e-5) * 1e3, 1e-9);
  EXPECT_NEAR(p.a2a_ms, 0.2, 1e-9);
  EXPECT_NEAR(p.dense_ms, 2.0, 1e-9);
  EXPECT_NEAR(p.tpot_allreduce_ms, 4.0 + 0.28 + 2.0, 1e-9);
  EXPECT_NEAR(p.tpot_a2a_ms, 4.0 + 0.2 + 2.0, 1e-9);
}

TEST(EpSim, RankCountsAddUpToTheRoutingStatistics) {
  analysis::SimConfig cfg;
  cfg.gating = {16, 4, GatingFunc::kSoftmax, true, 1.f};
  cfg.batches = {4, 16};
  cfg.steps = 50;
  cfg.repeats = 1;
  analysis::EpConfig ep;
  ep.ranks = {1, 4, 16, 32};
  ep.shape.expert_bytes = 1000;
  ep.shape.hidden = 8;
  ep.shape.moe_layers = 3;
  const std::vector<std::string> specs = {"topk", "lynx"};
  const auto sim = analysis::simulate_routing(cfg, specs);
  const auto rows = analysis::simulate_ep(cfg, specs, ep);
  // Per batch and policy: R = 1 (one row), 4 and 16 (two placements each), 32 (sliced).
  ASSERT_EQ(rows.size(), 2u * 2u * 6u);
  for (const auto& r : rows) {
    const analysis::SimRow* twin = nullptr;
    for (const auto& s : sim) {
      if (s.spec == r.spec && s.batch == r.batch) twin = &s;
    }
    ASSERT_NE(twin, nullptr);
    const double distinct = twin->stats.mean_distinct_policy();
    const auto& p = r.pred;
    SCOPED_TRACE(r.spec + " B " + std::to_string(r.batch) + " R " + std::to_string(r.ranks) + " " +
                 r.placement);
    // Every active expert is on one rank (on `slices` ranks past R = N): the ranks' experts add
    // up to the distinct experts of the same logits.
    EXPECT_NEAR(p.experts_mean * r.ranks, distinct * r.slices, 1e-9);
    EXPECT_LE(p.experts_max, double(16 / std::min(r.ranks, 16)));
    EXPECT_GE(p.imbalance, 1.0 - 1e-12);
    EXPECT_NEAR(p.stream_bytes_max, 3 * p.experts_max * 1000.0 / r.slices, 1e-6);
    if (r.ranks == 1) {
      EXPECT_NEAR(p.experts_max, distinct, 1e-9);
      EXPECT_EQ(p.tokens_max, r.batch);
      EXPECT_EQ(p.allreduce_bytes, 0);
      EXPECT_EQ(p.a2a_bytes_max, 0);
    } else {
      EXPECT_EQ(r.placement == "sliced", r.ranks == 32);
      EXPECT_EQ(r.slices, r.ranks == 32 ? 2 : 1);
    }
  }
  ep.ranks = {24};  // past N = 16 and not a multiple of it
  EXPECT_THROW(analysis::simulate_ep(cfg, specs, ep), Error);
}

TEST(EpSim, JsonFiguresAreTheCsvFigures) {
  // The JSON rows carry the numbers the CSV prints (same rounding), whatever the text layout.
  analysis::SimConfig cfg;
  cfg.gating = {16, 4, GatingFunc::kSoftmax, true, 1.f};
  cfg.batches = {1, 8};
  cfg.steps = 20;
  cfg.repeats = 1;
  analysis::EpConfig ep;
  ep.ranks = {4, 32};
  ep.shape.expert_bytes = 1.5e6;
  ep.shape.hidden = 64;
  const auto rows = analysis::simulate_ep(cfg, {"topk", "lynx"}, ep);
  const std::string csv = analysis::format_ep_rows(rows, "csv");
  const auto js = nlohmann::json::parse(analysis::format_ep_rows(rows, "json"));
  ASSERT_EQ(js.size(), rows.size());
  std::vector<std::string> lines;
  for (size_t a = 0, b; (b = csv.find('\n', a)) != std::string::npos; a = b + 1) {
    lines.push_back(csv.substr(a, b - a));
  }
  ASSERT_EQ(lines.size(), rows.size() + 1);
  auto fields = [](const std::string& line) {
    std::vector<std::string> f;
    const size_t start = line.find("\",") + 2;  // past the quoted policy
    for (size_t a = start, b; a <= line.size(); a = b + 1) {
      b = line.find(',', a);
      if (b == std::string::npos) b = line.size();
      f.push_back(line.substr(a, b - a));
    }
    return f;
  };
  const auto head = fields("\"," + lines[0].substr(lines[0].find(',') + 1));
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto f = fields(lines[i + 1]);
    ASSERT_EQ(f.size(), head.size());
    for (size_t c = 0; c < f.size(); ++c) {
      const nlohmann::json& v = js[i][head[c]];
      if (v.is_string()) {
        EXPECT_EQ(v.get<std::string>(), f[c]) << head[c];
      } else {
        EXPECT_EQ(v.get<double>(), std::strtod(f[c].c_str(), nullptr)) << head[c] << " " << f[c];
      }
    }
  }
}

TEST(EpSim, MeasuredFileParsesAndCompares) {
  const std::string text =
      "# hand-made: R = 1, 2 of the MPI runtime\n"
      "policy,batch,ranks,tpot_ms,scheme,host\n"
      "topk,4,1,2.5,allreduce,a\n"
      "\"lynx:alpha=3,beta=4\",4,2,1.25,alltoall,b\n"
      "topk,4,8,1.0,allreduce,c\n";
  const auto m = analysis::parse_measured_csv(text, "hand.csv");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].spec, "topk");
  EXPECT_EQ(m[1].spec, make_routing_policy("lynx:alpha=3,beta=4")->spec());
  EXPECT_EQ(m[1].ranks, 2);
  EXPECT_EQ(m[1].scheme, "alltoall");
  EXPECT_EQ(m[0].placement, "contiguous");

  std::vector<analysis::EpRow> pred(2);
  pred[0].spec = "topk";
  pred[0].batch = 4;
  pred[0].ranks = 1;
  pred[0].placement = "contiguous";
  pred[0].pred.tpot_allreduce_ms = 5.0;
  pred[1].spec = m[1].spec;
  pred[1].batch = 4;
  pred[1].ranks = 2;
  pred[1].placement = "contiguous";
  pred[1].pred.tpot_allreduce_ms = 9.0;
  pred[1].pred.tpot_a2a_ms = 2.5;
  const auto j = nlohmann::json::parse(analysis::format_comparison(m, pred, "json"));
  ASSERT_EQ(j.size(), 3u);
  EXPECT_DOUBLE_EQ(j[0]["predicted_ms"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(j[0]["ratio"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j[1]["predicted_ms"].get<double>(), 2.5);  // the all-to-all scheme's
  EXPECT_TRUE(j[2]["predicted_ms"].is_null());                // no simulated twin

  for (const char* bad : {"policy,batch,ranks\ntopk,1,1\n",              // no tpot_ms column
                          "policy,batch,ranks,tpot_ms\ntopk,1,1\n",      // too few fields
                          "policy,batch,ranks,tpot_ms\ntopk,1,x,2\n",    // not a number
                          "policy,batch,ranks,tpot_ms\ntopk,1,1.5,2\n",  // not an integer
                          "policy,batch,ranks,tpot_ms\nnosuch,1,1,2\n",  // unknown policy
                          "policy,batch,ranks,tpot_ms\ntopk,1,1,-2\n",   // negative time
                          "policy,batch,ranks,tpot_ms\n\"topk,1,1,2\n",  // open quote
                          "policy,batch,ranks,tpot_ms\n"}) {             // no rows
    EXPECT_THROW(analysis::parse_measured_csv(bad, "bad.csv"), Error) << bad;
  }
}

}  // namespace
}  // namespace lynx
