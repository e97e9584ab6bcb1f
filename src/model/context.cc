// Context: sequences, KV cache, batch validation, and the step driver. The transformer
// layer math lives in forward.cc, the step accounting in step_observer.cc.
#include "lynx/context.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include "kernels/attention.h"
#include "model/cpu_expert_executor.h"
#include "model/forward.h"
#include "model/step_observer.h"
#include "model/tiered_expert_executor.h"

namespace lynx {

gguf::TensorType kv_cache_type_from_name(const std::string& name) {
  try {
    const gguf::TensorType t = gguf::tensor_type_from_name(name);
    if (kernels::is_kv_cache_type(t)) return t;
  } catch (const Error&) {  // not a type name at all: the same message
  }
  throw Error("unknown KV cache type '" + name + "' (known: f32, f16, q8_0)");
}

// What a context owns; forward() gets each part as its own operand.
struct Context::Impl {
  Impl(const Model& m, const ContextOptions& o);

  Sequence& sequence(int32_t seq);
  void validate(std::span<const BatchToken> batch);
  void reserve_cache(Sequence& s, int32_t need, int32_t chunk);
  void reserve_rows(const KvRows& r, SequenceLayer& l, int32_t len, int32_t cap) const;
  void eval(std::span<const BatchToken> batch);
  // The snapshot of `s` at length `len`, or nullptr.
  static const StateSnapshot* find_snapshot(const Sequence& s, int32_t len);
  // Sets the recurrent layers' slots of `d` to those kept in `snap`.
  void restore(Sequence& d, const StateSnapshot& snap) const;

  const Model& model;
  int max_window = 0;  // the largest sliding window of the model's layers (0: none)
  kernels::ThreadPool pool;
  bool int_acts;  // !ContextOptions::exact_activations
  // The BF16 fast mode's kernel (ContextOptions::bf16_activations and bf16_kernel); kNone: off.
  kernels::Bf16Kernel bf16;
  int delta_chunk_min;     // ContextOptions::delta_rule_chunk_min
  int mla_decompress_min;  // ContextOptions::mla_decompress_min, -1 resolved
  std::unique_ptr<RoutingPolicy> policy;
  std::string routing_spec;
  Context::RouterOverride router_override;
  std::function<void(std::span<const BatchToken>)> before_eval;
  std::unique_ptr<ExpertExecutor> experts;
  Context::ActivationHook activation_hook;
  KvCache kv;
  StepBuffers buf;
  StepLogits logits;
  StepObserver observer;
};

Context::Context(const Model& model, const ContextOptions& opts)
    : impl_(std::make_unique<Impl>(model, opts)) {}
Context::~Context() = default;

const Model& Context::model() const {
  return impl_->model;
}
int Context::n_threads() const {
  return impl_->pool.size();
}
int Context::n_ctx() const {
  return impl_->kv.n_ctx;
}

int32_t Context::new_sequence() {
  auto& seqs = impl_->kv.seqs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].in_use) {
      seqs[i].in_use = true;
      seqs[i].len = 0;
      seqs[i].ring_from = 0;
      seqs[i].state_lost = false;
      return int32_t(i);
    }
  }
  seqs.emplace_back();
  seqs.back().in_use = true;
  seqs.back().layers.resize(size_t(impl_->model.config().n_layer));
  return int32_t(seqs.size() - 1);
}

void Context::free_sequence(int32_t seq) {
  Sequence& s = impl_->sequence(seq);
  s.in_use = false;
  s.len = 0;
  // Release the cache memory: a finished request must not keep its KV cache alive.
  for (auto& l : s.layers) {
    l.k.reset();
    l.v.reset();
    // A recurrent state slot goes too: the next sequence in this slot starts from zeros.
    std::vector<float>().swap(l.conv);
    std::vector<float>().swap(l.state);
  }
  s.state_lost = false;
  s.snapshots.clear();
  s.cap = 0;
  s.ring = 0;
  s.ring_from = 0;
}

const StateSnapshot* Context::Impl::find_snapshot(const Sequence& s, int32_t len) {
  for (const StateSnapshot& snap : s.snapshots) {
    if (snap.len == len) return &snap;
  }
  return nullptr;
}

