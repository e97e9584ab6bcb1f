// `lynx-moe serve`: the OpenAI-compatible server (lynx/server.h) until SIGINT or SIGTERM.
#include <pthread.h>

#include <csignal>
#include <cstdio>

#include "commands.h"
#include "common.h"
#include "lynx/server.h"
#include "trace_replay.h"

namespace lynx::cli {

void register_serve(CLI::App& app) {
  auto o = std::make_shared<ServerOptions>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (continuous batching)");
  cmd->add_option("-m,--model", o->model_path, "GGUF model file (with a tokenizer)")->required();
  cmd->add_option("--host", o->host, "Address to bind (default loopback)");
  cmd->add_option("--port", o->port, "Port (0 = any free port)");
  cmd->add_option("--routing", o->routing, "Routing policy spec (topk, lynx:alpha=3,beta=4, ...)");
  cmd->add_option("--max-batch", o->max_batch, "Sequences decoding together");
  cmd->add_option("--max-step-tokens", o->max_step_tokens,
                  "Token budget of one step (decode tokens + prefill chunks)");
  cmd->add_option("-c,--ctx", o->n_ctx, "Context limit per sequence (prompt + completion)");
  cmd->add_option("--max-queue", o->max_queue, "Requests waiting for a slot before 429");
  cmd->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 and /metrics");
  cmd->add_option("-t,--threads", o->n_threads, "Compute threads (default: all cores)");
  add_exact_acts_flag(cmd, &o->exact_activations);
  cmd->add_option("--http-threads", o->http_threads,
                  "HTTP worker threads (default max-batch + max-queue + 4)");
  cmd->add_option("--model-name", o->model_name, "Model id served (default: general.name)");
  cmd->add_option("--chat-format", o->chat_format,
                  "Chat format name (default: from tokenizer.chat_template, else chatml)");
  cmd->add_option("--max-n", o->max_n, "Largest n (choices per request)");
  auto trace = std::make_shared<std::string>();
  cmd->add_option("--routing-trace", *trace,
                  "Replay router logits recorded from a trained model (see bench)");
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "Seconds in-flight requests get to finish on SIGINT/SIGTERM");
  cmd->callback([o, trace] {
    if (!trace->empty()) {
      auto replay = std::make_shared<std::unique_ptr<TraceReplay>>();
      o->configure_context = [path = *trace, replay](Context& ctx) {
        *replay = std::make_unique<TraceReplay>(path, ctx.model().config());
        ctx.set_router_override((*replay)->override_fn());
      };
    }
    // SIGINT/SIGTERM are blocked before any thread exists (threads inherit the mask) and
    // taken synchronously with sigwait below: no handler, no global flag, and the shutdown
    // runs on this ordinary thread where it may lock and join.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    o->log = [](const std::string& s) {
      std::fprintf(stderr, "lynx-moe serve: %s\n", s.c_str());
      std::fflush(stderr);
    };
    Server srv(*o);
    srv.start();
    int sig = 0;
    sigwait(&sigs, &sig);
    o->log(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + ", shutting down");
    srv.stop();
  });
}

}  // namespace lynx::cli
