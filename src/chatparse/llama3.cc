// Llama 3.1-3.3: with custom tools the answer is the call itself,
// {"name": NAME, "parameters": {..}} (the template asks for exactly that), sometimes after
// <|python_tag|>, several separated by ';' or whitespace. Built-in tools' Python-call syntax
// (brave_search.call(query="..")) is not a JSON call and stays text.
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {
namespace {

// End (one past the closing brace) of the JSON object starting at s[0] == '{', or npos.
size_t object_end(std::string_view s) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

}  // namespace

bool parse_llama3(std::string_view body, const ParseOptions& o, std::vector<RawCall>& out,
                  std::string& why) {
  constexpr std::string_view kTag = "<|python_tag|>";
  std::string_view s = trim(body);
  if (s.substr(0, kTag.size()) == kTag) s.remove_prefix(kTag.size());
  std::vector<RawCall> calls;
  for (;;) {
    while (!s.empty() && (is_space(s.front()) || s.front() == ';')) s.remove_prefix(1);
    if (s.empty()) break;
    if (s.front() != '{') {
      why = "text other than JSON calls";
      return false;
    }
    const size_t end = object_end(s);
    if (end == std::string_view::npos) {
      why = "an unterminated JSON object";
      return false;
    }
    ojson v;
    RawCall c;
    if (!parse_json(s.substr(0, end), v, why) || !call_from_object(v, c, why)) return false;
    // The format has no markers: a JSON answer is a call only when it has the call's shape and
    // names an offered tool.
    if (!v.contains("parameters") && !v.contains("arguments")) {
      why = "a JSON object without \"parameters\"";
      return false;
    }
    if (!offered(o, c.name)) {
      why = "\"" + c.name + "\" is not one of the request's tools";
      return false;
    }
    c.id.clear();
    calls.push_back(std::move(c));
    s.remove_prefix(end);
  }
  if (calls.empty()) {
    why = "no call";
    return false;
  }
  for (auto& c : calls) out.push_back(std::move(c));
  return true;
}

}  // namespace lynx::chatparse::detail
