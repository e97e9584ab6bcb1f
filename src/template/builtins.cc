// Builtins: Jinja2's filters and tests that chat templates use, the methods of Python's str,
// list and dict they call, and the globals (range, namespace, dict, and transformers'
// raise_exception, strftime_now). Each follows the Python definition, since the reference
// output is what Python renders.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <string_view>

#include "template/interp.h"

namespace lynx::tmpl {
namespace {

using VK = Value::Kind;

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string need_str(Interp& in, const Value& v, const char* what) {
  if (!v.is_string()) in.fail(std::string(what) + " expects a string, got " + type_name(v));
  return v.s;
}

int64_t need_int(Interp& in, const Value& v, const char* what) {
  if (v.kind == VK::kInt) return v.i;
  if (v.kind == VK::kBool) return v.b;
  in.fail(std::string(what) + " expects an integer, got " + type_name(v));
}

size_t py_len(Interp& in, const Value& v) {
  switch (v.kind) {
    case VK::kString:
      return is_ascii(v.s) ? v.s.size() : to_u32(v.s).size();
    case VK::kList:
      return v.list->size();
    case VK::kDict:
      return v.dict->items.size();
    case VK::kUndefined:
      return 0;
    default:
      in.fail("object of type '" + type_name(v) + "' has no len()");
  }
}

}  // namespace

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count, Interp& in) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters and at both ends
    const std::u32string u = to_u32(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      out += to_utf8(std::u32string(1, c));
      in.check_size(out.size());
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  for (;;) {
    const size_t k = s.find(from, pos);
    if (k == std::string::npos || (count >= 0 && n >= count)) break;
    out.append(s, pos, k - pos);
    out += to;
    in.check_size(out.size());
    pos = k + from.size();
    ++n;
  }
  out.append(s, pos);
  return out;
}

// str.split / str.rsplit: sep None splits on runs of whitespace and drops empty parts.
Value py_split(Interp& in, const std::string& s, const Value& sepv, int64_t maxsplit, bool right) {
  List parts;
  if (sepv.is_none() || sepv.is_undefined()) {
    std::vector<std::pair<size_t, size_t>> words;
    size_t k = 0;
    while (k < s.size()) {
      while (k < s.size() && is_ws(s[k])) ++k;
      if (k >= s.size()) break;
      size_t e = k;
      while (e < s.size() && !is_ws(s[e])) ++e;
      words.emplace_back(k, e);
      k = e;
    }
    if (maxsplit < 0 || int64_t(words.size()) <= maxsplit + 1) {
      for (auto [b, e] : words) parts.push_back(Value::str(s.substr(b, e - b)));
    } else if (!right) {
      for (int64_t w = 0; w < maxsplit; ++w)
        parts.push_back(Value::str(s.substr(words[w].first, words[w].second - words[w].first)));
      std::string rest = s.substr(words[maxsplit].first);
      size_t e = rest.size();
      while (e > 0 && is_ws(rest[e - 1])) --e;
      parts.push_back(Value::str(rest.substr(0, e)));
    } else {
      const size_t first = words.size() - size_t(maxsplit);
      size_t b = 0;
      while (b < s.size() && is_ws(s[b])) ++b;
      parts.push_back(Value::str(s.substr(b, words[first - 1].second - b)));
      for (size_t w = first; w < words.size(); ++w)
        parts.push_back(Value::str(s.substr(words[w].first, words[w].second - words[w].first)));
    }
    return Value::new_list(std::move(parts));
  }
  const std::string sep = need_str(in, sepv, "split");
  if (sep.empty()) in.fail("empty separator");
  std::vector<std::string> out;
  if (!right) {
    size_t pos = 0;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      const size_t k = s.find(sep, pos);
      if (k == std::string::npos) break;
      out.push_back(s.substr(pos, k - pos));
      pos = k + sep.size();
    }
    out.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      if (end < sep.size()) break;
      const size_t k = s.rfind(sep, end - sep.size());
      if (k == std::string::npos) break;
      out.push_back(s.substr(k + sep.size(), end - k - sep.size()));
      end = k;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
  }
  in.check_items(out.size());
  for (auto& p : out) parts.push_back(Value::str(std::move(p)));
  return Value::new_list(std::move(parts));
}

