// libFuzzer target for the server's HTTP request parsing (src/server/http_parse.h): raw bytes
// as a client would send them, requests pipelined one after another. Each input is parsed
// twice, all at once and in slices as a slow client's reads would deliver it; both must read
// the same requests. (Where the input ends inside a malformed head, one reading may have
// refused it and the other still wait: Beast parses what it has on its first call but later
// ones wait for the whole head. The server then answers when the head is complete, or 431/408
// at its size or time limit.) Every request read must be within the limits and free of
// control bytes in its head; every error must be one of the answers the server gives (400,
// 413, 431, 501, 505). A crash, a hang or a difference is a bug.
//
// Input: the first byte sets the slice size (1..256 bytes), the rest is the byte stream.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "server/http_parse.h"

namespace {

using lynx::server::HttpLimits;
using lynx::server::HttpRequest;
using lynx::server::HttpRequestParser;

HttpLimits limits() {
  HttpLimits l;
  l.max_body = 4096;
  l.max_header_bytes = 2048;
  l.max_headers = 16;
  return l;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_http: %s\n", what);
  __builtin_trap();
}

bool clean(const std::string& s) {
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if ((u < 0x20 && ch != '\t') || u == 0x7f) return false;
  }
  return true;
}

// One request as a string that two parses can compare; checks its invariants.
std::string describe(const HttpRequest& r, bool keep, const HttpLimits& lim) {
  if (r.method.empty() || r.target.empty() || !clean(r.method) || !clean(r.target))
    fail("empty or unclean request line");
  if (r.version != (r.http10 ? "HTTP/1.0" : "HTTP/1.1")) fail("version");
  if (r.target.compare(0, r.path.size(), r.path) != 0) fail("path is not a prefix of target");
  if (r.body.size() > lim.max_body) fail("body over max_body");
  if (int(r.headers.size()) > lim.max_headers) fail("more header lines than max_headers");
  std::string d = r.method + ' ' + r.target + ' ' + r.version + (keep ? " keep\n" : " close\n");
  for (const auto& [k, v] : r.headers) {
    if (k.empty() || !clean(k) || !clean(v)) fail("empty or unclean header line");
    d += k + ": " + v + '\n';
  }
  return d + std::to_string(r.body.size()) + '\n' + r.body;
}

// The requests read from `in` delivered `step` bytes at a time (the error ends the list).
std::vector<std::string> run(const uint8_t* in, size_t size, size_t step) {
  const HttpLimits lim = limits();
  HttpRequestParser parser(lim);
  std::vector<std::string> out;
  std::string buf;
  size_t at = 0;
  for (;;) {
    const HttpRequestParser::Status st = parser.parse(buf);
    if (st == HttpRequestParser::Status::kDone) {
      out.push_back(describe(parser.take_request(), parser.keep_alive(), lim));
      parser.reset();
      continue;  // the next (pipelined) request may be buffered already
    }
    if (st == HttpRequestParser::Status::kError) {
      const int s = parser.error_status();
      if (s != 400 && s != 413 && s != 431 && s != 501 && s != 505) fail("unexpected status");
      if (parser.error_message().empty()) fail("error without a message");
      return out;
    }
    if (buf.size() > lim.max_header_bytes + lim.max_body + 2 * step + 65536)
      fail("bytes pile up unconsumed");
    if (at == size) break;
    const size_t n = std::min(step, size - at);
    buf.append(reinterpret_cast<const char*>(in) + at, n);
    at += n;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = size_t(data[0]) + 1;
  const auto whole = run(data + 1, size - 1, size);
  const auto sliced = run(data + 1, size - 1, step);
  if (whole != sliced) fail("slices read differently from the whole input");
  return 0;
}
