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

namespace lynx {
namespace {

template <typename V>
void ensure(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

kernels::ExpertMatrices matrices(const Weight& w) {
  return {w.type, w.data, w.rows, w.cols, w.mat_bytes, w.layout};
}

// y[r] += bias[e] for every grouped row r of expert e ([rows x n] and [N x n]; gpt-oss).
void add_expert_bias(const kernels::ExpertPlan& plan, const float* bias, float* y, int64_t n) {
  if (!bias) return;
  for (const int32_t e : plan.active) {
    const float* b = bias + size_t(e) * size_t(n);
    for (int32_t r = plan.offset[size_t(e)]; r < plan.offset[size_t(e) + 1]; ++r) {
      float* row = y + size_t(r) * size_t(n);
      for (int64_t i = 0; i < n; ++i) row[i] += b[i];
    }
  }
}

// The activation between gate/up and down over n values (LayerWeights::expert_act).
void activate(ExpertAct act, const float* gate, const float* up, float* out, int64_t n) {
  if (act == ExpertAct::kSwigluOai) {
    swiglu_oai(gate, up, out, n);
  } else {
    kernels::swiglu(gate, up, out, n);
  }
}

}  // namespace

void CpuExpertExecutor::run(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                            const LayerWeights& layer, float* out) {
  kernels::mix_id(plan, rows(plan, x, layer), x.cols, out);
}

const float* CpuExpertExecutor::rows(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                                     const LayerWeights& layer) {
  const Weight &wg = layer.gate_exps, &wu = layer.up_exps, &wd = layer.down_exps;
  const int64_t E = x.cols, F = wg.rows;
  const int rows = plan.rows();
  const bool int_gate = int_acts_ && kernels::has_int_path(wg.type);
  const bool int_up = int_acts_ && kernels::has_int_path(wu.type);
  const bool int_down = int_acts_ && kernels::has_int_path(wd.type);
  const bool bf_gate = bf16_acts_ && kernels::has_bf16_path(wg.type, wg.layout);
  const bool bf_up = bf16_acts_ && kernels::has_bf16_path(wu.type, wu.layout);
  const bool bf_down = bf16_acts_ && kernels::has_bf16_path(wd.type, wd.layout);
  ensure(gate_, size_t(rows) * F);
  ensure(up_, size_t(rows) * F);
  ensure(down_, size_t(rows) * E);

  // (rows, E) input rows: each grouped row a copy of its token's row of x.
  if (!int_gate || !int_up || act_hook_) {
    ensure(xin_, size_t(rows) * E);
    for (int r = 0; r < rows; ++r) {
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
      for (int r = 0; r < rows; ++r) xq_rows_.k.copy_row(r, xq.k, plan.row_token[size_t(r)]);
    } else {
      if (std::exchange(rows_q8, true)) continue;
      xq_rows_.resize(rows, E);
      for (int r = 0; r < rows; ++r) xq_rows_.copy_row(r, xq, plan.row_token[size_t(r)]);
    }
  }

  // The BF16 fast mode rounds the grouped rows once for gate and up.
  if (bf_gate || bf_up) kernels::round_acts_bf16(xin_.data(), E, rows, E, xb_rows_);

  // (rows, F) gate and up, one pass over the plan (a chunk reads its input rows once).
  const std::span<const int32_t> per_expert(plan.count.data(), size_t(plan.n_expert));
  if (act_hook_) {
    (*act_hook_)(wg, xin_.data(), rows, per_expert);
    (*act_hook_)(wu, xin_.data(), rows, per_expert);
  }
  const kernels::MatIdJob gate_up[2] = {
      {matrices(wg), xin_.data(), int_gate ? &xq_rows_ : nullptr, gate_.data(),
       bf_gate ? &xb_rows_ : nullptr},
      {matrices(wu), xin_.data(), int_up ? &xq_rows_ : nullptr, up_.data(),
       bf_up ? &xb_rows_ : nullptr},
  };
  kernels::matmul_id(pool_, plan, gate_up);
  add_expert_bias(plan, layer.gate_exps_b, gate_.data(), F);
  add_expert_bias(plan, layer.up_exps_b, up_.data(), F);

  // (rows, F) SwiGLU in place in gate, quantized for the down projection on the integer path.
  if (int_down) {
    if (kernels::act_type_is_q8k(wd.type)) {
      xq_hidden_.k.resize(rows, F);
    } else {
      xq_hidden_.resize(rows, F);
    }
    pool_.parallel_for(
        rows,
        [&](int64_t r0, int64_t r1, int) {
          activate(layer.expert_act, &gate_[size_t(r0) * F], &up_[size_t(r0) * F],
                   &gate_[size_t(r0) * F], (r1 - r0) * F);
          kernels::quantize_acts_rows_for(wd.type, gate_.data(), F, int(r0), int(r1), xq_hidden_);
        },
        std::max<int64_t>(1, 16384 / std::max<int64_t>(F, 1)));
  } else {
    activate(layer.expert_act, gate_.data(), up_.data(), gate_.data(), int64_t(rows) * F);
    if (bf_down) kernels::round_acts_bf16(gate_.data(), F, rows, F, xb_hidden_);
  }

  // (rows, E) down; run() then mixes them into (T, E).
  if (act_hook_) (*act_hook_)(wd, gate_.data(), rows, per_expert);
  const kernels::MatIdJob down[1] = {{matrices(wd), gate_.data(), int_down ? &xq_hidden_ : nullptr,
                                      down_.data(), bf_down ? &xb_hidden_ : nullptr}};
  kernels::matmul_id(pool_, plan, down);
  add_expert_bias(plan, layer.down_exps_b, down_.data(), E);  // before the routing weight
  return down_.data();
}

}  // namespace lynx
