// `lynx-moe eval`: accuracy of every routing policy at realistic batch sizes, side by side
// with exact routing on the same held-out documents (see lynx/eval.h).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "ep.h"
#include "lynx/eval.h"

namespace lynx::cli {

namespace {

struct EvalArgs {
  std::string model, data, routing = "topk;lynx", batch = "1,4,16,32", output = "md";
  EvalOptions opts;
  CacheTypeFlags cache_types;
  EpFlags ep;
};

// What the report writers need besides the rows.
struct EvalReport {
  const ModelConfig& c;
  size_t documents;
};

void write_eval_json(const std::vector<EvalRow>& rows, const EvalReport& rep) {
  const ModelConfig& c = rep.c;
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows) {
    j.push_back({{"policy", r.policy},
                 {"batch", r.batch},
                 {"tokens", r.tokens},
                 {"ppl", r.ppl},
                 {"accuracy", r.accuracy},
                 {"kl", r.kl},
                 {"distinct_experts", r.distinct},
                 {"distinct_exact", r.distinct_exact},
                 {"mass_kept", r.mass_kept},
                 {"frac_changed", r.frac_changed},
                 {"d_nll", {r.d_nll.mean, r.d_nll.lo, r.d_nll.hi}},
                 {"d_acc", {r.d_acc.mean, r.d_acc.lo, r.d_acc.hi}},
                 {"gen_agreement", r.gen_agreement},
                 {"code_exact_match", r.code_exact_match}});
    if (r.tier_misses >= 0) {
      j.back()["tier_misses_per_step"] = r.tier_misses;
      j.back()["tier_hit_rate"] = r.tier_hit_rate;
      j.back()["disk_bytes_per_token"] = r.disk_bytes_per_token;
    }
  }
  nlohmann::json doc = {
      {"model", c.name}, {"commit", LYNX_GIT_COMMIT}, {"documents", rep.documents}, {"rows", j}};
  std::printf("%s\n", doc.dump(2).c_str());
}

void write_eval_csv(const std::vector<EvalRow>& rows) {
  std::printf(
      "policy,batch,tokens,ppl,accuracy,kl,distinct,distinct_exact,mass_kept,"
      "frac_changed,d_nll,d_nll_lo,d_nll_hi,d_acc,d_acc_lo,d_acc_hi,gen_agreement,"
      "code_exact_match,tier_misses_per_step,tier_hit_rate,disk_bytes_per_token\n");
  for (const auto& r : rows) {
    std::printf(
        "%s,%d,%lld,%.4f,%.4f,%.5f,%.2f,%.2f,%.4f,%.4f,%.5f,%.5f,%.5f,%.5f,%.5f,"
        "%.5f,%.4f,%.4f,%.2f,%.4f,%.0f\n",
        r.policy.c_str(), r.batch, (long long)r.tokens, r.ppl, r.accuracy, r.kl, r.distinct,
        r.distinct_exact, r.mass_kept, r.frac_changed, r.d_nll.mean, r.d_nll.lo, r.d_nll.hi,
        r.d_acc.mean, r.d_acc.lo, r.d_acc.hi, r.gen_agreement, r.code_exact_match, r.tier_misses,
        r.tier_hit_rate, r.disk_bytes_per_token);
  }
}

void write_eval_md(const std::vector<EvalRow>& rows, const EvalReport& rep) {
  const ModelConfig& c = rep.c;
  std::printf("lynx-moe eval | commit %s | model %s (%d layers, %d/%d experts) | %zu documents\n\n",
              LYNX_GIT_COMMIT, c.name.c_str(), c.n_layer, c.n_expert_used, c.n_expert,
              rep.documents);
  // The expert tier's columns only where the model has a tier.
  const bool tier =
      std::any_of(rows.begin(), rows.end(), [](const EvalRow& r) { return r.tier_misses >= 0; });
  std::printf(
      "| policy | B | tokens | PPL | acc | KL | dNLL/token [95%% CI] | dAcc [95%% CI] "
      "| experts/layer | exact | mass kept | changed | greedy agree | code EM |%s\n",
      tier ? " tier misses/step | disk KB/token | tier hit rate |" : "");
  std::printf("|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|%s\n",
              tier ? "---:|---:|---:|" : "");
  for (const auto& r : rows) {
    std::printf(
        "| %s | %d | %lld | %.3f | %.4f | %.5f | %+.4f [%+.4f, %+.4f] | %+.4f [%+.4f, "
        "%+.4f] | %.2f | %.2f | %.3f | %.3f | %s | %s |",
        r.policy.c_str(), r.batch, (long long)r.tokens, r.ppl, r.accuracy, r.kl, r.d_nll.mean,
        r.d_nll.lo, r.d_nll.hi, r.d_acc.mean, r.d_acc.lo, r.d_acc.hi, r.distinct, r.distinct_exact,
        r.mass_kept, r.frac_changed,
        r.gen_agreement < 0 ? "-" : std::to_string(r.gen_agreement).substr(0, 5).c_str(),
        r.code_exact_match < 0 ? "-" : std::to_string(r.code_exact_match).substr(0, 5).c_str());
    if (tier) {
      std::printf(" %.2f | %.1f | %.3f |", r.tier_misses, r.disk_bytes_per_token / 1e3,
                  r.tier_hit_rate);
    }
    std::printf("\n");
  }
}

// Progress on stderr: a line redrawn on a terminal, else one line per finished stage.
std::function<void(const std::string&, size_t, size_t)> eval_progress() {
  const bool tty = isatty(STDERR_FILENO);
  return [tty, last = std::string()](const std::string& what, size_t done, size_t total) mutable {
    const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
    const std::string line = what + ": " + std::to_string(pct) + "%";
    if (line == last) return;
    last = line;
    if (tty) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      if (done >= total) std::fprintf(stderr, "\n");
    } else if (done >= total) {
      std::fprintf(stderr, "%s done\n", what.c_str());
    }
  };
}

