// Sampling and continuous batching on top of a Context.
//
// The Scheduler runs generation requests on a BatchLoop (lynx/batch_loop.h) in its mixed
// mode: each step holds one token of every decoding sequence, then prompt chunks of
// sequences still in prefill within the token budget (chunked prefill, so a long prompt never
// stalls the others). The Scheduler adds what generation needs on top: a queue of requests
// admitted into free slots, sampling, stop tokens, callbacks and cancellation. Requests join
// and leave between steps. Not thread-safe: one thread drives it (the CLI's, or the server's
// engine loop).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lynx/context.h"
#include "lynx/sampler.h"

namespace lynx {

enum class FinishReason : uint8_t { kNone, kLength, kStop, kCancelled, kError };
// "length", "stop", "cancelled", "error" (the OpenAI API's finish_reason values and the
// server's metric labels); "none" for kNone.
const char* finish_reason_name(FinishReason r);

struct GenerationRequest {
  std::vector<int32_t> prompt;  // must not be empty
  int max_tokens = 16;
  SamplingParams sampling;
  bool exact_routing = false;        // decode tokens of this request are never remapped
  std::vector<int32_t> stop_tokens;  // end-of-generation ids (EOS, EOT, ...)
  // Structured output: only tokens it allows are sampled (Sampler::sample). When it allows
  // none, the request ends with kError ("no token can continue the grammar").
  std::shared_ptr<TokenConstraint> constraint;
  // Called for every generated token; return false to stop the request (e.g. a stop string
  // matched, or the client went away).
  std::function<bool(int32_t token)> on_token;
  // Like on_token, with the token's log-probability under the distribution it was sampled
  // from (Sampler::last_logprob); when set it is called instead of on_token (the server's
  // `logprobs` field needs it, and the sampler lives inside the scheduler).
  std::function<bool(int32_t token, float logprob)> on_token_logprob;
  // Called when the request is admitted into a slot, with the number of its prompt tokens
  // taken from the prefix cache instead of evaluated (0 without a hit).
  std::function<void(int32_t cached_tokens)> on_admit;
  // Called once when the request ends (also on cancel), after its last on_token.
  std::function<void(FinishReason)> on_finish;
  // Called with the reason just before on_finish(FinishReason::kError): a step that failed
  // for this request (non-finite values from the model, lynx::NonFiniteError). The other
  // requests of the step go on.
  std::function<void(const std::string& message)> on_error;
};

struct SchedulerOptions {
  int max_batch = 16;         // sequences decoding at once
  int max_step_tokens = 256;  // token budget of one step (decode tokens + prefill chunks)
  // Called before each step's forward pass with the ids of the requests that have a decode
  // token in it (admitted, past their prompt, not ended), so that the caller can choose the
  // step's routing policy from them (the server's per-request routing); empty: none.
  std::function<void(std::span<const int64_t> decoding)> before_step;
  // The prefix cache (src/runtime/prefix_cache.h): the KV cache of finished requests kept up
  // to this many bytes, reused by requests whose prompts start with the same tokens. 0: off
  // (every sequence's cache is freed when its request ends).
  size_t prefix_cache_bytes = 0;
  // Recurrent models (qwen3next, qwen35moe): the smallest gap in tokens between the state
  // snapshots a prefill keeps for the prefix cache (PrefixCache::snapshot_plan).
  int prefix_snapshot_gap = 128;
};

// The prefix cache's counters (all zero when it is off).
struct PrefixCacheStats {
  int64_t lookups = 0;        // requests admitted while the cache is on
  int64_t hits = 0;           // of them, admitted with a reused prefix
  int64_t prompt_tokens = 0;  // prompt tokens of those requests
  int64_t reused_tokens = 0;  // of them, taken from the cache instead of evaluated
  int64_t evictions = 0;      // entries freed to stay within the bytes bound
  size_t entries = 0;         // entries held now
  size_t bytes = 0;           // their KV cache bytes
};

struct SchedulerStats {
  int64_t steps = 0;
  int64_t decode_tokens = 0;
  int64_t prefill_tokens = 0;
  double decode_seconds = 0;    // time of steps with no prefill token
  double prefill_seconds = 0;   // time of steps with prefill tokens
  int64_t failed_requests = 0;  // finished with kError by a failed step
};

class Scheduler {
 public:
  Scheduler(Context& ctx, const SchedulerOptions& opts);
  ~Scheduler();

  // Queues a request; returns its id. Throws lynx::Error on an invalid request (empty prompt,
  // prompt + max_tokens beyond the context limit, max_tokens < 1, sampling parameters that
  // check_sampling_params refuses).
  int64_t submit(GenerationRequest req);
  // Ends a request at the next step boundary (its KV cache is freed then).
  void cancel(int64_t id);
  // Runs one step if there is work; returns false when idle.
  bool step();
  // Runs steps until every request has finished.
  void run_until_idle();

  size_t n_active() const;   // requests admitted (prefill or decode)
  size_t n_waiting() const;  // requests queued for a free slot
  const SchedulerStats& stats() const;
  PrefixCacheStats prefix_cache_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lynx
