// Request parsing on Boost.Beast (see http_parse.h). What Beast 1.74 accepts and the server
// must not, read from its source (boost/beast/http/impl/basic_parser.ipp, do_field):
//  - a Transfer-Encoding line without "chunked" as its last coding ("gzip", "chunked, gzip",
//    "gzip chunked", an empty value) is taken as "no body": the body's bytes would be read as
//    the next request, which is request smuggling behind a proxy that frames it otherwise;
//  - a second Transfer-Encoding line is refused only when the first one was chunked;
//  - an HTTP/1.0 request may be chunked, and its "Connection: keep-alive, close" keeps the
//    connection open (only HTTP/1.1 looks at "close");
//  - obsolete line folding is joined into the value (RFC 9112 5.2 lets a server refuse it);
//  - a head with bare-LF line ends is not an error but waits for a CRLF CRLF that never comes;
//  - trailer fields are appended to the header fields and parsed like them.
// Everything else (token and field-value syntax: no control bytes but HTAB, so no NUL;
// Content-Length lists and conflicts; chunk sizes and extensions; the header and body size
// limits) is Beast's.
#include "server/http_parse.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <string_view>

namespace lynx::server {
namespace http = boost::beast::http;
using boost::beast::iequals;
using boost::beast::string_view;  // boost::string_view in 1.74

namespace {
std::string str(string_view s) {
  return std::string(s.data(), s.size());
}
}  // namespace

struct HttpRequestParser::Impl {
  HttpLimits lim;
  std::optional<http::request_parser<http::string_body>> p;
  Status status = Status::kNeedMore;
  bool head_ok = false;  // the head passed check_head()
  bool keep = true;
  bool expect_continue = false;
  // The head's bytes are scanned once each, as they arrive: `scanned` is the offset in the
  // caller's buffer where the scan resumes, `prev` the byte before it.
  size_t scanned = 0;
  char prev = 0;
  int lines = 0;  // line ends seen in the head
  HttpRequest req;
  int err_status = 0;
  std::string err_msg;

  explicit Impl(const HttpLimits& l) : lim(l) { start(); }

  void start() {
    p.emplace();
    p->header_limit(uint32_t(std::min<size_t>(lim.max_header_bytes, UINT32_MAX)));
    p->body_limit(uint64_t(lim.max_body));
    p->eager(false);  // stop after the head, so that check_head() runs before the body
    status = Status::kNeedMore;
    head_ok = false;
    keep = true;
    expect_continue = false;
    scanned = 0;
    prev = 0;
    lines = 0;
    req = HttpRequest{};
    err_status = 0;
    err_msg.clear();
  }

  bool fail(int st, std::string msg) {
    status = Status::kError;
    err_status = st;
    err_msg = std::move(msg);
    return false;
  }

  std::string header_limits() const {
    return "request headers over " + std::to_string(lim.max_header_bytes) + " bytes or " +
           std::to_string(lim.max_headers) + " lines";
  }

  // Head bytes buf[from, to): bare LF (RFC 9112 2.2 lets a server refuse it, and a proxy that
  // splits lines otherwise would see other fields), obsolete folding (5.2), too many lines.
  bool scan_head(std::string_view buf, size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const char ch = buf[i];
      if (ch == '\n') {
        if (prev != '\r') return fail(400, "a line in the request head ends in LF without CR");
        ++lines;
      } else if ((ch == ' ' || ch == '\t') && prev == '\n') {
        return fail(400, "obsolete line folding in the request headers");
      }
      prev = ch;
    }
    scanned = to;
    // Request line, fields, blank line.
    if (lines > lim.max_headers + 2) return fail(431, header_limits());
    return true;
  }

  // The request line and fields are in p->get(); the body is not read yet.
  bool check_head() {
    const auto& h = p->get();
    req.method = str(h.method_string());
    req.target = str(h.target());
    req.http10 = h.version() == 10;
    req.version = req.http10 ? "HTTP/1.0" : "HTTP/1.1";
    req.path = req.target.substr(0, req.target.find('?'));
    if (std::distance(h.begin(), h.end()) > std::ptrdiff_t(lim.max_headers)) {
      return fail(431, "more than " + std::to_string(lim.max_headers) + " header lines");
    }
    // Framing (RFC 9112 6.1-6.3): a body is chunked or has one Content-Length; whatever else
    // a Transfer-Encoding says, two parsers (ours and a proxy's) could split the stream into
    // different requests. Beast refuses Content-Length after chunked and Transfer-Encoding
    // after Content-Length; the rest is here.
    const size_t n_te = h.count(http::field::transfer_encoding);
    if (n_te > 1) return fail(400, "more than one Transfer-Encoding header line");
    if (n_te == 1) {
      if (h.count(http::field::content_length) > 0) {
        return fail(400, "both Transfer-Encoding and Content-Length");
      }
      if (req.http10) return fail(400, "a transfer coding in an HTTP/1.0 request");
      const http::opt_token_list codings{h[http::field::transfer_encoding]};
      if (!http::validate_list(codings)) return fail(400, "malformed Transfer-Encoding");
      int n = 0, n_chunked = 0;
      string_view last;
      for (const auto& c : codings) {
        ++n;
        n_chunked += iequals(c, "chunked");
        last = c;
      }
      if (n == 0 || !iequals(last, "chunked") || n_chunked > 1) {
        return fail(400, "the final transfer coding is not chunked, or chunked is repeated");
      }
      if (n > 1) return fail(501, "only the chunked transfer coding is supported");
    }
    // RFC 9112 9.3: "close" in any Connection line, among any other options, ends the
    // connection after this answer, whatever the version.
    bool close = false;
    for (auto [it, end] = h.equal_range(http::field::connection); it != end; ++it) {
      for (const auto& opt : http::opt_token_list{it->value()})
        close = close || iequals(opt, "close");
    }
    keep = p->keep_alive() && !close;
    expect_continue = !req.http10 && iequals(h[http::field::expect], "100-continue");
    for (const auto& f : h) req.headers.emplace_back(str(f.name_string()), str(f.value()));
    head_ok = true;
    return true;
  }

