// The front of the server (see lynx/server.h): routes, authentication, admission, and the
// streaming of engine events to clients. Sockets, request reading and limits are the HTTP
// layer's (server/http.h).
//
// A handler that waits for the engine polls the client's connection every kPollInterval, so
// a client that goes away is noticed while its request is still queued or generating, and the
// request is cancelled at once (its slot and KV cache freed) instead of running to
// max_tokens. A non-streaming answer is written only when it is complete, so a failure gets
// its own status (500); a stream has committed 200 with its first event, so a failure after
// that is an error event before [DONE].
#include "lynx/server.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "lynx/model.h"
#include "server/api.h"
#include "server/chat_page.h"
#include "server/engine.h"
#include "server/http.h"
#include "server/metrics.h"
#include "util/file.h"

namespace lynx {

using server::ApiError;
using server::json;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

std::string dump(const json& j) {
  // Token pieces in logprobs may be partial UTF-8 characters: replace rather than throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(server::HttpResponse& res, const ApiError& e) {
  res.status = e.status;
  res.body = dump(e.body());
  res.content_type = "application/json";
}

// Compares in time that depends on the lengths only, not on where the first difference is,
// so response times do not reveal how much of a guessed key was right.
bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& ref = a.size() == b.size() ? b : a;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i]) ^ uint8_t(ref[i]);
  return diff == 0;
}

// Log lines carry strings from the model file (its name, template errors) and from clients:
// control bytes are escaped so that none reaches the operator's terminal as an escape
// sequence.
std::string escape_controls(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", ch);
      out += hex;
    } else {
      out += char(ch);
    }
  }
  return out;
}

