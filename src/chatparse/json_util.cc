// Pieces the format parsers share: bounded JSON parsing, the call object of the JSON formats,
// parameter values of the XML formats.
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {
namespace {

// Model output can nest brackets without bound; nlohmann's DOM costs memory per level and its
// destructor recursion depth grows with it, so deeper values are refused before parsing.
constexpr int kMaxDepth = 64;

bool too_deep(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
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
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

size_t find_outside_strings(std::string_view s, std::string_view marker, size_t from) {
  bool in_string = false, escaped = false;
  for (size_t i = from; i < s.size(); ++i) {
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
    } else if (s.substr(i, marker.size()) == marker) {
      return i;
    }
  }
  return std::string_view::npos;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool offered(const ParseOptions& o, std::string_view name) {
  if (!o.tools.is_array()) return false;
  for (const auto& t : o.tools) {
    const auto f = t.find("function");
    if (f == t.end() || !f->is_object()) continue;
    const auto n = f->find("name");
    if (n != f->end() && n->is_string() && n->get<std::string>() == name) return true;
  }
  return false;
}

bool parse_json(std::string_view text, ojson& out, std::string& why) {
  text = trim(text);
  if (text.empty()) {
    why = "no JSON where one was expected";
    return false;
  }
  if (too_deep(text)) {
    why = "JSON nested deeper than " + std::to_string(kMaxDepth) + " levels";
    return false;
  }
  out = ojson::parse(text, nullptr, false);
  if (out.is_discarded()) {
    why = "not valid JSON";
    return false;
  }
  return true;
}

bool arguments_object(const ojson& v, ojson& out, std::string& why) {
  if (v.is_object()) {
    out = v;
    return true;
  }
  if (v.is_string()) {
    ojson inner;
    if (parse_json(v.get<std::string>(), inner, why) && inner.is_object()) {
      out = std::move(inner);
      return true;
    }
  }
  why = "the arguments are not a JSON object";
  return false;
}

bool call_from_object(const ojson& v, RawCall& out, std::string& why) {
  if (!v.is_object()) {
    why = "a call is not a JSON object";
    return false;
  }
  const auto name = v.find("name");
  if (name == v.end() || !name->is_string() || !valid_name(name->get<std::string>())) {
    why = "a call has no valid \"name\"";
    return false;
  }
  out.name = name->get<std::string>();
  auto args = v.find("arguments");
  if (args == v.end()) args = v.find("parameters");
  if (args == v.end() || args->is_null()) {
    out.args = ojson::object();
  } else if (!arguments_object(*args, out.args, why)) {
    return false;
  }
  if (const auto id = v.find("id"); id != v.end() && id->is_string()) {
    out.id = id->get<std::string>();
  }
  return true;
}

ojson typed_value(std::string_view raw, const ParseOptions& o, const std::string& function,
                  const std::string& param) {
  // The schema's type of the parameter, when the request's tools say it.
  std::string type;
  if (o.tools.is_array()) {
    for (const auto& t : o.tools) {
      const auto f = t.find("function");
      if (f == t.end() || !f->is_object()) continue;
      const auto n = f->find("name");
      if (n == f->end() || !n->is_string() || n->get<std::string>() != function) continue;
      const auto props = f->find("parameters");
      if (props == f->end() || !props->is_object()) break;
      const auto pr = props->find("properties");
      if (pr == props->end() || !pr->is_object()) break;
      const auto p = pr->find(param);
      if (p != pr->end() && p->is_object()) {
        const auto ty = p->find("type");
        if (ty != p->end() && ty->is_string()) type = ty->get<std::string>();
      }
      break;
    }
  }
  if (type == "string") return std::string(raw);
  ojson v;
  std::string why;
  if (parse_json(raw, v, why)) return v;
  return std::string(raw);
}

}  // namespace lynx::chatparse::detail
