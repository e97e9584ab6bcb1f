// The server's HTTP/1.1 layer: its own accept loop, request reading and response writing.
//
// Why not cpp-httplib's server (0.11, as Debian ships it): it gives every connection a worker
// thread from the moment it is accepted and reads the request with a per-read timeout only, so
// as many clients as there are workers, each sending one header line per second, hold every
// worker forever (and stop() waits for them); it has no bound on the number of header lines
// or on a chunked body; it answers only the first of pipelined requests (the keep-alive loop
// polls the socket, not the bytes it has already buffered); and it sends chunked encoding to
// HTTP/1.0 clients. None of this can be configured from outside, so this file does the socket
// work and the server keeps httplib for nothing but its tests' client.
//
// The socket work is ours; the request syntax is not. Requests are parsed by Boost.Beast's
// `http::request_parser` (header-only, Debian's libboost-dev 1.74) fed with the bytes the
// reader has buffered, through HttpRequestParser (http_parse.h), which adds the checks Beast
// leaves to its user: header-line count, one Transfer-Encoding line ending in chunked and
// never with Content-Length, "close" anywhere in a Connection list, no bare-LF line ends or
// obsolete folding. (A hand-written parser here kept such defects: "Connection: keep-alive,
// close" kept the connection, a second Transfer-Encoding line was ignored, NUL bytes in
// header values were accepted; issue 29.)
//
// Design: one READER thread polls the listening socket and every connection that is waiting
// for (the rest of) a request; it reads without blocking, so a slow client costs a descriptor
// and its buffer, never a thread. Each request has a total deadline for its head (request line
// and headers) and one for its body, and size bounds on both; a connection over the bounds is
// answered (408/413/431/400, 501/505) and closed. Only a complete request goes to a WORKER
// thread, which runs the handler and writes the answer; requests already buffered behind it
// (pipelining) are answered in order on the same worker, then the connection returns to the
// reader. Connections are bounded in total and per client address (503/429 at accept).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace lynx::server {

struct HttpLimits {
  size_t max_body = 16u << 20;          // bytes after chunked decoding (413)
  size_t max_header_bytes = 64u << 10;  // request line + headers (431)
  int max_headers = 100;                // header lines (431)
  double header_timeout_s = 10;         // request line + headers, in total (408)
  double body_timeout_s = 60;           // the whole body, in total (408)
  double idle_timeout_s = 30;           // keep-alive: between requests (closed silently)
  double write_timeout_s = 30;          // a write that makes no progress (connection dropped)
  int max_connections = 512;            // open connections in total (503 at accept)
  int max_connections_per_ip = 256;     // open connections per client address (429)
};

struct HttpRequest {
  std::string method, target, path, version;  // path = target without the query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // de-chunked
  std::string remote_ip;
  bool http10 = false;
  // The value of the first header named `name` (case-insensitive), "" when absent.
  std::string header(std::string_view name) const;
  // False once the client has closed its side of the connection (or the server stops):
  // handlers that wait poll it to cancel work nobody will read.
  std::function<bool()> client_alive;
};

// Where a streamed body goes: write() returns false when the client is gone.
class HttpSink {
 public:
  virtual ~HttpSink() = default;
  virtual bool write(std::string_view data) = 0;
  virtual bool alive() = 0;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string content_type = "application/json";
  std::string body;
  // When set, the body is produced by calling provider(sink) until it returns false (the
  // client went away or it is finished); `finished` says whether it completed. HTTP/1.1
  // clients get chunked encoding, HTTP/1.0 clients the raw bytes and a closed connection.
  std::function<bool(HttpSink&, bool& finished)> provider;
  // Runs once after the provider's last call, whether the body was written or not.
  std::function<void(bool completed)> on_done;
  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

class HttpServer {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  // The body of an answer the HTTP layer gives by itself (limits, malformed requests).
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;
  // Called after each answer (metrics); `path` is "" when the request could not be read.
  using OnResponse = std::function<void(const std::string& path, int status)>;

  HttpServer(HttpLimits limits, int n_workers, Handler handler, ErrorBody error_body,
             OnResponse on_response);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; port 0 = an ephemeral port. Returns the port; throws lynx::Error.
  int bind(const std::string& host, int port);
  void start();
  // Stops accepting, closes idle and reading connections, ends the responses in progress
  // (their providers see a dead client, blocked writes are cut by shutting the sockets
  // down) and joins every thread. Bounded: nothing here waits on a client.
  void stop();
  // Open connections (tests, metrics).
  int connections() const;

  struct Conn;

 private:
  void reader_loop();
  void worker_loop();
  void accept_all();
  void serve(const std::shared_ptr<Conn>& c);
  void close_conn(const std::shared_ptr<Conn>& c);
  void reject(const std::shared_ptr<Conn>& c, int status, const std::string& msg);
  void wake();

  const HttpLimits limits_;
  const int n_workers_;
  Handler handler_;
  ErrorBody error_body_;
  OnResponse on_response_;

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: wakes the reader's poll
  std::atomic<bool> stopping_{false};
  std::thread reader_;
  std::vector<std::thread> workers_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Conn>> ready_;     // complete request, waiting for a worker
  std::vector<std::shared_ptr<Conn>> returns_;  // from workers back to the reader
  std::vector<std::shared_ptr<Conn>> busy_;     // on a worker (stop() shuts them down)
  std::map<std::string, int> per_ip_;
  int n_conns_ = 0;
  static constexpr int kMaxRefusedLingering = 64;
  int n_refused_ = 0;  // refused at accept, lingering to deliver their answer
};

}  // namespace lynx::server
