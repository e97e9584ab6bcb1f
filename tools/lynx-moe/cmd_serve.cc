// `lynx-moe serve`: the OpenAI-compatible server (lynx/server.h) until SIGINT or SIGTERM.
#include <pthread.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include "bf16_acts.h"
#include "commands.h"
#include "common.h"
#include "ep.h"
#include "kernels/matmul_bf16.h"
#include "lynx/context.h"
#include "lynx/server.h"
#include "model/memory_budget.h"
#include "trace_replay.h"

namespace lynx::cli {

namespace {

[[noreturn]] void bad_flag(const std::string& msg) {
  // Exit code 2, as for any other misuse of the command line.
  throw CLI::ValidationError(msg, 2);
}

void check_int(const char* flag, long long v, long long lo, long long hi) {
  if (v < lo || v > hi) {
    bad_flag(std::string(flag) + ": must be between " + std::to_string(lo) + " and " +
             std::to_string(hi) + " (got " + std::to_string(v) + ")");
  }
}

void check_seconds(const char* flag, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) {  // false for NaN too
    bad_flag(std::string(flag) + ": must be a number of seconds between " +
             std::to_string(int(lo)) + " and " + std::to_string(int(hi)) + " (got " +
             std::to_string(v) + ")");
  }
}

// --cache-ram in bytes: the MiB asked for, at most a quarter of the memory this process may
// take (detect_memory_budget: MemAvailable or the memory cgroup's room, whichever is lower; the
// cache must not crowd out the model and the running sequences); off under expert parallelism,
// whose followers mirror rank 0's sequences by id and position and cannot follow a copied
// prefix.
size_t cache_ram_bytes(int64_t mib, bool expert_parallel) {
  if (mib == 0 || expert_parallel) return 0;
  const MemoryBudget budget = detect_memory_budget();
  const size_t limit = budget.bytes > 0 ? budget.bytes / 4 : SIZE_MAX;
  const size_t want = mib < 0 ? SIZE_MAX : size_t(mib) << 20;
  return std::max<size_t>(1, std::min(want, limit));
}

// Every serve flag with a range: nonsense is refused before the model is loaded.
void validate(const ServerOptions& o, int api_key_sources, bool budget_given) {
  if (o.model_path.empty()) bad_flag("--model: must name a GGUF file");
  if (o.host.empty()) bad_flag("--host: must not be empty");
  check_int("--port", o.port, 0, 65535);
  check_int("--max-batch", o.max_batch, 1, 4096);
  check_int("--max-step-tokens", o.max_step_tokens, 1, 1 << 20);
  check_int("--ctx", o.n_ctx, 0, 1 << 24);
  if (o.n_ctx == 1) bad_flag("--ctx: must be 0 (the model's) or at least 2");
  check_int("--max-queue", o.max_queue, 0, 1 << 20);
  check_int("--threads", o.n_threads, 0, 4096);
  check_int("--http-threads", o.http_threads, 0, 65536);
  check_int("--max-n", o.max_n, 1, 128);
  check_int("--max-connections", o.max_connections, 1, 1 << 20);
  check_int("--max-connections-per-ip", o.max_connections_per_ip, 1, 1 << 20);
  check_seconds("--shutdown-timeout", o.shutdown_timeout_s, 0, 86400);
  check_seconds("--header-timeout", o.header_timeout_s, 0.001, 3600);
  check_seconds("--body-timeout", o.body_timeout_s, 0.001, 3600);
  check_seconds("--idle-timeout", o.idle_timeout_s, 0.001, 3600);
  if (o.routing.empty()) bad_flag("--routing: must not be empty");
  if (!(o.tpot_slo_s >= 0 && o.tpot_slo_s <= 3600)) {
    bad_flag("--tpot-slo: must be a number of milliseconds between 0 (off) and 3600000");
  }
  check_int("--slo-window", o.slo_window_steps, 1, 1000000);
  check_int("--slo-tail", o.slo_tail_requests, 0, 1000000);
  // No budget is the option left out (the default -1), never a value given.
  if (budget_given && !(o.accuracy_budget_pct >= 0 && o.accuracy_budget_pct <= 1e6)) {
    bad_flag("--accuracy-budget: must be a percentage >= 0 (e.g. 0.5 for +0.5% perplexity)");
  }
  if (api_key_sources > 1) {
    bad_flag("the API key comes from one of --api-key, --api-key-file and LYNX_API_KEY");
  }
}

// serve --expert-parallel on ranks other than 0: this rank's shard, a context like the
// engine's (src/server/engine.cc), and rank 0's steps replayed on it until rank 0 stops.
void follow_steps(const ServerOptions& o, ExpertParallel& ep) {
  auto model = ep.load_model(o.model_path, !o.exact_activations);
  ContextOptions co;
  co.n_threads = o.n_threads;
  co.exact_activations = o.exact_activations;
  co.mla_decompress_min = o.mla_decompress_min;
  co.cache_type_k = o.cache_type_k;
  co.cache_type_v = o.cache_type_v;
  co.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::max(2, model->config().n_ctx_train);
  co.routing = o.routing;
  ep.configure(co);
  Context ctx(*model, co);
  if (o.configure_context) o.configure_context(ctx);
  ep.follow(ctx);
}

// After a failed collective (expert parallelism): the server answers 503 for `grace` seconds
// (the requests in flight get their answer, a load balancer sees /health fail), then the job
// ends with a non-zero status on every rank (MPI_Abort). Never returns.
constexpr double kEpFailGrace_s = 2;
// When the MPI runtime is already ending the job: it kills this process 1 s after its SIGTERM.
constexpr double kEpKilledGrace_s = 0.5;

[[noreturn]] void end_after_failure(ExpertParallel& ep, const ServerOptions& o, double grace,
                                    bool runtime_ending = false) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", grace);
  o.log(std::string("expert parallel: ") +
        (runtime_ending ? "the MPI runtime ends the job" : "a collective failed") +
        "; answering 503 for " + secs + " s, then ending the job");
  std::this_thread::sleep_for(std::chrono::duration<double>(grace));
  o.log("expert parallel: ending the job (exit status 1)");
  if (runtime_ending) {
    std::fflush(nullptr);
    std::_Exit(1);  // the runtime ends the others already; MPI_Abort would race it
  }
  ep.abort(1);
}

