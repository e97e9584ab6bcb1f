// A loaded GGUF model: its configuration (architecture differences resolved to data at load
// time) and zero-copy views of its weights in the memory-mapped file.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lynx/gguf.h"
#include "lynx/routing.h"

namespace lynx {
struct ModelArena;  // owned F32 copies of small tensors (norms, biases), packed weights

enum class RopeType : uint8_t { kNorm, kNeox };  // adjacent pairs / split halves
// q/k RMSNorm: none, per head (head_dim weights), over the whole row, or per head after the
// rope (hunyuan-moe: the released code and llama.cpp's graph rotate first).
enum class QKNorm : uint8_t { kNone, kPerHead, kFull, kPerHeadAfterRope };

// The block kinds of one layer (src/model/arch/: each family says which layer has which).
enum class AttnKind : uint8_t {
  kGqa,  // grouped-query attention, K/V heads in the cache
  kMla,  // multi-head latent attention (deepseek2): the compressed latent + rope part cached
  // Gated DeltaNet linear attention (qwen3next, qwen35moe): no KV cache; a recurrent state per
  // sequence (ModelConfig::delta_net, the Context's state slots).
  kDeltaNet,
};
enum class FfnKind : uint8_t {
  kDense,      // SwiGLU FFN
  kMoe,        // router + routed experts
  kMoeShared,  // routed experts + a shared expert
  // gemma4: a dense FFN and the routed experts side by side on the same residual, each with
  // its own input and output norms, their sum normed once more (the sandwich norms).
  kMoeDense,
};
struct LayerKind {
  AttnKind attn = AttnKind::kGqa;
  FfnKind ffn = FfnKind::kDense;
  // Sliding-window attention (gpt-oss's even layers): a token at position p attends to the
  // keys at positions p - window + 1 .. p (llama.cpp's LLAMA_SWA_TYPE_STANDARD); 0 = all.
  int window = 0;
  // The second attention geometry (ModelConfig::alt; gemma4's full-attention layers): its head
  // dimension, K/V head count, rope and K=V.
  bool alt = false;
};
// The activation between the experts' gate/up and down products.
enum class ExpertAct : uint8_t {
  kSwiglu,     // silu(gate) * up
  kSwigluOai,  // gpt-oss: g = min(gate, 7), u = clamp(up, -7, 7): g sigmoid(1.702 g) (u + 1)
  kGeglu,      // gemma: gelu(gate) * up, GELU's tanh form (gelu_pytorch_tanh, ggml_gelu)
};
// An output gate on the attention before its output projection (attn_gate, LayerWeights::
// wgate). kHeadSigmoid (step35): per token, g = sigmoid(W_g x) with one value per query head
// (x the attention's normed input), head h's attention output times g[h].
enum class AttnGate : uint8_t { kNone, kHeadSigmoid };
// The dense FFN's (and shared expert's) activation.
enum class DenseAct : uint8_t {
  kSilu,      // SwiGLU
  kGeluTanh,  // GeGLU (gemma)
};

// A second attention geometry for the layers with LayerKind::alt (gemma4: the full-attention
// layers have 512-wide heads, 2 K/V heads whose values are their keys, and a rope of their own).
// Pair i of the rope rotates by pos * base^(-2i/n_rot) / freq_factors[i] (llama.cpp's
// rope_freqs: 1e30 leaves a pair unrotated, as Hugging Face's "proportional" rope does).
struct AltAttention {
  int head_dim = 0;
  int n_head = 0;  // query heads (step35's full layers have fewer); 0: ModelConfig::n_head
  int n_head_kv = 0;
  bool k_eq_v = false;  // no attn_v: the values are the K projection (before its norm / rope)
  float rope_base = 10000.f;
  int n_rot = 0;
  std::vector<float> freq_factors;  // [n_rot / 2] or empty (all 1)
  std::vector<uint8_t> layers;      // [n_layer] 1: layer il has this geometry (the family's)
};

// Gated DeltaNet (Yang et al. 2024; Qwen3-Next's linear attention), as llama.cpp's ssm.* keys
// describe it: n_k_heads query/key heads of head_k_dim, n_v_heads value heads of head_v_dim
// (n_v_heads a multiple of n_k_heads), a causal depthwise conv of conv_kernel taps over the
// q/k/v channels. Value head h reads key head h / (n_v / n_k) (qwen3next: the checkpoint's
// grouped order) or h % n_k (`tiled`: qwen35moe, whose converter reorders the value heads).
struct DeltaNet {
  int conv_kernel = 0;  // ssm.conv_kernel
  int head_k_dim = 0;   // ssm.state_size
  int head_v_dim = 0;   // ssm.inner_size / ssm.time_step_rank
  int n_k_heads = 0;    // ssm.group_count
  int n_v_heads = 0;    // ssm.time_step_rank
  bool tiled = false;
  std::vector<uint8_t> layers;  // [n_layer] 1: layer il is a DeltaNet layer
  int key_dim() const { return n_k_heads * head_k_dim; }
  int value_dim() const { return n_v_heads * head_v_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }  // q, k, v channels
  // Floats of one sequence's state in one layer: the last conv_kernel - 1 inputs of the conv,
  // and a head_k_dim x head_v_dim matrix per value head.
  int64_t conv_floats() const { return int64_t(conv_kernel - 1) * conv_dim(); }
  int64_t state_floats() const { return int64_t(n_v_heads) * head_k_dim * head_v_dim; }
  int key_head(int v_head) const {
    return tiled ? v_head % n_k_heads : v_head / (n_v_heads / n_k_heads);
  }
};

// Everything the forward pass needs to know about an architecture, as data. Filled from the
// GGUF metadata plus per-architecture traits (llama.cpp's conventions) by Model::load.
// YaRN rope scaling (llama.cpp's rope_yarn, as deepseek2 uses it). Pair i of a rope part of
// n dims rotates by theta = pos * base^(-2i/n) (extrapolated) blended with theta / factor
// (interpolated) by ramp(i) * ext_factor, where ramp is 1 below the dimension `low`, 0 above
// `high`, linear between; low / high are where a pair turns beta_fast / beta_slow times over
// orig_ctx positions. cos and sin are multiplied by `mscale`, and the attention scale
// 1/sqrt(head_dim) by `kq_mul` (both set by the family: see read_rope_scaling in arch.h).
struct RopeYarn {
  bool on = false;
  float factor = 1.f;  // {arch}.rope.scaling.factor (freq_scale = 1 / factor)
  int orig_ctx = 0;    // {arch}.rope.scaling.original_context_length
  float beta_fast = 32.f, beta_slow = 1.f;
  float ext_factor = 1.f;       // weight of the ramp (llama.cpp: 1 when the type is yarn)
  float log_mul = 0.f;          // {arch}.rope.scaling.yarn_log_multiplier (0.1 * mscale_all_dim)
  float mscale = 1.f;           // magnitude of cos / sin
  float kq_mul = 1.f;           // multiplies the attention scale
  float low = 0.f, high = 0.f;  // the ramp's corner dimensions (pair indices)
};

// Llama-4-style attention temperature (Mistral Small 4's rope_parameters.llama_4_scaling_beta;
// HF's get_llama_4_attn_scale, llama.cpp's f_attn_temp_scale / n_attn_temp_floor_scale with
// offset 0): the queries of position p are multiplied by 1 + scale ln(1 + floor(p / floor_len)),
// so 1 below floor_len. scale 0 (no {arch}.attention.temperature_scale): off, q untouched.
struct AttnTemperature {
  float scale = 0.f;  // {arch}.attention.temperature_scale (beta)
  int floor_len = 0;  // {arch}.rope.scaling.original_context_length (default: context_length)
  bool on() const { return scale != 0.f; }
};

struct ModelConfig {
  std::string arch;  // general.architecture
  std::string name;  // general.name
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // {arch}.attention.key_length, else n_embd / n_head
  int n_vocab = 0;
  int n_ctx_train = 0;  // {arch}.context_length: the context the model was trained for
  int n_ff = 0;         // dense FFN width (layers without experts)
  int n_expert = 0;     // 0 = dense model
  int n_expert_used = 0;
  int n_ff_exp = 0;    // per-expert FFN width
  int n_ff_shexp = 0;  // shared-expert FFN width (0 = none)
  bool qkv_bias = false;
  QKNorm qk_norm = QKNorm::kNone;
  RopeType rope = RopeType::kNorm;
  float rope_base = 10000.f;
  RopeYarn yarn;  // YaRN rope scaling ({arch}.rope.scaling.*); off unless the file asks for it
  AttnTemperature attn_temp;  // position-dependent query scale (deepseek2 family); off by default
  float rms_eps = 1e-5f;
  GatingConfig gating;  // router gating of MoE layers
  // Multi-head latent attention (deepseek2; all 0 otherwise). head_dim = qk_nope + qk_rope.
  int q_lora_rank = 0;   // 0: q projected directly (V2-Lite)
  int kv_lora_rank = 0;  // the latent cached per token
  int qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  int n_layer_dense_lead = 0;  // leading_dense_block_count: layers before the first MoE one
  int n_expert_shared = 0;     // expert_shared_count (deepseek2: shared width = n * n_ff_exp)
  // interleave_moe_layer_step (ernie4_5-moe): from n_layer_dense_lead on, layer il is MoE when
  // (il + 1) % n_moe_layer_step == 0, dense otherwise.
  int n_moe_layer_step = 1;
  // Partial rotary embedding (glm4moe's rope.dimension_count < head_dim): only the first n_rot
  // dimensions of each q/k head rotate (NEOX pairs (i, i + n_rot/2)); 0 = the whole head.
  int n_rot = 0;
  // Next-token-prediction (NextN / MTP) blocks stored after the n_layer the forward pass runs
  // (glm4moe's nextn_predict_layers; block_count = n_layer + n_layer_nextn). Never run: their
  // tensors stay unbound, as llama.cpp skips them.
  int n_layer_nextn = 0;
  int n_swa = 0;                              // {arch}.attention.sliding_window (gpt-oss; 0 = none)
  ExpertAct expert_act = ExpertAct::kSwiglu;  // from the family's description
  DenseAct dense_act = DenseAct::kSilu;       // from the family's description
  bool tied_output = false;                   // output projection shares token_embd
  // Gemma's conventions (all off elsewhere): the embeddings multiplied by embd_scale
  // (sqrt(n_embd); 0: none); the attention scale kq_scale (0: 1/sqrt(head_dim); gemma4: 1,
  // the q/k norms carry it); the values RMS-normed per head without weights (v_norm); the
  // logits soft-capped as cap tanh(logit / cap) (final_softcap; 0: none); and the layers'
  // sandwich norms: the attention's and the FFN's outputs normed (post_attention_norm,
  // post_ffw_norm) before the residual adds them.
  float embd_scale = 0.f;
  float kq_scale = 0.f;
  bool v_norm = false;
  float final_softcap = 0.f;
  bool sandwich_norms = false;
  AltAttention alt;                      // LayerKind::alt layers' geometry
  AttnGate attn_gate = AttnGate::kNone;  // with the layers' attn_gate tensors (step35)
  // Clamped SwiGLU (step35's swiglu_limits): per layer a limit L (0: none) turning
  // silu(g) * u into min(silu(g), L) * clamp(u, -L, L); for the routed experts (swiglu_exp,
  // copied into LayerWeights::expert_limit) and for the shared expert and the dense FFN
  // (swiglu_ffn). Empty: no layer is clamped.
  std::vector<float> swiglu_exp, swiglu_ffn;
  // qwen3next / qwen35moe: attn_q gives per head the query and then as many gate values; the
  // attention output is multiplied by sigmoid(gate) before attn_output.
  bool attn_q_gate = false;
  DeltaNet delta_net;                  // AttnKind::kDeltaNet layers' geometry
  std::vector<LayerKind> layer_kinds;  // [n_layer], from the architecture description

