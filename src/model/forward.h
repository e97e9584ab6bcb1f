// The batched forward pass and the state it reads and writes. Every operand is passed
// explicitly (the model, the kernels' pool, the routing policy, the expert executor, the KV
// cache, the scratch buffers, the logits, the step observer), so each function's signature
// says what it touches; the Context (context.cc) owns them and validates batches.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "kernels/expert_plan.h"
#include "kernels/matmul_bf16.h"
#include "kernels/thread_pool.h"
#include "lynx/context.h"
#include "lynx/model.h"
#include "model/expert_executor.h"
#include "model/kv_buffer.h"
#include "model/scratch_vector.h"
#include "model/step_observer.h"

namespace lynx {

// KV cache of one sequence: per layer, rows of keys and of values; a row is one head vector per
// KV head in the cache's element type (KvCache::k_type, v_type), stored head-major: [KV heads x
// rows x head vector], so that one KV head's keys are one contiguous block (kv_head_offset).
// A full-attention layer's buffers reserve the context limit's rows (KvBuffer: address space,
// backed where written), so a row never moves as the sequence grows; `cap` counts the rows the
// sequence may have written (doubling as it grows), which is what its memory is counted by.
// For MLA the key row is one vector of cache_k_dim elements, each token's normed latent and
// its roped rope part, and there are no values. A sliding-window layer (LayerKind::window > 0)
// keeps a ring of `ring` rows instead: position p in row p % ring. A Gated DeltaNet layer
// (AttnKind::kDeltaNet) has no KV rows but a recurrent state slot: `conv`, the raw q/k/v channels
// of the last conv_kernel - 1 positions [(K-1) x conv_dim], oldest first, and `state`, per value
// head the head_k x head_v delta-rule matrix. Both hold the sequence after its last position `len -
// 1` (zeros before the first), so they cannot be cut back to an earlier position, except to a
// length kept in a StateSnapshot. The K/V buffers take transparent huge pages once cap rows are 4
// MiB or more: decode attention reads every row each step, and with 4 KiB pages its TLB misses cost
// up to 2x (docs/benchmarks.md). Not before, since each head's last 2 MiB page is backed whole.
struct SequenceLayer {
  KvBuffer k, v;
  std::vector<float> conv, state;
};
// The recurrent layers' slots of a sequence at length `len` (Context::snapshot_sequence):
// per recurrent layer in layer order, its conv window then its state. Immutable once taken,
// so sequences copied from one another share it.
struct StateSnapshot {
  int32_t len = 0;
  std::shared_ptr<const std::vector<float>> data;
};
struct Sequence {
  bool in_use = false;
  int32_t len = 0;  // positions stored
  int32_t cap = 0;  // positions allocated (full-attention layers)
  // Rows of the window layers' rings (0: none yet): the largest window - 1 plus the step's
  // tokens of this sequence (all written before any is attended to), or a rollback slack.
  int32_t ring = 0;
  // The oldest position still held by the rings: positions [ring_from, len) are there.
  int32_t ring_from = 0;
  // A step that failed part way (a non-finite value) may have advanced some layers' recurrent
  // state and not others: the sequence must then be freed (or cut to length 0).
  bool state_lost = false;
  std::vector<SequenceLayer> layers;
  std::vector<StateSnapshot> snapshots;  // ascending len, all <= len
};

// The cache row of position `pos` in a layer: its ring slot, or the position itself.
inline size_t cache_row(const Sequence& s, int window, int32_t pos) {
  return window > 0 ? size_t(pos % s.ring) : size_t(pos);
}

// Bytes of one cached head vector and of one cache row (all KV heads) of a layer, keys and
// values (MLA: one key vector, no values).
struct KvRows {
  size_t k_head = 0, v_head = 0, k_row = 0, v_row = 0;
};

// Byte offset of KV head h's vector in row `row` of a layer's K (or V) buffer of `rows` rows
// (its capacity: the buffer's size / the row's bytes), head vectors of head_bytes. Head-major,
// because decode attention reads one KV head's rows per job: interleaved rows made it read
// head_bytes out of every row's bytes, 20-50% slower from DRAM (docs/benchmarks.md).
inline size_t kv_head_offset(size_t head_bytes, size_t rows, int h, size_t row) {
  return (size_t(h) * rows + row) * head_bytes;
}

// The KV cache of every sequence (index: sequence id); no sequence holds more than n_ctx
// positions.
struct KvCache {
  std::vector<Sequence> seqs;
  int n_ctx = 0;
  // Element types (ContextOptions::cache_type_k / _v: F32, F16, Q8_0) and row geometry: a
  // head vector is kernels::kv_cache_head_bytes(type, head dim) bytes, a row holds the layer's
  // KV heads. F32 rows are laid out as the plain float rows they always were.
  gguf::TensorType k_type = gguf::TensorType::F32, v_type = gguf::TensorType::F32;
  std::vector<KvRows> rows;  // per layer (layers may differ in head dim and KV heads)
  SequenceLayer& layer(int32_t seq, int il) { return seqs[size_t(seq)].layers[size_t(il)]; }
  const Sequence& sequence(int32_t seq) const { return seqs[size_t(seq)]; }
};

// A run of attn_tok entries [begin, end) of one sequence that attention processes together
// (the blocked kernel, kernels/attention.h).
struct AttnTile {
  int begin = 0, end = 0;
};

// Per-step scratch, grown to the largest batch seen and reused (no allocation per step in
// steady state).
struct StepBuffers {
  ScratchFloats x, xn, q, k, v, attn, tmp;  // [T x ...]
  std::vector<uint8_t> flags;               // [T] TokenFlags of the batch
  ScratchFloats router;                     // [T x N]
  ScratchFloats select;                     // [T x N] selection keys (bias / groups)
  std::vector<int32_t> ids;                 // [T x k]
  ScratchFloats weights;                    // [T x k]
  kernels::ExpertPlan plan;                 // the routed assignments grouped by expert
  ScratchFloats rope_cs;                    // [T x rope_dim/2 x 2] (cos, sin) per token
  ScratchFloats rope_cs_alt;                // the same for ModelConfig::alt's rope
  ScratchFloats ffn_out;                    // [T x E] gemma4: the dense FFN's normed output
  ScratchFloats attn_gate;                  // [T x n_head] step35: the attention gate
  // Gated attention (ModelConfig::attn_q_gate): the q projection [T x 2Q], its gates [T x Q].
  ScratchFloats qg, gate;
  std::vector<int> keep_rows;     // the last layer's rows that return logits (forward)
  std::vector<uint8_t> embd_row;  // one embedding row gathered from a packed layout
  // Gated DeltaNet: the q/k/v channels [T x conv_dim] (convolved in place), z [T x V], per
  // value head beta and the decay [T x n_v] (from ssm_ba [T x 2 n_v] or ssm_beta / ssm_alpha),
  // the heads' outputs [T x V].
  ScratchFloats ssm_qkv, ssm_z, ssm_ba, ssm_beta, ssm_decay, ssm_o;
  // MLA scratch: low-rank q [T x q_lora]; per head (head-major) gathered q_nope [T x nope],
  // absorbed q [H x T x kv_lora], attention output in the latent [H x T x kv_lora], and one
  // head's value output [T x v].
  ScratchFloats mla_qa, mla_nope, mla_q, mla_o, mla_v;
  // MLA through the blocked kernel: per token and head the query [q_lat;
  // q_rope] [T x H x (kv_lora + rope)] and the latent output [T x H x kv_lora].
  ScratchFloats mla_qcat, mla_ocat;
  // The decompressed MLA form: one sequence's latents [P x R] and rope keys [P x rope], per
  // head its keys [H x P x (nope + rope)] and values [H x P x v], a head's key up-projection
  // transposed [nope x R] and its product [P x nope].
  ScratchFloats mla_lat, mla_kr, mla_kd, mla_vd, mla_wkt, mla_kn;
  kernels::QuantizedActs xq_head;
  ScratchFloats sh_gate, sh_up;            // shared expert / dense FFN hidden
  ScratchFloats out_in;                    // normed rows needing logits
  std::vector<int32_t> out_rows;           // token index of each logits row
  std::vector<std::vector<float>> scores;  // attention scores, one per pool worker
  // The step's tokens grouped by sequence for attention: batch rows, positions, tiles.
  std::vector<int32_t> attn_tok, attn_pos, attn_order;
  std::vector<AttnTile> attn_tiles;
  // Activations quantized for the integer path (types with an integer kernel, exact_activations
  // off): a block's input (xq_in: normed x; xq_mid: attention output or FFN hidden).
  kernels::QuantizedActs xq_in, xq_mid;
  kernels::Bf16Acts b16;  // a product's input rounded to BF16 (the BF16 fast mode)
};

// Where products run, and which path products with integer-kernel weight types take.
struct Compute {
  kernels::ThreadPool& pool;
  bool int_acts;  // integer path (!ContextOptions::exact_activations)
  // The BF16 fast mode (ContextOptions::bf16_activations): scratch for the rounded inputs of
  // BF16/F16 products; nullptr: off. bf16_kernel: the kernel it runs on (not kNone when on).
  kernels::Bf16Acts* bf16 = nullptr;
  kernels::Bf16Kernel bf16_kernel = kernels::Bf16Kernel::kNone;
  // Gated DeltaNet: a sequence's run of at least this many tokens in one step takes the
  // chunked delta rule (ContextOptions::delta_rule_chunk_min); 0: always token by token.
  int delta_chunk_min = 0;
  // MLA: a sequence's run of at least this many tokens in one step attends through
  // decompressed keys and values (ContextOptions::mla_decompress_min, resolved); 0: never.
  int mla_decompress_min = 0;
};

// How MoE layers choose their experts: the policy and, for benchmarks replaying traces, a
// replacement of the router logits (empty: none).
struct Router {
  RoutingPolicy& policy;
  const Context::RouterOverride& override_logits;
};

// Logits of the tokens of the last step that asked for them: [n x n_vocab], batch order.
struct StepLogits {
  std::vector<float> values;
  int n = 0;
};

// The operands of one step.
struct ForwardOperands {
  const Model& model;       // configuration and weights (read)
  Compute compute;          // pool and product path
  Router router;            // expert choice
  ExpertExecutor& experts;  // the routed-expert step
  KvCache& kv;              // written at the batch's positions, read up to them
  StepBuffers& buf;         // scratch
  StepLogits& logits;       // written
  StepObserver& observer;   // step accounting
};

// Runs the whole model over a validated batch whose cache space is reserved.
void forward(const ForwardOperands& op, std::span<const BatchToken> batch);

}  // namespace lynx
