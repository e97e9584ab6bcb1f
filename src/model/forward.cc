// The batched forward pass: one function per block of the transformer layer, reading like
// the model (llama.cpp's build_* graphs are the reference for every architecture).
//
// Shapes: T tokens in the step, E = n_embd, Q = n_head * head_dim, KV = n_head_kv * head_dim,
// N experts, k used per token, F = expert FFN width.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "model/finite.h"
#include "model/forward.h"

namespace lynx {
namespace {

using kernels::ThreadPool;

template <typename V>
void ensure(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// True when products with `w` run on the integer path (Q8_0/Q4_0 weights, activations
// quantized to Q8_0 blocks as ggml does), false for the exact float path.
bool int_path(const Context::Impl& ctx, const Weight& w) {
  return ctx.int_acts && kernels::has_int8_path(w.type);
}

// The input of one or more matmuls: T rows of `cols` F32 activations and their Q8_0
// quantization, made by the first weight that takes the integer path, so weights sharing an
// input (q/k/v, gate/up, router/experts/shared expert) quantize it once.
struct MatIn {
  const float* x;
  int T;
  int64_t cols;
  kernels::QuantizedActs* q;
  bool quantized = false;

  const kernels::QuantizedActs& quantize(ThreadPool& pool) {
    if (!quantized) kernels::quantize_acts(pool, x, cols, T, cols, *q);
    quantized = true;
    return *q;
  }
};

// y[T x rows] = W x[T x cols], rows split across the pool; `bytes` counts weight traffic.
void project(Context::Impl& ctx, const Weight& w, MatIn& in, float* y, size_t& bytes) {
  if (int_path(ctx, w)) {
    kernels::matmul(ctx.pool, w.type, w.mat(0), w.rows, w.cols, in.quantize(ctx.pool), y, w.rows,
                    w.layout);
  } else {
    kernels::matmul(ctx.pool, w.type, w.mat(0), w.rows, w.cols, in.x, in.cols, in.T, y, w.rows,
                    w.layout);
  }
  bytes += w.mat_bytes;
}

void add_bias(const float* b, float* y, int T, int n) {
  if (!b) return;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < n; ++i) y[size_t(t) * n + i] += b[i];
  }
}

// Rotary embedding of one head vector with the precomputed (cos, sin) of its position.
// NORM rotates adjacent pairs (2i, 2i+1); NEOX rotates (i, i + hd/2).
void rope(float* v, int hd, const float* cs, RopeType type) {
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const int a = type == RopeType::kNorm ? 2 * i : i;
    const int b = type == RopeType::kNorm ? 2 * i + 1 : i + half;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

// (cos, sin) of theta_i = pos * base^(-2i/hd) for every token of the step, computed once
// and shared by all layers and heads.
void rope_table(const ModelConfig& c, std::span<const BatchToken> batch, std::vector<float>& cs) {
  const int half = c.head_dim / 2;
  ensure(cs, batch.size() * size_t(half) * 2);
  for (size_t t = 0; t < batch.size(); ++t) {
    for (int i = 0; i < half; ++i) {
      const double theta =
          double(batch[t].pos) * std::pow(double(c.rope_base), -2.0 * i / c.head_dim);
      cs[(t * half + size_t(i)) * 2] = float(std::cos(theta));
      cs[(t * half + size_t(i)) * 2 + 1] = float(std::sin(theta));
    }
  }
}

// Self-attention block: x += Wo · attn(norm(x)).
void attention(Context::Impl& ctx, int il, std::span<const BatchToken> batch) {
  const ModelConfig& c = ctx.model.config();
  const LayerWeights& L = ctx.model.layer(il);
  StepBuffers& B = ctx.buf;
  const int T = int(batch.size());
  const int E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), hd = c.head_dim;
  size_t& bytes = ctx.step.weight_bytes;

  for (int t = 0; t < T; ++t) {
    kernels::rmsnorm(&B.x[size_t(t) * E], L.attn_norm, &B.xn[size_t(t) * E], E, c.rms_eps);
  }
  MatIn xn{B.xn.data(), T, E, &B.xq_in};
  project(ctx, L.wq, xn, B.q.data(), bytes);
  project(ctx, L.wk, xn, B.k.data(), bytes);
  project(ctx, L.wv, xn, B.v.data(), bytes);
  add_bias(L.bq, B.q.data(), T, Q);
  add_bias(L.bk, B.k.data(), T, KV);
  add_bias(L.bv, B.v.data(), T, KV);

  for (int t = 0; t < T; ++t) {
    float* q = &B.q[size_t(t) * Q];
    float* k = &B.k[size_t(t) * KV];
    if (c.qk_norm == QKNorm::kFull) {
      kernels::rmsnorm(q, L.q_norm, q, Q, c.rms_eps);
      kernels::rmsnorm(k, L.k_norm, k, KV, c.rms_eps);
    } else if (c.qk_norm == QKNorm::kPerHead) {
      for (int h = 0; h < c.n_head; ++h)
        kernels::rmsnorm(q + h * hd, L.q_norm, q + h * hd, hd, c.rms_eps);
      for (int h = 0; h < c.n_head_kv; ++h)
        kernels::rmsnorm(k + h * hd, L.k_norm, k + h * hd, hd, c.rms_eps);
    }
    const int pos = batch[size_t(t)].pos;
    const float* cs = &B.rope_cs[size_t(t) * hd];  // hd/2 (cos, sin) pairs
    for (int h = 0; h < c.n_head; ++h) rope(q + h * hd, hd, cs, c.rope);
    for (int h = 0; h < c.n_head_kv; ++h) rope(k + h * hd, hd, cs, c.rope);
    // Every token's K/V goes into its sequence's cache before any attention runs, so tokens
    // of one sequence in the same step (a prefill chunk) see their predecessors.
    SequenceLayer& sl = ctx.seqs[size_t(batch[size_t(t)].seq)].layers[size_t(il)];
    std::memcpy(&sl.k[size_t(pos) * KV], k, sizeof(float) * KV);
    std::memcpy(&sl.v[size_t(pos) * KV], &B.v[size_t(t) * KV], sizeof(float) * KV);
  }

  const float scale = 1.f / std::sqrt(float(hd));
  const int group = c.n_head / c.n_head_kv;
  ctx.pool.parallel_for(int64_t(T) * c.n_head, [&](int64_t b, int64_t e, int tid) {
    std::vector<float>& sc = ctx.thread_scores[size_t(tid)];
    ensure(sc, size_t(ctx.n_ctx));
    for (int64_t job = b; job < e; ++job) {
      const int t = int(job / c.n_head), h = int(job % c.n_head), kvh = h / group;
      const BatchToken& bt = batch[size_t(t)];
      const SequenceLayer& sl = ctx.seqs[size_t(bt.seq)].layers[size_t(il)];
      const float* q = &B.q[size_t(t) * Q + size_t(h) * hd];
      const int n = bt.pos + 1;  // causal: positions 0..pos
      for (int j = 0; j < n; ++j) {
        sc[size_t(j)] = kernels::dot(q, &sl.k[size_t(j) * KV + size_t(kvh) * hd], hd) * scale;
      }
      kernels::softmax_inplace(sc.data(), n);
      float* out = &B.attn[size_t(t) * Q + size_t(h) * hd];
      std::fill(out, out + hd, 0.f);
      for (int j = 0; j < n; ++j) {
        kernels::axpy(sc[size_t(j)], &sl.v[size_t(j) * KV + size_t(kvh) * hd], out, hd);
      }
    }
  });
  MatIn attn{B.attn.data(), T, Q, &B.xq_mid};
  project(ctx, L.wo, attn, B.tmp.data(), bytes);
  for (size_t i = 0; i < size_t(T) * E; ++i) B.x[i] += B.tmp[i];
}

// Dense SwiGLU FFN over all T rows of `in`: out = down(silu(gate in) * up in).
void dense_ffn(Context::Impl& ctx, const Weight& gate, const Weight& up, const Weight& down,
               MatIn& in, float* out) {
  StepBuffers& B = ctx.buf;
  const int T = in.T;
  const int64_t F = gate.rows;
  ensure(B.sh_gate, size_t(T) * F);
  ensure(B.sh_up, size_t(T) * F);
  size_t& bytes = ctx.step.weight_bytes;
  project(ctx, gate, in, B.sh_gate.data(), bytes);
  project(ctx, up, in, B.sh_up.data(), bytes);
  kernels::swiglu(B.sh_gate.data(), B.sh_up.data(), B.sh_gate.data(), int64_t(T) * F);
  MatIn hidden{B.sh_gate.data(), T, F, &B.xq_mid};
  project(ctx, down, hidden, out, bytes);
}

// Runs the expert FFNs grouped by expert: each active expert's weights are streamed once
// for all the tokens routed to it. Work is split over the concatenated rows of all active
// experts, so the threads stay balanced whatever the distribution of tokens.
// With the integer path the expert input rows are the quantized rows of `xn` (quantized
// once per token, copied per assignment) and the swiglu output is quantized once, row chunks
// split across the pool, before the down projections.
void run_experts(Context::Impl& ctx, int il, MatIn& xn) {
  const int T = xn.T;
  const ModelConfig& c = ctx.model.config();
  const LayerWeights& L = ctx.model.layer(il);
  StepBuffers& B = ctx.buf;
  const int E = c.n_embd, N = c.n_expert, K = c.n_expert_used, F = c.n_ff_exp;

  // Group the active (weight > 0) assignments by expert.
  std::fill(B.count.begin(), B.count.begin() + N, 0);
  for (int i = 0; i < T * K; ++i) {
    if (B.weights[size_t(i)] > 0.f) ++B.count[size_t(B.ids[size_t(i)])];
  }
  B.offset[0] = 0;
  B.active.clear();
  for (int e = 0; e < N; ++e) {
    B.offset[size_t(e) + 1] = B.offset[size_t(e)] + B.count[size_t(e)];
    if (B.count[size_t(e)] > 0) B.active.push_back(e);
  }
  const int rows = B.offset[size_t(N)];
  int64_t* tokens_of = &ctx.expert_tokens[size_t(il) * N];
  for (int e = 0; e < N; ++e) tokens_of[e] += B.count[size_t(e)];
  std::vector<int32_t>& fill = B.fill;
  fill.assign(B.offset.begin(), B.offset.begin() + N);
  for (int i = 0; i < T * K; ++i) {
    if (B.weights[size_t(i)] > 0.f) {
      const int e = B.ids[size_t(i)];
      const int r = fill[size_t(e)]++;
      B.assign_row[size_t(i)] = r;
      B.row_token[size_t(r)] = i / K;
    } else {
      B.assign_row[size_t(i)] = -1;
    }
  }
  const bool int_gate = int_path(ctx, L.gate_exps), int_up = int_path(ctx, L.up_exps);
  const bool int_down = int_path(ctx, L.down_exps);
  if (!int_gate || !int_up) {
    for (int r = 0; r < rows; ++r) {
      std::memcpy(&B.xin[size_t(r) * E], &B.xn[size_t(B.row_token[size_t(r)]) * E],
                  sizeof(float) * E);
    }
  }
  if (int_gate || int_up) {
    const kernels::QuantizedActs& xq = xn.quantize(ctx.pool);
    B.xq_rows.resize(rows, E);
    for (int r = 0; r < rows; ++r) B.xq_rows.copy_row(r, xq, B.row_token[size_t(r)]);
  }

  // y[cnt x rows] of expert rows [r0, r1) over the expert's `cnt` grouped rows from `off`.
  auto expert_rows = [&](const Weight& w, bool int_w, int ex, int64_t r0, int64_t r1, int off,
                         int cnt, const std::vector<float>& x, const kernels::QuantizedActs& xq,
                         float* y) {
    const int64_t cols = w.cols;
    if (int_w) {
      kernels::matmul_rows_q8(w.type, w.mat(ex), cols, r0, r1, xq, off, cnt, y, w.rows, w.layout);
    } else {
      kernels::matmul_rows(w.type, w.mat(ex), cols, r0, r1, &x[size_t(off) * cols], cols, cnt, y,
                           w.rows, w.layout);
    }
  };

  const int64_t n_active = int64_t(B.active.size());
  // gate and up: rows F per active expert.
  ctx.pool.parallel_for(
      n_active * F,
      [&](int64_t b, int64_t e, int) {
        while (b < e) {
          const int64_t ai = b / F, r0 = b % F, r1 = std::min<int64_t>(F, r0 + (e - b));
          const int ex = B.active[size_t(ai)];
          const int off = B.offset[size_t(ex)], cnt = B.count[size_t(ex)];
          expert_rows(L.gate_exps, int_gate, ex, r0, r1, off, cnt, B.xin, B.xq_rows,
                      &B.gate[size_t(off) * F]);
          expert_rows(L.up_exps, int_up, ex, r0, r1, off, cnt, B.xin, B.xq_rows,
                      &B.up[size_t(off) * F]);
          b += r1 - r0;
        }
      },
      16);
  if (int_down) {
    // swiglu and quantization of each grouped row, rows split across the pool.
    B.xq_hidden.resize(rows, F);
    ctx.pool.parallel_for(
        rows,
        [&](int64_t r0, int64_t r1, int) {
          kernels::swiglu(&B.gate[size_t(r0) * F], &B.up[size_t(r0) * F], &B.gate[size_t(r0) * F],
                          (r1 - r0) * F);
          kernels::quantize_acts_rows(B.gate.data(), F, int(r0), int(r1), B.xq_hidden);
        },
        std::max(1, 16384 / std::max(F, 1)));
  } else {
    kernels::swiglu(B.gate.data(), B.up.data(), B.gate.data(), int64_t(rows) * F);
  }
  ctx.pool.parallel_for(
      n_active * E,
      [&](int64_t b, int64_t e, int) {
        while (b < e) {
          const int64_t ai = b / E, r0 = b % E, r1 = std::min<int64_t>(E, r0 + (e - b));
          const int ex = B.active[size_t(ai)];
          const int off = B.offset[size_t(ex)], cnt = B.count[size_t(ex)];
          expert_rows(L.down_exps, int_down, ex, r0, r1, off, cnt, B.gate, B.xq_hidden,
                      &B.down[size_t(off) * E]);
          b += r1 - r0;
        }
      },
      16);

  // Mix: each token adds its experts' outputs in slot order (independent of the batch).
  for (int t = 0; t < T; ++t) {
    float* out = &B.tmp[size_t(t) * E];
    std::fill(out, out + E, 0.f);
    for (int s = 0; s < K; ++s) {
      const int r = B.assign_row[size_t(t) * K + s];
      if (r >= 0) kernels::axpy(B.weights[size_t(t) * K + s], &B.down[size_t(r) * E], out, E);
    }
  }
  const size_t bytes = size_t(n_active) * ctx.model.expert_bytes(il);
  ctx.step.weight_bytes += bytes;
  ctx.step.expert_bytes += bytes;
  ctx.step.layers[size_t(il)].expert_bytes = bytes;
  ctx.step.layers[size_t(il)].distinct_experts = int(n_active);
}

// Feed-forward block: x += FFN(norm(x)), MoE with routing policy or dense.
void feed_forward(Context::Impl& ctx, int il, std::span<const BatchToken> batch,
                  const std::vector<uint8_t>& flags) {
  const ModelConfig& c = ctx.model.config();
  const LayerWeights& L = ctx.model.layer(il);
  StepBuffers& B = ctx.buf;
  const int T = int(batch.size()), E = c.n_embd;

  for (int t = 0; t < T; ++t) {
    kernels::rmsnorm(&B.x[size_t(t) * E], L.ffn_norm, &B.xn[size_t(t) * E], E, c.rms_eps);
  }
  MatIn xn{B.xn.data(), T, E, &B.xq_in};
  if (!c.is_moe()) {
    dense_ffn(ctx, L.ffn_gate, L.ffn_up, L.ffn_down, xn, B.tmp.data());
    for (size_t i = 0; i < size_t(T) * E; ++i) B.x[i] += B.tmp[i];
    return;
  }

  // Router -> policy -> experts. The router stays F32 as llama.cpp keeps it.
  const int N = c.n_expert;
  project(ctx, L.router, xn, B.router.data(), ctx.step.weight_bytes);
  if (ctx.router_override) ctx.router_override(il, batch, B.router.data());
  check_finite_rows(
      B.router.data(), T, size_t(N), batch, [](int r) { return r; }, "router logits", il);
  RoutingInput in;
  in.logits = B.router.data();
  in.flags = flags.data();
  in.n_tokens = T;
  in.layer = il;
  in.gating = &c.gating;
  RoutingOutput out{B.ids.data(), B.weights.data()};
  const auto t0 = std::chrono::steady_clock::now();
  ctx.policy->route(in, out);
  ctx.step.routing_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RoutingStats& rs = ctx.rstats[size_t(il)];
  const int64_t exact_before = rs.distinct_exact;
  ctx.stats_acc.add(in, out, rs);
  ctx.step.layers[size_t(il)].distinct_exact = int(rs.distinct_exact - exact_before);
  if (ctx.record_trace) {
    TraceRecord rec;
    rec.layer = il;
    rec.n_tokens = T;
    rec.logits.assign(B.router.begin(), B.router.begin() + size_t(T) * N);
    rec.flags = flags;
    ctx.trace.push_back(std::move(rec));
  }
  const auto te = std::chrono::steady_clock::now();
  run_experts(ctx, il, xn);
  for (size_t i = 0; i < size_t(T) * E; ++i) B.x[i] += B.tmp[i];
  ctx.step.expert_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - te).count();

