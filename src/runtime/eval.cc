// Routing-policy accuracy evaluation (see lynx/eval.h).
#include "lynx/eval.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lynx/batch_loop.h"
#include "lynx/context.h"
#include "lynx/scheduler.h"
#include "model/expert_tier.h"
#include "util/file.h"

namespace lynx {
namespace {

// Log-softmax of one row of logits into `out`.
void log_softmax(std::span<const float> l, std::vector<float>& out) {
  out.resize(l.size());
  float mx = l[0];
  for (float v : l) mx = std::max(mx, v);
  double s = 0;
  for (float v : l) s += std::exp(double(v - mx));
  const float lse = mx + float(std::log(s));
  for (size_t i = 0; i < l.size(); ++i) out[i] = l[i] - lse;
}

Interval interval(const std::vector<double>& v) {
  Interval r;
  if (v.empty()) return r;
  double m = 0;
  for (double x : v) m += x;
  m /= double(v.size());
  double var = 0;
  for (double x : v) var += (x - m) * (x - m);
  const double se = v.size() > 1 ? std::sqrt(var / double(v.size() - 1) / double(v.size())) : 0;
  r.mean = m;
  r.lo = m - 1.96 * se;
  r.hi = m + 1.96 * se;
  return r;
}

// Per-document sums of one teacher-forced run.
struct DocScore {
  double nll = 0;
  int64_t correct = 0, n = 0;
};

struct ForcedRun {
  std::vector<DocScore> docs;
  double kl_sum = 0;
  double distinct = 0, distinct_exact = 0;
  int64_t steps = 0;
  RoutingStats routing;  // decode steps only
  // The expert tier's counters over the decode steps (model with a tier only): what each
  // policy makes the tier read from the file, for fronts of disk bytes against perplexity.
  uint64_t tier_misses = 0, tier_claims = 0, tier_bytes = 0;
  int64_t decode_tokens = 0;
};

RoutingStats sum_stats(const Context& ctx) {
  RoutingStats s;
  for (const auto& r : ctx.routing_stats()) s.add(r);
  return s;
}

// Teacher forcing on a BatchLoop: up to B documents decode together; a finished document's
// slot is taken by the next one (continuous batching), so batches stay full. Each sequence's
// hook scores the logits against the document's next token and feeds that token (not a
// sampled one). The prefix of a document is prefilled in a step of its own (separate
// prefill), exact, and its routing statistics are left out. When `store` is set the run
// stores its log-probabilities in `exact_lp` (the exact baseline); otherwise it computes the
// KL divergence to them.
ForcedRun forced_run(const Model& model, const std::vector<std::vector<int32_t>>& docs,
                     const EvalOptions& o, const std::string& policy, int B,
                     std::vector<std::vector<float>>& exact_lp, bool store,
                     const std::string& label) {
  const int V = model.config().n_vocab;
  int max_len = 0;
  for (const auto& d : docs) max_len = std::max(max_len, int(d.size()));
  ContextOptions co;
  co.n_threads = o.n_threads;
  co.exact_activations = o.exact_activations;
  co.bf16_activations = o.bf16_activations;
  co.bf16_kernel = o.bf16_kernel;
  co.cache_type_k = o.cache_type_k;
  co.cache_type_v = o.cache_type_v;
  co.experts = o.experts;
  co.n_ctx = std::max(1, max_len);
  co.routing = policy;
  Context ctx(model, co);
  // A prefix is at most max_len - 1 tokens: one step each.
  BatchLoop loop(ctx, BatchLoopOptions{std::max(1, max_len), false});
  ForcedRun run;
  run.docs.resize(docs.size());
  if (store) exact_lp.assign(docs.size(), {});

  size_t next_doc = 0;
  size_t total_tokens = 0, done_tokens = 0;
  // A document is scored on the targets after its prefix: positions prefix + 1 .. size - 1.
  // One with no such target (size <= prefix + 1) is skipped: feeding its last token would ask
  // for a target past its end.
  const int64_t prefix = std::max(0, o.prefix);
  auto n_scored = [prefix](const std::vector<int32_t>& d) {
    return std::max<int64_t>(0, int64_t(d.size()) - 1 - prefix);
  };
  for (const auto& d : docs) total_tokens += size_t(n_scored(d));
  RoutingStats prefill_stats;
  std::vector<float> lp;
  // Scores the prediction at `pos` of document `doc`; returns the token fed next.
  auto score = [&](size_t doc, int& pos, std::span<const float> logits) -> int32_t {
    const auto& d = docs[doc];
    log_softmax(logits, lp);
    const int32_t target = d[size_t(pos) + 1];
    DocScore& ds = run.docs[doc];
    ds.nll -= lp[size_t(target)];
    int32_t best = 0;
    for (int v = 1; v < V; ++v) {
      if (lp[size_t(v)] > lp[size_t(best)]) best = v;
    }
    ds.correct += best == target;
    ++ds.n;
    float* ex = exact_lp[doc].data() + size_t(pos) * V;
    if (store) {
      std::copy(lp.begin(), lp.end(), ex);
    } else {
      double kl = 0;  // KL(exact || policy)
      for (int v = 0; v < V; ++v) kl += std::exp(double(ex[v])) * double(ex[v] - lp[size_t(v)]);
      run.kl_sum += std::max(0.0, kl);
    }
    ++pos;
    return pos + 1 >= int(d.size()) ? kEndSequence : target;
  };
  auto admit = [&] {
    while (int(loop.size()) < B && next_doc < docs.size()) {
      const size_t doc = next_doc++;
      const auto& d = docs[doc];
      if (n_scored(d) == 0) continue;
      if (store) exact_lp[doc].assign(d.size() * size_t(V), 0.f);
      const int pre = int(prefix);
      LoopSequence ls;
      ls.prompt.assign(d.begin(), d.begin() + pre);
      ls.next = d[size_t(pre)];
      ls.on_logits = [&score, doc, pos = pre](std::span<const float> logits) mutable {
        return score(doc, pos, logits);
      };
      loop.add(std::move(ls));
    }
  };
  admit();
  while (loop.size() > 0) {
    if (loop.prefill_pending()) {
      const RoutingStats before = sum_stats(ctx);
      loop.step();
      prefill_stats.add(sum_stats(ctx) - before);
      continue;
    }
    const ExpertTier* tier = model.expert_tier();
    const ExpertTierStats t0 = tier ? tier->stats() : ExpertTierStats{};
    const StepReport rep = loop.step();
    if (tier) {
      const ExpertTierStats t1 = tier->stats();
      run.tier_misses += t1.misses - t0.misses;
      run.tier_claims += t1.misses + t1.hits - t0.misses - t0.hits;
      run.tier_bytes += t1.bytes_read - t0.bytes_read;
    }
    run.decode_tokens += rep.n_decode;
    run.distinct += ctx.last_step().mean_distinct();
    run.distinct_exact += ctx.last_step().mean_distinct_exact();
    ++run.steps;
    done_tokens += size_t(rep.n_decode);
    admit();
    if (o.progress) o.progress(label, done_tokens, total_tokens);
  }
  run.routing = sum_stats(ctx) - prefill_stats;
  return run;
}

EvalRow make_row(const std::string& policy, int B, const ForcedRun& r, const ForcedRun& exact,
                 bool is_exact) {
  EvalRow row;
  row.policy = policy;
  row.batch = B;
  double nll = 0;
  int64_t correct = 0;
  std::vector<double> dn, da;
  for (size_t i = 0; i < r.docs.size(); ++i) {
    const DocScore& d = r.docs[i];
    if (d.n == 0) continue;
    nll += d.nll;
    correct += d.correct;
    row.tokens += d.n;
    const DocScore& e = exact.docs[i];
    dn.push_back(d.nll / double(d.n) - e.nll / double(e.n));
    da.push_back(double(d.correct - e.correct) / double(d.n));
  }
  if (row.tokens == 0) {
    throw Error("eval: no document has a token to score (each needs more than prefix + 1 tokens)");
  }
  row.ppl = std::exp(nll / double(row.tokens));
  row.accuracy = double(correct) / double(row.tokens);
  row.kl = is_exact ? 0.0 : r.kl_sum / double(row.tokens);
  row.distinct = r.steps ? r.distinct / double(r.steps) : 0;
  row.distinct_exact = r.steps ? r.distinct_exact / double(r.steps) : 0;
  row.mass_kept = r.routing.mean_mass_kept();
  if (r.tier_claims > 0) {
    row.tier_misses = r.steps ? double(r.tier_misses) / double(r.steps) : 0;
    row.tier_hit_rate = 1.0 - double(r.tier_misses) / double(r.tier_claims);
    row.disk_bytes_per_token = r.decode_tokens ? double(r.tier_bytes) / double(r.decode_tokens) : 0;
  }
  row.frac_changed = r.routing.frac_changed();
  row.d_nll = interval(dn);
  row.d_acc = interval(da);
  return row;
}

std::vector<std::vector<int32_t>> greedy_runs(const Model& model,
                                              const std::vector<std::vector<int32_t>>& prompts,
                                              int n_gen, const std::string& policy, int B,
                                              const EvalOptions& o,
                                              const std::vector<int32_t>& stop,
                                              const Tokenizer* stop_at_newline = nullptr) {
  int max_len = 0;
  for (const auto& p : prompts) max_len = std::max(max_len, int(p.size()));
  ContextOptions co;
  co.n_threads = o.n_threads;
  co.exact_activations = o.exact_activations;
  co.bf16_activations = o.bf16_activations;
  co.bf16_kernel = o.bf16_kernel;
  co.cache_type_k = o.cache_type_k;
  co.cache_type_v = o.cache_type_v;
  co.experts = o.experts;
  co.n_ctx = max_len + n_gen;
  co.routing = policy;
  Context ctx(model, co);
  SchedulerOptions so;
  so.max_batch = B;
  so.max_step_tokens = std::max(256, B);
  Scheduler sched(ctx, so);
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.max_tokens = n_gen;
    r.stop_tokens = stop;
    r.on_token = [&out, i, stop_at_newline](int32_t t) {
      out[i].push_back(t);
      // Line completion ends at the first newline: no need to generate further.
      return !stop_at_newline || stop_at_newline->token_to_piece(t).find('\n') == std::string::npos;
    };
    sched.submit(std::move(r));
  }
  sched.run_until_idle();
  return out;
}

// Held-out line completion: prompt = up to 600 characters of the document before the line
// plus the line's first half (cut before a space, so the prompt ends on a word and the
// target starts a new one, as the BPE pre-tokenizer splits), target = the rest of the line.
struct LineTask {
  std::string prompt, target;
};

std::vector<LineTask> code_line_tasks(const std::vector<EvalDocument>& docs, int n) {
  std::vector<LineTask> tasks;
  if (n <= 0) return tasks;
  // One line per document per round, from the middle outwards, until n lines are found.
  for (int round = 0; int(tasks.size()) < n && round < 64; ++round) {
    bool any = false;
    for (const auto& d : docs) {
      if (int(tasks.size()) >= n) break;
      std::vector<std::pair<size_t, size_t>> good;  // (line start, cut)
      for (size_t s = 0; s < d.text.size();) {
        size_t e = d.text.find('\n', s);
        if (e == std::string::npos) break;
        size_t ind = s;
        while (ind < e && (d.text[ind] == ' ' || d.text[ind] == '\t')) ++ind;
        // A space in the second half of the content to cut at.
        const size_t mid = ind + (e - ind) / 2;
        const size_t cut = d.text.find(' ', mid);
        if (e - ind >= 16 && s >= 200 && cut != std::string::npos && cut + 4 < e) {
          good.emplace_back(s, cut);
        }
        s = e + 1;
      }
      if (size_t(round) >= good.size()) continue;
      any = true;
      const auto [s, cut] = good[(good.size() / 2 + size_t(round) * 7) % good.size()];
      const size_t e = d.text.find('\n', s);
      const size_t from = cut > 600 ? cut - 600 : 0;
      tasks.push_back({d.text.substr(from, cut - from), d.text.substr(cut, e - cut)});
    }
    if (!any) break;
  }
  return tasks;
}

}  // namespace

