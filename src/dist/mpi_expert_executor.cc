#include "dist/mpi_expert_executor.h"

#include <cstring>

#include "dist/hash.h"
#include "kernels/matmul_id.h"
#include "util/clock.h"

namespace lynx::dist {

MpiExpertExecutor::MpiExpertExecutor(const Mpi& mpi, const Model& model, const Placement& placement,
                                     Combine combine, kernels::ThreadPool& pool, bool int_acts)
    : mpi_(mpi), model_(model), placement_(placement), combine_(combine), cpu_(pool, int_acts) {
  const ModelConfig& c = model.config();
  if (placement.ranks != mpi.size() || placement.experts != c.n_expert ||
      placement.layers.size() != size_t(c.n_layer)) {
    throw Error("expert placement does not fit this job (" + std::to_string(placement.ranks) +
                " ranks, " + std::to_string(placement.experts) + " experts, " +
                std::to_string(placement.layers.size()) + " layers)");
  }
  if (model.expert_tier()) {
    tiered_ = std::make_unique<TieredExpertExecutor>(*model.expert_tier(), model, pool, int_acts);
  }
  res_bytes_ = sizeof(ResidencyHead) + (size_t(c.n_expert) + 7) / 8;
  head_ = sizeof(uint64_t) + sizeof(RankStats) + res_bytes_;
}

int MpiExpertExecutor::next_routed(int il) const {
  const ModelConfig& c = model_.config();
  for (int j = il + 1; j < c.n_layer; ++j) {
    if (c.layer_routed(j)) return j;
  }
  for (int j = 0; j <= il; ++j) {
    if (c.layer_routed(j)) return j;
  }
  return il;
}

void MpiExpertExecutor::pack_residency(uint8_t* dst, int il) {
  const size_t N = size_t(model_.config().n_expert);
  ResidencyHead h;
  if (tiered_) {
    const ExpertTier& tier = *model_.expert_tier();
    tier.resident(il, own_);
    h.miss_cost = tier.miss_cost();
    h.tiered = 1;
  } else {
    own_.assign(N, 1);
  }
  std::memcpy(dst, &h, sizeof h);
  uint8_t* bits = dst + sizeof h;
  std::memset(bits, 0, (N + 7) / 8);
  for (size_t e = 0; e < N; ++e) bits[e / 8] |= uint8_t(own_[e] ? 1u << (e % 8) : 0u);
}

void MpiExpertExecutor::unpack_residency(const uint8_t* base, const std::vector<size_t>& at,
                                         int il) {
  const size_t N = size_t(model_.config().n_expert);
  std::vector<ResidencyHead> h(at.size());
  res_tiered_ = false;
  for (size_t r = 0; r < at.size(); ++r) {
    std::memcpy(&h[r], base + at[r], sizeof(ResidencyHead));
    res_tiered_ = res_tiered_ || h[r].tiered != 0;
  }
  res_.resize(N);
  res_cost_.resize(N);
  for (size_t e = 0; e < N; ++e) {
    const size_t r = size_t(placement_.rank_of(il, int(e)));
    const uint8_t* bits = base + at[r] + sizeof(ResidencyHead);
    res_[e] = (bits[e / 8] >> (e % 8)) & 1u;
    res_cost_[e] = res_[e] ? 1.f : h[r].miss_cost;
  }
  res_layer_ = il;
}

const uint8_t* MpiExpertExecutor::resident(int il) {
  if (res_layer_ != il) {
    // No combine carried this layer (the first step, or the last step failed before its last
    // layer): a message of its own, at the same point on every rank (they all route il now).
    const int R = mpi_.size();
    const double t0 = util::now_seconds();
    send_.resize(res_bytes_);
    pack_residency(send_.data(), il);
    recv_.resize(res_bytes_ * size_t(R));
    MPI_Request req;
    Mpi::check(MPI_Iallgather(send_.data(), int(res_bytes_), MPI_BYTE, recv_.data(),
                              int(res_bytes_), MPI_BYTE, mpi_.comm(), &req),
               "MPI_Iallgather");
    mpi_.wait(req, "the routing's residency (MPI_Iallgather)");
    std::vector<size_t> at(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) at[size_t(r)] = size_t(r) * res_bytes_;
    unpack_residency(recv_.data(), at, il);
    ++residency_gathers_;
    add({0, 0, 0, uint64_t(res_bytes_) * uint64_t(R - 1), 0, util::now_seconds() - t0});
  }
  return res_tiered_ ? res_.data() : nullptr;
}

const float* MpiExpertExecutor::cost(int il) {
  return res_tiered_ && res_layer_ == il ? res_cost_.data() : nullptr;
}

RankStats MpiExpertExecutor::take_stats() {
  RankStats s = stats_;
  stats_ = {};
  return s;
}

// The plan restricted to this rank's experts: the same assignments with the others' weights
// set to 0, so the local plan's rows are the global plan's rows of the local experts, in the
// same order (experts ascending, then token and slot).
void MpiExpertExecutor::local_plan(const kernels::ExpertPlan& plan, int il) {
  const int T = plan.n_tokens, K = plan.n_used;
  row_expert_.resize(size_t(plan.rows()));
  for (int e : plan.active) {
    for (int r = plan.offset[size_t(e)]; r < plan.offset[size_t(e) + 1]; ++r) {
      row_expert_[size_t(r)] = e;
    }
  }
  ids_.assign(size_t(T) * size_t(K), 0);
  weights_.assign(size_t(T) * size_t(K), 0.f);
  for (size_t i = 0; i < ids_.size(); ++i) {
    const int r = plan.assign_row[i];
    if (r < 0) continue;
    const int e = row_expert_[size_t(r)];
    ids_[i] = e;
    if (placement_.rank_of(il, e) == mpi_.rank()) weights_[i] = plan.weight[i];
  }
  local_.build(ids_.data(), weights_.data(), T, K, plan.n_expert);
}

uint64_t MpiExpertExecutor::plan_digest(const kernels::ExpertPlan& plan) const {
  Fnv1a h;
  h.add(&plan.n_tokens, sizeof plan.n_tokens);
  h.add(plan.count.data(), plan.count.size() * sizeof(int32_t));
  h.add(plan.assign_row.data(), plan.assign_row.size() * sizeof(int32_t));
  h.add(plan.weight.data(), plan.weight.size() * sizeof(float));
  return h.value();
}

void MpiExpertExecutor::check_digests(const std::vector<uint64_t>& d, int il) const {
  for (size_t r = 1; r < d.size(); ++r) {
    if (d[r] != d[0]) {
      throw CollectiveError("expert parallel: the routing of layer " + std::to_string(il) +
                            " differs between rank 0 and rank " + std::to_string(r) +
                            " (the ranks' inputs, builds or arithmetic differ)");
    }
  }
}

void MpiExpertExecutor::run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il,
                            const LayerWeights& layer, float* out) {
  local_plan(plan, il);
  const uint64_t digest = plan_digest(plan);
  RankStats d;
  d.tokens = local_.rows();
  d.experts = local_.n_active();
  d.bytes = uint64_t(local_.n_active()) * model_.expert_bytes(il);
  add(d);
  if (combine_ == Combine::kAllReduce) {
    combine_reduce(plan, x, layer, digest, il, out);
  } else {
    combine_gather(plan, x, layer, digest, il, out);
  }
}

