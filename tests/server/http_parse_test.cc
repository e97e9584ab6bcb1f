// HttpRequestParser without sockets: what it reads, what it refuses with which status, and
// that a request delivered one byte at a time reads exactly as one delivered at once.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/http_parse.h"

namespace lynx::server {
namespace {

using Status = HttpRequestParser::Status;
using namespace std::string_literals;

HttpLimits small_limits() {
  HttpLimits l;
  l.max_body = 64;
  l.max_header_bytes = 512;
  l.max_headers = 4;
  return l;
}

struct Outcome {
  std::vector<HttpRequest> requests;
  std::vector<bool> keep;
  int error = 0;     // the status of the error that ended the stream, 0 if none
  std::string rest;  // bytes left unconsumed
};

// Parses `in` delivered `step` bytes at a time (0 = at once), pipelined requests included.
Outcome parse_all(const std::string& in, size_t step, const HttpLimits& lim = small_limits()) {
  HttpRequestParser p(lim);
  Outcome out;
  std::string buf;
  size_t at = 0;
  for (;;) {
    const Status st = p.parse(buf);
    if (st == Status::kDone) {
      out.requests.push_back(p.take_request());
      out.keep.push_back(p.keep_alive());
      p.reset();
      continue;
    }
    if (st == Status::kError) {
      out.error = p.error_status();
      break;
    }
    if (at == in.size()) break;
    const size_t n = step == 0 ? in.size() : std::min(step, in.size() - at);
    buf.append(in, at, n);
    at += n;
  }
  out.rest = buf;
  return out;
}

int status_of(const std::string& in) {
  return parse_all(in, 0).error;
}

TEST(HttpParse, ReadsPipelinedRequestsTheSameInAnySlices) {
  const std::string in =
      "\r\nGET /a?x=1 HTTP/1.1\r\nHost: h\r\nX-Two:  v  w \r\n\r\n"
      "POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
      "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n"
      "0\r\nX-Trailer: t\r\n\r\n"
      "GET /d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
      "GET /e HTTP/1.1\r\nConn";
  for (size_t step : {0, 1, 2, 3, 7, 64}) {
    SCOPED_TRACE(step);
    const Outcome o = parse_all(in, step);
    ASSERT_EQ(o.requests.size(), 4u);
    EXPECT_EQ(o.error, 0);
    EXPECT_EQ(o.requests[0].method, "GET");
    EXPECT_EQ(o.requests[0].target, "/a?x=1");
    EXPECT_EQ(o.requests[0].path, "/a");
    EXPECT_EQ(o.requests[0].header("x-two"), "v  w");
    EXPECT_EQ(o.requests[1].body, "hello");
    EXPECT_EQ(o.requests[2].body, "abcde");
    EXPECT_EQ(o.requests[2].header("X-Trailer"), "");  // trailer fields are dropped
    EXPECT_TRUE(o.requests[3].http10);
    EXPECT_EQ(o.requests[3].version, "HTTP/1.0");
    EXPECT_EQ(o.keep, (std::vector<bool>{true, true, true, true}));
  }
}

TEST(HttpParse, KeepAlive) {
  auto keep = [](const std::string& head) {
    const Outcome o = parse_all(head + "\r\n", 1);
    EXPECT_EQ(o.requests.size(), 1u) << head;
    return !o.keep.empty() && o.keep[0];
  };
  EXPECT_TRUE(keep("GET / HTTP/1.1\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.0\r\n"));
  EXPECT_TRUE(keep("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.1\r\nConnection: keep-alive\r\nconnection: CLOSE\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.0\r\nConnection: close\r\nConnection: keep-alive\r\n"));
  EXPECT_TRUE(keep("GET / HTTP/1.1\r\nConnection: keep-alive, x-closer\r\n"));
}

TEST(HttpParse, Refusals) {
  // Framing.
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: \r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n"),
            400);
  EXPECT_EQ(status_of("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), 400);
  // Control bytes.
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n"s), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX\0: b\r\n\r\n"s), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n"s), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"s), 400);
  EXPECT_EQ(status_of("GET /\0 HTTP/1.1\r\n\r\n"s), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX: a\tb\r\n\r\n"s), 0);
  // Line ends and folding.
  EXPECT_EQ(status_of("GET / HTTP/1.1\nHost: x\n\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: x\n"), 400);  // refused before the head ends
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"), 400);
  // Request line.
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / HTTP/1.2\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / FTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET  / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("BAD\r\n\r\n"), 400);
  // Limits (small_limits: 4 header lines, 512 bytes of head, 64 bytes of body).
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\n\r\n"), 0);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n"), 431);
  EXPECT_EQ(
      parse_all("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\n", 1).error,
      431);  // before the head ends
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX: " + std::string(600, 'a') + "\r\n\r\n"), 431);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX: " + std::string(600, 'a')), 431);
  // Trailer fields and chunk lines are held to the header limit (Beast has none for them).
  for (size_t step : {0, 1, 100}) {
    EXPECT_EQ(parse_all("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: " +
                            std::string(600, 'a'),
                        step)
                  .error,
              431);
    EXPECT_EQ(parse_all("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;x=" +
                            std::string(600, 'a'),
                        step)
                  .error,
              431);
  }
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n"), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 64\r\n\r\n" + std::string(64, 'x')), 0);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n" +
                      std::string(32, 'x') + "\r\n21\r\n"),
            413);
}

TEST(HttpParse, ExpectContinue) {
  HttpRequestParser p(small_limits());
  std::string buf = "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  EXPECT_EQ(p.parse(buf), Status::kNeedMore);
  EXPECT_TRUE(p.head_done());
  EXPECT_TRUE(p.expects_continue());
  buf += "ok";
  EXPECT_EQ(p.parse(buf), Status::kDone);
  EXPECT_EQ(p.take_request().body, "ok");
}

}  // namespace
}  // namespace lynx::server