void Context::Impl::restore(Sequence& d, const StateSnapshot& snap) const {
  const ModelConfig& c = model.config();
  const size_t nc = size_t(c.delta_net.conv_floats()), ns = size_t(c.delta_net.state_floats());
  const float* from = snap.data->data();
  for (size_t il = 0; il < d.layers.size(); ++il) {
    if (!c.layer_recurrent(int(il))) continue;
    d.layers[il].conv.assign(from, from + nc);
    d.layers[il].state.assign(from + nc, from + nc + ns);
    from += nc + ns;
  }
}

void Context::snapshot_sequence(int32_t seq) {
  const ModelConfig& c = impl_->model.config();
  Sequence& s = impl_->sequence(seq);
  if (!c.recurrent() || s.len == 0 || Impl::find_snapshot(s, s.len) != nullptr) return;
  if (s.state_lost) {
    throw Error("snapshot_sequence: sequence " + std::to_string(seq) + " lost its state");
  }
  auto data = std::make_shared<std::vector<float>>();
  for (size_t il = 0; il < s.layers.size(); ++il) {
    if (!c.layer_recurrent(int(il))) continue;
    const SequenceLayer& l = s.layers[il];
    data->insert(data->end(), l.conv.begin(), l.conv.end());
    data->insert(data->end(), l.state.begin(), l.state.end());
  }
  s.snapshots.push_back({s.len, std::move(data)});  // len only grows: ascending
}

std::vector<int32_t> Context::sequence_snapshots(int32_t seq) const {
  std::vector<int32_t> lens;
  for (const StateSnapshot& snap : impl_->sequence(seq).snapshots) lens.push_back(snap.len);
  return lens;
}

void Context::drop_snapshot(int32_t seq, int32_t len) {
  std::erase_if(impl_->sequence(seq).snapshots,
                [len](const StateSnapshot& snap) { return snap.len == len; });
}

int32_t Context::sequence_length(int32_t seq) const {
  return impl_->sequence(seq).len;
}

void Context::truncate_sequence(int32_t seq, int32_t len) {
  Sequence& s = impl_->sequence(seq);
  if (len < 0 || len > s.len) {
    throw Error("truncate_sequence: length " + std::to_string(len) + " outside [0, " +
                std::to_string(s.len) + "]");
  }
  // A recurrent state is the sequence after its last position: the way back is to the start
  // (the state reset) or to a length kept in a snapshot.
  if (impl_->model.config().recurrent() && len != s.len) {
    const StateSnapshot* snap = Impl::find_snapshot(s, len);
    if (len != 0 && snap == nullptr) {
      throw Error("truncate_sequence: sequence " + std::to_string(seq) + " cannot go back to " +
                  std::to_string(len) + " of its " + std::to_string(s.len) +
                  " positions: the model's linear-attention layers keep a recurrent state of "
                  "the last position only, and no snapshot of that length; free the sequence "
                  "and evaluate it again");
    }
    if (snap != nullptr) {
      impl_->restore(s, *snap);
    } else {
      for (auto& l : s.layers) {
        std::vector<float>().swap(l.conv);
        std::vector<float>().swap(l.state);
      }
    }
    s.state_lost = false;
    std::erase_if(s.snapshots, [len](const StateSnapshot& x) { return x.len > len; });
  }
  // The next token at `len` attends to the window before it: it must still be in the rings.
  const int w = impl_->max_window;
  if (w > 0 && len > 0 && std::max(0, len - w + 1) < s.ring_from) {
    throw Error("truncate_sequence: sequence " + std::to_string(seq) + " cannot go back to " +
                std::to_string(len) + " positions: its sliding-window layers (window " +
                std::to_string(w) + ") keep positions " + std::to_string(s.ring_from) +
                " and later only; free the sequence and evaluate it again");
  }
  s.len = len;
  if (len == 0) s.ring_from = 0;
}

void Context::eval(std::span<const BatchToken> batch) {
  impl_->eval(batch);
}

std::span<const float> Context::logits(int i) const {
  if (i < 0 || i >= impl_->logits.n) throw Error("logits index out of range");
  const int V = impl_->model.config().n_vocab;
  return {impl_->logits.values.data() + size_t(i) * V, size_t(V)};
}
int Context::n_logits() const {
  return impl_->logits.n;
}

