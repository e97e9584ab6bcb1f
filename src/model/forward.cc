// The batched forward pass: one function per block of the transformer layer, reading like
// the model (llama.cpp's build_* graphs are the reference for every architecture). Each
// function takes the operands it reads and writes; statistics go to the StepObserver at
// fixed points (weights read, routing, experts), never through the math.
//
// Shapes: T tokens in the step, E = n_embd, Q = n_head * head_dim, KV = n_head_kv * head_dim,
// N experts, k used per token, F = expert FFN width.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/delta_net.h"
#include "kernels/kernels.h"
#include "kernels/matmul_bf16.h"
#include "model/delta_net_ops.h"
#include "model/finite.h"
#include "model/forward.h"
#include "model/forward_ops.h"
#include "model/gpt_oss_ops.h"
#include "model/swiglu_limit.h"
#include "model/weights.h"

namespace lynx {
namespace fwd {

using kernels::ThreadPool;

// y[T x rows] = W x[T x cols], rows split across the pool. Products with weights that have an
// integer kernel (kernels/types.h int_kernel: Q8_0, Q4_0, K-quants) take the integer path
// (activations quantized to Q8_0 or Q8_K blocks as ggml does) unless the context asked for
// exact activations. BF16/F16 weights in panels take the BF16 kernel in the BF16 fast mode from
// kBf16MinTokens tokens (the input rounded per product: q, k and v round the same rows, which
// costs microseconds).
void project(const Compute& cp, const Weight& w, MatIn& in, float* y, StepObserver& obs) {
  obs.product_input(w, in.x, in.n_tok);
  if (cp.bf16 && in.n_tok >= kernels::kBf16MinTokens &&
      kernels::has_bf16_path(w.type, w.layout, cp.bf16_kernel)) {
    kernels::round_acts_bf16(in.x, in.cols, in.n_tok, in.cols, *cp.bf16);
    kernels::matmul_bf16(cp.bf16_kernel, cp.pool, w.type, w.mat(0), w.rows, w.cols, *cp.bf16, y,
                         w.rows);
  } else if (cp.int_acts && kernels::has_int_path(w.type)) {
    kernels::matmul(cp.pool, w.type, w.mat(0), w.rows, w.cols, in.quantize(cp.pool, w.type), y,
                    w.rows, w.layout);
  } else {
    kernels::matmul(cp.pool, w.type, w.mat(0), w.rows, w.cols, in.x, in.cols, in.n_tok, y, w.rows,
                    w.layout);
  }
  obs.weights_read(w.mat_bytes);
}

// fn(t) for every token t in [0, T), split across the pool from two chunks of kTokenGrain
// tokens up (decode steps stay on the calling thread). For per-token work that is independent
// across tokens, so the bits are the serial loop's: serial, a 512-token prefill's norms, rope
// and residual adds left the other threads waiting (docs/benchmarks.md, "Prefill against
// ik_llama.cpp at 512 and 2048 tokens").
constexpr int64_t kTokenGrain = 32;

template <class F>
void for_tokens(ThreadPool& pool, int T, F&& fn) {
  pool.parallel_for(
      T,
      [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t) fn(int(t));
      },
      kTokenGrain);
}

// B.x += B.tmp over T rows of E, split across the pool by tokens.
void add_residual(ThreadPool& pool, StepBuffers& B, int T, int E) {
  for_tokens(pool, T, [&](int t) {
    float* x = &B.x[size_t(t) * E];
    const float* y = &B.tmp[size_t(t) * E];
    for (int i = 0; i < E; ++i) x[i] += y[i];
  });
}

// B.x rows keep[i] += B.tmp rows i for the n = keep.size() kept rows; add_residual when keep
// is empty (n = T).
void add_rows(ThreadPool& pool, StepBuffers& B, int n, int E, std::span<const int> keep) {
  if (keep.empty()) return add_residual(pool, B, n, E);
  for_tokens(pool, n, [&](int i) {
    float* x = &B.x[size_t(keep[size_t(i)]) * E];
    const float* y = &B.tmp[size_t(i) * E];
    for (int j = 0; j < E; ++j) x[j] += y[j];
  });
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

// (cos, sin) of theta_i = pos * base^(-2i/rd) / ff[i] for every token of the step, computed
// once and shared by all layers and heads (ff: llama.cpp's rope_freqs, 1 when empty). With
// YaRN (ModelConfig::yarn) pair i's frequency blends the interpolated base^(-2i/rd) / factor
// with the original by ramp(i) * ext_factor, and cos and sin are scaled by yarn.mscale.
void rope_table(float base, int rd, std::span<const float> ff, const RopeYarn& y,
                std::span<const BatchToken> batch, ScratchFloats& cs) {
  const int half = rd / 2;
  std::vector<double> freq(size_t(half), 0.0);
  for (int i = 0; i < half; ++i) {
    double extrap = std::pow(double(base), -2.0 * i / rd);
    if (!ff.empty()) extrap /= double(ff[size_t(i)]);
    freq[size_t(i)] = extrap;
    if (y.on) {
      const double t = (double(i) - y.low) / std::max(0.001, double(y.high) - y.low);
      const double mix = (1.0 - std::clamp(t, 0.0, 1.0)) * y.ext_factor;
      freq[size_t(i)] = extrap / y.factor * (1.0 - mix) + extrap * mix;
    }
  }
  const double mag = y.on ? double(y.mscale) : 1.0;
  ensure(cs, batch.size() * size_t(half) * 2);
  for (size_t t = 0; t < batch.size(); ++t) {
    for (int i = 0; i < half; ++i) {
      const double theta = double(batch[t].pos) * freq[size_t(i)];
      cs[(t * half + size_t(i)) * 2] = float(std::cos(theta) * mag);
      cs[(t * half + size_t(i)) * 2 + 1] = float(std::sin(theta) * mag);
    }
  }
}

// The step's tokens grouped by sequence into attention tiles (B.attn_tok / attn_pos hold the
// batch rows and positions, sequence by sequence in batch order): a sequence with one token
// is one tile; one with several is cut into tiles of attention_tile_tokens, the latest
// (longest key range) first so the pool's chunks end on short ones. `rows`, when not empty,
// are the only batch rows that attend (the last layer's rows that return logits).
void group_by_sequence(std::span<const BatchToken> batch, int group, StepBuffers& B,
                       std::span<const int> rows) {
  const int T = rows.empty() ? int(batch.size()) : int(rows.size());
  B.attn_tok.clear();
  B.attn_pos.clear();
  B.attn_tiles.clear();
  B.attn_order.resize(size_t(T));
  for (int t = 0; t < T; ++t) B.attn_order[size_t(t)] = rows.empty() ? t : rows[size_t(t)];
  std::stable_sort(B.attn_order.begin(), B.attn_order.end(), [&](int32_t x, int32_t y) {
    return batch[size_t(x)].seq < batch[size_t(y)].seq;
  });
  for (int32_t t : B.attn_order) {
    B.attn_tok.push_back(t);
    B.attn_pos.push_back(batch[size_t(t)].pos);
  }
  const int tile = kernels::attention_tile_tokens(group);
  for (int b = 0; b < T;) {
    int e = b;
    while (e < T &&
           batch[size_t(B.attn_tok[size_t(e)])].seq == batch[size_t(B.attn_tok[size_t(b)])].seq) {
      ++e;
    }
    for (int x = e; x > b; x -= tile) B.attn_tiles.push_back({std::max(b, x - tile), x});
    b = e;
  }
}

// y[T x w.rows] = W_i x for matrix i of a stack (MLA's per-head up-projections).
void project_mat(const Compute& cp, const Weight& w, int64_t i, MatIn& in, float* y,
                 StepObserver& obs) {
  if (cp.int_acts && kernels::has_int8_path(w.type)) {
    kernels::matmul(cp.pool, w.type, w.mat(i), w.rows, w.cols, in.quantize(cp.pool), y, w.rows,
                    w.layout);
  } else {
    kernels::matmul(cp.pool, w.type, w.mat(i), w.rows, w.cols, in.x, in.cols, in.n_tok, y, w.rows,
                    w.layout);
  }
  obs.weights_read(w.mat_bytes);
}

}  // namespace fwd

namespace {

using namespace fwd;  // NOLINT: the shared helpers (model/forward_ops.h)

// Self-attention block of layer il: B.x += Wo · attn(norm(B.x)); the batch's K/V go into
// the cache at their positions.
// The layer's geometry is its own (ModelConfig::layer_head_dim: gemma4's full layers are
// wider, with fewer K/V heads, a rope of their own and, without attn_v, values that are the
// K projection). `keep`, when not empty: only those rows attend and go through the output
// projection (the last layer's rows that return logits, as in feed_forward); every row's K/V
// still goes into the cache.
void attention(const Compute& cp, const ModelConfig& c, const LayerWeights& L, int il,
               std::span<const BatchToken> batch, KvCache& kv, StepBuffers& B, StepObserver& obs,
               std::span<const int> keep = {}) {
  const int T = int(batch.size());
  const int hd = c.layer_head_dim(il), n_kv = c.layer_n_head_kv(il), H = c.layer_n_head(il);
  const int E = c.n_embd, Q = H * hd, KV = n_kv * hd;
  const int window = c.layer_kinds[size_t(il)].window;
  const bool alt = c.layer_alt(il);
  const KvRows& kr = kv.rows[size_t(il)];

  for_tokens(cp.pool, T, [&](int t) {
    kernels::rmsnorm(&B.x[size_t(t) * E], L.attn_norm, &B.xn[size_t(t) * E], E, c.rms_eps);
  });
  MatIn xn{B.xn.data(), T, E, &B.xq_in};
  if (c.attn_q_gate) {  // per head hd query values, then hd gate values
    project(cp, L.wq, xn, B.qg.data(), obs);
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < c.n_head; ++h) {
        const float* src = &B.qg[size_t(t) * 2 * Q + size_t(h) * 2 * hd];
        std::memcpy(&B.q[size_t(t) * Q + size_t(h) * hd], src, sizeof(float) * hd);
        std::memcpy(&B.gate[size_t(t) * Q + size_t(h) * hd], src + hd, sizeof(float) * hd);
      }
    }
  } else {
    project(cp, L.wq, xn, B.q.data(), obs);
  }
  project(cp, L.wk, xn, B.k.data(), obs);
  if (L.wv.present()) {
    project(cp, L.wv, xn, B.v.data(), obs);
  } else {  // K = V (gemma4's full layers): the values are the raw K projection
    std::memcpy(B.v.data(), B.k.data(), sizeof(float) * size_t(T) * KV);
  }
  add_bias(L.bq, B.q.data(), T, Q);
  add_bias(L.bk, B.k.data(), T, KV);
  add_bias(L.bv, B.v.data(), T, KV);

