#include "routing/simulate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>

#include "routing/trace.h"

namespace lynx::routing {

SynthLogits::SynthLogits(const SynthDist& d, int n_expert, uint64_t seed)
    : d_(d), n_(n_expert), rng_(seed) {
  if (d_.name != "gauss" && d_.name != "zipf" && d_.name != "topic") {
    throw Error("unknown logit distribution '" + d_.name + "' (known: gauss, zipf, topic)");
  }
  if (!(d_.noise_std >= 0) || !(d_.topic_std >= 0) || !(d_.zipf_s >= 0) || d_.n_topics < 1) {
    throw Error("logit distribution '" + d_.name + "': std, zipf s must be >= 0, topics >= 1");
  }
  if (d_.name == "zipf") {
    std::vector<int> rank(n_);
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng_);
    bias_.resize(n_);
    for (int e = 0; e < n_; ++e) bias_[e] = -d_.zipf_s * std::log(1.f + float(rank[e]));
  } else if (d_.name == "topic") {
    topics_.resize(size_t(d_.n_topics) * n_);
    for (float& v : topics_) v = d_.topic_std * normal_(rng_);
  }
}

void SynthLogits::fill(int n_tokens, float* z) {
  std::uniform_int_distribution<int> topic(0, d_.n_topics - 1);
  for (int t = 0; t < n_tokens; ++t) {
    float* row = z + size_t(t) * n_;
    const float* base = nullptr;
    if (d_.name == "zipf") base = bias_.data();
    if (d_.name == "topic") base = &topics_[size_t(topic(rng_)) * n_];
    for (int e = 0; e < n_; ++e) row[e] = (base ? base[e] : 0.f) + d_.noise_std * normal_(rng_);
  }
}

namespace {

// Token rows of a routing trace, pooled per layer. A simulated batch of B draws B rows of one
// layer at random (without replacement when the pool allows), i.e. tokens from different
// places of the recorded text decoding together, as several requests would.
struct TracePool {
  TraceHeader h;
  std::vector<std::vector<float>> rows;  // per layer: [n_rows x N]
};

TracePool load_trace(const std::string& path) {
  TraceReader r(path);
  TracePool p;
  p.h = r.header();
  p.rows.resize(p.h.n_layers);
  TraceRecord rec;
  while (r.next(rec)) {
    auto& dst = p.rows[rec.layer];
    dst.insert(dst.end(), rec.logits.begin(), rec.logits.end());
  }
  bool any = false;
  for (const auto& l : p.rows) any |= !l.empty();
  if (!any) throw Error("routing trace '" + path + "' holds no token rows");
  return p;
}

void sample_trace(const TracePool& p, int batch, int steps, std::mt19937_64& rng,
                  std::vector<float>& out, std::vector<int>& step_layer) {
  const int n = p.h.n_expert;
  std::vector<int> layers;
  for (int l = 0; l < p.h.n_layers; ++l) {
    if (!p.rows[l].empty()) layers.push_back(l);
  }
  std::vector<std::vector<int>> perm(p.h.n_layers);
  for (int s = 0; s < steps; ++s) {
    const int l = layers[size_t(s) % layers.size()];
    step_layer[size_t(s)] = l;  // layer-dependent policies (lynx window=) see the real layer
    const int n_rows = int(p.rows[l].size() / n);
    auto& idx = perm[l];
    if (idx.empty()) {
      idx.resize(n_rows);
      std::iota(idx.begin(), idx.end(), 0);
    }
    for (int b = 0; b < batch; ++b) {
      int row;
      if (batch <= n_rows) {  // partial Fisher-Yates: a uniform subset, no reset needed
        std::uniform_int_distribution<int> pick(b, n_rows - 1);
        std::swap(idx[b], idx[pick(rng)]);
        row = idx[b];
      } else {
        row = std::uniform_int_distribution<int>(0, n_rows - 1)(rng);
      }
      std::copy_n(&p.rows[l][size_t(row) * n], n, &out[(size_t(s) * batch + b) * n]);
    }
  }
}

}  // namespace

