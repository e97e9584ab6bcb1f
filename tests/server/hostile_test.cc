// Hostile clients against the in-process server, on loopback, bounded in count and time: slow
// senders, connection floods, oversized and malformed requests, pipelining, HTTP/1.0, memory
// after a flood, shutdown with a slow client connected, and an engine step that throws. The
// time bounds are generous "did not hang" limits, never performance assertions.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "util.h"

namespace lynx::test {
namespace {

// A raw client socket: what httplib's client will not send (slow heads, pipelines, 1.0).
class Raw {
 public:
  explicit Raw(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~Raw() {
    if (fd_ >= 0) ::close(fd_);
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool send(std::string_view d) {
    while (!d.empty()) {
      const ssize_t n = ::send(fd_, d.data(), d.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      d.remove_prefix(size_t(n));
    }
    return true;
  }
  // Everything until the server closes or `ms` pass.
  std::string read_all(int ms = 20000) {
    std::string out;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    char buf[65536];
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, size_t(n));
    }
    return out;
  }
  // Reads until `pred(received)` holds, the server closes, or `ms` pass.
  std::string read_until(const std::function<bool(const std::string&)>& pred, int ms = 20000) {
    std::string out;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    char buf[65536];
    while (!pred(out) && std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, size_t(n));
    }
    return out;
  }
  // True once the server has closed the connection (reads return end of stream).
  bool closed_by_peer() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    char buf[4096];
    return ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT) == 0;
  }

 private:
  int fd_ = -1;
};

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

int status_of(const std::string& raw) {
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12) return -1;
  return std::stoi(raw.substr(9, 3));
}

double rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

const std::string kHealth = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