  for_tokens(cp.pool, T, [&](int t) {
    float* q = &B.q[size_t(t) * Q];
    float* k = &B.k[size_t(t) * KV];
    if (c.qk_norm == QKNorm::kFull) {
      kernels::rmsnorm(q, L.q_norm, q, Q, c.rms_eps);
      kernels::rmsnorm(k, L.k_norm, k, KV, c.rms_eps);
    } else if (c.qk_norm == QKNorm::kPerHead) {
      for (int h = 0; h < H; ++h) kernels::rmsnorm(q + h * hd, L.q_norm, q + h * hd, hd, c.rms_eps);
      for (int h = 0; h < n_kv; ++h)
        kernels::rmsnorm(k + h * hd, L.k_norm, k + h * hd, hd, c.rms_eps);
    }
    if (c.v_norm) {  // gemma4: each value head RMS-normed, without weights
      float* v = &B.v[size_t(t) * KV];
      for (int h = 0; h < n_kv; ++h)
        kernels::rmsnorm(v + h * hd, nullptr, v + h * hd, hd, c.rms_eps);
    }
    // The first rd dims of each head rotate (rd < hd: partial rotary), the rest pass through.
    const int rd = alt ? c.alt.n_rot : c.rope_dim();
    const float* cs = &(alt ? B.rope_cs_alt : B.rope_cs)[size_t(t) * rd];  // rd/2 (cos, sin)
    for (int h = 0; h < H; ++h) rope(q + h * hd, rd, cs, c.rope);
    for (int h = 0; h < n_kv; ++h) rope(k + h * hd, rd, cs, c.rope);
    if (c.qk_norm == QKNorm::kPerHeadAfterRope) {
      for (int h = 0; h < H; ++h) kernels::rmsnorm(q + h * hd, L.q_norm, q + h * hd, hd, c.rms_eps);
      for (int h = 0; h < n_kv; ++h)
        kernels::rmsnorm(k + h * hd, L.k_norm, k + h * hd, hd, c.rms_eps);
    }
  });
  // Every token's K/V goes into its sequence's cache before any attention runs, so tokens of
  // one sequence in the same step (a prefill chunk) see their predecessors. Serial, in batch
  // order: with a sliding window two tokens of a step may share a ring row.
  for (int t = 0; t < T; ++t) {
    const int pos = batch[size_t(t)].pos;
    const float* k = &B.k[size_t(t) * KV];
    SequenceLayer& sl = kv.layer(batch[size_t(t)].seq, il);
    const size_t row = cache_row(kv.sequence(batch[size_t(t)].seq), window, pos);
    const float* v = &B.v[size_t(t) * KV];
    const size_t k_rows = sl.k.size() / kr.k_row, v_rows = sl.v.size() / kr.v_row;
    for (int h = 0; h < n_kv; ++h) {
      kernels::kv_cache_store(kv.k_type, k + h * hd,
                              &sl.k[kv_head_offset(kr.k_head, k_rows, h, row)], hd);
      kernels::kv_cache_store(kv.v_type, v + h * hd,
                              &sl.v[kv_head_offset(kr.v_head, v_rows, h, row)], hd);
    }
  }
  const float scale = c.kq_scale > 0 ? c.kq_scale : c.yarn.kq_mul / std::sqrt(float(hd));
  const int group = H / n_kv;
  // Jobs per (query tile, KV head), every tile through the blocked kernel: a decode token's
  // tile reads each K/V row once for the group's heads (a per-head dot/axpy loop read it once
  // per head, 0.27x ik_llama.cpp's decode at 8k context; docs/benchmarks.md).
  group_by_sequence(batch, group, B, keep);
  const int64_t n_tiles = int64_t(B.attn_tiles.size());
  const auto run_jobs = [&](int64_t b, int64_t e, int tid) {
    std::vector<float>& sc = B.scores[size_t(tid)];
    for (int64_t job = b; job < e; ++job) {
      const AttnTile& tile = B.attn_tiles[size_t(job / n_kv)];
      const int kvh = int(job % n_kv);
      const int32_t seq_id = batch[size_t(B.attn_tok[size_t(tile.begin)])].seq;
      const SequenceLayer& sl = kv.layer(seq_id, il);
      const Sequence& seq = kv.sequence(seq_id);
      kernels::AttentionGroup a;
      a.q = &B.q[size_t(kvh) * group * hd];
      a.q_stride = Q;
      a.out = &B.attn[size_t(kvh) * group * hd];
      a.out_stride = Q;
      a.tok = &B.attn_tok[size_t(tile.begin)];
      a.pos = &B.attn_pos[size_t(tile.begin)];
      a.n_tok = tile.end - tile.begin;
      a.n_head = group;
      a.hd = hd;
      a.k = &sl.k[kv_head_offset(kr.k_head, sl.k.size() / kr.k_row, kvh, 0)];
      a.v = &sl.v[kv_head_offset(kr.v_head, sl.v.size() / kr.v_row, kvh, 0)];
      a.k_stride = int64_t(kr.k_head);
      a.v_stride = int64_t(kr.v_head);
      a.k_type = kv.k_type;
      a.v_type = kv.v_type;
      a.ring = window > 0 ? seq.ring : 0;
      a.window = window;
      a.scale = scale;
      a.sinks = L.attn_sinks ? L.attn_sinks + size_t(kvh) * group : nullptr;
      kernels::attention_group(a, sc);
    }
  };
  // A prefill's later query tiles see more keys (causal): fine chunks keep the costliest
  // ones from ending the call on one thread.
  const int n = keep.empty() ? T : int(keep.size());
  cp.pool.parallel_for(n_tiles * n_kv, run_jobs, 1, kernels::chunks_per_thread_for(n));
  if (L.wgate.present()) {  // step35: head h's output times sigmoid(W_g xn)[h]
    ensure(B.attn_gate, size_t(T) * H);
    project(cp, L.wgate, xn, B.attn_gate.data(), obs);
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const float g = 1.f / (1.f + std::exp(-B.attn_gate[size_t(t) * H + size_t(h)]));
        float* o = &B.attn[size_t(t) * Q + size_t(h) * hd];
        for (int i = 0; i < hd; ++i) o[i] *= g;
      }
    }
  }
  if (c.attn_q_gate) {
    for (size_t i = 0; i < size_t(T) * Q; ++i) B.attn[i] *= 1.f / (1.f + std::exp(-B.gate[i]));
  }
  compact_rows(B.attn.data(), size_t(Q), keep);
  MatIn attn{B.attn.data(), n, Q, &B.xq_mid};
  project(cp, L.wo, attn, B.tmp.data(), obs);
  add_bias(L.bo, B.tmp.data(), n, E);
  if (L.post_attn_norm) {  // gemma's sandwich norm on the block's output
    for (int t = 0; t < n; ++t) {
      float* r = &B.tmp[size_t(t) * E];
      kernels::rmsnorm(r, L.post_attn_norm, r, E, c.rms_eps);
    }
  }
  add_rows(cp.pool, B, n, E, keep);
}

