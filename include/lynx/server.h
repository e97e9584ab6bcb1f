// An OpenAI-compatible HTTP server over one model (see docs/serving.md).
//
// Threads: one ENGINE thread owns the Context and the Scheduler and runs the step loop
// (continuous batching, chunked prefill, the routing policy applied phase-aware by the
// Context); HTTP worker threads parse and validate requests, tokenize them, and hand tasks to
// the engine through a bounded queue, then stream the tokens the engine produces back to the
// client. Admission is decided synchronously in the handler: when max_batch + max_queue
// requests are already in the system, a new one is answered 429 with Retry-After instead of
// queueing without bound.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions (streaming as server-sent events
// ending in `data: [DONE]`, or one JSON body), GET /v1/models, GET /health, GET /metrics
// (Prometheus text format). Extensions to the OpenAI request: "routing": "exact" (this
// request's decode tokens are never remapped), a routing level or spec and
// "max_routing_level" (with allow_request_routing), "ignore_eos", "top_k".
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "lynx/context.h"
#include "lynx/error.h"

namespace lynx {

struct ServerOptions {
  std::string model_path;          // GGUF file; it must carry a tokenizer (tokenizer.* keys)
  std::string model_name;          // id served in /v1/models and checked in requests;
                                   // "" = general.name, else the file name without .gguf
  std::string host = "127.0.0.1";  // loopback unless the operator asks for more
  int port = 8080;                 // 0 = an ephemeral port (see Server::port)
  std::string routing = "topk";    // routing policy spec of the engine
  int max_batch = 16;              // sequences decoding together
  int max_step_tokens = 256;       // token budget of one step (decode + prefill chunks)
  int n_ctx = 0;                   // context limit per sequence (prompt + generated);
                                   // 0 = the model's trained context length
  int max_queue = 64;              // requests waiting for a slot before 429
  int n_threads = 0;               // compute threads of the engine (0 = all cores)
  bool exact_activations = false;  // F32 activations for quantized types too (ContextOptions)
  int mla_decompress_min = 0;      // ContextOptions::mla_decompress_min
  // KV cache element types (ContextOptions::cache_type_k / _v: F32, F16, Q8_0).
  gguf::TensorType cache_type_k = gguf::TensorType::F32;
  gguf::TensorType cache_type_v = gguf::TensorType::F32;
  int http_threads = 0;  // 0 = max_batch + max_queue + 4 (a waiting client holds one)
  int max_n = 8;         // largest `n` (choices per request) accepted
  // The prefix cache (lynx/scheduler.h): finished requests' KV caches kept up to this many
  // bytes for requests whose prompts start with the same tokens; 0 = off.
  size_t cache_ram_bytes = 0;
  std::string api_key;             // when set, /v1/* and /metrics need "Bearer <key>"
  std::string chat_format;         // chat format name; "" = from tokenizer.chat_template,
                                   // falling back to chatml when the model has none
  double shutdown_timeout_s = 10;  // stop(): in-flight requests get this long to finish
  int retry_after_s = 1;           // Retry-After of 429 / 503 answers
  // Chat answers' reasoning (<think> blocks, gpt-oss's analysis channel): "deepseek" returns it
  // as message.reasoning_content, "none" leaves it in the content as the model wrote it. A
  // request's "reasoning_format" overrides it (docs/serving.md, "Tools and reasoning").
  std::string reasoning_format = "deepseek";
  // The tool-call format of chat answers ("hermes", "qwen3-coder", "deepseek-v3", "glm-4.5",
  // "kimi-k2", "harmony", "mistral", "llama3", "none"); "" = read off the chat template.
  std::string tool_format;
  // Bounds on what one client can make the server hold (docs/serving.md, "Limits").
  size_t max_body_bytes = 16u << 20;    // request body after de-chunking (413)
  int max_headers = 100;                // header lines per request (431)
  size_t max_header_bytes = 64u << 10;  // request line + headers (431)
  int max_json_depth = 64;              // nesting of arrays/objects in a body (400)
  double header_timeout_s = 10;         // total time for a request's line + headers (408)
  double body_timeout_s = 60;           // total time for a request's body (408)
  double idle_timeout_s = 30;           // a keep-alive connection between requests
  int max_connections = 512;            // open connections (503 beyond)
  int max_connections_per_ip = 256;     // open connections per client address (429 beyond)
  // Called once on the engine's Context before serving (e.g. `serve --routing-trace` installs
  // a router override so a random-weight model routes like a trained one); null = none.
  std::function<void(Context&)> configure_context;
  // Loads the model instead of Model::load (expert parallelism: this rank's shard behind the
  // ranks' handshake), and adjusts the engine's ContextOptions (its expert executor, a hook
  // per step); null = none.
  std::function<std::unique_ptr<Model>(const std::string& path, const LoadOptions&)> load_model;
  std::function<void(ContextOptions&)> configure_options;
  // Text appended to /metrics (Prometheus exposition lines; expert parallelism's per-rank
  // figures); called on an HTTP thread, so it must be thread-safe. null = none.
  std::function<std::string()> extra_metrics;
  // One line per event worth an operator's attention (start, errors, shutdown); null = none.
  std::function<void(const std::string&)> log;

