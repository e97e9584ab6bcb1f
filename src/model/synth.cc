// Random-weight GGUF models at real shapes (see lynx/synth.h).
#include "lynx/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "kernels/kernels.h"
#include "model/arch/arch.h"
#include "model/synth_shapes.h"

namespace lynx {
namespace {

// splitmix64: a fast seeded generator, so multi-GB models are written at disk speed.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Approximately normal: sum of uniforms (Irwin-Hall, 4 terms), unit variance.
  float normal() {
    uint64_t r = next();
    float acc = 0;
    for (int i = 0; i < 4; ++i) acc += float((r >> (16 * i)) & 0xFFFF) / 65535.f;
    return (acc - 2.f) * 1.7320508f;
  }
};

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others are moved to
// code points 256 and up, so every byte has a visible one-character token.
std::string byte_token(int b) {
  auto printable = [](int c) {
    return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
  };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += !printable(c);
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

class SynthWriter {
 public:
  SynthWriter(const SynthOptions& o, gguf::Writer& w) : o_(o), w_(w) {}

  void matrix(const std::string& name, gguf::TensorType type, int64_t cols, int64_t rows,
              int64_t n_mat, float std) {
    std::vector<int64_t> ne = {cols, rows};
    if (n_mat > 1) ne.push_back(n_mat);
    const size_t row_bytes = gguf::row_size(type, cols);
    const uint64_t seed = hash_name(name, o_.seed);
    total_ += row_bytes * size_t(rows * n_mat);
    w_.add_tensor_lazy(name, type, ne, [=, this](uint8_t* dst, size_t) {
      Rng rng{seed};
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows * n_mat; ++r) {
        for (auto& v : row) v = rng.normal() * std;
        kernels::quantize_row(type, row.data(), dst + size_t(r) * row_bytes, cols);
        done_ += row_bytes;
      }
      if (o_.progress) o_.progress(done_, total_);
    });
  }

  // n values, or (rows > 1) a [n x rows] table (gpt-oss's per-expert biases).
  void vector(const std::string& name, int64_t n, float mean, float std, int64_t rows = 1) {
    std::vector<float> v(static_cast<size_t>(n * rows));
    Rng rng{hash_name(name, o_.seed)};
    for (auto& x : v) x = mean + std * rng.normal();
    std::vector<int64_t> ne = {n};
    if (rows > 1) ne.push_back(rows);
    w_.add_tensor(name, gguf::TensorType::F32, ne, v.data(), v.size() * sizeof(float));
  }

  // n negative decay rates -exp(0.5 N(0,1) - 1) (ssm_a = -exp(A_log)): with dt biases near 0
  // a state keeps about 0.8 of itself per position, so the tests see several positions back.
  void decay(const std::string& name, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    Rng rng{hash_name(name, o_.seed)};
    for (auto& x : v) x = -std::exp(0.5f * rng.normal() - 1.f);
    w_.add_tensor(name, gguf::TensorType::F32, {n}, v.data(), v.size() * sizeof(float));
  }

 private:
  const SynthOptions& o_;
  gguf::Writer& w_;
  size_t total_ = 0;
  size_t done_ = 0;
};

// llama3-type rope factors as llama.cpp's converter writes rope_freqs for step35: over the
// head_dim_alt / 2 frequencies base^(-2i/head_dim_alt), wavelengths below orig / high keep
// factor 1, above orig / 1 take `factor`, between a smooth blend.
std::vector<float> llama3_factors(const SynthShape& s) {
  const int d = s.head_dim_alt;
  const double orig = s.llama3_orig_ctx, lo_wl = orig / 1.0, hi_wl = orig / double(s.llama3_high);
  std::vector<float> out;
  for (int i = 0; i < d / 2; ++i) {
    const double freq = 1.0 / std::pow(double(s.rope_base_alt), 2.0 * i / d);
    const double wl = 2 * std::numbers::pi / freq;
    if (wl < hi_wl) {
      out.push_back(1.f);
    } else if (wl > lo_wl) {
      out.push_back(s.llama3_factor);
    } else {
      const double smooth = (orig / wl - 1.0) / (double(s.llama3_high) - 1.0);
      out.push_back(float(1.0 / ((1.0 - smooth) / s.llama3_factor + smooth)));
    }
  }
  return out;
}

// The configuration a shape describes, as the loader will read it back (the dimensions the
// tensor tables are written in, and the block kind of every layer).
ModelConfig synth_config(const SynthShape& s, const arch::ArchDesc& desc) {
  ModelConfig c;
  c.arch = s.arch;
  c.n_layer = s.n_layer;
  c.n_embd = s.n_embd;
  c.n_head = s.n_head;
  c.n_head_kv = s.n_head_kv;
  c.head_dim = s.head_dim;
  c.n_vocab = s.n_vocab;
  c.n_ctx_train = s.n_ctx;
  c.n_ff = s.n_ff;
  c.n_expert = s.n_expert;
  c.n_expert_used = s.n_expert_used;
  c.n_ff_exp = s.n_ff_exp;
  c.n_ff_shexp = s.n_ff_shexp;
  c.rope_base = s.rope_base;
  c.rms_eps = s.rms_eps;
  c.q_lora_rank = s.q_lora_rank;
  c.kv_lora_rank = s.kv_lora_rank;
  c.qk_nope_dim = s.qk_nope_dim;
  c.qk_rope_dim = s.qk_rope_dim;
  c.v_head_dim = s.v_head_dim;
  // A depth cut below the leading dense layers (--layers) keeps one MoE layer.
  c.n_layer_dense_lead =
      s.n_expert > 0 ? std::min(s.n_layer_dense_lead, s.n_layer - 1) : s.n_layer_dense_lead;
  c.n_expert_shared = s.n_expert_shared;
  c.n_moe_layer_step = s.moe_layer_step;
  c.n_swa = s.sliding_window;
  if (s.yarn_factor > 0.f) {
    c.yarn.on = true;
    c.yarn.factor = s.yarn_factor;
    c.yarn.orig_ctx = s.yarn_orig_ctx;
    c.yarn.log_mul = s.yarn_log_mul;
  }
  if (c.n_ff_shexp == 0) c.n_ff_shexp = s.n_expert_shared * s.n_ff_exp;
  c.n_rot = s.n_rot;
  c.n_layer_nextn = s.n_nextn;
  c.qk_norm = s.qk_norm ? QKNorm::kPerHead : desc.qk_norm;
  c.gating.n_expert = s.n_expert;
  c.gating.n_expert_used = s.n_expert_used;
  c.gating.func = s.sigmoid ? GatingFunc::kSigmoid : GatingFunc::kSoftmax;
  c.gating.select_bias = s.select_bias;
  c.gating.norm_topk = s.norm_topk;
  c.gating.weights_scale = s.weights_scale;
  c.gating.n_group = s.n_group;
  c.gating.n_group_used = s.n_group_used;
  if (s.head_dim_alt > 0) {
    AltAttention& a = c.alt;
    a.head_dim = s.head_dim_alt;
    a.n_head_kv = s.n_head_kv_alt;
    a.k_eq_v = s.k_eq_v_alt;
    a.rope_base = s.rope_base_alt;
    a.n_head = s.n_head_alt;
    if (s.n_rot_alt > 0) {
      a.n_rot = s.n_rot_alt;
      if (s.llama3_factor > 0.f) a.freq_factors = llama3_factors(s);
    } else {
      a.n_rot = s.head_dim_alt;
      // Hugging Face's proportional rope: int(frac * head_dim // 2) pairs rotate at
      // base^(-2i/head_dim), the others not (llama.cpp's rope_freqs: 1, then 1e30).
      const int rotated = int(s.rope_frac_alt * float(s.head_dim_alt) / 2.f);
      a.freq_factors.assign(size_t(s.head_dim_alt / 2), 1e30f);
      std::fill_n(a.freq_factors.begin(), std::min(rotated, s.head_dim_alt / 2), 1.f);
    }
    // gemma4: every alt_period-th layer full, and the last one (Gemma4TextConfig forces it);
    // step35 (alt_first): the first of every alt_period.
    a.layers.assign(size_t(s.n_layer), 0);
    for (int il = 0; il < s.n_layer; ++il) {
      a.layers[size_t(il)] =
          s.alt_first
              ? s.alt_period > 0 && il % s.alt_period == 0
              : il == s.n_layer - 1 || (s.alt_period > 0 && il % s.alt_period == s.alt_period - 1);
    }
  }
  c.attn_gate = s.attn_gate ? AttnGate::kHeadSigmoid : AttnGate::kNone;
  if (s.swiglu_last > 0) {
    c.swiglu_exp.assign(size_t(s.n_layer), 0.f);
    c.swiglu_ffn.assign(size_t(s.n_layer), 0.f);
    for (int il = std::max(0, s.n_layer - s.swiglu_last); il < s.n_layer; ++il) {
      c.swiglu_exp[size_t(il)] = s.swiglu_exp;
      c.swiglu_ffn[size_t(il)] = s.swiglu_ffn;
    }
  }
  c.final_softcap = s.final_softcap;
  if (s.ssm_v_heads > 0) {
    DeltaNet& d = c.delta_net;
    d.conv_kernel = s.ssm_conv_kernel;
    d.head_k_dim = d.head_v_dim = s.ssm_head_dim;
    d.n_k_heads = s.ssm_k_heads;
    d.n_v_heads = s.ssm_v_heads;
    d.layers.assign(size_t(s.n_layer), 0);
    for (int il = 0; il < s.n_layer; ++il) {
      d.layers[size_t(il)] = s.full_attn_interval <= 0 || (il + 1) % s.full_attn_interval != 0;
    }
  }
  c.layer_kinds.resize(size_t(s.n_layer));
  for (int il = 0; il < s.n_layer; ++il) c.layer_kinds[size_t(il)] = arch::layer_kind(desc, c, il);
  return c;
}

// One tensor of a layer's table, filled as its Init says.
void write_tensor(SynthWriter& sw, const SynthOptions& o, const ModelConfig& c,
                  const std::string& prefix, const arch::TensorSpec& t) {
  const int64_t cols = arch::dim(c, t.cols), rows = arch::dim(c, t.rows);
  const float in_std = 1.f / std::sqrt(float(c.n_embd));
  switch (t.init) {
    case arch::Init::kNorm:
      sw.vector(prefix + t.name, cols, 1.f, 0.05f, rows);
      break;
    case arch::Init::kBias:
      sw.vector(prefix + t.name, cols, 0.f, 0.02f, rows);
      break;
    case arch::Init::kGateVec:
      sw.vector(prefix + t.name, cols, 0.f, in_std, rows);
      break;
    case arch::Init::kMatrix: {
      // Routed experts (a stack of n_expert matrices) may have their own type.
      const bool expert = t.mats == arch::Dim::kExpert;
      const gguf::TensorType type = !expert                 ? o.type
                                    : o.expert_type         ? *o.expert_type
                                    : o.shape.mxfp4_experts ? gguf::TensorType::MXFP4
                                                            : o.type;
      sw.matrix(prefix + t.name, type, cols, rows, arch::dim(c, t.mats),
                1.f / std::sqrt(float(cols)));
      break;
    }
    case arch::Init::kConv:
      sw.vector(prefix + t.name, cols, 0.f, 1.f / std::sqrt(float(cols)), rows);
      break;
    case arch::Init::kDecayA:
      sw.decay(prefix + t.name, cols);
      break;
    case arch::Init::kRouter:
      sw.matrix(prefix + t.name, gguf::TensorType::F32, cols, arch::dim(c, t.rows),
                arch::dim(c, t.mats), o.router_std * (1.f / std::sqrt(float(cols))));
      break;
  }
}

}  // namespace

