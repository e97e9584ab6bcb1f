// The HTTP front of the server (see lynx/server.h): routes, authentication, admission, and
// the streaming of engine events to clients.
//
// Both streaming and non-streaming answers are written through httplib's chunked content
// provider: the provider wakes every kPollInterval to check the socket, so a client that goes
// away is noticed while its request is still queued or generating, and the request is
// cancelled at once (its slot and KV cache freed) instead of running to max_tokens. The price
// is that the status (200) is committed before generation ends: a failure after that point
// is reported in the body as an OpenAI error object (non-streaming) or an error event
// (streaming).
#include "lynx/server.h"

#include <httplib.h>

#include <sys/socket.h>
#include <sys/stat.h>

#include <csignal>
#include <ctime>
#include <filesystem>

#include "lynx/model.h"
#include "server/api.h"
#include "server/engine.h"
#include "server/metrics.h"

namespace lynx {

using server::ApiError;
using server::json;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

std::string dump(const json& j) {
  // Token pieces in logprobs may be partial UTF-8 characters: replace rather than throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(e.body()), "application/json");
}

std::string endpoint_label(const std::string& path) {
  for (const char* p :
       {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"}) {
    if (path == p) return p;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models";
  return "other";
}

// The system's cpp-httplib listens with a backlog of 5 (compiled in): a burst of more clients
// than that overflows the accept queue, and the dropped SYNs are retried by the kernel only
// after a second, which would add a second to those requests' time to first token. Linux
// lets listen() be called again on a listening socket to enlarge its backlog; httplib does
// not expose the descriptor, so find it among ours by its port.
void enlarge_backlog(int port, int backlog) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(e.path().filename().string());
    } catch (...) {
      continue;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = -1;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) ::listen(fd, backlog);
  }
}

}  // namespace

struct Server::Impl {
  ServerOptions opts;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  server::ApiModel api;
  server::Metrics metrics;
  std::unique_ptr<server::Engine> engine;
  httplib::Server http;
  std::thread listener;
  int port = -1;
  int64_t created = 0;
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> draining{false};
  // Responses whose provider is still running: stop() lets them write their last events
  // before closing the listener (httplib ends providers as soon as it stops).
  std::mutex streams_mu;
  std::condition_variable streams_cv;
  int open_streams = 0;

  std::mutex stop_mu;
  std::condition_variable stopped_cv;
  bool started = false, stopping = false, stopped = false;

  void log(const std::string& s) const {
    if (opts.log) opts.log(s);
  }
  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void stream_opened() {
    std::lock_guard lk(streams_mu);
    ++open_streams;
  }
  void stream_closed() {
    std::lock_guard lk(streams_mu);
    if (--open_streams == 0) streams_cv.notify_all();
  }
};

void Server::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opts.api_key.empty() || req.path == "/health")
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (auth != "Bearer " + opts.api_key) {
      send_error(res, ApiError(401,
                               auth.empty() ? "Missing API key (Authorization: Bearer <key>)"
                                            : "Incorrect API key provided",
                               "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.http_response(endpoint_label(req.path), res.status);
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404 ? "Unknown endpoint " + req.method + " " + req.path
                                               : "HTTP error " + std::to_string(res.status);
    res.set_content(dump(ApiError(res.status, what, "", "",
                                  res.status == 404 ? "not_found_error" : "invalid_request_error")
                             .body()),
                    "application/json");
  });
  http.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        log("internal error: " + what);
        send_error(res, ApiError(500, "internal error: " + what, "", "", "server_error"));
      });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining) {
      res.status = 503;
      res.set_content(R"({"status":"shutting down"})", "application/json");
    } else {
      res.set_content(R"({"status":"ok"})", "application/json");
    }
  });
  auto model_json = [this] {
    const ModelConfig& c = model->config();
    return json{{"id", api.name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "lynx-moe"},
                {"meta",
                 {{"arch", c.arch},
                  {"n_vocab", c.n_vocab},
                  {"n_ctx", opts.n_ctx},
                  {"n_expert", c.n_expert},
                  {"n_expert_used", c.n_expert_used},
                  {"routing", engine->routing()},
                  {"max_batch", opts.max_batch}}}};
  };
  http.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({model_json()})}}),
                    "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [this, model_json](const httplib::Request& req,
                                                    httplib::Response& res) {
    if (req.matches[1] != api.name) {
      send_error(res,
                 ApiError(404, "The model '" + std::string(req.matches[1]) + "' does not exist",
                          "model", "model_not_found"));
      return;
    }
    res.set_content(dump(model_json()), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(engine->routing()), "text/plain; version=0.0.4");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, false);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, true);
  });
}

