// Model loading: resolves an architecture to a ModelConfig (data, not branches) and binds
// the weight tensors by llama.cpp's names (llama-arch.cpp), validating every shape and type.
#include "lynx/model.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "kernels/kernels.h"
#include "kernels/thread_pool.h"

namespace lynx {
namespace {

// What differs between the architectures we run, following llama.cpp's graph builders.
struct ArchTraits {
  const char* name;
  RopeType rope;
  QKNorm qk_norm;
  bool qkv_bias;
  bool norm_topk;  // MoE top-k weights renormalized to sum 1
  bool moe;        // experts required (false: dense, or experts optional as for `llama`)
};

// llama: Mixtral-style experts are optional (dense Llama otherwise), top-k renormalized.
// qwen2moe: q/k/v biases, NEOX rope, top-k NOT renormalized (norm_topk_prob = false), shared
//   expert gated by a sigmoid.
// qwen3moe: per-head q/k RMSNorm, NEOX rope, top-k renormalized.
// olmoe: RMSNorm over the whole q and k projections, NEOX rope, top-k NOT renormalized.
constexpr ArchTraits kArchs[] = {
    {"llama", RopeType::kNorm, QKNorm::kNone, false, true, false},
    {"qwen2moe", RopeType::kNeox, QKNorm::kNone, true, false, true},
    {"qwen3moe", RopeType::kNeox, QKNorm::kPerHead, false, true, true},
    {"olmoe", RopeType::kNeox, QKNorm::kFull, false, false, true},
    {"qwen2", RopeType::kNeox, QKNorm::kNone, true, true, false},
    {"qwen3", RopeType::kNeox, QKNorm::kPerHead, false, true, false},
};

const ArchTraits& find_arch(const std::string& arch) {
  for (const auto& a : kArchs) {
    if (arch == a.name) return a;
  }
  std::string list;
  for (const auto& a : kArchs) list += std::string(list.empty() ? "" : ", ") + a.name;
  throw Error("unsupported architecture '" + arch + "' (supported: " + list + ")");
}

int positive_int(const gguf::File& f, const std::string& key) {
  int64_t v = f.get_int(key);
  if (v <= 0 || v > (int64_t(1) << 30)) {
    throw Error("metadata " + key + " = " + std::to_string(v) + " is out of range");
  }
  return int(v);
}

// Binds tensors and owns F32 copies of the small vectors (norms, biases), so those can be
// stored in any float type in the file.
class Binder {
 public:
  Binder(const gguf::File& f, std::vector<std::vector<float>>& arena) : f_(f), arena_(arena) {}

  const gguf::TensorInfo* find(const std::string& name) const { return f_.find_tensor(name); }

  Weight matrix(const std::string& name, int64_t cols, int64_t rows, int64_t n_mat = 1,
                bool required = true) const {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (required) throw Error("missing tensor '" + name + "'");
      return {};
    }
    const int64_t want[3] = {cols, rows, n_mat};
    bool ok = t->n_dims <= (n_mat > 1 ? 3 : 2);
    for (int d = 0; d < 3 && ok; ++d) ok = t->ne[d] == want[d];
    if (!ok) {
      throw Error("tensor '" + name + "' has shape " + t->shape_string() + ", expected [" +
                  std::to_string(cols) + ", " + std::to_string(rows) +
                  (n_mat > 1 ? ", " + std::to_string(n_mat) : std::string()) + "]");
    }
    if (!kernels::is_compute_type(t->type)) {
      throw Error("tensor '" + name + "' has weight type " + gguf::tensor_type_name(t->type) +
                  ", which this engine does not compute with (supported: " +
                  kernels::compute_type_names() + ")");
    }
    Weight w;
    w.type = t->type;
    w.data = t->data;
    w.cols = cols;
    w.rows = rows;
    w.n_mat = n_mat;
    w.row_bytes = gguf::row_size(t->type, cols);
    w.mat_bytes = w.row_bytes * size_t(rows);
    return w;
  }

  const float* vector(const std::string& name, int64_t n, bool required = true) const {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (required) throw Error("missing tensor '" + name + "'");
      return nullptr;
    }
    if (t->n_elements() != n || t->ne[0] != n) {
      throw Error("tensor '" + name + "' has shape " + t->shape_string() + ", expected [" +
                  std::to_string(n) + "]");
    }
    if (!kernels::is_compute_type(t->type)) {
      throw Error("tensor '" + name + "' has unsupported type " + gguf::tensor_type_name(t->type));
    }
    arena_.emplace_back(size_t(n));
    kernels::ref::dequantize_row(t->type, t->data, arena_.back().data(), n);
    return arena_.back().data();
  }

