// The server's HTTP/1.1 layer (see http.h for why it is ours and how it is organised). Requests
// are parsed by HttpRequestParser (http_parse.h, on Boost.Beast); this file does the sockets,
// the deadlines and the workers.
#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "lynx/error.h"
#include "server/http_parse.h"

namespace lynx::server {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(uint8_t(a[i])) != std::tolower(uint8_t(b[i]))) return false;
  }
  return true;
}

const char* reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

// Blocking-with-deadline send on a non-blocking socket; false when the client is gone, made
// no progress for `timeout_s`, or `stop` is set.
bool send_all(int fd, std::string_view data, double timeout_s, const std::atomic<bool>& stop) {
  double last_progress = now_s();
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(size_t(n));
      last_progress = now_s();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (stop || now_s() - last_progress > timeout_s) return false;
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);  // short slices: a stop() is noticed quickly
      continue;
    }
    return false;
  }
  return true;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return "";
}

// A connection, owned by one thread at a time: the reader while it waits for a request, a
// worker while it answers.
struct HttpServer::Conn {
  explicit Conn(const HttpLimits& limits) : parser(limits) {}
  int fd = -1;
  std::string ip;
  std::string buf;  // received bytes not consumed yet
  enum class Phase { kHead, kBody, kLinger } phase = Phase::kHead;
  double deadline = 0;       // of the current phase (or of the idle wait)
  bool idle = false;         // keep-alive: no byte of the next request yet
  HttpRequestParser parser;  // the request being read
  HttpRequest req;           // the request read, while it is answered
  bool keep_alive = true;
  // Counted against the connection limits; false for one refused at accept, which lingers
  // only to deliver its 429/503.
  bool counted = true;
};

