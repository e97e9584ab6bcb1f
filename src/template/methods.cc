// Methods of Python's str, list and dict that templates call (message.content.split('x'),
// tool.get('function'), ...) and the global functions of the render context.
#include <algorithm>
#include <cctype>
#include <ctime>

#include "template/interp.h"

namespace lynx::tmpl {
namespace {

using VK = Value::Kind;

std::string arg_str(Interp& in, const Args& a, size_t k, const char* name, const char* what) {
  const Value v = a.get(k, name);
  if (!v.is_string())
    in.fail(std::string(what) + " expects a string argument, got " + type_name(v));
  return v.s;
}

int64_t arg_int(Interp& in, const Args& a, size_t k, const char* name, int64_t def) {
  const Value v = a.get(k, name, Value::integer(def));
  if (v.kind == VK::kInt) return v.i;
  if (v.kind == VK::kBool) return v.b;
  if (v.is_none()) return def;
  in.fail(std::string("'") + name + "' must be an integer, got " + type_name(v));
}

// startswith/endswith accept a string or a tuple of strings.
bool affix(Interp& in, const std::string& s, const Value& x, bool start) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) in.fail("startswith/endswith expects strings, got " + type_name(p));
    if (p.s.size() > s.size()) return false;
    return start ? s.compare(0, p.s.size(), p.s) == 0
                 : s.compare(s.size() - p.s.size(), p.s.size(), p.s) == 0;
  };
  if (x.is_list()) {
    for (const Value& p : *x.list)
      if (one(p)) return true;
    return false;
  }
  return one(x);
}

// str.format with {} / {0} / {name} fields (no format specs beyond the empty one).
std::string py_format(Interp& in, const std::string& f, const Args& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < f.size(); ++k) {
    const char c = f[k];
    if (c == '{' && k + 1 < f.size() && f[k + 1] == '{') {
      out += '{';
      ++k;
    } else if (c == '}' && k + 1 < f.size() && f[k + 1] == '}') {
      out += '}';
      ++k;
    } else if (c == '{') {
      const size_t end = f.find('}', k);
      if (end == std::string::npos) in.fail("format: single '{'");
      const std::string field = f.substr(k + 1, end - k - 1);
      Value v;
      if (field.empty())
        v = a.get(auto_idx++, "");
      else if (std::all_of(field.begin(), field.end(), ::isdigit))
        v = a.get(std::stoul(field), "");
      else
        v = a.get(size_t(-1), field);
      if (v.is_undefined()) in.fail("format: no argument for {" + field + "}");
      out += to_str(v);
      k = end;
    } else {
      out += c;
    }
    in.check_size(out.size());
  }
  return out;
}

