#include "common.h"

#include "bf16_acts.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <CLI/CLI.hpp>

#include "analysis/trace_uses.h"
#include "kernels/matmul_bf16.h"
#include "lynx/error.h"
#include "model/expert_tier.h"
#include "model/memory_budget.h"
#include "model/weights.h"
#include "routing/policies.h"
#include "util/file.h"

namespace lynx::cli {

CLI::Validator number_in(double lo, double hi, bool lo_open, bool allow_inf) {
  std::string desc =
      (lo_open ? "(" : "[") + routing::fmt_num(lo) + ", " + routing::fmt_num(hi) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size())
          return "'" + text + "' is not a number";
        if (std::isnan(v) || (!allow_inf && std::isinf(v))) {
          return "'" + text + "' is not a finite number";
        }
        if (v < lo || v > hi || (lo_open && v == lo)) {
          return text + " is out of range " + desc;
        }
        return {};
      },
      "NUMBER in " + desc, "number_in");
}

CLI::Validator int_in(int64_t lo, int64_t hi) {
  const std::string desc = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        int64_t v = 0;
        const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || p != text.data() + text.size()) {
          return "'" + text + "' is not an integer";
        }
        if (v < lo || v > hi) return text + " is out of range " + desc;
        return {};
      },
      "INT in " + desc, "int_in");
}

std::vector<std::string> routing_specs(const std::string& value, const std::string& flag) {
  const std::vector<std::string> specs = split_specs(value);
  if (specs.empty()) {
    throw UsageError(flag + ": no routing policy given (e.g. 'topk' or 'topk;lynx')");
  }
  for (const auto& s : specs) {
    try {
      make_routing_policy(s);
    } catch (const Error& e) {
      throw UsageError(flag + ": " + e.what());
    }
  }
  return specs;
}

void check_specs_fit(const std::vector<std::string>& specs, const Model& model,
                     const std::string& flag) {
  if (!model.config().is_moe()) return;  // a dense model has nothing to route
  for (const auto& s : specs) {
    try {
      make_routing_policy(s, model.config().gating);
    } catch (const Error& e) {
      throw UsageError(flag + ": " + e.what());
    }
  }
}

namespace {

// The value check harden_options adds; `type` is CLI11's type name of the option.
std::string check_value(const std::string& v, const std::string& type) {
  if (v.empty()) return "an empty value is not allowed";
  const bool is_uint = type.rfind("UINT", 0) == 0, is_int = !is_uint && type.rfind("INT", 0) == 0;
  if (!is_uint && !is_int) return {};
  const size_t b = v.find_first_not_of(" \t");
  if (b == std::string::npos) return "an empty value is not allowed";
  if (is_uint && v[b] == '-') return "must not be negative (got " + v + ")";
  // CLI11 converts with strtoull/strtoll, which saturate silently out of range.
  errno = 0;
  char* end = nullptr;
  if (is_uint) {
    (void)std::strtoull(v.c_str(), &end, 0);
  } else {
    (void)std::strtoll(v.c_str(), &end, 0);
  }
  if (errno == ERANGE) return "is out of range (got " + v + ")";
  return {};
}

void harden(CLI::App* app) {
  for (CLI::Option* opt : app->get_options()) {
    if (opt->get_type_size_max() == 0) continue;  // a flag without a value
    const std::string type = opt->get_type_name();
    opt->check(
        CLI::Validator([type](std::string& v) { return check_value(v, type); }, "", "value"));
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) harden(sub);
}

}  // namespace

void harden_options(CLI::App& app) {
  harden(&app);
}