  bool is_moe() const { return n_expert > 0; }
  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  bool mla() const { return kv_lora_rank > 0; }
  bool layer_recurrent(int il) const { return layer_kinds[size_t(il)].attn == AttnKind::kDeltaNet; }
  // Some layer keeps a recurrent state per sequence (a sequence cannot be cut back).
  bool recurrent() const {
    for (const LayerKind& k : layer_kinds)
      if (k.attn == AttnKind::kDeltaNet) return true;
    return false;
  }
  int rope_dim() const { return mla() ? qk_rope_dim : n_rot > 0 ? n_rot : head_dim; }
  // Floats per token and layer in the KV cache: K/V heads, or MLA's latent + rope part
  // (kv_lora_rank + qk_rope_dim, no V).
  int cache_k_dim() const { return mla() ? kv_lora_rank + qk_rope_dim : kv_dim(); }
  int cache_v_dim() const { return mla() ? 0 : kv_dim(); }
  bool layer_routed(int il) const { return layer_kinds[size_t(il)].ffn != FfnKind::kDense; }
  // Layer il's attention geometry (the alt one for LayerKind::alt layers).
  bool layer_alt(int il) const { return layer_kinds[size_t(il)].alt; }
  int layer_head_dim(int il) const { return layer_alt(il) ? alt.head_dim : head_dim; }
  int layer_n_head_kv(int il) const { return layer_alt(il) ? alt.n_head_kv : n_head_kv; }
  int layer_n_head(int il) const { return layer_alt(il) && alt.n_head > 0 ? alt.n_head : n_head; }
  int layer_q_dim(int il) const { return layer_n_head(il) * layer_head_dim(il); }
  float layer_swiglu_ffn(int il) const { return swiglu_ffn.empty() ? 0.f : swiglu_ffn[size_t(il)]; }
  float layer_swiglu_exp(int il) const { return swiglu_exp.empty() ? 0.f : swiglu_exp[size_t(il)]; }
  int layer_kv_dim(int il) const { return layer_n_head_kv(il) * layer_head_dim(il); }
  int cache_k_dim(int il) const { return mla() ? cache_k_dim() : layer_kv_dim(il); }
  int cache_v_dim(int il) const { return mla() ? 0 : layer_kv_dim(il); }
  // The widest q and K/V rows of any layer (scratch sizes).
  int max_q_dim() const {
    return std::max(q_dim(), alt.head_dim * (alt.n_head > 0 ? alt.n_head : n_head));
  }
  int max_kv_dim() const { return std::max(kv_dim(), alt.n_head_kv * alt.head_dim); }
};

// The weight views (Weight, LayerWeights, ModelWeights) are the engine's internals
// (src/model/weights.h): raw pointers into the mapping or the arena, per-family fields and
// the kernels' packed layouts. Clients reach a model through its configuration, Context and
// the commands' interfaces; the engine's own layers include the internal header.
struct Weight;
struct LayerWeights;
struct ModelWeights;

// How the expert tier reads experts from the file (LoadOptions::expert_io).
enum class ExpertIo : uint8_t { kThreads, kUring };

struct LoadOptions {
  // Called while the file is read ahead (bytes done, total).
  std::function<void(size_t, size_t)> progress;
  bool prefetch = true;
  // Repack the matrices of the types with an integer kernel (Q8_0, Q4_0, the other 32-element
  // types, the K-quants, IQ4_XS) that only matmuls read (not token_embd, nor an output tied
  // to it) into the kernels' 16-row interleaved layout: the integer kernels then load whole
  // vectors instead of transposing rows. Results are bit-identical either way; false keeps
  // the file's layout (for A/B measurements and tests, and for contexts that will all use
  // exact activations: the float path reads repacked weights through a copy back to rows).
  bool repack = true;
  // Store the F32/F16/BF16 matrices that only matmuls read (same exclusions) in 16-row
  // panels (kernels::WeightLayout::kPanel16): the float kernels then run outer products,
  // faster from a few tokens on (docs/benchmarks.md). Each output becomes one FMA chain over
  // the columns, a different summation order from the file's layout, so the results differ
  // from those in the last bits; but they are the same on every instruction set and thread
  // count. false keeps the file's layout.
  bool repack_float = true;
  // Threads for the repack (0: one per hardware thread).
  int threads = 0;
  // Expert parallelism (docs/distributed.md): when set, only the experts e of layer il with
  // keep_expert(il, e) are prepared (read ahead, repacked); the others stay untouched in the
  // file mapping, so the resident memory is the dense weights plus the kept experts. The
  // file is then not read ahead as a whole either. Computing with an expert not kept reads
  // it from the file (correct, but slow and resident).
  std::function<bool(int layer, int expert)> keep_expert;

