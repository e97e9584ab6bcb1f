// StepObserver (see step_observer.h).
#include "model/step_observer.h"

#include <algorithm>

namespace lynx {

double StepStats::mean_distinct() const {
  if (layers.empty()) return 0;
  double s = 0;
  for (const auto& l : layers) s += l.distinct_experts;
  return s / double(layers.size());
}

double StepStats::mean_distinct_exact() const {
  if (layers.empty()) return 0;
  double s = 0;
  for (const auto& l : layers) s += l.distinct_exact;
  return s / double(layers.size());
}

StepObserver::StepObserver(int n_layer, int n_expert, bool record_trace)
    : n_expert_(std::max(0, n_expert)), record_trace_(record_trace) {
  step_.layers.resize(size_t(n_layer));
  rstats_.resize(size_t(n_layer));
  expert_tokens_.assign(size_t(n_layer) * size_t(n_expert_), 0);
}

void StepObserver::begin_step(std::span<const BatchToken> batch) {
  step_.n_tokens = int(batch.size());
  step_.n_decode = 0;
  for (const BatchToken& t : batch) {
    if ((t.flags & kTokenPrefill) == 0) ++step_.n_decode;
  }
  step_.weight_bytes = 0;
  step_.expert_bytes = 0;
  step_.routing_seconds = 0;
  step_.expert_seconds = 0;
  std::fill(step_.layers.begin(), step_.layers.end(), LayerStepStats{});
}

void StepObserver::routed(const RoutingInput& in, const RoutingOutput& out) {
  step_.routing_seconds += since(t_route_);
  RoutingStats& rs = rstats_[size_t(in.layer)];
  const int64_t exact_before = rs.distinct_exact;
  stats_acc_.add(in, out, rs);
  step_.layers[size_t(in.layer)].distinct_exact = int(rs.distinct_exact - exact_before);
  if (record_trace_) {
    const size_t T = size_t(in.n_tokens);
    TraceRecord rec;
    rec.layer = in.layer;
    rec.n_tokens = in.n_tokens;
    rec.logits.assign(in.logits, in.logits + T * size_t(in.gating->n_expert));
    rec.flags.assign(T, kTokenDecode);
    if (in.flags) rec.flags.assign(in.flags, in.flags + T);
    trace_.push_back(std::move(rec));
  }
}

void StepObserver::experts_done(int il, const kernels::ExpertPlan& plan, size_t bytes_per_expert) {
  int64_t* tokens_of = &expert_tokens_[size_t(il) * size_t(n_expert_)];
  int64_t assignments = 0;
  for (int e = 0; e < plan.n_expert; ++e) {
    tokens_of[e] += plan.count[size_t(e)];
    assignments += plan.count[size_t(e)];
  }
  step_.layers[size_t(il)].assignments = assignments;
  const size_t bytes = size_t(plan.n_active()) * bytes_per_expert;
  step_.weight_bytes += bytes;
  step_.expert_bytes += bytes;
  step_.layers[size_t(il)].expert_bytes = bytes;
  step_.layers[size_t(il)].distinct_experts = plan.n_active();
  step_.expert_seconds += since(t_experts_);
}

void StepObserver::reset_stats() {
  std::fill(rstats_.begin(), rstats_.end(), RoutingStats{});
  std::fill(expert_tokens_.begin(), expert_tokens_.end(), 0);
}

std::vector<TraceRecord> StepObserver::take_trace() {
  std::vector<TraceRecord> out;
  out.swap(trace_);
  return out;
}

}  // namespace lynx
