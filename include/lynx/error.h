// Errors: every failure the user can cause (bad files, bad flags, bad requests) is reported
// as a lynx::Error with a message that names the problem. Nothing in the library aborts on
// bad input.
#pragma once
#include <stdexcept>
#include <string>

namespace lynx {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace lynx
