// `lynx-moe bench`: decode speed per batch size and routing policy, next to the machine's
// measured memory read bandwidth (the physical limit of a memory-bound decode step).
//
// Modelled on llama-bench: list-valued options, the cross product runs, md/csv/json output.
// Policies run interleaved step by step inside each (batch, threads) cell, so that drift of a
// shared machine affects all of them alike and cancels in the speedup ratios.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bench_report.h"
#include "commands.h"
#include "common.h"
#include "ep.h"
#include "kernels/matmul_bf16.h"
#include "kernels/probes.h"
#include "kernels/thread_pool.h"
#include "lynx/batch_loop.h"
#include "lynx/context.h"
#include "lynx/scheduler.h"
#include "model/expert_tier.h"
#include "model/memory_budget.h"
#include "model/weights.h"
#include "trace_replay.h"

namespace lynx::cli {
namespace {

struct Args {
  std::string model, routing = "topk", batch = "1,2,4,8,16,32", threads = "2", output = "md";
  std::string trace, save_json, prompt_file;
  std::string bw_sizes = "256,1024";  // MiB, the buffers of the peak bandwidth probe
  int prompt = 32, gen = 16, reps = 3, ctx = 0;
  int delta_chunk_min = ContextOptions{}.delta_rule_chunk_min;
  int mla_decompress_min = ContextOptions{}.mla_decompress_min;
  uint64_t seed = 1;
  double bw_gb = 0;  // 0 = measure
  bool exact_acts = false;
  bool bf16_acts = false;
  std::string bf16_kernel;
  CacheTypeFlags cache_types;
  bool bf16_compare = false;  // every policy also with --bf16-acts, step-interleaved
  bool kv_compare = false;    // every policy also with f16 and q8_0 KV caches, interleaved
  bool no_repack = false;
  bool warmup = false;
  EpFlags ep;
};

// The label --bf16-compare gives a policy's row in the BF16 fast mode.
constexpr std::string_view kBf16Suffix = " +bf16-acts";
// The labels --kv-compare gives a policy's rows with F16 and Q8_0 KV caches (K and V).
constexpr std::string_view kKvF16Suffix = " +kv=f16", kKvQ8Suffix = " +kv=q8_0";

// Removes the labels of --bf16-compare and --kv-compare from a row's spec, applying them to
// `co` when given.
void strip_row_labels(std::string& spec, ContextOptions* co) {
  for (auto [suffix, type] : {std::pair{kKvF16Suffix, gguf::TensorType::F16},
                              std::pair{kKvQ8Suffix, gguf::TensorType::Q8_0}}) {
    if (spec.ends_with(suffix)) {
      spec.resize(spec.size() - suffix.size());
      if (co) co->cache_type_k = co->cache_type_v = type;
    }
  }
  if (spec.ends_with(kBf16Suffix)) {
    spec.resize(spec.size() - kBf16Suffix.size());
    if (co) co->bf16_activations = true;
  }
}

// Prompts read from --prompt-file: line b holds sequence b's token ids (the first --prompt of
// them are used), so that other engines can be fed the very same sequences.
using PromptList = std::vector<std::vector<int32_t>>;

PromptList read_prompt_file(const std::string& path, int n_vocab, int prompt, int max_batch) {
  std::istringstream f(read_text_file(path, "--prompt-file"));
  PromptList out;
  for (std::string line; std::getline(f, line);) {
    if (line.find_first_not_of(" \t\r,") == std::string::npos) continue;
    for (char& ch : line) {
      if (ch == ',') ch = ' ';
    }
    std::istringstream in(line);
    std::vector<int32_t> ids;
    std::string tok;
    while (in >> tok) {
      char* end = nullptr;
      const long long v = std::strtoll(tok.c_str(), &end, 10);
      if (end == tok.c_str() || *end != '\0' || v < 0 || v >= n_vocab) {
        throw Error("--prompt-file line " + std::to_string(out.size() + 1) + ": '" + tok +
                    "' is not a token id in [0, " + std::to_string(n_vocab) + ")");
      }
      ids.push_back(int32_t(v));
    }
    if (int(ids.size()) < prompt) {
      throw Error("--prompt-file line " + std::to_string(out.size() + 1) + " has " +
                  std::to_string(ids.size()) + " token ids, --prompt needs " +
                  std::to_string(prompt));
    }
    ids.resize(size_t(prompt));
    out.push_back(std::move(ids));
  }
  if (int(out.size()) < max_batch) {
    throw Error("--prompt-file holds " + std::to_string(out.size()) +
                " prompts, the largest --batch needs " + std::to_string(max_batch));
  }
  return out;
}

// Bytes this process has made the kernel read from storage (/proc/self/io read_bytes: the
// tier's direct reads and the page faults of a file mapping alike); 0 where the file is absent.
// It is what the other engines' clients (scripts/peer-decode.cc) report too, so a model
// larger than memory compares by the same count whatever way each engine reads it.
uint64_t storage_read_bytes() {
  std::ifstream f("/proc/self/io");
  std::string key;
  uint64_t v = 0;
  while (f >> key >> v) {
    if (key == "read_bytes:") return v;
  }
  return 0;
}

struct Sample {
  double step_s = 0;                        // mean decode step time
  double prefill_tps = 0;                   // prompt tokens per second
  double distinct = 0;                      // mean distinct experts per MoE layer per decode step
  double bytes = 0;                         // weight bytes read per decode step
  std::vector<int64_t> expert_tokens;       // [layer x expert] over the decode steps
  double route_s = 0;                       // routing policy time per decode step
  double expert_s = 0;                      // time in the routed experts per decode step
  double expert_bytes = 0;                  // expert weight bytes read per decode step
  double disk_bytes = 0;                    // expert tier: bytes read from the file per decode step
  double storage_bytes = 0;                 // the process's storage reads per decode step
  double tier_misses = 0, tier_claims = 0;  // expert tier: per decode step
  double tier_prefetches = 0, tier_prefetch_hits = 0;  // expert tier: per decode step
  double tier_miss_cost = 0;  // expert tier: the routing's miss cost, mean over decode steps
  // expert tier: seconds per decode step the step waited for reads, and the readers' seconds
  // in reads (summed over readers), so a row says how much of its TPOT was the disk.
  double tier_wait_s = 0, tier_read_s = 0;
  std::vector<RankShare> ranks;  // --expert-parallel: each rank's share, summed over
  int gen_steps = 0;             // the gen_steps decode steps
};

struct Row {
  std::string policy;
  int batch = 0, threads = 0;
  std::vector<Sample> reps;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size() - 1));
}

