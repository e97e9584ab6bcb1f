// Quantization mixes and the model quantizer (lynx/quantize.h). The per-tensor rules follow
// llama.cpp's llama_tensor_get_type for the mixes whose types this engine has; they are facts
// about a file format users know, re-expressed here as a table of mixes plus one function.
#include "lynx/quantize.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>

#include "kernels/kernels.h"
#include "kernels/thread_pool.h"
#include "lynx/error.h"
#include "model/quantize_weighted.h"

namespace lynx {
namespace {

using gguf::TensorType;

struct Mix {
  const char* name;
  TensorType base;
  uint32_t ftype;  // llama_ftype written to general.file_type
};

// llama_ftype values are llama.h's.
constexpr Mix kMixes[] = {
    {"F32", TensorType::F32, 0},          {"F16", TensorType::F16, 1},
    {"BF16", TensorType::BF16, 32},       {"Q4_0", TensorType::Q4_0, 2},
    {"Q4_1", TensorType::Q4_1, 3},        {"Q5_0", TensorType::Q5_0, 8},
    {"Q5_1", TensorType::Q5_1, 9},        {"Q8_0", TensorType::Q8_0, 7},
    {"Q2_K", TensorType::Q2_K, 10},       {"Q2_K_S", TensorType::Q2_K, 21},
    {"Q3_K_S", TensorType::Q3_K, 11},     {"Q3_K_M", TensorType::Q3_K, 12},
    {"Q3_K_L", TensorType::Q3_K, 13},     {"Q4_K_S", TensorType::Q4_K, 14},
    {"Q4_K_M", TensorType::Q4_K, 15},     {"Q5_K_S", TensorType::Q5_K, 16},
    {"Q5_K_M", TensorType::Q5_K, 17},     {"Q6_K", TensorType::Q6_K, 18},
    {"IQ4_NL", TensorType::IQ4_NL, 25},   {"IQ4_XS", TensorType::IQ4_XS, 30},
    {"MXFP4_MOE", TensorType::MXFP4, 38},
};

bool iequals(const std::string& a, const char* b) {
  const size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) != b[i]) return false;
  }
  return true;
}

const Mix& find_mix(const std::string& name) {
  for (const Mix& m : kMixes) {
    if (iequals(name, m.name)) return m;
  }
  std::string known;
  for (const Mix& m : kMixes) known += (known.empty() ? "" : ", ") + std::string(m.name);
  throw Error("unknown quantization mix '" + name + "' (known: " + known + ")");
}

bool is_float(TensorType t) {
  return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16;
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}
bool has(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

// Layers at the start and end, and every third in between, get more bits (llama.cpp's
// use_more_bits).
bool use_more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

int layer_of(const std::string& name) {
  int il = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &il) != 1) return 0;
  return il;
}

int64_t block_of(TensorType t) {
  int64_t be = 1;
  gguf::tensor_type_info(t, &be, nullptr);
  return be;
}

// A type whose block does not divide the row falls back to a 32-element type of about the same
// size, then to F16 (llama.cpp's tensor_type_fallback).
TensorType fallback(TensorType t, int64_t ne0) {
  if (ne0 % block_of(t) == 0) return t;
  switch (t) {
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::IQ4_XS:
      t = TensorType::IQ4_NL;
      break;
    case TensorType::Q4_K:
      t = TensorType::Q5_0;
      break;
    case TensorType::Q5_K:
      t = TensorType::Q5_1;
      break;
    case TensorType::Q6_K:
      t = TensorType::Q8_0;
      break;
    default:
      break;
  }
  return ne0 % block_of(t) == 0 ? t : TensorType::F16;
}

