// `lynx-moe calibrate`: fits a routing policy's per-layer strength on validation documents
// against an accuracy budget and writes the spec (docs/evaluation.md, "Calibration").
//
// A policy is calibrated through a ladder of strengths per MoE layer (level 0 = the layer
// routed exactly: cover/subst lambda 0, lynx window 0, oea k0 = k). The layers are probed one at a
// time (that layer at each level, every other layer exact), all in one `evaluate` call on the
// validation documents at one batch size, so the probes share the exact baseline. Costs (log
// perplexity ratio, or KL) and savings (distinct experts) are taken as additive over layers: a
// greedy raises, one step at a time, the layer whose next level (or any higher one) saves the most
// experts per unit of cost, while the summed cost stays within the budget. The combination is then
// measured as a whole; when it exceeds the budget (layers interact), the budget given to the greedy
// shrinks in proportion and the fit repeats, at most kRounds times.
#include <unistd.h>

#include <sys/stat.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "commands.h"
#include "common.h"
#include "kernels/kernels.h"
#include "lynx/eval.h"
#include "lynx/routing.h"
#include "model/weights.h"

namespace lynx::cli {
namespace {

constexpr int kRounds = 3;

// A policy's per-layer ladder: level j of layer l is value[j] in a '/' list.
struct Ladder {
  std::string prefix;          // e.g. "cover:tau=0.5,lambda="
  std::vector<double> values;  // level 0 routes a layer exactly
  bool per_k = false;          // values are for k = 8 and scale as 8 / k (below)
  // oea: values are k0, the choices a token keeps; level 0 is the model's k (exact), so the
  // levels are set once the model is loaded (k - 1 down to 1 unless --ladder names them).
  bool k0 = false;
};

// `options` (cover, subst: more key=val options of the policy, kept fixed) and `values` (a
// '/' list overriding the default levels, for k = 8) are the --options and --ladder flags.
Ladder ladder_for(const std::string& policy, double tau, const std::string& options,
                  const std::string& values) {
  Ladder lad;
  if (policy == "cover" || policy == "subst") {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s:tau=%g,", policy.c_str(), tau);
    lad = {buf + (options.empty() ? "" : options + ",") + "lambda=",
           {0, 0.03, 0.06, 0.1, 0.2, 0.4},
           true};
  } else if (policy == "lynx") {
    if (!options.empty()) throw UsageError("--options: only for cover, subst and oea");
    lad = {"lynx:alpha=3,window=", {0, 2, 1.33, 1, 0.67, 0.5}};
  } else if (policy == "oea") {
    lad = {"oea:" + (options.empty() ? "" : options + ",") + "k0=", {}, false, true};
  } else {
    throw UsageError("--policy: '" + policy +
                     "' has no per-layer ladder to calibrate (supported: cover, subst, lynx, oea)");
  }
  if (!values.empty()) {
    lad.values = {0};
    size_t pos = 0;
    while (pos <= values.size()) {
      size_t slash = values.find('/', pos);
      if (slash == std::string::npos) slash = values.size();
      const std::string item = values.substr(pos, slash - pos);
      char* end = nullptr;
      const double v = std::strtod(item.c_str(), &end);
      if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(v) || v <= 0) {
        throw UsageError("--ladder: '" + item + "' is not a positive number");
      }
      if (lad.k0 && v != std::floor(v)) {
        throw UsageError("--ladder: '" + item + "' is not a whole number of experts (k0)");
      }
      if (lad.values.size() == 17) throw UsageError("--ladder: at most 16 levels");
      lad.values.push_back(v);
      pos = slash + 1;
    }
  }
  // Probe the spec once so that a bad --options fails before the model loads.
  try {
    make_routing_policy(lad.prefix + (lad.k0 ? "1" : "0.1"));
  } catch (const Error& e) {
    throw UsageError(std::string("--options: ") + e.what());
  }
  return lad;
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

// `lynx-moe expert-sim`: per MoE layer, how alike the experts are (docs/routing.md, "subst"),
// written for subst's sim= option. --probe output: the cosine similarity of two experts'
// outputs over P random inputs x = g * ffn_norm, g ~ N(0, 1) per element (the scale the FFN
// sees after its RMS norm); --probe router: the cosine of their router rows.
std::vector<float> dequant_matrix(const Weight& w, int64_t mat) {
  std::vector<float> out(size_t(w.rows * w.cols));
  std::vector<uint8_t> row(w.row_bytes);
  for (int64_t r = 0; r < w.rows; ++r) {
    kernels::read_row(w.type, w.layout, w.mat(mat), w.cols, r, row.data());
    kernels::dequantize_row(w.type, row.data(), out.data() + r * w.cols, w.cols);
  }
  return out;
}

// Cosine similarities of the rows of a [n x d] matrix.
std::vector<float> row_cosines(const std::vector<float>& m, int n, size_t d) {
  std::vector<double> norm(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (size_t j = 0; j < d; ++j) s += double(m[i * d + j]) * m[i * d + j];
    norm[size_t(i)] = std::sqrt(s);
  }
  std::vector<float> sim(size_t(n) * n);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      double s = 0;
      for (size_t j = 0; j < d; ++j) s += double(m[a * d + j]) * m[b * d + j];
      const double den = norm[size_t(a)] * norm[size_t(b)];
      sim[size_t(a) * n + b] = den > 0 ? float(s / den) : 0.f;
    }
  }
  return sim;
}