// Gated DeltaNet block of layer il (qwen3next, qwen35moe; kernels/delta_net.h):
// B.x += ssm_out(gated_norm(delta_rule(conv(attn_qkv(norm(B.x)))), attn_gate(norm(B.x)))),
// each sequence's tokens in order through its state slot (KvCache: SequenceLayer::conv and
// ::state, allocated by the Context): token by token (delta_rule_step), or for a run of at
// least Compute::delta_chunk_min tokens (prefill) in chunks (delta_rule_chunked: matrix
// products, about 2x less CPU from 8 tokens; within float rounding of the recurrence, not bit
// for bit). Sequences run in parallel, and within one the conv's channels and the delta
// rule's value heads.
void delta_net(const Compute& cp, const ModelConfig& c, const LayerWeights& L, int il,
               std::span<const BatchToken> batch, KvCache& kv, StepBuffers& B, StepObserver& obs) {
  constexpr int kConvChunk = 512;  // channels per conv job
  const DeltaNet& d = c.delta_net;
  const int T = int(batch.size()), E = c.n_embd;
  const int CD = d.conv_dim(), VD = d.value_dim(), KD = d.key_dim(), NV = d.n_v_heads;
  const int dk = d.head_k_dim, dv = d.head_v_dim, K = d.conv_kernel;

  for (int t = 0; t < T; ++t) {
    kernels::rmsnorm(&B.x[size_t(t) * E], L.attn_norm, &B.xn[size_t(t) * E], E, c.rms_eps);
  }
  MatIn xn{B.xn.data(), T, E, &B.xq_in};
  project(cp, L.ssm_qkv, xn, B.ssm_qkv.data(), obs);  // [T x CD]
  project(cp, L.ssm_z, xn, B.ssm_z.data(), obs);      // [T x VD]
  // Per value head the raw b (into ssm_beta) and a (into ssm_decay).
  if (L.ssm_ba.present()) {  // per key head its n_v/n_k b values, then as many a values
    project(cp, L.ssm_ba, xn, B.ssm_ba.data(), obs);
    const int r = NV / d.n_k_heads;
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < NV; ++h) {
        const float* g = &B.ssm_ba[size_t(t) * 2 * NV + size_t(h / r) * 2 * r];
        B.ssm_beta[size_t(t) * NV + h] = g[h % r];
        B.ssm_decay[size_t(t) * NV + h] = g[r + h % r];
      }
    }
  } else {
    project(cp, L.ssm_beta, xn, B.ssm_beta.data(), obs);
    project(cp, L.ssm_alpha, xn, B.ssm_decay.data(), obs);
  }
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < NV; ++h) {
      float& b = B.ssm_beta[size_t(t) * NV + h];
      float& a = B.ssm_decay[size_t(t) * NV + h];
      b = 1.f / (1.f + std::exp(-b));
      a = std::exp(L.ssm_a[h] * softplus(a + L.ssm_dt[h]));
    }
  }

  // The step's tokens by sequence, in batch order within each (B.attn_tok), and the runs.
  group_by_sequence(batch, 1, B);
  std::vector<std::pair<int, int>> runs;  // [begin, end) of attn_tok
  // Per run: whether it takes the chunked delta rule (long enough, and its tokens consecutive
  // batch rows, which the kernel reads as strided rows).
  std::vector<char> chunked;
  for (int b = 0; b < T;) {
    int e = b;
    const int32_t seq = batch[size_t(B.attn_tok[size_t(b)])].seq;
    bool consecutive = true;
    while (e < T && batch[size_t(B.attn_tok[size_t(e)])].seq == seq) {
      consecutive = consecutive && B.attn_tok[size_t(e)] == B.attn_tok[size_t(b)] + (e - b);
      ++e;
    }
    runs.emplace_back(b, e);
    chunked.push_back(cp.delta_chunk_min > 0 && e - b >= cp.delta_chunk_min && consecutive);
    b = e;
  }
  const int64_t n_runs = int64_t(runs.size());
  const int n_chunks = (CD + kConvChunk - 1) / kConvChunk;
  cp.pool.parallel_for(n_runs * n_chunks, [&](int64_t jb, int64_t je, int) {
    for (int64_t job = jb; job < je; ++job) {
      const auto [b, e] = runs[size_t(job / n_chunks)];
      const int c0 = int(job % n_chunks) * kConvChunk, c1 = std::min(CD, c0 + kConvChunk);
      SequenceLayer& sl = kv.layer(batch[size_t(B.attn_tok[size_t(b)])].seq, il);
      for (int i = b; i < e; ++i) {
        kernels::conv_step(&B.ssm_qkv[size_t(B.attn_tok[size_t(i)]) * CD], sl.conv.data(),
                           L.ssm_conv, CD, K, c0, c1);
      }
    }
  });
  const float q_scale = 1.f / std::sqrt(float(dk));
  for (int t = 0; t < T; ++t) {
    float* qkv = &B.ssm_qkv[size_t(t) * CD];
    for (int h = 0; h < d.n_k_heads; ++h) {
      l2_normalize(qkv + size_t(h) * dk, dk, q_scale);
      l2_normalize(qkv + KD + size_t(h) * dk, dk, 1.f);
    }
  }
  cp.pool.parallel_for(n_runs * NV, [&](int64_t jb, int64_t je, int tid) {
    std::vector<float>& mem = B.scores[size_t(tid)];
    ensure(mem, size_t(dv));
    for (int64_t job = jb; job < je; ++job) {
      const auto [b, e] = runs[size_t(job / NV)];
      const int h = int(job % NV), kh = d.key_head(h);
      SequenceLayer& sl = kv.layer(batch[size_t(B.attn_tok[size_t(b)])].seq, il);
      float* S = sl.state.data() + size_t(h) * dk * dv;
      if (chunked[size_t(job / NV)]) {
        const size_t t0 = size_t(B.attn_tok[size_t(b)]);
        const float* qkv = &B.ssm_qkv[t0 * CD];
        ensure(mem, kernels::delta_rule_chunked_scratch(dk, dv));
        const kernels::DeltaRuleRows rows{qkv + size_t(kh) * dk,
                                          qkv + KD + size_t(kh) * dk,
                                          qkv + 2 * KD + size_t(h) * dv,
                                          CD,
                                          &B.ssm_decay[t0 * NV + h],
                                          &B.ssm_beta[t0 * NV + h],
                                          NV,
                                          &B.ssm_o[t0 * VD + size_t(h) * dv],
                                          VD};
        kernels::delta_rule_chunked(S, rows, e - b, dk, dv, mem.data());
      }
      for (int i = b; i < e; ++i) {
        const size_t t = size_t(B.attn_tok[size_t(i)]);
        const float* qkv = &B.ssm_qkv[t * CD];
        float* out = &B.ssm_o[t * VD + size_t(h) * dv];
        if (!chunked[size_t(job / NV)]) {
          kernels::delta_rule_step(S, qkv + size_t(kh) * dk, qkv + KD + size_t(kh) * dk,
                                   qkv + 2 * KD + size_t(h) * dv, B.ssm_decay[t * NV + h],
                                   B.ssm_beta[t * NV + h], dk, dv, mem.data(), out);
        }
        // The gated norm: rmsnorm(out) ssm_norm silu(z), per head.
        kernels::rmsnorm(out, L.ssm_norm, out, dv, c.rms_eps);
        kernels::swiglu(&B.ssm_z[t * VD + size_t(h) * dv], out, out, dv);
      }
    }
  });
  MatIn o{B.ssm_o.data(), T, VD, &B.xq_mid};
  project(cp, L.ssm_out, o, B.tmp.data(), obs);
  for (size_t i = 0; i < size_t(T) * E; ++i) B.x[i] += B.tmp[i];
}

