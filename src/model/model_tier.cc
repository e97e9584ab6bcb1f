// Model::plan_expert_tier: whether the routed experts are loaded or read on demand through
// the expert tier, and the tier's size (docs/offload.md).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>

#include "kernels/weight_pack.h"
#include "lynx/error.h"
#include "lynx/model.h"
#include "model/expert_tier.h"
#include "model/memory_budget.h"
#include "model/weights.h"

namespace lynx {
namespace {

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(size_t(1) << 30));
  return buf;
}

}  // namespace

bool Model::routed_expert(const Weight& w) const {
  for (const LayerWeights& l : w_->layers) {
    if (w.n_mat > 1 &&
        (w.data == l.gate_exps.data || w.data == l.up_exps.data || w.data == l.down_exps.data)) {
      return true;
    }
  }
  return false;
}

int Model::pin_experts(const LoadOptions& opts, int n_slots) {
  if (!opts.expert_pin_uses) return 0;
  const ModelConfig& c = cfg_;
  const std::vector<std::vector<uint32_t>> uses = opts.expert_pin_uses(c);
  if (uses.size() != size_t(c.n_layer)) {
    throw Error("expert pinning: uses for " + std::to_string(uses.size()) +
                " layers, the model has " + std::to_string(c.n_layer));
  }
  int routed = 0;
  for (int il = 0; il < c.n_layer; ++il) routed += c.layer_routed(il);
  // Each routed layer gets the same share of the slots: the trace's hottest layer must not
  // take the slots the others' steps need.
  const int per_layer = int(double(opts.expert_pin_share) * n_slots / std::max(1, routed));
  std::vector<std::vector<int32_t>> pick(size_t(c.n_layer));
  int total = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const std::vector<uint32_t>& u = uses[size_t(il)];
    if (!c.layer_routed(il) || u.empty()) continue;
    if (u.size() != size_t(c.n_expert)) {
      throw Error("expert pinning: layer " + std::to_string(il) + " has uses of " +
                  std::to_string(u.size()) + " experts, the model " + std::to_string(c.n_expert));
    }
    std::vector<int32_t> order(u.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return u[size_t(a)] > u[size_t(b)]; });
    for (const int32_t e : order) {
      // At least one slot stays unpinned, so a step can always move on.
      if (int(pick[size_t(il)].size()) >= per_layer || u[size_t(e)] == 0 || total + 1 >= n_slots) {
        break;
      }
      pick[size_t(il)].push_back(e);
      ++total;
    }
  }
  tier_->pin(pick);
  return tier_->stats().pinned;
}

