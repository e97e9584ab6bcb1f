// Model loading: resolves an architecture to a ModelConfig (data, not branches) through its
// description (src/model/arch/) and binds the weight tensors by the description's tensor
// tables (llama.cpp's names, llama-arch.cpp), validating every shape and type.
#include "lynx/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/weight_pack.h"
#include "model/arch/arch.h"
#include "model/read_config.h"
#include "model/weights.h"

namespace lynx {
namespace {

using arch::int_in;
using arch::kMaxDim;
using arch::positive_float;
using arch::positive_int;

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

  // Owned F32 storage of n values, alive as long as the model.
  float* own(size_t n) const {
    arena_.emplace_back(n);
    return arena_.back().data();
  }

  // A vector of n values, or (rows > 1) a [n x rows] table of them, as rows x n floats.
  const float* vector(const std::string& name, int64_t n, bool required = true,
                      int64_t rows = 1) const {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (required) throw Error("missing tensor '" + name + "'");
      return nullptr;
    }
    if (t->n_elements() != n * rows || t->ne[0] != n) {
      throw Error("tensor '" + name + "' has shape " + t->shape_string() + ", expected [" +
                  std::to_string(n) + (rows > 1 ? ", " + std::to_string(rows) : std::string()) +
                  "]");
    }
    n *= rows;
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
  for (const arch::ArchDesc* a : arch::all()) out.push_back(a->name);
  return out;
}

size_t Model::expert_bytes(int il) const {
  const LayerWeights& l = w_->layers[il];
  return l.gate_exps.mat_bytes + l.up_exps.mat_bytes + l.down_exps.mat_bytes;
}

// Owned small vectors and packed weights live in the model, behind a shared arena kept
// alive with it.
struct ModelArena {
  std::vector<std::vector<float>> vecs;
  std::unique_ptr<kernels::PackedWeights> packed;
};

namespace {}  // namespace

// Stage 1: the architecture resolved to data, from the metadata and the family's description.
// n_vocab and n_ff_shexp may still be completed from the tensors (bind_weights).
ModelConfig read_config(const gguf::File& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  const arch::ArchDesc& tr = arch::find(c.arch);
  c.name = gguf::printable(f.get_string("general.name", c.arch));  // shown in logs and output
  const std::string a = c.arch + ".";
  c.n_layer = positive_int(f, a + "block_count");
  // Each layer has several tensors: a block_count beyond the file's tensor count is a lie
  // that would otherwise size per-layer arrays (here and in every context) before the first
  // missing tensor is noticed.
  if (size_t(c.n_layer) > f.tensors().size()) {
    throw Error("metadata " + a + "block_count = " + std::to_string(c.n_layer) +
                " but the file holds only " + std::to_string(f.tensors().size()) + " tensors");
  }
  c.n_embd = positive_int(f, a + "embedding_length");
  // head_count may be a per-layer array too (step35): its first entry here, the family
  // reads and checks the whole array.
  const gguf::Value* hc = f.find(a + "attention.head_count");
  if (hc && hc->type == gguf::ValueType::ARRAY && !hc->as_array().empty()) {
    const int64_t v0 = hc->as_array().front().as_int(a + "attention.head_count");
    if (v0 < 1 || v0 > kMaxDim) {
      throw Error("metadata " + a + "attention.head_count[0] = " + std::to_string(v0) +
                  " is out of range [1, " + std::to_string(kMaxDim) + "]");
    }
    c.n_head = int(v0);
  } else {
    c.n_head = positive_int(f, a + "attention.head_count");
  }
  // A per-layer array (gemma4's sliding and full layers differ): its first entry here; the
  // family reads and checks the whole array (its read_metadata).
  const gguf::Value* hkv = f.find(a + "attention.head_count_kv");
  if (hkv && hkv->type == gguf::ValueType::ARRAY && !hkv->as_array().empty()) {
    const int64_t v0 = hkv->as_array().front().as_int(a + "attention.head_count_kv");
    c.n_head_kv = int(std::clamp<int64_t>(v0, 0, kMaxDim));
  } else {
    c.n_head_kv = int_in(f, a + "attention.head_count_kv", c.n_head, 1, kMaxDim);
  }
  c.n_ctx_train = int_in(f, a + "context_length", 4096, 1, kMaxDim);
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
    throw Error("attention.head_count_kv = " + std::to_string(c.n_head_kv) +
                " does not divide head_count = " + std::to_string(c.n_head));
  }
  c.head_dim = int_in(f, a + "attention.key_length", 0, 0, kMaxDim);
  if (c.head_dim == 0) {
    if (c.n_embd % c.n_head != 0) throw Error("embedding_length not divisible by head_count");
    c.head_dim = c.n_embd / c.n_head;
  }
  if (c.head_dim % 2 != 0 || c.head_dim <= 0) {
    throw Error("head dimension " + std::to_string(c.head_dim) + " must be positive and even");
  }
  // q_dim() and kv_dim() are int products: keep them far from overflow.
  if (int64_t(c.n_head) * c.head_dim > kMaxDim) {
    throw Error("head_count x head dimension = " + std::to_string(c.n_head) + " x " +
                std::to_string(c.head_dim) + " is out of range");
  }
  c.rms_eps = positive_float(f, a + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_base = positive_float(f, a + "rope.freq_base", 10000.0);
  c.rope = tr.rope;
  c.qk_norm = tr.qk_norm;
  c.qkv_bias = tr.qkv_bias;
  c.expert_act = tr.expert_act;
  c.dense_act = DenseAct::kSilu;
  c.n_expert = int_in(f, a + "expert_count", 0, 0, 4096);
  c.n_expert_used = int_in(f, a + "expert_used_count", 0, 0, 4096);
  if (tr.moe && c.n_expert == 0) throw Error(c.arch + " model without " + a + "expert_count");
  if (c.n_expert < 0 || c.n_expert > 4096 || c.n_expert_used < 0 ||
      (c.n_expert > 0 && (c.n_expert_used < 1 || c.n_expert_used > c.n_expert))) {
    throw Error("expert_used_count = " + std::to_string(c.n_expert_used) +
                " is invalid for expert_count = " + std::to_string(c.n_expert));
  }
  c.n_ff = int_in(f, a + "feed_forward_length", 0, 0, kMaxDim);
  c.n_ff_exp = int_in(f, a + "expert_feed_forward_length", c.n_ff, 0, kMaxDim);
  c.n_ff_shexp = int_in(f, a + "expert_shared_feed_forward_length", 0, 0, kMaxDim);
  c.gating.n_expert = c.n_expert;
  c.gating.n_expert_used = c.n_expert_used;
  c.gating.func = GatingFunc::kSoftmax;
  c.gating.norm_topk = f.get_bool(a + "expert_weights_norm", tr.norm_topk);
  c.gating.weights_scale = float(f.get_float(a + "expert_weights_scale", 1.0));
  if (!(c.gating.weights_scale >= 0.f) || !std::isfinite(c.gating.weights_scale)) {
    throw Error("metadata " + a + "expert_weights_scale = " +
                std::to_string(c.gating.weights_scale) + " must be a finite number >= 0");
  }
  // llama.cpp applies the scale only when it is set to something other than 0 or 1.
  if (c.gating.weights_scale == 0.f) c.gating.weights_scale = 1.f;
  // llama.cpp's expert_gating_func: 1 softmax, 2 sigmoid, 3 softmax over the selected (gpt-oss).
  // Absent, it is softmax for the families whose llama.cpp graph is (Mixtral, Qwen, OLMoE); the
  // families with another default decide it in their read_metadata (glm4moe and minimax-m2:
  // sigmoid; deepseek2: by the file's layout, as llama.cpp does).
  const int gating_func = int_in(f, a + "expert_gating_func", 1, 0, 3);
  if (gating_func == 2) c.gating.func = GatingFunc::kSigmoid;
  if (gating_func == 3) c.gating.func = GatingFunc::kSoftmaxWeight;
  c.gating.n_group = int_in(f, a + "expert_group_count", 1, 1, 64);
  c.gating.n_group_used = int_in(f, a + "expert_group_used_count", c.gating.n_group, 1, 64);
  if (c.gating.n_group > 1) {
    const int per = c.n_expert / c.gating.n_group;
    if (c.n_expert % c.gating.n_group != 0 || c.gating.n_group_used > c.gating.n_group ||
        c.n_expert_used > c.gating.n_group_used * per) {
      throw Error("metadata " + a + "expert_group_count = " + std::to_string(c.gating.n_group) +
                  " / expert_group_used_count = " + std::to_string(c.gating.n_group_used) +
                  " do not fit " + std::to_string(c.n_expert_used) + " of " +
                  std::to_string(c.n_expert) + " experts");
    }
  }
  if (tr.read_metadata) tr.read_metadata(f, c);
  arch::read_rope_scaling(f, tr, c);
  c.layer_kinds.resize(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) c.layer_kinds[size_t(il)] = arch::layer_kind(tr, c, il);
  return c;
}

namespace {

// Binds one group of a layer's tensors (arch::TensorGroup); returns false for an optional
// group the file does not have.
bool bind_group(const Binder& b, ModelConfig& c, const arch::TensorGroup& g, const std::string& p,
                LayerWeights& l) {
  if (g.optional) {
    const gguf::TensorInfo* t = b.find(p + g.trigger);
    if (!t) return false;
    if (g.infer == arch::Dim::kFfShexp && c.n_ff_shexp <= 0) c.n_ff_shexp = int(t->ne[1]);
  }
  for (const arch::TensorSpec& s : g.tensors) {
    const int64_t cols = arch::dim(c, s.cols);
    if (s.vec) {
      l.*s.vec = b.vector(p + s.name, cols, s.required, arch::dim(c, s.rows));
    } else {
      l.*s.mat = b.matrix(p + s.name, cols, arch::dim(c, s.rows), arch::dim(c, s.mats), s.required);
    }
  }
  return true;
}

// MLA: the per-head key and value up-projections, from attn_k_b / attn_v_b or split out of
// attn_kv_b (older files; F32 copies: rows h(nope + v) + i of attn_kv_b are head h's key
// rows, transposed here into wk_b, and the v rows after them its wv_b).
void finish_mla(const Binder& b, const ModelConfig& c, const std::string& p, LayerWeights& l) {
  if (l.wk_b.present()) return;
  if (!l.wkv_b.present()) {
    throw Error("missing tensor '" + p + "attn_k_b.weight' (or '" + p + "attn_kv_b.weight')");
  }
  const int64_t H = c.n_head, R = c.kv_lora_rank, nope = c.qk_nope_dim, vd = c.v_head_dim;
  std::vector<float> row(static_cast<size_t>(R));
  float* kb = b.own(size_t(H * R * nope));
  float* vb = b.own(size_t(H * vd * R));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < nope + vd; ++i) {
      const int64_t src = h * (nope + vd) + i;
      kernels::ref::dequantize_row(l.wkv_b.type, l.wkv_b.data + size_t(src) * l.wkv_b.row_bytes,
                                   row.data(), R);
      for (int64_t r = 0; r < R; ++r) {
        if (i < nope) {
          kb[(h * R + r) * nope + i] = row[size_t(r)];
        } else {
          vb[(h * vd + (i - nope)) * R + r] = row[size_t(r)];
        }
      }
    }
  }
  auto f32 = [](float* data, int64_t cols, int64_t rows, int64_t n_mat) {
    Weight w;
    w.type = gguf::TensorType::F32;
    w.data = reinterpret_cast<const uint8_t*>(data);
    w.cols = cols;
    w.rows = rows;
    w.n_mat = n_mat;
    w.row_bytes = size_t(cols) * sizeof(float);
    w.mat_bytes = w.row_bytes * size_t(rows);
    return w;
  };
  l.wk_b = f32(kb, nope, R, H);
  l.wv_b = f32(vb, R, vd, H);
  l.wkv_b = {};  // read once, here
}

