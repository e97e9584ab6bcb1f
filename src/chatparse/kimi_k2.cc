// Kimi-K2: calls between <|tool_calls_section_begin|> and <|tool_calls_section_end|>, each
// "<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{args}<|tool_call_end|>"
// (the id is the model's: its template writes it back as functions.NAME:INDEX).
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {

bool parse_kimi_k2(std::string_view body, const ParseOptions&, std::vector<RawCall>& out,
                   std::string& why) {
  constexpr std::string_view kBegin = "<|tool_call_begin|>", kArgs = "<|tool_call_argument_begin|>",
                             kEnd = "<|tool_call_end|>", kPrefix = "functions.";
  std::string_view s = body;
  size_t n = 0;
  for (;;) {
    s = trim(s);
    if (s.empty()) break;
    if (s.substr(0, kBegin.size()) != kBegin) {
      why = "text other than <|tool_call_begin|> between the calls";
      return false;
    }
    s.remove_prefix(kBegin.size());
    const size_t args = s.find(kArgs);
    const size_t end = args == std::string_view::npos
                           ? std::string_view::npos
                           : find_outside_strings(s, kEnd, args + kArgs.size());
    if (end == std::string_view::npos || args == std::string_view::npos) {
      why = "a call without <|tool_call_argument_begin|> or <|tool_call_end|>";
      return false;
    }
    RawCall c;
    const std::string_view id = trim(s.substr(0, args));
    std::string_view name = id;
    if (name.substr(0, kPrefix.size()) == kPrefix) name.remove_prefix(kPrefix.size());
    if (const size_t colon = name.rfind(':'); colon != std::string_view::npos) {
      name = name.substr(0, colon);
    }
    c.name = std::string(name);
    c.id = std::string(id);
    if (!valid_name(c.name)) {
      why = "the function name is not valid";
      return false;
    }
    ojson v;
    const std::string_view a = s.substr(args + kArgs.size(), end - args - kArgs.size());
    if (!parse_json(a, v, why) || !arguments_object(v, c.args, why)) return false;
    s.remove_prefix(end + kEnd.size());
    out.push_back(std::move(c));
    ++n;
  }
  if (n == 0) {
    why = "no call in the section";
    return false;
  }
  return true;
}

}  // namespace lynx::chatparse::detail