  // The expert tier (docs/offload.md): the routed experts stay in the file and a fixed pool
  // of slots holds the ones in use, read on demand with direct I/O; the dense weights are
  // loaded as always. Logits are bit-identical to the fully loaded model's.
  // mem_budget: the bytes this process may use; 0: the lower of the memory cgroup's room and
  // MemAvailable. expert_cache: bytes of slots; -1 (default): a tier only when the file does
  // not fit the budget, with what the budget leaves after the dense weights and a reserve;
  // 0: never (every expert loaded); > 0: a tier of that size (at least one slot) whatever
  // the file's size. Not with keep_expert (expert parallelism loads its shard whole).
  size_t mem_budget = 0;
  int64_t expert_cache = -1;
  int expert_readers = 4;  // reader threads of the tier (expert_io kThreads)
  // How the tier reads (docs/offload.md "Reads"): kThreads, expert_readers threads each
  // with one pread at a time; kUring, one thread keeping up to expert_queue_depth matrix
  // reads in flight through io_uring (liburing), falling back to kThreads with a line on
  // stderr where the kernel refuses io_uring or the build has no liburing.
  ExpertIo expert_io = ExpertIo::kThreads;
  int expert_queue_depth = 16;
  // What streaming an expert that is not in a slot costs, in units of a resident expert's
  // stream (RoutingInput::cost): RAM's read rate over the disk's. 0 (default): measured as
  // the tier runs (RAM probed once, the readers' rate averaged over their reads; 20, this
  // machine kind's ratio, until 8 reads were timed: docs/offload.md); else this figure, in
  // [1, 1e6], whatever is measured (runs that compare the batch-aware policies bit for bit
  // pin it).
  float expert_miss_cost = 0.f;
  // The tier reads ahead, for each token, the expert_prefetch experts the next routed layer's
  // router ranks first on the current layer's input, while the current layer computes
  // (docs/offload.md). 0: no read-ahead (the default until its speed is measured on a quiet
  // machine: it cuts the misses but can raise the bytes read).
  int expert_prefetch = 0;
  // Experts the tier reads into slots at load and never evicts (docs/offload.md "Pinned
  // experts"): expert_pin_uses(config) returns, for each of the model's layers, how often
  // each expert was used ([n_layer][n_expert], an empty row: none for that layer; e.g. the
  // top-k counts of a routing trace, which `--expert-pin TRACE` reads), throwing lynx::Error
  // when its data does not fit the model. Each routed layer pins its most used experts (uses
  // > 0), up to expert_pin_share of the slots divided evenly among the routed layers; the
  // other slots work as without pins. Empty (the default): nothing pinned. Only with a tier.
  std::function<std::vector<std::vector<uint32_t>>(const ModelConfig&)> expert_pin_uses;
  float expert_pin_share = 0.5f;  // in (0, 1]
  // Replaces the tier's file reads: reads n bytes at file offset `off` into dst, throwing
  // lynx::Error on failure (fault injection in tests). Empty: pread on the file.
  std::function<void(uint64_t off, size_t n, uint8_t* dst)> expert_read;
  // Sees the result of every read the tier makes from the file, with either backend: a read
  // of n bytes at `off` returned `res` (bytes, or -errno); returns the result the tier goes
  // on with (fault injection in tests: -EIO, a short count). Empty: the results as they are.
  std::function<int64_t(uint64_t off, size_t n, int64_t res)> expert_read_result;
  // Tests: > 0 makes io_uring's set-up fail with -expert_uring_init_error (e.g. ENOSYS, as
  // under a seccomp filter), to see the fall-back to threads.
  int expert_uring_init_error = 0;
};

class ExpertTier;  // src/model/expert_tier.h

class Model {
 public:
  // Loads and validates `path`: an unsupported architecture, a missing tensor or a tensor of
  // the wrong shape or type throws lynx::Error naming it.
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opts = {});