// A fused attn_qkv: its first q_dim rows are wq, the next kv_dim wk, the last kv_dim wv
// (llama.cpp's build_qkv splits it the same way); views into the file mapping, no copy.
void split_qkv(const ModelConfig& c, LayerWeights& l) {
  if (!l.wqkv.present()) return;
  auto rows = [&](int64_t first, int64_t n) {
    Weight w = l.wqkv;
    w.data = l.wqkv.data + size_t(first) * l.wqkv.row_bytes;
    w.rows = n;
    w.mat_bytes = w.row_bytes * size_t(n);
    return w;
  };
  l.wq = rows(0, c.q_dim());
  l.wk = rows(c.q_dim(), c.kv_dim());
  l.wv = rows(c.q_dim() + c.kv_dim(), c.kv_dim());
  l.wqkv = {};
  l.qkv_fused = true;
}

// Fused experts (ffn_gate_up_exps: per expert F gate rows, then F up rows): gate_exps /
// up_exps become views of the two halves in the file, each matrix 2F rows after the last
// (mat_stride), with no copy; split_fused_experts copies them apart at load unless the expert
// tier reads them from the file. A routed layer with neither layout names both.
void view_gate_up(const ModelConfig& c, const std::string& p, LayerWeights& l, bool routed) {
  if (!l.gate_up_exps.present()) {
    if (routed && !l.gate_exps.present()) {
      throw Error("missing tensor '" + p + "ffn_gate_exps.weight' (or '" + p +
                  "ffn_gate_up_exps.weight')");
    }
    return;
  }
  if (l.gate_exps.present() || l.up_exps.present()) {
    throw Error("tensor '" + p +
                "ffn_gate_up_exps.weight' comes with ffn_gate_exps / "
                "ffn_up_exps: one layout or the other");
  }
  const Weight& f = l.gate_up_exps;
  const size_t half = f.row_bytes * size_t(c.n_ff_exp);
  for (int part = 0; part < 2; ++part) {
    Weight& w = part == 0 ? l.gate_exps : l.up_exps;
    w = f;
    w.data = f.data + size_t(part) * half;
    w.rows = c.n_ff_exp;
    w.mat_bytes = half;
    w.mat_stride = f.mat_bytes;
  }
  l.gate_up_exps = {};
  l.gate_up_fused = true;
}