namespace {

Value items_of_impl(Interp& in, const Value& v) {
  if (v.is_undefined()) return Value::new_list();
  if (!v.is_dict() || v.namespace_) in.fail("items() of a " + type_name(v));
  in.charge(v.dict->items.size());
  List r;
  for (const auto& [k, x] : v.dict->items) {
    Value t = Value::new_list({k, x});
    t.tuple = true;
    r.push_back(std::move(t));
  }
  return Value::new_list(std::move(r));
}

std::string capitalize(const std::string& s) {
  std::string r = lower(s);
  if (!r.empty()) r[0] = char(std::toupper(static_cast<unsigned char>(r[0])));
  return r;
}

std::string title(const std::string& s) {
  std::string r = s;
  bool prev_alpha = false;
  for (char& c : r) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    if (alpha)
      c = char(prev_alpha ? std::tolower(static_cast<unsigned char>(c))
                          : std::toupper(static_cast<unsigned char>(c)));
    prev_alpha = alpha || (static_cast<unsigned char>(c) >= 0x80);
  }
  return r;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::string cur;
  for (size_t k = 0; k < s.size(); ++k) {
    const char c = s[k];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f') {
      if (c == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
      lines.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

// The attribute path of map/selectattr/sort (`attribute='function.name'`).
Value attr_path(Interp& in, Value v, const std::string& path) {
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = path.find('.', pos);
    const std::string part =
        path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit))
      v = in.getitem(v, Value::integer(std::stoll(part)));
    else
      v = in.getitem(v, Value::str(part));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return v;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::str(lower(v.s));
  return v;
}

bool cmp_less(Interp& in, const Value& a, const Value& b) {
  try {
    return compare(a, b) < 0;
  } catch (const Error& e) {
    in.fail(e.what());
  }
}

// Jinja's select/reject/selectattr/rejectattr: args are (attr?, test name, test args...).
Value select(Interp& in, const Value& seq, Args& args, bool by_attr, bool keep) {
  List out;
  size_t off = 0;
  std::string attr;
  if (by_attr) {
    attr = need_str(in, args.get(0, "attribute"), "selectattr");
    off = 1;
  }
  std::string test;
  Args targs;
  if (args.pos.size() > off) {
    test = need_str(in, args.pos[off], "select");
    targs.pos.assign(args.pos.begin() + long(off) + 1, args.pos.end());
  }
  for (const Value& item : in.iterate(seq)) {
    in.step();
    Value v = by_attr ? attr_path(in, item, attr) : item;
    Args a = targs;
    const bool ok = test.empty() ? v.truthy() : apply_test(in, test, v, a);
    if (ok == keep) out.push_back(item);
  }
  return Value::new_list(std::move(out));
}

std::string do_indent(std::string s, const Value& width, bool first, bool blank) {
  const std::string ind =
      width.is_string()
          ? width.s
          : std::string(size_t(std::max<int64_t>(0, width.is_undefined() ? 4 : width.i)), ' ');
  s += "\n";  // Jinja2's quirk so that splitlines keeps a trailing empty line
  std::vector<std::string> lines = split_lines(s);
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind) + lines[k];
  }
  return first ? ind + rv : rv;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto strip_set = [&](auto in_set) {
    size_t b = 0, e = s.size();
    if (left)
      while (b < e && in_set(s[b])) ++b;
    if (right)
      while (e > b && in_set(s[e - 1])) --e;
    return s.substr(b, e - b);
  };
  if (!chars.is_string()) return strip_set(is_ws);
  if (is_ascii(chars.s))
    return strip_set([&](char c) { return chars.s.find(c) != std::string::npos; });
  const std::u32string u = to_u32(s), set = to_u32(chars.s);
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && set.find(u[b]) != std::u32string::npos) ++b;
  if (right)
    while (e > b && set.find(u[e - 1]) != std::u32string::npos) --e;
  return to_utf8(u.substr(b, e - b));
}