  // A Beast error; `line` starts at the request line when the error is in it.
  bool fail_beast(const boost::beast::error_code& ec, std::string_view line) {
    using E = http::error;
    if (ec == E::header_limit) return fail(431, header_limits());
    if (ec == E::body_limit) {
      return fail(413,
                  "the request body is larger than " + std::to_string(lim.max_body) + " bytes");
    }
    if (ec == E::bad_version) {
      // "HTTP/d.d" is a version we do not serve; anything else is not a request line.
      line = line.substr(0, line.find_first_of("\r\n"));
      const size_t sp = line.rfind(' ');
      const std::string_view v = sp == std::string_view::npos ? line : line.substr(sp + 1);
      const auto digit = [](char ch) { return ch >= '0' && ch <= '9'; };
      if (v == "HTTP/1.0" || v == "HTTP/1.1") {
        return fail(400, "the request line does not end in CRLF");
      }
      if (v.size() == 8 && v.substr(0, 5) == "HTTP/" && digit(v[5]) && v[6] == '.' && digit(v[7]))
        return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
      return fail(400, "malformed request line");
    }
    if (ec == E::bad_method || ec == E::bad_target) return fail(400, "malformed request line");
    if (ec == E::bad_content_length) return fail(400, "invalid or conflicting Content-Length");
    if (ec == E::bad_transfer_encoding) {
      return fail(400, "Transfer-Encoding repeated or with Content-Length");
    }
    if (ec == E::bad_chunk || ec == E::bad_chunk_extension) return fail(400, "malformed chunk");
    if (ec == E::bad_field || ec == E::bad_value || ec == E::bad_line_ending ||
        ec == E::bad_obs_fold) {
      return fail(400, "malformed header line (control bytes other than HTAB are refused)");
    }
    return fail(400, "malformed request: " + ec.message());
  }

  Status parse(std::string& buf) {
    if (status != Status::kNeedMore) return status;
    if (!p->got_some()) {
      // RFC 9112 2.2: empty lines before the request line are ignored (some clients send a
      // CRLF after a body).
      const size_t first = buf.find_first_not_of("\r\n");
      buf.erase(0, first == std::string::npos ? buf.size() : first);
      if (buf.empty()) return status;
    }
    size_t used = 0;
    for (;;) {
      boost::beast::error_code ec;
      const bool had_head = p->is_header_done();
      const size_t n = p->put(boost::asio::const_buffer(buf.data() + used, buf.size() - used), ec);
      if (ec == http::error::need_more) {
        used += n;
        if (!had_head) {
          // An unfinished head: everything buffered belongs to it.
          scan_head(buf, std::max(scanned, used - n), buf.size());
        } else if (buf.size() - used > lim.max_header_bytes) {
          // Beast waits for the end of a chunk line or of the trailer fields with no limit
          // of its own; they are held to the header limit.
          fail(431, "a chunk line or the trailer fields over " +
                        std::to_string(lim.max_header_bytes) + " bytes");
        }
        break;
      }
      if (ec) {
        fail_beast(ec, std::string_view(buf).substr(used));
        break;
      }
      if (!had_head && p->is_header_done()) {  // this call read the rest of the head
        if (!scan_head(buf, std::max(scanned, used), used + n) || !check_head()) break;
        p->eager(true);
      }
      used += n;
      if (p->is_done()) {
        req.body = std::move(p->get().body());
        status = Status::kDone;
        break;
      }
      if (used == buf.size() || n == 0) break;  // all read, the rest is still to come
    }
    buf.erase(0, used);
    scanned = scanned > used ? scanned - used : 0;
    return status;
  }
};

HttpRequestParser::HttpRequestParser(const HttpLimits& limits)
    : impl_(std::make_unique<Impl>(limits)) {}
HttpRequestParser::~HttpRequestParser() = default;
HttpRequestParser::HttpRequestParser(HttpRequestParser&&) noexcept = default;
HttpRequestParser& HttpRequestParser::operator=(HttpRequestParser&&) noexcept = default;

HttpRequestParser::Status HttpRequestParser::parse(std::string& buf) {
  return impl_->parse(buf);
}
bool HttpRequestParser::head_done() const {
  return impl_->head_ok;
}
bool HttpRequestParser::expects_continue() const {
  return impl_->expect_continue;
}
HttpRequest HttpRequestParser::take_request() {
  return std::move(impl_->req);
}
bool HttpRequestParser::keep_alive() const {
  return impl_->keep;
}
int HttpRequestParser::error_status() const {
  return impl_->err_status;
}
const std::string& HttpRequestParser::error_message() const {
  return impl_->err_msg;
}
void HttpRequestParser::reset() {
  impl_->start();
}

}  // namespace lynx::server
