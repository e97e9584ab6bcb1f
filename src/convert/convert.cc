// convert_hf (lynx/convert.h): config -> metadata by the family's key rules, checkpoint ->
// tensor plan by its tensor rules (every rule resolved and every checkpoint tensor accounted
// for before anything is written), then one lazy GGUF tensor per plan entry, converted row by
// row from the mapped safetensors when the writer reaches it.
#include "lynx/convert.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "convert/family.h"
#include "convert/fill.h"
#include "convert/safetensors.h"
#include "convert/tokenizer.h"
#include "lynx/error.h"
#include "lynx/quantize.h"
#include "model/arch/arch.h"
#include "model/read_config.h"
#include "util/file.h"

namespace lynx {
namespace convert {
namespace {

namespace fs = std::filesystem;
using gguf::TensorType;

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

struct Plan {
  std::vector<Planned> tensors;
  std::set<std::string> used;
};

// What the file will hold, from the architecture: its description's tensor groups for each
// layer's block kinds, resolved (read_config) against the metadata convert writes plus a
// one-value stand-in for every tensor the checkpoint can give (the loader decides a few
// switches, such as q/k norms or the selection bias, by which tensors the file has). A group the
// description marks optional is written when the checkpoint has its trigger's source (required
// when its size is known from the config, as a shared expert's is); each tensor then comes from
// the family's rule for its name.
class Planner {
 public:
  Planner(const HfConfig& c, const Family& f, const Checkpoint& ck, const gguf::Writer& keys,
          bool mla_split)
      : c_(c), f_(f), a_(arch::find(f.arch)), ck_(ck), mla_split_(mla_split) {
    n_layer_ = c.get_int("num_hidden_layers");
    if (n_layer_ < 1 || n_layer_ > 4096) c.fail("num_hidden_layers must be in [1, 4096]");
    n_head_ = c.get_int("num_attention_heads");
    n_head_kv_ = c.get_int("num_key_value_heads", n_head_);
    if (f.nextn_key) {
      const int64_t nextn = c.get_int(f.nextn_key, 0);
      if (nextn > 16) c.fail(std::string(f.nextn_key) + " must be at most 16");
      n_layer_ += nextn;
    }
    cfg_ = resolve(keys);
    n_expert_ = cfg_.n_expert;
    if (f.qk_norm_key && c.get_bool(f.qk_norm_key, false) != (cfg_.qk_norm != QKNorm::kNone)) {
      const TensorRule* r = find_rule(f, arch::tensor::kAttnQNorm, mla_split);
      const std::string hf = r ? hf_name(*r, 0) : std::string(arch::tensor::kAttnQNorm);
      throw Error(c.get_bool(f.qk_norm_key, false)
                      ? "tensor '" + hf + "' is missing from the checkpoint (" + f.model_type +
                            " needs it for blk.0." + arch::tensor::kAttnQNorm + ": " +
                            f.qk_norm_key + " is true)"
                      : "tensor '" + hf + "' is in the checkpoint, but " + f.qk_norm_key +
                            " is false");
    }
    if (cfg_.n_layer + cfg_.n_layer_nextn != n_layer_) {
      throw Error(std::string(f.arch) + ": block_count " +
                  std::to_string(cfg_.n_layer + cfg_.n_layer_nextn) + " differs from the " +
                  std::to_string(n_layer_) + " layers converted");
    }
  }

  Plan run() {
    for (const arch::TensorSpec& t : arch::kGlobalTensors) add_spec(t, -1, t.required);
    in_rule_order(0);
    for (int il = 0; il < int(n_layer_); ++il) {
      const size_t first = plan_.tensors.size();
      const bool nextn = il >= cfg_.n_layer;
      const LayerKind kind = nextn ? arch::layer_kind(a_, cfg_, il) : cfg_.layer_kinds[size_t(il)];
      const std::span<const arch::TensorGroup> parts[] = {
          arch::attn_groups(a_, kind), arch::ffn_groups(a_, kind),
          nextn ? a_.nextn : std::span<const arch::TensorGroup>{}};
      for (const auto& groups : parts) {
        for (const arch::TensorGroup& g : groups) add_group(g, il);
      }
      for (const TensorRule& r : f_.unrun) {
        if (!nextn && ck_.find(hf_name(r, il))) add(r, il);
      }
      in_rule_order(first);
    }
    // Every tensor of the checkpoint must have gone somewhere: one left over means the table
    // and the checkpoint disagree, and the file would silently miss weights.
    for (const auto& [name, t] : ck_.tensors()) {
      if (plan_.used.count(name) || ignored(name)) continue;
      throw Error("tensor '" + gguf::printable(name) + "' (" + t->file + ") is not used by the " +
                  f_.model_type + " mapping");
    }
    return std::move(plan_);
  }