const char* sigabbrev(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

// serve's flags, parsed into one place the run reads.
struct ServeArgs {
  ServerOptions o;
  std::string key_file, trace;
  double tpot_ms = 0;
  bool bf16_acts = false;
  std::string bf16_kernel;  // --bf16-kernel
  CacheTypeFlags cache_types;
  int64_t cache_mib = 8192;
  EpFlags ep;
};

void add_flags(CLI::App* cmd, ServeArgs& a) {
  cmd->add_option("-m,--model", a.o.model_path, "GGUF model file (with a tokenizer)")->required();
  cmd->add_option("--host", a.o.host, "Address to bind (default loopback)");
  cmd->add_option("--port", a.o.port, "Port (0 = any free port)");
  cmd->add_option("--routing", a.o.routing, "Routing policy spec (topk, lynx:alpha=3,beta=4, ...)");
  cmd->add_option("--max-batch", a.o.max_batch, "Sequences decoding together");
  cmd->add_option("--max-step-tokens", a.o.max_step_tokens,
                  "Token budget of one step (decode tokens + prefill chunks)");
  cmd->add_option("-c,--ctx", a.o.n_ctx,
                  "Context limit per sequence (prompt + completion; default: the model's "
                  "trained context length)");
  cmd->add_option("--max-queue", a.o.max_queue, "Requests waiting for a slot before 429");
  cmd->add_option("--api-key", a.o.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 and /metrics (visible in ps: "
                  "prefer --api-key-file or LYNX_API_KEY)");
  cmd->add_option("--api-key-file", a.key_file, "Read the API key from the first line of FILE");
  cmd->add_option("-t,--threads", a.o.n_threads, "Compute threads (default: all cores)");
  add_exact_acts_flag(cmd, &a.o.exact_activations);
  add_mla_decompress_flag(cmd, &a.o.mla_decompress_min);
  add_bf16_acts_flag(cmd, &a.bf16_acts, &a.bf16_kernel);
  add_cache_type_flags(cmd, &a.cache_types);
  cmd->add_option("--http-threads", a.o.http_threads,
                  "HTTP worker threads (default max-batch + max-queue + 4)");
  cmd->add_option("--model-name", a.o.model_name, "Model id served (default: general.name)");
  cmd->add_option("--chat-format", a.o.chat_format,
                  "Chat format name (default: from tokenizer.chat_template, else chatml)");
  cmd->add_option("--reasoning-format", a.o.reasoning_format,
                  "Reasoning of chat answers (<think> blocks, gpt-oss's analysis channel): "
                  "deepseek = returned as reasoning_content, none = kept in the content; a "
                  "request's reasoning_format overrides it")
      ->check(CLI::IsMember({"none", "deepseek"}))
      ->capture_default_str();
  cmd->add_option("--tool-format", a.o.tool_format,
                  "Tool-call format of chat answers (default: read off the chat template)")
      ->check(CLI::IsMember({"none", "hermes", "qwen3-coder", "deepseek-v3", "glm-4.5", "kimi-k2",
                             "harmony", "mistral", "llama3", "minimax-m2", "seed-oss"}));
  cmd->add_option("--max-n", a.o.max_n, "Largest n (choices per request)");
  cmd->add_option("--cache-ram", a.cache_mib,
                  "Prefix cache: MiB of finished requests' KV caches kept for prompts that "
                  "start with the same tokens (0 = off, -1 = no limit; at most a quarter of "
                  "the memory available at start, cgroup limits included)")
      ->capture_default_str();
  cmd->add_option("--tpot-slo", a.tpot_ms,
                  "P99 TPOT target in ms: routing strength follows the load along the ladder "
                  "(0 = off: --routing throughout)");
  cmd->add_option("--routing-ladder", a.o.routing_ladder,
                  "Routing levels 'SPEC[@PCT];...' from exact up (PCT: measured perplexity "
                  "cost in %); default: exact and --routing, or with --tpot-slo and --routing "
                  "topk, cover at increasing strength (docs/serving.md)");
  cmd->add_option("--accuracy-budget", a.o.accuracy_budget_pct,
                  "Highest perplexity cost in % a routing level may have (needs costs on the "
                  "ladder)");
  cmd->add_option("--slo-window", a.o.slo_window_steps,
                  "Decode steps in the --tpot-slo controller's measured TPOT and the time "
                  "constant of its feedback (default 16)");
  cmd->add_option("--slo-tail", a.o.slo_tail_requests,
                  "Finished requests whose P90 TPOT the --tpot-slo controller holds under 0.85 "
                  "x target by lowering its step threshold (default 16; 0 = off)");
  cmd->add_flag("--allow-request-routing", a.o.allow_request_routing,
                "Requests may name a routing level or spec and cap theirs (max_routing_level)");
  cmd->add_option("--routing-trace", a.trace,
                  "Replay router logits recorded from a trained model (see bench)");
  cmd->add_option("--shutdown-timeout", a.o.shutdown_timeout_s,
                  "Seconds in-flight requests get to finish on SIGINT/SIGTERM");
  cmd->add_option("--max-connections", a.o.max_connections,
                  "Open connections in total (503 beyond)");
  cmd->add_option("--max-connections-per-ip", a.o.max_connections_per_ip,
                  "Open connections per client address (429 beyond)");
  cmd->add_option("--header-timeout", a.o.header_timeout_s,
                  "Seconds a client has to send a request's line and headers (408 after)");
  cmd->add_option("--body-timeout", a.o.body_timeout_s,
                  "Seconds a client has to send a request's body (408 after)");
  cmd->add_option("--idle-timeout", a.o.idle_timeout_s,
                  "Seconds a keep-alive connection may wait for its next request");
  add_ep_flags(cmd, &a.ep);
}

// The API key from at most one of --api-key, --api-key-file and LYNX_API_KEY. A source that is
// present but empty (`--api-key "$KEY"` with KEY unset, or LYNX_API_KEY="") is refused:
// serving without authentication must be asked for by leaving every source out, never by an
// empty value. Also validates every other flag (validate).
void resolve_api_key(CLI::App* cmd, ServeArgs& a) {
  const char* env_key = std::getenv("LYNX_API_KEY");
  const bool has_env = env_key != nullptr;
  const bool has_flag = cmd->count("--api-key") > 0;
  validate(a.o, int(has_flag) + int(!a.key_file.empty()) + int(has_env),
           cmd->count("--accuracy-budget") > 0);
  try {
    if (has_flag) check_api_key(a.o.api_key, "--api-key");
    if (has_env) check_api_key(env_key, "LYNX_API_KEY");
    if (!a.key_file.empty()) a.o.api_key = read_api_key_file(a.key_file);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (has_env) a.o.api_key = env_key;
}

// Rank 0 of --expert-parallel: its shard, each step sent to the other ranks before it runs,
// and the ranks' totals in /metrics (the engine's context is the first one configured, id 0).
void wire_expert_parallel(ServerOptions& o, ExpertParallel& ep) {
  o.load_model = [&ep](const std::string& path, const LoadOptions& lo) {
    return ep.load_model(path, lo.repack, lo.repack_float);
  };
  auto engine_ctx = std::make_shared<Context*>(nullptr);
  o.configure_options = [&ep, engine_ctx](ContextOptions& co) {
    ep.configure(co);
    co.before_eval = [&ep, engine_ctx](std::span<const BatchToken> batch) {
      ep.send_step((*engine_ctx)->routing(), batch);
    };
  };
  o.configure_context = [engine_ctx, inner = o.configure_context](Context& ctx) {
    *engine_ctx = &ctx;
    if (inner) inner(ctx);
  };
  o.extra_metrics = [&ep] { return ep_metrics_text(ep.totals(0)); };
}

// A single process: the model loaded with the expert tier's flags (--mem-budget,
// --expert-cache), the tier's counters in /metrics beside the BF16 mode's line.
void wire_expert_tier(ServerOptions& o, ExpertParallel& ep, bool bf16_acts,
                      const std::string& bf16_kernel) {
  auto model = std::make_shared<const Model*>(nullptr);
  o.load_model = [&ep, model](const std::string& path, const LoadOptions& lo) {
    auto m = ep.load_model(path, lo.repack, lo.repack_float);
    *model = m.get();
    return m;
  };
  o.extra_metrics = [bf16_acts, bf16_kernel, model] {
    return bf16_acts_metrics(bf16_acts, bf16_kernel) + (*model ? expert_tier_metrics(**model) : "");
  };
}

// Each connection is a descriptor: raise the soft limit (often 1024) to the hard one so that
// --max-connections, not EMFILE, is what refuses clients.
void raise_fd_limit(const ServerOptions& o) {
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < rlim_t(o.max_connections) + 64) {
    o.log("warning: " + std::to_string(nofile.rlim_cur) +
          " file descriptors allowed; --max-connections " + std::to_string(o.max_connections) +
          " may not all be accepted");
  }
}

// Serves until a stop signal, then stops gracefully within the documented bound (or at once on
// a second signal). Ends the job instead when a collective of expert parallelism failed.
void serve_until_signalled(ServerOptions& o, bool bf16_acts, const std::string& bf16_kernel,
                           ExpertParallel& ep, const sigset_t& sigs) {
  Server srv(o);
  if (o.cache_ram_bytes > 0) {
    o.log("prefix cache: up to " + std::to_string(o.cache_ram_bytes >> 20) + " MiB");
  } else {
    o.log(ep.on() ? "prefix cache: off (expert parallelism)" : "prefix cache: off");
  }
  if (bf16_acts) {
    o.log("bf16-acts: BF16/F16 products on kernel " +
          std::string(kernels::bf16_kernel_name(kernels::bf16_kernel_by_name(bf16_kernel))));
  }
  std::atomic<bool> ep_failed{false};
  // A collective that failed (deadline, dead transport, interrupt): from the engine
  // thread, before the step's exception; every request is answered 503 from now on, and
  // the wait below ends the job.
  ep.set_failure_hook([&srv, &ep_failed](const std::string& why) {
    srv.fail(why);
    ep_failed = true;
    kill(getpid(), SIGUSR1);
  });
  srv.start();
  siginfo_t info{};
  int sig = 0;
  for (;;) {
    sig = sigwaitinfo(&sigs, &info);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || (sig == SIGUSR1 && ep_failed)) {
      break;
    }
    if (sig == SIGUSR1 || sig == SIGUSR2) o.log(std::string(strsignal(sig)) + ": ignored");
  }
  if (sig == SIGUSR1) end_after_failure(ep, o, kEpFailGrace_s);
  if (ep.on() && info.si_code == SI_USER && info.si_pid == getppid()) {
    // From the MPI launcher (mpirun or orted): OpenMPI is ending the job, because a rank
    // died or mpirun itself was signalled, and kills this process odls_base_sigkill_timeout
    // (1 s) later. No graceful stop fits in that: stop waiting for the peers now, so the
    // requests in flight are answered 503, and exit first.
    const std::string why =
        "expert parallel: the MPI runtime is ending the job (a rank died, or mpirun was "
        "signalled)";
    srv.fail(why);
    ep.interrupt(why);
    end_after_failure(ep, o, kEpKilledGrace_s, true);
  }
  o.log(std::string("received ") + sigabbrev(sig) +
        ", shutting down (a second SIGINT, SIGTERM or SIGHUP exits at once)");
  // The graceful stop runs beside this thread, which keeps listening: a second signal, or
  // the stop overrunning its documented bound, ends the process without waiting.
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    srv.stop();
    done = true;
    kill(getpid(), SIGTERM);  // wakes the wait below
  });
  const double bound = o.shutdown_timeout_s + Server::kShutdownSlack_s;
  const double deadline = now_seconds() + bound;
  int again;
  for (;;) {
    const double left = std::max(0.0, deadline - now_seconds());
    timespec ts{time_t(left), long((left - double(time_t(left))) * 1e9)};
    again = sigtimedwait(&sigs, nullptr, &ts);
    if (again < 0 && errno == EINTR) continue;
    // The user signals stay ignored while draining (the stopper's own SIGTERM and a
    // failed collective's SIGUSR1 still end the wait).
    if (again == SIGUSR2 || (again == SIGUSR1 && !ep_failed)) continue;
    break;
  }
  if (again == SIGUSR1 && ep_failed) {
    // A peer failed during the graceful stop: the stop cannot finish (the steps cannot).
    stopper.detach();
    end_after_failure(ep, o, kEpFailGrace_s);
  }
  if (!done) {
    o.log(again > 0 ? "second signal: exiting now" : "shutdown overran its bound: exiting now");
    std::fflush(nullptr);
    std::_Exit(again > 0 ? 128 + again : 1);
  }
  stopper.join();
  ep.send_stop();
}