// Stage 2, per layer: the tensors of the layer's block kinds, by the family's tables.
LayerWeights bind_layer(const Binder& b, const arch::ArchDesc& a, ModelConfig& c, int il) {
  LayerWeights l;
  l.expert_act = c.expert_act;
  l.expert_limit = c.layer_swiglu_exp(il);
  LayerKind& kind = c.layer_kinds[size_t(il)];
  const std::string p = "blk." + std::to_string(il) + ".";
  for (const arch::TensorGroup& g : arch::attn_groups(a, kind)) {
    if (arch::group_applies(c, g)) bind_group(b, c, g, p, l);
  }
  if (kind.attn == AttnKind::kMla) finish_mla(b, c, p, l);
  split_qkv(c, l);
  if (kind.ffn == FfnKind::kDense) {
    if (c.n_ff <= 0) throw Error("dense model without feed_forward_length");
  } else if (c.n_ff_exp <= 0) {
    throw Error("MoE model without expert_feed_forward_length");
  }
  for (const arch::TensorGroup& g : arch::ffn_groups(a, kind)) {
    // A bound optional group of an MoE layer is its shared expert.
    if (!arch::group_applies(c, g)) continue;
    const bool bound = bind_group(b, c, g, p, l);
    if (bound && g.optional && g.infer == arch::Dim::kFfShexp) kind.ffn = FfnKind::kMoeShared;
  }
  view_gate_up(c, p, l, kind.ffn != FfnKind::kDense);
  if (l.exp_probs_b) c.gating.select_bias = true;
  return l;
}