  if (L.up_shexp.present()) {
    dense_ffn(ctx, L.gate_shexp, L.up_shexp, L.down_shexp, xn, B.tmp.data());
    for (int t = 0; t < T; ++t) {
      float g = 1.f;
      if (L.shexp_gate) {
        g = 1.f / (1.f + std::exp(-kernels::dot(L.shexp_gate, &B.xn[size_t(t) * E], E)));
      }
      kernels::axpy(g, &B.tmp[size_t(t) * E], &B.x[size_t(t) * E], E);
    }
  }
}

void size_buffers(Context::Impl& ctx, int T) {
  const ModelConfig& c = ctx.model.config();
  StepBuffers& B = ctx.buf;
  const size_t t = size_t(T);
  const size_t E = size_t(c.n_embd);
  ensure(B.x, t * E);
  ensure(B.xn, t * E);
  ensure(B.tmp, t * E);
  ensure(B.q, t * c.q_dim());
  ensure(B.attn, t * c.q_dim());
  ensure(B.k, t * c.kv_dim());
  ensure(B.v, t * c.kv_dim());
  if (c.is_moe()) {
    const size_t N = size_t(c.n_expert), K = size_t(c.n_expert_used), F = size_t(c.n_ff_exp);
    ensure(B.router, t * N);
    ensure(B.ids, t * K);
    ensure(B.weights, t * K);
    ensure(B.count, N);
    ensure(B.offset, N + 1);
    ensure(B.row_token, t * K);
    ensure(B.assign_row, t * K);
    ensure(B.xin, t * K * E);
    ensure(B.gate, t * K * F);
    ensure(B.up, t * K * F);
    ensure(B.down, t * K * E);
  }
}

}  // namespace