std::vector<float> output_similarity(const Model& model, int il, int n_probe, uint64_t seed) {
  const LayerWeights& L = model.layer(il);
  const ModelConfig& c = model.config();
  const int n = c.n_expert, d = c.n_embd, f = int(L.gate_exps.rows);
  std::mt19937_64 rng(seed + uint64_t(il));
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(size_t(n_probe) * d);
  for (int p = 0; p < n_probe; ++p) {
    for (int j = 0; j < d; ++j) x[size_t(p) * d + j] = nd(rng) * (L.ffn_norm ? L.ffn_norm[j] : 1.f);
  }
  std::vector<float> y(size_t(n) * n_probe * d), h(static_cast<size_t>(f));
  for (int e = 0; e < n; ++e) {
    const auto gate = dequant_matrix(L.gate_exps, e), up = dequant_matrix(L.up_exps, e),
               down = dequant_matrix(L.down_exps, e);
    for (int p = 0; p < n_probe; ++p) {
      const float* xp = x.data() + size_t(p) * d;
      for (int i = 0; i < f; ++i) {
        const float a = kernels::dot(gate.data() + size_t(i) * d, xp, d);
        const float b = kernels::dot(up.data() + size_t(i) * d, xp, d);
        h[size_t(i)] = a / (1.f + std::exp(-a)) * b;
      }
      float* yp = y.data() + (size_t(e) * n_probe + p) * d;
      for (int j = 0; j < d; ++j) yp[j] = kernels::dot(down.data() + size_t(j) * f, h.data(), f);
    }
  }
  return row_cosines(y, n, size_t(n_probe) * d);
}

