// Multi-head latent attention, the attention block of deepseek2 and of the families that run
// as it (mistral4, glm-dsa): the absorbed form over the cached latents for decode (and by
// default for prefill), the decompressed form for long prefill runs when asked for
// (ContextOptions::mla_decompress_min). Called by the forward pass (forward.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "model/forward_ops.h"

namespace lynx::fwd {
namespace {

// MLA's attention over the latent cache: the absorbed form is attention with one KV head
// of dims kv_lora + rope whose values are the first kv_lora dims of its keys, which the
// blocked kernel runs (each latent tile decoded once for kMlaHeads heads). In: B.mla_q
// [H x T x R] and the rope part of B.q; out: B.mla_o [H x T x R]. With `keep` (the last
// layer's rows that return logits) only those rows attend, and head h's row i of B.mla_o is
// kept row i's.
void mla_blocked(const Compute& cp, const ModelConfig& c, int il, std::span<const BatchToken> batch,
                 KvCache& kv, StepBuffers& B, float scale, std::span<const int> keep) {
  constexpr int kMlaHeads = 8;  // heads per job: decode of one sequence still splits
  const int T = int(batch.size()), H = c.n_head;
  const int R = c.kv_lora_rank, nope = c.qk_nope_dim, rd = c.qk_rope_dim;
  const int hd = nope + rd, Q = H * hd, CK = R + rd;
  ensure(B.mla_qcat, size_t(T) * H * CK);
  ensure(B.mla_ocat, size_t(T) * H * R);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      float* dst = &B.mla_qcat[(size_t(t) * H + size_t(h)) * CK];
      std::memcpy(dst, &B.mla_q[(size_t(h) * T + size_t(t)) * R], sizeof(float) * R);
      std::memcpy(dst + R, &B.q[size_t(t) * Q + size_t(h) * hd + nope], sizeof(float) * rd);
    }
  }
  const int chunk = std::min(H, kMlaHeads), n_chunks = (H + chunk - 1) / chunk;
  group_by_sequence(batch, chunk, B, keep);
  const int64_t n_tiles = int64_t(B.attn_tiles.size());
  cp.pool.parallel_for(n_tiles * n_chunks, [&](int64_t b, int64_t e, int tid) {
    for (int64_t job = b; job < e; ++job) {
      const AttnTile& tile = B.attn_tiles[size_t(job / n_chunks)];
      const int h0 = int(job % n_chunks) * chunk;
      const SequenceLayer& sl = kv.layer(batch[size_t(B.attn_tok[size_t(tile.begin)])].seq, il);
      kernels::AttentionGroup a;
      a.q = &B.mla_qcat[size_t(h0) * CK];
      a.q_stride = int64_t(H) * CK;
      a.out = &B.mla_ocat[size_t(h0) * R];
      a.out_stride = int64_t(H) * R;
      a.tok = &B.attn_tok[size_t(tile.begin)];
      a.pos = &B.attn_pos[size_t(tile.begin)];
      a.n_tok = tile.end - tile.begin;
      a.n_head = std::min(chunk, H - h0);
      a.hd = CK;
      a.hd_v = R;
      a.k = a.v = sl.k.data();
      a.k_stride = a.v_stride = int64_t(kv.rows[size_t(il)].k_row);
      a.k_type = a.v_type = kv.k_type;
      a.scale = scale;
      kernels::attention_group(a, B.scores[size_t(tid)]);
    }
  });
  const int n = keep.empty() ? T : int(keep.size());
  for (int h = 0; h < H; ++h) {
    for (int i = 0; i < n; ++i) {
      const size_t t = keep.empty() ? size_t(i) : size_t(keep[size_t(i)]);
      std::memcpy(&B.mla_o[(size_t(h) * T + size_t(i)) * R], &B.mla_ocat[(t * H + size_t(h)) * R],
                  sizeof(float) * R);
    }
  }
}

// Whether every sequence of the step has a run of at least Compute::mla_decompress_min tokens
// (group_by_sequence has grouped them: B.attn_order sorted by sequence).
bool mla_decompress_step(const Compute& cp, std::span<const BatchToken> batch, StepBuffers& B) {
  if (cp.mla_decompress_min <= 0) return false;
  const size_t T = B.attn_order.size();
  for (size_t b = 0; b < T;) {
    size_t e = b;
    const int32_t seq = batch[size_t(B.attn_order[b])].seq;
    while (e < T && batch[size_t(B.attn_order[e])].seq == seq) ++e;
    if (int(e - b) < cp.mla_decompress_min) return false;
    b = e;
  }
  return true;
}