 private:
  const gguf::File& f_;
  std::vector<std::vector<float>>& arena_;
};

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& a : kArchs) out.push_back(a.name);
  return out;
}

size_t Model::expert_bytes(int il) const {
  const LayerWeights& l = layers_[il];
  return l.gate_exps.mat_bytes + l.up_exps.mat_bytes + l.down_exps.mat_bytes;
}

// Anonymous memory owned by the model (the repacked weights), unmapped with it. Plain pages:
// asking for transparent huge pages (MADV_HUGEPAGE) made the copy 0.18 s per GB in some runs
// but 1.1-2.1 s in most others on this VM (kernel time, no compaction stalls counted), against
// a steady 0.45-0.5 s with 4 KiB pages, and the kernels did not stream measurably faster.
class OwnedPages {
 public:
  explicit OwnedPages(size_t n) : n_(n) {
    void* p = mmap(nullptr, n_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      throw Error("cannot allocate " + std::to_string(n) +
                  " bytes for the repacked weights: " + std::strerror(errno));
    }
    data_ = static_cast<uint8_t*>(p);
  }
  ~OwnedPages() { munmap(data_, n_); }
  OwnedPages(const OwnedPages&) = delete;
  OwnedPages& operator=(const OwnedPages&) = delete;
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_ = nullptr;
  size_t n_ = 0;
};