void MpiExpertExecutor::add(const RankStats& d) {
  for (RankStats* s : {&stats_, &total_}) {
    s->tokens += d.tokens;
    s->experts += d.experts;
    s->bytes += d.bytes;
    s->comm_bytes += d.comm_bytes;
    s->compute_s += d.compute_s;
    s->comm_s += d.comm_s;
  }
}

std::vector<RankStats> MpiExpertExecutor::totals() const {
  std::lock_guard lk(totals_mu_);
  return totals_;
}

// The head of every rank's combine message: the plan's digest, the rank's totals and its
// residency of the next routed layer (after this layer's compute and read-ahead).
size_t MpiExpertExecutor::pack_head(uint8_t* dst, uint64_t digest, int il) {
  std::memcpy(dst, &digest, sizeof digest);
  std::memcpy(dst + sizeof digest, &total_, sizeof total_);
  pack_residency(dst + sizeof digest + sizeof total_, next_routed(il));
  return head_;
}

void MpiExpertExecutor::unpack_heads(const uint8_t* base, const std::vector<size_t>& at, int il) {
  const size_t R = at.size();
  std::vector<uint64_t> digests(R);
  std::vector<RankStats> totals(R);
  for (size_t r = 0; r < R; ++r) {
    std::memcpy(&digests[r], base + at[r], sizeof(uint64_t));
    std::memcpy(&totals[r], base + at[r] + sizeof(uint64_t), sizeof(RankStats));
  }
  check_digests(digests, il);
  std::vector<size_t> res_at(R);
  for (size_t r = 0; r < R; ++r) res_at[r] = at[r] + sizeof(uint64_t) + sizeof(RankStats);
  unpack_residency(base, res_at, next_routed(il));
  std::lock_guard lk(totals_mu_);
  totals_ = std::move(totals);
}