std::string endpoint_label(const std::string& path) {
  for (const char* p :
       {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", "/"}) {
    if (path == p) return p;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models";
  return "other";
}

}  // namespace

// The id and creation time every chunk of one answer carries.
struct StreamIds {
  std::string id;
  int64_t created = 0;
};

struct Server::Impl {
  ServerOptions opts;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  server::ApiModel api;
  server::Metrics metrics;
  std::unique_ptr<server::Engine> engine;
  std::unique_ptr<server::HttpServer> http;
  int port = -1;
  int64_t created = 0;
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> draining{false};
  // Requests whose handler or stream is still running: stop() lets them write their last
  // events before the HTTP layer closes the connections.
  std::mutex streams_mu;
  std::condition_variable streams_cv;
  int open_streams = 0;

  std::mutex fail_mu;
  std::string failure;  // guarded by fail_mu: why fail() was called

  std::mutex stop_mu;
  std::condition_variable stopped_cv;
  bool started = false, stopping = false, stopped = false;

  void log(const std::string& s) const {
    if (opts.log) opts.log(s);
  }
  // The chat prompt format (the model's template, else a built-in one) into api.
  void setup_chat_prompts();
  // How chat answers are taken apart (tool calls, reasoning) into api.
  void setup_chat_answers();
  void handle(const server::HttpRequest& req, server::HttpResponse& res);
  void route(const server::HttpRequest& req, server::HttpResponse& res);
  json model_json() const;
  // One completion request: parse, admit, then answer whole or as a stream.
  void generate(const server::HttpRequest& req, server::HttpResponse& res, bool chat);
  bool admit(const std::shared_ptr<server::Task>& task, server::HttpResponse& res);
  void answer_whole(const server::HttpRequest& req, server::HttpResponse& res,
                    const std::shared_ptr<server::Task>& task, const StreamIds& ids);
  void answer_stream(server::HttpResponse& res, const std::shared_ptr<server::Task>& task,
                     const StreamIds& ids);
  void stream_opened() {
    std::lock_guard lk(streams_mu);
    ++open_streams;
  }
  void stream_closed() {
    std::lock_guard lk(streams_mu);
    if (--open_streams == 0) streams_cv.notify_all();
  }
};

void Server::Impl::handle(const server::HttpRequest& req, server::HttpResponse& res) {
  try {
    // The chat page is public like /health: it holds no data, and asks for the key itself.
    const bool open = req.path == "/health" || req.path == "/";
    if (!opts.api_key.empty() && !open) {
      const std::string auth = req.header("Authorization");
      if (!constant_time_equal(auth, "Bearer " + opts.api_key)) {
        send_error(res, ApiError(401,
                                 auth.empty() ? "Missing API key (Authorization: Bearer <key>)"
                                              : "Incorrect API key provided",
                                 "", "invalid_api_key"));
        return;
      }
    }
    route(req, res);
  } catch (const std::exception& e) {
    log(std::string("internal error: ") + e.what());
    res = server::HttpResponse{};
    send_error(res,
               ApiError(500, std::string("internal error: ") + e.what(), "", "", "server_error"));
  }
}

json Server::Impl::model_json() const {
  const ModelConfig& c = model->config();
  return json{{"id", api.name},
              {"object", "model"},
              {"created", created},
              {"owned_by", "lynx-moe"},
              {"meta",
               {{"arch", c.arch},
                {"n_vocab", c.n_vocab},
                {"n_ctx", opts.n_ctx},
                {"n_ctx_train", c.n_ctx_train},
                {"n_expert", c.n_expert},
                {"n_expert_used", c.n_expert_used},
                {"routing", engine->routing()},
                {"routing_levels", api.routing_levels},
                {"max_routing_level", api.max_routing_level},
                {"max_batch", opts.max_batch}}}};
}

void Server::Impl::route(const server::HttpRequest& req, server::HttpResponse& res) {
  const std::string& path = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (get && path == "/") {
    res.body = server::chat_page();
    res.content_type = "text/html; charset=utf-8";
    res.set_header("Content-Security-Policy", std::string(server::chat_page_csp()));
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
  } else if (get && path == "/health") {
    if (draining) res.status = 503;
    res.body = draining ? R"({"status":"shutting down"})" : R"({"status":"ok"})";
    std::lock_guard lk(fail_mu);
    if (!failure.empty()) res.body = dump(json{{"status", "failed"}, {"error", failure}});
  } else if (get && path == "/v1/models") {
    res.body = dump(json{{"object", "list"}, {"data", json::array({model_json()})}});
  } else if (get && path.rfind("/v1/models/", 0) == 0 && path.size() > 11) {
    const std::string id = path.substr(11);
    if (id != api.name) {
      send_error(
          res, ApiError(404, "The model '" + id + "' does not exist", "model", "model_not_found"));
      return;
    }
    res.body = dump(model_json());
  } else if (get && path == "/metrics") {
    res.body = metrics.render(engine->routing()) + engine->routing_control().render();
    if (opts.extra_metrics) res.body += opts.extra_metrics();
    res.content_type = "text/plain; version=0.0.4";
  } else if (req.method == "POST" && path == "/v1/completions") {
    generate(req, res, false);
  } else if (req.method == "POST" && path == "/v1/chat/completions") {
    generate(req, res, true);
  } else {
    send_error(res, ApiError(404, "Unknown endpoint " + req.method + " " + path, "", "",
                             "not_found_error"));
  }
}

void Server::Impl::generate(const server::HttpRequest& req, server::HttpResponse& res, bool chat) {
  auto task = std::make_shared<server::Task>();
  task->t_arrival = server::now_seconds();
  // The body is read as JSON whatever its Content-Type: `curl -d` labels JSON as a form.
  try {
    task->params = server::parse_completion(req.body, chat, api);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  if (!admit(task, res)) return;
  StreamIds ids;
  ids.id =
      (chat ? "chatcmpl-" : "cmpl-") + std::to_string(created) + "-" + std::to_string(next_id++);
  ids.created = int64_t(std::time(nullptr));
  stream_opened();
  if (task->params.stream) {
    answer_stream(res, task, ids);
  } else {
    answer_whole(req, res, task, ids);
  }
}

// Queues the task in the engine; false (and a 429 or 503 in res) when it is refused.
bool Server::Impl::admit(const std::shared_ptr<server::Task>& task, server::HttpResponse& res) {
  const server::Admission adm = engine->submit(task);
  if (adm == server::Admission::kAccepted) return true;
  res.set_header("Retry-After", std::to_string(opts.retry_after_s));
  std::string failed;
  {
    std::lock_guard lk(fail_mu);
    failed = failure;
  }
  send_error(res, adm == server::Admission::kFull
                      ? ApiError(429,
                                 "The server is at capacity (" + std::to_string(opts.max_batch) +
                                     " running, " + std::to_string(opts.max_queue) +
                                     " queued); retry later",
                                 "", "rate_limit_exceeded", "rate_limit_error")
                      : ApiError(503, failed.empty() ? "The server is shutting down" : failed, "",
                                 "service_unavailable", "server_error"));
  return false;
}

// Waits for the whole answer, watching the client: one that hangs up cancels its request.
void Server::Impl::answer_whole(const server::HttpRequest& req, server::HttpResponse& res,
                                const std::shared_ptr<server::Task>& task, const StreamIds& ids) {
  for (;;) {
    std::unique_lock lk(task->mu);
    if (task->cv.wait_for(lk, kPollInterval, [&] { return task->done(); })) break;
    lk.unlock();
    if (!req.client_alive()) {
      engine->cancel(task);
      stream_closed();
      send_error(res, ApiError(499, "client closed the connection", "", "", "server_error"));
      return;
    }
  }
  {
    std::lock_guard lk(task->mu);
    if (task->error.empty()) {
      json body = server::completion_body(task->params, ids.id, ids.created, api.name,
                                          task->results, int(task->params.prompt.size()));
      body["usage"]["routing"] =
          server::routing_usage(task->results, api.routing_levels, task->experts);
      res.body = dump(body);
    } else {
      send_error(res, ApiError(draining ? 503 : 500, task->error, "", "", "server_error"));
    }
  }
  stream_closed();
}

// Server-sent events: the HTTP layer calls the provider until it reports the answer finished
// or the client gone.
void Server::Impl::answer_stream(server::HttpResponse& res,
                                 const std::shared_ptr<server::Task>& task, const StreamIds& ids) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.content_type = "text/event-stream";
  // Runs when the HTTP layer is done with the response, whether it was written completely or
  // the client went away: in the second case the request is still running, so cancel it.
  res.on_done = [this, task](bool) {
    engine->cancel(task);
    stream_closed();
  };
  auto role_sent = std::make_shared<bool>(false);
  res.provider = [this, task, ids, role_sent](server::HttpSink& sink, bool& finished) {
    const server::CompletionParams& p = task->params;
    const std::string& model_name = api.name;
    auto send = [&sink](const json& j) { return sink.write("data: " + dump(j) + "\n\n"); };
    if (p.chat && !*role_sent) {
      *role_sent = true;
      for (int i = 0; i < p.n; ++i) {
        if (!send(server::chat_role_chunk(ids.id, ids.created, model_name, i))) return false;
      }
    }
    std::deque<server::Event> evs;
    bool done = false;
    std::string error;
    int completion = 0, cached = 0;
    json routing_usage;
    {
      std::unique_lock lk(task->mu);
      task->cv.wait_for(lk, kPollInterval, [&] { return !task->events.empty() || task->done(); });
      evs.swap(task->events);
      done = task->done();
      error = task->error;
      for (const auto& r : task->results) completion += r.completion_tokens;
      if (!task->results.empty()) cached = task->results[0].cached_tokens;
      if (done) {
        routing_usage = server::routing_usage(task->results, api.routing_levels, task->experts);
      }
    }
    for (const server::Event& ev : evs) {
      if (!error.empty() && !ev.finish_reason.empty()) continue;  // reported below
      for (const json& chunk : server::event_chunks(p, ids.id, ids.created, model_name, ev)) {
        if (!send(chunk)) return false;
      }
    }
    if (!done) return sink.alive();  // false = the client went away
    if (!error.empty()) {
      if (!send(ApiError(500, error, "", "", "server_error").body())) return false;
    } else if (p.include_usage) {
      json usage = server::usage_chunk(p, ids.id, ids.created, model_name, int(p.prompt.size()),
                                       completion, cached);
      usage["usage"]["routing"] = std::move(routing_usage);
      if (!send(usage)) return false;
    }
    if (!sink.write("data: [DONE]\n\n")) return false;
    finished = true;
    return true;
  };
}

void check_api_key(const std::string& key, const std::string& source) {
  if (key.empty()) {
    throw Error(source + " is empty: give a key, or leave it out to serve without one");
  }
  if (std::all_of(key.begin(), key.end(), [](char c) { return std::isspace(uint8_t(c)); })) {
    throw Error(source + " holds only whitespace: no client could send that key");
  }
  // An HTTP header value loses its leading and trailing whitespace and cannot carry control
  // bytes, so such a key would lock every client out.
  if (std::isspace(uint8_t(key.front())) || std::isspace(uint8_t(key.back()))) {
    throw Error(source + " begins or ends with whitespace, which no client can send");
  }
  for (const char c : key) {
    if (uint8_t(c) < 0x20 || c == 0x7f) {
      throw Error(source + " holds a control character, which no client can send");
    }
  }
}

std::string read_api_key_file(const std::string& path) {
  std::string text = util::read_file_bounded(path, 64 * util::kKiB, "API key file");
  std::string key = text.substr(0, text.find('\n'));
  while (!key.empty() && std::isspace(uint8_t(key.back()))) key.pop_back();
  if (key.empty()) throw Error(path + ": the API key file is empty");
  check_api_key(key, "the API key in " + path);
  return key;
}

namespace {

// The options a server cannot run with, refused before the model is loaded.
void check_options(const ServerOptions& opts) {
  if (opts.max_batch < 1 || opts.max_queue < 0 || opts.n_ctx < 0 || opts.n_ctx == 1 ||
      opts.max_n < 1 || opts.max_step_tokens < 1 || opts.http_threads < 0) {
    throw Error(
        "server: max_batch, max_n and max_step_tokens must be positive, n_ctx 0 or at least 2, "
        "max_queue and http_threads not negative");
  }
  if (!(opts.shutdown_timeout_s >= 0 && opts.shutdown_timeout_s <= 86400) ||
      !(opts.header_timeout_s > 0 && opts.header_timeout_s <= 3600) ||
      !(opts.body_timeout_s > 0 && opts.body_timeout_s <= 3600) ||
      !(opts.idle_timeout_s > 0 && opts.idle_timeout_s <= 3600)) {
    throw Error(
        "server: timeouts must be finite, positive and at most an hour (a day for the "
        "shutdown timeout)");
  }
  if (opts.max_body_bytes < 1 || opts.max_headers < 1 || opts.max_header_bytes < 64 ||
      opts.max_json_depth < 2 || opts.max_connections < 1 || opts.max_connections_per_ip < 1 ||
      opts.retry_after_s < 0) {
    throw Error("server: request and connection limits must be positive");
  }
  if (!(opts.tpot_slo_s >= 0 && opts.tpot_slo_s <= 3600) || opts.slo_window_steps < 1 ||
      opts.slo_window_steps > 1000000 || opts.slo_tail_requests < 0 ||
      opts.slo_tail_requests > 1000000 ||
      !(opts.accuracy_budget_pct < 0 || opts.accuracy_budget_pct <= 1e6)) {
    throw Error(
        "server: the TPOT target must be 0 (off) or a positive number of seconds, and "
        "the accuracy budget a finite percentage");
  }
}

}  // namespace

void Server::Impl::setup_chat_prompts() {
  try {
    api.chat = chat_format_for_model(model->file(), *tok, opts.chat_format);
  } catch (const Error& e) {
    if (!opts.chat_format.empty()) throw;
    const std::string bos = tok->bos() >= 0 ? tok->token_to_piece(tok->bos()) : "";
    const std::string eos = tok->eos() >= 0 ? tok->token_to_piece(tok->eos()) : "";
    api.chat = chat_format_from_name("chatml", bos, eos);
    log(std::string("no usable chat template (") + e.what() + "); chat uses chatml");
  }
  // The model's own Jinja template renders chat prompts unless a format is named; the
  // built-in format above is the fallback when it does not parse or render.
  if (opts.chat_format.empty()) {
    const std::string tmpl = model->file().get_string("tokenizer.chat_template", "");
    if (!tmpl.empty()) {
      try {
        api.chat_template = std::make_shared<const ChatTemplate>(tmpl);
        log("chat prompts: the model's chat template (fallback: " + api.chat.name + ")");
      } catch (const Error& e) {
        log(std::string("the chat template does not parse (") + e.what() + "); chat uses " +
            api.chat.name);
      }
    }
  }
}

void Server::Impl::setup_chat_answers() {
  // The template's markers name the model's call and reasoning format; without a template,
  // the built-in format's family.
  const std::string tmpl = model->file().get_string("tokenizer.chat_template", "");
  if (!tmpl.empty()) {
    api.output_format = chatparse::detect_output_format(tmpl);
  } else if (api.chat.name == "harmony") {
    api.output_format.tools = chatparse::ToolFormat::kHarmony;
  } else if (api.chat.name == "glm4.5" || api.chat.name == "minimax-m2" ||
             api.chat.name == "deepseek3") {
    api.output_format.think_tags = true;
  }
  if (!opts.tool_format.empty()) {
    const auto f = chatparse::tool_format_from_name(opts.tool_format);
    if (!f) throw Error("server: unknown tool format '" + opts.tool_format + "'");
    api.output_format.tools = *f;
    if (*f == chatparse::ToolFormat::kHarmony) api.output_format.think_tags = false;
    if (*f == chatparse::ToolFormat::kSeedOss) {  // the family's own reasoning tags
      api.output_format.think_tags = true;
      api.output_format.think_open = "<seed:think>";
      api.output_format.think_close = "</seed:think>";
    }
  }
  if (opts.reasoning_format != "none" && opts.reasoning_format != "deepseek") {
    throw Error("server: reasoning_format must be \"none\" or \"deepseek\"");
  }
  api.extract_reasoning = opts.reasoning_format == "deepseek";
  log(std::string("chat answers: tool calls ") +
      std::string(chatparse::tool_format_name(api.output_format.tools)) + ", reasoning " +
      (api.output_format.think_tags ? std::string(api.output_format.think_open) + " blocks"
       : api.output_format.tools == chatparse::ToolFormat::kHarmony ? "analysis channel"
                                                                    : "none") +
      (api.extract_reasoning ? " (returned as reasoning_content)" : " (kept in the text)"));
}

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  check_options(opts);
  if (opts.http_threads == 0) opts.http_threads = opts.max_batch + opts.max_queue + 4;
  if (opts.log) {
    opts.log = [raw = std::move(opts.log)](const std::string& m) { raw(escape_controls(m)); };
  }
  s.opts = std::move(opts);
  // Exact activations run the float path, which reads interleaved quantized weights through a
  // copy back to rows: keep the file's layout then.
  LoadOptions lo;
  lo.repack = !s.opts.exact_activations;
  s.model = s.opts.load_model ? s.opts.load_model(s.opts.model_path, lo)
                              : Model::load(s.opts.model_path, lo);
  // The model was trained up to its context length; positions past it are untested (RoPE
  // extrapolation), and a 4096 default let a request without max_tokens run 16x past a
  // 256-token model. The operator can still ask for more.
  if (s.opts.n_ctx == 0) s.opts.n_ctx = std::max(2, s.model->config().n_ctx_train);
  try {
    s.tok = Tokenizer::from_gguf(s.model->file());
  } catch (const Error& e) {
    throw Error(s.opts.model_path + ": the server needs a tokenizer: " + e.what());
  }
  s.api.tok = s.tok.get();
  s.api.n_ctx = s.opts.n_ctx;
  s.api.max_n = s.opts.max_n;
  s.api.max_depth = s.opts.max_json_depth;
  s.api.name = s.opts.model_name;
  if (s.api.name.empty()) s.api.name = s.model->config().name;
  if (s.api.name.empty()) s.api.name = std::filesystem::path(s.opts.model_path).stem().string();
  s.setup_chat_prompts();
  s.api.log = [&s](const std::string& msg) { s.log(msg); };
  s.setup_chat_answers();
  s.engine = std::make_unique<server::Engine>(*s.model, *s.tok, s.opts, s.metrics);
  const RoutingControl& rc = s.engine->routing_control();
  s.api.routing_levels.clear();
  for (const RoutingLevel& lv : rc.ladder()) s.api.routing_levels.push_back(lv.spec);
  s.api.max_routing_level = rc.max_level();
  s.api.allow_request_routing = s.opts.allow_request_routing;
  s.created = int64_t(std::time(nullptr));
}

