// Helpers shared by the commands: model loading with a progress bar, list flags, timing.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lynx/context.h"
#include "lynx/model.h"
#include "util/clock.h"

#include <CLI/CLI.hpp>

#include "lynx/error.h"

namespace lynx::cli {

// Bad command-line input found after parsing (a routing spec that does not fit the model, a
// file flag naming a directory): main prints it and exits with status 2, as it does for
// CLI11's own parse errors; runtime failures exit with 1.
class UsageError : public Error {
 public:
  using Error::Error;
};

// Rules every option of every command follows, added after the commands are registered:
// an empty value is refused (CLI11 would store 0 or "" for it, so `--port ''` meant "any
// port" and `--api-key "$UNSET"` no key), and an integer value must be written in range
// (CLI11's own conversion lets "-1" wrap to 2^64-1 for unsigned options and saturates
// out-of-range numbers).
void harden_options(CLI::App& app);

// A floating-point flag in [lo, hi] (open at lo when lo_open). Unlike CLI::Range it rejects
// NaN, and infinities unless allow_inf.
CLI::Validator number_in(double lo, double hi, bool lo_open = false, bool allow_inf = false);
// An integer flag in [lo, hi].
CLI::Validator int_in(int64_t lo, int64_t hi);
// Upper bound of --threads / -t (0 = all cores): far above any machine this runs on, low enough
// that a typo does not try to start a million threads.
constexpr int kMaxThreads = 1024;

// The --routing value of a command: split (split_specs) and each spec parsed, so that a bad
// or empty value fails before the model is loaded (UsageError naming `flag`).
std::vector<std::string> routing_specs(const std::string& value, const std::string& flag);
// Every spec checked against the model's gating (static-k:k above the model's k, ...).
void check_specs_fit(const std::vector<std::string>& specs, const Model& model,
                     const std::string& flag);

// Text inputs named on the command line (prompts, documents, CSV, JSON) are at most this big.
constexpr uint64_t kMaxTextFile = uint64_t(1) << 30;
// The whole content of a regular file of at most kMaxTextFile bytes: anything else (a
// directory, a device such as /dev/zero, a FIFO, /dev/stdin, a larger file) or a read error is
// a UsageError naming `flag`.
std::string read_text_file(const std::string& path, const std::string& flag);

// Adds --exact-acts (ContextOptions::exact_activations) to a command that creates a Context.
void add_exact_acts_flag(CLI::App* cmd, bool* exact_activations);
// Adds --mla-decompress-min (ContextOptions::mla_decompress_min) to a command that creates a
// Context.
void add_mla_decompress_flag(CLI::App* cmd, int* mla_decompress_min);
// Adds --bf16-acts (ContextOptions::bf16_activations, the BF16 fast mode of BF16/F16 weights)
// and --bf16-kernel (ContextOptions::bf16_kernel, checked against this CPU).
void add_bf16_acts_flag(CLI::App* cmd, bool* bf16_activations, std::string* bf16_kernel);

// --cache-type-k / -ctk and --cache-type-v / -ctv (ContextOptions::cache_type_k / _v: f32,
// f16 or q8_0), on every command that creates a Context for a model's tokens.
struct CacheTypeFlags {
  std::string k = "f32", v = "f32";
  gguf::TensorType k_type() const;  // lynx::Error on an unknown name (checked when parsed)
  gguf::TensorType v_type() const;
  void apply(ContextOptions& co) const;
};
void add_cache_type_flags(CLI::App* cmd, CacheTypeFlags* flags);
// llama.cpp's spellings -ctk and -ctv, which CLI11 cannot register (a single dash takes one
// letter): argv with them replaced by --cache-type-k / --cache-type-v.
std::vector<char*> long_cache_type_flags(int argc, char** argv);

// Loads a model, drawing a progress bar on stderr while the file is read ahead (only when
// stderr is a terminal or the file is large). `repack`: LoadOptions::repack; commands pass
// false with --exact-acts, whose float path would read interleaved quantized weights through a
// copy back to rows (slower than rows: docs/benchmarks.md). `repack_float`:
// LoadOptions::repack_float.
// The expert tier (docs/offload.md): --mem-budget SIZE (default: the memory cgroup's room or
// MemAvailable) and --expert-cache SIZE (slots; 0 = every expert loaded; default: a tier
// only when the file does not fit the budget), --expert-readers N, --expert-io threads|uring,
// --expert-queue-depth N, --expert-miss-cost X,
// --expert-pin TRACE and --expert-pin-share F.
struct TierFlags {
  std::string mem_budget, expert_cache;
  int readers = 4;
  std::string io = "threads";  // --expert-io (LoadOptions::expert_io)
  int queue_depth = 16;        // --expert-queue-depth
  float miss_cost = 0.f;       // 0: measured (LoadOptions::expert_miss_cost)
  int prefetch = 0;
  std::string pin;         // --expert-pin TRACE (LoadOptions::expert_pin_uses)
  float pin_share = 0.5f;  // --expert-pin-share F
};
void add_tier_flags(CLI::App* cmd, TierFlags* flags);
// The flags into `opts` (UsageError on a malformed size).
void apply_tier_flags(const TierFlags& flags, LoadOptions& opts);
// One line of the tier's counters ("expert tier: 1234 hits, ..."); empty without a tier.
std::string expert_tier_line(const Model& model);
// Prometheus lines of the tier's counters (lynx_expert_tier_*); empty without a tier.
std::string expert_tier_metrics(const Model& model);

std::unique_ptr<Model> load_model(const std::string& path, bool repack = true,
                                  bool repack_float = true, const TierFlags& tier = {});

// "1,2,4" -> {1, 2, 4}; throws lynx::Error naming `flag` on a malformed item.
std::vector<int> parse_int_list(const std::string& s, const std::string& flag);
// Splits routing specs: "topk;lynx:alpha=3,beta=4" or "topk,lynx,oea:k0=4". A comma starts a
// new spec only when what follows looks like a policy name (no '=' before the next ',' or
// ';'), so parameters keep their commas.
std::vector<std::string> split_specs(const std::string& s);

using util::now_seconds;

}  // namespace lynx::cli