namespace {

// A filter's handler: the input, the call's arguments, and the name it was called by (aliases
// such as first / last share one handler and branch on it).
using FilterFn = Value (*)(Interp& in, const std::string& name, Value v, Args& a);

Value filter_tojson(Interp& in, const std::string&, Value v, Args& a) {
  // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False), positional in that order.
  DumpOptions o;
  o.ensure_ascii = a.get(0, "ensure_ascii", Value::boolean(false)).truthy();
  const Value ind = a.get(1, "indent", Value::none());
  if (ind.is_string()) {
    o.indent_is_string = true;
    o.indent_str = ind.s;
  } else if (ind.is_number()) {
    o.indent = int(std::max<int64_t>(0, need_int(in, ind, "tojson indent")));
  }
  const Value sep = a.get(2, "separators", Value::none());
  if (sep.is_list() && sep.list->size() == 2) {
    o.custom_separators = true;
    o.item_sep = need_str(in, (*sep.list)[0], "tojson separators");
    o.key_sep = need_str(in, (*sep.list)[1], "tojson separators");
  }
  o.sort_keys = a.get(3, "sort_keys", Value::boolean(false)).truthy();
  try {
    std::string s = dumps(v, o);
    in.check_size(s.size());
    return Value::str(std::move(s));
  } catch (const Error& e) {
    in.fail(e.what());
  }
}

// Strings and their case.
Value filter_string(Interp&, const std::string&, Value v, Args&) {
  return v.kind == VK::kString ? v : Value::str(to_str(v));
}
Value filter_escape(Interp&, const std::string&, Value v, Args&) {
  return Value::str(html_escape(to_str(v)));
}
Value filter_trim(Interp&, const std::string&, Value v, Args& a) {
  return Value::str(py_strip(to_str(v), a.get(0, "chars", Value::none()), true, true));
}
Value filter_upper(Interp&, const std::string&, Value v, Args&) {
  return Value::str(upper(to_str(v)));
}
Value filter_lower(Interp&, const std::string&, Value v, Args&) {
  return Value::str(lower(to_str(v)));
}
Value filter_capitalize(Interp&, const std::string&, Value v, Args&) {
  return Value::str(capitalize(to_str(v)));
}
Value filter_title(Interp&, const std::string&, Value v, Args&) {
  return Value::str(title(to_str(v)));
}
Value filter_replace(Interp& in, const std::string&, Value v, Args& a) {
  const Value cnt = a.get(2, "count", Value::none());
  return Value::str(replace_all(to_str(v), to_str(a.get(0, "old")), to_str(a.get(1, "new")),
                                cnt.is_none() ? -1 : need_int(in, cnt, "replace"), in));
}
Value filter_wordcount(Interp&, const std::string&, Value v, Args&) {
  int64_t n = 0;
  bool inword = false;
  for (unsigned char c : to_str(v)) {
    const bool w = std::isalnum(c) || c == '_' || c >= 0x80;
    if (w && !inword) ++n;
    inword = w;
  }
  return Value::integer(n);
}
Value filter_indent(Interp&, const std::string&, Value v, Args& a) {
  return Value::str(do_indent(to_str(v), a.get(0, "width", Value::integer(4)),
                              a.get(1, "first", Value::boolean(false)).truthy(),
                              a.get(2, "blank", Value::boolean(false)).truthy()));
}
Value filter_center(Interp& in, const std::string&, Value v, Args& a) {
  const int64_t width = need_int(in, a.get(0, "width", Value::integer(80)), "center");
  std::string s = to_str(v);
  const int64_t n = int64_t(to_u32(s).size());
  if (width <= n) return Value::str(s);
  in.check_size(size_t(width));
  const int64_t pad = width - n, left = pad / 2 + (pad & width & 1);
  return Value::str(std::string(size_t(left), ' ') + s + std::string(size_t(pad - left), ' '));
}

// Any value.
Value filter_length(Interp& in, const std::string&, Value v, Args&) {
  return Value::integer(int64_t(py_len(in, v)));
}
Value filter_default(Interp&, const std::string&, Value v, Args& a) {
  const bool boolean = a.get(1, "boolean", Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy()))
    return a.get(0, "default_value", Value::str(""));
  return v;
}
Value filter_attr(Interp& in, const std::string&, Value v, Args& a) {
  return in.getattr(v, need_str(in, a.get(0, "name"), "attr"));
}