Server::~Server() {
  stop();
}

void Server::start() {
  Impl& s = *impl_;
  {
    std::lock_guard lk(s.stop_mu);
    if (s.started) throw Error("server: already started");
    s.started = true;
  }
  // Writes use MSG_NOSIGNAL; this also covers anything else in the process that writes to a
  // socket whose peer is gone. Process-wide, as signal dispositions are.
  std::signal(SIGPIPE, SIG_IGN);
  server::HttpLimits lim;
  lim.max_body = s.opts.max_body_bytes;
  lim.max_header_bytes = s.opts.max_header_bytes;
  lim.max_headers = s.opts.max_headers;
  lim.header_timeout_s = s.opts.header_timeout_s;
  lim.body_timeout_s = s.opts.body_timeout_s;
  lim.idle_timeout_s = s.opts.idle_timeout_s;
  lim.max_connections = s.opts.max_connections;
  lim.max_connections_per_ip = s.opts.max_connections_per_ip;
  s.http = std::make_unique<server::HttpServer>(
      lim, s.opts.http_threads,
      [&s](const server::HttpRequest& req, server::HttpResponse& res) { s.handle(req, res); },
      [](int status, const std::string& msg) {
        return dump(
            ApiError(status, msg, "", "", status >= 500 ? "server_error" : "invalid_request_error")
                .body());
      },
      [&s](const std::string& path, int status) {
        s.metrics.http_response(endpoint_label(path), status);
      });
  try {
    s.port = s.http->bind(s.opts.host, s.opts.port);
  } catch (const Error&) {
    s.http.reset();
    std::lock_guard lk(s.stop_mu);
    s.started = false;
    throw;
  }
  s.engine->start();
  s.http->start();
  s.log("listening on http://" + s.opts.host + ":" + std::to_string(s.port) + " (model '" +
        s.api.name + "', routing " + s.engine->routing() + ", context " +
        std::to_string(s.opts.n_ctx) + ")");
}

