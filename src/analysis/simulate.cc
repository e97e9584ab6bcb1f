#include "analysis/simulate.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>

#include <nlohmann/json.hpp>

#include "analysis/trace.h"

namespace lynx::analysis {

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

namespace {

// What simulate_routing and simulate_ep share: the gating (from the trace or the config),
// the trace's rows, and the policies, all checked before any work.
struct SimSetup {
  std::unique_ptr<TracePool> trace;
  GatingConfig g;
  std::vector<std::unique_ptr<RoutingPolicy>> policies;
};

SimSetup sim_setup(const SimConfig& cfg, const std::vector<std::string>& specs) {
  if (specs.empty()) throw Error("route-sim: no routing policy given");
  if (cfg.steps < 1) throw Error("route-sim: steps must be >= 1");
  if (cfg.batches.empty()) throw Error("route-sim: no batch size given");
  for (int b : cfg.batches) {
    if (b < 1 || b > (1 << 16))
      throw Error("route-sim: batch size " + std::to_string(b) + " is out of range [1, 65536]");
  }
  SimSetup s;
  s.g = cfg.gating;
  if (!cfg.trace_path.empty()) {
    s.trace = std::make_unique<TracePool>(load_trace(cfg.trace_path));
    s.g = s.trace->h.gating();
  }
  const GatingConfig& g = s.g;
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
  for (const auto& sp : specs) s.policies.push_back(make_routing_policy(sp, g));
  return s;
}

// The logits of every step for one batch size. Seeded per batch size, so a batch's logits do
// not depend on the other sizes listed. With calib_tokens > 0 and synthetic logits, `calib`
// then gets that many more tokens from the same distribution (same topics / popularity), for
// a placement computed on other tokens than the ones it is evaluated on.
void draw_logits(const SimConfig& cfg, const SimSetup& s, int batch, std::vector<float>& logits,
                 std::vector<int>& step_layer, int calib_tokens = 0,
                 std::vector<float>* calib = nullptr) {
  const int n = s.g.n_expert;
  const uint64_t seed = cfg.seed * 1000003ull + uint64_t(batch);
  logits.resize(size_t(cfg.steps) * batch * n);
  step_layer.assign(size_t(cfg.steps), 0);
  if (s.trace) {
    std::mt19937_64 rng(seed);
    sample_trace(*s.trace, batch, cfg.steps, rng, logits, step_layer);
  } else {
    SynthLogits synth(cfg.dist, n, seed);
    synth.fill(cfg.steps * batch, logits.data());
    if (calib && calib_tokens > 0) {
      calib->resize(size_t(calib_tokens) * n);
      synth.fill(calib_tokens, calib->data());
    }
  }
}

}  // namespace

std::vector<SimRow> simulate_routing(const SimConfig& cfg, const std::vector<std::string>& specs) {
  SimSetup setup = sim_setup(cfg, specs);
  const GatingConfig& g = setup.g;
  const int n = g.n_expert, k = g.n_expert_used;
  std::vector<SimRow> rows;
  std::vector<float> logits, weights;
  std::vector<int32_t> ids;
  std::vector<int> step_layer;
  RoutingStatsAccumulator acc;
  for (int batch : cfg.batches) {
    draw_logits(cfg, setup, batch, logits, step_layer);
    ids.resize(size_t(cfg.steps) * batch * k);
    weights.resize(ids.size());
    for (auto& pol : setup.policies) {
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

std::vector<EpRow> simulate_ep(const SimConfig& cfg, const std::vector<std::string>& specs,
                               const EpConfig& ep) {
  SimSetup setup = sim_setup(cfg, specs);
  const GatingConfig& g = setup.g;
  const int n = g.n_expert, k = g.n_expert_used;
  if (ep.ranks.empty()) throw Error("route-sim: no rank count given");
  for (int r : ep.ranks) expert_slices(n, r);  // throws for a rank count that does not fit
  if (!ep.contiguous && !ep.balanced && ep.given.empty()) {
    throw Error("route-sim: no placement selected");
  }
  for (const Placement& p : ep.given) {
    validate_placement(p);
    if (p.experts != n) {
      throw Error("route-sim: a placement file places " + std::to_string(p.experts) +
                  " experts, the routing has " + std::to_string(n));
    }
    if (std::find(ep.ranks.begin(), ep.ranks.end(), p.ranks) == ep.ranks.end()) {
      throw Error("route-sim: a placement file is for " + std::to_string(p.ranks) +
                  " ranks, which the rank list does not hold");
    }
  }
  const int n_layers = setup.trace ? setup.trace->h.n_layers : 1;

  // Load per layer for the balanced placement: the whole trace (the placement a deployment
  // would compute from it), or synthetic tokens drawn after the evaluated ones.
  ExpertLoad trace_load;
  if (setup.trace && ep.balanced) {
    trace_load.n_expert = n;
    trace_load.count.resize(size_t(n_layers));
    trace_load.coact.resize(size_t(n_layers));
    for (int l = 0; l < n_layers; ++l) {
      const auto& rows = setup.trace->rows[size_t(l)];
      add_expert_load(g, rows.data(), int(rows.size() / size_t(n)), trace_load.count[size_t(l)],
                      trace_load.coact[size_t(l)]);
    }
  }

  std::vector<EpRow> out;
  std::vector<float> logits, weights, calib;
  std::vector<int32_t> ids;
  std::vector<int> step_layer;
  EpStep st;
  for (int batch : cfg.batches) {
    draw_logits(cfg, setup, batch, logits, step_layer, ep.balanced ? ep.calib_tokens : 0, &calib);
    const ExpertLoad* load = &trace_load;
    ExpertLoad synth_load;
    if (!setup.trace && ep.balanced) {
      synth_load.n_expert = n;
      synth_load.count.resize(1);
      synth_load.coact.resize(1);
      add_expert_load(g, calib.data(), int(calib.size() / size_t(n)), synth_load.count[0],
                      synth_load.coact[0]);
      load = &synth_load;
    }
    ids.resize(size_t(cfg.steps) * batch * k);
    weights.resize(ids.size());
    for (auto& pol : setup.policies) {
      for (int s = 0; s < cfg.steps; ++s) {
        RoutingInput in;
        in.logits = &logits[size_t(s) * batch * n];
        in.n_tokens = batch;
        in.layer = step_layer[size_t(s)];
        in.gating = &g;
        RoutingOutput o{&ids[size_t(s) * batch * k], &weights[size_t(s) * batch * k]};
        pol->route(in, o);
      }
      for (int R : ep.ranks) {
        EpStepCounter counter(n, R);
        std::vector<std::pair<std::string, Placement>> placements;
        if (R == 1) {  // one rank holds everything: the placement does not matter
          placements.emplace_back("contiguous", contiguous_placement(n_layers, n, R));
        } else if (counter.slices() > 1) {
          placements.emplace_back("sliced", Placement{R, n, {}});
        } else {
          if (ep.contiguous) {
            placements.emplace_back("contiguous", contiguous_placement(n_layers, n, R));
          }
          if (ep.balanced)
            placements.emplace_back("balanced", balanced_placement(*load, R, ep.balance));
        }
        for (const Placement& p : ep.given) {
          if (p.ranks == R && counter.slices() == 1) placements.emplace_back("file", p);
        }
        for (const auto& [name, pl] : placements) {
          EpAccum acc;
          static const std::vector<int> kSliced;
          for (int s = 0; s < cfg.steps; ++s) {
            const auto& rank_of = pl.layers.empty()
                                      ? kSliced
                                      : pl.layers[size_t(step_layer[size_t(s)]) % pl.layers.size()];
            counter.count(&ids[size_t(s) * batch * k], &weights[size_t(s) * batch * k], batch, k,
                          rank_of, st);
            acc.add(st, counter.slices(), ep.shape, ep.cost);
          }
          EpRow row;
          row.spec = pol->spec();
          row.placement = name;
          row.n_expert = n;
          row.k = k;
          row.batch = batch;
          row.ranks = R;
          row.slices = counter.slices();
          row.calls = acc.calls;
          row.pred = predict(acc, R, counter.slices(), batch, ep.shape, ep.cost);
          out.push_back(std::move(row));
        }
      }
    }
  }
  return out;
}

namespace {

// A figure as the text tables print it (printf's "%.<digits>f", or "%.<digits>g" when
// `general`), read back: the JSON number is the value the tables show, written by nlohmann in
// its shortest form.
double shown(double x, int digits, bool general = false) {
  char buf[512];
  const auto fmt = general ? std::chars_format::general : std::chars_format::fixed;
  const auto end = std::to_chars(buf, buf + sizeof buf, x, fmt, digits);
  if (end.ec != std::errc()) return x;
  double y = x;
  std::from_chars(buf, end.ptr, y);
  return y;
}

// A JSON array with one row object per line (as the tables: a row per line, to diff and grep).
std::string json_lines(const std::vector<nlohmann::ordered_json>& rows) {
  std::string s = "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    s += "  " + rows[i].dump();
    s += i + 1 < rows.size() ? ",\n" : "\n";
  }
  return s + "]\n";
}

void check_format(const std::string& format) {
  if (format != "md" && format != "csv" && format != "json") {
    throw Error("unknown output format '" + format + "' (known: md, csv, json)");
  }
}

}  // namespace

std::string format_sim_rows(const std::vector<SimRow>& rows, const std::string& format) {
  check_format(format);
  if (format == "json") {
    std::vector<nlohmann::ordered_json> out;
    for (const SimRow& r : rows) {
      const RoutingStats& st = r.stats;
      out.push_back({{"policy", r.spec},
                     {"n_expert", r.n_expert},
                     {"k", r.k},
                     {"batch", r.batch},
                     {"steps", st.steps},
                     {"distinct", shown(st.mean_distinct_policy(), 4)},
                     {"distinct_exact", shown(st.mean_distinct_exact(), 4)},
                     {"ratio", shown(st.ratio_distinct(), 5)},
                     {"mass_kept", shown(st.mean_mass_kept(), 5)},
                     {"frac_changed", shown(st.frac_changed(), 5)},
                     {"top1_kept", shown(st.frac_top1_kept(), 5)},
                     {"tokens_per_expert", shown(st.tokens_per_expert(), 4)},
                     {"us_per_call", shown(r.us_per_call, 3)}});
    }
    return json_lines(out);
  }
  std::string s;
  char buf[512];
  if (format == "md") {
    s += "| policy | N | k | B | distinct | distinct exact | ratio | mass kept | changed | "
         "top-1 kept | tok/expert | us/call |\n";
    s += "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  } else {
    s += "policy,n_expert,k,batch,distinct,distinct_exact,ratio,mass_kept,frac_changed,"
         "top1_kept,tokens_per_expert,us_per_call\n";
  }
  for (const SimRow& r : rows) {
    const RoutingStats& st = r.stats;
    if (format == "md") {
      std::snprintf(buf, sizeof buf,
                    "| %s | %d | %d | %d | %.2f | %.2f | %.3f | %.4f | %.4f | %.4f | %.2f | "
                    "%.2f |\n",
                    r.spec.c_str(), r.n_expert, r.k, r.batch, st.mean_distinct_policy(),
                    st.mean_distinct_exact(), st.ratio_distinct(), st.mean_mass_kept(),
                    st.frac_changed(), st.frac_top1_kept(), st.tokens_per_expert(), r.us_per_call);
    } else {
      // Specs contain commas: quote them (RFC 4180).
      std::snprintf(buf, sizeof buf, "\"%s\",%d,%d,%d,%.4f,%.4f,%.5f,%.5f,%.5f,%.5f,%.4f,%.3f\n",
                    r.spec.c_str(), r.n_expert, r.k, r.batch, st.mean_distinct_policy(),
                    st.mean_distinct_exact(), st.ratio_distinct(), st.mean_mass_kept(),
                    st.frac_changed(), st.frac_top1_kept(), st.tokens_per_expert(), r.us_per_call);
    }
    s += buf;
  }
  return s;
}

std::string format_ep_rows(const std::vector<EpRow>& rows, const std::string& format) {
  check_format(format);
  if (format == "json") {
    std::vector<nlohmann::ordered_json> out;
    for (const EpRow& r : rows) {
      const EpPrediction& p = r.pred;
      out.push_back({{"policy", r.spec},
                     {"n_expert", r.n_expert},
                     {"k", r.k},
                     {"batch", r.batch},
                     {"ranks", r.ranks},
                     {"placement", r.placement},
                     {"slices", r.slices},
                     {"calls", r.calls},
                     {"experts_max", shown(p.experts_max, 4)},
                     {"experts_mean", shown(p.experts_mean, 4)},
                     {"imbalance", shown(p.imbalance, 5)},
                     {"tokens_max", shown(p.tokens_max, 4)},
                     {"tokens_mean", shown(p.tokens_mean, 4)},
                     {"stream_bytes_max", shown(p.stream_bytes_max, 6, true)},
                     {"stream_bytes_mean", shown(p.stream_bytes_mean, 6, true)},
                     {"allreduce_bytes", shown(p.allreduce_bytes, 6, true)},
                     {"a2a_bytes_max", shown(p.a2a_bytes_max, 6, true)},
                     {"expert_ms", shown(p.expert_ms, 5)},
                     {"allreduce_ms", shown(p.allreduce_ms, 5)},
                     {"a2a_ms", shown(p.a2a_ms, 5)},
                     {"dense_ms", shown(p.dense_ms, 5)},
                     {"tpot_allreduce_ms", shown(p.tpot_allreduce_ms, 5)},
                     {"tpot_a2a_ms", shown(p.tpot_a2a_ms, 5)}});
    }
    return json_lines(out);
  }
  std::string s;
  char buf[1024];
  if (format == "md") {
    s += "| policy | B | R | placement | experts/rank max | mean | imbalance | tokens/rank max | "
         "stream MB/rank max | all-reduce MB/rank | all-to-all MB/rank max | expert ms | "
         "TPOT all-reduce ms | TPOT all-to-all ms |\n";
    s += "|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  } else {
    s += "policy,n_expert,k,batch,ranks,placement,slices,experts_max,experts_mean,imbalance,"
         "tokens_max,tokens_mean,stream_bytes_max,stream_bytes_mean,allreduce_bytes,"
         "a2a_bytes_max,expert_ms,allreduce_ms,a2a_ms,dense_ms,tpot_allreduce_ms,tpot_a2a_ms\n";
  }
  for (const EpRow& r : rows) {
    const EpPrediction& p = r.pred;
    if (format == "md") {
      std::snprintf(buf, sizeof buf,
                    "| %s | %d | %d | %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f | %.3f | "
                    "%.3f | %.3f | %.3f |\n",
                    r.spec.c_str(), r.batch, r.ranks, r.placement.c_str(), p.experts_max,
                    p.experts_mean, p.imbalance, p.tokens_max, p.stream_bytes_max / 1e6,
                    p.allreduce_bytes / 1e6, p.a2a_bytes_max / 1e6, p.expert_ms,
                    p.tpot_allreduce_ms, p.tpot_a2a_ms);
    } else {
      std::snprintf(buf, sizeof buf,
                    "\"%s\",%d,%d,%d,%d,%s,%d,%.4f,%.4f,%.5f,%.4f,%.4f,%.6g,%.6g,%.6g,%.6g,%.5f,"
                    "%.5f,%.5f,%.5f,%.5f,%.5f\n",
                    r.spec.c_str(), r.n_expert, r.k, r.batch, r.ranks, r.placement.c_str(),
                    r.slices, p.experts_max, p.experts_mean, p.imbalance, p.tokens_max,
                    p.tokens_mean, p.stream_bytes_max, p.stream_bytes_mean, p.allreduce_bytes,
                    p.a2a_bytes_max, p.expert_ms, p.allreduce_ms, p.a2a_ms, p.dense_ms,
                    p.tpot_allreduce_ms, p.tpot_a2a_ms);
    }
    s += buf;
  }
  return s;
}

namespace {

// One CSV line into fields (RFC 4180 quotes: "a,b" and "" inside quotes).
std::vector<std::string> csv_fields(const std::string& line, bool& ok) {
  std::vector<std::string> f(1);
  bool quoted = false;
  ok = true;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        f.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        f.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      f.emplace_back();
    } else if (c != '\r') {
      f.back() += c;
    }
  }
  if (quoted) ok = false;
  for (auto& x : f) {
    const size_t a = x.find_first_not_of(" \t"), b = x.find_last_not_of(" \t");
    x = a == std::string::npos ? "" : x.substr(a, b - a + 1);
  }
  return f;
}

}  // namespace

std::vector<MeasuredRow> parse_measured_csv(const std::string& text, const std::string& what) {
  std::vector<MeasuredRow> rows;
  std::vector<std::string> head;
  int col[6] = {-1, -1, -1, -1, -1, -1};  // policy batch ranks tpot_ms scheme placement
  const char* names[6] = {"policy", "batch", "ranks", "tpot_ms", "scheme", "placement"};
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string where = what + " line " + std::to_string(line_no);
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    bool ok = true;
    auto f = csv_fields(line, ok);
    if (!ok) throw Error(where + ": unterminated quote");
    if (head.empty()) {
      head = f;
      for (size_t i = 0; i < f.size(); ++i) {
        for (int c = 0; c < 6; ++c) {
          if (f[i] == names[c]) col[c] = int(i);
        }
      }
      for (int c = 0; c < 4; ++c) {
        if (col[c] < 0) throw Error(where + ": header lacks the column '" + names[c] + "'");
      }
      continue;
    }
    if (f.size() != head.size()) {
      throw Error(where + ": " + std::to_string(f.size()) + " fields, the header has " +
                  std::to_string(head.size()));
    }
    MeasuredRow m;
    try {
      m.spec = make_routing_policy(f[size_t(col[0])])->spec();
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    auto num = [&](int c, double lo, double hi) {
      const std::string& v = f[size_t(col[c])];
      char* endp = nullptr;
      const double x = std::strtod(v.c_str(), &endp);
      if (v.empty() || *endp != '\0' || !(x >= lo && x <= hi)) {
        throw Error(where + ": " + names[c] + " '" + v + "' is not a number in [" +
                    std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
      return x;
    };
    m.batch = int(num(1, 1, 1 << 16));
    m.ranks = int(num(2, 1, 1 << 16));
    if (m.batch != num(1, 1, 1 << 16) || m.ranks != num(2, 1, 1 << 16)) {
      throw Error(where + ": batch and ranks must be integers");
    }
    m.tpot_ms = num(3, 1e-9, 1e9);
    if (col[4] >= 0) m.scheme = f[size_t(col[4])];
    if (m.scheme != "allreduce" && m.scheme != "alltoall") {
      throw Error(where + ": scheme must be allreduce or alltoall, got '" + m.scheme + "'");
    }
    if (col[5] >= 0) m.placement = f[size_t(col[5])];
    if (m.placement != "contiguous" && m.placement != "balanced") {
      throw Error(where + ": placement must be contiguous or balanced, got '" + m.placement + "'");
    }
    rows.push_back(std::move(m));
  }
  if (rows.empty()) throw Error(what + ": no measured rows");
  return rows;
}

std::string format_comparison(const std::vector<MeasuredRow>& measured,
                              const std::vector<EpRow>& predicted, const std::string& format) {
  check_format(format);
  std::string s;
  std::vector<nlohmann::ordered_json> json;
  char buf[512];
  if (format == "md") {
    s += "| policy | B | R | placement | scheme | measured ms | predicted ms | predicted / "
         "measured |\n|---|--:|--:|---|---|--:|--:|--:|\n";
  } else if (format == "csv") {
    s += "policy,batch,ranks,placement,scheme,measured_ms,predicted_ms,ratio\n";
  }
  for (const MeasuredRow& m : measured) {
    double pred = -1;
    for (const EpRow& r : predicted) {
      // R = 1 and sliced ranks have a single placement; otherwise match it by name.
      const bool place_ok = r.placement == m.placement || r.placement == "sliced" || r.ranks == 1;
      if (r.spec == m.spec && r.batch == m.batch && r.ranks == m.ranks && place_ok) {
        pred = m.scheme == "alltoall" ? r.pred.tpot_a2a_ms : r.pred.tpot_allreduce_ms;
        break;
      }
    }
    if (format == "json") {
      // A measured row without a simulated twin: null prediction and ratio.
      json.push_back(
          {{"policy", m.spec},
           {"batch", m.batch},
           {"ranks", m.ranks},
           {"placement", m.placement},
           {"scheme", m.scheme},
           {"measured_ms", shown(m.tpot_ms, 4)},
           {"predicted_ms", pred >= 0 ? nlohmann::ordered_json(shown(pred, 3)) : nullptr},
           {"ratio", pred >= 0 ? nlohmann::ordered_json(shown(pred / m.tpot_ms, 3)) : nullptr}});
      continue;
    }
    char p[32] = "-", q[32] = "-";
    if (pred >= 0) {
      std::snprintf(p, sizeof p, "%.3f", pred);
      std::snprintf(q, sizeof q, "%.3f", pred / m.tpot_ms);
    }
    if (format == "md") {
      std::snprintf(buf, sizeof buf, "| %s | %d | %d | %s | %s | %.3f | %s | %s |\n",
                    m.spec.c_str(), m.batch, m.ranks, m.placement.c_str(), m.scheme.c_str(),
                    m.tpot_ms, p, q);
    } else {
      std::snprintf(buf, sizeof buf, "\"%s\",%d,%d,%s,%s,%.4f,%s,%s\n", m.spec.c_str(), m.batch,
                    m.ranks, m.placement.c_str(), m.scheme.c_str(), m.tpot_ms, pred >= 0 ? p : "",
                    pred >= 0 ? q : "");
    }
    s += buf;
  }
  return format == "json" ? json_lines(json) : s;
}

}  // namespace lynx::analysis