std::vector<EvalDocument> read_eval_documents(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("eval data: '" + dir + "' is not a directory");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  if (ec) throw Error("eval data: cannot list '" + dir + "': " + ec.message());
  std::sort(files.begin(), files.end());
  std::vector<EvalDocument> docs;
  for (const auto& p : files) {
    docs.push_back(
        {p.filename().string(), util::read_file_bounded(p.string(), 1 * util::kGiB, "eval data")});
  }
  if (docs.empty()) throw Error("eval data: no documents in '" + dir + "'");
  return docs;
}

std::vector<EvalRow> evaluate_tokens(const Model& model,
                                     const std::vector<std::vector<int32_t>>& docs_in,
                                     const EvalOptions& o) {
  if (o.policies.empty() || o.batches.empty()) throw Error("eval: no policy or batch size");
  for (int b : o.batches) {
    if (b < 1) throw Error("eval: batch sizes must be >= 1");
  }
  if (o.max_tokens < 2) throw Error("eval: max_tokens must be >= 2");
  if (o.max_docs < 0) throw Error("eval: max_docs must be >= 0 (0 = all)");
  if (o.prefix < 0) throw Error("eval: prefix must be >= 0");
  std::vector<std::vector<int32_t>> docs;
  for (const auto& d : docs_in) {
    if (o.max_docs > 0 && int(docs.size()) >= o.max_docs) break;
    docs.emplace_back(d.begin(), d.begin() + std::min<long>(long(d.size()), o.max_tokens));
  }
  size_t n_tok = 0;
  for (const auto& d : docs) n_tok += d.size();
  const double bytes = double(n_tok) * model.config().n_vocab * 4.0;
  if (bytes > 4e9) {
    throw Error("eval: the exact baseline's log-probabilities would take " +
                std::to_string(int(bytes / 1e9)) + " GB; lower --max-tokens or --max-docs");
  }
  // Exact routing is batch-invariant, so one run at the largest batch is the baseline for all.
  std::vector<std::vector<float>> exact_lp;
  const int bmax = *std::max_element(o.batches.begin(), o.batches.end());
  ForcedRun exact = forced_run(model, docs, o, "topk", bmax, exact_lp, true, "topk (baseline)");
  std::vector<EvalRow> rows;
  for (int B : o.batches) {
    for (const auto& p : o.policies) {
      const bool is_topk = p == "topk";
      ForcedRun r = is_topk && B == bmax ? exact
                                         : forced_run(model, docs, o, p, B, exact_lp, false,
                                                      p + " B=" + std::to_string(B));
      rows.push_back(make_row(p, B, r, exact, is_topk));
    }
  }
  return rows;
}