// Dense FFN over all T rows of `in`: out = down(act(gate in) * up in), act SiLU (SwiGLU) or
// GELU (GeGLU, gemma); a SwiGLU with limit > 0 is clamped (step35, swiglu_limited).
void dense_ffn(const Compute& cp, const Weight& gate, const Weight& up, const Weight& down,
               MatIn& in, float* out, StepBuffers& B, StepObserver& obs,
               DenseAct act = DenseAct::kSilu, float limit = 0.f) {
  const int T = in.n_tok;
  const int64_t F = gate.rows;
  ensure(B.sh_gate, size_t(T) * F);
  ensure(B.sh_up, size_t(T) * F);
  project(cp, gate, in, B.sh_gate.data(), obs);
  project(cp, up, in, B.sh_up.data(), obs);
  // Row blocks across the pool: at prefill T * F is millions of values (Gemma 4's dense
  // GeGLU: 512 x 2,112 per layer), too many for one thread.
  float* const g = B.sh_gate.data();
  const float* const u = B.sh_up.data();
  cp.pool.parallel_for(
      T,
      [&](int64_t t0, int64_t t1, int) {
        const size_t o = size_t(t0) * size_t(F);
        const int64_t n = (t1 - t0) * F;
        if (act == DenseAct::kGeluTanh) {
          kernels::geglu(g + o, u + o, g + o, n);
        } else if (limit > 0.f) {
          swiglu_limited(g + o, u + o, g + o, n, limit);
        } else {
          kernels::swiglu(g + o, u + o, g + o, n);
        }
      },
      std::max<int64_t>(1, 16384 / std::max<int64_t>(F, 1)));
  MatIn hidden{B.sh_gate.data(), T, F, &B.xq_mid};
  project(cp, down, hidden, out, obs);
}

