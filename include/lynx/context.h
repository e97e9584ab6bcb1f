// An inference context over a loaded model: the worker threads, the per-sequence KV cache,
// the routing policy and the statistics. One `eval` runs one step of the batched forward
// pass over tokens of many sequences at once (prefill chunks and decode tokens mixed);
// sequences join and leave between steps (continuous batching).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lynx/model.h"
#include "lynx/routing.h"

namespace lynx {

// Where a context computes the routed experts (src/model/expert_executor.h). The executor
// interface takes the engine's internal weight views, so it is not part of this API: a
// backend is made inside the engine (expert parallelism: lynx::dist::Session::experts) and
// passed through here as an opaque handle.
class ExpertBackend;
struct BatchToken;

// A KV cache type by name ("f32", "f16", "q8_0", any case); lynx::Error naming the choices
// otherwise.
gguf::TensorType kv_cache_type_from_name(const std::string& name);

struct ContextOptions {
  int n_threads = 0;             // 0 = hardware concurrency
  int n_ctx = 4096;              // context limit per sequence (positions)
  std::string routing = "topk";  // routing policy spec, see make_routing_policy
  bool record_trace = false;     // keep router logits of each step (see take_trace)
  // Products with weights of a type that has an integer kernel (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
  // IQ4_NL, MXFP4; Q2_K-Q6_K, IQ4_XS): false (default) quantizes their activations to Q8_0
  // blocks (Q8_K blocks of 256 for the K-quants and IQ4_XS) and uses integer dot products, as
  // llama.cpp/ggml does (faster; the activations are rounded to ~8 bits per block, see
  // docs/reference.md for the measured effect);
  // true keeps the activations in F32 for every weight type (the weights are dequantized
  // exactly: matches the float64 reference to float32 rounding). F32/F16/BF16 weights always
  // use F32 activations.
  bool exact_activations = false;
  // Products with BF16 and F16 weights (the loader's 16-row panels) in BF16: activations
  // rounded to BF16 once per matmul input, BF16 products summed in F32 on AMX tiles, F16
  // weights rounded to BF16 (what ik_llama.cpp computes with AVX512_BF16). Faster at batch,
  // not exact: docs/benchmarks.md has its measured logit error and perplexity. Without
  // AMX-BF16 (kernels/matmul_bf16.h) the products stay exact. Off by default.
  bool bf16_activations = false;
  // The kernel of that mode: "" (or "auto") the best this machine has, else "amx",
  // "avx512bf16" or "none" (lynx::Error when this machine cannot run it).
  std::string bf16_kernel;
  // Gated DeltaNet layers (qwen3next, qwen35moe): 0 (default) runs the token-by-token
  // recurrence everywhere, so every split of a prompt gives the same bits (the prefix cache's
  // reuse is exact); N > 0 sends a sequence's run of N or more tokens in one step (a prefill
  // chunk) to the chunked delta rule, 2x less CPU for the rule itself but summed in another
  // order, within float rounding of the recurrence (docs/models.md). N = 4 is where it starts
  // to pay; end to end it saved ~1.3% of a 512-token qwen3-next prefill (docs/benchmarks.md).
  int delta_rule_chunk_min = 0;
  // MLA layers (deepseek2 files): 0 (default) attends in the absorbed form everywhere (each
  // head's query moved into the latent space, keys and values the cached latents: R + rope
  // dims per key), so every split of a prompt gives the same bits; N > 0 sends a sequence's run
  // of N or more tokens in one step (a prefill chunk) through keys and values decompressed
  // from the latents (qk_nope + rope and v dims per head: 3-4x fewer multiply-adds per
  // (query, key) for a decompression per key), within float rounding of the absorbed form.
  // It pays from about (qk_nope + v) x R / (R + rope + R - qk_nope - rope - v) tokens (171
  // for DeepSeek's dims), which -1 takes from the model (docs/benchmarks.md).
  int mla_decompress_min = 0;
  // Element types of the KV cache (llama.cpp's -ctk / -ctv): F32 (default: today's arithmetic,
  // bit for bit), F16 (half the bytes) or Q8_0 (blocks of 32 values with one fp16 scale, as
  // GGUF's Q8_0: 34 bytes per 32 values, ~0.27x of F32). Each token's keys and values are
  // rounded once as they are stored, and attention decodes them per key tile
  // (kernels/attention.h); docs/benchmarks.md has the measured speed, memory and perplexity.
  // MLA models cache one latent vector per token, stored in cache_type_k (they have no V
  // cache: cache_type_v does not apply). Anything else throws lynx::Error.
  gguf::TensorType cache_type_k = gguf::TensorType::F32;
  gguf::TensorType cache_type_v = gguf::TensorType::F32;
  // Where the routed experts are computed; nullptr: this process's CPU kernels (through the
  // model's expert tier when it has one). Expert parallelism over MPI (src/dist,
  // docs/distributed.md) plugs in here.
  std::shared_ptr<const ExpertBackend> experts;
  // Called with every validated batch before it runs (expert parallelism: rank 0 of `serve`
  // sends each step to the other ranks, which replay it); empty: none.
  std::function<void(std::span<const BatchToken> batch)> before_eval;
};

// One token of a step.
struct BatchToken {
  int32_t token = 0;
  int32_t seq = 0;  // sequence id (from Context::new_sequence)
  int32_t pos = 0;  // position in its sequence; must be the next position of the sequence
  uint8_t flags = kTokenDecode;  // TokenFlags: prefill / decode / exact
  bool logits = false;           // return the logits of this token
};

// Per-layer figures of the last step (MoE layers only; dense layers read all FFN weights).
struct LayerStepStats {
  int distinct_experts = 0;  // experts the policy activated (weight > 0)
  int distinct_exact = 0;    // experts exact top-k would have activated
  size_t expert_bytes = 0;   // expert weight bytes streamed in this layer
  // Token-expert assignments the routed experts computed. The policy routes every row of the
  // step; the last layer computes only the rows that return logits (a prefill chunk's last
  // token), so there this is below tokens x k, and distinct_experts counts what ran.
  int64_t assignments = 0;
};

struct StepStats {
  int n_tokens = 0;
  int n_decode = 0;
  size_t weight_bytes = 0;  // all weight bytes read in the step (experts, attention, output...)
  size_t expert_bytes = 0;
  double routing_seconds = 0;  // time spent in the routing policy (all layers)
  // Time in the routed experts (all MoE layers): grouping, the expert matrices, SwiGLU and
  // the weighted mix. The part of the step a routing policy changes; the rest (attention,
  // router, shared experts, output) is the same under every policy.
  double expert_seconds = 0;
  std::vector<LayerStepStats> layers;
  double mean_distinct() const;
  double mean_distinct_exact() const;
};

// One recorded router invocation (routing trace): layer, tokens, [T x N] logits, flags.
struct TraceRecord {
  int layer = 0;
  int n_tokens = 0;
  std::vector<float> logits;
  std::vector<uint8_t> flags;
};

class Context {
 public:
  Context(const Model& model, const ContextOptions& opts);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Model& model() const;
  int n_threads() const;
  int n_ctx() const;