// One (batch size, threads) cell of one repetition: every policy gets its own context and
// BatchLoop (separate prefill) on the same model and the same prompts; after the prompts,
// their decode steps alternate step by step (the order rotating each step), so that a change
// of the machine's bandwidth within the cell hits every policy alike and cancels in the
// speedup ratios. Decoding is greedy.
std::vector<Sample> run_cell(const Model& model, const Args& a,
                             const std::vector<std::string>& policies, int B, int T, uint64_t seed,
                             const TraceReplay* replay, const PromptList& file_prompts,
                             ExpertParallel& ep) {
  const size_t P = policies.size();
  std::vector<int> ep_ids(P, -1);
  const int V = model.config().n_vocab;
  std::vector<std::unique_ptr<Context>> ctxs;
  std::vector<std::unique_ptr<BatchLoop>> loops;
  std::vector<Sample> out(P);
  for (size_t p = 0; p < P; ++p) {
    ContextOptions co;
    co.n_threads = T;
    co.n_ctx = a.ctx > 0 ? a.ctx : a.prompt + a.gen + 1;
    co.routing = policies[p];
    co.exact_activations = a.exact_acts;
    co.bf16_activations = a.bf16_acts;
    co.bf16_kernel = a.bf16_kernel;
    co.delta_rule_chunk_min = a.delta_chunk_min;
    co.mla_decompress_min = a.mla_decompress_min;
    a.cache_types.apply(co);
    strip_row_labels(co.routing, &co);  // --bf16-compare's and --kv-compare's rows
    ep_ids[p] = ep.configure(co);
    ctxs.push_back(std::make_unique<Context>(model, co));
    Context& ctx = *ctxs.back();
    if (replay) ctx.set_router_override(replay->override_fn());
    loops.push_back(std::make_unique<BatchLoop>(ctx, BatchLoopOptions{a.prompt, false}));
    BatchLoop& loop = *loops.back();
    // Every sequence's prompt: random ids (or --prompt-file's lines), different per sequence,
    // the same for every policy.
    PromptList prompts(static_cast<size_t>(B));
    std::mt19937_64 rng(seed);
    for (int b = 0; b < B; ++b) {
      if (!file_prompts.empty()) {
        prompts[size_t(b)] = file_prompts[size_t(b)];
      } else {
        for (int i = 0; i < a.prompt; ++i)
          prompts[size_t(b)].push_back(int32_t(rng() % uint64_t(V)));
      }
    }
    for (int b = 0; b < B; ++b) {
      LoopSequence ls;
      ls.prompt = prompts[size_t(b)];
      // The prompt's logits give the first token, each of the a.gen decode steps the next.
      ls.on_logits = [decoded = -1, gen = a.gen](std::span<const float> logits) mutable {
        return ++decoded == gen ? kEndSequence : argmax(logits);
      };
      loop.add(std::move(ls));
    }
    // --warmup: the same prompts once, untimed, before the measured ones, so that the step
    // buffers exist and their pages are backed as in a process that has served a request
    // (3-5% of a fresh process's 512-token prefill on the Qwen3-30B-A3B shape;
    // docs/benchmarks.md, "The KV cache reserved, not grown"). llama-bench warms up too.
    if (a.warmup) {
      BatchLoop warm(ctx, BatchLoopOptions{a.prompt, false});
      for (int b = 0; b < B; ++b) {
        LoopSequence ls;
        ls.prompt = prompts[size_t(b)];
        ls.on_logits = [](std::span<const float>) { return kEndSequence; };
        warm.add(std::move(ls));
      }
      while (warm.size() > 0) warm.step();
    }
    double prefill_s = 0;
    while (loop.prefill_pending()) prefill_s += loop.step().seconds;  // one sequence per step
    out[p].prefill_tps = prefill_s > 0 ? double(B) * a.prompt / prefill_s : 0;
    ctx.reset_stats();     // expert counts of the decode steps only
    ep.gather(ep_ids[p]);  // likewise the ranks' shares (collective, like every gather)
  }
  // Decode: B tokens per step, all sequences of a policy advancing together.
  for (int g = 0; g < a.gen; ++g) {
    for (size_t i = 0; i < P; ++i) {
      const size_t p = (size_t(g) + i) % P;
      Sample& s = out[p];
      const ExpertTierStats t0 =
          model.expert_tier() ? model.expert_tier()->stats() : ExpertTierStats{};
      const uint64_t io0 = storage_read_bytes();
      s.step_s += loops[p]->step().seconds;
      s.storage_bytes += double(storage_read_bytes() - io0);
      if (model.expert_tier()) {
        const ExpertTierStats t1 = model.expert_tier()->stats();
        s.disk_bytes += double(t1.bytes_read - t0.bytes_read);
        s.tier_misses += double(t1.misses - t0.misses);
        s.tier_claims += double(t1.misses + t1.hits - t0.misses - t0.hits);
        s.tier_prefetches += double(t1.prefetches - t0.prefetches);
        s.tier_prefetch_hits += double(t1.prefetch_hits - t0.prefetch_hits);
        s.tier_miss_cost += double(t0.miss_cost);  // the cost the step was routed with
        s.tier_wait_s += double(t1.wait_ns - t0.wait_ns) * 1e-9;
        s.tier_read_s += double(t1.read_ns - t0.read_ns) * 1e-9;
      }
      const StepStats& st = ctxs[p]->last_step();
      s.distinct += st.mean_distinct();
      s.bytes += double(st.weight_bytes);
      s.route_s += st.routing_seconds;
      s.expert_s += st.expert_seconds;
      s.expert_bytes += double(st.expert_bytes);
      const std::vector<RankShare> shares = ep.gather(ep_ids[p]);
      s.ranks.resize(shares.size());
      for (size_t r = 0; r < shares.size(); ++r) {
        RankShare& d = s.ranks[r];
        d.tokens += shares[r].tokens;
        d.experts += shares[r].experts;
        d.bytes += shares[r].bytes;
        d.comm_bytes += shares[r].comm_bytes;
        d.compute_s += shares[r].compute_s;
        d.comm_s += shares[r].comm_s;
      }
    }
  }
  for (size_t p = 0; p < P; ++p) {
    Sample& s = out[p];
    s.step_s /= a.gen;
    s.distinct /= a.gen;
    s.bytes /= a.gen;
    s.route_s /= a.gen;
    s.expert_s /= a.gen;
    s.expert_bytes /= a.gen;
    s.disk_bytes /= a.gen;
    s.storage_bytes /= a.gen;
    s.tier_misses /= a.gen;
    s.tier_claims /= a.gen;
    s.tier_prefetches /= a.gen;
    s.tier_prefetch_hits /= a.gen;
    s.tier_miss_cost /= a.gen;
    s.tier_wait_s /= a.gen;
    s.tier_read_s /= a.gen;
    s.expert_tokens = ctxs[p]->expert_tokens();
    s.gen_steps = a.gen;
  }
  return out;
}