  int64_t n_layer() const { return n_layer_; }  // with the next-token-prediction layers
  int64_t n_expert() const { return n_expert_; }
  int64_t n_gqa() const { return n_head_kv_ > 0 ? n_head_ / n_head_kv_ : 1; }

 private:
  // The tensors from `first` on (one layer's, or the global ones) in the order of the family's
  // rules, which is the order llama.cpp's converter writes them in (the checkpoint's), not the
  // description's.
  void in_rule_order(size_t first) {
    auto rank = [&](const Planned& p) {
      int i = 0;
      for (const TensorRule& r : f_.global) {
        if (&r == p.rule) return i;
        ++i;
      }
      for (const auto& group : f_.layer) {
        for (const TensorRule& r : group) {
          if (&r == p.rule) return i;
          ++i;
        }
      }
      return i;
    };
    std::stable_sort(plan_.tensors.begin() + std::ptrdiff_t(first), plan_.tensors.end(),
                     [&](const Planned& a, const Planned& b) { return rank(a) < rank(b); });
  }

  // The rule's checkpoint name for layer il (expert 0 for a stacked one).
  static std::string hf_name(const TensorRule& r, int64_t il) {
    std::string hf = replace_all(r.hf, "{L}", std::to_string(il));
    return replace_all(hf, "{E}", "0");
  }

  // Whether the checkpoint has the source of GGUF tensor `tensor` in layer il.
  bool has_source(const char* tensor, int64_t il) const {
    const TensorRule* r = find_rule(f_, tensor, mla_split_);
    if (!r) return false;
    const std::string hf = hf_name(*r, il);
    return ck_.find(hf) || (fused(r->transform) && ck_.find(hf + "_blocks"));
  }

  // The metadata about to be written and a stand-in tensor (one F32 value) for each tensor the
  // checkpoint has a source of, read as the loader reads a file.
  ModelConfig resolve(const gguf::Writer& keys) const {
    gguf::Writer probe = keys;
    const float zero = 0.f;
    std::set<std::string> added;
    auto stand_in = [&](const char* tensor, int64_t il) {
      if (!has_source(tensor, il)) return;
      const std::string name =
          il < 0 ? std::string(tensor) : "blk." + std::to_string(il) + "." + tensor;
      if (added.insert(name).second) probe.add_tensor(name, TensorType::F32, {1}, &zero, 4);
    };
    for (const TensorRule& r : f_.global) stand_in(r.tensor, -1);
    for (int64_t il = 0; il < n_layer_; ++il) {
      for (const auto& group : f_.layer) {
        for (const TensorRule& r : group) stand_in(r.tensor, il);
      }
    }
    const std::vector<uint8_t> bytes = probe.to_bytes();
    const gguf::File file = gguf::File::from_memory(bytes.data(), bytes.size(), "converted");
    try {
      return read_config(file);
    } catch (const Error& e) {
      throw Error(std::string("config.json (") + f_.model_type +
                  ") gives metadata the loader refuses: " + e.what());
    }
  }

  void add_group(const arch::TensorGroup& g, int il) {
    if (!arch::group_applies(cfg_, g)) return;
    bool required = true;
    if (g.optional) {
      const bool sized = g.infer != arch::Dim::kOne && arch::dim(cfg_, g.infer) > 0;
      if (!sized && !has_source(g.trigger, il)) return;
      required = sized || has_source(g.trigger, il);
    }
    for (const arch::TensorSpec& t : g.tensors) add_spec(t, il, required && t.required);
  }

  void add_spec(const arch::TensorSpec& t, int64_t il, bool required) {
    const TensorRule* r = find_rule(f_, t.name, mla_split_);
    if (!r) {
      if (absent_reason(f_, t.name)) return;
      throw Error(std::string("convert: ") + f_.model_type + " has no rule for " + f_.arch +
                  "'s tensor " + t.name);
    }
    if (!required && !has_source(t.name, il)) return;
    add(*r, il);
  }

