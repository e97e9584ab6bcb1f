// Errors: every failure the user can cause (bad files, bad flags, bad requests) is reported
// as a lynx::Error with a message that names the problem. Nothing in the library aborts on
// bad input.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace lynx {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A step produced NaN or infinite values (router logits, hidden states, output logits): a
// broken model file or an overflow. Names where, and the sequences whose rows were not
// finite, so that a scheduler can fail those requests and keep serving the others.
class NonFiniteError : public Error {
 public:
  NonFiniteError(const std::string& what, std::vector<int32_t> seqs)
      : Error(what), seqs_(std::move(seqs)) {}
  const std::vector<int32_t>& sequences() const { return seqs_; }

 private:
  std::vector<int32_t> seqs_;
};

}  // namespace lynx