void register_expert_sim(CLI::App& app) {
  struct Args {
    std::string model, output, probe = "output";
    int probes = 64;
    uint64_t seed = 1;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "expert-sim", "Write each MoE layer's expert similarity matrix for subst's sim= option");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-o,--output", a->output, "Similarity file to write")->required();
  cmd->add_option("--probe", a->probe, "output (experts' outputs on random inputs) or router");
  cmd->add_option("--probes", a->probes, "Random inputs for --probe output")
      ->check(int_in(1, 4096));
  cmd->add_option("--seed", a->seed, "Seed of the random inputs");
  cmd->callback([a] {
    if (a->probe != "output" && a->probe != "router") {
      throw UsageError("--probe must be output or router");
    }
    auto model = load_model(a->model, false, false);
    const ModelConfig& c = model->config();
    if (!c.is_moe()) throw UsageError("-m: '" + a->model + "' has no MoE layers");
    if (a->probe == "output" && c.expert_act != ExpertAct::kSwiglu) {
      throw UsageError("--probe output: only SwiGLU experts (use --probe router)");
    }
    int n_moe = 0;
    for (int l = 0; l < c.n_layer; ++l) {
      if (model->layer(l).gate_exps.present()) n_moe = l + 1;
    }
    std::ofstream f(a->output);
    f << "lynx-moe-expert-similarity 1\nlayers " << n_moe << " experts " << c.n_expert << "\n";
    for (int l = 0; l < n_moe; ++l) {
      std::vector<float> sim;
      if (!model->layer(l).gate_exps.present()) {
        sim.assign(size_t(c.n_expert) * c.n_expert, 0.f);  // a dense layer: never read
      } else if (a->probe == "router") {
        sim = row_cosines(dequant_matrix(model->layer(l).router, 0), c.n_expert,
                          size_t(model->layer(l).router.cols));
      } else {
        sim = output_similarity(*model, l, a->probes, a->seed);
      }
      double off = 0, mx = -1;
      for (int i = 0; i < c.n_expert; ++i) {
        for (int j = 0; j < c.n_expert; ++j) {
          f << sim[size_t(i) * c.n_expert + j] << (j + 1 < c.n_expert ? ' ' : '\n');
          if (i != j) {
            off += sim[size_t(i) * c.n_expert + j];
            mx = std::max(mx, double(sim[size_t(i) * c.n_expert + j]));
          }
        }
      }
      std::printf("layer %d: mean off-diagonal similarity %.3f, max %.3f\n", l,
                  off / (double(c.n_expert) * (c.n_expert - 1)), mx);
    }
    f.close();
    if (!f) throw Error("cannot write '" + a->output + "'");
    std::printf("wrote %s\n", a->output.c_str());
  });
}

struct CalibrateArgs {
  std::string model, data, budget, policy = "cover", metric = "ppl", output, options, ladder;
  int batch = 16;
  double tau = 0.5;
  EvalOptions opts;
  TierFlags tier;  // an expert tier for the probes (--expert-cache ...), as eval takes it
};

// What the probes and the fit share.
struct CalibrateRun {
  const CalibrateArgs& a;
  const Model& model;
  const Tokenizer& tok;
  const std::vector<EvalDocument>& docs;
  const Ladder& lad;
  EvalOptions o;  // the probes' options (B, the metric's settings)
  bool kl;
  double budget;  // in the metric's units (log of the PPL ratio, or nats/token)
};

// The probe rows (one layer at one level, the others exact; rows[0] exact) as measures
// [layer][level], printed as the per-layer table.
std::vector<std::vector<Measure>> print_probes(const CalibrateRun& cr,
                                               const std::vector<EvalRow>& rows, size_t L,
                                               size_t J) {
  const CalibrateArgs& a = cr.a;
  const Ladder& lad = cr.lad;
  const bool kl = cr.kl;
  const EvalRow& base = rows[0];
  std::vector<std::vector<Measure>> probe(L, std::vector<Measure>(J));
  std::printf("calibrate | model %s | %s | %zu documents (%s) | B=%d | budget %s (%s)\n\n",
              cr.model.config().name.c_str(), a.policy.c_str(), cr.docs.size(), a.data.c_str(),
              a.batch, a.budget.c_str(), a.metric.c_str());
  std::printf("Per-layer probes (one layer at the level, the others exact):\n\n");
  std::printf(
      "| layer | %s | PPL change | KL | experts saved/layer |\n|---:|---:|---:|---:|---:|\n",
      a.policy == "lynx"  ? "window"
      : a.policy == "oea" ? "k0"
                          : "lambda");
  for (size_t l = 0; l < L; ++l) {
    for (size_t j = 1; j < J; ++j) {
      probe[l][j] = measure(rows[1 + l * (J - 1) + (j - 1)], base, kl);
      const EvalRow& r = *probe[l][j].row;
      std::printf("| %zu | %g | %+.2f%% | %.4f | %.2f |\n", l, lad.values[j],
                  100 * (r.ppl / base.ppl - 1), r.kl, probe[l][j].saved);
    }
  }
  return probe;
}

