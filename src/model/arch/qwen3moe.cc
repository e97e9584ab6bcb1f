// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): per-head q/k RMSNorm, NEOX rope, top-k
// renormalized; head_dim (attention.key_length) may differ from n_embd / n_head.
//
// qwen3vlmoe (Qwen3-VL-30B-A3B / 235B-A22B, the language model of the files llama.cpp's
// converter writes, the vision tower in a separate mmproj file): the same layers and tensors,
// plus rope.dimension_sections (interleaved M-RoPE, llama.cpp's LLAMA_ROPE_TYPE_IMROPE) and
// n_deepstack_layers. lynx-moe takes text only, and for a text token Hugging Face's
// Qwen3VLMoeTextRotaryEmbedding gets the same position in its three components (t, h, w):
// apply_interleaved_mrope then picks, per frequency, one of three equal angles, so the rotation
// is exactly the NEOX rope over the whole head, whatever the sections (checked numerically by
// tests/reference/qwen3vlmoe_ref.py). Deepstack adds the vision tower's features to the first
// n_deepstack_layers outputs at image positions only: nothing for text. So the family is
// qwen3moe under another name, with its two keys validated.
#include <algorithm>
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorGroup kAttn[] = {{kGqaTensors}, {kQkNormPerHead}};
constexpr TensorGroup kDense[] = {{kDenseFfn}};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

// rope.dimension_sections: 4 integers (t, h, w, e), as llama.cpp reads it (get_key_or_arr,
// required), each >= 0, covering at most the head's head_dim / 2 frequencies (ggml_rope_multi
// asserts it). rope.dimension_count, when present, is the whole head (llama.cpp asserts
// n_rot == head_dim for this family).
void read_vl(const gguf::File& f, ModelConfig& c) {
  const std::string sk = key(c, "rope.dimension_sections");
  const gguf::Value* v = f.find(sk);
  if (v == nullptr) throw Error("missing metadata " + sk);
  const auto& arr = v->as_array(sk);
  if (arr.size() != 4) {
    throw Error("metadata " + sk + " has " + std::to_string(arr.size()) +
                " entries, expected 4 (t, h, w, e)");
  }
  int64_t sum = 0;
  for (const gguf::Value& e : arr) {
    const int64_t s = e.as_int(sk);
    if (s < 0 || s > kMaxDim) throw Error("metadata " + sk + " has a negative or huge entry");
    sum += s;
  }
  if (sum > c.head_dim / 2) {
    throw Error("metadata " + sk + " covers " + std::to_string(sum) +
                " frequencies, more than head_dim / 2 = " + std::to_string(c.head_dim / 2));
  }
  const int n_rot = int_in(f, key(c, "rope.dimension_count"), c.head_dim, 1, kMaxDim);
  if (n_rot != c.head_dim) {
    throw Error("metadata " + key(c, "rope.dimension_count") + " = " + std::to_string(n_rot) +
                " differs from the head dimension " + std::to_string(c.head_dim));
  }
  int_in(f, key(c, "n_deepstack_layers"), 0, 0, c.n_layer);
}

// The released files' sections, [24, 20, 20, 0] of 64 frequencies, scaled to the head
// (h = w = 5/16 of them, t the rest); three deepstack layers as Qwen3-VL's vision tower has.
void write_vl(const ModelConfig& c, gguf::Writer& w) {
  const int half = c.head_dim / 2, hw = half * 5 / 16;
  w.set(key(c, "rope.dimension_sections"), gguf::Value::i32_array({half - 2 * hw, hw, hw, 0}));
  w.set(key(c, "n_deepstack_layers"), gguf::Value::u32(uint32_t(std::min(3, c.n_layer))));
}

}  // namespace

constexpr ArchDesc kQwen3Moe = {
    .name = "qwen3moe",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kPerHead,
    .norm_topk = true,
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoeOptionalShared},
};

constexpr ArchDesc kQwen3VlMoe = [] {
  ArchDesc d = kQwen3Moe;
  d.name = "qwen3vlmoe";
  d.read_metadata = read_vl;
  d.write_metadata = write_vl;
  return d;
}();

}  // namespace lynx::arch
