// Prometheus text rendering of the server metrics (see metrics.h).
#include "server/metrics.h"

#include <cmath>
#include <cstdio>
#include <initializer_list>

namespace lynx::server {
namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += ' ';
  out += num(v);
  out += '\n';
}

// Latency buckets from 1 ms to 60 s: CPU decode steps of small models take a millisecond,
// time to first token under load can take many seconds.
std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15,
          0.2,   0.3,    0.5,   0.75,   1.0,  1.5,   2.5,  5.0,  10.0, 20.0,  60.0};
}
std::vector<double> size_bounds() {
  return {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name) const {
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += counts_[i];
    const double le = i < bounds_.size() ? bounds_[i] : INFINITY;
    sample(out, name + "_bucket", "le=\"" + num(le) + "\"", double(acc));
  }
  sample(out, name + "_sum", "", sum_);
  sample(out, name + "_count", "", double(count_));
}

Metrics::Metrics()
    : ttft_(latency_bounds()),
      tpot_(latency_bounds()),
      e2e_(latency_bounds()),
      batch_decode_(size_bounds()),
      step_tokens_(size_bounds()),
      step_seconds_(latency_bounds()) {}

void Metrics::http_response(const std::string& endpoint, int status) {
  std::lock_guard lk(mu_);
  ++http_[{endpoint, status}];
}

void Metrics::request_finished(const std::string& reason, int prompt_tokens, int completion_tokens,
                               double e2e_seconds) {
  std::lock_guard lk(mu_);
  ++finished_[reason];
  prompt_tokens_ += uint64_t(prompt_tokens);
  generation_tokens_ += uint64_t(completion_tokens);
  e2e_.observe(e2e_seconds);
}

void Metrics::first_token(double ttft_seconds) {
  std::lock_guard lk(mu_);
  ttft_.observe(ttft_seconds);
}

void Metrics::inter_token(double seconds) {
  std::lock_guard lk(mu_);
  tpot_.observe(seconds);
}

void Metrics::step(const StepStats& st, double seconds, const std::vector<RoutingStats>& routing) {
  std::lock_guard lk(mu_);
  ++steps_;
  step_tokens_.observe(st.n_tokens);
  step_seconds_.observe(seconds);
  if (st.n_decode > 0) {
    ++decode_steps_;
    batch_decode_.observe(st.n_decode);
    last_ = st;
  }
  weight_bytes_ += double(st.weight_bytes);
  expert_bytes_ += double(st.expert_bytes);
  if (expert_assignments_.size() < st.layers.size()) expert_assignments_.resize(st.layers.size());
  for (size_t l = 0; l < st.layers.size(); ++l) {
    expert_assignments_[l] += double(st.layers[l].assignments);
  }
  routing_ = routing;
}

void Metrics::set_prefix_cache(const PrefixCacheStats& s) {
  std::lock_guard lk(mu_);
  prefix_ = s;
}

void Metrics::set_queue(int64_t waiting, int64_t running) {
  std::lock_guard lk(mu_);
  waiting_ = waiting;
  running_ = running;
}

namespace {

// A metric with one unlabelled sample.
struct Scalar {
  const char* name;
  const char* type;
  const char* help;
  double value;
};

void render_scalars(std::string& o, std::initializer_list<Scalar> rows) {
  for (const Scalar& r : rows) {
    header(o, r.name, r.type, r.help);
    sample(o, r.name, "", r.value);
  }
}

}  // namespace

std::string Metrics::render(const std::string& routing_spec) const {
  std::lock_guard lk(mu_);
  std::string o;
  header(o, "lynx_info", "gauge", "Routing policy of the engine.");
  sample(o, "lynx_info", "routing=\"" + routing_spec + "\"", 1);
  render_requests(o);
  render_prefix_cache(o);
  render_steps(o);
  render_routing(o);
  return o;
}

void Metrics::render_requests(std::string& o) const {
  header(o, "lynx_http_responses_total", "counter", "HTTP responses by endpoint and status.");
  for (const auto& [k, v] : http_) {
    sample(o, "lynx_http_responses_total",
           "endpoint=\"" + k.first + "\",code=\"" + std::to_string(k.second) + "\"", double(v));
  }
  header(o, "lynx_requests_finished_total", "counter",
         "Generation requests (choices) ended, by finish reason.");
  for (const char* r : {"stop", "length", "cancelled", "error"}) {
    auto it = finished_.find(r);
    sample(o, "lynx_requests_finished_total", std::string("reason=\"") + r + "\"",
           it == finished_.end() ? 0.0 : double(it->second));
  }
  render_scalars(o, {{"lynx_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
                      double(prompt_tokens_)},
                     {"lynx_generation_tokens_total", "counter",
                      "Tokens generated by finished requests.", double(generation_tokens_)},
                     {"lynx_requests_waiting", "gauge", "Requests admitted and waiting for a slot.",
                      double(waiting_)},
                     {"lynx_requests_running", "gauge",
                      "Requests holding a slot (prefill or decode).", double(running_)}});
}