void run_eval(const EvalArgs& a, ExpertParallel& ep) {
  if (a.output != "md" && a.output != "csv" && a.output != "json") {
    throw UsageError("-o must be md, csv or json");
  }
  EvalOptions o = a.opts;
  o.cache_type_k = a.cache_types.k_type();
  o.cache_type_v = a.cache_types.v_type();
  o.policies = routing_specs(a.routing, "--routing");
  o.batches = parse_int_list(a.batch, "--batch");
  for (int b : o.batches) {
    if (b < 1 || b > (1 << 16))
      throw UsageError("--batch: " + std::to_string(b) + " is out of range [1, 65536]");
  }
  o.progress = eval_progress();
  // Under --expert-parallel every rank makes the same progress: rank 0 reports it.
  if (ep.rank() != 0) o.progress = nullptr;
  auto model = ep.load_model(a.model, !a.opts.exact_activations);
  check_specs_fit(o.policies, *model, "--routing");
  if (ep.on()) {
    ContextOptions co;
    ep.configure(co);
    o.experts = co.experts;
  }
  auto tok = Tokenizer::from_gguf(model->file());
  const auto docs = read_eval_documents(a.data);
  const auto rows = evaluate(*model, *tok, docs, o);
  const ModelConfig& c = model->config();

  if (a.output == "json") {
    write_eval_json(rows, {c, docs.size()});
  } else if (a.output == "csv") {
    write_eval_csv(rows);
  } else {
    write_eval_md(rows, {c, docs.size()});
  }
}

}  // namespace

void register_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  EvalArgs& a = *args;
  auto* cmd = app.add_subcommand("eval", "Accuracy of routing policies on held-out documents");
  cmd->add_option("-m,--model", a.model, "GGUF model file")->required();
  cmd->add_option("--data", a.data, "Directory of held-out documents (one per file)")->required();
  cmd->add_option("--routing", a.routing, "Routing specs (';' separated, or ',' between names)");
  cmd->add_option("--batch", a.batch, "Batch sizes (documents decoding together)");
  cmd->add_option("--max-tokens", a.opts.max_tokens, "Tokens per document")
      ->check(int_in(2, 1 << 30));
  cmd->add_option("--max-docs", a.opts.max_docs, "Documents (0 = all)")->check(int_in(0, 1 << 30));
  cmd->add_option("--prefix", a.opts.prefix,
                  "Leading tokens per document fed as prefill (documents of prefix + 1 tokens "
                  "or fewer have nothing left to score and are skipped)")
      ->check(int_in(0, 1 << 30));
  cmd->add_option("--gen-prompts", a.opts.gen_prompts, "Prompts for greedy agreement (0 = off)")
      ->check(int_in(0, 1 << 20));
  cmd->add_option("--gen-tokens", a.opts.gen_tokens, "Greedy tokens per prompt")
      ->check(int_in(1, 1 << 20));
  cmd->add_option("--code-lines", a.opts.code_lines, "Held-out code lines to complete (0 = off)")
      ->check(int_in(0, 1 << 20));
  cmd->add_option("-t,--threads", a.opts.n_threads, "Threads (default: all cores)")
      ->check(int_in(0, kMaxThreads));
  add_exact_acts_flag(cmd, &a.opts.exact_activations);
  add_bf16_acts_flag(cmd, &a.opts.bf16_activations, &a.opts.bf16_kernel);
  add_cache_type_flags(cmd, &a.cache_types);
  cmd->add_option("-o,--output", a.output, "md, csv or json");
  add_ep_flags(cmd, &a.ep);
  cmd->callback(
      [args] { ExpertParallel::run(args->ep, [&](ExpertParallel& ep) { run_eval(*args, ep); }); });
}

}  // namespace lynx::cli
