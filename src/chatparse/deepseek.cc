// DeepSeek-V3 / R1 / V3.1 / V3.2: calls between <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>,
// each in <｜tool▁call▁begin｜>..<｜tool▁call▁end｜>. V3.1's template writes a past call as
// "NAME<｜tool▁sep｜>{args}"; V3 and R1 as "function<｜tool▁sep｜>NAME\n```json\n{args}\n```". Both
// are read.
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {

bool parse_deepseek(std::string_view body, const ParseOptions&, std::vector<RawCall>& out,
                    std::string& why) {
  constexpr std::string_view kBegin = "<｜tool▁call▁begin｜>", kEnd = "<｜tool▁call▁end｜>",
                             kSep = "<｜tool▁sep｜>";
  std::string_view s = body;
  size_t n = 0;
  for (;;) {
    s = trim(s);
    if (s.empty()) break;
    if (s.substr(0, kBegin.size()) != kBegin) {
      why = "text other than <｜tool▁call▁begin｜> between the calls";
      return false;
    }
    s.remove_prefix(kBegin.size());
    const size_t end = find_outside_strings(s, kEnd);
    if (end == std::string_view::npos) {
      why = "a call without <｜tool▁call▁end｜>";
      return false;
    }
    std::string_view call = s.substr(0, end);
    s.remove_prefix(end + kEnd.size());
    const size_t sep = call.find(kSep);
    if (sep == std::string_view::npos) {
      why = "a call without <｜tool▁sep｜>";
      return false;
    }
    RawCall c;
    std::string_view head = trim(call.substr(0, sep)), rest = call.substr(sep + kSep.size());
    if (head == "function") {
      // V3 / R1: NAME, then the arguments in a ```json fence.
      const size_t nl = rest.find('\n');
      head = trim(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      rest = trim(rest);
      constexpr std::string_view kFence = "```json", kClose = "```";
      if (rest.substr(0, kFence.size()) == kFence) rest.remove_prefix(kFence.size());
      rest = trim(rest);
      if (rest.size() >= kClose.size() && rest.substr(rest.size() - kClose.size()) == kClose) {
        rest.remove_suffix(kClose.size());
      }
    }
    c.name = std::string(head);
    if (!valid_name(c.name)) {
      why = "the function name is not valid";
      return false;
    }
    ojson v;
    if (!parse_json(rest, v, why) || !arguments_object(v, c.args, why)) return false;
    out.push_back(std::move(c));
    ++n;
  }
  if (n == 0) {
    why = "no call in the block";
    return false;
  }
  return true;
}

}  // namespace lynx::chatparse::detail