  // Rotary caches and layers past the converted ones (DeepSeek-V3's multi-token prediction
  // module), which llama.cpp's converter drops too.
  bool ignored(const std::string& name) const {
    if (name.ends_with("rotary_emb.inv_freq")) return true;
    // FP8 checkpoints' static activation scales: the converted file runs on dequantized weights
    // with the engine's own activations, as llama.cpp's converter drops them too.
    if (name.ends_with("activation_scale") || name.ends_with(".input_scale")) return true;
    if (name.starts_with("mtp.")) return true;  // Qwen3-Next / Qwen3.5's MTP module
    for (const char* pre : f_.ignore_prefixes) {
      if (name.starts_with(pre)) return true;
    }
    const std::string pre = "model.layers.";
    if (name.compare(0, pre.size(), pre) == 0) {
      const int64_t il = std::atoll(name.c_str() + pre.size());
      return il >= n_layer_;
    }
    return false;
  }

  // An FP8 tensor with its scales (weight_scale_inv beside "<x>.weight", "<x>_scale_inv" beside
  // a fused expert parameter): one per tensor, or a block grid of quantization_config's
  // weight_block_size; read times them, so the file holds the dequantized values.
  StTensor scaled(const StTensor& t) {
    if (t.dtype != DType::kF8E4M3) return t;
    const std::string sname = t.name + "_scale_inv";  // "q_proj.weight_scale_inv"
    const StTensor& st = need(sname, t.name + "'s scale");
    StTensor v = t;
    if (st.dtype == DType::kU8 || st.dtype == DType::kF8E4M3) bad_shape(st, "F32 / BF16 scales");
    v.scale.resize(size_t(st.n_elements()));
    row_to_f32(st, 0, st.n_elements(), v.scale.data());
    if (v.scale.size() == 1) return v;
    const nlohmann::json& q = c_.json().at("quantization_config");
    const nlohmann::json bs = q.contains("weight_block_size") ? q["weight_block_size"] : nullptr;
    const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 0, cols = t.shape.back();
    if (!bs.is_array() || bs.size() != 2 || !bs[0].is_number_integer() ||
        !bs[1].is_number_integer() || bs[0].get<int64_t>() < 1 || bs[1].get<int64_t>() < 1 ||
        rows == 0) {
      bad_shape(st,
                "one value (per-tensor scale), or a block grid with "
                "quantization_config.weight_block_size [rows, cols] over a matrix");
    }
    v.scale_rows = bs[0].get<int64_t>();
    v.scale_cols = bs[1].get<int64_t>();
    const std::vector<int64_t> grid = {(rows + v.scale_rows - 1) / v.scale_rows,
                                       (cols + v.scale_cols - 1) / v.scale_cols};
    if (st.shape != grid) {
      bad_shape(st, "[" + std::to_string(grid[0]) + ", " + std::to_string(grid[1]) +
                        "] (one scale per weight_block_size block of " + t.name + ")");
    }
    return v;
  }

  const StTensor& need(const std::string& name, const std::string& gguf_name) {
    const StTensor* t = ck_.find(name);
    if (!t) {
      throw Error("tensor '" + name + "' is missing from the checkpoint (" + f_.model_type +
                  " needs it for " + gguf_name + ")");
    }
    plan_.used.insert(name);
    return *t;
  }

  [[noreturn]] void bad_shape(const StTensor& t, const std::string& want) const {
    throw Error("tensor '" + t.name + "' has shape " + t.shape_string() + " (" +
                dtype_name(t.dtype) + "), expected " + want);
  }

  // One expert's slice of a fused [n_expert, ...] tensor, as a 2-D [rows, cols] view.
  static StTensor slice(const StTensor& t, int64_t e, int64_t rows, int64_t cols) {
    StTensor v = t;
    v.shape = {rows, cols};
    v.n_bytes = size_t(rows * cols) * dtype_size(t.dtype);
    v.data = t.data + size_t(e) * v.n_bytes;
    return v;
  }