// Partial sums, reduce-scatter, all-gather of the reduced chunks with the heads. Each chunk
// is reduced once, on one rank, so every rank ends with the same bits (a plain MPI_Allreduce
// does not promise that, and ranks whose hidden states drift apart would route apart).
void MpiExpertExecutor::combine_reduce(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                                       const LayerWeights& layer, uint64_t digest, int il,
                                       float* out) {
  const int R = mpi_.size();
  const size_t E = size_t(x.cols), n = size_t(plan.n_tokens) * E;
  const size_t chunk = (n + size_t(R) - 1) / size_t(R);
  const double t0 = util::now_seconds();
  partial_.resize(chunk * size_t(R));
  if (local_.rows() > 0) {
    if (tiered_) {
      tiered_->run(local_, x, il, layer, partial_.data());
    } else {
      cpu_.run(local_, x, il, layer, partial_.data());
    }
  } else {
    std::fill(partial_.begin(), partial_.begin() + ptrdiff_t(n), 0.f);
  }
  std::fill(partial_.begin() + ptrdiff_t(n), partial_.end(), 0.f);
  const double t1 = util::now_seconds();
  add({0, 0, 0, uint64_t(chunk * sizeof(float)) * uint64_t(R - 1) * 2, t1 - t0, 0});
  chunk_.resize(chunk);
  MPI_Request req;
  Mpi::check(MPI_Ireduce_scatter_block(partial_.data(), chunk_.data(), int(chunk), MPI_FLOAT,
                                       MPI_SUM, mpi_.comm(), &req),
             "MPI_Ireduce_scatter_block");
  mpi_.wait(req, "the combine (MPI_Ireduce_scatter_block)");
  const size_t slot = head_ + chunk * sizeof(float);
  send_.resize(slot);
  pack_head(send_.data(), digest, il);
  std::memcpy(send_.data() + head_, chunk_.data(), chunk * sizeof(float));
  recv_.resize(slot * size_t(R));
  Mpi::check(MPI_Iallgather(send_.data(), int(slot), MPI_BYTE, recv_.data(), int(slot), MPI_BYTE,
                            mpi_.comm(), &req),
             "MPI_Iallgather");
  mpi_.wait(req, "the combine (MPI_Iallgather)");
  const double t2 = util::now_seconds();
  std::vector<size_t> at(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) at[size_t(r)] = size_t(r) * slot;
  unpack_heads(recv_.data(), at, il);
  for (int r = 0; r < R; ++r) {
    const size_t begin = size_t(r) * chunk;
    if (begin >= n) break;
    std::memcpy(out + begin, recv_.data() + size_t(r) * slot + head_,
                std::min(chunk, n - begin) * sizeof(float));
  }
  add({0, 0, 0, 0, 0, t2 - t1});
}

// Expert output rows all-gathered into the global plan's order, then mixed in slot order
// exactly as the single process does.
void MpiExpertExecutor::combine_gather(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                                       const LayerWeights& layer, uint64_t digest, int il,
                                       float* out) {
  const int R = mpi_.size();
  const size_t E = size_t(x.cols), row_bytes = E * sizeof(float);
  const double t0 = util::now_seconds();
  const float* mine = local_.rows() == 0 ? nullptr
                      : tiered_          ? tiered_->rows(local_, x, il, layer)
                                         : cpu_.rows(local_, x, layer);
  const double t1 = util::now_seconds();
  // Every rank knows every rank's row count from the plan: no size exchange.
  counts_.assign(size_t(R), int(head_));
  for (int e : plan.active) {
    counts_[size_t(placement_.rank_of(il, e))] += int(size_t(plan.count[size_t(e)]) * row_bytes);
  }
  displs_.assign(size_t(R), 0);
  for (int r = 1; r < R; ++r) displs_[size_t(r)] = displs_[size_t(r) - 1] + counts_[size_t(r) - 1];
  const int me = mpi_.rank();
  const size_t total = size_t(displs_[size_t(R) - 1] + counts_[size_t(R) - 1]);
  add({0, 0, 0, uint64_t(total) - uint64_t(counts_[size_t(me)]), t1 - t0, 0});
  send_.resize(size_t(counts_[size_t(me)]));
  pack_head(send_.data(), digest, il);
  if (mine) std::memcpy(send_.data() + head_, mine, size_t(local_.rows()) * row_bytes);
  recv_.resize(total);
  MPI_Request req;
  Mpi::check(MPI_Iallgatherv(send_.data(), counts_[size_t(me)], MPI_BYTE, recv_.data(),
                             counts_.data(), displs_.data(), MPI_BYTE, mpi_.comm(), &req),
             "MPI_Iallgatherv");
  mpi_.wait(req, "the combine (MPI_Iallgatherv)");
  const double t2 = util::now_seconds();
  std::vector<size_t> at(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) at[size_t(r)] = size_t(displs_[size_t(r)]);
  unpack_heads(recv_.data(), at, il);
  // Rank r's rows: its experts ascending, each expert's rows in plan order.
  rows_.resize(size_t(plan.rows()) * E);
  std::vector<const uint8_t*> next(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) next[size_t(r)] = recv_.data() + at[size_t(r)] + head_;
  for (int e : plan.active) {
    const uint8_t*& src = next[size_t(placement_.rank_of(il, e))];
    const size_t bytes = size_t(plan.count[size_t(e)]) * row_bytes;
    std::memcpy(rows_.data() + size_t(plan.offset[size_t(e)]) * E, src, bytes);
    src += bytes;
  }
  kernels::mix_id(plan, rows_.data(), int64_t(E), out);
  const double t3 = util::now_seconds();
  add({0, 0, 0, 0, t3 - t2, t2 - t1});
}

}  // namespace lynx::dist