// Router -> policy of layer il over the normed rows xn: the choice lands in B.ids / B.weights.
// The router stays F32 as llama.cpp keeps it.
void route(const Compute& cp, const ModelConfig& c, const LayerWeights& L, int il,
           std::span<const BatchToken> batch, const Router& router, MatIn& xn, StepBuffers& B,
           StepObserver& obs, const uint8_t* resident, const float* cost) {
  project(cp, L.router, xn, B.router.data(), obs);
  add_bias(L.router_b, B.router.data(), xn.n_tok, c.n_expert);
  if (router.override_logits) router.override_logits(il, batch, B.router.data());
  check_finite_rows(
      B.router.data(), xn.n_tok, size_t(c.n_expert), batch, [](int r) { return r; },
      "router logits", il);
  RoutingInput in;
  in.logits = B.router.data();
  if (needs_selection_keys(c.gating)) {
    selection_keys(c.gating, B.router.data(), L.exp_probs_b, xn.n_tok, B.select.data());
    in.select = B.select.data();
  }
  in.flags = B.flags.data();
  in.n_tokens = xn.n_tok;
  in.layer = il;
  in.gating = &c.gating;
  in.resident = resident;
  in.cost = cost;
  RoutingOutput out{B.ids.data(), B.weights.data()};
  obs.routing_begin();
  router.policy.route(in, out);
  obs.routed(in, out);
}