// The promotion rules for a quantized mix (llama_tensor_get_type_impl, the branches of the
// mixes in kMixes).
TensorType rule_type(const std::string& mix_name, const QuantModelInfo& m,
                     const gguf::TensorInfo& t, TensorType base, int i_wv) {
  auto is = [&](const char* a) { return mix_name == a; };
  const std::string& name = t.name;
  const bool output = name == "output.weight" || (!m.has_output && name == "token_embd.weight");
  if (output) {
    if (is("MXFP4_MOE")) return TensorType::Q8_0;
    if (t.ne[0] % block_of(base) != 0) return TensorType::Q8_0;
    return base == TensorType::Q8_0 ? base : TensorType::Q6_K;
  }
  if (is("MXFP4_MOE")) return t.ne[2] > 1 ? TensorType::MXFP4 : TensorType::Q8_0;
  if (name == "token_embd.weight") return base;
  const int il = layer_of(name), nl = std::max(m.n_layer, 1);
  TensorType nt = base;
  if (has(name, "attn_v.weight")) {
    if (is("Q2_K")) {
      nt = m.n_gqa >= 4 ? TensorType::Q4_K : TensorType::Q3_K;
    } else if (is("Q2_K_S") && m.n_gqa >= 4) {
      nt = TensorType::Q4_K;
    } else if (is("Q3_K_M")) {
      nt = i_wv < 2 ? TensorType::Q5_K : TensorType::Q4_K;
    } else if (is("Q3_K_L")) {
      nt = TensorType::Q5_K;
    } else if ((is("IQ4_NL") || is("IQ4_XS")) && m.n_gqa >= 4) {
      nt = TensorType::Q5_K;
    } else if ((is("Q4_K_M") || is("Q5_K_M")) && use_more_bits(i_wv, m.n_attention_wv)) {
      nt = TensorType::Q6_K;
    } else if (is("Q4_K_S") && i_wv < 4) {
      nt = TensorType::Q5_K;
    }
    if (m.n_expert == 8) nt = TensorType::Q8_0;
  } else if (has(name, "attn_k.weight")) {
    if (m.n_expert == 8) nt = TensorType::Q8_0;
  } else if (has(name, "ffn_down")) {
    if (is("Q2_K")) {
      nt = TensorType::Q3_K;
    } else if (is("Q2_K_S")) {
      if (il < nl / 8) nt = TensorType::Q4_K;
    } else if (is("Q3_K_M")) {
      nt = il < nl / 16 ? TensorType::Q5_K : TensorType::Q4_K;
    } else if (is("Q3_K_L")) {
      nt = TensorType::Q5_K;
    } else if (is("Q4_K_M")) {
      if (use_more_bits(il, nl)) nt = TensorType::Q6_K;
    } else if (il < nl / 8 && (is("IQ4_NL") || is("IQ4_XS"))) {
      nt = TensorType::Q5_K;
    } else if (is("Q5_K_M") && use_more_bits(il, nl)) {
      nt = TensorType::Q6_K;
    } else if (is("Q4_K_S") && il < nl / 8) {
      nt = TensorType::Q5_K;
    }
  } else if (has(name, "attn_output.weight")) {
    if (m.n_expert == 8) {
      if (is("Q2_K") || is("Q3_K_S") || is("Q3_K_M") || is("IQ4_NL") || is("Q4_K_S") ||
          is("Q4_K_M") || is("IQ4_XS")) {
        nt = TensorType::Q5_K;
      }
    } else if (is("Q2_K")) {
      nt = TensorType::Q3_K;
    } else if (is("Q3_K_M")) {
      nt = TensorType::Q4_K;
    } else if (is("Q3_K_L")) {
      nt = TensorType::Q5_K;
    }
  } else if (has(name, "attn_qkv.weight")) {
    if (is("Q3_K_M") || is("Q3_K_L")) {
      nt = TensorType::Q4_K;
    } else if (is("Q4_K_M")) {
      nt = TensorType::Q5_K;
    } else if (is("Q5_K_M")) {
      nt = TensorType::Q6_K;
    }
  }
  return nt;
}

}  // namespace

std::vector<std::string> quant_mix_names() {
  std::vector<std::string> out;
  for (const Mix& m : kMixes) out.emplace_back(m.name);
  return out;
}

uint32_t quant_mix_ftype(const std::string& mix) {
  return find_mix(mix).ftype;
}

bool quant_mix_is_float(const std::string& mix) {
  return is_float(find_mix(mix).base);
}

TensorType quant_tensor_type(const std::string& mix, const QuantModelInfo& info,
                             const gguf::TensorInfo& t, int i_attention_wv) {
  const Mix& m = find_mix(mix);
  // Only 2D+ ".weight" tensors other than the routers are quantized (llama.cpp's
  // tensor_allows_quantization); norms, biases and routers keep their type.
  if (t.n_dims < 2 || !ends_with(t.name, "weight") || has(t.name, "ffn_gate_inp")) return t.type;
  if (is_float(m.base)) return m.base;
  return fallback(rule_type(m.name, info, t, m.base, i_attention_wv), t.ne[0]);
}