std::vector<std::string> synth_shape_names() {
  std::vector<std::string> out;
  for (const auto& s : synth_shapes()) out.push_back(s.name);
  return out;
}

SynthShape synth_shape(const std::string& name) {
  for (const auto& s : synth_shapes()) {
    if (s.name == name) return s;
  }
  std::string list;
  for (const auto& s : synth_shapes()) list += (list.empty() ? "" : ", ") + s.name;
  throw Error("unknown shape '" + name + "' (known: " + list + ")");
}

void write_synth_model(const SynthOptions& o, const std::string& path) {
  const SynthShape& s = o.shape;
  for (const gguf::TensorType t : {o.type, o.expert_type.value_or(o.type)}) {
    if (!kernels::is_compute_type(t)) {
      throw Error(std::string("synth: unsupported weight type ") + gguf::tensor_type_name(t));
    }
  }
  if (s.n_layer < 1) throw Error("synth: the model needs at least one layer");
  if (s.n_expert > 0 && s.n_expert < s.n_expert_used) {
    throw Error("synth: " + std::to_string(s.n_expert) + " experts is fewer than the shape's " +
                std::to_string(s.n_expert_used) + " experts per token");
  }
  if (s.n_vocab < 257) {
    throw Error(
        "synth: the vocabulary needs at least 257 entries (256 bytes and <|endoftext|>), got " +
        std::to_string(s.n_vocab));
  }
  const arch::ArchDesc& desc = arch::find(s.arch);
  // The fused layout is a group synth does not write by default (TensorGroup::synth).
  const auto gate_up = [](const arch::TensorGroup& g) {
    return g.trigger && std::strcmp(g.trigger, arch::tensor::kFfnGateUpExps) == 0;
  };
  if (o.fused_gate_up) {
    bool has = false;
    for (const arch::TensorGroup& g : desc.blocks.ffn_moe) has = has || gate_up(g);
    if (!has) throw Error("synth: " + s.arch + " has no fused ffn_gate_up_exps layout");
  }
  if (s.n_nextn < 0 || (s.n_nextn > 0 && desc.nextn.empty())) {
    throw Error("synth: " + s.arch + " cannot have " + std::to_string(s.n_nextn) +
                " next-token-prediction blocks");
  }
  gguf::Writer w;
  const std::string a = s.arch + ".";
  w.set("general.architecture", gguf::Value::str(s.arch));
  w.set("general.name", gguf::Value::str("synth-" + s.name));
  w.set("general.file_type", gguf::Value::u32(uint32_t(o.type)));
  w.set(a + "block_count", gguf::Value::u32(uint32_t(s.n_layer)));
  w.set(a + "context_length", gguf::Value::u32(uint32_t(s.n_ctx)));
  w.set(a + "embedding_length", gguf::Value::u32(uint32_t(s.n_embd)));
  w.set(a + "attention.head_count", gguf::Value::u32(uint32_t(s.n_head)));
  // MLA files (llama.cpp's absorbed layout) give the cached sizes here: one latent "head" of
  // kv_lora + rope keys and kv_lora values; the per-head sizes go in the *_mla keys.
  const bool mla = s.kv_lora_rank > 0;
  w.set(a + "attention.head_count_kv", gguf::Value::u32(uint32_t(mla ? 1 : s.n_head_kv)));
  w.set(a + "attention.key_length",
        gguf::Value::u32(uint32_t(mla ? s.kv_lora_rank + s.qk_rope_dim : s.head_dim)));
  w.set(a + "attention.value_length",
        gguf::Value::u32(uint32_t(mla ? s.kv_lora_rank : s.head_dim)));
  w.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(s.rms_eps));
  w.set(a + "rope.freq_base", gguf::Value::f32(s.rope_base));
  const bool moe = s.n_expert > 0;
  // MoE shapes with dense layers (deepseek2's leading ones) give their width; the others the
  // expert width, as before.
  w.set(a + "feed_forward_length",
        gguf::Value::u32(uint32_t(moe && s.n_ff == 0 ? s.n_ff_exp : s.n_ff)));
  if (moe) {
    w.set(a + "expert_count", gguf::Value::u32(uint32_t(s.n_expert)));
    w.set(a + "expert_used_count", gguf::Value::u32(uint32_t(s.n_expert_used)));
    w.set(a + "expert_feed_forward_length", gguf::Value::u32(uint32_t(s.n_ff_exp)));
    if (s.n_ff_shexp > 0) {
      w.set(a + "expert_shared_feed_forward_length", gguf::Value::u32(uint32_t(s.n_ff_shexp)));
    }
  }

  // Byte-level BPE vocabulary: 256 byte tokens, an end-of-text control token, then unused
  // control tokens up to the shape's vocabulary size (so the output matrix has its real size).
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_token(b));
    types.push_back(1);
  }
  tokens.push_back("<|endoftext|>");
  types.push_back(3);
  while (int(tokens.size()) < s.n_vocab) {
    tokens.push_back("<|extra_" + std::to_string(tokens.size()) + "|>");
    types.push_back(3);
  }
  w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  if (!o.chat_template.empty()) {
    w.set("tokenizer.chat_template", gguf::Value::str(o.chat_template));
  }
  w.set("tokenizer.ggml.pre", gguf::Value::str("default"));
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::str_array({}));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(256));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(256));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(false));

  SynthWriter sw(o, w);
  const ModelConfig c = synth_config(s, desc);
  if (desc.write_metadata) desc.write_metadata(c, w);
  const int64_t E = s.n_embd;
  const float in_std = 1.f / std::sqrt(float(E));
  sw.matrix("token_embd.weight", o.type, E, s.n_vocab, 1, 1.f);
  sw.vector("output_norm.weight", E, 1.f, 0.05f);
  if (!s.tied_output) sw.matrix("output.weight", o.type, E, s.n_vocab, 1, in_std);
  // The trunk's layers, then the NextN blocks (a layer of the same kinds plus their own
  // tensors), which block_count counts (the family's write_metadata).
  for (int il = 0; il < s.n_layer + c.n_layer_nextn; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const bool nextn = il >= s.n_layer;
    const LayerKind kind = nextn ? arch::layer_kind(desc, c, il) : c.layer_kinds[size_t(il)];
    const std::span<const arch::TensorGroup> parts[] = {
        arch::attn_groups(desc, kind), arch::ffn_groups(desc, kind),
        nextn ? desc.nextn : std::span<const arch::TensorGroup>{}};
    for (const auto& groups : parts) {
      for (const arch::TensorGroup& g : groups) {
        const bool split_gate =
            g.trigger && std::strcmp(g.trigger, arch::tensor::kFfnGateExps) == 0;
        const bool write = o.fused_gate_up ? (g.synth && !split_gate) || gate_up(g) : g.synth;
        if (!write || !arch::group_applies(c, g)) continue;
        if (g.optional && arch::dim(c, g.infer) <= 0) continue;
        for (const arch::TensorSpec& t : g.tensors) write_tensor(sw, o, c, p, t);
      }
    }
  }
  w.write(path);
}

}  // namespace lynx
