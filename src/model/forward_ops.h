// What the forward pass's blocks share: forward.cc runs the step and most blocks,
// mla_attention.cc the multi-head latent attention block. Internal to the model library.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "kernels/thread_pool.h"
#include "lynx/context.h"
#include "lynx/model.h"
#include "model/forward.h"
#include "model/step_observer.h"
#include "model/weights.h"

namespace lynx::fwd {

using MatIn = kernels::ActRows;

template <typename V>
void ensure(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Moves rows keep[i] of the matrix m (rows of w) to row i (keep ascending, so a row is read
// before it is overwritten); nothing when keep is empty.
template <typename V>
void compact_rows(V* m, size_t w, std::span<const int> keep) {
  for (size_t i = 0; i < keep.size(); ++i) {
    if (size_t(keep[i]) != i) std::memmove(m + i * w, m + size_t(keep[i]) * w, w * sizeof(V));
  }
}

// y[T x w.rows] = W x[T x cols] (forward.cc has the paths it takes).
void project(const Compute& cp, const Weight& w, MatIn& in, float* y, StepObserver& obs);
// y[T x w.rows] = W_i x for matrix i of a stack (MLA's per-head up-projections).
void project_mat(const Compute& cp, const Weight& w, int64_t i, MatIn& in, float* y,
                 StepObserver& obs);
// Rotary embedding of one head vector with the precomputed (cos, sin) of its position.
void rope(float* v, int hd, const float* cs, RopeType type);
// The step's tokens (or only `rows` of them) grouped by sequence into attention tiles
// (B.attn_tok, attn_pos, attn_tiles, attn_order).
void group_by_sequence(std::span<const BatchToken> batch, int group, StepBuffers& B,
                       std::span<const int> rows = {});
// B.x rows keep[i] += B.tmp rows i for the n kept rows; every row's residual when keep is
// empty (n = T).
void add_rows(kernels::ThreadPool& pool, StepBuffers& B, int n, int E, std::span<const int> keep);

// The MLA attention block of layer il (mla_attention.cc): B.x += Wo attn(norm(B.x)), the
// step's latents into the cache; with `keep`, only those rows attend (the last layer).
void mla_attention(const Compute& cp, const ModelConfig& c, const LayerWeights& L, int il,
                   std::span<const BatchToken> batch, KvCache& kv, StepBuffers& B,
                   StepObserver& obs, std::span<const int> keep = {});

}  // namespace lynx::fwd
