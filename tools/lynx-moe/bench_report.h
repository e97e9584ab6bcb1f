// lynx-moe bench's report writers: the rows it measured (JSON objects, one per policy, batch
// and thread count) as the Markdown tables and the CSV, apart from the measuring in
// cmd_bench.cc.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "lynx/model.h"

namespace lynx::cli {

// The machine's roofs per thread count (cmd_bench.cc's measure_peaks): read bandwidth in
// GB/s and the f32 FMA peak in GFLOPS.
struct Peaks {
  std::map<int, double> bw, fma;  // per thread count
};

// /proc/cpuinfo's model name ("unknown" when there is none).
std::string cpu_name();

// The main table, headed by the run's commit, CPU, model, activations and weight layout.
void print_md(const ModelConfig& c, const nlohmann::json& out, const Peaks& pk,
              const std::string& commit, const char* acts, const char* layout);
// --expert-parallel: one line per (row, rank); nothing without ranks.
void print_ranks_md(const nlohmann::json& out);
// The expert tier's rows; nothing when the model has no tier.
void print_tier_md(const Model& model, const nlohmann::json& out);
void print_csv(const nlohmann::json& out);

}  // namespace lynx::cli