namespace {

enum class Parse { kNeedMore, kDone, kError };

struct ParseError {
  int status = 400;
  std::string message;
};

// Reads what c.buf holds of the current request; consumes the bytes it used.
Parse parse(HttpServer::Conn& c, const HttpLimits& lim, double now, ParseError& err) {
  const HttpRequestParser::Status st = c.parser.parse(c.buf);
  if (st == HttpRequestParser::Status::kError) {
    err = {c.parser.error_status(), c.parser.error_message()};
    c.req.path = c.parser.take_request().path;  // for the metrics, when the head was read
    return Parse::kError;
  }
  if (c.phase == HttpServer::Conn::Phase::kHead && c.parser.head_done()) {
    c.phase = HttpServer::Conn::Phase::kBody;
    c.deadline = now + lim.body_timeout_s;
    // A client that asked whether to send its body (curl does for large ones) is told to go
    // on; otherwise it waits a second before sending anyway.
    if (st == HttpRequestParser::Status::kNeedMore && c.parser.expects_continue()) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      [[maybe_unused]] ssize_t n =
          ::send(c.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  if (st != HttpRequestParser::Status::kDone) return Parse::kNeedMore;
  c.req = c.parser.take_request();
  c.req.remote_ip = c.ip;
  c.keep_alive = c.parser.keep_alive();
  return Parse::kDone;
}

void reset_request(HttpServer::Conn& c) {
  c.req = HttpRequest{};
  c.req.remote_ip = c.ip;
  c.parser.reset();
  c.phase = HttpServer::Conn::Phase::kHead;
  c.keep_alive = true;
}

// Writes one answer; false when the connection must be closed afterwards.
class Writer : public HttpSink {
 public:
  Writer(int fd, bool chunked, double timeout, const std::atomic<bool>& stop)
      : fd_(fd), chunked_(chunked), timeout_(timeout), stop_(stop) {}
  bool write(std::string_view d) override {
    if (failed_) return false;
    if (d.empty()) return true;
    if (chunked_) {
      char head[24];
      const int n = std::snprintf(head, sizeof head, "%zx\r\n", d.size());
      std::string frame;
      frame.reserve(size_t(n) + d.size() + 2);
      frame.append(head, size_t(n)).append(d).append("\r\n");
      failed_ = !send_all(fd_, frame, timeout_, stop_);
    } else {
      failed_ = !send_all(fd_, d, timeout_, stop_);
    }
    return !failed_;
  }
  bool alive() override {
    if (failed_ || stop_) return false;
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) < 0) return true;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return false;
    if (p.revents & POLLIN) {
      // Readable: either the next pipelined request (alive) or the end of the stream.
      char ch;
      const ssize_t n = ::recv(fd_, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
      return n != 0;
    }
    return true;
  }
  bool failed() const { return failed_; }

 private:
  int fd_;
  bool chunked_;
  double timeout_;
  const std::atomic<bool>& stop_;
  bool failed_ = false;
};

}  // namespace

HttpServer::HttpServer(HttpLimits limits, int n_workers, Handler handler, ErrorBody error_body,
                       OnResponse on_response)
    : limits_(limits),
      n_workers_(std::max(1, n_workers)),
      handler_(std::move(handler)),
      error_body_(std::move(error_body)),
      on_response_(std::move(on_response)) {}

HttpServer::~HttpServer() {
  stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

int HttpServer::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
      rc != 0) {
    throw Error("cannot listen on " + host + ":" + service + ": " + gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    // SO_REUSEADDR lets a restart bind while old sockets sit in TIME_WAIT; no SO_REUSEPORT,
    // which would let a second server share (and silently split) a port in use.
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    // The backlog is large so that a burst of clients is not dropped at SYN time (a dropped
    // SYN is retried by the kernel only after a second).
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) throw Error("cannot listen on " + host + ":" + service + ": " + why);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void HttpServer::start() {
  if (listen_fd_ < 0) throw Error("http: start() before bind()");
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw Error(std::string("http: eventfd: ") + std::strerror(errno));
  reader_ = std::thread([this] { reader_loop(); });
  for (int i = 0; i < n_workers_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

void HttpServer::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

int HttpServer::connections() const {
  std::lock_guard lk(mu_);
  return n_conns_;
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  {
    std::lock_guard lk(mu_);
    // A worker blocked in send() or waiting on a provider is released: the socket errors.
    for (auto& c : busy_) {
      if (c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
    }
  }
  work_cv_.notify_all();
  if (wake_fd_ >= 0) wake();
  if (reader_.joinable()) reader_.join();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  // What no thread owns any more: waiting for a worker, or handed back after the reader left.
  std::vector<std::shared_ptr<Conn>> left;
  {
    std::lock_guard lk(mu_);
    left.assign(ready_.begin(), ready_.end());
    left.insert(left.end(), returns_.begin(), returns_.end());
    ready_.clear();
    returns_.clear();
  }
  for (auto& c : left) close_conn(c);
  // The port is free again as soon as stop() returns.
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void HttpServer::close_conn(const std::shared_ptr<Conn>& c) {
  // Under the lock: stop() shuts down the sockets of busy connections, and must never see a
  // descriptor number that was closed (and possibly reused) meanwhile.
  std::lock_guard lk(mu_);
  if (c->fd < 0) return;
  ::close(c->fd);
  c->fd = -1;
  if (!c->counted) {
    --n_refused_;
    return;
  }
  --n_conns_;
  if (--per_ip_[c->ip] == 0) per_ip_.erase(c->ip);
}

void HttpServer::reject(const std::shared_ptr<Conn>& c, int status, const std::string& msg) {
  const std::string body = error_body_ ? error_body_(status, msg) : msg;
  std::string out =
      "HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n";
  if (status == 429 || status == 503) out += "Retry-After: 1\r\n";
  out += "\r\n" + body;
  // Best effort without blocking: the answer is small and the socket's buffer is empty.
  [[maybe_unused]] ssize_t n = ::send(c->fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (on_response_) on_response_(c->req.path, status);
}

void HttpServer::accept_all() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the pending connection stays in the backlog and the listener
      // stays readable; pause briefly rather than spin on it.
      if (errno == EMFILE || errno == ENFILE)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;  // EAGAIN: all taken
    }
    char ip[INET6_ADDRSTRLEN] = "?";
    if (addr.ss_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, ip, sizeof ip);
    } else if (addr.ss_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, ip, sizeof ip);
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_shared<Conn>(limits_);
    c->fd = fd;
    c->ip = ip;
    reset_request(*c);
    int status = 0;
    bool linger = false;
    {
      std::lock_guard lk(mu_);
      if (n_conns_ >= limits_.max_connections) {
        status = 503;
      } else if (per_ip_[c->ip] >= limits_.max_connections_per_ip) {
        status = 429;
      } else {
        ++n_conns_;
        ++per_ip_[c->ip];
      }
      if (status && per_ip_[c->ip] == 0) per_ip_.erase(c->ip);
      // A refused client has usually sent its request already, and closing a socket with
      // unread input resets it, losing our answer: a few refused connections linger to
      // deliver it; past that, a flood is simply closed.
      if (status && n_refused_ < kMaxRefusedLingering) {
        ++n_refused_;
        linger = true;
      }
    }
    if (status) {
      reject(c, status,
             status == 503 ? "the server has too many open connections; retry later"
                           : "too many open connections from your address; retry later");
      if (!linger) {
        ::close(fd);
        continue;
      }
      c->counted = false;
      ::shutdown(fd, SHUT_WR);
      c->phase = Conn::Phase::kLinger;
      c->deadline = now_s() + 1.0;
      std::lock_guard lk(mu_);
      returns_.push_back(std::move(c));
      continue;
    }
    c->deadline = now_s() + limits_.header_timeout_s;
    std::lock_guard lk(mu_);
    returns_.push_back(std::move(c));  // picked up by the reader loop below
  }
}

void HttpServer::reader_loop() {
  std::vector<std::shared_ptr<Conn>> conns;  // waiting for a request, or lingering
  std::vector<pollfd> fds;
  std::string chunk(64 * 1024, '\0');
  // A rejected connection is not closed at once: closing a socket with unread input makes
  // the kernel send a reset, and the client may lose our answer. It is half-closed and its
  // input discarded for a short while instead.
  auto linger = [&](const std::shared_ptr<Conn>& c, double now) {
    ::shutdown(c->fd, SHUT_WR);
    c->phase = Conn::Phase::kLinger;
    c->deadline = now + 2.0;
  };
  while (!stopping_) {
    {
      std::lock_guard lk(mu_);
      for (auto& c : returns_) conns.push_back(std::move(c));
      returns_.clear();
    }
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    double next = now_s() + 1.0;
    for (auto& c : conns) {
      fds.push_back({c->fd, POLLIN, 0});
      next = std::min(next, c->deadline);
    }
    const int wait_ms = std::max(0, int((next - now_s()) * 1000) + 1);
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(wake_fd_, &v, sizeof v);
    }
    if (fds[1].revents & POLLIN) accept_all();
    const double now = now_s();
    std::vector<std::shared_ptr<Conn>> keep;
    for (size_t i = 0; i < conns.size(); ++i) {
      const auto& c = conns[i];
      const short rev = fds[i + 2].revents;
      bool closed = false;
      size_t got = 0;
      // Bounded per round, so one fast sender does not starve the others.
      while ((rev & (POLLIN | POLLHUP | POLLERR)) && got < (1u << 20)) {
        const ssize_t n = ::recv(c->fd, chunk.data(), chunk.size(), 0);
        if (n > 0) {
          got += size_t(n);
          if (c->phase != Conn::Phase::kLinger) c->buf.append(chunk.data(), size_t(n));
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
        break;
      }
      if (c->phase == Conn::Phase::kLinger) {
        if (closed || now >= c->deadline) {
          close_conn(c);
        } else {
          keep.push_back(c);
        }
        continue;
      }
      if (got > 0 && c->idle) {
        c->idle = false;
        c->deadline = now + limits_.header_timeout_s;
      }
      ParseError err;
      const Parse p = got > 0 ? parse(*c, limits_, now, err) : Parse::kNeedMore;
      if (p == Parse::kDone) {
        std::lock_guard lk(mu_);
        ready_.push_back(c);
        work_cv_.notify_one();
        continue;
      }
      if (p == Parse::kError) {
        reject(c, err.status, err.message);
        linger(c, now);
        keep.push_back(c);
        continue;
      }
      if (closed) {
        close_conn(c);
      } else if (now >= c->deadline) {
        if (c->idle) {
          close_conn(c);  // an idle keep-alive connection: nothing to answer
        } else {
          reject(c, 408,
                 c->phase == Conn::Phase::kHead
                     ? "the request headers did not arrive within " +
                           std::to_string(int(limits_.header_timeout_s)) + " s"
                     : "the request body did not arrive within " +
                           std::to_string(int(limits_.body_timeout_s)) + " s");
          linger(c, now);
          keep.push_back(c);
        }
      } else {
        keep.push_back(c);
      }
    }
    conns.swap(keep);
  }
  for (auto& c : conns) close_conn(c);
}

void HttpServer::worker_loop() {
  for (;;) {
    std::shared_ptr<Conn> c;
    {
      std::unique_lock lk(mu_);
      work_cv_.wait(lk, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      c = std::move(ready_.front());
      ready_.pop_front();
      busy_.push_back(c);
    }
    serve(c);
    std::lock_guard lk(mu_);
    std::erase(busy_, c);
  }
}

void HttpServer::serve(const std::shared_ptr<Conn>& c) {
  for (;;) {
    HttpRequest& req = c->req;
    Writer out(c->fd, false, limits_.write_timeout_s, stopping_);
    req.client_alive = [&out] { return out.alive(); };
    HttpResponse res;
    handler_(req, res);
    req.client_alive = nullptr;

    const bool head_only = req.method == "HEAD";
    const bool streamed = bool(res.provider) && !head_only;
    // HTTP/1.0 has no chunked coding: a streamed body ends when the connection closes.
    bool keep = c->keep_alive && !stopping_ && !(streamed && req.http10);
    std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " + reason(res.status) + "\r\n";
    for (const auto& [k, v] : res.headers) head += k + ": " + v + "\r\n";
    head += "Content-Type: " + res.content_type + "\r\n";
    if (streamed) {
      if (!req.http10) head += "Transfer-Encoding: chunked\r\n";
    } else {
      head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
    }
    head += keep ? (req.http10 ? "Connection: keep-alive\r\n" : "") : "Connection: close\r\n";
    head += "\r\n";
    bool ok = send_all(c->fd, head, limits_.write_timeout_s, stopping_);
    if (ok && !head_only && !streamed)
      ok = send_all(c->fd, res.body, limits_.write_timeout_s, stopping_);
    if (streamed) {
      Writer sink(c->fd, !req.http10, limits_.write_timeout_s, stopping_);
      bool finished = false;
      if (ok) {
        while (!finished && res.provider(sink, finished)) {
        }
      }
      ok = ok && finished && !sink.failed();
      if (ok && !req.http10) ok = send_all(c->fd, "0\r\n\r\n", limits_.write_timeout_s, stopping_);
    }
    if (res.on_done) res.on_done(ok);
    if (on_response_) on_response_(req.path, res.status);
    if (!ok || !keep) {
      close_conn(c);
      return;
    }
    // The next request: already buffered (pipelined) is answered here and now, in order;
    // otherwise the connection goes back to the reader to wait for it.
    reset_request(*c);
    ParseError err;
    const double now = now_s();
    c->deadline = now + limits_.header_timeout_s;
    c->idle = c->buf.empty();
    if (c->idle) c->deadline = now + limits_.idle_timeout_s;
    const Parse p = c->buf.empty() ? Parse::kNeedMore : parse(*c, limits_, now, err);
    if (p == Parse::kDone) continue;
    if (p == Parse::kError) {
      reject(c, err.status, err.message);
      close_conn(c);
      return;
    }
    {
      std::lock_guard lk(mu_);
      returns_.push_back(c);
    }
    wake();
    return;
  }
}

}  // namespace lynx::server