// A bandwidth probe's buffer, no larger than a quarter of what the process may still take (its
// memory cgroup's room or MemAvailable): a model larger than memory leaves little room, and a
// probe of the default 1 GiB inside a small cgroup was OOM-killed. `report`: say so on stderr.
size_t probe_bytes(size_t wanted, bool report) {
  static constexpr size_t kMin = size_t{8} << 20;
  const MemoryBudget budget = detect_memory_budget();
  const size_t cap = std::max(kMin, budget.bytes / 4);
  if (wanted <= cap) return wanted;
  if (report)
    std::fprintf(stderr, "bench: bandwidth probe of %zu MiB capped at %zu MiB (a quarter of %s)\n",
                 wanted >> 20, cap >> 20, budget.source.c_str());
  return cap;
}

// The machine's roofs per thread count. Read bandwidth: the peak (best of 5 passes, the
// largest over the --bw-sizes buffers), probed at start and again at the end of the run; the
// roofline of every row is the best of those and of every one-pass probe before a cell
// (run_rows), so that it is the most the machine gave during the run: on a shared machine the
// bandwidth moves between about 33 and 65 GB/s within minutes (docs/benchmarks.md), and a
// limit from one pass let a peer engine run "faster than the limit". The f32 FMA peak: the
// compute roof of float weights (a matmul over n tokens takes 2n flops per weight), for telling
// compute-bound batch sizes apart.
Peaks measure_peaks(const Args& a, const std::vector<int>& threads, bool with_fma = true) {
  Peaks pk;
  for (int t : threads) {
    kernels::ThreadPool pool(t);
    double best = a.bw_gb;
    if (best <= 0) {
      for (int mib : parse_int_list(a.bw_sizes, "--bw-sizes")) {
        best = std::max(
            best, kernels::measure_read_bandwidth_gbps(pool, probe_bytes(size_t(mib) << 20, true)));
      }
    }
    pk.bw[t] = best;
    if (with_fma) pk.fma[t] = kernels::measure_fma_gflops(pool);
  }
  return pk;
}

