// GLM-4.5 / 4.6:
// "<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n...</tool_call>", values as raw
// text (the template writes strings as they are, other values as JSON).
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {

bool parse_glm45(std::string_view body, const ParseOptions& o, std::vector<RawCall>& out,
                 std::string& why) {
  constexpr std::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>", kVal = "<arg_value>",
                             kValEnd = "</arg_value>";
  std::string_view s = body;
  const size_t first = s.find(kKey);
  RawCall c;
  c.name = std::string(trim(s.substr(0, first)));
  if (!valid_name(c.name)) {
    why = "the function name is not valid";
    return false;
  }
  s = first == std::string_view::npos ? std::string_view() : s.substr(first);
  for (;;) {
    s = trim(s);
    if (s.empty()) break;
    if (s.substr(0, kKey.size()) != kKey) {
      why = "text other than <arg_key>/<arg_value> pairs in the call";
      return false;
    }
    s.remove_prefix(kKey.size());
    const size_t kend = s.find(kKeyEnd);
    if (kend == std::string_view::npos) {
      why = "<arg_key> without </arg_key>";
      return false;
    }
    const std::string key(trim(s.substr(0, kend)));
    s = trim(s.substr(kend + kKeyEnd.size()));
    if (key.empty() || s.substr(0, kVal.size()) != kVal) {
      why = "an <arg_key> without a name or not followed by <arg_value>";
      return false;
    }
    s.remove_prefix(kVal.size());
    const size_t vend = s.find(kValEnd);
    if (vend == std::string_view::npos) {
      why = "<arg_value> without </arg_value>";
      return false;
    }
    c.args[key] = typed_value(s.substr(0, vend), o, c.name, key);
    s.remove_prefix(vend + kValEnd.size());
  }
  out.push_back(std::move(c));
  return true;
}

}  // namespace lynx::chatparse::detail