void Server::stop() {
  Impl& s = *impl_;
  {
    // A second caller (a signal thread and a destructor, say) waits for the first one.
    std::unique_lock lk(s.stop_mu);
    if (!s.started) return;
    if (s.stopping) {
      s.stopped_cv.wait(lk, [&] { return s.stopped; });
      return;
    }
    s.stopping = true;
  }
  s.draining = true;
  s.engine->drain();
  s.engine->set_paused(false);
  if (!s.engine->wait_idle(s.opts.shutdown_timeout_s)) {
    s.log("shutdown: cancelling requests still running after " +
          std::to_string(s.opts.shutdown_timeout_s) + " s");
    s.engine->cancel_all("server is shutting down");
    s.engine->wait_idle(5.0);
  }
  {
    // Let handlers and streams write the last events of the requests that just ended.
    std::unique_lock lk(s.streams_mu);
    s.streams_cv.wait_for(lk, std::chrono::seconds(2), [&] { return s.open_streams == 0; });
  }
  // Bounded whatever the clients do: reading connections are closed, writes are cut.
  s.http->stop();
  s.engine->stop();
  s.log("stopped");
  std::lock_guard lk(s.stop_mu);
  s.stopped = true;
  s.stopped_cv.notify_all();
}

void Server::fail(const std::string& reason) {
  Impl& s = *impl_;
  {
    std::lock_guard lk(s.fail_mu);
    if (!s.failure.empty()) return;
    s.failure = reason.empty() ? "the engine failed" : reason;
  }
  s.log("engine failed: " + reason);
  // draining first: a handler that sees its request fail answers 503 (not 500).
  s.draining = true;
  s.engine->drain();
  s.engine->cancel_all(reason);
}

void Server::wait() {
  std::unique_lock lk(impl_->stop_mu);
  impl_->stopped_cv.wait(lk, [&] { return impl_->stopped || !impl_->started; });
}

int Server::port() const {
  return impl_->port;
}

const ServerOptions& Server::options() const {
  return impl_->opts;
}

void Server::set_paused(bool paused) {
  impl_->engine->set_paused(paused);
}

std::string Server::metrics_text() const {
  std::string text =
      impl_->metrics.render(impl_->engine->routing()) + impl_->engine->routing_control().render();
  if (impl_->opts.extra_metrics) text += impl_->opts.extra_metrics();
  return text;
}

}  // namespace lynx