std::vector<SimRow> simulate_routing(const SimConfig& cfg, const std::vector<std::string>& specs) {
  if (specs.empty()) throw Error("route-sim: no routing policy given");
  if (cfg.steps < 1) throw Error("route-sim: steps must be >= 1");
  if (cfg.batches.empty()) throw Error("route-sim: no batch size given");
  for (int b : cfg.batches) {
    if (b < 1 || b > (1 << 16))
      throw Error("route-sim: batch size " + std::to_string(b) + " is out of range [1, 65536]");
  }
  std::unique_ptr<TracePool> trace;
  GatingConfig g = cfg.gating;
  if (!cfg.trace_path.empty()) {
    trace = std::make_unique<TracePool>(load_trace(cfg.trace_path));
    g = trace->h.gating();
  }
  if (g.n_expert < 1 || g.n_expert_used < 1 || g.n_expert_used > g.n_expert) {
    throw Error("route-sim: need 1 <= k <= N, got k = " + std::to_string(g.n_expert_used) +
                ", N = " + std::to_string(g.n_expert));
  }
  // All steps' logits are drawn up front: bound them (1 GiB of floats) rather than fail an
  // allocation or overflow the int token count.
  for (int b : cfg.batches) {
    if (double(cfg.steps) * b * g.n_expert > double(1 << 28)) {
      throw Error("route-sim: steps x batch x experts = " + std::to_string(cfg.steps) + " x " +
                  std::to_string(b) + " x " + std::to_string(g.n_expert) +
                  " is over 2^28 logits; lower --steps");
    }
  }
  std::vector<std::unique_ptr<RoutingPolicy>> policies;
  for (const auto& s : specs) policies.push_back(make_routing_policy(s, g));

  const int n = g.n_expert, k = g.n_expert_used;
  std::vector<SimRow> rows;
  std::vector<float> logits, weights;
  std::vector<int32_t> ids;
  std::vector<int> step_layer;
  RoutingStatsAccumulator acc;
  for (int batch : cfg.batches) {
    // Seeded per batch size, so a batch's logits do not depend on the other sizes listed.
    const uint64_t seed = cfg.seed * 1000003ull + uint64_t(batch);
    logits.resize(size_t(cfg.steps) * batch * n);
    step_layer.assign(size_t(cfg.steps), 0);
    if (trace) {
      std::mt19937_64 rng(seed);
      sample_trace(*trace, batch, cfg.steps, rng, logits, step_layer);
    } else {
      SynthLogits synth(cfg.dist, n, seed);
      synth.fill(cfg.steps * batch, logits.data());
    }
    ids.resize(size_t(cfg.steps) * batch * k);
    weights.resize(ids.size());
    for (auto& pol : policies) {
      auto step_io = [&](int s, RoutingInput& in, RoutingOutput& out) {
        in.logits = &logits[size_t(s) * batch * n];
        in.n_tokens = batch;
        in.layer = step_layer[size_t(s)];
        in.gating = &g;
        out.ids = &ids[size_t(s) * batch * k];
        out.weights = &weights[size_t(s) * batch * k];
      };
      RoutingInput in;
      RoutingOutput out;
      step_io(0, in, out);
      pol->route(in, out);  // warm-up: scratch buffers reach their steady size
      double best_us = 1e300;
      for (int rep = 0; rep < std::max(1, cfg.repeats); ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int s = 0; s < cfg.steps; ++s) {
          step_io(s, in, out);
          pol->route(in, out);
        }
        const auto t1 = std::chrono::steady_clock::now();
        best_us = std::min(best_us, std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      SimRow row;
      row.spec = pol->spec();
      row.n_expert = n;
      row.k = k;
      row.batch = batch;
      row.us_per_call = best_us / cfg.steps;
      for (int s = 0; s < cfg.steps; ++s) {
        step_io(s, in, out);
        acc.add(in, out, row.stats);
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::string format_sim_rows(const std::vector<SimRow>& rows, const std::string& format) {
  std::string s;
  char buf[512];
  if (format == "md") {
    s += "| policy | N | k | B | distinct | distinct exact | ratio | mass kept | changed | "
         "top-1 kept | tok/expert | us/call |\n";
    s += "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  } else if (format == "csv") {
    s += "policy,n_expert,k,batch,distinct,distinct_exact,ratio,mass_kept,frac_changed,"
         "top1_kept,tokens_per_expert,us_per_call\n";
  } else if (format == "json") {
    s += "[\n";
  } else {
    throw Error("unknown output format '" + format + "' (known: md, csv, json)");
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const SimRow& r = rows[i];
    const RoutingStats& st = r.stats;
    if (format == "md") {
      std::snprintf(buf, sizeof buf,
                    "| %s | %d | %d | %d | %.2f | %.2f | %.3f | %.4f | %.4f | %.4f | %.2f | "
                    "%.2f |\n",
                    r.spec.c_str(), r.n_expert, r.k, r.batch, st.mean_distinct_policy(),
                    st.mean_distinct_exact(), st.ratio_distinct(), st.mean_mass_kept(),
                    st.frac_changed(), st.frac_top1_kept(), st.tokens_per_expert(), r.us_per_call);
    } else if (format == "csv") {
      // Specs contain commas: quote them (RFC 4180).
      std::snprintf(buf, sizeof buf, "\"%s\",%d,%d,%d,%.4f,%.4f,%.5f,%.5f,%.5f,%.5f,%.4f,%.3f\n",
                    r.spec.c_str(), r.n_expert, r.k, r.batch, st.mean_distinct_policy(),
                    st.mean_distinct_exact(), st.ratio_distinct(), st.mean_mass_kept(),
                    st.frac_changed(), st.frac_top1_kept(), st.tokens_per_expert(), r.us_per_call);
    } else {
      // Canonical specs hold only [a-z0-9.:=,-], nothing JSON needs to escape.
      std::snprintf(buf, sizeof buf,
                    "  {\"policy\": \"%s\", \"n_expert\": %d, \"k\": %d, \"batch\": %d, "
                    "\"steps\": %lld, \"distinct\": %.4f, \"distinct_exact\": %.4f, "
                    "\"ratio\": %.5f, \"mass_kept\": %.5f, \"frac_changed\": %.5f, "
                    "\"top1_kept\": %.5f, \"tokens_per_expert\": %.4f, \"us_per_call\": %.3f}%s\n",
                    r.spec.c_str(), r.n_expert, r.k, r.batch, (long long)st.steps,
                    st.mean_distinct_policy(), st.mean_distinct_exact(), st.ratio_distinct(),
                    st.mean_mass_kept(), st.frac_changed(), st.frac_top1_kept(),
                    st.tokens_per_expert(), r.us_per_call, i + 1 < rows.size() ? "," : "");
    }
    s += buf;
  }
  if (format == "json") s += "]\n";
  return s;
}

}  // namespace lynx::routing
