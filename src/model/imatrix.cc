// Importance matrices: the collector behind Context::set_activation_hook, the chunked driver,
// and the two file formats (lynx/imatrix.h). The formats are llama.cpp's, as its
// tools/imatrix writes and reads them.
#include "lynx/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include "lynx/error.h"
#include "lynx/gguf.h"
#include "model/weights.h"
#include "util/file.h"

namespace lynx {
namespace {

constexpr const char* kSumSuffix = ".in_sum2";
constexpr const char* kCountSuffix = ".counts";
// llama.cpp skips dense products of fewer rows (decode steps of its perplexity pass).
constexpr int64_t kMinDenseRows = 16;

bool ends_with(const std::string& s, const char* suf) {
  const size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

// Legacy reader over a byte buffer, every read bounds-checked.
struct ByteReader {
  const std::string& path;
  const std::string& buf;
  size_t pos = 0;
  template <typename T>
  T get(const char* what) {
    T v;
    if (buf.size() - pos < sizeof(T))
      throw Error(path + ": truncated legacy imatrix (" + what + ")");
    std::memcpy(&v, buf.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string bytes(size_t n, const char* what) {
    if (buf.size() - pos < n) throw Error(path + ": truncated legacy imatrix (" + what + ")");
    std::string s(buf.data() + pos, n);
    pos += n;
    return s;
  }
};

Imatrix read_legacy(const std::string& path, const std::string& buf) {
  ByteReader r{path, buf};
  const int32_t n_entries = r.get<int32_t>("entry count");
  if (n_entries < 1) throw Error(path + ": not an imatrix file (no entries)");
  Imatrix im;
  for (int32_t i = 0; i < n_entries; ++i) {
    const int32_t len = r.get<int32_t>("name length");
    if (len < 1 || len > 4096) {
      throw Error(path + ": entry " + std::to_string(i) + " has a name length of " +
                  std::to_string(len));
    }
    const std::string name = r.bytes(size_t(len), "name");
    const int32_t ncall = r.get<int32_t>("call count");
    const int32_t nval = r.get<int32_t>("value count");
    if (ncall < 0 || nval < 1 || size_t(nval) > (buf.size() - r.pos) / 4) {
      throw Error(path + ": entry '" + gguf::printable(name) + "' has " + std::to_string(nval) +
                  " values and " + std::to_string(ncall) + " calls, which the file cannot hold");
    }
    ImatrixEntry& e = im.entries[name];
    if (!e.in_sum2.empty()) throw Error(path + ": entry '" + gguf::printable(name) + "' twice");
    e.in_sum2.resize(size_t(nval));
    for (int32_t j = 0; j < nval; ++j) {
      const float v = r.get<float>("values");
      if (!std::isfinite(v) || v < 0) {
        throw Error(path + ": entry '" + gguf::printable(name) + "' has a negative or " +
                    "non-finite value");
      }
      e.in_sum2[size_t(j)] = v;  // mean square * ncall: the sum over ncall rows of means
    }
    e.counts = {ncall};
  }
  // Trailer (optional in files of the oldest releases): chunk count, dataset name.
  if (buf.size() - r.pos >= 4) im.chunk_count = uint32_t(std::max(0, r.get<int32_t>("chunks")));
  if (buf.size() - r.pos >= 4) {
    const int32_t len = r.get<int32_t>("dataset length");
    if (len > 0 && size_t(len) <= buf.size() - r.pos)
      im.datasets.push_back(r.bytes(size_t(len), ""));
  }
  return im;
}

Imatrix read_gguf(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  Imatrix im;
  const std::string type = f.get_string("general.type", "imatrix");
  if (type != "imatrix") throw Error(path + ": general.type is '" + type + "', not an imatrix");
  if (const gguf::Value* v = f.find("imatrix.datasets")) {
    for (const gguf::Value& s : v->as_array("imatrix.datasets")) {
      im.datasets.push_back(s.as_string("imatrix.datasets"));
    }
  }
  im.chunk_count = uint32_t(f.get_int("imatrix.chunk_count", 0));
  im.chunk_size = uint32_t(f.get_int("imatrix.chunk_size", 0));
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (ends_with(t.name, kSumSuffix)) {
      pairs[t.name.substr(0, t.name.size() - std::strlen(kSumSuffix))].first = &t;
    } else if (ends_with(t.name, kCountSuffix)) {
      pairs[t.name.substr(0, t.name.size() - std::strlen(kCountSuffix))].second = &t;
    }
  }
  if (pairs.empty()) throw Error(path + ": no <tensor>.in_sum2 / .counts pairs: not an imatrix");
  for (const auto& [name, p] : pairs) {
    const std::string pn = gguf::printable(name);
    if (!p.first || !p.second) {
      throw Error(path + ": '" + pn + "' has " +
                  (p.first ? "sums without counts" : "counts without sums"));
    }
    const gguf::TensorInfo &s = *p.first, &c = *p.second;
    if (s.type != gguf::TensorType::F32 || c.type != gguf::TensorType::F32) {
      throw Error(path + ": '" + pn + "' sums and counts must be F32");
    }
    const int64_t n_mat = c.n_elements();
    if (n_mat < 1 || c.ne[0] != 1 || s.n_elements() % n_mat != 0 ||
        s.ne[1] * s.ne[2] * s.ne[3] != n_mat) {
      throw Error(path + ": '" + pn + "' sums " + s.shape_string() + " do not fit counts " +
                  c.shape_string());
    }
    ImatrixEntry& e = im.entries[name];
    e.in_sum2.resize(size_t(s.n_elements()));
    const float* sv = reinterpret_cast<const float*>(s.data);
    for (size_t j = 0; j < e.in_sum2.size(); ++j) {
      float v;
      std::memcpy(&v, sv + j, 4);
      if (!std::isfinite(v) || v < 0)
        throw Error(path + ": '" + pn + "' has a negative or non-finite sum");
      e.in_sum2[j] = v;
    }
    e.counts.resize(size_t(n_mat));
    for (int64_t m = 0; m < n_mat; ++m) {
      float v;
      std::memcpy(&v, c.data + 4 * m, 4);
      if (!std::isfinite(v) || v < 0 || v > 9.0e15f) {
        throw Error(path + ": '" + pn + "' has a negative or non-finite count");
      }
      e.counts[size_t(m)] = std::llround(v);
    }
  }
  return im;
}

}  // namespace

std::vector<float> Imatrix::importance(const std::string& name, int64_t mat, int64_t cols,
                                       int64_t n_mat) const {
  auto it = entries.find(name);
  if (it == entries.end()) return {};
  const ImatrixEntry& e = it->second;
  if (cols <= 0 || int64_t(e.in_sum2.size()) != cols * n_mat ||
      (e.counts.size() != 1 && int64_t(e.counts.size()) != n_mat)) {
    throw Error("imatrix entry '" + gguf::printable(name) + "' has " +
                std::to_string(e.in_sum2.size()) + " values and " +
                std::to_string(e.counts.size()) + " counts; the tensor has " +
                std::to_string(n_mat) + " matrices of " + std::to_string(cols) + " columns");
  }
  const int64_t count = e.counts.size() == 1 ? e.counts[0] : e.counts[size_t(mat)];
  if (count <= 0) return {};
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) {
    out[size_t(j)] = float(e.in_sum2[size_t(mat * cols + j)] / double(count));
  }
  return out;
}

Imatrix read_imatrix(const std::string& path) {
  // Legacy files hold one float per column and expert of every matrix: a few GiB at most
  // for the largest released models.
  const std::string buf = util::read_file_bounded(path, 16 * util::kGiB, "imatrix file");
  if (buf.size() >= 4) {
    uint32_t magic;
    std::memcpy(&magic, buf.data(), 4);
    if (magic == gguf::kMagic) return read_gguf(path);
  }
  return read_legacy(path, buf);
}

void write_imatrix_gguf(const Imatrix& im, const std::string& path) {
  gguf::Writer w;
  w.set("general.type", gguf::Value::str("imatrix"));
  w.set("imatrix.datasets", gguf::Value::str_array(im.datasets));
  w.set("imatrix.chunk_count", gguf::Value::u32(im.chunk_count));
  w.set("imatrix.chunk_size", gguf::Value::u32(im.chunk_size));
  for (const auto& [name, e] : im.entries) {
    const int64_t n_mat = int64_t(e.counts.size());
    if (n_mat == 0 || e.in_sum2.size() % size_t(n_mat) != 0) {
      throw Error("imatrix entry '" + gguf::printable(name) + "' is inconsistent");
    }
    std::vector<float> sums(e.in_sum2.begin(), e.in_sum2.end());
    std::vector<float> counts(e.counts.begin(), e.counts.end());
    w.add_tensor(name + kSumSuffix, gguf::TensorType::F32, {int64_t(sums.size()) / n_mat, n_mat},
                 sums.data(), 4 * sums.size());
    w.add_tensor(name + kCountSuffix, gguf::TensorType::F32, {1, n_mat}, counts.data(),
                 4 * counts.size());
  }
  w.write(path);
}

void write_imatrix_dat(const Imatrix& im, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path + ": cannot write");
  auto put = [&](const void* p, size_t n) {
    out.write(static_cast<const char*>(p), std::streamsize(n));
  };
  auto put_i32 = [&](int32_t v) { put(&v, 4); };
  const int64_t chunk = std::max<int64_t>(1, im.chunk_size);
  put_i32(int32_t(im.entries.size()));
  for (const auto& [name, e] : im.entries) {
    put_i32(int32_t(name.size()));
    put(name.data(), name.size());
    const int64_t max_count =
        e.counts.empty() ? 0 : *std::max_element(e.counts.begin(), e.counts.end());
    const int32_t ncall = int32_t((max_count + chunk - 1) / chunk);
    put_i32(ncall);
    put_i32(int32_t(e.in_sum2.size()));
    const size_t per = e.in_sum2.size() / std::max<size_t>(1, e.counts.size());
    for (size_t j = 0; j < e.in_sum2.size(); ++j) {
      double count = double(e.counts[j / per]), value = e.in_sum2[j];
      if (count == 0) value = count = 1;  // llama.cpp stores 1 for an unused expert
      const float v = float(value / count * ncall);
      put(&v, 4);
    }
  }
  put_i32(int32_t(im.chunk_count));
  const std::string ds = im.datasets.empty() ? std::string() : im.datasets.back();
  put_i32(int32_t(ds.size()));
  put(ds.data(), ds.size());
  if (!out) throw Error(path + ": write error");
}

// ---- Collector ----

struct ImatrixCollector::Names {
  std::unordered_map<const Weight*, std::string> of;
};

ImatrixCollector::ImatrixCollector(const Model& model, bool process_output)
    : names_(std::make_unique<Names>()) {
  auto add = [&](const Weight& w, const std::string& name) {
    if (w.present()) names_->of[&w] = name;
  };
  for (int il = 0; il < model.config().n_layer; ++il) {
    const LayerWeights& L = model.layer(il);
    const std::string p = "blk." + std::to_string(il) + ".";
    if (L.qkv_fused) {
      // One tensor in the file; its three row views read the same activations.
      add(L.wq, p + "attn_qkv.weight");
    } else {
      add(L.wq, p + "attn_q.weight");
      add(L.wk, p + "attn_k.weight");
      add(L.wv, p + "attn_v.weight");
    }
    add(L.wo, p + "attn_output.weight");
    add(L.ffn_gate, p + "ffn_gate.weight");
    add(L.ffn_up, p + "ffn_up.weight");
    add(L.ffn_down, p + "ffn_down.weight");
    add(L.router, p + "ffn_gate_inp.weight");
    add(L.gate_exps, p + "ffn_gate_exps.weight");
    add(L.up_exps, p + "ffn_up_exps.weight");
    add(L.down_exps, p + "ffn_down_exps.weight");
    add(L.gate_shexp, p + "ffn_gate_shexp.weight");
    add(L.up_shexp, p + "ffn_up_shexp.weight");
    add(L.down_shexp, p + "ffn_down_shexp.weight");
  }
  // llama.cpp collects output.weight only on request, and never a tied output (whose tensor
  // is token_embd.weight).
  if (process_output && !model.config().tied_output) add(model.output(), "output.weight");
}

ImatrixCollector::~ImatrixCollector() = default;

void ImatrixCollector::attach(Context& ctx) {
  ctx.set_activation_hook(
      [this](const Weight& w, const float* x, int64_t n_rows, std::span<const int32_t> per_expert) {
        add(w, x, n_rows, per_expert);
      });
}

void ImatrixCollector::detach(Context& ctx) {
  ctx.set_activation_hook({});
}

void ImatrixCollector::add(const Weight& w, const float* x, int64_t n_rows,
                           std::span<const int32_t> per_expert) {
  auto it = names_->of.find(&w);
  if (it == names_->of.end()) return;
  const bool experts = !per_expert.empty();
  if (!experts && n_rows < kMinDenseRows) return;
  ImatrixEntry& e = im_.entries[it->second];
  const int64_t cols = w.cols, n_mat = experts ? int64_t(per_expert.size()) : 1;
  if (e.in_sum2.empty()) {
    e.in_sum2.assign(size_t(cols * n_mat), 0.0);
    e.counts.assign(size_t(n_mat), 0);
  }
  int64_t row = 0;
  for (int64_t m = 0; m < n_mat; ++m) {
    const int64_t rows_m = experts ? per_expert[size_t(m)] : n_rows;
    double* acc = &e.in_sum2[size_t(m * cols)];
    for (int64_t r = 0; r < rows_m; ++r, ++row) {
      const float* xr = x + row * cols;
      for (int64_t j = 0; j < cols; ++j) acc[j] += double(xr[j]) * double(xr[j]);
    }
    e.counts[size_t(m)] += rows_m;
  }
}

// ---- Driver ----

Imatrix compute_imatrix(const Model& model, const std::vector<int32_t>& tokens, int32_t bos,
                        const ImatrixOptions& opts) {
  if (opts.n_ctx < 2) throw Error("imatrix: the chunk size must be at least 2 tokens");
  int n_chunks = int(tokens.size() / size_t(opts.n_ctx));
  if (opts.max_chunks > 0) n_chunks = std::min(n_chunks, opts.max_chunks);
  if (n_chunks < 1) {
    throw Error("imatrix: the text has " + std::to_string(tokens.size()) +
                " tokens, less than one chunk of " + std::to_string(opts.n_ctx));
  }
  ContextOptions co;
  co.n_threads = opts.n_threads;
  co.n_ctx = opts.n_ctx;
  // The collector sees F32 inputs either way; exact activations keep the products (and the
  // later layers' inputs) those of the float model, as llama.cpp's F32 src1.
  co.exact_activations = true;
  Context ctx(model, co);
  ImatrixCollector col(model, opts.process_output);
  col.attach(ctx);
  const int V = model.config().n_vocab;
  double nll = 0;
  int64_t n_scored = 0;
  std::vector<BatchToken> batch(static_cast<size_t>(opts.n_ctx));
  const int first = opts.n_ctx / 2;
  for (int c = 0; c < n_chunks; ++c) {
    const int32_t seq = ctx.new_sequence();
    const int32_t* tk = tokens.data() + size_t(c) * size_t(opts.n_ctx);
    for (int i = 0; i < opts.n_ctx; ++i) {
      BatchToken& b = batch[size_t(i)];
      b.token = i == 0 && bos >= 0 ? bos : tk[i];
      b.seq = seq;
      b.pos = i;
      b.flags = kTokenPrefill;
      // Scored: the second half. With process_output every token's logits are computed, so
      // the output sees whole chunks as in llama-imatrix (where all logits are computed).
      b.logits = opts.process_output || (i >= first && i + 1 < opts.n_ctx);
    }
    ctx.eval(batch);
    for (int i = first; i + 1 < opts.n_ctx; ++i) {
      const std::span<const float> l = ctx.logits(opts.process_output ? i : i - first);
      const int32_t next = tk[size_t(i + 1)];
      double mx = l[0];
      for (int v = 1; v < V; ++v) mx = std::max(mx, double(l[size_t(v)]));
      double s = 0;
      for (int v = 0; v < V; ++v) s += std::exp(double(l[size_t(v)]) - mx);
      nll += mx + std::log(s) - double(l[size_t(next)]);
      ++n_scored;
    }
    ctx.free_sequence(seq);
    if (opts.progress)
      opts.progress(c + 1, n_chunks, std::exp(nll / double(std::max<int64_t>(1, n_scored))));
  }
  col.detach(ctx);
  Imatrix im = std::move(col.imatrix());
  im.chunk_count = uint32_t(n_chunks);
  im.chunk_size = uint32_t(opts.n_ctx);
  if (!opts.dataset.empty()) im.datasets.push_back(opts.dataset);
  return im;
}

}  // namespace lynx
