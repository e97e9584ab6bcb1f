// `lynx-moe route-sim`: routing policies side by side on router logits, without a model.
// Synthetic logits from a stated distribution, or a recorded routing trace
// (--logits). Every list flag takes a comma list and the cross product runs, llama-bench
// style; the time per call column makes it the policy-overhead micro-benchmark too.
// With --ranks it simulates expert parallelism instead: per-rank load, bytes and the cost
// model's TPOT (docs/distributed-simulation.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "analysis/simulate.h"
#include "analysis/trace.h"
#include "commands.h"
#include "common.h"
#include "lynx/gguf.h"
#include "lynx/routing.h"
#include "lynx/synth.h"

namespace lynx::cli {
namespace {

struct SimArgs {
  std::string experts = "64", k = "8", batch = "1,16,64", dist = "topic", gating = "softmax";
  std::string logits, format = "md";
  std::vector<std::string> routing;
  int steps = 200, repeats = 3, topics = 4, norm_topk = 1;
  uint64_t seed = 1;
  float std = 1.f, topic_std = 1.5f, zipf_s = 1.f, scale = 1.f;
};

struct EpArgs {
  std::string ranks, model, shape, wtype = "q4_0", placement = "contiguous,balanced";
  std::string measured;
  std::vector<std::string> placement_files;
  double expert_bytes = 0, dense_bytes = -1, act_bytes = 4;
  int hidden = 0, moe_layers = 0, calib_tokens = 8192;
  double mem_bw = 200, link_bw = 12.5, link_lat = 2, dense_ms = -1, coact = 0, gflops = 0;
};

// Sizes from a GGUF model: routed expert tensors (blk.L.ffn_{gate,up,down}_exps) give the
// expert bytes and the MoE layers; every other tensor is dense, except the token embedding
// (a row lookup) unless the output projection is tied to it.
analysis::EpShape shape_from_model(const std::string& path, int* n_expert, int* k) {
  const gguf::File f = gguf::File::open(path);
  analysis::EpShape s;
  double exp_bytes = 0, exp_params = 0, dense = 0;
  int moe_layers = 0, n = 0;
  for (const auto& t : f.tensors()) {
    const bool exps = t.name.find("_exps.") != std::string::npos;
    if (exps) {
      exp_bytes += double(t.n_bytes);
      exp_params += double(t.n_elements());
      if (t.name.find("ffn_gate_exps") != std::string::npos) {
        ++moe_layers;
        n = int(t.ne[2]);
        s.hidden = int(t.ne[0]);
      }
    } else if (t.name != "token_embd.weight" || !f.find_tensor("output.weight")) {
      dense += double(t.n_bytes);
    }
  }
  if (moe_layers == 0 || n < 1) throw UsageError("-m: '" + path + "' has no routed experts");
  s.moe_layers = moe_layers;
  s.expert_bytes = exp_bytes / moe_layers / n;
  s.expert_params = exp_params / moe_layers / n;
  s.dense_bytes = dense;
  *n_expert = n;
  const std::string arch = f.get_string("general.architecture", "");
  *k = int(f.get_int(arch + ".expert_used_count", 0));
  return s;
}

// Sizes of a known shape (lynx-moe synth --shape) at weight type `type`, without a file.
analysis::EpShape shape_from_synth(const SynthShape& sh, const std::string& type) {
  const gguf::TensorType t = gguf::tensor_type_from_name(type);
  auto mat = [&](int64_t in, int64_t out) { return double(gguf::row_size(t, in)) * double(out); };
  analysis::EpShape s;
  s.hidden = sh.n_embd;
  s.moe_layers = sh.n_layer;
  s.expert_bytes = 2 * mat(sh.n_embd, sh.n_ff_exp) + mat(sh.n_ff_exp, sh.n_embd);
  s.expert_params = 3.0 * sh.n_embd * sh.n_ff_exp;
  const int64_t q = int64_t(sh.n_head) * sh.head_dim, kv = int64_t(sh.n_head_kv) * sh.head_dim;
  const double attn = mat(sh.n_embd, q) + 2 * mat(sh.n_embd, kv) + mat(q, sh.n_embd);
  const double router = 4.0 * sh.n_embd * sh.n_expert;  // F32
  const double shared =
      sh.n_ff_shexp ? 2 * mat(sh.n_embd, sh.n_ff_shexp) + mat(sh.n_ff_shexp, sh.n_embd) : 0;
  s.dense_bytes = sh.n_layer * (attn + router + shared) + mat(sh.n_embd, sh.n_vocab);
  return s;
}

// A placement file of `lynx-moe place` (analysis/placement.h); a malformed one, or one where a
// rank does not hold its share, is a broken input file (lynx::Error, exit 1).
analysis::Placement read_placement(const std::string& path) {
  analysis::Placement p = analysis::placement_from_json(read_text_file(path, "--placement-file"),
                                                        "file '" + path + "'");
  try {
    analysis::validate_placement(p);
  } catch (const Error& e) {
    throw Error("placement file '" + path + "': " + e.what());
  }
  return p;
}

// One integer from a flag that is a list elsewhere in route-sim.
int single_int(const std::string& v, const std::string& flag) {
  const auto l = parse_int_list(v, flag);
  if (l.size() != 1) throw UsageError(flag + ": give one value with --ranks, got '" + v + "'");
  return l[0];
}

// The sizes --ranks simulates: from -m or --shape, then the override flags. model_n / model_k:
// the experts and k of the model or shape (0 when sizes come from flags only).
analysis::EpShape ep_shape(const EpArgs& e, int* n_expert, int* k, std::string* source) {
  int model_n = 0, model_k = 0;
  if (!e.model.empty() && !e.shape.empty()) throw UsageError("give -m or --shape, not both");
  analysis::EpShape shape;
  if (!e.model.empty()) {
    if (std::filesystem::is_directory(e.model)) {
      throw UsageError("-m: '" + e.model + "' is a directory, expected a GGUF file");
    }
    shape = shape_from_model(e.model, &model_n, &model_k);
    *source = e.model;
  } else if (!e.shape.empty()) {
    SynthShape sh;
    try {
      sh = synth_shape(e.shape);
    } catch (const Error& err) {
      throw UsageError(std::string("--shape: ") + err.what());
    }
    if (sh.n_expert < 1) throw UsageError("--shape: '" + e.shape + "' has no experts");
    if (e.moe_layers > 0) sh.n_layer = e.moe_layers;  // as synth --layers
    try {
      shape = shape_from_synth(sh, e.wtype);
    } catch (const Error& err) {
      throw UsageError(std::string("--wtype: ") + err.what());
    }
    model_n = sh.n_expert;
    model_k = sh.n_expert_used;
    *source = e.shape + " " + e.wtype;
  }
  if (e.expert_bytes > 0) shape.expert_bytes = e.expert_bytes;
  if (e.hidden > 0) shape.hidden = e.hidden;
  if (e.moe_layers > 0) shape.moe_layers = e.moe_layers;
  if (e.dense_bytes >= 0) shape.dense_bytes = e.dense_bytes;
  shape.act_bytes = e.act_bytes;
  if (shape.expert_bytes <= 0 || shape.hidden <= 0) {
    throw UsageError(
        "--ranks needs expert sizes: -m MODEL, --shape NAME, or --expert-bytes and "
        "--hidden");
  }
  *n_expert = model_n;
  *k = model_k;
  return shape;
}

// --placement and the cost model's flags into ec (ranks, placement files aside).
void ep_model_options(const EpArgs& e, const analysis::EpShape& shape, analysis::EpConfig& ec) {
  ec.contiguous = ec.balanced = false;
  for (const auto& p : split_specs(e.placement)) {
    if (p == "contiguous")
      ec.contiguous = true;
    else if (p == "balanced")
      ec.balanced = true;
    else
      throw UsageError("--placement: expected contiguous and/or balanced, got '" + p + "'");
  }
  ec.cost.mem_bw = e.mem_bw * 1e9;
  ec.cost.link_bw = e.link_bw * 1e9;
  ec.cost.link_lat = e.link_lat * 1e-6;
  ec.cost.dense_s = e.dense_ms >= 0 ? e.dense_ms * 1e-3 : -1;
  ec.cost.flops = e.gflops * 1e9;
  if (ec.cost.flops > 0 && shape.expert_params <= 0) {
    throw UsageError("--rank-gflops needs -m or --shape (an expert's weight count)");
  }
  ec.balance.coact_weight = e.coact;
  ec.calib_tokens = e.calib_tokens;
  ec.shape = shape;
}

void run_ep(const SimArgs& a, const EpArgs& e, CLI::App* cmd, std::vector<std::string> specs,
            analysis::SimConfig cfg) {
  for (auto& sp : specs) sp = make_routing_policy(sp)->spec();  // rows carry canonical specs
  analysis::EpConfig ec;
  ec.ranks = parse_int_list(e.ranks, "--ranks");
  for (int r : ec.ranks) {
    if (r < 1 || r > (1 << 16)) {
      throw UsageError("--ranks: " + std::to_string(r) + " is out of range [1, 65536]");
    }
  }
  int model_n = 0, model_k = 0;
  std::string source;
  const analysis::EpShape shape = ep_shape(e, &model_n, &model_k, &source);
  int n = 0;
  if (a.logits.empty()) {
    n = cmd->count("--experts") || model_n == 0 ? single_int(a.experts, "--experts") : model_n;
    const int k = cmd->count("--k") || model_k == 0 ? single_int(a.k, "--k") : model_k;
    if (n < 1 || n > 4096)
      throw UsageError("--experts: " + std::to_string(n) + " is out of range [1, 4096]");
    if (k < 1 || k > n)
      throw UsageError("--k: " + std::to_string(k) + " is out of range [1, " + std::to_string(n) +
                       "]");
    cfg.gating = {n, k, a.gating == "sigmoid" ? GatingFunc::kSigmoid : GatingFunc::kSoftmax,
                  a.norm_topk == 1, a.scale};
    for (const auto& sp : specs) {
      try {
        make_routing_policy(sp, cfg.gating);
      } catch (const Error& err) {
        throw UsageError(std::string("--routing: ") + err.what());
      }
    }
  } else {
    if (std::filesystem::is_directory(a.logits)) {
      throw UsageError("--trace: '" + a.logits + "' is a directory, expected a routing trace");
    }
    n = analysis::TraceReader(a.logits).header().n_expert;
  }
  if (model_n && n != model_n) {
    throw UsageError("the routing has " + std::to_string(n) + " experts, the model shape " +
                     std::to_string(model_n));
  }
  ep_model_options(e, shape, ec);

  for (const auto& f : e.placement_files) {
    ec.given.push_back(read_placement(f));
    if (std::find(ec.ranks.begin(), ec.ranks.end(), ec.given.back().ranks) == ec.ranks.end()) {
      ec.ranks.push_back(ec.given.back().ranks);
    }
  }
  std::vector<analysis::MeasuredRow> measured;
  if (!e.measured.empty()) {
    measured = analysis::parse_measured_csv(read_text_file(e.measured, "--measured"), e.measured);
    // Simulate what the measurements need too.
    std::set<int> b(cfg.batches.begin(), cfg.batches.end()), r(ec.ranks.begin(), ec.ranks.end());
    for (const auto& m : measured) {
      b.insert(m.batch);
      r.insert(m.ranks);
      if (std::find(specs.begin(), specs.end(), m.spec) == specs.end()) specs.push_back(m.spec);
    }
    cfg.batches.assign(b.begin(), b.end());
    ec.ranks.assign(r.begin(), r.end());
  }
  for (int r : ec.ranks) {
    try {
      analysis::expert_slices(n, r);
    } catch (const Error& err) {
      throw UsageError(std::string("--ranks: ") + err.what());
    }
  }
  cfg.repeats = 1;  // nothing is timed
  const auto rows = analysis::simulate_ep(cfg, specs, ec);
  const analysis::CostParams& c = ec.cost;
  char info[512];
  std::snprintf(
      info, sizeof info,
      "route-sim EP: %s, %d experts, expert %.3f MB, H %d, %d MoE layers, dense %.1f MB; "
      "mem %.0f GB/s, link %.1f GB/s, %.1f us, dense %.3f ms, %.0f GFLOP/s; %d steps, seed %llu",
      a.logits.empty() ? ("synthetic " + a.dist).c_str() : a.logits.c_str(), n,
      shape.expert_bytes / 1e6, shape.hidden, shape.moe_layers, shape.dense_bytes / 1e6,
      c.mem_bw / 1e9, c.link_bw / 1e9, c.link_lat * 1e6, 1e3 * analysis::dense_seconds(shape, c),
      c.flops / 1e9, a.steps, (unsigned long long)a.seed);
  std::fprintf(stderr, "%s%s%s\n", info, source.empty() ? "" : "; sizes: ", source.c_str());
  if (!measured.empty()) {
    std::fputs(analysis::format_comparison(measured, rows, a.format).c_str(), stdout);
  } else {
    std::fputs(analysis::format_ep_rows(rows, a.format).c_str(), stdout);
  }
}

// The policy specs of --routing, each checked, and the other routing flags (a UsageError for
// any of them before work starts).
std::vector<std::string> checked_specs(const SimArgs& a, const EpArgs& ep) {
  std::vector<std::string> specs;
  for (const auto& r : a.routing) {
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
  if (a.gating != "softmax" && a.gating != "sigmoid") {
    throw UsageError("--gating must be softmax or sigmoid, got '" + a.gating + "'");
  }
  if (a.norm_topk != 0 && a.norm_topk != 1) throw UsageError("--norm-topk must be 0 or 1");
  if (a.format != "md" && a.format != "csv" && a.format != "json") {
    throw UsageError("-o must be md, csv or json, got '" + a.format + "'");
  }
  if (ep.ranks.empty() && (!ep.measured.empty() || !ep.model.empty() || !ep.shape.empty())) {
    throw UsageError("-m, --shape and --measured need --ranks");
  }
  return specs;
}

analysis::SimConfig sim_config(const SimArgs& a) {
  analysis::SimConfig cfg;
  cfg.batches = parse_int_list(a.batch, "--batch");
  cfg.steps = a.steps;
  cfg.repeats = a.repeats;
  cfg.seed = a.seed;
  cfg.dist.name = a.dist;
  cfg.dist.noise_std = a.std;
  cfg.dist.n_topics = a.topics;
  cfg.dist.topic_std = a.topic_std;
  cfg.dist.zipf_s = a.zipf_s;
  cfg.trace_path = a.logits;
  return cfg;
}

// The routing table: every (N, k) of the lists, every policy and batch size.
void run_routing_table(const SimArgs& a, const std::vector<std::string>& specs,
                       analysis::SimConfig cfg) {
  std::vector<analysis::SimRow> rows;
  const auto experts =
      a.logits.empty() ? parse_int_list(a.experts, "--experts") : std::vector<int>{0};
  const auto ks = a.logits.empty() ? parse_int_list(a.k, "--k") : std::vector<int>{0};
  for (int n : experts) {
    if (a.logits.empty() && (n < 1 || n > 4096)) {
      throw UsageError("--experts: " + std::to_string(n) + " is out of range [1, 4096]");
    }
    for (int k : ks) {
      if (a.logits.empty() && (k < 1 || k > n)) {
        throw UsageError("--k: " + std::to_string(k) + " is out of range [1, " + std::to_string(n) +
                         "] for " + std::to_string(n) + " experts");
      }
      cfg.gating = {n, k, a.gating == "sigmoid" ? GatingFunc::kSigmoid : GatingFunc::kSoftmax,
                    a.norm_topk == 1, a.scale};
      if (a.logits.empty()) {
        for (const auto& s : specs) {
          try {
            make_routing_policy(s, cfg.gating);
          } catch (const Error& e) {
            throw UsageError(std::string("--routing: ") + e.what());
          }
        }
      }
      auto part = analysis::simulate_routing(cfg, specs);
      rows.insert(rows.end(), part.begin(), part.end());
    }
  }
  if (a.logits.empty()) {
    std::fprintf(stderr, "route-sim: synthetic '%s' logits (std %g), %d steps, seed %llu\n",
                 a.dist.c_str(), double(a.std), a.steps, (unsigned long long)a.seed);
  } else {
    std::fprintf(stderr, "route-sim: trace %s, %d steps, seed %llu\n", a.logits.c_str(), a.steps,
                 (unsigned long long)a.seed);
  }
  std::fputs(analysis::format_sim_rows(rows, a.format).c_str(), stdout);
}

void add_sim_flags(CLI::App* cmd, SimArgs& a) {
  std::string names;
  for (const auto& n : routing_policy_names()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--routing", a.routing,
                  "Policy specs (" + names +
                      "), separated by ';' or by repeating the flag, e.g. "
                      "'topk;lynx:alpha=3,beta=4;oea:k0=4'")
      ->required();
  cmd->add_option("--experts", a.experts, "Experts per layer N (list)");
  cmd->add_option("--k", a.k, "Experts per token k (list)");
  cmd->add_option("--batch", a.batch, "Decode batch sizes B (list)");
  cmd->add_option("--steps", a.steps, "Routing calls per policy and batch size")
      ->check(int_in(1, 1 << 24));
  cmd->add_option("--repeats", a.repeats, "Timed passes; the fastest is reported")
      ->check(int_in(1, 1 << 16));
  cmd->add_option("--seed", a.seed, "Random seed (logits and trace sampling)");
  cmd->add_option("--dist", a.dist,
                  "Synthetic logits: gauss (iid normal), zipf (popular experts), topic "
                  "(tokens share a topic's preferred experts)");
  cmd->add_option("--std", a.std,
                  "Noise std of the synthetic logits ('inf' gives infinite and NaN logits: a "
                  "test of the policies' non-finite rules, docs/routing.md)")
      ->check(number_in(0, INFINITY, false, true));
  cmd->add_option("--topics", a.topics, "topic: number of topics")->check(int_in(1, 1 << 16));
  cmd->add_option("--topic-std", a.topic_std, "topic: std of a topic's expert preferences")
      ->check(number_in(0, 1e6));
  cmd->add_option("--zipf-s", a.zipf_s, "zipf: exponent of the popularity law")
      ->check(number_in(0, 1e6));
  cmd->add_option("--gating", a.gating, "softmax or sigmoid");
  cmd->add_option("--norm-topk", a.norm_topk, "1: renormalize the top-k weights, 0: do not");
  cmd->add_option("--scale", a.scale, "Routed weights scale")->check(number_in(0, 1e6, true));
  cmd->add_option("--logits", a.logits,
                  "Routing trace to replay instead of synthetic logits (N, k and gating come "
                  "from the trace)");
  cmd->add_option("--trace", a.logits, "Same as --logits");
  cmd->add_option("-o,--output", a.format, "Output format: md, csv, json");
}

// Expert parallelism (docs/distributed-simulation.md).
void add_ep_sim_flags(CLI::App* cmd, EpArgs& ep) {
  cmd->add_option("--ranks", ep.ranks,
                  "Simulate expert parallelism over these rank counts (list, e.g. 8,16,64,256): "
                  "per-rank load, bytes and predicted TPOT instead of the routing table");
  cmd->add_option("-m,--model", ep.model, "EP: expert and dense sizes from this GGUF model");
  cmd->add_option("--shape", ep.shape,
                  "EP: sizes of a known shape (synth --shape names, e.g. qwen3-30b); its N and k "
                  "unless --experts/--k are given");
  cmd->add_option("--wtype", ep.wtype, "EP: weight type for --shape (default q4_0)")
      ->capture_default_str();
  cmd->add_option("--expert-bytes", ep.expert_bytes, "EP: bytes of one expert (overrides)")
      ->check(number_in(0, 1e15, true));
  cmd->add_option("--hidden", ep.hidden, "EP: model width H (overrides)")
      ->check(int_in(1, 1 << 20));
  cmd->add_option("--moe-layers", ep.moe_layers,
                  "EP: MoE layers per step (overrides; with --shape, the shape cut to this many "
                  "layers, as synth --layers)")
      ->check(int_in(1, 1 << 16));
  cmd->add_option("--dense-bytes", ep.dense_bytes, "EP: dense weight bytes per step (overrides)")
      ->check(number_in(0, 1e15));
  cmd->add_option("--act-bytes", ep.act_bytes, "EP: bytes per element of a token row sent")
      ->check(number_in(0, 64, true))
      ->capture_default_str();
  cmd->add_option("--mem-bw", ep.mem_bw, "EP cost: memory bandwidth per rank, GB/s")
      ->check(number_in(0, 1e6, true))
      ->capture_default_str();
  cmd->add_option("--link-bw", ep.link_bw, "EP cost: link bandwidth per rank, GB/s")
      ->check(number_in(0, 1e6, true))
      ->capture_default_str();
  cmd->add_option("--link-lat", ep.link_lat, "EP cost: latency per message, microseconds")
      ->check(number_in(0, 1e6))
      ->capture_default_str();
  cmd->add_option("--dense-ms", ep.dense_ms,
                  "EP cost: dense time per step, ms (default: dense bytes / memory bandwidth)")
      ->check(number_in(0, 1e6));
  cmd->add_option("--rank-gflops", ep.gflops,
                  "EP cost: expert compute per rank, GFLOP/s (0: streaming time only)")
      ->check(number_in(0, 1e9));
  cmd->add_option("--placement", ep.placement, "EP: contiguous, balanced or both (list)")
      ->capture_default_str();
  cmd->add_option("--placement-file", ep.placement_files,
                  "EP: also evaluate this placement (lynx-moe place -o; repeatable): rows "
                  "'file' at its rank count");
  cmd->add_option("--coact", ep.coact, "EP: co-activation weight of the balanced placement")
      ->check(number_in(-1e6, 1e6));
  cmd->add_option("--calib-tokens", ep.calib_tokens,
                  "EP, synthetic logits: tokens drawn to compute the balanced placement")
      ->check(int_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--measured", ep.measured,
                  "EP: CSV of measured TPOT (policy,batch,ranks,tpot_ms[,scheme][,placement]); "
                  "prints measured vs predicted instead of the table");
}

}  // namespace

void register_route_sim(CLI::App& app) {
  auto a = std::make_shared<SimArgs>();
  auto ep = std::make_shared<EpArgs>();
  auto* cmd = app.add_subcommand(
      "route-sim", "Simulate routing policies on router logits: distinct experts, mass kept");
  add_sim_flags(cmd, *a);
  add_ep_sim_flags(cmd, *ep);
  cmd->callback([a, ep, cmd] {
    const std::vector<std::string> specs = checked_specs(*a, *ep);
    const analysis::SimConfig cfg = sim_config(*a);
    if (!ep->ranks.empty()) {
      run_ep(*a, *ep, cmd, specs, cfg);
    } else {
      run_routing_table(*a, specs, cfg);
    }
  });
}

}  // namespace lynx::cli