// Owned small vectors and repacked weights live in the model, behind a shared arena kept
// alive with it.
struct ModelArena {
  std::vector<std::vector<float>> vecs;
  std::unique_ptr<OwnedPages> repacked;
};

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opts) {
  gguf::File file = gguf::File::open(path);
  std::unique_ptr<Model> m(new Model(std::move(file)));
  const gguf::File& f = m->file_;
  ModelConfig& c = m->cfg_;

  c.arch = f.get_string("general.architecture");
  const ArchTraits& tr = find_arch(c.arch);
  c.name = f.get_string("general.name", c.arch);
  const std::string a = c.arch + ".";
  c.n_layer = positive_int(f, a + "block_count");
  c.n_embd = positive_int(f, a + "embedding_length");
  c.n_head = positive_int(f, a + "attention.head_count");
  c.n_head_kv = int(f.get_int(a + "attention.head_count_kv", c.n_head));
  c.n_ctx_train = int(f.get_int(a + "context_length", 4096));
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
    throw Error("attention.head_count_kv = " + std::to_string(c.n_head_kv) +
                " does not divide head_count = " + std::to_string(c.n_head));
  }
  c.head_dim = int(f.get_int(a + "attention.key_length", 0));
  if (c.head_dim == 0) {
    if (c.n_embd % c.n_head != 0) throw Error("embedding_length not divisible by head_count");
    c.head_dim = c.n_embd / c.n_head;
  }
  if (c.head_dim % 2 != 0 || c.head_dim <= 0) {
    throw Error("head dimension " + std::to_string(c.head_dim) + " must be positive and even");
  }
  c.rms_eps = float(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_base = float(f.get_float(a + "rope.freq_base", 10000.0));
  c.rope = tr.rope;
  c.qk_norm = tr.qk_norm;
  c.qkv_bias = tr.qkv_bias;
  c.n_expert = int(f.get_int(a + "expert_count", 0));
  c.n_expert_used = int(f.get_int(a + "expert_used_count", 0));
  if (tr.moe && c.n_expert == 0) throw Error(c.arch + " model without " + a + "expert_count");
  if (c.n_expert < 0 || c.n_expert > 4096 || c.n_expert_used < 0 ||
      (c.n_expert > 0 && (c.n_expert_used < 1 || c.n_expert_used > c.n_expert))) {
    throw Error("expert_used_count = " + std::to_string(c.n_expert_used) +
                " is invalid for expert_count = " + std::to_string(c.n_expert));
  }
  c.n_ff = int(f.get_int(a + "feed_forward_length", 0));
  c.n_ff_exp = int(f.get_int(a + "expert_feed_forward_length", c.n_ff));
  c.n_ff_shexp = int(f.get_int(a + "expert_shared_feed_forward_length", 0));
  c.gating.n_expert = c.n_expert;
  c.gating.n_expert_used = c.n_expert_used;
  c.gating.func = GatingFunc::kSoftmax;
  c.gating.norm_topk = f.get_bool(a + "expert_weights_norm", tr.norm_topk);
  c.gating.weights_scale = float(f.get_float(a + "expert_weights_scale", 1.0));
  // llama.cpp applies the scale only when it is set to something other than 0 or 1.
  if (c.gating.weights_scale == 0.f) c.gating.weights_scale = 1.f;
  if (f.get_int(a + "expert_gating_func", 1) == 2) c.gating.func = GatingFunc::kSigmoid;

  auto arena = std::make_shared<ModelArena>();
  Binder b(f, arena->vecs);
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) throw Error("missing tensor 'token_embd.weight'");
  c.n_vocab = int(emb->ne[1]);
  m->token_embd_ = b.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  m->output_norm_ = b.vector("output_norm.weight", c.n_embd);
  m->output_ = b.matrix("output.weight", c.n_embd, c.n_vocab, 1, false);
  if (!m->output_.present()) {
    m->output_ = m->token_embd_;
    c.tied_output = true;
  }

  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim();
  m->layers_.resize(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights& l = m->layers_[size_t(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    l.attn_norm = b.vector(p + "attn_norm.weight", E);
    l.wq = b.matrix(p + "attn_q.weight", E, Q);
    l.wk = b.matrix(p + "attn_k.weight", E, KV);
    l.wv = b.matrix(p + "attn_v.weight", E, KV);
    l.wo = b.matrix(p + "attn_output.weight", Q, E);
    if (c.qkv_bias) {
      l.bq = b.vector(p + "attn_q.bias", Q);
      l.bk = b.vector(p + "attn_k.bias", KV);
      l.bv = b.vector(p + "attn_v.bias", KV);
    }
    if (c.qk_norm == QKNorm::kPerHead) {
      l.q_norm = b.vector(p + "attn_q_norm.weight", c.head_dim);
      l.k_norm = b.vector(p + "attn_k_norm.weight", c.head_dim);
    } else if (c.qk_norm == QKNorm::kFull) {
      l.q_norm = b.vector(p + "attn_q_norm.weight", Q);
      l.k_norm = b.vector(p + "attn_k_norm.weight", KV);
    }
    l.ffn_norm = b.vector(p + "ffn_norm.weight", E);
    if (c.is_moe()) {
      if (c.n_ff_exp <= 0) throw Error("MoE model without expert_feed_forward_length");
      const int64_t F = c.n_ff_exp, N = c.n_expert;
      l.router = b.matrix(p + "ffn_gate_inp.weight", E, N);
      l.gate_exps = b.matrix(p + "ffn_gate_exps.weight", E, F, N);
      l.up_exps = b.matrix(p + "ffn_up_exps.weight", E, F, N);
      l.down_exps = b.matrix(p + "ffn_down_exps.weight", F, E, N);
      if (b.find(p + "ffn_up_shexp.weight")) {
        if (c.n_ff_shexp <= 0) {
          c.n_ff_shexp = int(b.find(p + "ffn_up_shexp.weight")->ne[1]);
        }
        const int64_t S = c.n_ff_shexp;
        l.gate_shexp = b.matrix(p + "ffn_gate_shexp.weight", E, S);
        l.up_shexp = b.matrix(p + "ffn_up_shexp.weight", E, S);
        l.down_shexp = b.matrix(p + "ffn_down_shexp.weight", S, E);
        l.shexp_gate = b.vector(p + "ffn_gate_inp_shexp.weight", E, false);
        c.shexp_gate = l.shexp_gate != nullptr;
      }
    } else {
      if (c.n_ff <= 0) throw Error("dense model without feed_forward_length");
      l.ffn_gate = b.matrix(p + "ffn_gate.weight", E, c.n_ff);
      l.ffn_up = b.matrix(p + "ffn_up.weight", E, c.n_ff);
      l.ffn_down = b.matrix(p + "ffn_down.weight", c.n_ff, E);
    }
  }
  m->arena_ = std::move(arena);
  if (opts.prefetch) f.prefetch(opts.progress);
  if (opts.repack || opts.repack_float) {
    m->repack_weights(opts.threads, opts.repack, opts.repack_float);
  }
  return m;
}

// Into memory the model owns, not in place in the file mapping. Both cost the same memory
// (the mapping is private, so writing it in place copies every page written), but measured
// loading olmoe4-q4_0 (1 GB of Q4_0 repacked, page cache warm, one core of a 2-core VM): in
// place, the kernel's 4 KiB copy-on-write faults took 0.5-1.4 s (two threads: no faster, twice
// the CPU); the copy into anonymous memory a steadier 0.45-0.5 s. The file mapping also stays
// read-only. The source pages are released after the copy, so they do not count twice in the
// resident memory.
size_t Model::repack_weights(int threads, bool ints, bool floats) {
  std::vector<Weight*> todo, aliases;
  std::set<const uint8_t*> seen{token_embd_.data};  // row lookups read token_embd as rows
  auto layout_of = [&](const Weight& w) {
    if (ints && kernels::can_interleave(w.type, w.rows, w.cols)) {
      return kernels::WeightLayout::kInterleaved16;
    }
    if (floats && kernels::can_panel16(w.type, w.rows, w.cols)) {
      return kernels::WeightLayout::kPanel16;
    }
    return kernels::WeightLayout::kRows;
  };
  auto add = [&](Weight& w) {
    if (!w.present() || layout_of(w) == kernels::WeightLayout::kRows) return;
    if (seen.insert(w.data).second) {
      todo.push_back(&w);
    } else if (w.data != token_embd_.data) {  // a tensor bound twice is repacked once
      aliases.push_back(&w);
    }
  };
  for (LayerWeights& l : layers_) {
    for (Weight* w :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.router, &l.gate_exps,
          &l.up_exps, &l.down_exps, &l.gate_shexp, &l.up_shexp, &l.down_shexp}) {
      add(*w);
    }
  }
  add(output_);
  if (todo.empty()) return 0;

  // Each weight at a 64-byte boundary of one allocation, in work items of about 1 MiB (whole
  // groups of one matrix) spread over the threads.
  struct Item {
    const Weight* w;
    size_t dst;  // offset of the weight in the allocation
    int64_t mat, g0, g1;
  };
  std::vector<Item> items;
  std::vector<size_t> offsets;
  size_t total = 0, bytes = 0;
  for (const Weight* w : todo) {
    static_assert(kernels::kInterleaveRows == kernels::kPanelRows);  // 16-row groups either way
    const int64_t groups = w->rows / kernels::kInterleaveRows;
    const size_t group_bytes = w->row_bytes * size_t(kernels::kInterleaveRows);
    const int64_t step = std::max<int64_t>(1, int64_t((size_t(1) << 20) / group_bytes));
    for (int64_t i = 0; i < w->n_mat; ++i) {
      for (int64_t g = 0; g < groups; g += step) {
        items.push_back({w, total, i, g, std::min(groups, g + step)});
      }
    }
    offsets.push_back(total);
    bytes += w->mat_bytes * size_t(w->n_mat);
    total += (w->mat_bytes * size_t(w->n_mat) + 63) / 64 * 64;
  }
  arena_->repacked = std::make_unique<OwnedPages>(total);
  uint8_t* dst = arena_->repacked->data();
  kernels::ThreadPool pool(threads > 0 ? threads
                                       : std::max(1, int(std::thread::hardware_concurrency())));
  pool.parallel_for(int64_t(items.size()), [&](int64_t b, int64_t e, int) {
    for (int64_t k = b; k < e; ++k) {
      const Item& it = items[size_t(k)];
      const size_t off = it.dst + size_t(it.mat) * it.w->mat_bytes;
      if (layout_of(*it.w) == kernels::WeightLayout::kInterleaved16) {
        kernels::interleave16_into(it.w->type, it.w->mat(it.mat), dst + off, it.w->cols, it.g0,
                                   it.g1);
      } else {
        kernels::panel16_into(it.w->type, it.w->mat(it.mat), dst + off, it.w->cols, it.g0, it.g1);
      }
      // Drop the item's source pages now rather than after the whole copy, so that the
      // resident memory does not peak at twice the repacked bytes.
      const size_t group_bytes = it.w->row_bytes * size_t(kernels::kPanelRows);
      file_.release_pages(it.w->mat(it.mat) + size_t(it.g0) * group_bytes,
                          size_t(it.g1 - it.g0) * group_bytes);
    }
  });
  std::map<const uint8_t*, const uint8_t*> moved;
  for (size_t i = 0; i < todo.size(); ++i) {
    Weight& w = *todo[i];
    // The pages that straddle two items (each item released only the pages wholly inside it).
    file_.release_pages(w.data, w.mat_bytes * size_t(w.n_mat));
    moved[w.data] = dst + offsets[i];
    w.layout = layout_of(w);
    w.data = dst + offsets[i];
  }
  for (Weight* w : aliases) {
    w->layout = layout_of(*w);
    w->data = moved.at(w->data);
  }
  return bytes;
}

}  // namespace lynx
