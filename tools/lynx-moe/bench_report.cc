// lynx-moe bench's report writers (bench_report.h).
#include "bench_report.h"

#include <cstdio>
#include <fstream>

#include "common.h"
#include "kernels/kernels.h"

namespace lynx::cli {

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  }
  return "unknown";
}

void print_md(const ModelConfig& c, const nlohmann::json& out, const Peaks& pk,
              const std::string& commit, const char* acts, const char* layout) {
  std::printf(
      "lynx-moe bench | commit %s | %s | %s | model %s (%s, %d layers, %d/%d experts) | "
      "activations %s | weights %s\n\n",
      commit.c_str(), cpu_name().c_str(), lynx::kernels::simd_target_name(), c.name.c_str(),
      c.arch.c_str(), c.n_layer, c.n_expert_used, c.n_expert, acts, layout);
  for (auto& [t, g] : pk.bw) {
    std::printf(
        "roofline read bandwidth %.1f GB/s with %d threads (the best of this run: 5 passes "
        "per buffer size at start and at the end, and every one-pass probe); "
        "read BW below: one pass right before each batch size of each repetition, "
        "averaged; f32 FMA peak %.0f GFLOPS\n\n",
        g, t, pk.fma.at(t));
  }
  std::printf(
      "| policy | type | batch | threads | decode tok/s | TPOT ms | speedup | experts/layer "
      "| route ms | MB/step | GB/s | read BW GB/s | TPOT / roofline | expert ms | expert speedup "
      "| expert / roofline | prefill tok/s |\n");
  std::printf(
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& j : out) {
    std::printf(
        "| %s | %s | %d | %d | %.1f ± %.1f | %.2f ± %.2f | %.2fx ± %.2f | %.1f | %.3f | %.1f "
        "| %.1f | %.1f | %.2f | %.2f | %.2fx ± %.2f | %.2f | %.0f |\n",
        j["policy"].get<std::string>().c_str(), j["type"].get<std::string>().c_str(),
        j["batch"].get<int>(), j["threads"].get<int>(), j["decode_tps"].get<double>(),
        j["decode_tps_sd"].get<double>(), j["tpot_ms"].get<double>(), j["tpot_ms_sd"].get<double>(),
        j["speedup_vs_first"].get<double>(), j["speedup_sd"].get<double>(),
        j["distinct_experts"].get<double>(), j["routing_ms"].get<double>(),
        j["bytes_per_step"].get<double>() / 1e6, j["achieved_gbps"].get<double>(),
        j["read_bw_gbps"].get<double>(), j["roofline_ratio"].get<double>(),
        j["expert_ms"].get<double>(), j["expert_speedup_vs_first"].get<double>(),
        j["expert_speedup_sd"].get<double>(), j["expert_roofline_ratio"].get<double>(),
        j["prefill_tps"].get<double>());
  }
}

// --expert-parallel: one line per (row, rank).
void print_ranks_md(const nlohmann::json& out) {
  if (out.empty() || !out[0].contains("ranks")) return;
  std::printf(
      "\nexpert parallel, per rank and decode step (busiest share: the busiest rank's part of "
      "the routed tokens, 1/R when balanced)\n\n"
      "| policy | batch | rank | tokens | local experts/layer | expert MB | compute ms | comm ms "
      "| comm MB | busiest share |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& j : out) {
    for (const auto& r : j["ranks"]) {
      std::printf("| %s | %d | %d | %.1f | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f |\n",
                  j["policy"].get<std::string>().c_str(), j["batch"].get<int>(),
                  r["rank"].get<int>(), r["tokens_per_step"].get<double>(),
                  r["local_experts_per_layer"].get<double>(), r["expert_mb_per_step"].get<double>(),
                  r["compute_ms"].get<double>(), r["comm_ms"].get<double>(),
                  r["comm_mb_per_step"].get<double>(), j["busiest_rank_share"].get<double>());
    }
  }
}

void print_csv(const nlohmann::json& out) {
  const bool ep = !out.empty() && out[0].contains("ranks");
  std::printf(
      "model,type,policy,batch,threads,decode_tps,decode_tps_sd,tpot_ms,tpot_ms_sd,"
      "prefill_tps,distinct_experts,bytes_per_step,achieved_gbps,read_bw_gbps,"
      "roofline_ratio,speedup,expert_ms,expert_speedup%s\n",
      ep ? ",ep_ranks,busiest_rank_share,imbalance,max_rank_compute_ms,max_rank_comm_ms" : "");
  for (const auto& j : out) {
    std::printf("%s,%s,%s,%d,%d,%.2f,%.2f,%.3f,%.3f,%.1f,%.2f,%.0f,%.2f,%.2f,%.3f,%.3f,%.3f,%.3f",
                j["model"].get<std::string>().c_str(), j["type"].get<std::string>().c_str(),
                j["policy"].get<std::string>().c_str(), j["batch"].get<int>(),
                j["threads"].get<int>(), j["decode_tps"].get<double>(),
                j["decode_tps_sd"].get<double>(), j["tpot_ms"].get<double>(),
                j["tpot_ms_sd"].get<double>(), j["prefill_tps"].get<double>(),
                j["distinct_experts"].get<double>(), j["bytes_per_step"].get<double>(),
                j["achieved_gbps"].get<double>(), j["read_bw_gbps"].get<double>(),
                j["roofline_ratio"].get<double>(), j["speedup_vs_first"].get<double>(),
                j["expert_ms"].get<double>(), j["expert_speedup_vs_first"].get<double>());
    if (ep) {
      std::printf(",%d,%.4f,%.4f,%.4f,%.4f", j["ep_ranks"].get<int>(),
                  j["busiest_rank_share"].get<double>(), j["imbalance"].get<double>(),
                  j["max_rank_compute_ms"].get<double>(), j["max_rank_comm_ms"].get<double>());
    }
    std::printf("\n");
  }
}

// The expert tier's rows: bytes read from the file per decoded token and the hit rate of
// the decode steps' expert claims.
void print_tier_md(const Model& model, const nlohmann::json& out) {
  if (!model.expert_tier()) return;
  std::printf(
      "\n%s\n\n| policy | batch | decode tok/s | disk MB / token | misses / step | hit rate | "
      "prefetched / step | prefetch accuracy | miss cost | wait ms / step | TPOT ms | "
      "GB/s per reader |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      model.expert_tier_summary().c_str());
  for (const auto& j : out) {
    std::printf(
        "| %s | %d | %.2f | %.2f | %.1f | %.3f | %.1f | %.3f | %.1f | %.1f | %.1f | %.2f |\n",
        j["policy"].get<std::string>().c_str(), j["batch"].get<int>(),
        j["decode_tps"].get<double>(), j["disk_bytes_per_token"].get<double>() / 1e6,
        j["tier_misses_per_step"].get<double>(), j["tier_hit_rate"].get<double>(),
        j["tier_prefetches_per_step"].get<double>(), j["tier_prefetch_accuracy"].get<double>(),
        j["tier_miss_cost"].get<double>(), j["tier_wait_ms_per_step"].get<double>(),
        j["tpot_ms"].get<double>(), j["tier_read_gbps"].get<double>());
  }
  std::printf("\n%s\n", expert_tier_line(model).c_str());
}

}  // namespace lynx::cli