  // gpt-oss's experts (Transform::kFused*): MXFP4 blocks + scales, or the dequantized tensor.
  // Output per expert: rows x cols = (ff x hidden) for gate / up, (hidden x ff) for down.
  // Qwen3-VL-MoE's (Transform::kHalf*): float only, gate and up the two halves of the outputs.
  void add_fused(const TensorRule& r, Planned& p, const std::string& hf) {
    const bool halves = half(r.transform);
    const int64_t hidden = c_.get_int("hidden_size");
    const int64_t ff = c_.get_int(halves ? "moe_intermediate_size" : "intermediate_size");
    const bool down = r.transform == Transform::kFusedDown || r.transform == Transform::kHalfDown;
    p.rows = down ? hidden : ff;
    p.cols = down ? ff : hidden;
    p.step = down || halves ? 1 : 2;
    p.off = r.transform == Transform::kFusedUp ? 1 : r.transform == Transform::kHalfUp ? ff : 0;
    const int64_t src_rows = down || !halves ? p.rows * p.step : 2 * ff, E = n_expert_;
    const std::string rows_s = std::to_string(src_rows), cols_s = std::to_string(p.cols);
    const std::string what = down     ? ""
                             : halves ? " (gate then up outputs)"
                                      : " (gate and up rows interleaved)";
    if (!halves && (ck_.find(hf + "_blocks") || ck_.find(hf + "_scales"))) {
      const StTensor& b = need(hf + "_blocks", p.name);
      const StTensor& s = need(hf + "_scales", p.name);
      if (p.cols % 32 != 0) bad_shape(b, "MXFP4 rows of a multiple of 32 values, not " + cols_s);
      const int64_t nb = p.cols / 32;
      const std::vector<int64_t> want_b = {E, src_rows, nb, 16}, want_s = {E, src_rows, nb};
      const std::string e_s = std::to_string(E), nb_s = std::to_string(nb);
      if (b.dtype != DType::kU8 || b.shape != want_b) {
        bad_shape(b, "U8 [" + e_s + ", " + rows_s + ", " + nb_s + ", 16]" + what);
      }
      if (s.dtype != DType::kU8 || s.shape != want_s) {
        bad_shape(s, "U8 [" + e_s + ", " + rows_s + ", " + nb_s + "]" + what);
      }
      for (int64_t e = 0; e < E; ++e) {
        p.parts.push_back(slice(b, e, src_rows, nb * 16));
        p.scales.push_back(slice(s, e, src_rows, nb));
      }
    } else {
      if (!ck_.find(hf)) {
        throw Error((halves ? "tensor '" + hf + "'"
                            : "tensor '" + hf + "_blocks' (MXFP4) or '" + hf + "' (dequantized)") +
                    " is missing from the checkpoint (" + f_.model_type + " needs it for " +
                    p.name + ")");
      }
      const StTensor& t = need(hf, p.name);
      if (t.dtype == DType::kU8 || t.shape != std::vector<int64_t>{E, p.cols, src_rows}) {
        bad_shape(t, "a float [" + std::to_string(E) + ", " + cols_s + ", " + rows_s + "]" + what);
      }
      for (int64_t e = 0; e < E; ++e) p.parts.push_back(slice(t, e, p.cols, src_rows));
    }
    p.ne = {p.cols, p.rows, E};
  }

  // Experts fused outputs first (Transform::kRows*) or stacked (kStacked3d): one [rows, cols]
  // view per expert.
  void add_rows_experts(const TensorRule& r, Planned& p, const std::string& hf) {
    const StTensor& t = need(hf, p.name);
    const int64_t E = n_expert_, F = cfg_.n_ff_exp, H = cfg_.n_embd;
    const bool stacked = r.transform == Transform::kStacked3d;
    const bool down = r.transform == Transform::kRowsDown ||
                      (stacked && std::string(r.tensor) == arch::tensor::kFfnDownExps);
    const std::vector<int64_t> want = down      ? std::vector<int64_t>{E, H, F}
                                      : stacked ? std::vector<int64_t>{E, F, H}
                                                : std::vector<int64_t>{E, 2 * F, H};
    if (t.dtype == DType::kU8 || t.shape != want) {
      bad_shape(t, "a float [" + std::to_string(want[0]) + ", " + std::to_string(want[1]) + ", " +
                       std::to_string(want[2]) + "]" +
                       (down || stacked ? "" : " (gate then up rows)"));
    }
    p.rows = down ? H : F;
    p.cols = down ? F : H;
    const size_t mat = size_t(want[1] * want[2]) * dtype_size(t.dtype);
    const size_t off = r.transform == Transform::kRowsUp ? size_t(F * H) * dtype_size(t.dtype) : 0;
    // FP8 fused experts: one scale per expert (<hf>_scale_inv [E, 1, 1] or [E]).
    std::vector<float> escale;
    if (t.dtype == DType::kF8E4M3) {
      const StTensor& st = need(hf + "_scale_inv", p.name);
      if (st.n_elements() != E || st.dtype == DType::kU8 || st.dtype == DType::kF8E4M3) {
        bad_shape(st, "one F32 / BF16 scale per expert (" + std::to_string(E) + ")");
      }
      escale.resize(size_t(E));
      row_to_f32(st, 0, E, escale.data());
    }
    for (int64_t e = 0; e < E; ++e) {
      StTensor v = t;
      if (!escale.empty()) v.scale = {escale[size_t(e)]};
      v.shape = {p.rows, p.cols};
      v.n_bytes = size_t(p.rows * p.cols) * dtype_size(t.dtype);
      v.data = t.data + size_t(e) * mat + off;
      p.parts.push_back(v);
    }
    p.ne = {p.cols, p.rows, E};
  }

