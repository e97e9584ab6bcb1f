// Qwen3-Coder: XML-like calls, parameter values as raw text (its template writes
// "<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>",
// values that are not strings as JSON). One function per <tool_call> block.
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {
namespace {

// Removes one newline on each side: the template writes them around every value.
std::string_view strip_newlines(std::string_view s) {
  if (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

}  // namespace

bool parse_function_call(std::string_view body, const ParseOptions& o, bool newline_values,
                         std::vector<RawCall>& out, std::string& why) {
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>",
                             kPar = "<parameter=", kParEnd = "</parameter>";
  std::string_view s = trim(body);
  if (s.substr(0, kFn.size()) != kFn) {
    why = "no <function=NAME> in the call";
    return false;
  }
  s.remove_prefix(kFn.size());
  const size_t gt = s.find('>');
  if (gt == std::string_view::npos) {
    why = "<function= is not closed by '>'";
    return false;
  }
  RawCall c;
  c.name = std::string(trim(s.substr(0, gt)));
  if (!valid_name(c.name)) {
    why = "the function name is not valid";
    return false;
  }
  s.remove_prefix(gt + 1);
  const size_t end = s.rfind(kFnEnd);
  if (end == std::string_view::npos || !trim(s.substr(end + kFnEnd.size())).empty()) {
    why = "the function is not closed by </function>";
    return false;
  }
  s = s.substr(0, end);
  for (;;) {
    s = trim(s);
    if (s.empty()) break;
    if (s.substr(0, kPar.size()) != kPar) {
      why = "text other than <parameter=..> inside <function>";
      return false;
    }
    s.remove_prefix(kPar.size());
    const size_t pgt = s.find('>');
    if (pgt == std::string_view::npos) {
      why = "<parameter= is not closed by '>'";
      return false;
    }
    const std::string key(trim(s.substr(0, pgt)));
    s.remove_prefix(pgt + 1);
    const size_t pend = s.find(kParEnd);
    if (key.empty() || pend == std::string_view::npos) {
      why = "a parameter without a name or without </parameter>";
      return false;
    }
    const std::string_view raw = s.substr(0, pend);
    c.args[key] = typed_value(newline_values ? strip_newlines(raw) : raw, o, c.name, key);
    s.remove_prefix(pend + kParEnd.size());
  }
  out.push_back(std::move(c));
  return true;
}

bool parse_qwen3_coder(std::string_view body, const ParseOptions& o, std::vector<RawCall>& out,
                       std::string& why) {
  return parse_function_call(body, o, true, out, why);
}

}  // namespace lynx::chatparse::detail