using CellBandwidth = std::map<std::pair<int, int>, std::vector<double>>;  // (threads, batch)

// Every cell of every repetition, repetition-major; within each (threads, batch) cell the
// policies run step-interleaved (run_cell). One plain 512 MiB bandwidth pass right before
// each cell goes to cell_bw, so that each row's roofline uses the bandwidth the machine gave
// while that row ran. The rows hold each cell's policies consecutively, in policy order.
std::vector<Row> run_rows(const Model& model, const Args& a,
                          const std::vector<std::string>& policies, const std::vector<int>& batches,
                          const std::vector<int>& threads, const TraceReplay* replay,
                          const PromptList& file_prompts, CellBandwidth& cell_bw,
                          ExpertParallel& ep) {
  std::vector<Row> rows;
  for (int t : threads) {
    for (int b : batches) {
      for (const auto& p : policies) rows.push_back(Row{p, b, t, {}});
    }
  }
  const size_t P = policies.size();
  for (int r = 0; r < a.reps; ++r) {
    for (size_t i = 0; i < rows.size(); i += P) {
      const Row& first = rows[i];
      double g = a.bw_gb;
      if (g <= 0) {
        kernels::ThreadPool pool(first.threads);
        g = kernels::measure_read_bandwidth_gbps(pool, probe_bytes(size_t{512} << 20, false), 1);
      }
      cell_bw[{first.threads, first.batch}].push_back(g);
      auto samples =
          run_cell(model, a, policies, first.batch, first.threads,
                   a.seed + uint64_t(r) * 1000 + uint64_t(first.batch), replay, file_prompts, ep);
      for (size_t p = 0; p < P; ++p) rows[i + p].reps.push_back(std::move(samples[p]));
    }
    std::fprintf(stderr, "\rbench: repetition %d/%d done", r + 1, a.reps);
  }
  std::fprintf(stderr, "\n");
  return rows;
}