void Metrics::render_prefix_cache(std::string& o) const {
  const double ratio = prefix_.prompt_tokens > 0
                           ? double(prefix_.reused_tokens) / double(prefix_.prompt_tokens)
                           : 0.0;
  render_scalars(
      o, {{"lynx_prefix_cache_requests_total", "counter",
           "Requests admitted while the prefix cache is on.", double(prefix_.lookups)},
          {"lynx_prefix_cache_hits_total", "counter",
           "Requests admitted with a prompt prefix from the cache.", double(prefix_.hits)},
          {"lynx_prefix_cache_prompt_tokens_total", "counter",
           "Prompt tokens of the requests admitted while the prefix cache is on.",
           double(prefix_.prompt_tokens)},
          {"lynx_prefix_cache_cached_tokens_total", "counter",
           "Prompt tokens taken from the prefix cache instead of evaluated.",
           double(prefix_.reused_tokens)},
          {"lynx_prefix_cache_evictions_total", "counter",
           "Prefix cache entries freed to stay within --cache-ram.", double(prefix_.evictions)},
          {"lynx_prefix_cache_hit_ratio", "gauge",
           "Cached prompt tokens over prompt tokens, since start.", ratio},
          {"lynx_prefix_cache_entries", "gauge", "Finished sequences the prefix cache holds.",
           double(prefix_.entries)},
          {"lynx_prefix_cache_bytes", "gauge", "KV cache bytes the prefix cache holds.",
           double(prefix_.bytes)}});
}

void Metrics::render_steps(std::string& o) const {
  header(o, "lynx_time_to_first_token_seconds", "histogram",
         "From request arrival to its first generated token.");
  ttft_.render(o, "lynx_time_to_first_token_seconds");
  header(o, "lynx_time_per_output_token_seconds", "histogram",
         "Interval between consecutive tokens of a request.");
  tpot_.render(o, "lynx_time_per_output_token_seconds");
  header(o, "lynx_e2e_request_latency_seconds", "histogram",
         "From request arrival to its last token.");
  e2e_.render(o, "lynx_e2e_request_latency_seconds");
  header(o, "lynx_batch_decode_tokens", "histogram", "Decode tokens per step (batch size).");
  batch_decode_.render(o, "lynx_batch_decode_tokens");
  header(o, "lynx_step_tokens", "histogram", "Tokens per step (decode + prefill chunks).");
  step_tokens_.render(o, "lynx_step_tokens");
  header(o, "lynx_step_seconds", "histogram", "Duration of one engine step.");
  step_seconds_.render(o, "lynx_step_seconds");
  render_scalars(
      o, {{"lynx_steps_total", "counter", "Engine steps.", double(steps_)},
          {"lynx_weight_bytes_total", "counter", "Weight bytes read by all steps.", weight_bytes_},
          {"lynx_expert_bytes_total", "counter", "Expert weight bytes read by all steps.",
           expert_bytes_}});
}

void Metrics::render_routing(std::string& o) const {
  // Routing: per-layer distinct experts of the last decode step and cumulative statistics of
  // the policy against exact top-k (the figures of lynx/routing.h RoutingStats).
  header(o, "lynx_step_distinct_experts", "gauge",
         "Distinct experts activated per MoE layer in the last decode step.");
  for (size_t l = 0; l < last_.layers.size(); ++l) {
    const std::string L = "layer=\"" + std::to_string(l) + "\"";
    sample(o, "lynx_step_distinct_experts", L + ",routing=\"policy\"",
           last_.layers[l].distinct_experts);
    sample(o, "lynx_step_distinct_experts", L + ",routing=\"exact\"",
           last_.layers[l].distinct_exact);
  }
  header(o, "lynx_expert_assignments_total", "counter",
         "Token-expert assignments the routed experts computed per MoE layer (the last layer "
         "computes only the rows that return logits).");
  for (size_t l = 0; l < expert_assignments_.size(); ++l) {
    sample(o, "lynx_expert_assignments_total", "layer=\"" + std::to_string(l) + "\"",
           expert_assignments_[l]);
  }
  struct Field {
    const char* name;
    const char* help;
    double (*get)(const RoutingStats&);
  };
  const Field fields[] = {
      {"lynx_routing_steps_total", "Router invocations per MoE layer.",
       [](const RoutingStats& r) { return double(r.steps); }},
      {"lynx_routing_tokens_total", "Tokens routed per MoE layer.",
       [](const RoutingStats& r) { return double(r.tokens); }},
      {"lynx_routing_distinct_policy_total",
       "Distinct experts the policy activated, summed over steps.",
       [](const RoutingStats& r) { return double(r.distinct_policy); }},
      {"lynx_routing_distinct_exact_total",
       "Distinct experts exact top-k would have activated, summed over steps.",
       [](const RoutingStats& r) { return double(r.distinct_exact); }},
      {"lynx_routing_assignments_total", "Token-expert assignments (tokens * k).",
       [](const RoutingStats& r) { return double(r.assignments); }},
      {"lynx_routing_assignments_changed_total",
       "Exact top-k assignments the policy remapped or dropped.",
       [](const RoutingStats& r) { return double(r.assignments_changed); }},
      {"lynx_routing_top1_kept_total", "Tokens whose exact top-1 expert stayed active.",
       [](const RoutingStats& r) { return double(r.top1_kept); }},
      {"lynx_routing_mass_kept_sum",
       "Router probability mass kept relative to exact top-k, summed over tokens.",
       [](const RoutingStats& r) { return r.mass_kept; }},
  };
  for (const Field& f : fields) {
    header(o, f.name, "counter", f.help);
    for (size_t l = 0; l < routing_.size(); ++l) {
      sample(o, f.name, "layer=\"" + std::to_string(l) + "\"", f.get(routing_[l]));
    }
  }
}

}  // namespace lynx::server