// MLA's attention in the decompressed form (ContextOptions::mla_decompress_min), sequence by
// sequence: the P latents of positions [0, P) from the cache, per head its keys
// [W_kb,h^T c_p; k_r,p] (nope + rope dims) and values W_vb,h c_p (v dims), then plain attention
// of the roped queries of B.q over them. Writes head h of token row t's output at
// B.attn[t][h * v], the rows group_by_sequence grouped (the kept ones with `keep`).
void mla_decompressed(const Compute& cp, const ModelConfig& c, const LayerWeights& L, int il,
                      std::span<const BatchToken> batch, KvCache& kv, StepBuffers& B, float scale,
                      StepObserver& obs) {
  const int H = c.n_head, R = c.kv_lora_rank, nope = c.qk_nope_dim, rd = c.qk_rope_dim;
  const int vd = c.v_head_dim, hd = nope + rd, CK = R + rd;
  const size_t k_row = kv.rows[size_t(il)].k_row;
  const int64_t n_tiles = int64_t(B.attn_tiles.size());
  std::vector<float> row(static_cast<size_t>(CK));
  for (int64_t t0 = 0; t0 < n_tiles;) {
    // The tiles of one sequence (consecutive) and its key range [0, P).
    const int32_t seq = batch[size_t(B.attn_tok[size_t(B.attn_tiles[size_t(t0)].begin)])].seq;
    int64_t t1 = t0;
    int32_t P = 0;
    while (t1 < n_tiles &&
           batch[size_t(B.attn_tok[size_t(B.attn_tiles[size_t(t1)].begin)])].seq == seq) {
      for (int i = B.attn_tiles[size_t(t1)].begin; i < B.attn_tiles[size_t(t1)].end; ++i) {
        P = std::max(P, B.attn_pos[size_t(i)] + 1);
      }
      ++t1;
    }
    const SequenceLayer& sl = kv.layer(seq, il);
    ensure(B.mla_lat, size_t(P) * R);
    ensure(B.mla_kr, size_t(P) * rd);
    ensure(B.mla_kd, size_t(H) * P * hd);
    ensure(B.mla_vd, size_t(H) * P * vd);
    ensure(B.mla_wkt, size_t(nope) * R);
    ensure(B.mla_kn, size_t(P) * nope);
    for (int32_t p = 0; p < P; ++p) {
      kernels::kv_cache_load(kv.k_type, &sl.k[size_t(p) * k_row], row.data(), CK);
      std::memcpy(&B.mla_lat[size_t(p) * R], row.data(), sizeof(float) * R);
      std::memcpy(&B.mla_kr[size_t(p) * rd], row.data() + R, sizeof(float) * rd);
    }
    MatIn lat{B.mla_lat.data(), P, R, &B.xq_head};
    std::vector<uint8_t> wrow(L.wk_b.row_bytes);
    for (int h = 0; h < H; ++h) {
      // Values: W_vb,h c_p, rows [P x v].
      project_mat(cp, L.wv_b, h, lat, &B.mla_vd[size_t(h) * P * vd], obs);
      // Keys: W_kb,h is stored [R x nope] (it maps a query's nope part into the latent space);
      // decompressing a latent needs its transpose, taken here in F32 per head and step.
      for (int r = 0; r < R; ++r) {
        kernels::read_row(L.wk_b.type, L.wk_b.layout, L.wk_b.mat(h), nope, r, wrow.data());
        kernels::dequantize_row(L.wk_b.type, wrow.data(), &B.mla_kn[0], nope);
        for (int j = 0; j < nope; ++j) B.mla_wkt[size_t(j) * R + size_t(r)] = B.mla_kn[size_t(j)];
      }
      obs.weights_read(L.wk_b.mat_bytes);
      kernels::matmul(cp.pool, gguf::TensorType::F32, B.mla_wkt.data(), nope, R, B.mla_lat.data(),
                      R, P, B.mla_kn.data(), nope, kernels::WeightLayout::kRows);
      float* kd = &B.mla_kd[size_t(h) * P * hd];
      for (int32_t p = 0; p < P; ++p) {
        std::memcpy(kd + size_t(p) * hd, &B.mla_kn[size_t(p) * nope], sizeof(float) * nope);
        std::memcpy(kd + size_t(p) * hd + nope, &B.mla_kr[size_t(p) * rd], sizeof(float) * rd);
      }
    }
    const int64_t n = t1 - t0;
    cp.pool.parallel_for(
        n * H,
        [&](int64_t b, int64_t e, int tid) {
          for (int64_t job = b; job < e; ++job) {
            const AttnTile& tile = B.attn_tiles[size_t(t0 + job / H)];
            const int h = int(job % H);
            kernels::AttentionGroup a;
            a.q = &B.q[size_t(h) * hd];
            a.q_stride = int64_t(H) * hd;
            a.out = &B.attn[size_t(h) * vd];
            a.out_stride = int64_t(H) * vd;
            a.tok = &B.attn_tok[size_t(tile.begin)];
            a.pos = &B.attn_pos[size_t(tile.begin)];
            a.n_tok = tile.end - tile.begin;
            a.n_head = 1;
            a.hd = hd;
            a.hd_v = vd;
            a.k = &B.mla_kd[size_t(h) * P * hd];
            a.v = &B.mla_vd[size_t(h) * P * vd];
            a.k_stride = int64_t(sizeof(float)) * hd;
            a.v_stride = int64_t(sizeof(float)) * vd;
            a.scale = scale;
            kernels::attention_group(a, B.scores[size_t(tid)]);
          }
        },
        1, kernels::chunks_per_thread_for(int(n) * kernels::attention_tile_tokens(1)));
    t0 = t1;
  }
}

