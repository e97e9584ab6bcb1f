// Server metrics in the Prometheus text exposition format (version 0.0.4).
//
// Counters and histograms are updated by the engine thread (per step, per token) and by HTTP
// handlers (per request); /metrics renders a snapshot. One mutex guards everything: updates
// are a few additions, far cheaper than a forward step, so contention does not matter.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lynx/context.h"
#include "lynx/routing.h"
#include "lynx/scheduler.h"

namespace lynx::server {

// A cumulative histogram with fixed upper bounds (the last bucket is +Inf).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends the _bucket/_sum/_count lines of metric `name` (HELP/TYPE written by the caller).
  void render(std::string& out, const std::string& name) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  // HTTP answers by endpoint and status code.
  void http_response(const std::string& endpoint, int status);
  // A generation request (one choice) ended: finish reason name ("stop", "length",
  // "cancelled", "error").
  void request_finished(const std::string& reason, int prompt_tokens, int completion_tokens,
                        double e2e_seconds);
  void first_token(double ttft_seconds);
  void inter_token(double seconds);
  // After each engine step: the step's figures and the context's cumulative routing stats.
  void step(const StepStats& st, double seconds, const std::vector<RoutingStats>& routing);
  // Gauges set by the engine loop.
  void set_queue(int64_t waiting, int64_t running);
  void set_prefix_cache(const PrefixCacheStats& s);

  std::string render(const std::string& routing_spec) const;

 private:
  // The parts of render(), called with mu_ held.
  void render_requests(std::string& o) const;
  void render_prefix_cache(std::string& o) const;
  void render_steps(std::string& o) const;
  void render_routing(std::string& o) const;

  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_;
  std::map<std::string, uint64_t> finished_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram ttft_, tpot_, e2e_, batch_decode_, step_tokens_, step_seconds_;
  uint64_t steps_ = 0, decode_steps_ = 0;
  double weight_bytes_ = 0, expert_bytes_ = 0;
  int64_t waiting_ = 0, running_ = 0;
  PrefixCacheStats prefix_;
  StepStats last_;  // last step with decode tokens (per-layer distinct experts)
  std::vector<RoutingStats> routing_;
  std::vector<double> expert_assignments_;  // per layer, summed over steps (assignments)
};

}  // namespace lynx::server