bool Model::plan_expert_tier(const LoadOptions& opts) {
  if (opts.expert_pin_uses && !(opts.expert_pin_share > 0.f && opts.expert_pin_share <= 1.f)) {
    throw Error("expert pin share must be in (0, 1], got " + std::to_string(opts.expert_pin_share));
  }
  if (opts.expert_miss_cost != 0.f &&
      !(opts.expert_miss_cost >= 1.f && opts.expert_miss_cost <= 1e6f)) {
    throw Error("expert miss cost must be 0 (measured) or in [1, 1e6], got " +
                std::to_string(opts.expert_miss_cost));
  }
  const ModelConfig& c = cfg_;
  if (!c.is_moe() || opts.expert_cache == 0) return false;
  const bool fused = std::any_of(w_->layers.begin(), w_->layers.end(),
                                 [](const LayerWeights& l) { return l.gate_up_fused; });
  // The file's view of each routed layer's experts, and the layout the loader would pack.
  kernels::PackOptions po;
  po.interleave_int = opts.repack;
  po.panel_float = opts.repack_float;
  const uint8_t* base = nullptr;  // the mapping's first byte (file offset 0)
  for (const gguf::TensorInfo& t : file_.tensors()) {
    base = t.data - file_.data_offset() - t.offset;
    break;
  }
  auto matrix = [&](const Weight& w) {
    TierMatrix m;
    m.type = w.type;
    m.offset = uint64_t(w.data - base);
    m.mat_bytes = w.mat_bytes;
    m.stride = w.stride();  // twice mat_bytes for the halves of a fused ffn_gate_up_exps
    m.rows = w.rows;
    m.cols = w.cols;
    const kernels::MatrixRef ref{w.type,  w.data,      w.rows,      w.cols,
                                 w.n_mat, w.row_bytes, w.mat_bytes, w.layout};
    m.layout = (opts.repack || opts.repack_float) ? kernels::preferred_layout(ref, po)
                                                  : kernels::WeightLayout::kRows;
    return m;
  };
  // Under expert parallelism (keep_expert) this process holds one shard: the tier's slots are
  // for its experts only, and the budget counts its shard, not the whole file.
  std::vector<TierLayer> layers(w_->layers.size());
  std::vector<uint8_t> held(w_->layers.size() * size_t(c.n_expert), 0);
  size_t routed = 0, mine = 0;
  int64_t total = 0;  // the experts this process may claim
  for (int il = 0; il < c.n_layer; ++il) {
    if (!c.layer_routed(il)) continue;
    const LayerWeights& l = w_->layers[size_t(il)];
    layers[size_t(il)] = {il, matrix(l.gate_exps), matrix(l.up_exps), matrix(l.down_exps)};
    routed += expert_bytes(il) * size_t(c.n_expert);
    for (int e = 0; e < c.n_expert; ++e) {
      const bool keep = !opts.keep_expert || opts.keep_expert(il, e);
      held[size_t(il) * size_t(c.n_expert) + size_t(e)] = keep;
      mine += keep ? expert_bytes(il) : 0;
      total += keep;
    }
  }
  const size_t slot = ExpertTier::slot_bytes_for(layers);
  if (slot == 0) return false;
  const size_t dense = file_.file_size() > routed ? file_.file_size() - routed : 0;
  const size_t file = dense + mine;  // what loading every expert of this process would take
  const std::string what = opts.keep_expert ? "this rank's shard" : "the file";

  size_t cache = 0;
  std::string why;
  if (opts.expert_cache > 0) {
    cache = size_t(opts.expert_cache);
    why = "asked for";
  } else {
    const MemoryBudget detected =
        opts.mem_budget ? MemoryBudget{opts.mem_budget, "--mem-budget"} : detect_memory_budget();
    // Room for the KV cache, the step's buffers and the page cache of the file's small
    // tensors: a tenth of the budget, at least 512 MiB.
    const size_t reserve = std::max(detected.bytes / 10, size_t(512) << 20);
    if (file + reserve <= detected.bytes) {
      tier_summary_ = "experts loaded: " + what + " (" + gib(double(file)) + ") fits the budget (" +
                      gib(double(detected.bytes)) + ", " + detected.source + ")" +
                      (fused ? "; gate and up fused in the file, copied apart" : "");
      return false;
    }
    const size_t used = dense + reserve;
    cache = detected.bytes > used ? detected.bytes - used : 0;
    why = what + " (" + gib(double(file)) + ") does not fit the budget (" +
          gib(double(detected.bytes)) + ", " + detected.source + ")";
  }
  // One token's experts at least, so that a step can always move on; never more slots than
  // experts.
  int64_t n_slots = int64_t(cache / slot);
  if (opts.expert_cache <= 0) n_slots = std::max<int64_t>(n_slots, c.n_expert_used);
  n_slots = std::clamp<int64_t>(n_slots, 1, std::max<int64_t>(1, total));
  MissCostOptions cost;
  cost.fixed = opts.expert_miss_cost;
  ExpertIoOptions io;
  io.backend = opts.expert_io;
  io.readers = opts.expert_readers;
  io.queue_depth = opts.expert_queue_depth;
  io.read = opts.expert_read;
  io.result = opts.expert_read_result;
  io.uring_init_error = opts.expert_uring_init_error;
  tier_ = std::make_shared<ExpertTier>(file_.path(), std::move(layers), c.n_expert, int(n_slots),
                                       std::move(io), cost);
  tier_->set_prefetch(std::clamp(opts.expert_prefetch, 0, c.n_expert));
  if (opts.keep_expert) tier_->set_held(std::move(held));
  const int pinned = pin_experts(opts, int(n_slots));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%lld of %lld experts (%.1f%%) in %s of slots; ",
                (long long)n_slots, (long long)total, 100.0 * double(n_slots) / double(total),
                gib(double(size_t(n_slots) * slot)).c_str());
  if (pinned > 0) {
    std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf),
                  "%d experts pinned from a routing trace (%.1f MB read at load); ", pinned,
                  double(tier_->stats().pin_bytes) / 1e6);
  }
  tier_summary_ = std::string("expert tier: ") + buf + why + "; dense weights " +
                  gib(double(dense)) + " loaded; reads: " + tier_->io_describe() +
                  (tier_->io_fallback().empty() ? "" : " (io_uring unavailable)") +
                  (fused ? "; gate and up fused in the file, each expert's halves read into "
                           "its slot"
                         : "");
  return true;
}

}  // namespace lynx
