// JSON Schema -> GBNF (lynx/grammar.h). Every value rule ends with `space` (optional
// whitespace, bounded so a model cannot pad forever). Objects are strict, as OpenAI's strict
// mode: the listed properties only, in their order, the required ones always and the others
// optionally (additionalProperties false). Keywords whose constraint the grammar would not
// enforce (pattern, minimum, ...) are refused, so that an accepted schema's output always
// validates.
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "lynx/grammar.h"

namespace lynx::grammar {

namespace {

using json = nlohmann::ordered_json;

// The rules any JSON value needs (RFC 8259), with bounded number lengths. A \u escape of a
// UTF-16 surrogate only as a high-low pair: a lone one is no character, and JSON parsers
// (nlohmann's among them) refuse it.
constexpr const char* kPrimitives = R"(value ::= object | array | string | number | boolean | null
object ::= "{" space ( string ":" space value ( "," space string ":" space value )* )? "}" space
array ::= "[" space ( value ( "," space value )* )? "]" space
string ::= "\"" char* "\"" space
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" uesc )
uesc ::= [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}
  | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )? space
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) space
boolean ::= ( "true" | "false" ) space
null ::= "null" space
space ::= ( " " | "\n" [ \t]{0,20} )?
)";

// Bytes of `text` as a GBNF string literal.
std::string literal(const std::string& text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = "\"";
  for (char ch : text) {
    const auto c = uint8_t(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;  // UTF-8 kept: the parser decodes it
    }
  }
  return out + "\"";
}

class Converter {
 public:
  Converter(const json& root, const Limits& lim, std::string prefix)
      : root_(root), lim_(lim), prefix_(std::move(prefix)) {}

  // The schema's rules, its start rule named prefix + "root" (the primitives not included).
  std::string run() {
    const std::string body = visit(root_, "/", 0);
    std::string out = prefix_ + "root ::= " + body + "\n";
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw Error("json schema: " + what + " at " + path);
  }