void Context::set_routing(const std::string& spec) {
  auto policy = make_routing_policy(spec);
  if (impl_->model.config().is_moe()) policy->check(impl_->model.config().gating);
  impl_->policy = std::move(policy);
  impl_->routing_spec = spec;
}
const std::string& Context::routing() const {
  return impl_->routing_spec;
}
int Context::mla_decompress_min() const {
  return impl_->model.config().mla() ? impl_->mla_decompress_min : 0;
}
const StepStats& Context::last_step() const {
  return impl_->observer.last_step();
}
const std::vector<RoutingStats>& Context::routing_stats() const {
  return impl_->observer.routing_stats();
}
void Context::reset_stats() {
  impl_->observer.reset_stats();
}
void Context::set_router_override(RouterOverride fn) {
  impl_->router_override = std::move(fn);
}
void Context::set_activation_hook(ActivationHook fn) {
  impl_->activation_hook = std::move(fn);
  const ActivationHook* h = impl_->activation_hook ? &impl_->activation_hook : nullptr;
  impl_->observer.set_activation_hook(h);
  impl_->experts->set_activation_hook(h);
}

const std::vector<int64_t>& Context::expert_tokens() const {
  return impl_->observer.expert_tokens();
}
std::vector<TraceRecord> Context::take_trace() {
  return impl_->observer.take_trace();
}

// ---------------------------------------------------------------------------------------

namespace {

// The cache's element types and row geometry (KvCache). MLA caches one vector per token (the
// latent and the rope part), its keys; it takes cache_type_k, and there is no V cache.
void set_cache_format(const ModelConfig& c, const ContextOptions& o, KvCache& kv) {
  for (gguf::TensorType t : {o.cache_type_k, o.cache_type_v}) {
    if (!kernels::is_kv_cache_type(t)) {
      throw Error(std::string("KV cache type ") + gguf::tensor_type_name(t) +
                  " is not supported (f32, f16 or q8_0)");
    }
  }
  kv.k_type = o.cache_type_k;
  kv.v_type = c.mla() ? o.cache_type_k : o.cache_type_v;
  kv.rows.assign(size_t(c.n_layer), {});
  for (int il = 0; il < c.n_layer; ++il) {
    KvRows& r = kv.rows[size_t(il)];
    if (c.layer_recurrent(il)) continue;  // no KV rows: a state slot (reserve_cache)
    if (c.mla()) {
      r.k_head = kernels::kv_cache_head_bytes(kv.k_type, c.cache_k_dim());
      r.k_row = r.k_head;
    } else {
      const int hd = c.layer_head_dim(il), heads = c.layer_n_head_kv(il);
      r.k_head = kernels::kv_cache_head_bytes(kv.k_type, hd);
      r.v_head = kernels::kv_cache_head_bytes(kv.v_type, hd);
      r.k_row = size_t(heads) * r.k_head;
      r.v_row = size_t(heads) * r.v_head;
    }
  }
}

// Copies rows [from_row, from_row + n) of one layer's K and V buffers to rows [to_row, ...)
// of another's, head by head (the buffers are head-major, kv_head_offset; each buffer's row
// count is its size / the row's bytes).
void copy_kv_rows(const KvRows& r, const SequenceLayer& from, SequenceLayer& to, size_t from_row,
                  size_t to_row, size_t n) {
  if (n == 0) return;
  auto copy = [&](const auto& src, auto& dst, size_t head, size_t row) {
    if (row == 0) return;  // no values (MLA)
    const size_t heads = row / head, src_rows = src.size() / row, dst_rows = dst.size() / row;
    for (size_t h = 0; h < heads; ++h) {
      std::copy_n(&src[kv_head_offset(head, src_rows, int(h), from_row)], n * head,
                  &dst[kv_head_offset(head, dst_rows, int(h), to_row)]);
    }
  };
  copy(from.k, to.k, r.k_head, r.k_row);
  copy(from.v, to.v, r.v_head, r.v_row);
}

int positive_threads(int n) {
  return n > 0 ? n : std::max(1, int(std::thread::hardware_concurrency()));
}

// ContextOptions::mla_decompress_min: -1 becomes the run length from which the decompressed
// form takes fewer multiply-adds. Per key it costs H (nope + v) R to decompress; per (query,
// key) it saves H (R + rope + R - nope - rope - v) (scores over R + rope dims and sums over R
// in the absorbed form, nope + rope and v decompressed): it pays once a key serves more than
// the quotient of queries. 0 (and models without MLA): never.
int resolve_mla_decompress_min(const ModelConfig& c, int opt) {
  if (opt >= 0 || !c.mla()) return std::max(0, opt);
  const int64_t R = c.kv_lora_rank, nope = c.qk_nope_dim, v = c.v_head_dim;
  const int64_t saved = 2 * R - nope - v;
  if (saved <= 0) return 0;
  return int(std::max<int64_t>(2, ((nope + v) * R + saved - 1) / saved));
}

// The routed-expert step: the caller's (expert parallelism), else this process's kernels,
// through the expert tier when the model has one.
std::unique_ptr<ExpertExecutor> make_executor(const Model& m, const ContextOptions& o,
                                              kernels::ThreadPool& pool, bool int_acts,
                                              kernels::Bf16Kernel bf16) {
  if (o.experts) return o.experts->make(pool, int_acts);
  if (m.expert_tier()) {
    return std::make_unique<TieredExpertExecutor>(*m.expert_tier(), m, pool, int_acts, bf16);
  }
  return std::make_unique<CpuExpertExecutor>(pool, int_acts, bf16);
}

}  // namespace