// RMS-norms each of the T rows of y (E wide) in place with weights w.
void norm_rows(ThreadPool& pool, float* y, const float* w, int T, int E, float eps) {
  for_tokens(pool, T,
             [&](int t) { kernels::rmsnorm(&y[size_t(t) * E], w, &y[size_t(t) * E], E, eps); });
}

// gemma4's FFN block of layer il: the dense GeGLU MLP and the routed experts side by side on
// the same x, B.x += post_ffw_norm(post_ffw_norm_1(MLP(ffn_norm(x))) +
// post_ffw_norm_2(experts(pre_ffw_norm_2(x)))), the router reading RMSNorm(x) (no weight)
// times router_scale / sqrt(E) and each chosen weight (after the policy) times its expert's
// down_exps_scale. `keep` as for feed_forward: the router sees every row, the MLP and the
// experts run the kept rows only.
void moe_dense_ffn(const Compute& cp, const ModelConfig& c, const LayerWeights& L, int il,
                   std::span<const BatchToken> batch, const Router& router, ExpertExecutor& experts,
                   StepBuffers& B, StepObserver& obs, std::span<const int> keep) {
  const int T = int(batch.size()), E = c.n_embd, K = c.n_expert_used;
  const int n = keep.empty() ? T : int(keep.size());
  auto row = [&](int i) { return keep.empty() ? i : keep[size_t(i)]; };  // B.x row of result i
  for_tokens(cp.pool, n, [&](int i) {
    kernels::rmsnorm(&B.x[size_t(row(i)) * E], L.ffn_norm, &B.xn[size_t(i) * E], E, c.rms_eps);
  });
  MatIn xn{B.xn.data(), n, E, &B.xq_in};
  dense_ffn(cp, L.ffn_gate, L.ffn_up, L.ffn_down, xn, B.ffn_out.data(), B, obs, c.dense_act);
  norm_rows(cp.pool, B.ffn_out.data(), L.post_ffw_norm_1, n, E, c.rms_eps);

  const float root = 1.f / std::sqrt(float(E));
  for_tokens(cp.pool, T, [&](int t) {
    float* r = &B.xn[size_t(t) * E];
    kernels::rmsnorm(&B.x[size_t(t) * E], nullptr, r, E, c.rms_eps);
    if (L.router_scale) {
      for (int i = 0; i < E; ++i) r[i] = r[i] * L.router_scale[i] * root;
    }
  });
  MatIn xr{B.xn.data(), T, E, &B.xq_in};
  const uint8_t* resident = experts.resident(il);
  const float* cost = experts.cost(il);  // after resident(il): the same snapshot
  route(cp, c, L, il, batch, router, xr, B, obs, resident, cost);
  compact_rows(B.ids.data(), size_t(K), keep);
  compact_rows(B.weights.data(), size_t(K), keep);
  if (L.down_exps_scale) {
    for (size_t i = 0; i < size_t(n) * K; ++i) B.weights[i] *= L.down_exps_scale[B.ids[i]];
  }
  for_tokens(cp.pool, n, [&](int i) {
    kernels::rmsnorm(&B.x[size_t(row(i)) * E], L.pre_ffw_norm_2, &B.xn[size_t(i) * E], E,
                     c.rms_eps);
  });
  MatIn xe{B.xn.data(), n, E, &B.xq_in};
  obs.experts_begin();
  B.plan.build(B.ids.data(), B.weights.data(), n, K, c.n_expert);
  experts.run(B.plan, xe, il, L, B.tmp.data());
  obs.experts_done(il, B.plan, L.gate_exps.mat_bytes + L.up_exps.mat_bytes + L.down_exps.mat_bytes);
  for_tokens(cp.pool, n, [&](int i) {
    float* y = &B.tmp[size_t(i) * E];
    kernels::rmsnorm(y, L.post_ffw_norm_2, y, E, c.rms_eps);
    const float* d = &B.ffn_out[size_t(i) * E];
    for (int j = 0; j < E; ++j) y[j] += d[j];
    kernels::rmsnorm(y, L.post_ffw_norm, y, E, c.rms_eps);
  });
  add_rows(cp.pool, B, n, E, keep);
}