  // Sequences: ids are small non-negative integers reused after free.
  int32_t new_sequence();
  void free_sequence(int32_t seq);
  int32_t sequence_length(int32_t seq) const;  // positions already in the KV cache
  // Drops the KV entries at positions >= len (for re-evaluation / speculative rollback).
  // Sliding-window layers (gpt-oss) keep only the recent positions: a truncation further back
  // than they hold throws lynx::Error (the sequence must then be evaluated again). Recurrent
  // models go back only to 0 or to a length the sequence holds a snapshot of
  // (snapshot_sequence); other lengths throw lynx::Error.
  void truncate_sequence(int32_t seq, int32_t len);
  // A new sequence holding a copy of the first `len` positions of `src` (a prefix shared by
  // two requests: the prefix cache). Throws lynx::Error when `src` does not hold them: len
  // outside [0, length], or positions its sliding-window rings no longer keep (as
  // truncate_sequence); for recurrent models, a len other than 0, the full length or a
  // snapshot's. The copy carries the source's snapshots at len and below.
  int32_t copy_sequence(int32_t src, int32_t len);
  // Recurrent models (Gated DeltaNet layers, which keep a state of the last position instead
  // of KV rows): keeps a copy of the sequence's recurrent state at its current length, so that
  // truncate_sequence and copy_sequence can later go back to that length (the prefix cache
  // takes them during prefill, src/runtime/prefix_cache.h). Counted in sequence_cache_bytes,
  // shared by the copies that carry it, freed with the sequence or by a truncation below it.
  // A model without recurrent layers needs none: a no-op there. Throws lynx::Error when the
  // sequence's state was lost (a failed step).
  void snapshot_sequence(int32_t seq);
  // The lengths the sequence holds snapshots of, ascending (the full length needs none).
  std::vector<int32_t> sequence_snapshots(int32_t seq) const;
  // Drops the snapshot at length `len` (none there: nothing happens).
  void drop_snapshot(int32_t seq, int32_t len);
  // Bytes the KV cache holds now, over all sequences (keys and values in their cache types).
  size_t kv_cache_bytes() const;
  // Bytes the KV cache of one sequence holds now.
  size_t sequence_cache_bytes(int32_t seq) const;

  // Runs one step. Throws lynx::Error (and changes nothing) on a bad batch: unknown sequence,
  // out-of-order position, context limit exceeded, token id out of range.
  void eval(std::span<const BatchToken> batch);
  // Logits of the i-th token of the last batch that had `logits` set, in batch order.
  std::span<const float> logits(int i) const;
  int n_logits() const;

  // Routing policy: replaced between steps (the server may run several policies' specs).
  void set_routing(const std::string& spec);
  const std::string& routing() const;
  // ContextOptions::mla_decompress_min as this context runs it: -1 resolved from the model's
  // dims, 0 when off or the model has no MLA layers.
  int mla_decompress_min() const;

  const StepStats& last_step() const;
  // Cumulative routing statistics per MoE layer since the last reset.
  const std::vector<RoutingStats>& routing_stats() const;
  void reset_stats();

  // Router logits of the steps since the last call (when record_trace is on).
  std::vector<TraceRecord> take_trace();

  // Replaces the router logits of every MoE layer after the router ran: fn(layer, batch,
  // logits [T x N]). Benchmarks replay recorded traces through it, so a random-weight model
  // at a real shape routes the way a trained router does. An empty function removes it.
  using RouterOverride =
      std::function<void(int layer, std::span<const BatchToken> batch, float* logits)>;
  void set_router_override(RouterOverride fn);

  // Sees the input rows of every weight product of the following steps, before the product
  // (the importance matrix of `lynx-moe imatrix`): fn(w, x, n_rows, rows_per_expert), x holding
  // n_rows rows of w.cols floats. For expert tensors (w.n_mat > 1) the rows are grouped by
  // expert in id order, rows_per_expert[e] of them for expert e; for the others
  // rows_per_expert is empty. The embedding lookup is not a product and is not reported. An
  // empty function removes the hook; without one a step costs nothing more.
  using ActivationHook = std::function<void(const Weight& w, const float* x, int64_t n_rows,
                                            std::span<const int32_t> rows_per_expert)>;
  void set_activation_hook(ActivationHook fn);

  // Tokens routed to each expert since the last reset_stats(): [n_layer x n_expert].
  const std::vector<int64_t>& expert_tokens() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lynx
