// `lynx-moe calibrate`: fits a routing policy's per-layer strength on validation documents
// against an accuracy budget and writes the spec (docs/evaluation.md, "Calibration").
//
// A policy is calibrated through a ladder of strengths per MoE layer (level 0 = the layer
// routed exactly). The layers are probed one at a time (that layer at each level, every other
// layer exact), all in one `evaluate` call on the validation documents at one batch size, so
// the probes share the exact baseline. Costs (log perplexity ratio, or KL) and savings
// (distinct experts) are taken as additive over layers: a greedy raises, one step at a time,
// the layer whose next level (or any higher one) saves the most experts per unit of cost,
// while the summed cost stays within the budget. The combination is then measured as a whole;
// when it exceeds the budget (layers interact), the budget given to the greedy shrinks in
// proportion and the fit repeats, at most kRounds times.
#include <unistd.h>

#include <sys/stat.h>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "commands.h"
#include "common.h"
#include "lynx/eval.h"

namespace lynx::cli {
namespace {

constexpr int kRounds = 3;

// A policy's per-layer ladder: level j of layer l is value[j] in a '/' list.
struct Ladder {
  std::string prefix;          // e.g. "cover:tau=0.5,lambda="
  std::vector<double> values;  // level 0 routes a layer exactly
  bool per_k = false;          // values are for k = 8 and scale as 8 / k (below)
};

Ladder ladder_for(const std::string& policy, double tau) {
  if (policy == "cover") {
    char buf[64];
    std::snprintf(buf, sizeof buf, "cover:tau=%g,lambda=", tau);
    return {buf, {0, 0.03, 0.06, 0.1, 0.2, 0.4}, true};
  }
  if (policy == "lynx") return {"lynx:alpha=3,window=", {0, 2, 1.33, 1, 0.67, 0.5}};
  throw UsageError("--policy: '" + policy +
                   "' has no per-layer ladder to calibrate (supported: cover, lynx)");
}

std::string spec_of(const Ladder& lad, const std::vector<int>& level) {
  std::string s = lad.prefix;
  for (size_t l = 0; l < level.size(); ++l) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%g", l ? "/" : "", lad.values[size_t(level[l])]);
    s += buf;
  }
  return s;
}

// "0.5%" -> 0.005; "0.005" -> 0.005. Throws UsageError for anything else.
double parse_budget(const std::string& text, bool kl) {
  std::string t = text;
  const bool pct = !t.empty() && t.back() == '%';
  if (pct) t.pop_back();
  if (pct && kl) throw UsageError("--budget: a KL budget is in nats per token, not a percentage");
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v) || v <= 0 ||
      (pct ? v > 100 : v > 1)) {
    throw UsageError("--budget: '" + text + "' is not a budget (e.g. 0.5% or 0.005" +
                     std::string(kl ? " nats" : "") + ")");
  }
  return pct ? v / 100 : v;
}

struct Measure {
  double cost = 0, saved = 0;  // cost: log PPL ratio or KL; saved: distinct experts per layer
  const EvalRow* row = nullptr;
};

Measure measure(const EvalRow& r, const EvalRow& base, bool kl) {
  return {kl ? r.kl : std::log(r.ppl / base.ppl), r.distinct_exact - r.distinct, &r};
}

// Greedy fit on per-layer probes: probe[l][j] for j >= 1 (probe[l][0] = zero cost).
std::vector<int> fit(const std::vector<std::vector<Measure>>& probe, double budget) {
  const size_t L = probe.size();
  std::vector<int> level(L, 0);
  double used = 0;
  for (;;) {
    double best_ratio = -1, best_cost = 0;
    size_t best_l = 0;
    int best_j = 0;
    for (size_t l = 0; l < L; ++l) {
      const Measure& cur = probe[l][size_t(level[l])];
      for (size_t j = size_t(level[l]) + 1; j < probe[l].size(); ++j) {
        // A probe that measured a gain (noise on few documents) frees no budget for others.
        const double dc = std::max(0.0, probe[l][j].cost) - std::max(0.0, cur.cost);
        const double ds = probe[l][j].saved - cur.saved;
        if (ds <= 0 || used + dc > budget) continue;
        // A step that costs nothing measurable is the best buy there is.
        const double ratio = ds / std::max(dc, 1e-9);
        if (dc < 0) continue;  // cheaper than the current level: never a step up in cost
        if (ratio > best_ratio) {
          best_ratio = ratio;
          best_l = l;
          best_j = int(j);
          best_cost = dc;
        }
      }
    }
    if (best_ratio < 0) return level;
    level[best_l] = best_j;
    used += best_cost;
  }
}

}  // namespace

