// Mistral, as mistral-common's tokenizers write calls: v2 to v7 (Mistral-7B-v0.3, Mixtral-8x22B,
// Nemo, Small-3.1, Large-2407) one JSON array after [TOOL_CALLS], each call
// {"name": .., "arguments": {..}, "id": "9 chars"} with the id last (v2: no id); v11 (Small-3.2,
// Magistral/Devstral 2506-2507) "NAME[CALL_ID]ID[ARGS]{args}" and v13 (Magistral 2509,
// Devstral 2) "NAME[ARGS]{args}", one [TOOL_CALLS] per call. There is no closing marker: a
// block ends at the next [TOOL_CALLS] or at the end of the answer. The stream sends an array
// call whose id may follow its arguments when its object closes (call_stream.h, OpenCall::held).
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {

bool parse_mistral(std::string_view body, const ParseOptions&, std::vector<RawCall>& out,
                   std::string& why) {
  std::string_view s = trim(body);
  if (!s.empty() && s.front() == '[') {
    ojson v;
    if (!parse_json(s, v, why)) return false;
    if (!v.is_array() || v.empty()) {
      why = "[TOOL_CALLS] is not followed by an array of calls";
      return false;
    }
    std::vector<RawCall> calls;
    for (const auto& e : v) {
      RawCall c;
      if (!call_from_object(e, c, why)) return false;
      calls.push_back(std::move(c));
    }
    for (auto& c : calls) out.push_back(std::move(c));
    return true;
  }
  constexpr std::string_view kArgs = "[ARGS]", kId = "[CALL_ID]";
  const size_t args = s.find(kArgs);
  if (args == std::string_view::npos) {
    why = "[TOOL_CALLS] is followed neither by an array nor by NAME[ARGS]";
    return false;
  }
  RawCall c;
  std::string_view head = s.substr(0, args);
  if (const size_t id = head.find(kId); id != std::string_view::npos) {
    c.id = std::string(trim(head.substr(id + kId.size())));
    head = head.substr(0, id);
  }
  c.name = std::string(trim(head));
  if (!valid_name(c.name)) {
    why = "the function name is not valid";
    return false;
  }
  ojson v;
  if (!parse_json(s.substr(args + kArgs.size()), v, why) || !arguments_object(v, c.args, why)) {
    return false;
  }
  out.push_back(std::move(c));
  return true;
}

}  // namespace lynx::chatparse::detail