void forward(Context::Impl& ctx, std::span<const BatchToken> batch) {
  const ModelConfig& c = ctx.model.config();
  StepBuffers& B = ctx.buf;
  const int T = int(batch.size()), E = c.n_embd;
  size_buffers(ctx, T);

  ctx.step = StepStats{};
  ctx.step.n_tokens = T;
  ctx.step.layers.assign(size_t(c.n_layer), LayerStepStats{});
  std::vector<uint8_t> flags(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) {
    flags[size_t(t)] = batch[size_t(t)].flags;
    if ((batch[size_t(t)].flags & kTokenPrefill) == 0) ++ctx.step.n_decode;
  }

  rope_table(c, batch, B.rope_cs);
  // Embedding rows (only the rows of the batch's tokens are read; token_embd is never
  // repacked, so its rows are where the file has them).
  const Weight& emb = ctx.model.token_embd();
  for (int t = 0; t < T; ++t) {
    kernels::dequantize_row(emb.type, emb.data + size_t(batch[size_t(t)].token) * emb.row_bytes,
                            &B.x[size_t(t) * E], E);
    ctx.step.weight_bytes += emb.row_bytes;
  }

  for (int il = 0; il < c.n_layer; ++il) {
    attention(ctx, il, batch);
    feed_forward(ctx, il, batch, flags);
    // T x E values just written, still in cache: names the first layer that went bad.
    check_finite_rows(
        B.x.data(), T, size_t(E), batch, [](int r) { return r; }, "hidden states after layer", il);
  }

  // Final norm and output projection for the tokens that asked for logits.
  B.out_rows.clear();
  for (int t = 0; t < T; ++t) {
    if (batch[size_t(t)].logits) B.out_rows.push_back(t);
  }
  ctx.n_out = int(B.out_rows.size());
  if (ctx.n_out == 0) return;
  ensure(B.out_in, size_t(ctx.n_out) * E);
  for (int i = 0; i < ctx.n_out; ++i) {
    kernels::rmsnorm(&B.x[size_t(B.out_rows[size_t(i)]) * E], ctx.model.output_norm(),
                     &B.out_in[size_t(i) * E], E, c.rms_eps);
  }
  ensure(ctx.out_logits, size_t(ctx.n_out) * c.n_vocab);
  MatIn out_in{B.out_in.data(), ctx.n_out, E, &B.xq_in};
  project(ctx, ctx.model.output(), out_in, ctx.out_logits.data(), ctx.step.weight_bytes);
  check_finite_rows(
      ctx.out_logits.data(), ctx.n_out, size_t(c.n_vocab), batch,
      [&](int r) { return B.out_rows[size_t(r)]; }, "output logits");
}

}  // namespace lynx