void register_calibrate(CLI::App& app) {
  struct Args {
    std::string model, data, budget, policy = "cover", metric = "ppl", output;
    int batch = 16;
    double tau = 0.5;
    EvalOptions opts;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("calibrate",
                                 "Fit a routing policy's per-layer strength to an accuracy budget");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("--data", a->data, "Directory of validation documents (one per file)")
      ->required();
  cmd->add_option("--budget", a->budget,
                  "Accuracy budget: perplexity increase (0.5% or 0.005), or KL in nats/token "
                  "with --metric kl")
      ->required();
  cmd->add_option("--policy", a->policy,
                  "Policy to calibrate: cover (lambda per layer) or lynx "
                  "(window per layer, alpha 3)");
  cmd->add_option("--tau", a->tau, "cover: confidence mass tau, kept fixed")
      ->check(number_in(0, 1));
  cmd->add_option("--metric", a->metric, "ppl or kl");
  cmd->add_option("--batch", a->batch, "Batch size the policy is fitted at")
      ->check(int_in(1, 1 << 16));
  cmd->add_option("--max-tokens", a->opts.max_tokens, "Tokens per document")
      ->check(int_in(2, 1 << 30));
  cmd->add_option("--max-docs", a->opts.max_docs, "Documents (0 = all)")->check(int_in(0, 1 << 30));
  cmd->add_option("-t,--threads", a->opts.n_threads, "Threads (default: all cores)")
      ->check(int_in(0, kMaxThreads));
  cmd->add_option("-o,--output", a->output, "Write the spec here (one line); stdout gets the log")
      ->required();
  cmd->callback([a] {
    if (a->metric != "ppl" && a->metric != "kl") throw UsageError("--metric must be ppl or kl");
    const bool kl = a->metric == "kl";
    const double budget_frac = parse_budget(a->budget, kl);
    const double budget = kl ? budget_frac : std::log1p(budget_frac);
    const Ladder lad0 = ladder_for(a->policy, a->tau);
    struct stat st {};
    if (stat(a->output.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      throw UsageError("-o: '" + a->output + "' is not a regular file");
    }
    auto model = load_model(a->model);
    const ModelConfig& c = model->config();
    if (!c.is_moe()) throw UsageError("-m: '" + a->model + "' has no MoE layers to calibrate");
    // Levels are per layer index as the router sees it (RoutingInput::layer); a model whose
    // last layers are dense needs no levels for them.
    int n_moe = 0;
    for (int l = 0; l < c.n_layer; ++l) {
      if (model->layer(l).gate_exps.present()) n_moe = l + 1;
    }
    // cover's lambda is in tokens' worth of routed mass; a token's secondary experts hold
    // about 1/k of it each, so the ladder for k = 8 stretches by 8 / k (k = 2: up to 1.6).
    Ladder lad = lad0;
    if (lad.per_k) {
      for (double& v : lad.values) v = v * 8.0 / c.gating.n_expert_used;
    }
    auto tok = Tokenizer::from_gguf(model->file());
    const auto docs = read_eval_documents(a->data);

    EvalOptions o = a->opts;
    o.batches = {a->batch};
    o.gen_prompts = 0;
    o.code_lines = 0;
    const size_t L = size_t(n_moe), J = lad.values.size();
    o.policies = {"topk"};
    for (size_t l = 0; l < L; ++l) {
      for (size_t j = 1; j < J; ++j) {
        std::vector<int> level(L, 0);
        level[l] = int(j);
        o.policies.push_back(spec_of(lad, level));
      }
    }
    std::fprintf(stderr, "calibrate: %zu probes (%zu layers x %zu levels) on %zu documents\n",
                 o.policies.size() - 1, L, J - 1, docs.size());
    const auto rows = evaluate(*model, *tok, docs, o);
    const EvalRow& base = rows[0];
    std::vector<std::vector<Measure>> probe(L, std::vector<Measure>(J));
    std::printf("calibrate | model %s | %s | %zu documents (%s) | B=%d | budget %s (%s)\n\n",
                c.name.c_str(), a->policy.c_str(), docs.size(), a->data.c_str(), a->batch,
                a->budget.c_str(), a->metric.c_str());
    std::printf("Per-layer probes (one layer at the level, the others exact):\n\n");
    std::printf(
        "| layer | %s | PPL change | KL | experts saved/layer |\n|---:|---:|---:|---:|---:|\n",
        a->policy == "cover" ? "lambda" : "window");
    for (size_t l = 0; l < L; ++l) {
      for (size_t j = 1; j < J; ++j) {
        probe[l][j] = measure(rows[1 + l * (J - 1) + (j - 1)], base, kl);
        const EvalRow& r = *probe[l][j].row;
        std::printf("| %zu | %g | %+.2f%% | %.4f | %.2f |\n", l, lad.values[j],
                    100 * (r.ppl / base.ppl - 1), r.kl, probe[l][j].saved);
      }
    }
    double target = budget;
    std::string spec;
    for (int round = 0; round < kRounds; ++round) {
      const std::vector<int> level = fit(probe, target);
      spec = spec_of(lad, level);
      EvalOptions v = o;
      v.policies = {"topk", spec};
      const auto vr = evaluate(*model, *tok, docs, v);
      const Measure m = measure(vr[1], vr[0], kl);
      std::printf("\nround %d: %s: PPL %+.2f%%, KL %.4f, experts %.2f of %.2f (%+.1f%%)\n",
                  round + 1, spec.c_str(), 100 * (vr[1].ppl / vr[0].ppl - 1), vr[1].kl,
                  vr[1].distinct, vr[1].distinct_exact,
                  -100 * m.saved / std::max(1e-9, vr[1].distinct_exact));
      if (m.cost <= budget) break;
      if (round + 1 == kRounds) {
        spec = spec_of(lad, std::vector<int>(L, 0));  // nothing fits: exact
        std::printf("no setting within the budget found: writing the exact one\n");
        break;
      }
      target *= budget / m.cost;
    }
    std::ofstream f(a->output);
    f << spec << "\n";
    f.close();
    if (!f) throw Error("cannot write '" + a->output + "'");
    std::printf("\nwrote %s: %s\n", a->output.c_str(), spec.c_str());
  });
}

}  // namespace lynx::cli