Context::Impl::Impl(const Model& m, const ContextOptions& o)
    : model(m),
      pool(positive_threads(o.n_threads)),
      int_acts(!o.exact_activations),
      bf16(o.bf16_activations ? kernels::bf16_kernel_by_name(o.bf16_kernel)
                              : kernels::Bf16Kernel::kNone),
      delta_chunk_min(std::max(0, o.delta_rule_chunk_min)),
      mla_decompress_min(resolve_mla_decompress_min(m.config(), o.mla_decompress_min)),
      experts(make_executor(m, o, pool, int_acts, bf16)),
      observer(m.config().n_layer, m.config().n_expert, o.record_trace) {
  if (o.n_ctx <= 0) throw Error("context size must be positive");
  if (!experts) throw Error("ContextOptions::experts made no executor");
  kv.n_ctx = o.n_ctx;
  set_cache_format(m.config(), o, kv);
  for (const LayerKind& k : m.config().layer_kinds) max_window = std::max(max_window, k.window);
  policy = make_routing_policy(o.routing);
  if (m.config().is_moe()) policy->check(m.config().gating);  // e.g. static-k:k above k
  routing_spec = o.routing;
  before_eval = o.before_eval;
}

Sequence& Context::Impl::sequence(int32_t seq) {
  if (seq < 0 || size_t(seq) >= kv.seqs.size() || !kv.seqs[size_t(seq)].in_use) {
    throw Error("unknown sequence id " + std::to_string(seq));
  }
  return kv.seqs[size_t(seq)];
}

void Context::Impl::validate(std::span<const BatchToken> batch) {
  const ModelConfig& c = model.config();
  const int n_ctx = kv.n_ctx;
  if (batch.empty()) throw Error("empty batch");
  // Positions must continue each sequence in batch order, so the KV cache has no holes.
  std::vector<std::pair<int32_t, int32_t>> next;  // (seq, next pos)
  for (const BatchToken& t : batch) {
    Sequence& s = sequence(t.seq);
    if (s.state_lost) {
      throw Error("sequence " + std::to_string(t.seq) +
                  " lost its recurrent state in a failed step: free it and evaluate it again");
    }
    if (t.token < 0 || t.token >= c.n_vocab) {
      throw Error("token id " + std::to_string(t.token) + " out of range [0, " +
                  std::to_string(c.n_vocab) + ")");
    }
    auto it = std::find_if(next.begin(), next.end(), [&](auto& p) { return p.first == t.seq; });
    int32_t expect = it == next.end() ? s.len : it->second;
    if (t.pos != expect) {
      throw Error("sequence " + std::to_string(t.seq) + ": position " + std::to_string(t.pos) +
                  " given, " + std::to_string(expect) + " expected");
    }
    if (t.pos >= n_ctx) {
      throw Error("sequence " + std::to_string(t.seq) + " exceeds the context limit of " +
                  std::to_string(n_ctx) + " tokens");
    }
    if (it == next.end()) {
      next.emplace_back(t.seq, t.pos + 1);
    } else {
      it->second = t.pos + 1;
    }
  }
}