// Feed-forward block of layer il: B.x += FFN(norm(B.x)), MoE (router, policy, routed
// experts through the executor, shared expert) or dense. `keep`, when not empty, lists the
// rows (ascending) whose result anything reads after this block: the last layer's rows that
// return logits. Only those run through the experts and the dense and shared FFNs, the other
// rows of B.x are left as they are. The router and the policy still see every row, so a
// batch-aware policy chooses what it would for the whole batch, and each kept row computes
// exactly what it did (every kernel computes a token's row the same way whatever the other
// rows are). A 512-token prompt then runs one token through the last layer's FFN instead of
// 512, as llama.cpp and ik_llama.cpp do: a few percent of a deep model's prefill, most of a
// 2-layer file's FFN work (docs/benchmarks.md).
void feed_forward(const Compute& cp, const ModelConfig& c, const LayerWeights& L, int il,
                  std::span<const BatchToken> batch, const Router& router, ExpertExecutor& experts,
                  StepBuffers& B, StepObserver& obs, std::span<const int> keep = {}) {
  const int T = int(batch.size()), E = c.n_embd;
  if (c.layer_kinds[size_t(il)].ffn == FfnKind::kMoeDense) {
    moe_dense_ffn(cp, c, L, il, batch, router, experts, B, obs, keep);
    return;
  }

  for_tokens(cp.pool, T, [&](int t) {
    kernels::rmsnorm(&B.x[size_t(t) * E], L.ffn_norm, &B.xn[size_t(t) * E], E, c.rms_eps);
  });
  MatIn xn{B.xn.data(), T, E, &B.xq_in};
  const int n = keep.empty() ? T : int(keep.size());
  auto row = [&](int i) { return keep.empty() ? i : keep[size_t(i)]; };  // B.x row of result i
  if (!c.layer_routed(il)) {
    compact_rows(B.xn.data(), size_t(E), keep);
    MatIn xk{B.xn.data(), n, E, &B.xq_in};
    dense_ffn(cp, L.ffn_gate, L.ffn_up, L.ffn_down, xk, B.tmp.data(), B, obs, c.dense_act,
              c.layer_swiglu_ffn(il));
    add_rows(cp.pool, B, n, E, keep);
    return;
  }

  const uint8_t* resident = experts.resident(il);
  const float* cost = experts.cost(il);  // after resident(il): the same snapshot
  route(cp, c, L, il, batch, router, xn, B, obs, resident, cost);
  const int K = c.n_expert_used;
  compact_rows(B.xn.data(), size_t(E), keep);
  compact_rows(B.ids.data(), size_t(K), keep);
  compact_rows(B.weights.data(), size_t(K), keep);
  MatIn xk{B.xn.data(), n, E, &B.xq_in};
  obs.experts_begin();
  B.plan.build(B.ids.data(), B.weights.data(), n, K, c.n_expert);
  experts.run(B.plan, xk, il, L, B.tmp.data());
  add_rows(cp.pool, B, n, E, keep);
  obs.experts_done(il, B.plan, L.gate_exps.mat_bytes + L.up_exps.mat_bytes + L.down_exps.mat_bytes);

  if (c.layer_kinds[size_t(il)].ffn == FfnKind::kMoeShared) {
    dense_ffn(cp, L.gate_shexp, L.up_shexp, L.down_shexp, xk, B.tmp.data(), B, obs, DenseAct::kSilu,
              c.layer_swiglu_ffn(il));
    for (int i = 0; i < n; ++i) {
      float g = 1.f;
      if (L.shexp_gate) {  // qwen2moe: the shared expert scaled by sigmoid(gate . x)
        g = 1.f / (1.f + std::exp(-kernels::dot(L.shexp_gate, &B.xn[size_t(i) * E], E)));
      }
      kernels::axpy(g, &B.tmp[size_t(i) * E], &B.x[size_t(row(i)) * E], E);
    }
  }
}

void size_buffers(const ModelConfig& c, int T, int n_threads, StepBuffers& B) {
  const size_t t = size_t(T);
  const size_t E = size_t(c.n_embd);
  ensure(B.x, t * E);
  ensure(B.xn, t * E);
  ensure(B.tmp, t * E);
  ensure(B.q, t * c.max_q_dim());
  ensure(B.attn, t * c.max_q_dim());
  ensure(B.k, t * c.max_kv_dim());
  ensure(B.v, t * c.max_kv_dim());
  ensure(B.ffn_out, t * E);
  ensure(B.flags, t);
  ensure(B.scores, size_t(n_threads));
  if (c.attn_q_gate) {
    ensure(B.qg, t * 2 * c.max_q_dim());
    ensure(B.gate, t * c.max_q_dim());
  }
  if (c.delta_net.n_v_heads > 0) {
    const DeltaNet& d = c.delta_net;
    ensure(B.ssm_qkv, t * d.conv_dim());
    ensure(B.ssm_z, t * d.value_dim());
    ensure(B.ssm_ba, t * 2 * d.n_v_heads);
    ensure(B.ssm_beta, t * d.n_v_heads);
    ensure(B.ssm_decay, t * d.n_v_heads);
    ensure(B.ssm_o, t * d.value_dim());
  }
  if (c.is_moe()) {
    const size_t N = size_t(c.n_expert), K = size_t(c.n_expert_used);
    ensure(B.router, t * N);
    if (needs_selection_keys(c.gating)) ensure(B.select, t * N);
    ensure(B.ids, t * K);
    ensure(B.weights, t * K);
  }
}