void Server::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  auto task = std::make_shared<server::Task>();
  task->t_arrival = server::now_seconds();
  try {
    task->params = server::parse_completion(req.body, chat, api);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  const server::Admission adm = engine->submit(task);
  if (adm != server::Admission::kAccepted) {
    res.set_header("Retry-After", std::to_string(opts.retry_after_s));
    send_error(res, adm == server::Admission::kFull
                        ? ApiError(429,
                                   "The server is at capacity (" + std::to_string(opts.max_batch) +
                                       " running, " + std::to_string(opts.max_queue) +
                                       " queued); retry later",
                                   "", "rate_limit_exceeded", "rate_limit_error")
                        : ApiError(503, "The server is shutting down", "", "service_unavailable",
                                   "server_error"));
    return;
  }

  struct StreamState {
    std::string id;
    int64_t created = 0;
    bool role_sent = false;
  };
  auto st = std::make_shared<StreamState>();
  st->id =
      (chat ? "chatcmpl-" : "cmpl-") + std::to_string(created) + "-" + std::to_string(next_id++);
  st->created = int64_t(std::time(nullptr));
  const std::string& model_name = api.name;
  stream_opened();
  // Runs when httplib is done with the response, whether it was written completely or the
  // client went away: in the second case the request is still running, so cancel it.
  auto release = [this, task](bool) {
    engine->cancel(task);
    stream_closed();
  };

  if (task->params.stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [task, st, &model_name](size_t, httplib::DataSink& sink) {
          const server::CompletionParams& p = task->params;
          auto send = [&sink](const json& j) {
            const std::string s = "data: " + dump(j) + "\n\n";
            return sink.write(s.data(), s.size());
          };
          if (p.chat && !st->role_sent) {
            st->role_sent = true;
            for (int i = 0; i < p.n; ++i) {
              if (!send(server::chat_role_chunk(st->id, st->created, model_name, i))) return false;
            }
          }
          std::deque<server::Event> evs;
          bool done = false;
          std::string error;
          int completion = 0;
          {
            std::unique_lock lk(task->mu);
            task->cv.wait_for(lk, kPollInterval,
                              [&] { return !task->events.empty() || task->done(); });
            evs.swap(task->events);
            done = task->done();
            error = task->error;
            for (const auto& r : task->results) completion += r.completion_tokens;
          }
          for (const server::Event& ev : evs) {
            if (!error.empty() && !ev.finish_reason.empty()) continue;  // reported below
            if (!send(server::chunk_body(p, st->id, st->created, model_name, ev.choice, ev.text,
                                         ev.token_text, ev.token_logprob, ev.finish_reason))) {
              return false;
            }
          }
          if (!done) return sink.is_writable();  // false = the client went away
          if (!error.empty()) {
            send(ApiError(500, error, "", "", "server_error").body());
          } else if (p.include_usage) {
            send(server::usage_chunk(p, st->id, st->created, model_name, int(p.prompt.size()),
                                     completion));
          }
          const std::string end = "data: [DONE]\n\n";
          sink.write(end.data(), end.size());
          sink.done();
          return true;
        },
        release);
  } else {
    res.set_chunked_content_provider(
        "application/json",
        [task, st, &model_name](size_t, httplib::DataSink& sink) {
          std::string body;
          {
            std::unique_lock lk(task->mu);
            if (!task->cv.wait_for(lk, kPollInterval, [&] { return task->done(); })) {
              lk.unlock();
              return sink.is_writable();
            }
            body =
                task->error.empty()
                    ? dump(server::completion_body(task->params, st->id, st->created, model_name,
                                                   task->results, int(task->params.prompt.size())))
                    : dump(ApiError(500, task->error, "", "", "server_error").body());
          }
          sink.write(body.data(), body.size());
          sink.done();
          return true;
        },
        release);
  }
}

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (opts.max_batch < 1 || opts.max_queue < 0 || opts.n_ctx < 2 || opts.max_n < 1 ||
      opts.max_step_tokens < 1) {
    throw Error("server: max_batch, n_ctx, max_n and max_step_tokens must be positive");
  }
  if (opts.http_threads <= 0) opts.http_threads = opts.max_batch + opts.max_queue + 4;
  s.opts = std::move(opts);
  // Exact activations run the float path, which reads repacked Q8_0/Q4_0 weights through a
  // copy back to rows: keep the file's layout then.
  LoadOptions lo;
  lo.repack = !s.opts.exact_activations;
  s.model = Model::load(s.opts.model_path, lo);
  try {
    s.tok = Tokenizer::from_gguf(s.model->file());
  } catch (const Error& e) {
    throw Error(s.opts.model_path + ": the server needs a tokenizer: " + e.what());
  }
  s.api.tok = s.tok.get();
  s.api.n_ctx = s.opts.n_ctx;
  s.api.max_n = s.opts.max_n;
  s.api.name = s.opts.model_name;
  if (s.api.name.empty()) s.api.name = s.model->config().name;
  if (s.api.name.empty()) s.api.name = std::filesystem::path(s.opts.model_path).stem().string();
  try {
    s.api.chat = chat_format_for_model(s.model->file(), *s.tok, s.opts.chat_format);
  } catch (const Error& e) {
    if (!s.opts.chat_format.empty()) throw;
    const std::string bos = s.tok->bos() >= 0 ? s.tok->token_to_piece(s.tok->bos()) : "";
    const std::string eos = s.tok->eos() >= 0 ? s.tok->token_to_piece(s.tok->eos()) : "";
    s.api.chat = chat_format_from_name("chatml", bos, eos);
    s.log(std::string("no usable chat template (") + e.what() + "); chat uses chatml");
  }
  s.engine = std::make_unique<server::Engine>(*s.model, *s.tok, s.opts, s.metrics);
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
  // A client that closes its socket while we write would otherwise kill the process with
  // SIGPIPE (the system's cpp-httplib sends without MSG_NOSIGNAL); a failed write is handled
  // as a disconnect instead. Process-wide, as signal dispositions are.
  std::signal(SIGPIPE, SIG_IGN);
  const size_t n_http = size_t(s.opts.http_threads);
  s.http.new_task_queue = [n_http] { return new httplib::ThreadPool(n_http); };
  s.http.set_payload_max_length(16u << 20);
  // httplib's default sets SO_REUSEPORT, which lets a second server bind a port that is in
  // use and silently take half its connections. SO_REUSEADDR alone still allows a quick
  // restart (sockets in TIME_WAIT) but makes a live listener's port a bind error.
  s.http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.routes();
  if (s.opts.port == 0) {
    s.port = s.http.bind_to_any_port(s.opts.host);
  } else {
    s.port = s.http.bind_to_port(s.opts.host, s.opts.port) ? s.opts.port : -1;
  }
  if (s.port < 0) {
    throw Error("cannot listen on " + s.opts.host + ":" + std::to_string(s.opts.port));
  }
  enlarge_backlog(s.port, 1024);
  s.engine->start();
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  // httplib's stop() does nothing until the accept loop has started, so a stop() right after
  // start() would leave the listener running and hang the join: wait for the loop here.
  for (int i = 0; i < 5000 && !s.http.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  s.log("listening on http://" + s.opts.host + ":" + std::to_string(s.port) + " (model '" +
        s.api.name + "', routing " + s.engine->routing() + ")");
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
    // Let providers write the last events of the requests that just ended.
    std::unique_lock lk(s.streams_mu);
    s.streams_cv.wait_for(lk, std::chrono::seconds(2), [&] { return s.open_streams == 0; });
  }
  s.http.stop();
  if (s.listener.joinable()) s.listener.join();
  s.engine->stop();
  s.log("stopped");
  std::lock_guard lk(s.stop_mu);
  s.stopped = true;
  s.stopped_cv.notify_all();
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
  return impl_->metrics.render(impl_->engine->routing());
}

}  // namespace lynx