  // Routing strength that follows the load (docs/serving.md, "Adaptive routing").
  // tpot_slo_s > 0: the engine moves along the routing ladder (level 0 = exact) to keep the
  // P99 time per output token under this target; 0: it stays at `routing`'s level.
  double tpot_slo_s = 0;
  // "SPEC[@PCT];..." from weakest to strongest ("" = the default: exact and `routing`, or with
  // a target and routing topk, cover at increasing strength); PCT = the level's measured
  // perplexity increase in percent, compared with accuracy_budget_pct (< 0: no budget).
  std::string routing_ladder;
  double accuracy_budget_pct = -1;
  // Decode steps in the controller's measured TPOT and the time constant of its feedback.
  int slo_window_steps = 16;
  // Finished requests whose P90 TPOT the controller's outer loop holds under 0.85 x target by
  // scaling its step threshold (0: off).
  int slo_tail_requests = 16;
  // Requests may name a routing level or spec and cap their own (max_routing_level).
  bool allow_request_routing = false;
};

// Reads an API key from a file (the first line, trailing whitespace removed), so that it
// need not appear on a command line where `ps` shows it. Throws lynx::Error when the file
// is not a regular file of at most 64 KiB, cannot be read, or holds no usable key.
std::string read_api_key_file(const std::string& path);

// Throws lynx::Error (naming `source`, e.g. "LYNX_API_KEY") when `key` cannot work as a bearer
// token: empty (which would turn authentication off), only whitespace, whitespace at either
// end or control bytes (which no client can send in a header, so every client is locked out).
void check_api_key(const std::string& key, const std::string& source);

class Server {
 public:
  // Loads the model and tokenizer and creates the engine (nothing listens yet). Throws
  // lynx::Error on a bad model file, a model without tokenizer, or bad options.
  explicit Server(ServerOptions opts);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port and starts the engine and HTTP threads; returns once the socket listens.
  // Throws lynx::Error when the address cannot be bound.
  void start();
  // Graceful shutdown: new requests get 503, in-flight requests get shutdown_timeout_s to
  // finish and are then cancelled (streams end with an error event and [DONE]), the engine
  // stops, the listener closes. Returns within shutdown_timeout_s + kShutdownSlack_s whatever
  // the clients do. Idempotent; safe from any thread but the HTTP handlers.
  static constexpr double kShutdownSlack_s = 8;
  void stop();
  // The engine cannot go on (expert parallelism: a peer rank hangs or died): from now on
  // requests, queued, running or new, are answered 503 with `reason`, and /health says
  // "failed". The caller then ends the process. Idempotent; any thread.
  void fail(const std::string& reason);
  // Blocks until stop() has completed (from another thread).
  void wait();
  int port() const;  // the bound port (meaningful after start)
  const ServerOptions& options() const;

  // Holds the engine between steps while true: requests are still admitted and queued (they
  // wait for a slot), and cancelling a queued request still removes it at once. For tests
  // (deterministic queue states) and operators who need a quiescent engine.
  void set_paused(bool paused);

  // The /metrics text, for tools that embed the server.
  std::string metrics_text() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lynx