// Fits levels within the budget from the probes, checks the fit on the documents and scales
// the target by what it missed, at most kRounds times; the exact spec when nothing fits.
std::string fit_within_budget(const CalibrateRun& cr,
                              const std::vector<std::vector<Measure>>& probe, size_t L) {
  const Ladder& lad = cr.lad;
  const double budget = cr.budget;
  const bool kl = cr.kl;
  double target = budget;
  std::string spec;
  for (int round = 0; round < kRounds; ++round) {
    const std::vector<int> level = fit(probe, target);
    spec = spec_of(lad, level);
    EvalOptions v = cr.o;
    v.policies = {"topk", spec};
    const auto vr = evaluate(cr.model, cr.tok, cr.docs, v);
    const Measure m = measure(vr[1], vr[0], kl);
    std::printf("\nround %d: %s: PPL %+.2f%%, KL %.4f, experts %.2f of %.2f (%+.1f%%)\n", round + 1,
                spec.c_str(), 100 * (vr[1].ppl / vr[0].ppl - 1), vr[1].kl, vr[1].distinct,
                vr[1].distinct_exact, -100 * m.saved / std::max(1e-9, vr[1].distinct_exact));
    if (vr[0].tier_misses > 0) {  // with an expert tier: what the fit does to its reads
      std::printf("         tier misses per step %.2f of exact's %.2f (%+.1f%%)\n",
                  vr[1].tier_misses, vr[0].tier_misses,
                  100 * (vr[1].tier_misses / vr[0].tier_misses - 1));
    }
    if (m.cost <= budget) break;
    if (round + 1 == kRounds) {
      spec = spec_of(lad, std::vector<int>(L, 0));  // nothing fits: exact
      std::printf("no setting within the budget found: writing the exact one\n");
      break;
    }
    target *= budget / m.cost;
  }
  return spec;
}

void write_spec(const std::string& path, const std::string& spec) {
  std::ofstream f(path);
  f << spec << "\n";
  f.close();
  if (!f) throw Error("cannot write '" + path + "'");
  std::printf("\nwrote %s: %s\n", path.c_str(), spec.c_str());
}

// Exact routing, then one spec per (layer, level): that layer at the level, the others exact.
std::vector<std::string> probe_specs(const Ladder& lad, size_t L) {
  std::vector<std::string> specs = {"topk"};
  for (size_t l = 0; l < L; ++l) {
    for (size_t j = 1; j < lad.values.size(); ++j) {
      std::vector<int> level(L, 0);
      level[l] = int(j);
      specs.push_back(spec_of(lad, level));
    }
  }
  return specs;
}