// Numbers.
Value filter_int(Interp& in, const std::string&, Value v, Args& a) {
  const Value def = a.get(0, "default", Value::integer(0));
  if (v.kind == VK::kInt) return v;
  if (v.kind == VK::kBool) return Value::integer(v.b);
  // Past 64 bits jinja2 returns a Python big integer; lynx raises rather than wrap.
  auto from_double = [&](double d) {
    if (!(d > -9.3e18 && d < 9.3e18) || std::trunc(d) < -9223372036854775807.0 - 1 ||
        std::trunc(d) >= 9223372036854775807.0)
      in.int_overflow("int");
    return Value::integer(int64_t(d));
  };
  if (v.kind == VK::kFloat) return std::isfinite(v.f) ? from_double(v.f) : def;
  if (v.is_string()) {
    const std::string s = py_strip(v.s, Value::none(), true, true);
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end && *end == 0) {
      if (errno == ERANGE) in.int_overflow("int");
      return Value::integer(x);
    }
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == 0 && std::isfinite(d)) return from_double(d);
  }
  return def;
}
Value filter_float(Interp&, const std::string&, Value v, Args& a) {
  const Value def = a.get(0, "default", Value::real(0));
  if (v.is_number()) return Value::real(v.as_double());
  if (v.is_string()) {
    char* end = nullptr;
    const std::string s = py_strip(v.s, Value::none(), true, true);
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == 0) return Value::real(d);
  }
  return def;
}
Value filter_abs(Interp& in, const std::string&, Value v, Args&) {
  if (v.kind == VK::kFloat) return Value::real(std::fabs(v.f));
  const int64_t x = need_int(in, v, "abs");
  if (x == INT64_MIN) in.int_overflow("abs");
  return Value::integer(x < 0 ? -x : x);
}
Value filter_round(Interp& in, const std::string&, Value v, Args& a) {
  const int64_t prec = need_int(in, a.get(0, "precision", Value::integer(0)), "round");
  const std::string method = to_str(a.get(1, "method", Value::str("common")));
  if (!v.is_number()) in.fail("round expects a number");
  const double m = std::pow(10.0, double(prec));
  double x = v.as_double() * m;
  // Python's round() (method 'common') rounds half to even, as nearbyint does by default.
  x = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
  return Value::real(x / m);
}

