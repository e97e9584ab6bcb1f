// `lynx-moe route-sim`: routing policies side by side on router logits, without a model.
// Synthetic logits from a stated distribution, or a recorded routing trace
// (--logits). Every list flag takes a comma list and the cross product runs, llama-bench
// style; the time per call column makes it the policy-overhead micro-benchmark too.
#include <cmath>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "common.h"
#include "lynx/routing.h"
#include "routing/simulate.h"

namespace lynx::cli {

void register_route_sim(CLI::App& app) {
  struct Args {
    std::string experts = "64", k = "8", batch = "1,16,64", dist = "topic", gating = "softmax";
    std::string logits, format = "md";
    std::vector<std::string> routing;
    int steps = 200, repeats = 3, topics = 4, norm_topk = 1;
    uint64_t seed = 1;
    float std = 1.f, topic_std = 1.5f, zipf_s = 1.f, scale = 1.f;
  };
  auto a = std::make_shared<Args>();
  std::string names;
  for (const auto& n : routing_policy_names()) names += (names.empty() ? "" : ", ") + n;
  auto* cmd = app.add_subcommand(
      "route-sim", "Simulate routing policies on router logits: distinct experts, mass kept");
  cmd->add_option("--routing", a->routing,
                  "Policy specs (" + names +
                      "), separated by ';' or by repeating the flag, e.g. "
                      "'topk;lynx:alpha=3,beta=4;oea:k0=4'")
      ->required();
  cmd->add_option("--experts", a->experts, "Experts per layer N (list)");
  cmd->add_option("--k", a->k, "Experts per token k (list)");
  cmd->add_option("--batch", a->batch, "Decode batch sizes B (list)");
  cmd->add_option("--steps", a->steps, "Routing calls per policy and batch size")
      ->check(int_in(1, 1 << 24));
  cmd->add_option("--repeats", a->repeats, "Timed passes; the fastest is reported")
      ->check(int_in(1, 1 << 16));
  cmd->add_option("--seed", a->seed, "Random seed (logits and trace sampling)");
  cmd->add_option("--dist", a->dist,
                  "Synthetic logits: gauss (iid normal), zipf (popular experts), topic "
                  "(tokens share a topic's preferred experts)");
  cmd->add_option("--std", a->std,
                  "Noise std of the synthetic logits ('inf' gives infinite and NaN logits: a "
                  "test of the policies' non-finite rules, docs/routing.md)")
      ->check(number_in(0, INFINITY, false, true));
  cmd->add_option("--topics", a->topics, "topic: number of topics")->check(int_in(1, 1 << 16));
  cmd->add_option("--topic-std", a->topic_std, "topic: std of a topic's expert preferences")
      ->check(number_in(0, 1e6));
  cmd->add_option("--zipf-s", a->zipf_s, "zipf: exponent of the popularity law")
      ->check(number_in(0, 1e6));
  cmd->add_option("--gating", a->gating, "softmax or sigmoid");
  cmd->add_option("--norm-topk", a->norm_topk, "1: renormalize the top-k weights, 0: do not");
  cmd->add_option("--scale", a->scale, "Routed weights scale")->check(number_in(0, 1e6, true));
  cmd->add_option("--logits", a->logits,
                  "Routing trace to replay instead of synthetic logits (N, k and gating come "
                  "from the trace)");
  cmd->add_option("-o,--output", a->format, "Output format: md, csv, json");
  cmd->callback([a] {
    std::vector<std::string> specs;
    for (const auto& r : a->routing) {
      for (auto& s : split_specs(r)) specs.push_back(s);
    }
    if (specs.empty()) throw UsageError("--routing: no routing policy given");
    for (const auto& s : specs) {  // reject bad specs before any work
      try {
        make_routing_policy(s);
      } catch (const Error& e) {
        throw UsageError(std::string("--routing: ") + e.what());
      }
    }
    if (a->gating != "softmax" && a->gating != "sigmoid") {
      throw UsageError("--gating must be softmax or sigmoid, got '" + a->gating + "'");
    }
    if (a->norm_topk != 0 && a->norm_topk != 1) throw UsageError("--norm-topk must be 0 or 1");
    if (a->format != "md" && a->format != "csv" && a->format != "json") {
      throw UsageError("-o must be md, csv or json, got '" + a->format + "'");
    }
    routing::SimConfig cfg;
    cfg.batches = parse_int_list(a->batch, "--batch");
    cfg.steps = a->steps;
    cfg.repeats = a->repeats;
    cfg.seed = a->seed;
    cfg.dist.name = a->dist;
    cfg.dist.noise_std = a->std;
    cfg.dist.n_topics = a->topics;
    cfg.dist.topic_std = a->topic_std;
    cfg.dist.zipf_s = a->zipf_s;
    cfg.trace_path = a->logits;
    std::vector<routing::SimRow> rows;
    const auto experts =
        a->logits.empty() ? parse_int_list(a->experts, "--experts") : std::vector<int>{0};
    const auto ks = a->logits.empty() ? parse_int_list(a->k, "--k") : std::vector<int>{0};
    for (int n : experts) {
      if (a->logits.empty() && (n < 1 || n > 4096)) {
        throw UsageError("--experts: " + std::to_string(n) + " is out of range [1, 4096]");
      }
      for (int k : ks) {
        if (a->logits.empty() && (k < 1 || k > n)) {
          throw UsageError("--k: " + std::to_string(k) + " is out of range [1, " +
                           std::to_string(n) + "] for " + std::to_string(n) + " experts");
        }
        cfg.gating = {n, k, a->gating == "sigmoid" ? GatingFunc::kSigmoid : GatingFunc::kSoftmax,
                      a->norm_topk == 1, a->scale};
        if (a->logits.empty()) {
          for (const auto& s : specs) {
            try {
              make_routing_policy(s, cfg.gating);
            } catch (const Error& e) {
              throw UsageError(std::string("--routing: ") + e.what());
            }
          }
        }
        auto part = routing::simulate_routing(cfg, specs);
        rows.insert(rows.end(), part.begin(), part.end());
      }
    }
    if (a->logits.empty()) {
      std::fprintf(stderr, "route-sim: synthetic '%s' logits (std %g), %d steps, seed %llu\n",
                   a->dist.c_str(), double(a->std), a->steps, (unsigned long long)a->seed);
    } else {
      std::fprintf(stderr, "route-sim: trace %s, %d steps, seed %llu\n", a->logits.c_str(),
                   a->steps, (unsigned long long)a->seed);
    }
    std::fputs(routing::format_sim_rows(rows, a->format).c_str(), stdout);
  });
}

}  // namespace lynx::cli