// A full-attention layer's buffers with room for cap rows, rows [0, len) kept. The first
// call reserves the context limit's rows, so later ones only advise huge pages; where that
// much address space is refused (RLIMIT_AS, strict overcommit), cap rows are reserved and a
// larger cap copies the held rows to a new buffer, as a growing vector would.
void Context::Impl::reserve_rows(const KvRows& r, SequenceLayer& l, int32_t len,
                                 int32_t cap) const {
  constexpr size_t kHugeBytes = size_t{4} << 20;
  if (l.k.size() < size_t(cap) * r.k_row || l.v.size() < size_t(cap) * r.v_row) {
    SequenceLayer grown;
    const auto reserve = [&](int32_t rows) {
      return grown.k.try_reserve(size_t(rows) * r.k_row) &&
             grown.v.try_reserve(size_t(rows) * r.v_row);
    };
    if (!reserve(kv.n_ctx) && !reserve(cap)) throw std::bad_alloc();
    copy_kv_rows(r, l, grown, 0, 0, size_t(len));
    l.k = std::move(grown.k);
    l.v = std::move(grown.v);
  }
  if (size_t(cap) * r.k_row >= kHugeBytes) l.k.advise_huge_pages();
  if (size_t(cap) * r.v_row >= kHugeBytes) l.v.advise_huge_pages();
}

// Room for positions up to need - 1, `chunk` of them written by this step. Full-attention
// layers grow to hold every position; sliding-window layers keep a ring of the largest window
// - 1 plus max(chunk, kRollback) rows (all of a step's keys are written before any is read,
// and a short rollback, truncate_sequence, finds its window still there). A ring that must
// grow (a longer chunk) moves its held positions to their new rows.
void Context::Impl::reserve_cache(Sequence& s, int32_t need, int32_t chunk) {
  constexpr int32_t kRollback = 64;
  const ModelConfig& c = model.config();
  const int32_t cap =
      need <= s.cap ? s.cap
                    : std::max<int32_t>(need, std::min<int32_t>(kv.n_ctx, std::max(64, s.cap * 2)));
  const int32_t ring =
      max_window > 0 ? std::max(s.ring, std::min<int32_t>(
                                            kv.n_ctx, max_window - 1 + std::max(chunk, kRollback)))
                     : 0;
  for (size_t il = 0; il < s.layers.size(); ++il) {
    SequenceLayer& l = s.layers[il];
    const KvRows& r = kv.rows[il];
    if (c.layer_recurrent(int(il))) {  // the state slot, zeros before the first position
      if (l.state.empty()) {
        l.conv.assign(size_t(c.delta_net.conv_floats()), 0.f);
        l.state.assign(size_t(c.delta_net.state_floats()), 0.f);
      }
    } else if (c.layer_kinds[il].window == 0) {
      reserve_rows(r, l, s.len, cap);
    } else if (ring > s.ring) {
      SequenceLayer grown;
      grown.k.reserve(size_t(ring) * r.k_row);
      grown.v.reserve(size_t(ring) * r.v_row);
      for (int32_t p = s.ring_from; p < s.len && s.ring > 0; ++p) {
        copy_kv_rows(r, l, grown, size_t(p % s.ring), size_t(p % ring), 1);
      }
      l = std::move(grown);
    }
  }
  s.cap = cap;
  s.ring = ring;
}

void Context::Impl::eval(std::span<const BatchToken> batch) {
  validate(batch);
  if (before_eval) before_eval(batch);
  // Per sequence of the batch: its last position + 1 and its tokens in this step.
  std::vector<std::pair<int32_t, std::pair<int32_t, int32_t>>> need;  // seq -> (need, chunk)
  for (const BatchToken& t : batch) {
    auto it = std::find_if(need.begin(), need.end(), [&](auto& p) { return p.first == t.seq; });
    if (it == need.end()) {
      need.push_back({t.seq, {t.pos + 1, 1}});
    } else {
      it->second.first = std::max(it->second.first, t.pos + 1);
      ++it->second.second;
    }
  }
  for (const auto& [seq, nc] : need) reserve_cache(sequence(seq), nc.first, nc.second);
  const ForwardOperands op{model,
                           {pool, int_acts, bf16 != kernels::Bf16Kernel::kNone ? &buf.b16 : nullptr,
                            bf16, delta_chunk_min, mla_decompress_min},
                           {*policy, router_override},
                           *experts,
                           kv,
                           buf,
                           logits,
                           observer};
  try {
    forward(op, batch);
  } catch (...) {
    // The KV rows written are past each sequence's length and harmless; a recurrent state
    // may have advanced in some layers and not in others.
    if (model.config().recurrent()) {
      for (const auto& [seq, nc] : need) sequence(seq).state_lost = true;
    }
    throw;
  }
  for (const auto& [seq, nc] : need) {
    Sequence& s = sequence(seq);
    s.len = std::max(s.len, nc.first);
    // The rows just written replaced the positions one ring earlier.
    if (s.ring > 0) s.ring_from = std::max(s.ring_from, s.len - s.ring);
  }
}

