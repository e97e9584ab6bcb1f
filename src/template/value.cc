// Python semantics of values: truth, str/repr, equality and ordering, json.dumps.
#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <utility>

#include <nlohmann/json.hpp>

namespace lynx::tmpl {

namespace {
// Values nest as deep as a template makes them ({% set ns.x = [ns.x] %} in a loop), and
// printing, comparing and dumping recurse: bounded so that such a value is an error, not a
// stack overflow.
constexpr int kMaxNesting = 256;
thread_local int nesting = 0;
struct NestGuard {
  NestGuard() {
    if (++nesting > kMaxNesting) {
      nesting = 0;
      throw Error("template: a value nested deeper than " + std::to_string(kMaxNesting) +
                  " levels");
    }
  }
  ~NestGuard() {
    if (nesting > 0) --nesting;
  }
};
}  // namespace

namespace {
thread_local bool draining = false;
thread_local std::vector<std::shared_ptr<List>>* pending_lists = nullptr;
thread_local std::vector<std::shared_ptr<Dict>>* pending_dicts = nullptr;
}  // namespace

Value::~Value() {
  const bool last_list = list && list.use_count() == 1;
  const bool last_dict = dict && dict.use_count() == 1;
  if (!last_list && !last_dict) return;
  if (draining) {  // an outer destructor is draining: hand the container to it
    if (last_list) pending_lists->push_back(std::move(list));
    if (last_dict) pending_dicts->push_back(std::move(dict));
    return;
  }
  std::vector<std::shared_ptr<List>> lists;
  std::vector<std::shared_ptr<Dict>> dicts;
  if (last_list) lists.push_back(std::move(list));
  if (last_dict) dicts.push_back(std::move(dict));
  draining = true;
  pending_lists = &lists;
  pending_dicts = &dicts;
  // Each container's elements are destroyed with `draining` set, so their own containers are
  // queued here rather than released recursively.
  while (!lists.empty() || !dicts.empty()) {
    if (!lists.empty()) {
      std::shared_ptr<List> l = std::move(lists.back());
      lists.pop_back();
      l.reset();
    } else {
      std::shared_ptr<Dict> d = std::move(dicts.back());
      dicts.pop_back();
      d.reset();
    }
  }
  draining = false;
  pending_lists = nullptr;
  pending_dicts = nullptr;
}

Value Value::new_list(List items) {
  Value v = make(Kind::kList);
  v.list = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::new_dict() {
  Value v = make(Kind::kDict);
  v.dict = std::make_shared<Dict>();
  return v;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b;
    case Kind::kInt:
      return i != 0;
    case Kind::kFloat:
      return f != 0;
    case Kind::kString:
      return !s.empty();
    case Kind::kList:
      return !list->empty();
    case Kind::kDict:
      return namespace_ || !dict->items.empty();
    case Kind::kFn:
      return true;
  }
  return false;
}

bool hashable(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kDict:
      return false;
    case Value::Kind::kList:
      if (!v.tuple) return false;
      for (const Value& x : *v.list)
        if (!hashable(x)) return false;
      return true;
    default:
      return true;
  }
}

namespace {
uint64_t mix(uint64_t x) {  // splitmix64's finalizer: spreads small integers over the table
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t string_hash(std::string_view s) {
  return std::hash<std::string_view>{}(s);
}
}  // namespace

uint64_t key_hash(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return 0x756e646566ull;
    case Value::Kind::kNone:
      return 0x6e6f6e65ull;
    case Value::Kind::kBool:
      return mix(uint64_t(v.b));
    case Value::Kind::kInt:
      return mix(uint64_t(v.i));
    case Value::Kind::kFloat:
      // An integral float equals the int of the same value, so it hashes as that int.
      if (v.f == std::trunc(v.f) && v.f >= -9.2e18 && v.f <= 9.2e18)
        return mix(uint64_t(int64_t(v.f)));
      return std::isnan(v.f) ? 0x6e616eull : std::hash<double>{}(v.f);
    case Value::Kind::kString:
      return string_hash(v.s);
    case Value::Kind::kList: {
      uint64_t h = 0x7475706c65ull + v.list->size();
      for (const Value& x : *v.list) h = mix(h ^ key_hash(x));
      return h;
    }
    case Value::Kind::kFn:
      return mix(uint64_t(reinterpret_cast<uintptr_t>(v.fn.get())));
    case Value::Kind::kDict:
      break;
  }
  return 0;
}

