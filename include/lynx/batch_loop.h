// The step loop every driver of a Context shares: the Scheduler (generation, and through it
// the server), the `eval` command (teacher forcing) and the `bench` command (timed cells).
//
// A BatchLoop holds a set of sequences, each with a prompt still to prefill and a next token
// to decode. Every step() forms one batch from them, runs Context::eval, and hands each row
// of logits to its sequence's hook, which returns the next token to feed (sampled, taken
// from a document, or an arg max) or ends the sequence. Where the next token comes from is
// the client's business; how a batch is formed is the loop's:
//
// - mixed (mix_prefill = true, the Scheduler): one decode token of every decoding sequence,
//   then prompt chunks of sequences still in prefill, in admission order, up to
//   max_step_tokens (chunked prefill, so a long prompt never stalls the others);
// - separate (mix_prefill = false, eval and bench): a sequence's prompt is prefilled in steps
//   of its own before any decode step, so decode steps hold decode tokens only and their
//   statistics (distinct experts, bytes, time) are those of decoding.
//
// Not thread-safe; hooks must not add or remove sequences of the loop that calls them.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "lynx/context.h"

namespace lynx {

struct BatchLoopOptions {
  int max_step_tokens = 256;  // token budget of one step (decode tokens + prefill chunk(s))
  bool mix_prefill = true;    // see above
};

// Returned by a sequence's on_logits to end it.
inline constexpr int32_t kEndSequence = -1;
// The fewest prompt tokens a step cut at a snapshot length leaves on either side (steps of
// one or two tokens of a sequence take other float kernels than longer ones).
inline constexpr int32_t kMinPrefillPiece = 3;

struct LoopSequence {
  std::vector<int32_t> prompt;  // fed as prefill tokens (may be empty when `next` is set)
  // The first decode token when the client knows it (teacher forcing): then no logits are
  // computed for the prompt. kEndSequence: it comes from the logits of the prompt's last
  // token (generation).
  int32_t next = kEndSequence;
  uint8_t decode_flags = kTokenDecode;  // kTokenDecode or kTokenExact
  // Gets the logits of the sequence's last token of the step; returns the next token to
  // feed, or kEndSequence.
  std::function<int32_t(std::span<const float> logits)> on_logits;
  // Called when a sequence that ended is freed, at the end of its last step (sequences that
  // ended in the same step: last admitted first).
  std::function<void()> on_end;
  // A context sequence whose KV cache already holds positions [0, length) before the prompt
  // (a prefix reused from an earlier request); -1: a new sequence. The loop owns it from add.
  int32_t seq = -1;
  // Recurrent models: lengths (ascending) at which to keep a snapshot of the sequence's state
  // during prefill (Context::snapshot_sequence; the prefix cache plans them). A prompt chunk
  // ends there, unless that would make a step of fewer than kMinPrefillPiece of its tokens
  // on either side (such steps may round differently, see docs/serving.md): that length is
  // then skipped.
  std::vector<int32_t> snapshot_at;
  // When the sequence ends, leave its context sequence (and KV cache) alive for the client,
  // which then owns it (the prefix cache keeps it), instead of freeing it. Cancellation
  // (remove) frees it regardless.
  bool keep = false;
};

struct StepReport {
  int n_prefill = 0;   // prompt tokens in the step
  int n_decode = 0;    // decode tokens in the step
  double seconds = 0;  // wall time of Context::eval
};

class BatchLoop {
 public:
  BatchLoop(Context& ctx, const BatchLoopOptions& opts);

  // Adds a sequence (a new context sequence); returns its context sequence id. Throws
  // lynx::Error when it has neither a prompt nor a next token, or no on_logits hook.
  int32_t add(LoopSequence s);
  // Frees a sequence now, without calling its on_end (cancellation).
  void remove(int32_t seq);
  // Runs one step; a step with no sequence does nothing and reports zero tokens. When
  // Context::eval throws, the exception propagates and the loop is as before the step.
  StepReport step();

  size_t size() const { return entries_.size(); }
  bool prefill_pending() const;  // a sequence still has prompt tokens to feed
  // The tokens of the last step (also when its Context::eval threw: the failed step's batch).
  std::span<const BatchToken> last_batch() const { return batch_; }

 private:
  struct Entry {
    int32_t seq = 0;
    size_t prefilled = 0;  // prompt tokens in the cache
    size_t snapshots = 0;  // entries of s.snapshot_at taken or skipped
    bool ended = false;
    LoopSequence s;
  };
  void add_prefill(Entry& e, size_t i, int budget);

  Context& ctx_;
  BatchLoopOptions opts_;
  std::vector<Entry> entries_;
  std::vector<BatchToken> batch_;
  std::vector<size_t> owner_;                      // entry of each logits row
  std::vector<std::pair<size_t, size_t>> chunks_;  // (entry, tokens) prefilled this step
};

}  // namespace lynx