size_t Context::kv_cache_bytes() const {
  size_t n = 0;
  for (size_t i = 0; i < impl_->kv.seqs.size(); ++i) n += sequence_cache_bytes(int32_t(i));
  return n;
}

size_t Context::sequence_cache_bytes(int32_t seq) const {
  if (seq < 0 || size_t(seq) >= impl_->kv.seqs.size()) return 0;
  // Full-attention layers count their cap rows (the buffer reserves more, backed only where
  // written); rings and recurrent states their whole size.
  const Sequence& s = impl_->kv.seqs[size_t(seq)];
  const ModelConfig& c = impl_->model.config();
  size_t n = 0;
  for (size_t il = 0; il < s.layers.size(); ++il) {
    const SequenceLayer& l = s.layers[il];
    const KvRows& r = impl_->kv.rows[il];
    n += !c.layer_recurrent(int(il)) && c.layer_kinds[il].window == 0
             ? size_t(s.cap) * (r.k_row + r.v_row)
             : l.k.size() + l.v.size();
    n += (l.conv.size() + l.state.size()) * sizeof(float);
  }
  // Shared snapshots count in every sequence that holds them: a bound over these bytes holds.
  for (const StateSnapshot& snap : s.snapshots) {
    n += snap.data->size() * sizeof(float);
  }
  return n;
}

int32_t Context::copy_sequence(int32_t src, int32_t len) {
  {
    const Sequence& s = impl_->sequence(src);
    if (len < 0 || len > s.len) {
      throw Error("copy_sequence: length " + std::to_string(len) + " outside [0, " +
                  std::to_string(s.len) + "]");
    }
    const int w = impl_->max_window;
    if (w > 0 && len > 0 && std::max(0, len - w + 1) < s.ring_from) {
      throw Error("copy_sequence: sequence " + std::to_string(src) + " no longer holds the " +
                  "window before position " + std::to_string(len));
    }
    // A recurrent state is that of the whole sequence or of a snapshot (see
    // truncate_sequence).
    if (impl_->model.config().recurrent() && len != 0 && (len != s.len || s.state_lost) &&
        Impl::find_snapshot(s, len) == nullptr) {
      throw Error("copy_sequence: sequence " + std::to_string(src) + " holds the recurrent " +
                  "state of its " + std::to_string(s.len) + " positions, not of the first " +
                  std::to_string(len) + " (no snapshot there)");
    }
  }
  const int32_t dst = new_sequence();  // may grow kv.seqs: take references after it
  const Sequence& s = impl_->kv.seqs[size_t(src)];
  Sequence& d = impl_->kv.seqs[size_t(dst)];
  if (len == 0) return dst;
  const ModelConfig& c = impl_->model.config();
  // Full-attention layers: rows [0, len), at the capacity the source would grow to. Window
  // layers: the whole ring (same ring size, so every held position keeps its row); positions
  // at len and beyond are never read (len is the sequence's length).
  const int32_t cap = std::max<int32_t>(len, std::min<int32_t>(impl_->kv.n_ctx, 64));
  for (size_t il = 0; il < d.layers.size(); ++il) {
    const SequenceLayer& from = s.layers[il];
    SequenceLayer& to = d.layers[il];
    if (c.layer_recurrent(int(il))) {
      if (len == s.len && !s.state_lost) {  // else restored from the snapshot below
        to.conv = from.conv;
        to.state = from.state;
      }
    } else if (c.layer_kinds[il].window == 0) {
      impl_->reserve_rows(impl_->kv.rows[il], to, 0, cap);
      copy_kv_rows(impl_->kv.rows[il], from, to, 0, 0, len);
    } else {
      to.k = from.k;
      to.v = from.v;
    }
  }
  if (c.recurrent()) {
    if (len != s.len || s.state_lost) impl_->restore(d, *Impl::find_snapshot(s, len));
    for (const StateSnapshot& snap : s.snapshots) {
      if (snap.len <= len) d.snapshots.push_back(snap);  // shared, not copied
    }
  }
  d.cap = cap;
  d.ring = s.ring;
  d.ring_from = std::min(s.ring_from, len);
  d.len = len;
  return dst;
}

}  // namespace lynx