std::vector<EvalRow> evaluate(const Model& model, const Tokenizer& tok,
                              const std::vector<EvalDocument>& docs, const EvalOptions& o) {
  std::vector<std::vector<int32_t>> ids;
  for (const auto& d : docs) ids.push_back(tok.encode(d.text, tok.add_bos(), false));
  std::vector<EvalRow> rows = evaluate_tokens(model, ids, o);
  if (o.gen_prompts <= 0 && o.code_lines <= 0) return rows;

  std::vector<int32_t> stop;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_eog(id)) stop.push_back(id);
  }
  // Greedy continuation agreement with exact routing.
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& d : ids) {
    if (int(prompts.size()) >= o.gen_prompts) break;
    if (int(d.size()) >= o.gen_prompt_tokens) {
      prompts.emplace_back(d.begin(), d.begin() + o.gen_prompt_tokens);
    }
  }
  const auto tasks = code_line_tasks(docs, o.code_lines);
  std::vector<std::vector<int32_t>> line_prompts;
  for (const auto& t : tasks) line_prompts.push_back(tok.encode(t.prompt, tok.add_bos(), false));
  const int line_gen = 48;
  const int bmax = *std::max_element(o.batches.begin(), o.batches.end());
  const auto exact_gen = greedy_runs(model, prompts, o.gen_tokens, "topk", bmax, o, {});
  size_t done = 0;
  for (EvalRow& row : rows) {
    if (o.progress) o.progress("generation", done++, rows.size());
    if (!prompts.empty()) {
      const auto g = row.policy == "topk"
                         ? exact_gen
                         : greedy_runs(model, prompts, o.gen_tokens, row.policy, row.batch, o, {});
      int64_t same = 0, total = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        for (size_t j = 0; j < exact_gen[i].size(); ++j) {
          same += j < g[i].size() && g[i][j] == exact_gen[i][j];
          ++total;
        }
      }
      row.gen_agreement = total ? double(same) / double(total) : -1;
    }
    if (!tasks.empty()) {
      const auto g =
          greedy_runs(model, line_prompts, line_gen, row.policy, row.batch, o, stop, &tok);
      int64_t hits = 0;
      for (size_t i = 0; i < tasks.size(); ++i) {
        std::string text = tok.decode(g[i]);
        const size_t nl = text.find('\n');
        if (nl != std::string::npos) text.resize(nl);
        hits += text == tasks[i].target;
      }
      row.code_exact_match = double(hits) / double(tasks.size());
    }
  }
  if (o.progress) o.progress("generation", rows.size(), rows.size());
  return rows;
}

}  // namespace lynx