// Sequences.
Value filter_join(Interp& in, const std::string&, Value v, Args& a) {
  const std::string sep = to_str(a.get(0, "d", Value::str("")));
  const Value attr = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& x : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attr.is_none() ? x : attr_path(in, x, to_str(attr)));
    in.check_size(out.size());
  }
  return Value::str(std::move(out));
}
Value filter_first_last(Interp& in, const std::string& name, Value v, Args&) {
  List items = in.iterate(v);
  if (items.empty()) return Value::undefined(name);
  return name == "first" ? items.front() : items.back();
}
Value filter_list(Interp& in, const std::string&, Value v, Args&) {
  return Value::new_list(in.iterate(v));
}
Value filter_items(Interp& in, const std::string&, Value v, Args&) {
  return items_of_impl(in, v);
}
Value filter_reverse(Interp& in, const std::string&, Value v, Args&) {
  if (v.is_string()) {
    std::u32string u = to_u32(v.s);
    std::reverse(u.begin(), u.end());
    return Value::str(to_utf8(u));
  }
  List items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::new_list(std::move(items));
}
Value filter_map(Interp& in, const std::string&, Value v, Args& a) {
  List out;
  const Value attr = a.get(99, "attribute");
  for (const Value& x : in.iterate(v)) {
    if (!attr.is_undefined()) {
      Value r = attr_path(in, x, to_str(attr));
      if (r.is_undefined() && a.has(99, "default")) r = a.get(99, "default");
      out.push_back(std::move(r));
    } else {
      if (a.pos.empty()) in.fail("map needs a filter name or attribute=");
      Args fa;
      fa.pos.assign(a.pos.begin() + 1, a.pos.end());
      fa.kw = a.kw;
      out.push_back(apply_filter(in, need_str(in, a.pos[0], "map"), x, fa));
    }
  }
  return Value::new_list(std::move(out));
}
Value filter_select(Interp& in, const std::string& name, Value v, Args& a) {
  return select(in, v, a, false, name == "select");
}
Value filter_selectattr(Interp& in, const std::string& name, Value v, Args& a) {
  return select(in, v, a, true, name == "selectattr");
}
Value filter_unique(Interp& in, const std::string&, Value v, Args& a) {
  const bool cs = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  const Value attr = a.get(1, "attribute", Value::none());
  List out, seen;
  for (const Value& x : in.iterate(v)) {
    in.step();
    Value key = sort_key(attr.is_none() ? x : attr_path(in, x, to_str(attr)), cs);
    bool dup = false;
    for (const Value& s : seen) dup = dup || equals(s, key);
    if (!dup) {
      seen.push_back(key);
      out.push_back(x);
    }
  }
  return Value::new_list(std::move(out));
}
Value filter_sort_min_max(Interp& in, const std::string& name, Value v, Args& a) {
  const bool reverse = name == "sort" && a.get(0, "reverse", Value::boolean(false)).truthy();
  const bool cs = a.get(name == "sort" ? 1 : 0, "case_sensitive", Value::boolean(false)).truthy();
  const Value attr = a.get(name == "sort" ? 2 : 1, "attribute", Value::none());
  List items = in.iterate(v);
  auto key = [&](const Value& x) {
    return sort_key(attr.is_none() ? x : attr_path(in, x, to_str(attr)), cs);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? cmp_less(in, key(y), key(x)) : cmp_less(in, key(x), key(y));
  });
  if (name == "sort") return Value::new_list(std::move(items));
  if (items.empty()) return Value::undefined(name);
  return name == "min" ? items.front() : items.back();
}
Value filter_sum(Interp& in, const std::string&, Value v, Args& a) {
  const Value attr = a.get(0, "attribute", Value::none());
  Value acc = a.get(1, "start", Value::integer(0));
  for (const Value& x : in.iterate(v)) {
    const Value y = attr.is_none() ? x : attr_path(in, x, to_str(attr));
    if (!acc.is_number() || !y.is_number()) in.fail("sum of non-numbers");
    int64_t r;
    if (acc.kind == VK::kFloat || y.kind == VK::kFloat)
      acc = Value::real(acc.as_double() + y.as_double());
    else if (__builtin_add_overflow(need_int(in, acc, "sum"), need_int(in, y, "sum"), &r))
      in.int_overflow("sum");
    else
      acc = Value::integer(r);
  }
  return acc;
}
Value filter_dictsort(Interp& in, const std::string&, Value v, Args& a) {
  const bool cs = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  const bool by_value = to_str(a.get(1, "by", Value::str("key"))) == "value";
  const bool reverse = a.get(2, "reverse", Value::boolean(false)).truthy();
  List items = *items_of_impl(in, v).list;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key((*x.list)[by_value], cs), ky = sort_key((*y.list)[by_value], cs);
    return reverse ? cmp_less(in, ky, kx) : cmp_less(in, kx, ky);
  });
  return Value::new_list(std::move(items));
}