void run_calibrate(const CalibrateArgs& a) {
  if (a.metric != "ppl" && a.metric != "kl") throw UsageError("--metric must be ppl or kl");
  const bool kl = a.metric == "kl";
  const double budget_frac = parse_budget(a.budget, kl);
  const double budget = kl ? budget_frac : std::log1p(budget_frac);
  const Ladder lad0 = ladder_for(a.policy, a.tau, a.options, a.ladder);
  struct stat st {};
  if (stat(a.output.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw UsageError("-o: '" + a.output + "' is not a regular file");
  }
  auto model = load_model(a.model, true, true, a.tier);
  const ModelConfig& c = model->config();
  if (!c.is_moe()) throw UsageError("-m: '" + a.model + "' has no MoE layers to calibrate");
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
  if (lad.k0) {  // level 0 keeps all k choices (exact); the others fewer
    const int k = c.gating.n_expert_used;
    if (lad.values.empty()) {
      for (int k0 = k; k0 >= 1; --k0) lad.values.push_back(k0);
    } else {
      lad.values[0] = k;
      for (size_t j = 1; j < lad.values.size(); ++j) {
        if (lad.values[j] >= k) {
          throw UsageError("--ladder: k0 " + std::to_string(int(lad.values[j])) +
                           " keeps every choice of this model's k = " + std::to_string(k) +
                           " (a level must be below k)");
        }
      }
    }
    if (lad.values.size() < 2) throw UsageError("-m: k = 1 leaves oea nothing to move");
  }
  auto tok = Tokenizer::from_gguf(model->file());
  const auto docs = read_eval_documents(a.data);

  EvalOptions o = a.opts;
  o.batches = {a.batch};
  o.gen_prompts = 0;
  o.code_lines = 0;
  const size_t L = size_t(n_moe), J = lad.values.size();
  o.policies = probe_specs(lad, L);
  std::fprintf(stderr, "calibrate: %zu probes (%zu layers x %zu levels) on %zu documents\n",
               o.policies.size() - 1, L, J - 1, docs.size());
  const auto rows = evaluate(*model, *tok, docs, o);
  const CalibrateRun cr{a, *model, *tok, docs, lad, o, kl, budget};
  const auto probe = print_probes(cr, rows, L, J);
  write_spec(a.output, fit_within_budget(cr, probe, L));
}

void add_calibrate_flags(CLI::App* cmd, CalibrateArgs& a) {
  cmd->add_option("-m,--model", a.model, "GGUF model file")->required();
  cmd->add_option("--data", a.data, "Directory of validation documents (one per file)")->required();
  cmd->add_option("--budget", a.budget,
                  "Accuracy budget: perplexity increase (0.5% or 0.005), or KL in nats/token "
                  "with --metric kl")
      ->required();
  cmd->add_option("--policy", a.policy,
                  "Policy to calibrate: cover or subst (lambda per layer), lynx (window per "
                  "layer, alpha 3) or oea (k0 per layer: the choices a token keeps)");
  cmd->add_option("--options", a.options,
                  "cover/subst/oea: further options kept fixed, e.g. weights=inherit,growth=0.75 "
                  "or window=0.7");
  cmd->add_option("--ladder", a.ladder,
                  "Strength levels to probe per layer, '/'-separated (for k = 8; cover/subst "
                  "scale them by 8/k; oea: the k0 values, default k - 1 down to 1)");
  cmd->add_option("--tau", a.tau, "cover: confidence mass tau, kept fixed")->check(number_in(0, 1));
  cmd->add_option("--metric", a.metric, "ppl or kl");
  cmd->add_option("--batch", a.batch, "Batch size the policy is fitted at")
      ->check(int_in(1, 1 << 16));
  cmd->add_option("--max-tokens", a.opts.max_tokens, "Tokens per document")
      ->check(int_in(2, 1 << 30));
  cmd->add_option("--max-docs", a.opts.max_docs, "Documents (0 = all)")->check(int_in(0, 1 << 30));
  cmd->add_option("-t,--threads", a.opts.n_threads, "Threads (default: all cores)")
      ->check(int_in(0, kMaxThreads));
  cmd->add_option("-o,--output", a.output, "Write the spec here (one line); stdout gets the log")
      ->required();
  add_tier_flags(cmd, &a.tier);
}

}  // namespace

void register_calibrate(CLI::App& app) {
  register_expert_sim(app);
  auto a = std::make_shared<CalibrateArgs>();
  auto* cmd = app.add_subcommand("calibrate",
                                 "Fit a routing policy's per-layer strength to an accuracy budget");
  add_calibrate_flags(cmd, *a);
  cmd->callback([a] { run_calibrate(*a); });
}

}  // namespace lynx::cli
