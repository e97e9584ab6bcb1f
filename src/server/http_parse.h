// Reading one HTTP/1.1 request from bytes as they arrive, without a socket (the server's
// reader thread, the tests and fuzz/fuzz_http.cc share it).
//
// The syntax (RFC 9112: request line, field lines, Content-Length, the chunked coding) is
// Boost.Beast's `http::request_parser`; this class adds what the server refuses beyond it:
// header lines over `max_headers`, obsolete line folding, bare-LF line ends, more than one
// Transfer-Encoding line, a Transfer-Encoding whose final coding is not chunked (or that is
// paired with Content-Length, or sent by an HTTP/1.0 client), and a "close" connection option
// in any Connection line. Beast stays out of this header.
#pragma once
#include <memory>
#include <string>

#include "server/http.h"

namespace lynx::server {

class HttpRequestParser {
 public:
  enum class Status { kNeedMore, kDone, kError };

  explicit HttpRequestParser(const HttpLimits& limits);
  ~HttpRequestParser();
  HttpRequestParser(HttpRequestParser&&) noexcept;
  HttpRequestParser& operator=(HttpRequestParser&&) noexcept;

  // Parses what `buf` holds of the current request and erases the bytes it used. On kDone the
  // bytes after the request (pipelined requests) stay in `buf`; kDone and kError are final
  // until reset().
  Status parse(std::string& buf);
  // The request line and headers are complete and acceptable (after kNeedMore or kDone).
  bool head_done() const;
  // An HTTP/1.1 client asked to be told to send its body (Expect: 100-continue).
  bool expects_continue() const;
  // After kDone: the request (body de-chunked; trailer fields are read and dropped), and
  // whether the connection may carry another request after its answer (RFC 9112 9.3).
  HttpRequest take_request();
  bool keep_alive() const;
  // After kError: the status to answer (400, 413, 431, 501, 505) and why.
  int error_status() const;
  const std::string& error_message() const;
  // Starts over for the next request on the same connection.
  void reset();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lynx::server
