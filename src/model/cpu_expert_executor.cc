// CpuExpertExecutor: gate/up over the plan, SwiGLU, down, weighted mix.
//
// With the integer path the expert input rows are the quantized rows of x (quantized once
// per token, copied per grouped row) and the SwiGLU output is quantized once, in row chunks
// split across the pool, before the down projections.
#include "model/cpu_expert_executor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/matmul_id.h"
#include "model/gpt_oss_ops.h"
#include "model/swiglu_limit.h"

namespace lynx {
namespace {

template <typename V>
void ensure(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// ExpertMatrices::mat_bytes is the step from one expert to the next (Weight::stride).
kernels::ExpertMatrices matrices(const Weight& w) {
  return {w.type, w.data, w.rows, w.cols, w.stride(), w.layout, w.mats};
}

// y[r] += bias[e] for every grouped row r of expert e ([rows x n] and [N x n]; gpt-oss).
void add_expert_bias(const kernels::ExpertPlan& plan, std::span<const int32_t> experts,
                     const float* bias, float* y, int64_t n) {
  if (!bias) return;
  for (const int32_t e : experts) {
    const float* b = bias + size_t(e) * size_t(n);
    for (int32_t r = plan.offset[size_t(e)]; r < plan.offset[size_t(e) + 1]; ++r) {
      float* row = y + size_t(r) * size_t(n);
      for (int64_t i = 0; i < n; ++i) row[i] += b[i];
    }
  }
}

// The activation between gate/up and down over n values (LayerWeights::expert_act; a
// SwiGLU clamped at `limit` when > 0, LayerWeights::expert_limit).
void activate(ExpertAct act, const float* gate, const float* up, float* out, int64_t n,
              float limit) {
  if (act == ExpertAct::kSwiglu && limit > 0.f) {
    swiglu_limited(gate, up, out, n, limit);
  } else if (act == ExpertAct::kSwigluOai) {
    swiglu_oai(gate, up, out, n);
  } else if (act == ExpertAct::kGeglu) {
    kernels::geglu(gate, up, out, n);
  } else {
    kernels::swiglu(gate, up, out, n);
  }
}

}  // namespace

void CpuExpertExecutor::run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int /*il*/,
                            const LayerWeights& layer, float* out) {
  kernels::mix_id(pool_, plan, rows(plan, x, layer, plan.active, true), x.cols, out);
}

const float* CpuExpertExecutor::rows(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                                     const LayerWeights& layer) {
  return rows(plan, x, layer, plan.active, false);
}

const float* CpuExpertExecutor::rows(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                                     const LayerWeights& layer, std::span<const int32_t> experts) {
  return rows(plan, x, layer, experts, false);
}

const float* CpuExpertExecutor::rows(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                                     const LayerWeights& layer, std::span<const int32_t> experts,
                                     bool down_over_hidden) {
  const Weight &wg = layer.gate_exps, &wu = layer.up_exps, &wd = layer.down_exps;
  const int64_t E = x.cols, F = wg.rows;
  const int rows = plan.rows();
  const bool int_gate = int_acts_ && kernels::has_int_path(wg.type);
  const bool int_up = int_acts_ && kernels::has_int_path(wu.type);
  const bool int_down = int_acts_ && kernels::has_int_path(wd.type);
  const bool bf_gate = kernels::has_bf16_path(wg.type, wg.layout, bf16_);
  const bool bf_up = kernels::has_bf16_path(wu.type, wu.layout, bf16_);
  const bool bf_down = kernels::has_bf16_path(wd.type, wd.layout, bf16_);
  // gate then up in one buffer. On the integer path the down product reads only the quantized
  // hidden rows, so when the caller mixes the down rows at once (run(), not the expert tier's
  // parts) they take gate/up's memory: a fresh context's 512-token prefill of the
  // Qwen3-30B-A3B shape then touches 25 MB fewer new pages (docs/benchmarks.md, issue 31).
  const bool down_in_hidden = down_over_hidden && int_down;
  const size_t n_hidden = size_t(rows) * size_t(F);
  ensure(hidden_, down_in_hidden ? std::max(2 * n_hidden, size_t(rows) * size_t(E)) : 2 * n_hidden);
  float* const gate = hidden_.data();
  float* const up = gate + n_hidden;
  if (!down_in_hidden) ensure(down_, size_t(rows) * E);
  float* const down = down_in_hidden ? hidden_.data() : down_.data();
  // The grouped rows computed here (every row when `experts` is the whole plan).
  wave_rows_.clear();
  for (const int32_t e : experts) {
    for (int32_t r = plan.offset[size_t(e)]; r < plan.offset[size_t(e) + 1]; ++r) {
      wave_rows_.push_back(r);
    }
  }
  const int64_t n_wave = int64_t(wave_rows_.size());

  // (rows, E) input rows: each grouped row a copy of its token's row of x.
  if (!int_gate || !int_up || act_hook_) {
    ensure(xin_, size_t(rows) * E);
    for (const int32_t r : wave_rows_) {
      std::memcpy(&xin_[size_t(r) * E], x.x + size_t(plan.row_token[size_t(r)]) * E,
                  sizeof(float) * E);
    }
  }
  // The quantized forms gate and up read (Q8_0 and/or Q8_K: kernels/types.h act_type), each
  // made once per token and copied per grouped row.
  bool rows_q8 = false, rows_k = false;
  for (const Weight* w : {&wg, &wu}) {
    if (!int_acts_ || !kernels::has_int_path(w->type)) continue;
    const kernels::QuantizedActs& xq = x.quantize(pool_, w->type);
    if (kernels::act_type_is_q8k(w->type)) {
      if (std::exchange(rows_k, true)) continue;
      xq_rows_.k.resize(rows, E);
      for (const int32_t r : wave_rows_) xq_rows_.k.copy_row(r, xq.k, plan.row_token[size_t(r)]);
    } else {
      if (std::exchange(rows_q8, true)) continue;
      xq_rows_.resize(rows, E);
      for (const int32_t r : wave_rows_) xq_rows_.copy_row(r, xq, plan.row_token[size_t(r)]);
    }
  }

  // The BF16 fast mode rounds the grouped rows of this part once for gate and up (the
  // rounding is per row: rows of other parts keep theirs).
  auto round_wave = [&](const float* src, int64_t cols, kernels::Bf16Acts& dst) {
    if (dst.n_tok != rows || dst.cols != cols) dst.resize(rows, cols);
    for (size_t i = 0; i < wave_rows_.size();) {
      size_t j = i + 1;
      while (j < wave_rows_.size() && wave_rows_[j] == wave_rows_[j - 1] + 1) ++j;
      kernels::round_acts_bf16_rows(src, cols, wave_rows_[i], wave_rows_[j - 1] + 1, dst);
      i = j;
    }
  };
  if (bf_gate || bf_up) round_wave(xin_.data(), E, xb_rows_);

  // Reports expert e's grouped rows of `w` (input rows `in`, `cols` wide) to the hook.
  auto report = [&](const Weight& w, const float* in, int64_t cols) {
    if (!act_hook_) return;
    hook_counts_.assign(size_t(plan.n_expert), 0);
    for (const int32_t e : experts) {
      const int32_t off = plan.offset[size_t(e)], cnt = plan.count[size_t(e)];
      hook_counts_[size_t(e)] = cnt;
      (*act_hook_)(w, in + size_t(off) * size_t(cols), cnt, hook_counts_);
      hook_counts_[size_t(e)] = 0;
    }
  };

  // (rows, F) gate and up, one pass over the plan (a chunk reads its input rows once).
  report(wg, xin_.data(), E);
  report(wu, xin_.data(), E);
  const kernels::MatIdJob gate_up[2] = {
      {matrices(wg), xin_.data(), int_gate ? &xq_rows_ : nullptr, gate,
       bf_gate ? &xb_rows_ : nullptr, bf16_},
      {matrices(wu), xin_.data(), int_up ? &xq_rows_ : nullptr, up, bf_up ? &xb_rows_ : nullptr,
       bf16_},
  };
  kernels::matmul_id(pool_, plan, gate_up, experts);
  add_expert_bias(plan, experts, layer.gate_exps_b, gate, F);
  add_expert_bias(plan, experts, layer.up_exps_b, up, F);

  // (rows, F) SwiGLU in place in gate, quantized for the down projection on the integer path.
  if (int_down) {
    if (kernels::act_type_is_q8k(wd.type)) {
      xq_hidden_.k.resize(rows, F);
    } else {
      xq_hidden_.resize(rows, F);
    }
  }
  // Runs of consecutive rows of the part, split across the pool.
  pool_.parallel_for(
      n_wave,
      [&](int64_t i0, int64_t i1, int) {
        while (i0 < i1) {
          int64_t i = i0 + 1;
          while (i < i1 && wave_rows_[size_t(i)] == wave_rows_[size_t(i - 1)] + 1) ++i;
          const int r0 = wave_rows_[size_t(i0)], r1 = r0 + int(i - i0);
          activate(layer.expert_act, gate + size_t(r0) * F, up + size_t(r0) * F,
                   gate + size_t(r0) * F, int64_t(r1 - r0) * F, layer.expert_limit);
          if (int_down) {
            kernels::quantize_acts_rows_for(wd.type, gate, F, r0, r1, xq_hidden_);
          }
          i0 = i;
        }
      },
      std::max<int64_t>(1, 16384 / std::max<int64_t>(F, 1)));
  if (!int_down && bf_down) round_wave(gate, F, xb_hidden_);

  // (rows, E) down; run() then mixes them into (T, E).
  report(wd, gate, F);
  const kernels::MatIdJob down_job[1] = {{matrices(wd), gate, int_down ? &xq_hidden_ : nullptr,
                                          down, bf_down ? &xb_hidden_ : nullptr, bf16_}};
  kernels::matmul_id(pool_, plan, down_job, experts);
  add_expert_bias(plan, experts, layer.down_exps_b, down, E);  // before the routing weight
  return down;
}

}  // namespace lynx
