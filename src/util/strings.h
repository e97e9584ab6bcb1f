// Small string helpers shared by the layers (internal; header-only, no library of its own).
#pragma once
#include <string>
#include <string_view>

namespace lynx::util {

// The ASCII whitespace Python's str.strip() removes (Jinja's `trim` is str.strip()).
inline constexpr std::string_view kPythonSpace = " \t\n\r\v\f\x1c\x1d\x1e\x1f";

// `s` without the leading and trailing characters found in `chars`.
inline std::string trim(std::string_view s, std::string_view chars = kPythonSpace) {
  const size_t b = s.find_first_not_of(chars);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(chars) - b + 1));
}

inline bool contains(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

}  // namespace lynx::util