std::string read_text_file(const std::string& path, const std::string& flag) {
  try {
    return util::read_file_bounded(path, kMaxTextFile, flag);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

void add_exact_acts_flag(CLI::App* cmd, bool* exact_activations) {
  cmd->add_flag("--exact-acts", *exact_activations,
                "Keep activations in F32 for quantized weights (default: for types with an integer "
                "kernel, quantize them to 8 bits per block (Q8_0 or Q8_K) and use integer dot "
                "products, as llama.cpp does; faster). The "
                "weights then stay in the file's layout (not repacked for the integer kernels)");
}

void add_mla_decompress_flag(CLI::App* cmd, int* mla_decompress_min) {
  cmd->add_option("--mla-decompress-min", *mla_decompress_min,
                  "MLA models (deepseek2 files): a sequence's run of at least N tokens in one "
                  "step (a prompt chunk) attends through keys and values decompressed from the "
                  "latents, faster for long prompts; -1: N from the model's dims (171 for "
                  "DeepSeek's), 0 (default): the absorbed form everywhere. Within float rounding "
                  "of the absorbed form, not its bits: a prompt split differently (a prefix-cache "
                  "hit, a shorter last chunk) may then differ in the last bits")
      ->check(int_in(-1, 1 << 20));
}

void add_bf16_acts_flag(CLI::App* cmd, bool* bf16_activations, std::string* bf16_kernel) {
  cmd->add_flag("--bf16-acts", *bf16_activations,
                "Fast mode for BF16/F16 weights: round their activations to BF16 and use BF16 "
                "products (AMX, else AVX512_BF16), F16 weights rounded to BF16, as ik_llama.cpp "
                "does with AVX512_BF16. Not exact: see docs/benchmarks.md for its logit error "
                "and perplexity. Without AVX512_BF16 the products stay exact. Off by default");
  cmd->add_option("--bf16-kernel", *bf16_kernel,
                  "The kernel of --bf16-acts: auto (the best this CPU has), amx, avx512bf16 or "
                  "none (the products stay exact)")
      ->check([](const std::string& name) -> std::string {
        try {
          kernels::bf16_kernel_by_name(name);
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      });
}

gguf::TensorType CacheTypeFlags::k_type() const {
  return kv_cache_type_from_name(k);
}
gguf::TensorType CacheTypeFlags::v_type() const {
  return kv_cache_type_from_name(v);
}
void CacheTypeFlags::apply(ContextOptions& co) const {
  co.cache_type_k = k_type();
  co.cache_type_v = v_type();
}

void add_cache_type_flags(CLI::App* cmd, CacheTypeFlags* flags) {
  auto check = [](const std::string& name) -> std::string {
    try {
      kv_cache_type_from_name(name);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  cmd->add_option("--cache-type-k", flags->k,
                  "KV cache type of the keys (-ctk): f32 (default, exact), f16 or q8_0 (blocks of "
                  "32 with an fp16 scale, ~0.27x the bytes of f32). MLA models cache their "
                  "latent in this type. See docs/benchmarks.md for speed and perplexity")
      ->check(check);
  cmd->add_option("--cache-type-v", flags->v,
                  "KV cache type of the values (-ctv): f32 (default), f16 or q8_0")
      ->check(check);
}

std::vector<char*> long_cache_type_flags(int argc, char** argv) {
  static char k[] = "--cache-type-k", v[] = "--cache-type-v";
  std::vector<char*> out(argv, argv + argc);
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") break;  // positional arguments follow
    if (std::string_view(argv[i]) == "-ctk") out[size_t(i)] = k;
    if (std::string_view(argv[i]) == "-ctv") out[size_t(i)] = v;
  }
  out.push_back(nullptr);
  return out;
}

void check_bf16_acts_combo(bool bf16_acts, bool expert_parallel) {
  if (bf16_acts && expert_parallel) {
    throw UsageError(
        "--bf16-acts cannot be combined with --expert-parallel: the other ranks compute their "
        "experts exactly (drop one of the two)");
  }
}

std::string bf16_acts_summary(const Model& model, const std::string& bf16_kernel) {
  const kernels::Bf16Kernel k = kernels::bf16_kernel_by_name(bf16_kernel);
  int fast = 0, all = 0;
  auto count = [&](const Weight& w) {
    if (!w.present()) return;
    ++all;
    fast += kernels::has_bf16_path(w.type, w.layout, k);
  };
  count(model.output());
  for (int il = 0; il < model.config().n_layer; ++il) {
    const LayerWeights& l = model.layer(il);
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wq_a, &l.wq_b, &l.wkv_a_mqa, &l.ffn_gate,
                            &l.ffn_up, &l.ffn_down, &l.gate_exps, &l.up_exps, &l.down_exps,
                            &l.gate_shexp, &l.up_shexp, &l.down_shexp}) {
      count(*w);
    }
  }
  return std::string("bf16-acts: kernel ") + kernels::bf16_kernel_name(k) + ", " +
         std::to_string(fast) + " of " + std::to_string(all) +
         " weight matrices take it (BF16/F16 in panels; products of at least " +
         std::to_string(kernels::kBf16MinTokens) + " tokens), the rest stay exact";
}

std::string bf16_acts_metrics(bool on, const std::string& bf16_kernel) {
  const char* kernel =
      on ? kernels::bf16_kernel_name(kernels::bf16_kernel_by_name(bf16_kernel)) : "none";
  return std::string(
             "# HELP lynx_bf16_activations BF16 fast mode of BF16/F16 weights (--bf16-acts): 1 "
             "when on; kernel: the one running it (none: the products stay exact).\n"
             "# TYPE lynx_bf16_activations gauge\n"
             "lynx_bf16_activations{kernel=\"") +
         kernel + "\"} " + (on ? "1" : "0") + "\n";
}

void add_tier_flags(CLI::App* cmd, TierFlags* f) {
  cmd->add_option("--mem-budget", f->mem_budget,
                  "Memory the process may use (e.g. 16G); a model file larger than this reads "
                  "its routed experts on demand through the expert tier (docs/offload.md). "
                  "Default: the memory cgroup's room or MemAvailable, whichever is lower");
  cmd->add_option("--expert-cache", f->expert_cache,
                  "Bytes of expert slots of the expert tier (e.g. 8G): a tier of this size "
                  "whatever the file's size; 0 loads every expert. Default: a tier only when "
                  "the file does not fit --mem-budget");
  cmd->add_option("--expert-readers", f->readers, "Reader threads of the expert tier (default 4)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--expert-io", f->io,
                  "How the expert tier reads: threads (--expert-readers threads, one pread each "
                  "at a time) or uring (one thread, up to --expert-queue-depth reads in flight "
                  "through io_uring; falls back to threads, saying so, where io_uring is "
                  "unavailable). Default threads (docs/offload.md \"Reads\")")
      ->check(CLI::IsMember({"threads", "uring"}));
  cmd->add_option("--expert-queue-depth", f->queue_depth,
                  "Matrix reads the io_uring backend keeps in flight, each with a staging "
                  "buffer of one matrix (default 16)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--expert-prefetch", f->prefetch,
                  "Experts per token the expert tier reads ahead for the next layer, ranked by "
                  "that layer's router on the current layer's input (k / 2 is a good start); 0: "
                  "none (the default)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--expert-miss-cost", f->miss_cost,
                  "What streaming an expert that is not in the tier's slots costs the routing, "
                  "in units of a resident expert: cover and budget move low-confidence choices "
                  "onto resident experts by it. Default: measured as the tier runs, RAM's read "
                  "rate over the readers' (20 until 8 reads were timed)")
      ->check(CLI::Range(1.0, 1e6));
  cmd->add_option("--expert-pin", f->pin,
                  "Routing trace (generate --record-trace): the expert tier reads the experts "
                  "its exact top-k uses most at load, into slots never evicted "
                  "(docs/offload.md)");
  cmd->add_option("--expert-pin-share", f->pin_share,
                  "Share of the tier's slots --expert-pin may pin, split evenly among the "
                  "routed layers (default 0.5)")
      ->check(CLI::Range(0.01, 1.0));
}

void apply_tier_flags(const TierFlags& f, LoadOptions& opts) {
  try {
    if (!f.mem_budget.empty()) opts.mem_budget = parse_memory_size(f.mem_budget);
    if (!f.expert_cache.empty()) opts.expert_cache = int64_t(parse_memory_size(f.expert_cache));
  } catch (const Error& e) {
    throw UsageError(std::string(!f.expert_cache.empty() ? "--expert-cache / " : "") +
                     "--mem-budget: " + e.what());
  }
  opts.expert_readers = f.readers;
  opts.expert_io = f.io == "uring" ? ExpertIo::kUring : ExpertIo::kThreads;
  opts.expert_queue_depth = f.queue_depth;
  opts.expert_miss_cost = f.miss_cost;
  opts.expert_prefetch = f.prefetch;
  opts.expert_pin_share = f.pin_share;
  if (!f.pin.empty()) {
    opts.expert_pin_uses = [path = f.pin](const ModelConfig& c) {
      try {
        return analysis::trace_topk_uses(path, c);
      } catch (const Error& e) {
        throw Error(std::string("--expert-pin: ") + e.what());
      }
    };
  }
}

std::string expert_tier_line(const Model& model) {
  const ExpertTier* t = model.expert_tier();
  if (!t) return {};
  const ExpertTierStats s = t->stats();
  const uint64_t claims = s.hits + s.misses;
  char how[128];
  if (s.miss_cost_measured) {
    std::snprintf(how, sizeof how, "measured: RAM %.1f GB/s over reads %.2f GB/s",
                  s.ram_bytes_per_s / 1e9, s.read_bytes_per_s / 1e9);
  } else {
    std::snprintf(how, sizeof how, "%s",
                  s.ram_bytes_per_s > 0 ? "too few reads to measure" : "fixed");
  }
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "expert tier: %llu hits, %llu misses (%.1f%% hit), %.2f GB read (%.2f GB/s per "
                "reader while reading; %.2f s reading, %.2f s laying out), %.2f s waiting, %llu "
                "evictions, %llu prefetched (%.1f%% then claimed), %d/%d slots resident; miss "
                "cost %.1f (%s)",
                (unsigned long long)s.hits, (unsigned long long)s.misses,
                claims ? 100.0 * double(s.hits) / double(claims) : 0.0, double(s.bytes_read) / 1e9,
                s.read_ns ? double(s.bytes_read) / double(s.read_ns) : 0.0, double(s.read_ns) / 1e9,
                double(s.repack_ns) / 1e9, double(s.wait_ns) / 1e9, (unsigned long long)s.evictions,
                (unsigned long long)s.prefetches,
                s.prefetches ? 100.0 * double(s.prefetch_hits) / double(s.prefetches) : 0.0,
                s.resident, s.slots, double(s.miss_cost), how);
  return buf;
}

std::string expert_tier_metrics(const Model& model) {
  const ExpertTier* t = model.expert_tier();
  if (!t) return {};
  const ExpertTierStats s = t->stats();
  std::string o;
  auto counter = [&](const char* name, const char* help, double v, const char* type) {
    char num[40];
    std::snprintf(num, sizeof num, "%.17g", v);
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
         name + " " + num + "\n";
  };
  counter("lynx_expert_tier_hits_total", "Expert claims found resident in the expert tier.",
          double(s.hits), "counter");
  counter("lynx_expert_tier_misses_total", "Expert claims read from the model file.",
          double(s.misses), "counter");
  counter("lynx_expert_tier_read_bytes_total", "Bytes the expert tier read from the model file.",
          double(s.bytes_read), "counter");
  counter("lynx_expert_tier_read_seconds_total", "Reader threads' time in reads, summed.",
          double(s.read_ns) / 1e9, "counter");
  counter("lynx_expert_tier_wait_seconds_total", "Steps' time waiting for expert reads.",
          double(s.wait_ns) / 1e9, "counter");
  counter("lynx_expert_tier_evictions_total", "Resident experts replaced.", double(s.evictions),
          "counter");
  counter("lynx_expert_tier_read_errors_total", "Expert reads that failed.", double(s.read_errors),
          "counter");
  counter("lynx_expert_tier_prefetches_total",
          "Experts the tier read ahead for the next layer (predicted through its router).",
          double(s.prefetches), "counter");
  counter("lynx_expert_tier_prefetch_hits_total",
          "Read-ahead experts a step then claimed (prefetch accuracy = hits / prefetches).",
          double(s.prefetch_hits), "counter");
  counter("lynx_expert_tier_slots", "Expert slots of the tier.", double(s.slots), "gauge");
  counter("lynx_expert_tier_resident", "Slots holding an expert.", double(s.resident), "gauge");
  counter("lynx_expert_tier_miss_cost",
          "What a missing expert costs the routing, in resident experts (RAM read rate over "
          "the readers' when measured).",
          double(s.miss_cost), "gauge");
  counter("lynx_expert_tier_read_rate_bytes_per_second",
          "One reader's rate, a decayed average over the reads made (0: none yet).",
          s.read_bytes_per_s, "gauge");
  return o;
}

std::unique_ptr<Model> load_model(const std::string& path, bool repack, bool repack_float,
                                  const TierFlags& tier) {
  LoadOptions opts;
  opts.repack = repack;
  opts.repack_float = repack_float;
  apply_tier_flags(tier, opts);
  const bool tty = isatty(STDERR_FILENO);
  int last = -1;
  opts.progress = [&](size_t done, size_t total) {
    // A redirected stderr (logs, CI) gets one line at the end, a terminal a live bar.
    if (!tty) {
      if (done >= total && total >= (size_t(256) << 20)) {
        std::fprintf(stderr, "loaded %s (%.2f GB)\n", path.c_str(), double(total) / 1e9);
      }
      return;
    }
    const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
    if (pct == last) return;
    last = pct;
    std::fprintf(stderr, "\rloading %s: %3d%% (%.2f / %.2f GB)", path.c_str(), pct,
                 double(done) / 1e9, double(total) / 1e9);
    if (done >= total) std::fprintf(stderr, "\n");
  };
  auto m = Model::load(path, opts);
  if (m->expert_tier()) std::fprintf(stderr, "%s\n", m->expert_tier_summary().c_str());
  if (!tier.pin.empty() && !m->expert_tier()) {
    std::fprintf(stderr,
                 "note: --expert-pin: every expert is loaded (no expert tier): nothing "
                 "to pin\n");
  }
  if (m->config().arch == "glm-dsa") {
    // GLM-5's DeepSeek sparse attention: its indexer is not run (src/model/arch/deepseek2.cc).
    const int64_t top_k = m->file().get_int("glm-dsa.attention.indexer.top_k", 2048);
    std::fprintf(stderr,
                 "note: glm-dsa: the DSA indexer is not run; attention is dense MLA over every "
                 "cached token, the same as the model's sparse attention while a sequence holds "
                 "at most its top_k = %lld tokens, not beyond\n",
                 static_cast<long long>(top_k));
  }
  return m;
}

std::vector<int> parse_int_list(const std::string& s, const std::string& flag) {
  std::vector<int> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw UsageError(flag + ": '" + item + "' is not an integer");
    }
    i = j + 1;
  }
  return out;
}

std::vector<std::string> split_specs(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ';') {
      flush();
    } else if (c == ',') {
      // A parameter list continues if the next item is key=value.
      size_t end = s.find_first_of(",;", i + 1);
      const std::string next = s.substr(i + 1, end == std::string::npos ? end : end - i - 1);
      if (next.find('=') != std::string::npos && cur.find(':') != std::string::npos) {
        cur += c;
      } else {
        flush();
      }
    } else {
      cur += c;
    }
  }
  flush();
  return out;
}

}  // namespace lynx::cli
