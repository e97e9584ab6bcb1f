// `lynx-moe place`: the expert placement file for expert parallelism (analysis/placement.h),
// balanced from a recorded routing trace or contiguous, with the expected imbalance of both
// on stderr.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "analysis/placement.h"
#include "analysis/trace.h"
#include "commands.h"
#include "common.h"

namespace lynx::cli {
namespace {

struct PlaceArgs {
  std::string trace, output;
  int ranks = 0, experts = 0, layers = 0;
  bool contiguous = false;
  double coact = 0;
};

void write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fputs(text.c_str(), stdout);
    return;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw UsageError("-o: '" + path + "' is a directory, expected a file");
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot create '" + path + "': " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw Error("cannot write '" + path + "' (disk full?)");
}

void run_place(const PlaceArgs& a) {
  if (a.trace.empty() && !a.contiguous) {
    throw UsageError("place: --trace is required (or --contiguous with --experts and --layers)");
  }
  if (!a.trace.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(a.trace, ec)) {
      throw UsageError("--trace: '" + a.trace + "' is a directory, expected a routing trace");
    }
  }
  analysis::ExpertLoad load;
  int n_expert = a.experts, n_layers = a.layers;
  if (!a.trace.empty()) {
    load = analysis::expert_load_from_trace(a.trace);
    if (a.experts && a.experts != load.n_expert) {
      throw UsageError("--experts " + std::to_string(a.experts) + " does not match the trace's " +
                       std::to_string(load.n_expert) + " experts");
    }
    n_expert = load.n_expert;
    n_layers = int(load.count.size());
  } else if (n_expert < 1 || n_layers < 1) {
    throw UsageError("place --contiguous without --trace needs --experts and --layers");
  }
  if (a.ranks > n_expert) {
    throw UsageError("--ranks " + std::to_string(a.ranks) + " is more than the " +
                     std::to_string(n_expert) +
                     " experts per layer (each rank holds whole experts)");
  }
  analysis::Placement contiguous = analysis::contiguous_placement(n_layers, n_expert, a.ranks);
  analysis::Placement placement = contiguous;
  if (!a.contiguous) {
    analysis::BalanceOptions opt;
    opt.coact_weight = a.coact;
    placement = analysis::balanced_placement(load, a.ranks, opt);
    // A layer the trace never routed keeps the contiguous default.
    for (size_t l = 0; l < load.count.size(); ++l) {
      if (load.tokens[l] == 0) placement.layers[l] = contiguous.layers[l];
    }
  }
  const std::string json = analysis::placement_to_json(placement);
  if (!load.count.empty()) {
    std::fprintf(stderr,
                 "place: %d experts on %d ranks, %d layers; expected imbalance (max/mean "
                 "activations per rank)\n  layer  tokens  contiguous  %s\n",
                 n_expert, a.ranks, n_layers, a.contiguous ? "(written: contiguous)" : "balanced");
    double sum_c = 0, sum_b = 0;
    for (int l = 0; l < n_layers; ++l) {
      const double ic =
          analysis::imbalance_factor(contiguous.layers[size_t(l)], load.count[size_t(l)], a.ranks);
      const double ib =
          analysis::imbalance_factor(placement.layers[size_t(l)], load.count[size_t(l)], a.ranks);
      sum_c += ic;
      sum_b += ib;
      std::fprintf(stderr, "  %5d  %6lld  %10.3f  %8.3f\n", l, (long long)load.tokens[size_t(l)],
                   ic, ib);
    }
    std::fprintf(stderr, "  mean          %10.3f  %8.3f\n", sum_c / n_layers, sum_b / n_layers);
  }
  write_output(a.output, json);
}

}  // namespace

void register_place(CLI::App& app) {
  auto a = std::make_shared<PlaceArgs>();
  auto* cmd = app.add_subcommand(
      "place", "Place experts on ranks for expert parallelism, balanced from a routing trace");
  cmd->add_option("--trace", a->trace,
                  "Routing trace (generate --record-trace) whose exact top-k activation counts "
                  "give each expert's load");
  cmd->add_option("--ranks", a->ranks, "Ranks R (1 to the experts per layer)")
      ->required()
      ->check(int_in(1, 1 << 16));
  cmd->add_flag("--contiguous", a->contiguous,
                "Write the contiguous default (experts 0..N/R-1 on rank 0, ...) instead");
  cmd->add_option("--experts", a->experts, "Experts per layer (with --contiguous and no trace)")
      ->check(int_in(1, 1 << 16));
  cmd->add_option("--layers", a->layers, "MoE layers (with --contiguous and no trace)")
      ->check(int_in(1, 1 << 16));
  cmd->add_option("--coact", a->coact,
                  "Co-activation weight W: > 0 spreads experts tokens use together over ranks, "
                  "< 0 groups them; 0 (default) is plain largest-first")
      ->check(number_in(-1e6, 1e6));
  cmd->add_option("-o,--output", a->output, "Placement file (JSON; default: stdout)");
  cmd->callback([a] { run_place(*a); });
}

}  // namespace lynx::cli
