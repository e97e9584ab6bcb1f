// MiniMax-M2: XML-like calls, one <invoke> per call, several in one block; parameter values as
// raw text (its template writes a string as it is, any other value as JSON):
// "<minimax:tool_call>\n<invoke name=\"NAME\">\n<parameter name=\"KEY\">VALUE</parameter>\n..
// </invoke>\n..</minimax:tool_call>".
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {

bool parse_minimax_m2(std::string_view body, const ParseOptions& o, std::vector<RawCall>& out,
                      std::string& why) {
  constexpr std::string_view kInv = "<invoke name=\"", kInvEnd = "</invoke>",
                             kPar = "<parameter name=\"", kParEnd = "</parameter>", kQ = "\">";
  std::string_view s = trim(body);
  if (s.empty()) {
    why = "no <invoke> in the block";
    return false;
  }
  std::vector<RawCall> calls;
  while (!s.empty()) {
    if (s.substr(0, kInv.size()) != kInv) {
      why = "text other than <invoke name=\"..\"> in the block";
      return false;
    }
    s.remove_prefix(kInv.size());
    const size_t q = s.find(kQ);
    if (q == std::string_view::npos) {
      why = "<invoke name=\" is not closed by \">";
      return false;
    }
    RawCall c;
    c.name = std::string(trim(s.substr(0, q)));
    if (!valid_name(c.name)) {
      why = "the function name is not valid";
      return false;
    }
    s.remove_prefix(q + kQ.size());
    for (;;) {
      s = trim(s);
      if (s.substr(0, kInvEnd.size()) == kInvEnd) {
        s.remove_prefix(kInvEnd.size());
        break;
      }
      if (s.substr(0, kPar.size()) != kPar) {
        why = s.empty() ? "an <invoke> without </invoke>"
                        : "text other than <parameter name=\"..\"> inside <invoke>";
        return false;
      }
      s.remove_prefix(kPar.size());
      const size_t pq = s.find(kQ);
      const size_t pend = pq == std::string_view::npos ? pq : s.find(kParEnd, pq + kQ.size());
      if (pend == std::string_view::npos) {
        why = "a parameter not closed by \"> or without </parameter>";
        return false;
      }
      const std::string key(trim(s.substr(0, pq)));
      if (key.empty()) {
        why = "a parameter without a name";
        return false;
      }
      const std::string_view raw = s.substr(pq + kQ.size(), pend - pq - kQ.size());
      c.args[key] = typed_value(raw, o, c.name, key);
      s.remove_prefix(pend + kParEnd.size());
    }
    calls.push_back(std::move(c));
    s = trim(s);
  }
  for (RawCall& c : calls) out.push_back(std::move(c));
  return true;
}

}  // namespace lynx::chatparse::detail