  void add(const TensorRule& r, int64_t il) {
    const std::string L = std::to_string(il);
    Planned p;
    p.rule = &r;
    p.name = il < 0 ? std::string(r.tensor) : "blk." + L + "." + r.tensor;
    const std::string hf = replace_all(r.hf, "{L}", L);
    p.transform = r.transform;
    if (fused(r.transform)) {
      add_fused(r, p, hf);
      plan_.tensors.push_back(std::move(p));
      return;
    }
    if (r.transform == Transform::kRowsGate || r.transform == Transform::kRowsUp ||
        r.transform == Transform::kRowsDown || r.transform == Transform::kStacked3d) {
      add_rows_experts(r, p, hf);
      plan_.tensors.push_back(std::move(p));
      return;
    }
    const bool stacked = hf.find("{E}") != std::string::npos;
    const int64_t n_parts = stacked ? n_expert_ : 1;
    for (int64_t e = 0; e < n_parts; ++e) {
      const std::string name = stacked ? replace_all(hf, "{E}", std::to_string(e)) : hf;
      p.parts.push_back(scaled(need(name, p.name)));
    }
    const StTensor& t0 = p.parts[0];
    for (const StTensor& t : p.parts) {
      if (t.dtype == DType::kU8) {
        throw Error("tensor '" + t.name + "' is U8, which only MXFP4 expert blocks and scales " +
                    "may be (" + p.name + " needs floats)");
      }
      if (t.shape != t0.shape) {
        throw Error("tensor '" + t.name + "' has shape " + t.shape_string() + " but '" + t0.name +
                    "' has " + t0.shape_string() + " (stacked into " + p.name + ")");
      }
    }
    // Shapes: drop leading 1s (a [1, n] gate is the vector llama.cpp writes), then a vector
    // or a matrix.
    std::vector<int64_t> shape = t0.shape;
    while (shape.size() > 1 && shape[0] == 1 && !stacked) shape.erase(shape.begin());
    const bool conv = r.transform == Transform::kConv1d || r.transform == Transform::kTiledConv1d;
    if (conv && shape.size() == 3 && shape[1] == 1) shape.erase(shape.begin() + 1);
    if (shape.empty() || shape.size() > 2 || t0.n_elements() == 0) {
      throw Error("tensor '" + t0.name + "' has shape " + t0.shape_string() +
                  " (a non-empty vector or matrix expected)");
    }
    if (stacked && shape.size() != 2) {
      throw Error("expert tensor '" + t0.name + "' must be a matrix, has shape " +
                  t0.shape_string());
    }
    p.rows = shape.size() == 2 ? shape[0] : 1;
    p.cols = shape.back();
    if (r.transform == Transform::kEvenCols || r.transform == Transform::kOddCols) {
      // [n_expert, 2n] interleaved gate / up biases (gpt-oss).
      if (shape.size() != 2 || shape[0] != n_expert_ || p.cols % 2 != 0) {
        throw Error("tensor '" + t0.name + "' has shape " + t0.shape_string() + ", expected [" +
                    std::to_string(n_expert_) +
                    ", 2 x intermediate_size] (gate and up interleaved)");
      }
      p.step = 2;
      p.off = r.transform == Transform::kOddCols ? 1 : 0;
      p.cols /= 2;
    }
    p.ne = {p.cols};
    if (shape.size() == 2) p.ne.push_back(p.rows);
    if (stacked) p.ne.push_back(n_parts);
    if (r.transform == Transform::kKvBToKB || r.transform == Transform::kKvBToVB) {
      p.heads = n_head_;
      p.nope = c_.get_int("qk_nope_head_dim");
      p.vdim = c_.get_int("v_head_dim");
      if (shape.size() != 2 || p.heads * (p.nope + p.vdim) != shape[0]) {
        throw Error("tensor '" + t0.name + "' has shape " + t0.shape_string() + ", expected [" +
                    std::to_string(p.heads * (p.nope + p.vdim)) +
                    ", kv_lora_rank] (num_attention_heads x (qk_nope_head_dim + v_head_dim))");
      }
      const int64_t lora = shape[1];
      p.rows = r.transform == Transform::kKvBToKB ? lora : p.vdim;
      p.cols = r.transform == Transform::kKvBToKB ? p.nope : lora;
      p.ne = {p.cols, p.rows, p.heads};
    } else if (linear_attn(r.transform)) {
      linear_attn_layout(r.transform, t0, shape, p);
    } else if (r.transform == Transform::kPermuteQ || r.transform == Transform::kPermuteK) {
      p.heads = r.transform == Transform::kPermuteQ ? n_head_ : n_head_kv_;
      const int64_t n = p.rows == 1 ? p.cols : p.rows;
      if (p.heads < 1 || n % (2 * p.heads) != 0) {
        throw Error("tensor '" + t0.name + "': " + std::to_string(n) + " rows do not split into " +
                    std::to_string(p.heads) +
                    " heads of an even size (num_attention_heads / num_key_value_heads)");
      }
    }
    plan_.tensors.push_back(std::move(p));
  }

