// A JSON Schema checker for the subset schema_to_gbnf supports (types, properties, required,
// additionalProperties false, enum, const, anyOf/oneOf, $ref, items, min/maxItems,
// min/maxLength), written independently of the converter so that tests can validate what
// the grammar generated.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace lynx::grammar::test {

using json = nlohmann::json;

inline size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Empty when `v` validates against `s`, else the reason.
inline std::string check(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>() ? "" : "false schema";
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    const json& t = r == "#" ? root : root.at(json::json_pointer(r.substr(1)));
    return check(v, t, root);
  }
  if (s.contains("const") && v != s["const"]) return "const " + s["const"].dump();
  if (s.contains("enum")) {
    bool found = false;
    for (const json& e : s["enum"]) found = found || e == v;
    if (!found) return "not in enum: " + v.dump();
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!s.contains(k)) continue;
    int ok = 0;
    for (const json& sub : s[k]) ok += check(v, sub, root).empty();
    if (ok == 0) return std::string("no ") + k + " branch matches " + v.dump();
    if (ok > 1 && std::string(k) == "oneOf") return "several oneOf branches match " + v.dump();
  }
  if (s.contains("type")) {
    auto is = [&](const std::string& t) {
      if (t == "object") return v.is_object();
      if (t == "array") return v.is_array();
      if (t == "string") return v.is_string();
      if (t == "number") return v.is_number();
      if (t == "integer") return v.is_number_integer();
      if (t == "boolean") return v.is_boolean();
      if (t == "null") return v.is_null();
      return false;
    };
    bool ok = false;
    if (s["type"].is_array()) {
      for (const json& t : s["type"]) ok = ok || is(t.get<std::string>());
    } else {
      ok = is(s["type"].get<std::string>());
    }
    if (!ok) return "type " + s["type"].dump() + " vs " + v.dump();
  }
  if (v.is_object() && s.contains("properties")) {
    for (const auto& [k, sub] : v.items()) {
      if (!s["properties"].contains(k)) return "additional property " + k;
      std::string e = check(sub, s["properties"][k], root);
      if (!e.empty()) return k + ": " + e;
    }
    if (s.contains("required")) {
      for (const json& r : s["required"]) {
        if (!v.contains(r.get<std::string>())) return "missing " + r.get<std::string>();
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return "minItems";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return "maxItems";
    if (s.contains("items")) {
      for (const json& x : v) {
        std::string e = check(x, s["items"], root);
        if (!e.empty()) return "item: " + e;
      }
    }
  }
  if (v.is_string()) {
    const size_t n = utf8_length(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return "minLength";
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return "maxLength";
  }
  return "";
}

}  // namespace lynx::grammar::test
