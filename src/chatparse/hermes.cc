// Hermes 2/3, Qwen2.5 and Qwen3: each call is one JSON object between <tool_call> and
// </tool_call> (Qwen3's template writes "<tool_call>\n{"name": .., "arguments": ..}\n</tool_call>"
// for a past call and asks for the same in its system prompt).
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {

bool parse_hermes(std::string_view body, const ParseOptions&, std::vector<RawCall>& out,
                  std::string& why) {
  ojson v;
  if (!parse_json(body, v, why)) return false;
  RawCall c;
  if (!call_from_object(v, c, why)) return false;
  c.id.clear();  // Hermes has no ids of its own
  out.push_back(std::move(c));
  return true;
}

}  // namespace lynx::chatparse::detail