// --expert-parallel: each rank's share of a decode step (means over the steps and
// repetitions), and the busiest rank's share of the routed tokens (1/R is balanced).
nlohmann::json rank_summary(const ModelConfig& c, const Row& row) {
  const size_t R = row.reps[0].ranks.size();
  const double steps = double(row.reps.size());
  nlohmann::json ranks = nlohmann::json::array();
  double total = 0, busiest = 0, max_compute = 0, max_comm = 0;
  for (size_t r = 0; r < R; ++r) {
    RankShare m;
    for (const Sample& s : row.reps) {
      const RankShare& x = s.ranks[r];
      m.tokens += x.tokens;
      m.experts += x.experts;
      m.bytes += x.bytes;
      m.comm_bytes += x.comm_bytes;
      m.compute_s += x.compute_s;
      m.comm_s += x.comm_s;
    }
    const double gen = double(row.reps[0].gen_steps);
    const double per = steps * gen;
    const double tokens = double(m.tokens) / per;
    total += tokens;
    busiest = std::max(busiest, tokens);
    max_compute = std::max(max_compute, m.compute_s / per * 1e3);
    max_comm = std::max(max_comm, m.comm_s / per * 1e3);
    ranks.push_back({{"rank", r},
                     {"tokens_per_step", tokens},
                     {"local_experts_per_layer", double(m.experts) / per / c.n_layer},
                     {"expert_mb_per_step", double(m.bytes) / per / 1e6},
                     {"comm_mb_per_step", double(m.comm_bytes) / per / 1e6},
                     {"compute_ms", m.compute_s / per * 1e3},
                     {"comm_ms", m.comm_s / per * 1e3}});
  }
  return {{"ranks", ranks},
          {"ep_ranks", R},
          {"busiest_rank_share", total > 0 ? busiest / total : 0.0},
          {"imbalance", total > 0 ? busiest * double(R) / total : 0.0},
          {"max_rank_compute_ms", max_compute},
          {"max_rank_comm_ms", max_comm}};
}

