// Helpers of the server tests: a small synthetic model with a byte-level tokenizer (the
// reference fixtures carry no tokenizer), an in-process server on an ephemeral loopback port,
// HTTP calls (plain and server-sent events) and /metrics parsing.
#pragma once
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "lynx/server.h"
#include "lynx/synth.h"

namespace lynx::test {

using json = nlohmann::json;

// tiny-moe with one layer and a 300-token vocabulary (256 bytes, <|endoftext|>, fillers):
// 64 experts, 8 per token, so batch-aware policies have something to remap. Written once per
// test process into the temp directory.
inline const std::string& tiny_model() {
  static const std::string path = [] {
    SynthOptions o;
    o.shape = synth_shape("tiny-moe");
    o.shape.n_layer = 1;
    o.shape.n_vocab = 300;
    o.type = gguf::TensorType::F32;
    o.seed = 7;
    const auto p = std::filesystem::temp_directory_path() /
                   ("lynx-server-test-" + std::to_string(::getpid()) + ".gguf");
    write_synth_model(o, p.string());
    return p.string();
  }();
  // Removed at exit by a function-local object: no global constructor order to worry about.
  static const struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  } cleanup;
  (void)cleanup;
  return path;
}

inline ServerOptions tiny_options() {
  ServerOptions o;
  o.model_path = tiny_model();
  o.model_name = "tiny";
  o.port = 0;
  o.n_ctx = 512;
  o.max_batch = 4;
  o.max_queue = 16;
  o.n_threads = 1;
  o.shutdown_timeout_s = 5;
  return o;
}

struct Running {
  std::unique_ptr<Server> server;
  explicit Running(ServerOptions o) : server(std::make_unique<Server>(std::move(o))) {
    server->start();
  }
  ~Running() { server->stop(); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server->port());
    c.set_read_timeout(120, 0);
    return c;
  }
};

struct Reply {
  int status = -1;  // -1 = no answer (connection error)
  std::string body;
  httplib::Headers headers;
  json j() const { return json::parse(body); }
};

inline Reply post(const Running& r, const std::string& path, const std::string& body,
                  const httplib::Headers& h = {}) {
  auto c = r.client();
  Reply out;
  if (auto res = c.Post(path.c_str(), h, body, "application/json")) {
    out.status = res->status;
    out.body = res->body;
    out.headers = res->headers;
  }
  return out;
}

inline Reply get(const Running& r, const std::string& path, const httplib::Headers& h = {}) {
  auto c = r.client();
  Reply out;
  if (auto res = c.Get(path.c_str(), h)) {
    out.status = res->status;
    out.body = res->body;
    out.headers = res->headers;
  }
  return out;
}

// A streamed answer: the raw bytes and the `data:` payloads in order.
struct Stream {
  int status = -1;
  std::string raw;
  std::vector<std::string> data;  // payloads, "[DONE]" included
  std::vector<json> chunks() const {
    std::vector<json> v;
    for (const auto& d : data) {
      if (d != "[DONE]") v.push_back(json::parse(d));
    }
    return v;
  }
};

// Posts and reads server-sent events; `on_data` (optional) sees each payload as it arrives
// and returns false to hang up.
inline Stream post_stream(const Running& r, const std::string& path, const std::string& body,
                          std::function<bool(const std::string&)> on_data = {},
                          int read_timeout_ms = 120000) {
  httplib::Client c("127.0.0.1", r.server->port());
  c.set_read_timeout(read_timeout_ms / 1000, (read_timeout_ms % 1000) * 1000);
  Stream s;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    s.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    s.raw.append(d, n);
    buf.append(d, n);
    for (size_t at; (at = buf.find("\n\n")) != std::string::npos;) {
      std::string ev = buf.substr(0, at);
      buf.erase(0, at + 2);
      if (ev.rfind("data: ", 0) == 0) {
        s.data.push_back(ev.substr(6));
        if (on_data && !on_data(s.data.back())) return false;
      }
    }
    return true;
  };
  auto res = c.send(req);
  if (res && s.status < 0) s.status = res->status;
  return s;
}

// Value of a metric sample (exact name with labels, as rendered), -1 when absent.
inline double metric(const std::string& text, const std::string& sample) {
  const std::string key = sample + " ";
  for (size_t at = 0; (at = text.find(key, at)) != std::string::npos; at += key.size()) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + key.size()));
  }
  return -1;
}

// Polls until pred() holds (the server state changes asynchronously); returns pred()'s last
// value. The bound only keeps a broken server from hanging the suite.
inline bool eventually(const std::function<bool()>& pred, int max_ms = 60000) {
  for (int waited = 0; waited < max_ms; waited += 5) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

}  // namespace lynx::test
