#include "analysis/ep_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "lynx/error.h"

namespace lynx::analysis {

int expert_slices(int n_expert, int ranks) {
  if (n_expert < 1 || ranks < 1) {
    throw Error("expert parallelism: need experts >= 1 and ranks >= 1, got " +
                std::to_string(n_expert) + " and " + std::to_string(ranks));
  }
  if (ranks <= n_expert) return 1;
  if (ranks % n_expert != 0) {
    throw Error("expert parallelism: " + std::to_string(ranks) + " ranks for " +
                std::to_string(n_expert) +
                " experts: past one expert per rank, ranks must be a multiple of the experts");
  }
  return ranks / n_expert;
}

EpStepCounter::EpStepCounter(int n_expert, int ranks)
    : n_(n_expert), ranks_(ranks), slices_(expert_slices(n_expert, ranks)) {
  seen_.assign(size_t(n_expert), 0);
  tok_on_.assign(size_t(ranks), 0);
  out_deg_.assign(size_t(ranks), 0);
  in_deg_.assign(size_t(ranks), 0);
}

void EpStepCounter::count(const int32_t* ids, const float* weights, int n_tokens, int k,
                          const std::vector<int>& rank_of, EpStep& out) {
  const int R = ranks_;
  if (slices_ == 1 && rank_of.size() != size_t(n_)) {
    throw Error("expert parallelism: placement has " + std::to_string(rank_of.size()) +
                " experts, the routing " + std::to_string(n_));
  }
  out.experts.assign(size_t(R), 0);
  out.tokens.assign(size_t(R), 0);
  out.assignments.assign(size_t(R), 0);
  out.rows_out.assign(size_t(R), 0);
  out.rows_in.assign(size_t(R), 0);
  out.peers.assign(size_t(R), 0);
  std::fill(seen_.begin(), seen_.end(), 0);
  pairs_.clear();
  for (int t = 0; t < n_tokens; ++t) {
    const int owner = t % R;
    touched_.clear();
    for (int j = 0; j < k; ++j) {
      if (!(weights[size_t(t) * k + j] > 0.f)) continue;
      const int e = ids[size_t(t) * k + j];
      // Expert e lives on one rank, or its slices on s consecutive ranks that hold nothing
      // else: "active on rank r" is "active", counted once for each of its ranks.
      const int first = slices_ == 1 ? rank_of[size_t(e)] : e * slices_;
      const bool first_use = !seen_[size_t(e)];
      seen_[size_t(e)] = 1;
      for (int r = first; r < first + slices_; ++r) {
        out.experts[size_t(r)] += first_use;
        ++out.assignments[size_t(r)];
        if (tok_on_[size_t(r)]) continue;
        tok_on_[size_t(r)] = 1;
        touched_.push_back(r);
        ++out.tokens[size_t(r)];
        if (r == owner) continue;
        ++out.rows_out[size_t(owner)];
        ++out.rows_in[size_t(r)];
        pairs_.push_back(int64_t(owner) * R + r);
      }
    }
    for (int r : touched_) tok_on_[size_t(r)] = 0;
  }
  // Peers of a rank in one phase: the ranks it sends to or receives from (the combine phase
  // is the dispatch phase reversed, so both phases have the same peers).
  std::sort(pairs_.begin(), pairs_.end());
  pairs_.erase(std::unique(pairs_.begin(), pairs_.end()), pairs_.end());
  std::fill(out_deg_.begin(), out_deg_.end(), 0);
  std::fill(in_deg_.begin(), in_deg_.end(), 0);
  for (int64_t p : pairs_) {
    ++out_deg_[size_t(p / R)];
    ++in_deg_[size_t(p % R)];
  }
  for (int r = 0; r < R; ++r)
    out.peers[size_t(r)] = std::max(out_deg_[size_t(r)], in_deg_[size_t(r)]);
}

double expert_seconds(int experts_on_rank, int slices, const EpShape& s, const CostParams& c,
                      int assignments_on_rank) {
  const double stream = double(experts_on_rank) * s.expert_bytes / slices / c.mem_bw;
  if (c.flops <= 0) return stream;
  return std::max(stream, 2.0 * assignments_on_rank * s.expert_params / slices / c.flops);
}

double allreduce_bytes_per_rank(int ranks, int batch, const EpShape& s) {
  if (ranks <= 1) return 0;
  return 2.0 * (ranks - 1) / ranks * double(batch) * s.hidden * s.act_bytes;
}

double allreduce_seconds(int ranks, int batch, const EpShape& s, const CostParams& c) {
  if (ranks <= 1) return 0;
  const double rounds = 2.0 * std::ceil(std::log2(double(ranks)));
  return allreduce_bytes_per_rank(ranks, batch, s) / c.link_bw + rounds * c.link_lat;
}

double all_to_all_seconds(const EpStep& st, const EpShape& s, const CostParams& c) {
  const double row = double(s.hidden) * s.act_bytes;
  double phase = 0;
  for (size_t r = 0; r < st.rows_out.size(); ++r) {
    const double rows = std::max(st.rows_out[r], st.rows_in[r]);
    phase = std::max(phase, rows * row / c.link_bw + st.peers[r] * c.link_lat);
  }
  return 2 * phase;  // dispatch, then combine (the same rows the other way)
}

double dense_seconds(const EpShape& s, const CostParams& c) {
  return c.dense_s >= 0 ? c.dense_s : s.dense_bytes / c.mem_bw;
}

void EpAccum::add(const EpStep& st, int slices, const EpShape& s, const CostParams& c) {
  const size_t R = st.experts.size();
  int e_max = 0, t_max = 0, a_max = 0;
  int64_t e_sum = 0, t_sum = 0;
  double busiest = 0;  // the step waits for the slowest rank
  for (size_t r = 0; r < R; ++r) {
    busiest = std::max(busiest, expert_seconds(st.experts[r], slices, s, c, st.assignments[r]));
    e_max = std::max(e_max, st.experts[r]);
    t_max = std::max(t_max, st.tokens[r]);
    a_max = std::max(a_max, st.rows_out[r] + st.rows_in[r]);
    e_sum += st.experts[r];
    t_sum += st.tokens[r];
  }
  ++calls;
  experts_max += e_max;
  experts_mean += double(e_sum) / double(R);
  tokens_max += t_max;
  tokens_mean += double(t_sum) / double(R);
  a2a_rows_max += a_max;
  expert_s += busiest;
  a2a_s += R > 1 ? all_to_all_seconds(st, s, c) : 0;
}

EpPrediction predict(const EpAccum& a, int ranks, int slices, int batch, const EpShape& s,
                     const CostParams& c) {
  EpPrediction p;
  if (a.calls == 0) return p;
  const double n = double(a.calls), L = s.moe_layers;
  p.experts_max = a.experts_max / n;
  p.experts_mean = a.experts_mean / n;
  p.imbalance = a.experts_mean > 0 ? a.experts_max / a.experts_mean : 1.0;
  p.tokens_max = a.tokens_max / n;
  p.tokens_mean = a.tokens_mean / n;
  p.stream_bytes_max = L * p.experts_max * s.expert_bytes / slices;
  p.stream_bytes_mean = L * p.experts_mean * s.expert_bytes / slices;
  p.allreduce_bytes = L * allreduce_bytes_per_rank(ranks, batch, s);
  p.a2a_bytes_max = L * a.a2a_rows_max / n * s.hidden * s.act_bytes;
  p.expert_ms = 1e3 * L * a.expert_s / n;
  p.allreduce_ms = 1e3 * L * allreduce_seconds(ranks, batch, s, c);
  p.a2a_ms = 1e3 * L * a.a2a_s / n;
  p.dense_ms = 1e3 * dense_seconds(s, c);
  p.tpot_allreduce_ms = p.expert_ms + p.allreduce_ms + p.dense_ms;
  p.tpot_a2a_ms = p.expert_ms + p.a2a_ms + p.dense_ms;
  return p;
}

}  // namespace lynx::analysis