// MLA's absorbed form (mla_attention): q_lat,h = W_kb,h q_nope,h, attention over the latents
// (mla_blocked), the value up-projection per head into B.attn's first n rows (n: the kept
// rows, or all).
void mla_absorbed(const Compute& cp, const ModelConfig& c, const LayerWeights& L, int il,
                  std::span<const BatchToken> batch, KvCache& kv, StepBuffers& B, float scale,
                  std::span<const int> keep, StepObserver& obs) {
  const int T = int(batch.size()), H = c.n_head;
  const int R = c.kv_lora_rank, nope = c.qk_nope_dim, rd = c.qk_rope_dim, vd = c.v_head_dim;
  const int hd = nope + rd, Q = H * hd;
  // Absorb the key up-projection into q: q_lat,h = W_kb,h q_nope,h, head by head.
  for (int h = 0; h < H; ++h) {
    for (int t = 0; t < T; ++t) {
      std::memcpy(&B.mla_nope[size_t(t) * nope], &B.q[size_t(t) * Q + size_t(h) * hd],
                  sizeof(float) * nope);
    }
    MatIn qn{B.mla_nope.data(), T, nope, &B.xq_head};
    project_mat(cp, L.wk_b, h, qn, &B.mla_q[size_t(h) * T * R], obs);
  }

  mla_blocked(cp, c, il, batch, kv, B, scale, keep);
  // The value up-projection per head, into the heads' slots of the output projection's input
  // (the kept rows only, as mla_blocked left them).
  const int n = keep.empty() ? T : int(keep.size());
  for (int h = 0; h < H; ++h) {
    MatIn o{&B.mla_o[size_t(h) * T * R], n, R, &B.xq_head};
    project_mat(cp, L.wv_b, h, o, B.mla_v.data(), obs);
    for (int t = 0; t < n; ++t) {
      std::memcpy(&B.attn[(size_t(t) * H + size_t(h)) * vd], &B.mla_v[size_t(t) * vd],
                  sizeof(float) * vd);
    }
  }
}

}  // namespace