void run(CLI::App* cmd, ServeArgs& a) {
  ServerOptions& o = a.o;
  o.tpot_slo_s = a.tpot_ms / 1e3;
  o.cache_type_k = a.cache_types.k_type();
  o.cache_type_v = a.cache_types.v_type();
  if (a.cache_mib < -1 || a.cache_mib > (int64_t(1) << 30)) {
    bad_flag("--cache-ram: must be MiB between 0 (off) and 2^30, or -1 (no limit)");
  }
  o.cache_ram_bytes = cache_ram_bytes(a.cache_mib, a.ep.on);
  // SIGINT/SIGTERM are blocked before any thread exists (threads inherit the mask; MPI
  // starts threads of its own) and taken synchronously with sigwait below: no handler, no
  // global flag, and the shutdown runs on an ordinary thread where it may lock and join.
  // SIGHUP (the terminal or the ssh session went away) drains like SIGTERM; SIGUSR1 and
  // SIGUSR2, whose default action would kill the process and cut every stream, are taken
  // and ignored (under expert parallelism SIGUSR1 is how a failed collective, from any
  // thread, wakes the wait below).
  sigset_t sigs;
  sigemptyset(&sigs);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&sigs, s);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  check_bf16_acts_combo(a.bf16_acts, a.ep.on);
  // The mode reaches the engine's context through the options hook (expert parallelism,
  // the hook's other user, is refused with it just above) and /metrics through the extra
  // lines, which expert parallelism replaces with its own.
  if (a.bf16_acts) {
    o.configure_options = [k = a.bf16_kernel](ContextOptions& co) {
      co.bf16_activations = true;
      co.bf16_kernel = k;
    };
  }
  o.extra_metrics = [on = a.bf16_acts, k = a.bf16_kernel] { return bf16_acts_metrics(on, k); };
  ExpertParallel::run(a.ep, [&](ExpertParallel& ep) {
    resolve_api_key(cmd, a);
    if (!a.trace.empty()) {
      auto replay = std::make_shared<std::unique_ptr<TraceReplay>>();
      o.configure_context = [path = a.trace, replay](Context& ctx) {
        *replay = std::make_unique<TraceReplay>(path, ctx.model().config());
        ctx.set_router_override((*replay)->override_fn());
      };
    }
    if (ep.on() && ep.rank() != 0) {
      // The followers' signals stay blocked: they stop when rank 0 has shut the server down
      // and says so (signal rank 0 to stop the job gracefully).
      follow_steps(o, ep);
      return;
    }
    if (ep.on()) {
      wire_expert_parallel(o, ep);
    } else {
      wire_expert_tier(o, ep, a.bf16_acts, a.bf16_kernel);
    }
    o.log = [](const std::string& s) {
      std::fprintf(stderr, "lynx-moe serve: %s\n", s.c_str());
      std::fflush(stderr);
    };
    raise_fd_limit(o);
    serve_until_signalled(o, a.bf16_acts, a.bf16_kernel, ep, sigs);
  });
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (continuous batching)");
  add_flags(cmd, *a);
  cmd->callback([cmd, a] { run(cmd, *a); });
}

}  // namespace lynx::cli