Value string_method(Interp& in, const Value& obj, const std::string& name) {
  const std::string s = obj.s;
  auto fn = [](auto f) { return Value::function(std::move(f)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return fn([s, l, r](Interp&, Args& a) {
      return Value::str(py_strip(s, a.get(0, "chars", Value::none()), l, r));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return fn([s, right](Interp& in, Args& a) {
      return py_split(in, s, a.get(0, "sep", Value::none()), arg_int(in, a, 1, "maxsplit", -1),
                      right);
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return fn([s, start](Interp& in, Args& a) {
      return Value::boolean(affix(in, s, a.get(0, "prefix"), start));
    });
  }
  if (name == "upper" || name == "lower") {
    const bool up = name == "upper";
    return fn([s, up](Interp&, Args&) {
      std::string r = s;
      for (char& c : r)
        c = char(up ? std::toupper(static_cast<unsigned char>(c))
                    : std::tolower(static_cast<unsigned char>(c)));
      return Value::str(std::move(r));
    });
  }
  if (name == "title" || name == "capitalize") {
    return fn([s, name](Interp& in, Args&) {
      Args none;
      return apply_filter(in, name, Value::str(s), none);
    });
  }
  if (name == "replace") {
    return fn([s](Interp& in, Args& a) {
      return Value::str(replace_all(s, arg_str(in, a, 0, "old", "replace"),
                                    arg_str(in, a, 1, "new", "replace"),
                                    arg_int(in, a, 2, "count", -1), in));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return fn([s, name](Interp& in, Args& a) {
      const std::string sub = arg_str(in, a, 0, "sub", name.c_str());
      if (name == "count") {
        if (sub.empty()) return Value::integer(int64_t(to_u32(s).size()) + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      const size_t p = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (name.find("index") != std::string::npos) in.fail("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(int64_t(to_u32(s.substr(0, p)).size()));  // code points, as Python
    });
  }
  if (name == "join") {
    return fn([s](Interp& in, Args& a) {
      std::string out;
      bool first = true;
      for (const Value& x : in.iterate(a.get(0, "iterable"))) {
        if (!x.is_string()) in.fail("join: sequence item is " + type_name(x) + ", not str");
        if (!first) out += s;
        first = false;
        out += x.s;
        in.check_size(out.size());
      }
      return Value::str(std::move(out));
    });
  }
  if (name == "splitlines") {
    return fn([s](Interp& in, Args&) {
      Args none;
      List out;
      std::string cur;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '\n' || s[k] == '\r') {
          if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
          out.push_back(Value::str(std::move(cur)));
          cur.clear();
        } else {
          cur += s[k];
        }
      }
      if (!cur.empty()) out.push_back(Value::str(std::move(cur)));
      return Value::new_list(std::move(out));
    });
  }
  if (name == "format")
    return fn([s](Interp& in, Args& a) { return Value::str(py_format(in, s, a)); });
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "islower" || name == "isupper") {
    return fn([s, name](Interp&, Args&) {
      if (s.empty()) return Value::boolean(false);
      bool ok = true, cased = false;
      for (unsigned char c : s) {
        if (name == "isdigit")
          ok = ok && std::isdigit(c);
        else if (name == "isalpha")
          ok = ok && std::isalpha(c);
        else if (name == "isalnum")
          ok = ok && std::isalnum(c);
        else if (name == "isspace")
          ok = ok && std::isspace(c);
        else if (name == "islower") {
          ok = ok && !std::isupper(c);
          cased = cased || std::islower(c);
        } else {
          ok = ok && !std::islower(c);
          cased = cased || std::isupper(c);
        }
      }
      if (name == "islower" || name == "isupper") ok = ok && cased;
      return Value::boolean(ok);
    });
  }
  return Value::undefined(name);
}

Value list_method(Interp& in, const Value& obj, const std::string& name) {
  auto l = obj.list;
  auto fn = [](auto f) { return Value::function(std::move(f)); };
  // transformers renders in an immutable sandbox where these raise; lynx allows them (a
  // template that uses them cannot have a Hugging Face reference output anyway).
  if (name == "append") {
    return fn([l](Interp& in, Args& a) {
      in.check_items(l->size() + 1);
      const Value item = a.get(0, "object");
      if (item.is_list() && item.list == l) in.fail("appending a list to itself");
      l->push_back(item);
      return Value::none();
    });
  }
  if (name == "extend") {
    return fn([l](Interp& in, Args& a) {
      List more = in.iterate(a.get(0, "iterable"));
      in.check_items(l->size() + more.size());
      l->insert(l->end(), more.begin(), more.end());
      return Value::none();
    });
  }
  if (name == "pop") {
    return fn([l](Interp& in, Args& a) {
      if (l->empty()) in.fail("pop from empty list");
      int64_t k = arg_int(in, a, 0, "index", -1);
      if (k < 0) k += int64_t(l->size());
      if (k < 0 || k >= int64_t(l->size())) in.fail("pop index out of range");
      Value v = (*l)[size_t(k)];
      l->erase(l->begin() + k);
      return v;
    });
  }
  if (name == "index" || name == "count") {
    return fn([l, name](Interp& in, Args& a) {
      const Value x = a.get(0, "value");
      int64_t n = 0;
      for (size_t k = 0; k < l->size(); ++k) {
        if (!equals((*l)[k], x)) continue;
        if (name == "index") return Value::integer(int64_t(k));
        ++n;
      }
      if (name == "index") in.fail("value is not in list");
      return Value::integer(n);
    });
  }
  (void)in;
  return Value::undefined(name);
}

Value dict_method(Interp& in, const Value& obj, const std::string& name) {
  auto d = obj.dict;
  auto fn = [](auto f) { return Value::function(std::move(f)); };
  if (name == "get") {
    return fn([d](Interp& in, Args& a) {
      const Value k = a.get(0, "key");
      if (!hashable(k)) in.fail("unhashable type: '" + type_name(k) + "'");
      if (const Value* v = d->find(k)) return *v;
      return a.get(1, "default", Value::none());
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return fn([d, name](Interp& in, Args&) {
      in.charge(d->items.size());
      List out;
      for (const auto& [k, v] : d->items) {
        if (name == "keys")
          out.push_back(k);
        else if (name == "values")
          out.push_back(v);
        else {
          Value t = Value::new_list({k, v});
          t.tuple = true;
          out.push_back(std::move(t));
        }
      }
      return Value::new_list(std::move(out));
    });
  }
  if (name == "update") {
    return fn([d](Interp& in, Args& a) {
      const Value o = a.get(0, "other", Value::none());
      if (o.is_dict()) {
        in.charge(o.dict->items.size());
        for (const auto& [k, v] : o.dict->items) d->set(k, v);
      }
      for (const auto& [k, v] : a.kw) d->set(k, v);
      in.check_items(d->items.size());
      return Value::none();
    });
  }
  (void)in;
  return Value::undefined(name);
}

}  // namespace

Value method(Interp& in, const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case VK::kString:
      return string_method(in, obj, name);
    case VK::kList:
      return list_method(in, obj, name);
    case VK::kDict:
      return dict_method(in, obj, name);
    default:
      return Value::undefined(name);
  }
}

void add_globals(Interp& in, Value& g) {
  auto def = [&](const char* name, Fn f) {
    if (!g.dict->find(name)) g.dict->set(name, Value::function(std::move(f)));
  };
  def("range", [](Interp& in, Args& a) {
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = arg_int(in, a, 0, "stop", 0);
    } else {
      start = arg_int(in, a, 0, "start", 0);
      stop = arg_int(in, a, 1, "stop", 0);
      step = arg_int(in, a, 2, "step", 1);
    }
    if (step == 0) in.fail("range() arg 3 must not be zero");
    const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                               : (start > stop ? (start - stop - step - 1) / -step : 0);
    in.check_items(size_t(n));
    List out;
    for (int64_t k = 0; k < n; ++k) out.push_back(Value::integer(start + k * step));
    return Value::new_list(std::move(out));
  });
  def("namespace", [](Interp& in, Args& a) {
    Value ns = Value::new_dict();
    ns.namespace_ = true;
    for (const Value& p : a.pos)
      if (p.is_dict()) {
        in.charge(p.dict->items.size());
        for (const auto& [k, v] : p.dict->items) ns.dict->set(k, v);
      }
    for (const auto& [k, v] : a.kw) ns.dict->set(k, v);
    return ns;
  });
  def("dict", [](Interp& in, Args& a) {
    Value d = Value::new_dict();
    for (const Value& p : a.pos)
      if (p.is_dict()) {
        in.charge(p.dict->items.size());
        for (const auto& [k, v] : p.dict->items) d.dict->set(k, v);
      }
    for (const auto& [k, v] : a.kw) d.dict->set(k, v);
    return d;
  });
  def("raise_exception", [](Interp& in, Args& a) -> Value {
    in.fail("raise_exception: " + to_str(a.get(0, "message")));
  });
  def("strftime_now", [](Interp& in, Args& a) {
    const std::string fmt = to_str(a.get(0, "format"));
    const int64_t now_opt = in.options().now;
    const std::time_t t = now_opt >= 0 ? std::time_t(now_opt) : std::time(nullptr);
    std::tm tm{};
    if (now_opt >= 0)
      gmtime_r(&t, &tm);
    else
      localtime_r(&t, &tm);
    char buf[512];
    const size_t n = fmt.size() < 200 ? std::strftime(buf, sizeof buf, fmt.c_str(), &tm) : 0;
    return Value::str(std::string(buf, n));
  });
}

}  // namespace lynx::tmpl