void Dict::update_index() const {
  if (items.size() < kIndexFrom) return;
  for (; indexed_ < items.size(); ++indexed_)
    index_.emplace(key_hash(items[indexed_].first), uint32_t(indexed_));
}

template <class Eq>
const Value* Dict::lookup(uint64_t hash, Eq eq) const {
  update_index();
  if (indexed_ == 0) {
    for (const auto& [k, v] : items)
      if (eq(k)) return &v;
    return nullptr;
  }
  auto [b, e] = index_.equal_range(hash);
  for (auto it = b; it != e; ++it)
    if (eq(items[it->second].first)) return &items[it->second].second;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  return lookup(string_hash(key), [&](const Value& k) { return k.is_string() && k.s == key; });
}
Value* Dict::find(std::string_view key) {
  return const_cast<Value*>(std::as_const(*this).find(key));
}
const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.s));
  return lookup(key_hash(key), [&](const Value& k) { return equals(k, key); });
}
Value* Dict::find(const Value& key) {
  return const_cast<Value*>(std::as_const(*this).find(key));
}
void Dict::set(std::string key, Value v) {
  if (Value* old = find(std::string_view(key))) {
    *old = std::move(v);
    return;
  }
  items.emplace_back(Value::str(std::move(key)), std::move(v));
}
void Dict::set(Value key, Value v) {
  if (Value* old = find(key)) {  // Python keeps the first key (1 stays 1 when 1.0 is set)
    *old = std::move(v);
    return;
  }
  items.emplace_back(std::move(key), std::move(v));
}

Value Args::get(size_t index, std::string_view name, Value def) const {
  if (index < pos.size()) return pos[index];
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return def;
}
bool Args::has(size_t index, std::string_view name) const {
  if (index < pos.size()) return true;
  for (const auto& kv : kw)
    if (kv.first == name) return true;
  return false;
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, then laid out as Python's repr does.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {  // Python's repr: fixed notation in this range
    if (exp >= 0) {
      if (int(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {

std::string str_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == q)
      out += std::string("\\") + char(c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[16];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else
      out += char(c);
  }
  return out + q;
}

}  // namespace

std::string repr(const Value& v) {
  NestGuard guard;
  switch (v.kind) {
    case Value::Kind::kString:
      return str_repr(v.s);
    case Value::Kind::kList: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += repr((*v.list)[k]);
      }
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      if (v.namespace_) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(x);
      }
      return out + "}";
    }
    case Value::Kind::kUndefined:
      return "Undefined";  // jinja2's Undefined.__repr__ (a list or dict key holding one)
    default:
      return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return float_repr(v.f);
    case Value::Kind::kString:
      return v.s;
    case Value::Kind::kFn:
      return "<function>";
    default:
      return repr(v);
  }
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return v.namespace_ ? "Namespace" : "dict";
    case Value::Kind::kFn:
      return "function";
  }
  return "?";
}

bool equals(const Value& a, const Value& b) {
  NestGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat)
      return a.as_double() == b.as_double();
    return (a.kind == Value::Kind::kBool ? a.b : a.i) == (b.kind == Value::Kind::kBool ? b.b : b.i);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict == b.dict) return true;
      if (a.namespace_ || b.namespace_) return false;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (!y || !equals(x, *y)) return false;
      }
      return true;
    }
    case Value::Kind::kFn:
      return a.fn == b.fn;
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b) {
  NestGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      const int64_t x = a.kind == Value::Kind::kBool ? a.b : a.i;
      const int64_t y = b.kind == Value::Kind::kBool ? b.b : b.i;
      return x < y ? -1 : x > y;
    }
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : a.s > b.s;  // UTF-8 = code points
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k)
      if (int c = compare((*a.list)[k], (*b.list)[k])) return c;
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
  }
  throw Error("template: '<' not supported between instances of '" + type_name(a) + "' and '" +
              type_name(b) + "'");
}