  std::string new_rule(const std::string& hint, std::string body) {
    std::string name = prefix_ + "s";
    for (char c : hint) {
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) name += c;
      if (name.size() > 24) break;
    }
    name += "-" + std::to_string(rules_.size());
    rules_[name] = std::move(body);
    if (rules_.size() > lim_.max_rules / 4) fail(hint, "too many rules (schema too large)");
    return name;
  }

  // Rule of a $ref, made once (a recursive schema refers to the rule while making it).
  std::string ref(const std::string& r, const std::string& path, int depth) {
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    if (r.empty() || r[0] != '#') fail(path, "$ref '" + r + "' is not local (#/...)");
    const json* target = &root_;
    if (r.size() > 1) {
      if (r[1] != '/') fail(path, "$ref '" + r + "' is not a JSON pointer");
      try {
        target = &root_.at(json::json_pointer(r.substr(1)));
      } catch (const std::exception&) {
        fail(path, "$ref '" + r + "' points at nothing");
      }
    }
    const std::string name = prefix_ + "ref" + std::to_string(refs_.size());
    refs_[r] = name;
    rules_[name] = "";  // reserved while the target is converted
    rules_[name] = visit(*target, r, depth + 1);
    return name;
  }

  static size_t count(const json& s, const char* key, const std::string& path, Converter& c) {
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      c.fail(path, std::string(key) + " must be a non-negative integer");
    const auto n = v.get<int64_t>();
    if (n > c.lim_.max_repeat) {
      c.fail(path, std::string(key) + " above " + std::to_string(c.lim_.max_repeat) +
                       " is not supported");
    }
    return size_t(n);
  }

  static std::string reps(size_t lo, long hi) {
    if (hi < 0) return "{" + std::to_string(lo) + ",}";
    return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  }

  std::string visit(const json& s, const std::string& path, int depth) {
    if (depth > 64) fail(path, "schema nested deeper than 64 levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema false accepts nothing");
      return "value";
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    static const char* kRefused[] = {"pattern",
                                     "minimum",
                                     "maximum",
                                     "exclusiveMinimum",
                                     "exclusiveMaximum",
                                     "multipleOf",
                                     "allOf",
                                     "not",
                                     "if",
                                     "then",
                                     "else",
                                     "patternProperties",
                                     "uniqueItems",
                                     "minProperties",
                                     "maxProperties",
                                     "dependentRequired",
                                     "dependentSchemas",
                                     "contains",
                                     "prefixItems",
                                     "propertyNames",
                                     "unevaluatedProperties",
                                     "unevaluatedItems",
                                     "minContains",
                                     "maxContains"};
    for (const char* k : kRefused) {
      if (s.contains(k)) fail(path, "keyword '" + std::string(k) + "' is not supported");
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) fail(path, "$ref must be a string");
      return ref(s["$ref"].get<std::string>(), path, depth);
    }
    if (s.contains("const")) return literal(s["const"].dump()) + " space";
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) fail(path, "enum must be a non-empty array");
      if (e.size() > 4096) fail(path, "enum with more than 4096 values");
      std::string alts;
      for (const json& v : e) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return new_rule(path, "( " + alts + " ) space");
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      const json& a = s[k];
      if (!a.is_array() || a.empty()) fail(path, std::string(k) + " must be a non-empty array");
      if (a.size() > 1024) fail(path, std::string(k) + " with more than 1024 schemas");
      if (std::string_view(k) == "oneOf") {
        // The grammar is anyOf's; it is oneOf's only where no value can match two branches.
        for (size_t i = 0; i < a.size(); ++i) {
          for (size_t j = i + 1; j < a.size(); ++j) {
            if (!disjoint(a[i], a[j], 0)) {
              fail(path, "oneOf branches " + std::to_string(i) + " and " + std::to_string(j) +
                             " may both match one value, and the grammar cannot enforce that "
                             "exactly one does: use anyOf, or make the branches differ by "
                             "type, by const/enum values or by a required property");
            }
          }
        }
      }
      std::string alts;
      for (size_t i = 0; i < a.size(); ++i) {
        alts += (i ? " | " : "") + visit(a[i], path + "/" + k + "/" + std::to_string(i), depth + 1);
      }
      return new_rule(path, alts);
    }
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_array()) {
        if (t.empty()) fail(path, "type must not be an empty array");
        std::string alts;
        for (const json& one : t) {
          json sub = s;
          sub["type"] = one;
          alts += (alts.empty() ? "" : " | ") + visit(sub, path, depth + 1);
        }
        return new_rule(path, alts);
      }
      if (!t.is_string()) fail(path, "type must be a string or an array of strings");
      return typed(s, t.get<std::string>(), path, depth);
    }
    if (s.contains("properties") || s.contains("additionalProperties")) {
      return typed(s, "object", path, depth);
    }
    if (s.contains("items")) return typed(s, "array", path, depth);
    return "value";
  }

  // oneOf's exclusivity, decided on what the grammar of each branch accepts (the same keyword
  // precedence as visit): two branches are disjoint when their JSON types are, when both are
  // finite value sets without a common value, or when both are strict objects and one
  // requires a property the other does not have or both require one property with disjoint
  // schemas. Anything else counts as overlapping (sound, not complete).
  enum : unsigned { kObj = 1, kArr = 2, kStr = 4, kFrac = 8, kInt = 16, kBool = 32, kNull = 64 };
  static constexpr unsigned kAny = 127;

  static unsigned value_type(const json& v) {
    if (v.is_object()) return kObj;
    if (v.is_array()) return kArr;
    if (v.is_string()) return kStr;
    if (v.is_number_integer()) return kInt;
    if (v.is_number()) return kFrac;
    if (v.is_boolean()) return kBool;
    return kNull;
  }

  // The schema a $ref chain ends at (null when it points at nothing or loops too long).
  const json* resolve(const json& s) const {
    const json* t = &s;
    for (int hops = 0; t->is_object() && t->contains("$ref"); ++hops) {
      const json& r = (*t)["$ref"];
      if (hops > 16 || !r.is_string()) return nullptr;
      const std::string ref = r.get<std::string>();
      if (ref == "#") {
        t = &root_;
        continue;
      }
      if (ref.size() < 2 || ref.substr(0, 2) != "#/") return nullptr;
      try {
        t = &root_.at(json::json_pointer(ref.substr(1)));
      } catch (const std::exception&) {
        return nullptr;
      }
    }
    return t;
  }

  unsigned types_of(const json& in, int depth) const {
    const json* s = resolve(in);
    if (!s || !s->is_object() || depth > 16) return kAny;
    if (s->contains("const")) return value_type((*s)["const"]);
    if (s->contains("enum") && (*s)["enum"].is_array()) {
      unsigned t = 0;
      for (const json& v : (*s)["enum"]) t |= value_type(v);
      return t;
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s->contains(k) || !(*s)[k].is_array()) continue;
      unsigned t = 0;
      for (const json& b : (*s)[k]) t |= types_of(b, depth + 1);
      return t;
    }
    if (s->contains("type")) {
      const json& ty = (*s)["type"];
      unsigned t = 0;
      for (const json& one : ty.is_array() ? ty : json::array({ty})) {
        const std::string n = one.is_string() ? one.get<std::string>() : "";
        t |= n == "object"    ? kObj
             : n == "array"   ? kArr
             : n == "string"  ? kStr
             : n == "number"  ? kFrac | kInt
             : n == "integer" ? kInt
             : n == "boolean" ? kBool
             : n == "null"    ? kNull
                              : kAny;
      }
      return t;
    }
    if (s->contains("properties") || s->contains("additionalProperties")) return kObj;
    if (s->contains("items")) return kArr;
    return kAny;
  }

  // The values of a const/enum schema, else null.
  static const json* values(const json& s, json& one) {
    if (s.contains("const")) {
      one = json::array({s["const"]});
      return &one;
    }
    if (s.contains("enum") && s["enum"].is_array()) return &s["enum"];
    return nullptr;
  }

  bool disjoint(const json& a_in, const json& b_in, int depth) const {
    if ((types_of(a_in, depth) & types_of(b_in, depth)) == 0) return true;
    const json* a = resolve(a_in);
    const json* b = resolve(b_in);
    if (!a || !b || !a->is_object() || !b->is_object() || depth > 16) return false;
    json one_a, one_b;
    const json* va = values(*a, one_a);
    const json* vb = values(*b, one_b);
    if (va && vb) {
      for (const json& x : *va) {
        for (const json& y : *vb) {
          if (x == y) return false;
        }
      }
      return true;
    }
    // Strict objects (the converter allows the listed properties only).
    auto strict = [&](const json& s) {
      json scratch;
      return !values(s, scratch) && !s.contains("anyOf") && !s.contains("oneOf") &&
             s.contains("properties") && s["properties"].is_object() && types_of(s, depth) == kObj;
    };
    if (!strict(*a) || !strict(*b)) return false;
    auto required = [](const json& s, const std::string& k) {
      if (!s.contains("required") || !s["required"].is_array()) return false;
      for (const json& r : s["required"]) {
        if (r == k) return true;
      }
      return false;
    };
    const json& pa = (*a)["properties"];
    const json& pb = (*b)["properties"];
    for (const auto& [k, sub] : pa.items()) {
      if (!required(*a, k)) continue;
      if (!pb.contains(k)) return true;
      if (required(*b, k) && disjoint(sub, pb[k], depth + 1)) return true;
    }
    for (const auto& [k, sub] : pb.items()) {
      if (required(*b, k) && !pa.contains(k)) return true;
    }
    return false;
  }

  std::string typed(const json& s, const std::string& type, const std::string& path, int depth) {
    if (type == "string") {
      if (s.contains("format") && s["format"].is_string()) {
        const std::string f = s["format"].get<std::string>();
        if (f == "date") return "\"\\\"\" " + kDate + " \"\\\"\" space";
        if (f == "uuid") {
          return "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                 "[0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\" space";
        }
      }
      if (!s.contains("minLength") && !s.contains("maxLength")) return "string";
      const size_t lo = s.contains("minLength") ? count(s, "minLength", path, *this) : 0;
      const long hi = s.contains("maxLength") ? long(count(s, "maxLength", path, *this)) : -1;
      if (hi >= 0 && size_t(hi) < lo) fail(path, "maxLength below minLength");
      return new_rule(path, "\"\\\"\" char" + reps(lo, hi) + " \"\\\"\" space");
    }
    if (type == "number") return "number";
    if (type == "integer") return "integer";
    if (type == "boolean") return "boolean";
    if (type == "null") return "null";
    if (type == "array") {
      const std::string item =
          s.contains("items") ? visit(s["items"], path + "/items", depth + 1) : "value";
      const size_t lo = s.contains("minItems") ? count(s, "minItems", path, *this) : 0;
      const long hi = s.contains("maxItems") ? long(count(s, "maxItems", path, *this)) : -1;
      if (hi >= 0 && size_t(hi) < lo) fail(path, "maxItems below minItems");
      if (hi == 0) return new_rule(path, "\"[\" space \"]\" space");
      const std::string more =
          "( \",\" space " + item + " )" + reps(lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
      if (lo == 0) return new_rule(path, "\"[\" space ( " + item + " " + more + " )? \"]\" space");
      return new_rule(path, "\"[\" space " + item + " " + more + " \"]\" space");
    }
    if (type == "object") return object(s, path, depth);
    fail(path, "unknown type '" + type + "'");
  }

  std::string object(const json& s, const std::string& path, int depth) {
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props && !props->is_object()) fail(path, "properties must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path, "required must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) fail(path, "required must hold strings");
        if (!props || !props->contains(r.get<std::string>())) {
          fail(path, "required property '" + r.get<std::string>() + "' is not in properties");
        }
        required.insert(r.get<std::string>());
      }
    }
    if (!props || props->empty()) {
      const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
      if (extra && extra->is_boolean() && !extra->get<bool>()) {
        return new_rule(path, "\"{\" space \"}\" space");
      }
      if (!extra || extra->is_boolean()) return "object";
      const std::string v = visit(*extra, path + "/additionalProperties", depth + 1);
      const std::string kv = "string \":\" space " + v;
      return new_rule(path, "\"{\" space ( " + kv + " ( \",\" space " + kv + " )* )? \"}\" space");
    }
    // Members in order; R(i, emitted) writes members i.. with a leading comma once one has
    // been written: a required member always, an optional one or not (2 rules per member).
    std::vector<std::pair<std::string, bool>> members;  // (key-value expression, required)
    for (const auto& [key, sub] : props->items()) {
      const std::string v = visit(sub, path + "/properties/" + key, depth + 1);
      members.push_back(
          {literal(json(key).dump()) + " space \":\" space " + v, required.count(key) > 0});
    }
    std::vector<std::string> after(2, "");  // R(i + 1, emitted), as expressions
    for (size_t i = members.size(); i-- > 0;) {
      std::vector<std::string> now(2);
      for (int emitted = 0; emitted < 2; ++emitted) {
        const std::string head = (emitted ? "\",\" space " : "") + members[i].first;
        const std::string with = head + (after[1].empty() ? "" : " " + after[1]);
        const std::string& skip = after[size_t(emitted)];
        std::string body = members[i].second ? with
                           : skip.empty()    ? "( " + with + " )?"
                                             : "( " + with + " ) | " + skip;
        now[size_t(emitted)] = new_rule(path, body);
      }
      after = now;
    }
    return new_rule(path, "\"{\" space " + after[0] + " \"}\" space");
  }

  const std::string kDate =
      "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] "
      ")";
  const json& root_;
  const Limits& lim_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  std::string prefix_;  // of every rule this schema makes, so that schemas share a grammar
};

}  // namespace

std::string schema_to_gbnf(std::string_view schema_json, const Limits& limits) {
  json schema;
  try {
    schema = json::parse(schema_json, nullptr, true, false);
  } catch (const std::exception& e) {
    throw Error(std::string("json schema: not valid JSON: ") + e.what());
  }
  return Converter(schema, limits, "").run() + kPrimitives;
}

std::string schema_rules_gbnf(std::string_view schema_json, std::string_view prefix,
                              const Limits& limits) {
  json schema;
  try {
    schema = json::parse(schema_json, nullptr, true, false);
  } catch (const std::exception& e) {
    throw Error(std::string("json schema: not valid JSON: ") + e.what());
  }
  return Converter(schema, limits, std::string(prefix)).run();
}

std::string json_primitives_gbnf() {
  return kPrimitives;
}

std::string json_object_gbnf() {
  return std::string("root ::= object\n") + kPrimitives;
}

}  // namespace lynx::grammar