  static bool linear_attn(Transform t) {
    return t >= Transform::kPlusOne && t <= Transform::kTiledCols;
  }

  // Head `h` of the tiled order reads grouped head (h % n_k) r + h / n_k (r = n_v / n_k).
  std::vector<int64_t> tiled(int64_t width) const {
    const DeltaNet& d = cfg_.delta_net;
    const int64_t nk = d.n_k_heads, r = d.n_v_heads / d.n_k_heads;
    std::vector<int64_t> out;
    for (int64_t h = 0; h < d.n_v_heads; ++h) {
      const int64_t src = (h % nk) * r + h / nk;
      for (int64_t i = 0; i < width; ++i) out.push_back(src * width + i);
    }
    return out;
  }

  // The Gated DeltaNet transforms (Transform::kPlusOne .. kTiledCols): row and column maps
  // and value ops on a planned tensor, its shape checked against the architecture's sizes.
  void linear_attn_layout(Transform t, const StTensor& t0, const std::vector<int64_t>& shape,
                          Planned& p) {
    const DeltaNet& d = cfg_.delta_net;
    const int64_t dk = d.head_k_dim, dv = d.head_v_dim, nk = d.n_k_heads, nv = d.n_v_heads;
    const int64_t r = nk > 0 ? nv / nk : 0, kd = nk * dk, vd = nv * dv;
    auto expect = [&](int64_t rows, int64_t cols, const char* what) {
      const bool ok = rows == 1 ? shape.size() == 1 && shape[0] == cols
                                : shape.size() == 2 && shape[0] == rows && shape[1] == cols;
      if (!ok) {
        bad_shape(t0, (rows == 1 ? "[" : "[" + std::to_string(rows) + ", ") + std::to_string(cols) +
                          "] (" + what + ")");
      }
    };
    auto prefix = [&](int64_t n) {
      std::vector<int64_t> v;
      for (int64_t i = 0; i < n; ++i) v.push_back(i);
      return v;
    };
    switch (t) {
      case Transform::kPlusOne:
      case Transform::kNegExp:
        p.op = t;
        break;
      case Transform::kQkvzToQkv:
      case Transform::kQkvzToZ: {
        const int64_t per = 2 * dk + 2 * r * dv;
        expect(nk * per, p.cols, "per key head: q, k, then its value heads' v and z");
        for (int64_t part :
             t == Transform::kQkvzToQkv ? std::vector<int64_t>{0, 1, 2} : std::vector<int64_t>{3}) {
          for (int64_t g = 0; g < nk; ++g) {
            const int64_t off = g * per + (part < 2 ? part * dk : 2 * dk + (part - 2) * r * dv);
            const int64_t n = part < 2 ? dk : r * dv;
            for (int64_t i = 0; i < n; ++i) p.row_src.push_back(off + i);
          }
        }
        p.rows = int64_t(p.row_src.size());
        p.ne = {p.cols, p.rows};
        break;
      }
      case Transform::kConv1d:
        expect(2 * kd + vd, d.conv_kernel, "channels x kernel");
        break;
      case Transform::kTiledQkv:
      case Transform::kTiledConv1d:
        expect(2 * kd + vd, t == Transform::kTiledQkv ? p.cols : d.conv_kernel,
               "q, k, then v channels");
        p.row_src = prefix(2 * kd);
        for (int64_t i : tiled(dv)) p.row_src.push_back(2 * kd + i);
        break;
      case Transform::kTiledRows:
        if (shape.size() == 1) {
          expect(1, nv, "one per value head");
          p.col_src = tiled(1);
        } else {
          const int64_t width = p.rows == nv ? 1 : dv;
          expect(nv * width, p.cols, "value heads");
          p.row_src = tiled(width);
        }
        break;
      case Transform::kTiledNegExp:
        expect(1, nv, "one per value head");
        p.col_src = tiled(1);
        p.op = Transform::kNegExp;
        break;
      case Transform::kTiledCols:
        expect(p.rows, vd, "value heads' channels");
        p.col_src = tiled(dv);
        break;
      default:
        break;
    }
  }