// The next-token-prediction blocks (blk.N. with N >= n_layer, ModelConfig::n_layer_nextn) are
// never run: the pages the read-ahead brought in are given back (GLM-4.5-Air: one MoE layer of
// 47, about 2% of the file).
void release_nextn_blocks(const gguf::File& f, const ModelConfig& c) {
  if (c.n_layer_nextn == 0) return;
  for (const gguf::TensorInfo& t : f.tensors()) {
    int il = -1;
    if (std::sscanf(t.name.c_str(), "blk.%d.", &il) == 1 && il >= c.n_layer) {
      f.release_pages(t.data, t.n_bytes);
    }
  }
}

kernels::MatrixRef matrix_ref(const Weight& w) {
  if (w.mat_stride != 0) throw Error("internal: a strided weight view reached the repacking");
  return {w.type, w.data, w.rows, w.cols, w.n_mat, w.row_bytes, w.mat_bytes, w.layout};
}

}  // namespace

Model::Model(gguf::File file) : file_(std::move(file)), w_(std::make_unique<ModelWeights>()) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opts) {
  gguf::File file = gguf::File::open(path);
  std::unique_ptr<Model> m(new Model(std::move(file)));
  m->cfg_ = read_config(m->file_);
  m->arena_ = std::make_shared<ModelArena>();
  m->bind_weights();
  const bool tier = m->plan_expert_tier(opts);
  if (!tier) m->split_fused_experts();
  // With the tier the experts are never read through the mapping; the dense weights are
  // read as the packing copies them.
  if (opts.prefetch && !opts.keep_expert && !tier) m->file_.prefetch(opts.progress);
  release_nextn_blocks(m->file_, m->cfg_);
  if (opts.repack || opts.repack_float) m->pack_weights(opts);
  return m;
}