// Final norm and output projection for the tokens that asked for logits.
void output_logits(const Compute& cp, const Model& model, std::span<const BatchToken> batch,
                   StepBuffers& B, StepLogits& out, StepObserver& obs) {
  const ModelConfig& c = model.config();
  const int T = int(batch.size()), E = c.n_embd;
  B.out_rows.clear();
  for (int t = 0; t < T; ++t) {
    if (batch[size_t(t)].logits) B.out_rows.push_back(t);
  }
  out.n = int(B.out_rows.size());
  if (out.n == 0) return;
  ensure(B.out_in, size_t(out.n) * E);
  for (int i = 0; i < out.n; ++i) {
    kernels::rmsnorm(&B.x[size_t(B.out_rows[size_t(i)]) * E], model.output_norm(),
                     &B.out_in[size_t(i) * E], E, c.rms_eps);
  }
  ensure(out.values, size_t(out.n) * c.n_vocab);
  MatIn out_in{B.out_in.data(), out.n, E, &B.xq_in};
  project(cp, model.output(), out_in, out.values.data(), obs);
  if (c.final_softcap > 0) {
    // A row of Gemma's 262,144 logits per token: B rows per decode step, split across the pool.
    const int64_t V = c.n_vocab;
    cp.pool.parallel_for(
        int64_t(out.n) * V,
        [&](int64_t i0, int64_t i1, int) {
          kernels::softcap(out.values.data() + i0, i1 - i0, c.final_softcap);
        },
        16384);
  }
  check_finite_rows(
      out.values.data(), out.n, size_t(c.n_vocab), batch,
      [&](int r) { return B.out_rows[size_t(r)]; }, "output logits");
}

}  // namespace

void forward(const ForwardOperands& op, std::span<const BatchToken> batch) {
  const ModelConfig& c = op.model.config();
  StepBuffers& B = op.buf;
  const int T = int(batch.size()), E = c.n_embd;
  size_buffers(c, T, op.compute.pool.size(), B);
  op.observer.begin_step(batch);
  for (int t = 0; t < T; ++t) B.flags[size_t(t)] = batch[size_t(t)].flags;

  rope_table(c.rope_base, c.rope_dim(), {}, c.yarn, batch, B.rope_cs);
  if (c.alt.n_rot > 0) {
    rope_table(c.alt.rope_base, c.alt.n_rot, c.alt.freq_factors, RopeYarn{}, batch, B.rope_cs_alt);
  }
  // Embedding rows (only the rows of the batch's tokens are read). An embedding tied to the
  // output is packed for the output's product (Model::pack_weights), so a row is gathered
  // from its group first.
  const Weight& emb = op.model.token_embd();
  for (int t = 0; t < T; ++t) {
    const int64_t tok = batch[size_t(t)].token;
    const uint8_t* row = emb.data + size_t(tok) * emb.row_bytes;
    if (emb.layout != kernels::WeightLayout::kRows) {
      B.embd_row.resize(emb.row_bytes);
      kernels::read_row(emb.type, emb.layout, emb.data, emb.cols, tok, B.embd_row.data());
      row = B.embd_row.data();
    }
    kernels::dequantize_row(emb.type, row, &B.x[size_t(t) * E], E);
    if (c.embd_scale > 0) {  // gemma: embeddings times sqrt(n_embd)
      for (int i = 0; i < E; ++i) B.x[size_t(t) * E + i] *= c.embd_scale;
    }
    op.observer.weights_read(emb.row_bytes);
  }

  // The rows the last layer's FFN must finish (feed_forward's `keep`): those that return
  // logits (at least one: a prompt chunk before the last returns none, and its last row then
  // keeps the layer's products running as in any step), unless that is every row, or an
  // activation hook (imatrix) wants every row's inputs to every product.
  std::vector<int>& keep = B.keep_rows;
  keep.clear();
  for (int t = 0; t < T; ++t) {
    if (batch[size_t(t)].logits) keep.push_back(t);
  }
  if (keep.empty() && T > 0) keep.push_back(T - 1);
  if (int(keep.size()) == T || op.observer.has_activation_hook()) keep.clear();

  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = op.model.layer(il);
    const std::span<const int> last = il == c.n_layer - 1 ? keep : std::span<const int>();
    if (c.layer_kinds[size_t(il)].attn == AttnKind::kMla) {
      fwd::mla_attention(op.compute, c, L, il, batch, op.kv, B, op.observer, last);
    } else if (c.layer_kinds[size_t(il)].attn == AttnKind::kDeltaNet) {
      delta_net(op.compute, c, L, il, batch, op.kv, B, op.observer);
    } else {
      attention(op.compute, c, L, il, batch, op.kv, B, op.observer, last);
    }
    feed_forward(op.compute, c, L, il, batch, op.router, op.experts, B, op.observer, last);
    if (L.out_scale) {  // gemma4's layer_scalar: the whole hidden state scaled
      for (size_t i = 0; i < size_t(T) * E; ++i) B.x[i] *= L.out_scale[0];
    }
    // T x E values just written, still in cache: names the first layer that went bad.
    check_finite_rows(
        B.x.data(), T, size_t(E), batch, [](int r) { return r; }, "hidden states after layer", il);
  }
  output_logits(op.compute, op.model, batch, B, op.logits, op.observer);
}

}  // namespace lynx