QuantizeResult quantize_model(const std::string& in, const std::string& out,
                              const QuantizeOptions& opts) {
  const Mix& mix = find_mix(opts.mix);
  const gguf::File f = gguf::File::open(in);
  const std::string arch = f.get_string("general.architecture");
  QuantModelInfo info;
  info.n_layer = int(f.get_int(arch + ".block_count", 0));
  info.n_expert = int(f.get_int(arch + ".expert_count", 0));
  const int64_t n_head = f.get_int(arch + ".attention.head_count", 1);
  const int64_t n_head_kv = f.get_int(arch + ".attention.head_count_kv", n_head);
  info.n_gqa = n_head_kv > 0 ? int(n_head / n_head_kv) : 1;
  info.has_output = f.find_tensor("output.weight") != nullptr;
  for (const auto& t : f.tensors()) info.n_attention_wv += has(t.name, "attn_v.weight");

  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.metadata()) {
    if (kv.key == "general.alignment") {
      w.set_alignment(uint32_t(kv.value.as_uint("general.alignment")));
    } else {
      w.set(kv.key, kv.value);
    }
  }
  w.set("general.file_type", gguf::Value::u32(mix.ftype));
  w.set("general.quantization_version", gguf::Value::u32(2));

  if (mix.name == std::string("Q2_K_S") && !opts.imatrix) {
    throw Error(
        "the Q2_K_S mix needs an importance matrix (--imatrix), as llama-quantize "
        "requires one for it: its 2-bit rows are too coarse without");
  }
  // Importance vectors are checked against every tensor's shape before anything is written.
  std::vector<std::string> no_entry;
  if (opts.imatrix) {
    for (const auto& t : f.tensors()) {
      if (t.n_dims < 2) continue;
      const int64_t n_mat = t.ne[2] * t.ne[3];
      if (opts.imatrix->entries.count(t.name)) {
        (void)opts.imatrix->importance(t.name, 0, t.ne[0], n_mat);
      } else if (has_weighted_quantizer(quant_tensor_type(mix.name, info, t, 0))) {
        no_entry.push_back(t.name);
      }
    }
    if (!no_entry.empty() && opts.warn) {
      opts.warn("the importance matrix has no entry for " + std::to_string(no_entry.size()) +
                " tensor(s) (first: '" + no_entry[0] + "'); they are quantized without weights");
    }
  }

  QuantizeResult res;
  auto pool = std::make_shared<kernels::ThreadPool>(std::max(1, opts.n_threads));
  const size_t n = f.tensors().size();
  int i_wv = 0;
  bool warned = false;
  for (size_t i = 0; i < n; ++i) {
    const gguf::TensorInfo& t = f.tensors()[i];
    const TensorType to = quant_tensor_type(mix.name, info, t, i_wv);
    if (has(t.name, "attn_v.weight")) ++i_wv;
    if (to != t.type && !kernels::is_compute_type(t.type)) {
      throw Error("tensor '" + t.name + "' has type " + gguf::tensor_type_name(t.type) +
                  ", which cannot be decoded to be requantized");
    }
    if (to != t.type && !is_float(t.type) && !warned && opts.warn) {
      opts.warn(std::string("requantizing from ") + gguf::tensor_type_name(t.type) + " ('" +
                t.name + "' and others): the result carries the rounding of both types; " +
                "quantize from the F32/F16/BF16 file when there is one");
      warned = true;
    }
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    res.types.emplace_back(t.name, to);
    res.bytes_in += t.n_bytes;
    res.bytes_out += gguf::row_size(to, t.ne[0]) * size_t(t.n_elements() / t.ne[0]);
    const QuantizeOptions* o = &opts;
    const bool weighted = opts.imatrix && to != t.type && has_weighted_quantizer(to) &&
                          opts.imatrix->entries.count(t.name);
    res.n_weighted += weighted;
    w.add_tensor_lazy(
        t.name, to, ne, [&f, &t, to, pool, i, n, o, weighted](uint8_t* dst, size_t bytes) {
          if (to == t.type) {
            std::memcpy(dst, t.data, bytes);
          } else {
            const int64_t cols = t.ne[0], rows = t.n_elements() / cols;
            const int64_t rows_per_mat = t.ne[1], n_mat = t.ne[2] * t.ne[3];
            // Per matrix (expert) its importance; empty: an expert the text never reached.
            std::vector<std::vector<float>> imp(static_cast<size_t>(n_mat));
            if (weighted) {
              for (int64_t m = 0; m < n_mat; ++m) {
                imp[size_t(m)] = o->imatrix->importance(t.name, m, cols, n_mat);
              }
            }
            const size_t rb_in = gguf::row_size(t.type, cols), rb_out = gguf::row_size(to, cols);
            std::vector<std::vector<float>> bufs(size_t(pool->size()));
            pool->parallel_for(
                rows,
                [&](int64_t r0, int64_t r1, int tid) {
                  auto& row = bufs[size_t(tid)];
                  row.resize(size_t(cols));
                  for (int64_t r = r0; r < r1; ++r) {
                    kernels::ref::dequantize_row(t.type, t.data + size_t(r) * rb_in, row.data(),
                                                 cols);
                    const std::vector<float>& im = imp[size_t(r / rows_per_mat)];
                    if (!im.empty()) {
                      quantize_row_weighted(to, row.data(), im.data(), dst + size_t(r) * rb_out,
                                            cols);
                    } else {
                      kernels::quantize_row(to, row.data(), dst + size_t(r) * rb_out, cols);
                    }
                  }
                },
                16);
            f.release_pages(t.data, t.n_bytes);
          }
          if (o->progress) o->progress(i, n, t, to);
        });
  }
  w.write(out);
  return res;
}

}  // namespace lynx