// Stage 2: every tensor bound (views into the file mapping; small vectors copied to F32).
void Model::bind_weights() {
  const gguf::File& f = file_;
  ModelConfig& c = cfg_;
  Binder b(f, arena_->vecs);
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) throw Error("missing tensor 'token_embd.weight'");
  c.n_vocab = int(std::min<int64_t>(emb->ne[1], kMaxDim + 1));
  // The tokenizer and the embedding must agree on the vocabulary (as llama.cpp requires):
  // with fewer tokenizer entries the sampler would pick ids the tokenizer cannot decode, and
  // whole batches would fail mid-generation; with more, a prompt could hold ids the
  // embedding lacks. A file without a tokenizer (token ids in, logits out) is fine.
  if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens")) {
    const size_t n_tok = toks->as_array("tokenizer.ggml.tokens").size();
    if (n_tok != size_t(emb->ne[1])) {
      throw Error("the tokenizer has " + std::to_string(n_tok) +
                  " tokens but token_embd.weight has " + std::to_string(emb->ne[1]) +
                  " rows: the vocabulary sizes must match");
    }
  }
  w_->token_embd = b.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  w_->output_norm = b.vector("output_norm.weight", c.n_embd);
  w_->output = b.matrix("output.weight", c.n_embd, c.n_vocab, 1, false);
  if (!w_->output.present()) {
    w_->output = w_->token_embd;
    c.tied_output = true;
  }
  const arch::ArchDesc& a = arch::find(c.arch);
  w_->layers.resize(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) w_->layers[size_t(il)] = bind_layer(b, a, c, il);
}