// One JSON object per row: means and spreads over the repetitions, rooflines, and speedups
// against the first policy of the same cell.
nlohmann::json summarize(const Model& model, const std::vector<Row>& rows,
                         const std::vector<std::string>& policies, const CellBandwidth& cell_bw,
                         const Peaks& pk) {
  const ModelConfig& c = model.config();
  std::string wtype = "mixed";
  if (c.is_moe())
    wtype = gguf::tensor_type_name(model.layer(0).gate_exps.type);
  else
    wtype = gguf::tensor_type_name(model.layer(0).ffn_up.type);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& row : rows) {
    std::vector<double> tps, tpot, dist, bytes, pre, route, ems, ebytes, disk, miss, claims, pf,
        pf_hits, storage, miss_cost, wait, read_s;
    for (const auto& s : row.reps) {
      disk.push_back(s.disk_bytes);
      storage.push_back(s.storage_bytes);
      miss.push_back(s.tier_misses);
      claims.push_back(s.tier_claims);
      pf.push_back(s.tier_prefetches);
      pf_hits.push_back(s.tier_prefetch_hits);
      miss_cost.push_back(s.tier_miss_cost);
      wait.push_back(s.tier_wait_s * 1e3);
      read_s.push_back(s.tier_read_s);
      ems.push_back(s.expert_s * 1e3);
      ebytes.push_back(s.expert_bytes);
      tps.push_back(row.batch / s.step_s);
      tpot.push_back(s.step_s * 1e3);
      dist.push_back(s.distinct);
      bytes.push_back(s.bytes);
      pre.push_back(s.prefill_tps);
      route.push_back(s.route_s * 1e3);
    }
    // Speedups: the ratio of means, and the stddev of the per-repetition ratios (each
    // repetition runs the policies of a cell step-interleaved, so its ratio is what the
    // machine's drift between repetitions does not move).
    double base_tpot = 0, base_ems = 0;
    std::vector<double> rep_speedup, rep_espeedup;
    for (const auto& o : rows) {
      if (o.batch == row.batch && o.threads == row.threads && o.policy == policies[0]) {
        std::vector<double> v, ve;
        for (size_t r = 0; r < o.reps.size(); ++r) {
          const Sample& s = o.reps[r];
          v.push_back(s.step_s * 1e3);
          ve.push_back(s.expert_s * 1e3);
          rep_speedup.push_back(s.step_s / row.reps[r].step_s);
          if (row.reps[r].expert_s > 0) rep_espeedup.push_back(s.expert_s / row.reps[r].expert_s);
        }
        base_tpot = mean(v);
        base_ems = mean(ve);
      }
    }
    const double gbps = mean(bytes) / (mean(tpot) * 1e-3) / 1e9;
    const double row_bw = mean(cell_bw.at({row.threads, row.batch}));
    // The run's best bandwidth at this thread count (Peaks), not this cell's pass.
    double roof_bw = pk.bw.at(row.threads);
    for (const auto& [key, passes] : cell_bw) {
      if (key.first != row.threads) continue;
      for (double g : passes) roof_bw = std::max(roof_bw, g);
    }
    const double roof_ms = mean(bytes) / (roof_bw * 1e9) * 1e3;
    out.push_back({{"model", c.name},
                   {"type", wtype},
                   {"policy", row.policy},
                   {"batch", row.batch},
                   {"threads", row.threads},
                   {"decode_tps", mean(tps)},
                   {"decode_tps_sd", stddev(tps)},
                   {"tpot_ms", mean(tpot)},
                   {"tpot_ms_sd", stddev(tpot)},
                   {"prefill_tps", mean(pre)},
                   {"distinct_experts", mean(dist)},
                   {"bytes_per_step", mean(bytes)},
                   {"achieved_gbps", gbps},
                   {"read_bw_gbps", row_bw},
                   {"roofline_bw_gbps", roof_bw},
                   {"roofline_ms", roof_ms},
                   {"routing_ms", mean(route)},
                   {"expert_ms", mean(ems)},
                   {"expert_bytes_per_step", mean(ebytes)},
                   {"expert_roofline_ratio",
                    mean(ebytes) > 0 ? mean(ems) / (mean(ebytes) / (roof_bw * 1e9) * 1e3) : 0.0},
                   {"expert_speedup_vs_first", mean(ems) > 0 ? base_ems / mean(ems) : 0.0},
                   {"roofline_ratio", mean(tpot) / roof_ms},
                   {"speedup_vs_first", base_tpot / mean(tpot)},
                   {"speedup_sd", stddev(rep_speedup)},
                   {"expert_speedup_sd", stddev(rep_espeedup)},
                   {"storage_bytes_per_token", mean(storage) / row.batch}});
    if (!row.reps.empty() && !row.reps[0].ranks.empty()) out.back().update(rank_summary(c, row));
    if (model.expert_tier()) {  // bytes read from the file per decoded token, the tier's hit rate
      out.back()["disk_bytes_per_token"] = mean(disk) / row.batch;
      out.back()["tier_misses_per_step"] = mean(miss);
      out.back()["tier_hit_rate"] = mean(claims) > 0 ? 1.0 - mean(miss) / mean(claims) : 0.0;
      // Prefetched experts per step, and the share of them a claim then wanted.
      out.back()["tier_prefetches_per_step"] = mean(pf);
      out.back()["tier_prefetch_accuracy"] = mean(pf) > 0 ? mean(pf_hits) / mean(pf) : 0.0;
      out.back()["tier_miss_cost"] = mean(miss_cost);  // measured unless --expert-miss-cost
      out.back()["tier_wait_ms_per_step"] = mean(wait);
      // One reader's rate while it read: the decode steps' bytes over the readers' seconds.
      out.back()["tier_read_gbps"] = mean(read_s) > 0 ? mean(disk) / mean(read_s) / 1e9 : 0.0;
    }
    // Tokens per expert of each layer over the last repetition's decode steps (plot.py's
    // heatmaps).
    if (c.is_moe() && !row.reps.empty() &&
        row.reps.back().expert_tokens.size() == size_t(c.n_layer) * size_t(c.n_expert)) {
      const auto& et = row.reps.back().expert_tokens;
      nlohmann::json layers = nlohmann::json::array();
      for (int l = 0; l < c.n_layer; ++l) {
        const auto first = et.begin() + int64_t(l) * c.n_expert;
        layers.push_back(std::vector<int64_t>(first, first + c.n_expert));
      }
      out.back()["expert_tokens"] = std::move(layers);
    }
  }
  return out;
}