TEST(Hostile, SlowClientsDoNotStallOthers) {
  ServerOptions o = tiny_options();
  o.http_threads = 4;
  o.header_timeout_s = 4;
  Running srv(o);
  // Three times as many slow clients as HTTP workers, each sending one header line at a time.
  constexpr int kSlow = 12;
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<Raw>(srv.server->port()));
    ASSERT_TRUE(slow.back()->ok());
    slow.back()->send("POST /v1/completions HTTP/1.1\r\n");
  }
  std::atomic<bool> quit{false};
  std::thread trickle([&] {
    for (int line = 0; line < 100 && !quit; ++line) {
      for (auto& s : slow) s->send("X-Slow-" + std::to_string(line) + ": 1\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  // Everyone else is served while they trickle.
  for (int i = 0; i < 5; ++i) {
    httplib::Client c("127.0.0.1", srv.server->port());
    c.set_connection_timeout(10);
    c.set_read_timeout(10);
    auto res = c.Get("/health");
    ASSERT_TRUE(res) << "/health got no answer while slow clients were connected";
    EXPECT_EQ(res->status, 200);
  }
  Reply r = post(srv, "/v1/completions", R"({"prompt":"hi","max_tokens":2})");
  EXPECT_EQ(r.status, 200) << r.body;
  // The header deadline ends each slow request with 408 (they keep sending, it is the total
  // time that counts).
  for (auto& s : slow) {
    const std::string got = s->read_until([](const std::string& b) { return b.size() >= 12; });
    EXPECT_EQ(status_of(got), 408) << got.substr(0, 200);
  }
  quit = true;
  trickle.join();
}

// One more connection, with a request already sent (the refusal still arrives), is answered
// `status` within 20 s; `got` keeps the last answer. The server's reader thread counts
// accepted connections, so this waits for the refusal rather than assume when earlier
// connections were accepted.
bool refused_with(int port, int status, std::string& got) {
  return eventually(
      [&] {
        Raw extra(port);
        extra.send(kHealth);
        got = extra.read_all(2000);
        return status_of(got) == status;
      },
      20000);
}

TEST(Hostile, ConnectionLimits) {
  ServerOptions o = tiny_options();
  o.max_connections_per_ip = 3;
  {
    Running srv(o);
    std::vector<std::unique_ptr<Raw>> idle;
    for (int i = 0; i < 3; ++i) idle.push_back(std::make_unique<Raw>(srv.server->port()));
    std::string got;
    ASSERT_TRUE(refused_with(srv.server->port(), 429, got)) << got;
    EXPECT_NE(got.find("too many open connections"), std::string::npos) << got;
    idle.clear();  // their slots come back
    EXPECT_TRUE(eventually([&] { return get(srv, "/health").status == 200; }, 20000));
  }
  o = tiny_options();
  o.max_connections = 2;
  Running srv(o);
  Raw a(srv.server->port()), b(srv.server->port());
  std::string got;
  ASSERT_TRUE(refused_with(srv.server->port(), 503, got)) << got;
  EXPECT_NE(got.find("Retry-After: 1"), std::string::npos) << got;
}

TEST(Hostile, HeaderAndBodyLimits) {
  ServerOptions o = tiny_options();
  o.api_key = "secret";  // the limits apply before authentication
  Running srv(o);
  const int port = srv.server->port();
  {
    Raw c(port);
    std::string req = "GET /v1/models HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 500; ++i) req += "X-H" + std::to_string(i) + ": v\r\n";
    c.send(req + "\r\n");
    EXPECT_EQ(status_of(c.read_all()), 431);
  }
  {
    Raw c(port);
    c.send("GET /v1/models HTTP/1.1\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n");
    EXPECT_EQ(status_of(c.read_all()), 431);
  }
  {
    Raw c(port);
    c.send(
        "POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer secret\r\n"
        "Content-Length: 17000000\r\n\r\n");
    EXPECT_EQ(status_of(c.read_all()), 413);
  }
  {
    // A chunked body is held to the same limit as a sized one.
    Raw c(port);
    c.send(
        "POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer secret\r\n"
        "Transfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = "10000\r\n" + std::string(0x10000, ' ') + "\r\n";
    for (int i = 0; i < 20 * 16; ++i) {  // 20 MiB
      if (!c.send(chunk)) break;
    }
    const std::string got = c.read_all();
    EXPECT_EQ(status_of(got), 413) << got.substr(0, 300);
  }
  {
    Raw c(port);
    c.send(
        "POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n"
        "Transfer-Encoding: chunked\r\n\r\nhello");
    EXPECT_EQ(status_of(c.read_all()), 400);
  }
  {
    Raw c(port);
    c.send("BAD\r\n\r\n");
    EXPECT_EQ(status_of(c.read_all()), 400);
  }
  // Deep nesting is refused before parsing.
  Reply r =
      post(srv, "/v1/completions", std::string(1 << 20, '['), {{"Authorization", "Bearer secret"}});
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_NE(r.body.find("nested deeper"), std::string::npos) << r.body.substr(0, 300);
  // A chunked, well-formed request within the limits is served.
  {
    Raw c(port);
    const std::string body = R"({"prompt":"hi","max_tokens":2})";
    char size[16];
    std::snprintf(size, sizeof size, "%zx", body.size());
    c.send(
        "POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer secret\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
        std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n");
    const std::string got = c.read_all();
    EXPECT_EQ(status_of(got), 200) << got;
  }
}

// Framing details of RFC 9112 the layer accepts or refuses, each on its own connection.
TEST(Hostile, HttpFraming) {
  Running srv(tiny_options());
  const int port = srv.server->port();
  auto answer = [&](const std::string& req) {
    Raw c(port);
    c.send(req);
    return c.read_all();
  };
  const std::string body = R"({"prompt":"hi","max_tokens":1})";
  // Empty lines before the request line are ignored; bare LF line ends are refused at once
  // (RFC 9112 2.2 allows either; a proxy that splits lines otherwise would see other fields).
  EXPECT_EQ(status_of(answer("\r\n\r\nGET /health HTTP/1.1\r\nConnection: close\r\n\r\n")), 200);
  EXPECT_EQ(status_of(answer("\r\n\nGET /health HTTP/1.1\nConnection: close\n\n")), 400);
  EXPECT_EQ(status_of(answer("GET /health HTTP/1.1\r\nHost: x\nConnection: close\r\n")), 400);
  // Chunk extensions and trailers are read and ignored.
  EXPECT_EQ(status_of(answer("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                             "Connection: close\r\n\r\n" +
                             std::to_string(0) + "\r\n\r\n")),
            400);  // an empty body is not JSON
  {
    char size[16];
    std::snprintf(size, sizeof size, "%zx", body.size());
    EXPECT_EQ(status_of(answer("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                               "Connection: close\r\n\r\n" +
                               std::string(size) + ";ext=1\r\n" + body +
                               "\r\n0\r\nX-Trailer: t\r\n\r\n")),
              200);
  }
  EXPECT_EQ(status_of(answer("GET /health HTTP/2.0\r\n\r\n")), 505);
  EXPECT_EQ(status_of(answer("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n"
                             "\r\n")),
            501);
  EXPECT_EQ(status_of(answer("GET /health HTTP/1.1\r\n folded: x\r\n\r\n")), 400);
  EXPECT_EQ(status_of(answer("GET /health HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n"
                             "\r\nab")),
            400);
  EXPECT_EQ(status_of(answer("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                             "\r\nzz\r\n")),
            400);
  // Expect: 100-continue is answered before the body is sent.
  {
    Raw c(port);
    c.send(
        "POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nConnection: close\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n");
    const std::string cont =
        c.read_until([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; });
    EXPECT_EQ(status_of(cont), 100) << cont;
    c.send(body);
    const std::string got = c.read_all();
    EXPECT_EQ(status_of(got), 200) << got;
  }
  // HEAD gets the headers without a body; the connection stays usable.
  {
    Raw c(port);
    c.send("HEAD /health HTTP/1.1\r\n\r\nGET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
    const std::string got = c.read_all();
    EXPECT_EQ(count(got, "HTTP/1.1 200 OK"), 2) << got;
    EXPECT_EQ(count(got, R"({"status":"ok"})"), 1) << got;
  }
}

// "close" among other connection options, in any case and order, or on a second Connection
// line, ends the connection after the answer (RFC 9112 9.3): a request pipelined behind it is
// not answered. Issue 29, item 6.
TEST(Hostile, ConnectionCloseInAList) {
  Running srv(tiny_options());
  const int port = srv.server->port();
  // The answers to `req` followed by a pipelined /health, and whether the server closed.
  auto answers = [&](const std::string& req, bool& closed) {
    Raw c(port);
    c.send(req + kHealth);
    const std::string got =
        c.read_until([](const std::string& b) { return count(b, "HTTP/1.1 200 OK") >= 2; });
    closed = c.closed_by_peer();
    return got;
  };
  for (const char* conn :
       {"Connection: keep-alive, close\r\n", "Connection: Close, Keep-Alive\r\n",
        "Connection: x-custom ,CLOSE\r\n", "Connection: keep-alive\r\nConnection: close\r\n",
        "Connection: close\r\nConnection: keep-alive\r\n"}) {
    for (const char* version : {"HTTP/1.1", "HTTP/1.0"}) {
      bool closed = false;
      const std::string got = answers(
          std::string("GET /health ") + version + "\r\nHost: x\r\n" + conn + "\r\n", closed);
      EXPECT_EQ(count(got, "HTTP/1.1 200 OK"), 1) << version << " " << conn << got;
      EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << conn << got;
      EXPECT_TRUE(closed) << version << " " << conn;
    }
  }
  // Without "close" the connection is kept: the pipelined request is answered.
  bool closed = true;
  const std::string got =
      answers("GET /health HTTP/1.1\r\nConnection: keep-alive, x-custom\r\n\r\n", closed);
  EXPECT_EQ(count(got, "HTTP/1.1 200 OK"), 2) << got;
}

// Framing that two parsers could read differently (a proxy in front and this server) is
// refused with 400 and the connection closed, never resolved by using one of the lines.
// Issue 29, item 6.
TEST(Hostile, TransferEncodingAmbiguityIsRefused) {
  Running srv(tiny_options());
  const int port = srv.server->port();
  // A valid chunked completion: a server that took the chunked reading would answer 200.
  const std::string json = R"({"prompt":"hi","max_tokens":1})";
  char size[16];
  std::snprintf(size, sizeof size, "%zx", json.size());
  const std::string body = std::string(size) + "\r\n" + json + "\r\n0\r\n\r\n";
  // Each request is complete under some reading; the answer must be 400 alone.
  auto answer = [&](const std::string& head) {
    Raw c(port);
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + head + "\r\n" +
           body + kHealth);
    return c.read_all();
  };
  for (const char* head : {
           "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
           "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
           "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
           "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n",
           "Transfer-Encoding: chunked, gzip\r\n",
           "Transfer-Encoding: chunked, chunked\r\n",
           "Transfer-Encoding: gzip chunked\r\n",
           "Transfer-Encoding: gzip\r\n",
           "Transfer-Encoding: identity\r\n",
           "Transfer-Encoding:\r\n",
           "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
           "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
           "Content-Length: 5\r\nTransfer-Encoding: gzip\r\n",
       }) {
    const std::string got = answer(head);
    EXPECT_EQ(status_of(got), 400) << head << got.substr(0, 300);
    EXPECT_EQ(count(got, "HTTP/1.1 "), 1) << head << got;
  }
  // HTTP/1.0 has no transfer codings.
  Raw c(port);
  c.send("POST /v1/completions HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + body);
  EXPECT_EQ(status_of(c.read_all()), 400);
}

// Control bytes other than HTAB (NUL above all) in the request line or a header line are
// refused with 400 (RFC 9110 5.5, 9112 3); HTAB and obs-text bytes in values are accepted.
// Issue 29, item 6.
TEST(Hostile, ControlBytesInTheHeadAreRefused) {
  Running srv(tiny_options());
  const int port = srv.server->port();
  auto answer = [&](const std::string& line) {
    Raw c(port);
    c.send("GET /health HTTP/1.1\r\nHost: x\r\n" + line + "\r\nConnection: close\r\n\r\n");
    return status_of(c.read_all());
  };
  using namespace std::string_literals;
  for (const std::string& line :
       {"X-A: a\0b"s, "X-A: \0"s, "X-A: a\x01"s, "X-A: a\x1f b"s, "X-A: a\x7f"s, "X-A: a\rb"s,
        "X-\0A: b"s, "X-A\0: b"s, "X-A\x01: b"s, "Authorization: Bearer \0"s}) {
    std::string shown;
    for (char ch : line)
      shown += ch >= 0x20 && ch != 0x7f ? std::string(1, ch) : "\\x" + std::to_string(int(ch));
    EXPECT_EQ(answer(line), 400) << shown;
  }
  EXPECT_EQ(answer("X-A: a\tb"), 200);
  EXPECT_EQ(answer("X-A: caf\xc3\xa9"), 200);
  Raw c(port);
  c.send("GET /health\0x HTTP/1.1\r\nConnection: close\r\n\r\n"s);
  EXPECT_EQ(status_of(c.read_all()), 400);
}

TEST(Hostile, MemoryStaysBoundedAfterAFlood) {
  Running srv(tiny_options());
  const int port = srv.server->port();
  get(srv, "/health");
  const double before = rss_mib();
  ASSERT_GT(before, 0);
  // Each of these cost hundreds of MiB to a gigabyte before the limits.
  for (int i = 0; i < 4; ++i) {
    Reply r = post(srv, "/v1/completions", std::string(15 << 20, '['));
    EXPECT_EQ(r.status, 400);
  }
  for (int i = 0; i < 4; ++i) {
    Raw c(port);
    c.send("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = "100000\r\n" + std::string(1 << 20, '[') + "\r\n";
    for (int k = 0; k < 24; ++k) {
      if (!c.send(chunk)) break;
    }
    EXPECT_EQ(status_of(c.read_all()), 413);
  }
  for (int i = 0; i < 4; ++i) {
    Raw c(port);
    std::string req = "GET /health HTTP/1.1\r\n";
    for (int k = 0; k < 100000; ++k) req += "X: y\r\n";
    c.send(req);
    EXPECT_EQ(status_of(c.read_all()), 431);
  }
  const double after = rss_mib();
  // Freed buffers may stay mapped (malloc arenas, ASan's quarantine): the bound is loose,
  // a single unbounded request cost more than this.
  EXPECT_LT(after - before, 512) << "RSS " << before << " -> " << after << " MiB";
  EXPECT_EQ(get(srv, "/health").status, 200);
}

TEST(Hostile, PipelinedRequestsAreAllAnswered) {
  Running srv(tiny_options());
  Raw c(srv.server->port());
  const std::string body = R"({"prompt":"hi","max_tokens":2,"temperature":0})";
  c.send(kHealth + kHealth +
         "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body + kHealth + "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string got = c.read_all();
  EXPECT_EQ(count(got, "HTTP/1.1 200 OK"), 5) << got;
  EXPECT_EQ(count(got, "text_completion"), 1) << got;
}

TEST(Hostile, Http10GetsNoChunkedEncoding) {
  Running srv(tiny_options());
  const std::string body = R"({"prompt":"hi","max_tokens":3,"stream":true})";
  {
    Raw c(srv.server->port());
    c.send("POST /v1/completions HTTP/1.0\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body);
    const std::string got = c.read_all();
    EXPECT_EQ(status_of(got), 200) << got;
    EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
    EXPECT_NE(got.find("\r\n\r\ndata: {"), std::string::npos) << got;  // raw events
    EXPECT_NE(got.find("data: [DONE]\n\n"), std::string::npos) << got;
  }
  {
    const std::string plain = R"({"prompt":"hi","max_tokens":3})";
    Raw c(srv.server->port());
    c.send("POST /v1/completions HTTP/1.0\r\nContent-Length: " + std::to_string(plain.size()) +
           "\r\n\r\n" + plain);
    const std::string got = c.read_all();
    EXPECT_EQ(status_of(got), 200) << got;
    EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
    EXPECT_NE(got.find("Content-Length: "), std::string::npos) << got;
  }
}

TEST(Hostile, FormEncodedJsonOver8KiBIsAccepted) {
  Running srv(tiny_options());
  const std::string body =
      R"({"prompt":"hi","max_tokens":2,"user":")" + std::string(20000, 'u') + R"("})";
  auto c = srv.client();
  auto res = c.Post("/v1/completions", body, "application/x-www-form-urlencoded");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST(Hostile, StopIsBoundedWithASlowClientConnected) {
  ServerOptions o = tiny_options();
  o.header_timeout_s = 120;  // the client is not cut by its deadline: stop() must cut it
  o.shutdown_timeout_s = 1;
  auto srv = std::make_unique<Server>(o);
  srv->start();
  Raw slow(srv->port());
  slow.send("POST /v1/completions HTTP/1.1\r\n");
  std::atomic<bool> quit{false};
  std::thread trickle([&] {
    for (int i = 0; i < 300 && !quit; ++i) {
      if (!slow.send("X-Slow: 1\r\n")) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto stopped = std::async(std::launch::async, [&] { srv->stop(); });
  const bool in_time =
      stopped.wait_for(std::chrono::seconds(
          int(o.shutdown_timeout_s + Server::kShutdownSlack_s + 10))) == std::future_status::ready;
  quit = true;
  trickle.join();
  EXPECT_TRUE(in_time) << "stop() did not return with a slow client connected";
  stopped.wait();
}

TEST(Hostile, EngineStepFailureFailsItsRequestsOnly) {
  auto fail = std::make_shared<std::atomic<bool>>(false);
  ServerOptions o = tiny_options();
  o.configure_context = [fail](Context& ctx) {
    ctx.set_router_override([fail](int layer, std::span<const BatchToken>, float*) {
      if (*fail) {
        throw Error("non-finite router logits in layer " + std::to_string(layer));
      }
    });
  };
  Running srv(o);
  *fail = true;
  Reply r = post(srv, "/v1/completions", R"({"prompt":"hi","max_tokens":4})");
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_NE(r.body.find("non-finite router logits in layer 0"), std::string::npos) << r.body;
  Stream s = post_stream(srv, "/v1/completions", R"({"prompt":"hi","max_tokens":4,"stream":true})");
  EXPECT_EQ(s.status, 200);
  ASSERT_FALSE(s.data.empty());
  EXPECT_EQ(s.data.back(), "[DONE]");
  EXPECT_NE(s.raw.find("non-finite router logits"), std::string::npos) << s.raw;
  *fail = false;
  r = post(srv, "/v1/completions", R"({"prompt":"hi","max_tokens":4})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(get(srv, "/health").status, 200);
}

TEST(Hostile, DefaultContextIsTheModels) {
  ServerOptions o = tiny_options();
  o.model_path = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";
  o.model_name = "m";
  o.n_ctx = 0;
  Running srv(o);
  Reply r = get(srv, "/v1/models/m");
  ASSERT_EQ(r.status, 200) << r.body;
  const int n_ctx = r.j()["meta"]["n_ctx"];
  EXPECT_EQ(n_ctx, r.j()["meta"]["n_ctx_train"].get<int>());
  EXPECT_LE(n_ctx, 4096);
  // Without max_tokens a chat stops at the context limit.
  r = post(srv, "/v1/chat/completions",
           R"({"messages":[{"role":"user","content":"hi"}],"ignore_eos":true,"temperature":0})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json u = r.j()["usage"];
  EXPECT_EQ(u["total_tokens"].get<int>(), n_ctx) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "length");
}

TEST(Hostile, ApiKeyFile) {
  const auto dir = std::filesystem::temp_directory_path();
  const auto path = dir / ("lynx-key-" + std::to_string(::getpid()));
  { std::ofstream(path) << "s3cret \n"; }
  EXPECT_EQ(read_api_key_file(path.string()), "s3cret");
  { std::ofstream(path) << "\n"; }
  EXPECT_THROW(read_api_key_file(path.string()), Error);
  std::filesystem::remove(path);
  EXPECT_THROW(read_api_key_file(path.string()), Error);
  EXPECT_THROW(read_api_key_file(dir.string()), Error);
}

TEST(Hostile, LogLinesEscapeControlBytes) {
  auto lines = std::make_shared<std::vector<std::string>>();
  auto mu = std::make_shared<std::mutex>();
  ServerOptions o = tiny_options();
  o.model_name = "evil\x1b[2J\x07name";  // as a GGUF general.name could be
  o.log = [lines, mu](const std::string& s) {
    std::lock_guard lk(*mu);
    lines->push_back(s);
  };
  { Running srv(o); }
  std::lock_guard lk(*mu);
  ASSERT_FALSE(lines->empty());
  bool seen = false;
  for (const auto& l : *lines) {
    EXPECT_EQ(l.find('\x1b'), std::string::npos) << l;
    EXPECT_EQ(l.find('\x07'), std::string::npos) << l;
    seen = seen || l.find("evil\\x1b[2J\\x07name") != std::string::npos;
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace lynx::test