// The views of fused gate/up experts (view_gate_up) copied apart into back-to-back matrices
// owned by the model, as the kernels, the repacking and the expert plan read them; without
// the tier only (the tier reads each expert's halves from the file into its slots, so a copy
// of every expert would defeat its memory budget).
void Model::split_fused_experts() {
  for (LayerWeights& l : w_->layers) {
    for (Weight* w : {&l.gate_exps, &l.up_exps}) {
      if (w->mat_stride == 0) continue;
      const size_t bytes = w->mat_bytes * size_t(w->n_mat);
      arena_->vecs.emplace_back((bytes + sizeof(float) - 1) / sizeof(float));
      auto* dst = reinterpret_cast<uint8_t*>(arena_->vecs.back().data());
      for (int64_t e = 0; e < w->n_mat; ++e) {
        std::memcpy(dst + size_t(e) * w->mat_bytes, w->mat(e), w->mat_bytes);
      }
      w->data = dst;
      w->mat_stride = 0;
    }
  }
}

// Stage 3: the matrices that only matmuls read in the layouts the kernels prefer (not MLA's
// per-head wk_b / wv_b, which may be F32 copies owned by the model rather than file pages)
// (kernels/weight_pack.h). token_embd alone is only read by rows (embedding lookup) and keeps
// the file's layout; tied to the output it is packed too, as the output's product reads all of
// it every step and the lookup reads its rows in any layout (kernels::read_row).
void Model::pack_weights(const LoadOptions& opts) {
  std::vector<Weight*> weights;
  for (LayerWeights& l : w_->layers) {
    for (Weight* w :
         {&l.wq,        &l.wk,        &l.wv,         &l.wo,        &l.wq_a,       &l.wq_b,
          &l.wkv_a_mqa, &l.ffn_gate,  &l.ffn_up,     &l.ffn_down,  &l.router,     &l.gate_exps,
          &l.up_exps,   &l.down_exps, &l.gate_shexp, &l.up_shexp,  &l.down_shexp, &l.ssm_qkv,
          &l.ssm_z,     &l.ssm_ba,    &l.ssm_beta,   &l.ssm_alpha, &l.ssm_out}) {
      if (w->present() && w->data != w_->token_embd.data && !(tier_ && routed_expert(*w))) {
        weights.push_back(w);
      }
    }
  }
  const bool tied = w_->output.data == w_->token_embd.data;
  weights.push_back(tied ? &w_->token_embd : &w_->output);
  std::vector<kernels::MatrixRef> refs;
  refs.reserve(weights.size());
  for (const Weight* w : weights) refs.push_back(matrix_ref(*w));
  // Expert shards: per layer, which experts to pack (LoadOptions::keep_expert).
  std::vector<std::vector<uint8_t>> keep(opts.keep_expert ? w_->layers.size() : 0);
  for (size_t il = 0; il < keep.size(); ++il) {
    for (int e = 0; e < cfg_.n_expert; ++e) keep[il].push_back(opts.keep_expert(int(il), e));
    for (kernels::MatrixRef& r : refs) {
      const LayerWeights& l = w_->layers[il];
      if (r.n_mat > 1 &&
          (r.data == l.gate_exps.data || r.data == l.up_exps.data || r.data == l.down_exps.data)) {
        r.keep = keep[il].data();
      }
    }
  }
  std::vector<kernels::MatrixRef*> ptrs;
  for (kernels::MatrixRef& r : refs) ptrs.push_back(&r);
  kernels::PackOptions po;
  po.interleave_int = opts.repack;
  po.panel_float = opts.repack_float;
  po.threads = opts.threads;
  po.release = [this](const uint8_t* p, size_t n) { file_.release_pages(p, n); };
  arena_->packed = kernels::pack_weights(ptrs, po);
  for (size_t i = 0; i < weights.size(); ++i) {
    weights[i]->data = refs[i].data;
    weights[i]->layout = refs[i].layout;
  }
  if (tied) w_->output = w_->token_embd;
}

}  // namespace lynx