// Multi-head latent attention of layer il (deepseek2): the cache holds per token the normed
// latent c (kv_lora) and the roped rope part k_r. In the absorbed form (mla_absorbed: decode,
// and prefill by default), for head h
//   score_j = (W_kb,h^T q_nope,h) . c_j + q_rope,h . k_r,j   scaled by kq_mul/sqrt(nope + rope)
//   out_h   = W_vb,h (sum_j p_j c_j)
// which equals attention over the decompressed keys k_h = [W_kb,h c; k_r] and values
// W_vb,h c (the NumPy reference computes that form; mla_decompressed runs it for long runs of
// a sequence's tokens when ContextOptions::mla_decompress_min asks for it).
void mla_attention(const Compute& cp, const ModelConfig& c, const LayerWeights& L, int il,
                   std::span<const BatchToken> batch, KvCache& kv, StepBuffers& B,
                   StepObserver& obs, std::span<const int> keep) {
  const int T = int(batch.size()), E = c.n_embd, H = c.n_head;
  const int R = c.kv_lora_rank, nope = c.qk_nope_dim, rd = c.qk_rope_dim, vd = c.v_head_dim;
  const int hd = nope + rd, Q = H * hd, CK = R + rd;
  ensure(B.k, size_t(T) * CK);
  ensure(B.mla_nope, size_t(T) * nope);
  ensure(B.mla_q, size_t(H) * T * R);
  ensure(B.mla_o, size_t(H) * T * R);
  ensure(B.mla_v, size_t(T) * vd);
  ensure(B.attn, size_t(T) * H * vd);

  for (int t = 0; t < T; ++t) {
    kernels::rmsnorm(&B.x[size_t(t) * E], L.attn_norm, &B.xn[size_t(t) * E], E, c.rms_eps);
  }
  MatIn xn{B.xn.data(), T, E, &B.xq_in};
  if (c.q_lora_rank > 0) {
    const int QA = c.q_lora_rank;
    ensure(B.mla_qa, size_t(T) * QA);
    project(cp, L.wq_a, xn, B.mla_qa.data(), obs);
    for (int t = 0; t < T; ++t) {
      float* r = &B.mla_qa[size_t(t) * QA];
      kernels::rmsnorm(r, L.q_a_norm, r, QA, c.rms_eps);
    }
    MatIn qa{B.mla_qa.data(), T, QA, &B.xq_mid};
    project(cp, L.wq_b, qa, B.q.data(), obs);
  } else {
    project(cp, L.wq, xn, B.q.data(), obs);
  }
  project(cp, L.wkv_a_mqa, xn, B.k.data(), obs);

  for (int t = 0; t < T; ++t) {
    const float* cs = &B.rope_cs[size_t(t) * rd];  // rd/2 (cos, sin) pairs
    float* q = &B.q[size_t(t) * Q];
    for (int h = 0; h < H; ++h) rope(q + h * hd + nope, rd, cs, c.rope);
    // The whole query (nope and rope parts, every head) scaled by position before the key
    // up-projection is absorbed (linear, so the same as scaling the decompressed q).
    if (c.attn_temp.on()) {
      const double p = double(batch[size_t(t)].pos);
      const float s = float(1.0 + double(c.attn_temp.scale) *
                                      std::log(1.0 + std::floor(p / c.attn_temp.floor_len)));
      for (int i = 0; i < Q; ++i) q[i] *= s;
    }
    float* ck = &B.k[size_t(t) * CK];
    kernels::rmsnorm(ck, L.kv_a_norm, ck, R, c.rms_eps);
    rope(ck + R, rd, cs, c.rope);
    // Into the cache before any attention runs (tokens of one prefill chunk see each other).
    SequenceLayer& sl = kv.layer(batch[size_t(t)].seq, il);
    kernels::kv_cache_store(kv.k_type, ck,
                            &sl.k[size_t(batch[size_t(t)].pos) * kv.rows[size_t(il)].k_row], CK);
  }
  const float scale = c.yarn.kq_mul / std::sqrt(float(hd));
  const int n = keep.empty() ? T : int(keep.size());
  // The form by every row's run, kept or not, so that a kept row computes what it would in a
  // step that returns every row's logits.
  group_by_sequence(batch, 1, B);
  if (mla_decompress_step(cp, batch, B)) {
    group_by_sequence(batch, 1, B, keep);
    mla_decompressed(cp, c, L, il, batch, kv, B, scale, obs);
    compact_rows(B.attn.data(), size_t(H) * vd, keep);
  } else {
    mla_absorbed(cp, c, L, il, batch, kv, B, scale, keep, obs);
  }
  MatIn attn{B.attn.data(), n, H * vd, &B.xq_mid};
  project(cp, L.wo, attn, B.tmp.data(), obs);
  if (keep.empty()) {
    for (size_t i = 0; i < size_t(T) * E; ++i) B.x[i] += B.tmp[i];
  } else {
    add_rows(cp.pool, B, n, E, keep);
  }
}

}  // namespace lynx::fwd