Value from_json(const nlohmann::ordered_json& j) {
  NestGuard guard;
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value::boolean(j.get<bool>());
    case T::number_integer:
      return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= uint64_t(INT64_MAX)) return Value::integer(int64_t(u));
      return Value::real(double(u));
    }
    case T::number_float:
      return Value::real(j.get<double>());
    case T::string:
      return Value::str(j.get<std::string>());
    case T::array: {
      List items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::new_list(std::move(items));
    }
    case T::object: {
      Value d = Value::new_dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict->set(it.key(), from_json(it.value()));
      return d;
    }
    default:
      throw Error("template: a JSON value of an unsupported type (binary) in the context");
  }
}

namespace {

void append_codepoint_escape(std::string& out, uint32_t cp) {
  char b[16];
  std::snprintf(b, sizeof b, "\\u%04x", cp);
  out += b;
}

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t k = 0; k < s.size(); ++k) {
    const unsigned char c = s[k];
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      append_codepoint_escape(out, c);
    } else if (c < 0x80 || !ensure_ascii) {
      out += char(c);
    } else {
      // One UTF-8 sequence -> \uXXXX (a surrogate pair above the BMP), as Python writes it.
      const std::u32string cps = to_u32(std::string_view(s).substr(k, c >= 0xF0   ? 4
                                                                      : c >= 0xE0 ? 3
                                                                                  : 2));
      const uint32_t cp = cps.empty() ? 0xFFFD : cps[0];
      k += (c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2) - 1;
      if (cp >= 0x10000) {
        append_codepoint_escape(out, 0xD800 + ((cp - 0x10000) >> 10));
        append_codepoint_escape(out, 0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        append_codepoint_escape(out, cp);
      }
    }
  }
  out += '"';
}

// json.dumps's conversion of a dict key to the object's member name.
std::string json_key(const Value& k) {
  switch (k.kind) {
    case Value::Kind::kString:
      return k.s;
    case Value::Kind::kInt:
      return std::to_string(k.i);
    case Value::Kind::kBool:
      return k.b ? "true" : "false";
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kFloat:
      if (std::isnan(k.f)) return "NaN";
      if (std::isinf(k.f)) return k.f > 0 ? "Infinity" : "-Infinity";
      return float_repr(k.f);
    default:
      throw Error("template: tojson: keys must be str, int, float, bool or None, not " +
                  type_name(k));
  }
}

void dump(std::string& out, const Value& v, const DumpOptions& o, int level) {
  NestGuard guard;
  const bool pretty = o.indent >= 0 || o.indent_is_string;
  const std::string item_sep = o.custom_separators ? o.item_sep : pretty ? "," : ", ";
  const std::string key_sep = o.custom_separators ? o.key_sep : ": ";
  auto newline = [&](int lvl) {
    if (!pretty) return;
    out += '\n';
    for (int k = 0; k < lvl; ++k)
      out += o.indent_is_string ? o.indent_str : std::string(o.indent, ' ');
  };
  switch (v.kind) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.i);
      return;
    case Value::Kind::kFloat:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f > 0 ? "Infinity" : "-Infinity";
      else
        out += float_repr(v.f);
      return;
    case Value::Kind::kString:
      dump_string(out, v.s, o.ensure_ascii);
      return;
    case Value::Kind::kList: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        dump(out, (*v.list)[k], o, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.namespace_) break;
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      // Python sorts the keys themselves (ints numerically; a str beside an int is a TypeError),
      // then writes each as a string.
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return compare(a->first, b->first) < 0; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        dump_string(out, json_key(items[k]->first), o.ensure_ascii);
        out += key_sep;
        dump(out, items[k]->second, o, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      break;
  }
  throw Error("template: tojson: Object of type " + type_name(v) + " is not JSON serializable");
}

}  // namespace

std::string dumps(const Value& v, const DumpOptions& opt) {
  std::string out;
  dump(out, v, opt, 0);
  return out;
}

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    const unsigned char c = s[k];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || k + n > s.size()) {
      out += char32_t(0xDC00 + c);  // an invalid byte survives a round trip (surrogateescape)
      ++k;
      continue;
    }
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    bool ok = true;
    for (int m = 1; m < n; ++m) {
      const unsigned char d = s[k + m];
      if ((d >> 6) != 2) ok = false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (!ok) {
      out += char32_t(0xDC00 + c);
      ++k;
      continue;
    }
    out += char32_t(cp);
    k += n;
  }
  return out;
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) {
      out += char(cp - 0xDC00);
    } else if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

}  // namespace lynx::tmpl