void run_bench(const Args& a, const std::vector<int>& batches, const std::vector<int>& threads,
               const std::vector<std::string>& policies, ExpertParallel& ep) {
  auto model = ep.load_model(a.model, !a.no_repack && !a.exact_acts, !a.no_repack);
  std::vector<std::string> specs;  // the routing specs, without --bf16-compare's labels
  for (std::string s : policies) {
    strip_row_labels(s, nullptr);
    specs.push_back(s);
  }
  check_specs_fit(specs, *model, "--routing");
  const ModelConfig& c = model->config();
  std::unique_ptr<TraceReplay> replay;
  if (!a.trace.empty()) replay = std::make_unique<TraceReplay>(a.trace, c);
  PromptList file_prompts;
  if (!a.prompt_file.empty()) {
    file_prompts = read_prompt_file(a.prompt_file, c.n_vocab, a.prompt,
                                    *std::max_element(batches.begin(), batches.end()));
  }
  Peaks pk = measure_peaks(a, threads);
  CellBandwidth cell_bw;
  const std::vector<Row> rows =
      run_rows(*model, a, policies, batches, threads, replay.get(), file_prompts, cell_bw, ep);
  if (a.bw_gb <= 0) {  // the peak again after the run: the best of both bounds every row
    for (const auto& [t, g] : measure_peaks(a, threads, false).bw) pk.bw[t] = std::max(pk.bw[t], g);
  }
  for (auto& [t, g] : pk.bw) {
    for (const auto& [key, passes] : cell_bw) {
      if (key.first != t) continue;
      for (double p : passes) g = std::max(g, p);
    }
  }
  const nlohmann::json out = summarize(*model, rows, policies, cell_bw, pk);
  const std::string commit = LYNX_GIT_COMMIT;
  std::string acts = a.exact_acts
                         ? "f32 (--exact-acts)"
                         : "quantized per weight type as ggml's vec_dot_type (q8_0, q8_1 or q8_K)";
  // The BF16 kernel (--bf16-kernel picks another than the best for comparisons).
  const std::string bf16_on =
      std::string(" on kernel ") +
      kernels::bf16_kernel_name(kernels::bf16_kernel_by_name(a.bf16_kernel));
  if (a.bf16_acts) acts += "; bf16 for BF16/F16 weights (--bf16-acts)" + bf16_on;
  if (a.bf16_compare) acts += "; rows '+bf16-acts': bf16 for BF16/F16 weights" + bf16_on;
  acts += std::string("; KV cache ") + a.cache_types.k + "/" + a.cache_types.v;
  if (a.kv_compare) acts += "; rows '+kv=T': KV cache T/T";
  const char* layout = a.no_repack ? "rows"
                       : a.exact_acts
                           ? "f32/f16/bf16 in 16-row panels, quantized rows"
                           : "f32/f16/bf16 in 16-row panels, integer-kernel types interleaved";
  nlohmann::json doc = {{"commit", commit},
                        {"cpu", cpu_name()},
                        {"activations", acts},
                        {"weight_layout", layout},
                        {"rows", out}};
  if (!a.trace.empty()) doc["routing_trace"] = a.trace;
  if (model->expert_tier()) doc["expert_tier"] = model->expert_tier_summary();
  for (auto& [t, g] : pk.bw) doc["peak_read_bandwidth_gbps"][std::to_string(t)] = g;
  for (auto& [t, g] : pk.fma) doc["fma_peak_gflops"][std::to_string(t)] = g;
  if (ep.on()) {
    doc["expert_parallel"] = {
        {"ranks", ep.ranks()},
        {"combine", a.ep.combine},
        {"placement", a.ep.placement.empty() ? "contiguous" : a.ep.placement}};
  }
  if (!a.save_json.empty() && ep.rank() == 0) {
    std::ofstream f(a.save_json);
    f << doc.dump(2) << "\n";
    f.close();
    if (!f) throw Error("cannot write " + a.save_json);
  }
  if (a.output == "json") {
    std::printf("%s\n", doc.dump(2).c_str());
    return;
  }
  if (a.output == "csv") {
    print_csv(out);
    return;
  }
  print_md(c, out, pk, commit, acts.c_str(), layout);
  print_ranks_md(out);
  print_tier_md(*model, out);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("bench", "Decode/prefill speed per batch size and policy");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("--batch", a->batch, "Batch sizes, e.g. 1,2,4,8,16,32");
  cmd->add_option("--routing", a->routing,
                  "Routing specs, separated by ';' (or ',' between names)");
  cmd->add_option("--threads", a->threads, "Thread counts, e.g. 1,2");
  cmd->add_option("--prompt", a->prompt, "Prompt tokens per sequence")->check(int_in(1, 1 << 20));
  cmd->add_option("--gen", a->gen, "Decode steps measured")->check(int_in(1, 1 << 20));
  cmd->add_flag("--warmup", a->warmup,
                "Run every cell's prompts once, untimed, before measuring (as llama-bench): "
                "prefill then times a process that has served a request, not a fresh one");
  cmd->add_option("-r,--reps", a->reps, "Repetitions")->check(int_in(1, 1 << 16));
  cmd->add_option("--seed", a->seed, "Seed of the random prompts");
  cmd->add_option("--delta-chunk-min", a->delta_chunk_min,
                  "Gated DeltaNet: runs of at least this many tokens of a sequence take the "
                  "chunked delta rule (ContextOptions::delta_rule_chunk_min; 0: token by token)")
      ->check(int_in(0, 1 << 20));
  add_mla_decompress_flag(cmd, &a->mla_decompress_min);
  cmd->add_option("--prompt-file", a->prompt_file,
                  "Prompts as token ids, one sequence per line (first --prompt ids of each; "
                  "at least the largest --batch lines), instead of random ones");
  cmd->add_option("--bandwidth", a->bw_gb, "Memory read bandwidth in GB/s (0 = measure)")
      ->check(number_in(0, 1e6));
  cmd->add_option("--bw-sizes", a->bw_sizes,
                  "Buffer sizes of the start-up bandwidth probe in MiB, e.g. 256,1024,2048 "
                  "(the peak over them is reported)");
  add_exact_acts_flag(cmd, &a->exact_acts);
  add_bf16_acts_flag(cmd, &a->bf16_acts, &a->bf16_kernel);
  add_cache_type_flags(cmd, &a->cache_types);
  cmd->add_flag("--bf16-compare", a->bf16_compare,
                "Run every policy twice in each cell, step-interleaved: as given and with "
                "--bf16-acts (rows labelled '+bf16-acts'; their speedup is against the first "
                "policy's exact row)");
  cmd->add_flag("--kv-compare", a->kv_compare,
                "Run every policy three times in each cell, step-interleaved: with the KV cache "
                "types given (--cache-type-k/-v, default f32) and with f16 and q8_0 K and V "
                "caches (rows labelled '+kv=f16', '+kv=q8_0')");
  cmd->add_flag(
      "--no-repack", a->no_repack,
      "Keep the weights in the file's row layout (default: repacked at load, types with an "
      "integer kernel to the integer kernels' 16-row interleaved layout unless --exact-acts, "
      "F32/F16/BF16 to 16-row panels; for A/B runs)");
  cmd->add_option("--routing-trace", a->trace,
                  "Replay router logits recorded from a trained model (generate --record-trace)");
  cmd->add_option("--save-json", a->save_json, "Also write the JSON results to this file");
  cmd->add_option("-o,--output", a->output, "md, csv or json");
  add_ep_flags(cmd, &a->ep);
  cmd->callback([a] {
    ExpertParallel::run(a->ep, [&](ExpertParallel& ep) {
      if (a->output != "md" && a->output != "csv" && a->output != "json") {
        throw UsageError("-o must be md, csv or json");
      }
      const auto batches = parse_int_list(a->batch, "--batch");
      const auto threads = parse_int_list(a->threads, "--threads");
      const auto policies = routing_specs(a->routing, "--routing");
      for (int b : batches) {
        if (b < 1 || b > (1 << 16)) throw UsageError("--batch values must be in [1, 65536]");
      }
      for (int mib : parse_int_list(a->bw_sizes, "--bw-sizes")) {
        if (mib < 8 || mib > (1 << 16)) throw UsageError("--bw-sizes values must be in [8, 65536]");
      }
      for (int t : threads) {
        if (t < 1 || t > kMaxThreads) {
          throw UsageError("--threads values must be in [1, " + std::to_string(kMaxThreads) + "]");
        }
      }
      std::vector<std::string> rows;  // each policy as asked, then in the compared modes
      for (const auto& p : policies) {
        rows.push_back(p);
        if (a->bf16_compare) rows.push_back(p + std::string(kBf16Suffix));
        if (a->kv_compare) {
          rows.push_back(p + std::string(kKvF16Suffix));
          rows.push_back(p + std::string(kKvQ8Suffix));
        }
      }
      run_bench(*a, batches, threads, rows, ep);
    });
  });
}

}  // namespace lynx::cli