  const HfConfig& c_;
  const Family& f_;
  const arch::ArchDesc& a_;
  const Checkpoint& ck_;
  bool mla_split_ = false;
  int64_t n_layer_ = 0, n_expert_ = 0, n_head_ = 0, n_head_kv_ = 0;
  ModelConfig cfg_;
  Plan plan_;
};

void write_keys(const HfConfig& c, const Family& f, gguf::Writer& w) {
  for (const auto& group : f.keys) {
    for (const KeyRule& k : group) {
      if (!c.has(k.hf)) {
        if (k.required) c.fail(std::string("missing key \"") + k.hf + "\"");
        continue;
      }
      const std::string key = std::string(f.arch) + "." + k.gguf;
      switch (k.kind) {
        case KeyKind::kU32: {
          const int64_t v = c.get_int(k.hf);
          if (v > int64_t(UINT32_MAX)) c.fail(std::string("\"") + k.hf + "\" is out of range");
          w.set(key, gguf::Value::u32(uint32_t(v)));
          break;
        }
        case KeyKind::kF32:
          w.set(key, gguf::Value::f32(float(c.get_float(k.hf))));
          break;
        case KeyKind::kBool:
          w.set(key, gguf::Value::boolean(c.get_bool(k.hf, false)));
          break;
      }
    }
  }
  if (f.extra_keys) f.extra_keys(c, w);
}

// Quantized checkpoints other than gpt-oss's MXFP4 experts (kept bit for bit) and the FP8
// releases (float8_e4m3 weights with per-tensor or per-block weight_scale_inv, dequantized):
// GPTQ, AWQ and the like are refused up front, naming the way out, rather than failing later on
// the first packed tensor.
void refuse_quantized(const HfConfig& c) {
  if (!c.has("quantization_config")) return;
  const nlohmann::json& q = c.json().at("quantization_config");
  const std::string method =
      q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
          ? q["quant_method"].get<std::string>()
          : std::string("?");
  if (method == "mxfp4" || method == "fp8") return;  // MXFP4 kept, FP8 dequantized
  c.fail("the checkpoint is quantized (quantization_config.quant_method \"" +
         gguf::printable(method) +
         "\"), which convert does not read (it reads fp8 and gpt-oss's mxfp4): dequantize it to "
         "BF16 first, then convert that");
}

// "auto": the checkpoint's own precision, so nothing is rounded. Routers are written F32 in
// every type, so an F32 router (Hunyuan-A13B keeps mlp.gate.wg in float32 beside BF16
// weights) does not make the whole file F32.
std::string auto_type(const Plan& plan) {
  bool f32 = false, bf16 = false;
  for (const Planned& p : plan.tensors) {
    if (p.ne.size() < 2 || p.name.find("ffn_gate_inp") != std::string::npos) continue;
    for (const StTensor& t : p.parts) {
      f32 |= t.dtype == DType::kF32;
      bf16 |= t.dtype == DType::kBF16 || t.dtype == DType::kF8E4M3;  // FP8: the BF16 release
    }
  }
  return f32 ? "F32" : bf16 ? "BF16" : "F16";
}

}  // namespace
}  // namespace convert

std::vector<std::string> convert_model_types() {
  std::vector<std::string> out;
  for (const convert::Family* f : convert::families()) {
    out.emplace_back(f->model_type);
    for (const char* other : f->other_model_types) out.emplace_back(other);
  }
  return out;
}

ConvertResult convert_hf(const std::string& hf_dir, const std::string& out,
                         const ConvertOptions& opts) {
  using namespace convert;
  const fs::path dir(hf_dir);
  const fs::path cfg_path = dir / "config.json";
  if (!fs::is_directory(dir)) throw Error(hf_dir + ": not a directory");
  if (!fs::exists(cfg_path)) throw Error(hf_dir + ": no config.json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(
        util::read_file_bounded(cfg_path.string(), 64 * util::kMiB, "config"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(cfg_path.string() + ": not valid JSON: " + e.what());
  }
  const HfConfig cfg(std::move(j), cfg_path.string());
  const Family& fam = find_family(cfg.model_type());
  refuse_quantized(cfg);

  gguf::Writer w;
  w.set("general.architecture", gguf::Value::str(fam.arch));
  std::string name = opts.name;
  if (name.empty()) name = fs::absolute(dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  w.set("general.name", gguf::Value::str(name));
  write_keys(cfg, fam, w);

  if (opts.mla_split) {
    if (!fam.split_keys) {
      throw Error(std::string("the split MLA layout applies to DeepSeek models, not ") +
                  fam.model_type);
    }
    fam.split_keys(cfg, w);
  }
  const Checkpoint ck = Checkpoint::open(hf_dir);
  Planner planner(cfg, fam, ck, w, opts.mla_split);
  Plan plan = planner.run();

  ConvertResult res;
  res.model_type = cfg.model_type();
  res.arch = fam.arch;
  res.type = opts.type.empty() || opts.type == "auto" ? auto_type(plan) : opts.type;
  w.set("general.file_type", gguf::Value::u32(quant_mix_ftype(res.type)));
  if (!quant_mix_is_float(res.type)) {
    std::string upper = res.type;
    for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    if (upper == "Q2_K_S") {  // its 2-bit rows need importance weights, which convert has not
      throw Error(
          "the Q2_K_S mix needs an importance matrix: convert to F16/BF16 and run "
          "`lynx-moe quantize --imatrix`");
    }
    w.set("general.quantization_version", gguf::Value::u32(2));
  }

  // Types per tensor, by the quantize rules (llama-quantize's); every source counts as F32, so
  // norms, biases and routers stay F32 as convert_hf_to_gguf.py writes them.
  QuantModelInfo info;
  info.n_layer = int(planner.n_layer());
  info.n_expert = int(planner.n_expert());
  info.n_gqa = int(planner.n_gqa());
  info.has_output = false;
  for (const Planned& p : plan.tensors) {
    info.has_output |= p.name == "output.weight";
    info.n_attention_wv += p.name.find("attn_v.weight") != std::string::npos;
  }
  // MXFP4 experts (gpt-oss) stay MXFP4, bit for bit, unless a float type is asked for (then
  // they are decoded, exactly): requantizing 4-bit weights would only lose.
  const bool keep_mxfp4 = opts.type.empty() || opts.type == "auto" || !quant_mix_is_float(res.type);
  int i_wv = 0;
  int64_t n_vocab = 0;
  std::set<const uint8_t*> counted;  // gate and up read the same fused tensor
  for (Planned& p : plan.tensors) {
    gguf::TensorInfo ti;
    ti.name = p.name;
    ti.type = TensorType::F32;
    ti.n_dims = int(p.ne.size());
    for (size_t d = 0; d < p.ne.size(); ++d) ti.ne[d] = p.ne[d];
    p.type = quant_tensor_type(res.type, info, ti, i_wv);
    if (p.mxfp4_src() && keep_mxfp4) p.type = TensorType::MXFP4;
    if (p.name.find("attn_v.weight") != std::string::npos) ++i_wv;
    if (p.name == "token_embd.weight") n_vocab = p.rows;
    for (const auto* parts : {&p.parts, &p.scales}) {
      for (const StTensor& t : *parts) {
        if (counted.insert(t.data).second) res.bytes_in += t.n_bytes;
      }
    }
  }
  if (n_vocab == 0) throw Error(hf_dir + ": no token embedding (model.embed_tokens.weight)");

  TokenizerInput ti;
  ti.dir = hf_dir;
  ti.arch = fam.arch;
  ti.pre = opts.tokenizer_pre.empty() ? fam.tokenizer_pre : opts.tokenizer_pre;
  ti.n_vocab = n_vocab;
  ti.config = &cfg.json();
  ti.warn = opts.warn;
  write_tokenizer(ti, w);

  if (fam.extra_tensors) fam.extra_tensors(cfg, w);
  const size_t n = plan.tensors.size();
  auto shared_plan = std::make_shared<std::vector<Planned>>(std::move(plan.tensors));
  for (size_t i = 0; i < n; ++i) {
    const Planned& p = (*shared_plan)[i];
    size_t bytes = gguf::row_size(p.type, p.ne[0]);
    for (size_t d = 1; d < p.ne.size(); ++d) bytes *= size_t(p.ne[d]);
    res.bytes_out += bytes;
    w.add_tensor_lazy(p.name, p.type, p.ne, [shared_plan, i, n, &opts](uint8_t* dst, size_t) {
      const Planned& q = (*shared_plan)[i];
      fill(q, dst, std::max(1, opts.n_threads));
      if (opts.progress) {
        gguf::TensorInfo t;
        t.name = q.name;
        t.type = q.type;
        t.n_dims = int(q.ne.size());
        for (size_t d = 0; d < q.ne.size(); ++d) t.ne[d] = q.ne[d];
        opts.progress(i, n, t);
      }
    });
  }
  w.write(out);
  res.n_tensors = n;
  return res;
}

}  // namespace lynx