  const ModelConfig& config() const { return cfg_; }
  const gguf::File& file() const { return file_; }
  // The weights (src/model/weights.h; the types are internal).
  const ModelWeights& weights() const;
  const LayerWeights& layer(int i) const;
  const Weight& token_embd() const;
  const Weight& output() const;
  const float* output_norm() const;
  // Bytes of one expert's three matrices (gate, up, down) in layer `il`.
  size_t expert_bytes(int il) const;
  // The expert tier when the routed experts are read on demand (LoadOptions::expert_cache);
  // nullptr when they are all loaded. Contexts made on the model compute through it.
  ExpertTier* expert_tier() const { return tier_.get(); }
  // Why the tier is on or off, and its size (for the commands' load line).
  const std::string& expert_tier_summary() const { return tier_summary_; }

 private:
  explicit Model(gguf::File file);

 public:
  ~Model();

 private:
  // The stages of load after the configuration (model.cc).
  void bind_weights();
  void pack_weights(const LoadOptions& opts);
  // Decides on the expert tier and makes it (model_tier.cc); true when it is on.
  bool plan_expert_tier(const LoadOptions& opts);
  // Pins the experts of LoadOptions::expert_pin_uses in the tier (model_tier.cc); returns how
  // many.
  int pin_experts(const LoadOptions& opts, int n_slots);
  void split_fused_experts();
  bool routed_expert(const Weight& w) const;
  gguf::File file_;
  ModelConfig cfg_;
  std::unique_ptr<ModelWeights> w_;
  std::shared_ptr<ModelArena> arena_;
  std::shared_ptr<ExpertTier> tier_;
  std::string tier_summary_;
};

// Architectures this engine runs (general.architecture values).
std::vector<std::string> supported_architectures();

}  // namespace lynx