// Every filter, by the names Jinja2 gives it: a new filter is a handler and a row.
struct FilterRow {
  std::string_view name;
  FilterFn fn;
};
constexpr FilterRow kFilters[] = {
    {"tojson", filter_tojson},
    {"safe", filter_string},
    {"string", filter_string},
    {"e", filter_escape},
    {"escape", filter_escape},
    {"forceescape", filter_escape},
    {"length", filter_length},
    {"count", filter_length},
    {"default", filter_default},
    {"d", filter_default},
    {"trim", filter_trim},
    {"upper", filter_upper},
    {"lower", filter_lower},
    {"capitalize", filter_capitalize},
    {"title", filter_title},
    {"replace", filter_replace},
    {"join", filter_join},
    {"first", filter_first_last},
    {"last", filter_first_last},
    {"list", filter_list},
    {"items", filter_items},
    {"reverse", filter_reverse},
    {"int", filter_int},
    {"float", filter_float},
    {"abs", filter_abs},
    {"round", filter_round},
    {"wordcount", filter_wordcount},
    {"indent", filter_indent},
    {"map", filter_map},
    {"select", filter_select},
    {"reject", filter_select},
    {"selectattr", filter_selectattr},
    {"rejectattr", filter_selectattr},
    {"unique", filter_unique},
    {"sort", filter_sort_min_max},
    {"min", filter_sort_min_max},
    {"max", filter_sort_min_max},
    {"sum", filter_sum},
    {"dictsort", filter_dictsort},
    {"attr", filter_attr},
    {"center", filter_center},
};

}  // namespace

Value apply_filter(Interp& in, const std::string& name, Value v, Args& a) {
  in.step();
  for (const FilterRow& f : kFilters)
    if (f.name == name) return f.fn(in, name, std::move(v), a);
  in.fail("unknown filter '" + name + "'");
}

bool apply_test(Interp& in, const std::string& name, const Value& v, Args& a) {
  in.step();
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.namespace_;
  if (name == "iterable")
    return v.is_string() || v.is_list() || (v.is_dict() && !v.namespace_) || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || (v.is_dict() && !v.namespace_);
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == VK::kInt;
  if (name == "float") return v.kind == VK::kFloat;
  if (name == "boolean") return v.kind == VK::kBool;
  if (name == "true") return v.kind == VK::kBool && v.b;
  if (name == "false") return v.kind == VK::kBool && !v.b;
  if (name == "callable") return v.kind == VK::kFn;
  if (name == "lower") return v.is_string() && lower(v.s) == v.s;
  if (name == "upper") return v.is_string() && upper(v.s) == v.s;
  if (name == "odd" || name == "even") {
    const int64_t x = need_int(in, v, "odd/even");
    return (((x % 2) + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const int64_t d = need_int(in, a.get(0, "num"), "divisibleby");
    if (d == 0) in.fail("divisibleby 0");
    return need_int(in, v, "divisibleby") % d == 0;
  }
  const Value other = a.get(0, "other");
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other);
  if (name == "ne" || name == "!=") return !equals(v, other);
  if (name == "sameas") {
    if (v.kind != other.kind) return false;
    if (v.is_list()) return v.list == other.list;
    if (v.is_dict()) return v.dict == other.dict;
    return equals(v, other);
  }
  if (name == "in") {
    if (other.is_string()) return v.is_string() && other.s.find(v.s) != std::string::npos;
    if (other.is_dict()) {
      if (!hashable(v)) in.fail("unhashable type: '" + type_name(v) + "'");
      return other.dict->find(v) != nullptr;
    }
    for (const Value& x : in.iterate(other))
      if (equals(v, x)) return true;
    return false;
  }
  if (name == "lt" || name == "lessthan" || name == "<") return cmp_less(in, v, other);
  if (name == "gt" || name == "greaterthan" || name == ">") return cmp_less(in, other, v);
  if (name == "le" || name == "<=") return !cmp_less(in, other, v);
  if (name == "ge" || name == ">=") return !cmp_less(in, v, other);
  if (name == "escaped") return false;
  in.fail("unknown test '" + name + "'");
}
}  // namespace lynx::tmpl
