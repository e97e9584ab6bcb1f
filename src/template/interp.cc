// Statement execution and expression evaluation with Jinja2's semantics (default Undefined:
// an undefined name prints as empty and is false; using an attribute of it, adding to it or
// calling it is an error).
#include "template/interp.h"

#include <cmath>

namespace lynx::tmpl {

using EK = Expr::Kind;
using SK = Stmt::Kind;

void Interp::fail(const std::string& what) const {
  throw Error("template: line " + std::to_string(line_) + ": " + what);
}

Value* Interp::Scope::find(const std::string& name) {
  for (Scope* s = this; s; s = s->parent)
    for (auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Interp::Scope::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars)
    if (k == name) {
      old = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

std::string Interp::render(const Body& body, const Value& globals) {
  Scope root;
  Value g = globals;
  add_globals(*this, g);
  for (auto& [k, v] : g.dict->items) root.vars.emplace_back(k.s, v);  // JSON: str keys
  scope_ = root_ = &root;
  std::string out;
  exec(body, out);
  scope_ = root_ = nullptr;
  return out;
}

Interp::Flow Interp::exec(const Body& body, std::string& out) {
  DepthGuard g(*this);
  for (const StmtP& sp : body) {
    const Stmt& s = *sp;
    step();
    line_ = s.line;
    switch (s.kind) {
      case SK::kText:
        append(out, s.text);
        break;
      case SK::kOutput:
        append(out, to_str(eval(*s.expr)));
        break;
      case SK::kIf: {
        bool done = false;
        for (const auto& [cond, b] : s.branches) {
          if (eval(*cond).truthy()) {
            if (Flow f = exec(b, out); f != Flow::kNormal) return f;
            done = true;
            break;
          }
        }
        if (!done)
          if (Flow f = exec(s.else_body, out); f != Flow::kNormal) return f;
        break;
      }
      case SK::kFor:
        exec_for(s, out);
        break;
      case SK::kSet:
        exec_set(s, eval(*s.expr));
        break;
      case SK::kSetBlock: {
        std::string text;
        exec(s.body, text);
        Value v = Value::str(std::move(text));
        if (s.filter) v = eval_filter(*s.filter, std::move(v));
        scope_->set(s.targets[0], std::move(v));
        break;
      }
      case SK::kFilterBlock: {
        std::string text;
        exec(s.body, text);
        append(out, to_str(eval_filter(*s.filter, Value::str(std::move(text)))));
        break;
      }
      case SK::kMacro:
        scope_->set(s.name, make_macro(s));
        break;
      case SK::kCallBlock: {
        Scope* at = scope_;
        const Body* b = &s.body;
        caller_ = Value::function([this, at, b](Interp&, Args&) {
          Scope inner;
          inner.parent = at;
          Scope* saved = scope_;
          scope_ = &inner;
          std::string text;
          exec(*b, text);
          scope_ = saved;
          return Value::str(std::move(text));
        });
        append(out, to_str(eval(*s.expr)));
        caller_ = Value();
        break;
      }
      case SK::kBreak:
        return Flow::kBreak;
      case SK::kContinue:
        return Flow::kContinue;
      case SK::kScope:
        if (Flow f = exec(s.body, out); f != Flow::kNormal) return f;
        break;
    }
  }
  return Flow::kNormal;
}

Interp::Flow Interp::exec_for(const Stmt& s, std::string& out) {
  const Value seq = eval(*s.expr);
  List all = iterate(seq);
  Scope scope;
  scope.parent = scope_;
  Scope* saved = scope_;
  scope_ = &scope;
  auto bind = [&](const Value& item) {
    if (s.targets.size() == 1) {
      scope.set(s.targets[0], item);
      return;
    }
    List parts = iterate(item);
    if (parts.size() != s.targets.size())
      fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
           std::to_string(s.targets.size()) + " loop variables");
    for (size_t k = 0; k < parts.size(); ++k) scope.set(s.targets[k], parts[k]);
  };
  // The `if` filter decides which items the loop sees, before loop.length is known.
  if (s.cond) {
    List kept;
    for (const Value& item : all) {
      step();
      bind(item);
      if (eval(*s.cond).truthy()) kept.push_back(item);
    }
    all = std::move(kept);
  }
  const size_t n = all.size();
  for (size_t k = 0; k < n; ++k) {
    step();
    scope.vars.clear();  // names set in the body last only for one iteration, as in Jinja2
    bind(all[k]);
    Value loop = Value::new_dict();
    Dict& d = *loop.dict;
    d.set("index0", Value::integer(int64_t(k)));
    d.set("index", Value::integer(int64_t(k + 1)));
    d.set("revindex0", Value::integer(int64_t(n - k - 1)));
    d.set("revindex", Value::integer(int64_t(n - k)));
    d.set("first", Value::boolean(k == 0));
    d.set("last", Value::boolean(k + 1 == n));
    d.set("length", Value::integer(int64_t(n)));
    d.set("depth", Value::integer(1));
    d.set("depth0", Value::integer(0));
    d.set("previtem", k > 0 ? all[k - 1] : Value::undefined("previtem"));
    d.set("nextitem", k + 1 < n ? all[k + 1] : Value::undefined("nextitem"));
    d.set("cycle", Value::function([k](Interp& in, Args& a) {
            if (a.pos.empty()) in.fail("loop.cycle needs at least one argument");
            return a.pos[k % a.pos.size()];
          }));
    scope.set("loop", loop);
    if (exec(s.body, out) == Flow::kBreak) break;
  }
  if (n == 0) {
    scope.vars.clear();
    exec(s.else_body, out);
  }
  scope_ = saved;
  return Flow::kNormal;
}

void Interp::exec_set(const Stmt& s, Value v) {
  if (s.attr_target) {
    Value* ns = scope_->find(s.targets[0]);
    if (!ns || !ns->is_dict() || !ns->namespace_)
      fail("cannot assign attribute '" + s.targets[1] + "' of '" + s.targets[0] +
           "': not a namespace");
    ns->dict->set(s.targets[1], std::move(v));
    return;
  }
  if (s.targets.size() == 1) {
    scope_->set(s.targets[0], std::move(v));
    return;
  }
  List parts = iterate(v);
  if (parts.size() != s.targets.size()) fail("cannot unpack values in set");
  for (size_t k = 0; k < parts.size(); ++k) scope_->set(s.targets[k], parts[k]);
}

// A macro is a function that renders its body in a fresh scope whose parent is the template's
// top level, with its parameters bound; it returns the text.
Value Interp::make_macro(const Stmt& s) {
  const Stmt* m = &s;
  return Value::function([this, m](Interp&, Args& a) {
    DepthGuard g(*this);
    Scope scope;
    scope.parent = root_;
    Scope* saved = scope_;
    scope_ = &scope;
    if (a.pos.size() > m->params.size())
      fail("macro '" + m->name + "' takes " + std::to_string(m->params.size()) + " arguments, " +
           std::to_string(a.pos.size()) + " given");
    for (size_t k = 0; k < m->params.size(); ++k) {
      const auto& [pname, def] = m->params[k];
      Value v = a.get(k, pname, Value::undefined(pname));
      if (v.is_undefined() && def && !a.has(k, pname)) v = eval(*def);
      scope.set(pname, std::move(v));
    }
    for (const auto& [k, v] : a.kw) {
      bool known = false;
      for (const auto& p : m->params) known = known || p.first == k;
      if (!known) fail("macro '" + m->name + "' has no parameter named '" + k + "'");
    }
    if (!caller_.is_undefined()) {
      scope.set("caller", caller_);
      caller_ = Value();
    }
    std::string text;
    exec(m->body, text);
    scope_ = saved;
    return Value::str(std::move(text));
  });
}

Value Interp::lookup(const std::string& name) {
  if (Value* v = scope_->find(name)) return *v;
  return Value::undefined(name);
}

List Interp::iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return *v.list;
    case Value::Kind::kDict: {
      if (v.namespace_) fail("'Namespace' object is not iterable");
      List keys;
      keys.reserve(v.dict->items.size());
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t c : to_u32(v.s)) chars.push_back(Value::str(to_utf8(std::u32string(1, c))));
      return chars;
    }
    default:
      fail("'" + type_name(v) + "' object is not iterable");
  }
}

Value Interp::call(const Value& fn, Args& args) {
  if (fn.kind != Value::Kind::kFn) {
    if (fn.is_undefined()) fail("'" + fn.s + "' is undefined");
    fail("'" + type_name(fn) + "' object is not callable");
  }
  return (*fn.fn)(*this, args);
}

Value Interp::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined())
    fail("'" + (obj.s.empty() ? std::string("value") : obj.s) + "' is undefined (reading ." + name +
         ")");
  if (obj.is_dict()) {
    if (!obj.namespace_) {
      Value m = method(*this, obj, name);
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = obj.dict->find(name)) return *v;
    return Value::undefined(name);
  }
  return method(*this, obj, name);
}

Value Interp::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined())
    fail("'" + (obj.s.empty() ? std::string("value") : obj.s) + "' is undefined (reading [" +
         repr(key) + "])");
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict->find(key.s)) return *v;
    return obj.namespace_ ? Value::undefined(key.s) : method(*this, obj, key.s);
  }
  // d[1], d[none], d[(1, 2)]: a key of any hashable type. jinja2 turns the TypeError of an
  // unhashable key (and a Namespace's lack of __getitem__) into Undefined, as a missing key.
  if (obj.is_dict()) {
    if (obj.namespace_ || !hashable(key)) return Value::undefined();
    if (const Value* v = obj.dict->find(key)) return *v;
    return Value::undefined();
  }
  if ((obj.is_list() || obj.is_string()) && key.is_number() && key.kind != Value::Kind::kFloat) {
    const int64_t idx = key.kind == Value::Kind::kBool ? key.b : key.i;
    if (obj.is_list()) {
      const int64_t n = int64_t(obj.list->size());
      const int64_t k = idx < 0 ? idx + n : idx;
      if (k < 0 || k >= n) return Value::undefined();
      return (*obj.list)[size_t(k)];
    }
    const std::u32string u = to_u32(obj.s);
    const int64_t n = int64_t(u.size());
    const int64_t k = idx < 0 ? idx + n : idx;
    if (k < 0 || k >= n) return Value::undefined();
    return Value::str(to_utf8(u.substr(size_t(k), 1)));
  }
  if (key.is_string()) return getattr(obj, key.s);
  return Value::undefined();
}

Args Interp::eval_args(const Expr& e) {
  Args a;
  for (const ExprP& x : e.items) a.pos.push_back(eval(*x));
  for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x));
  return a;
}

Value Interp::eval_filter(const Expr& e, Value input) {
  // A block set / filter block filters its text: the innermost filter's input is a placeholder.
  if (e.kind != EK::kFilter) return input;
  Value in = eval_filter(*e.a, std::move(input));
  Args a = eval_args(e);
  return apply_filter(*this, e.name, std::move(in), a);
}

Value Interp::eval(const Expr& e) {
  DepthGuard g(*this);
  step();
  switch (e.kind) {
    case EK::kLiteral:
      return e.value;
    case EK::kName:
      return lookup(e.name);
    case EK::kList:
    case EK::kTuple: {
      Value v = Value::new_list();
      for (const ExprP& x : e.items) v.list->push_back(eval(*x));
      v.tuple = e.kind == EK::kTuple;
      return v;
    }
    case EK::kDict: {
      Value v = Value::new_dict();
      for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
        Value key = eval(*e.items[k]);
        if (!hashable(key)) fail("unhashable type: '" + type_name(key) + "'");
        v.dict->set(std::move(key), eval(*e.items[k + 1]));
      }
      return v;
    }
    case EK::kAttr:
      return getattr(eval(*e.a), e.name);
    case EK::kIndex: {
      Value obj = eval(*e.a);
      return getitem(obj, eval(*e.b));
    }
    case EK::kSlice:
      return eval_slice(e);
    case EK::kCall: {
      Value fn = eval(*e.a);
      Args a = eval_args(e);
      const int saved = line_;
      line_ = e.line;
      Value r = call(fn, a);
      line_ = saved;
      return r;
    }
    case EK::kFilter: {
      Value in = eval(*e.a);
      Args a = eval_args(e);
      line_ = e.line;
      return apply_filter(*this, e.name, std::move(in), a);
    }
    case EK::kTest: {
      Value v = eval(*e.a);
      Args a = eval_args(e);
      line_ = e.line;
      return Value::boolean(apply_test(*this, e.name, v, a) != e.negated);
    }
    case EK::kNeg:
    case EK::kPos: {
      Value v = eval(*e.a);
      if (v.kind == Value::Kind::kFloat) return Value::real(e.kind == EK::kNeg ? -v.f : v.f);
      if (v.is_number()) {
        const int64_t x = v.kind == Value::Kind::kBool ? v.b : v.i;
        if (e.kind == EK::kNeg && x == INT64_MIN) int_overflow("-");
        return Value::integer(e.kind == EK::kNeg ? -x : x);
      }
      fail("bad operand type for unary " + std::string(e.kind == EK::kNeg ? "-" : "+") + ": '" +
           type_name(v) + "'");
    }
    case EK::kNot:
      return Value::boolean(!eval(*e.a).truthy());
    case EK::kAnd: {
      Value l = eval(*e.a);
      return l.truthy() ? eval(*e.b) : l;
    }
    case EK::kOr: {
      Value l = eval(*e.a);
      return l.truthy() ? l : eval(*e.b);
    }
    case EK::kCond:
      if (eval(*e.b).truthy()) return eval(*e.a);
      return e.c ? eval(*e.c) : Value::undefined();
    case EK::kCompare:
    case EK::kBinary:
      return eval_binary(e);
  }
  fail("unknown expression");
}

Value Interp::eval_slice(const Expr& e) {
  Value obj = eval(*e.a);
  int64_t parts[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.items[k]) continue;
    Value v = eval(*e.items[k]);
    if (v.is_none()) continue;
    if (v.kind != Value::Kind::kInt) fail("slice indices must be integers or None");
    parts[k] = v.i;
    given[k] = true;
  }
  const int64_t step = parts[2];
  if (step == 0) fail("slice step cannot be zero");
  std::u32string u;
  int64_t n;
  if (obj.is_string()) {
    u = to_u32(obj.s);
    n = int64_t(u.size());
  } else if (obj.is_list()) {
    n = int64_t(obj.list->size());
  } else if (obj.is_undefined()) {
    fail("'" + obj.s + "' is undefined (slicing)");
  } else {
    fail("'" + type_name(obj) + "' object is not subscriptable");
  }
  // Python's slice.indices().
  auto clamp = [&](int64_t x, bool is_given, int64_t def) {
    if (!is_given) return def;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(parts[0], given[0], step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(parts[1], given[1], step > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) idx.push_back(k);
  if (obj.is_string()) {
    std::u32string r;
    for (int64_t k : idx) r += u[size_t(k)];
    return Value::str(to_utf8(r));
  }
  Value r = Value::new_list();
  for (int64_t k : idx) r.list->push_back((*obj.list)[size_t(k)]);
  return r;
}

namespace {

int64_t as_int(const Value& v) {
  return v.kind == Value::Kind::kBool ? v.b : v.i;
}

bool both_int(const Value& a, const Value& b) {
  return a.is_number() && b.is_number() && a.kind != Value::Kind::kFloat &&
         b.kind != Value::Kind::kFloat;
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Value Interp::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  Value a = eval(*e.a);
  Value b = eval(*e.b);
  line_ = e.line;
  if (op == "~") {
    std::string s = to_str(a);
    check_size(s.size() + to_str(b).size());
    return Value::str(s + to_str(b));
  }
  if (op == "==") return Value::boolean(equals(a, b));
  if (op == "!=") return Value::boolean(!equals(a, b));
  if (op == "in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string())
        fail("'in <string>' requires string as left operand, not " + type_name(a));
      found = b.s.find(a.s) != std::string::npos;
    } else if (b.is_dict()) {
      if (!hashable(a)) fail("unhashable type: '" + type_name(a) + "'");
      found = b.dict->find(a) != nullptr;
    } else if (b.is_list()) {
      for (const Value& x : *b.list) found = found || equals(a, x);
    } else if (!b.is_undefined()) {
      fail("argument of type '" + type_name(b) + "' is not iterable");
    }
    return Value::boolean(found != e.negated);
  }
  if (a.is_undefined() || b.is_undefined())
    fail("'" + (a.is_undefined() ? a.s : b.s) + "' is undefined (operator " + op + ")");
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int c;
    try {
      c = compare(a, b);
    } catch (const Error& err) {
      fail(err.what());
    }
    return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_size(a.s.size() + b.s.size());
      return Value::str(a.s + b.s);
    }
    if (a.is_list() && b.is_list()) {
      check_items(a.list->size() + b.list->size());
      charge(a.list->size() + b.list->size());
      List r = *a.list;
      r.insert(r.end(), b.list->begin(), b.list->end());
      return Value::new_list(std::move(r));
    }
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    const Value& count = a.is_string() || a.is_list() ? b : a;
    if (count.is_number() && count.kind != Value::Kind::kFloat) {
      const int64_t n = std::max<int64_t>(0, as_int(count));
      // Sizes are checked before multiplying (a huge count must not wrap the product), and an
      // empty sequence returns at once (Python's '' * 10**18 is instant).
      if (seq.is_string()) {
        if (seq.s.empty() || n == 0) return Value::str("");
        if (uint64_t(n) > opt_.max_output / seq.s.size()) check_size(opt_.max_output + 1);
        check_size(seq.s.size() * size_t(n));
        std::string r;
        r.reserve(seq.s.size() * size_t(n));
        for (int64_t k = 0; k < n; ++k) r += seq.s;
        return Value::str(std::move(r));
      }
      if (seq.list->empty() || n == 0) return Value::new_list();
      if (uint64_t(n) > opt_.max_items / seq.list->size()) check_items(opt_.max_items + 1);
      check_items(seq.list->size() * size_t(n));
      charge(seq.list->size() * size_t(n));
      List r;
      for (int64_t k = 0; k < n; ++k) r.insert(r.end(), seq.list->begin(), seq.list->end());
      return Value::new_list(std::move(r));
    }
  }
  if (a.is_number() && b.is_number()) {
    if (both_int(a, b)) {
      const int64_t x = as_int(a), y = as_int(b);
      int64_t r;
      if (op == "+") return __builtin_add_overflow(x, y, &r) ? int_overflow(op) : Value::integer(r);
      if (op == "-") return __builtin_sub_overflow(x, y, &r) ? int_overflow(op) : Value::integer(r);
      if (op == "*") return __builtin_mul_overflow(x, y, &r) ? int_overflow(op) : Value::integer(r);
      if (op == "/") {
        if (y == 0) fail("division by zero");
        return Value::real(double(x) / double(y));
      }
      if (op == "//" || op == "%") {
        if (y == 0) fail("integer division or modulo by zero");
        if (y == -1) {  // x // -1 overflows for INT64_MIN; x % -1 is always 0
          if (op == "%") return Value::integer(0);
          if (x == INT64_MIN) int_overflow(op);
          return Value::integer(-x);
        }
        const int64_t q = floor_div(x, y);
        return Value::integer(op == "//" ? q : x - q * y);
      }
      if (op == "**") {
        if (y < 0) return Value::real(std::pow(double(x), double(y)));
        // Square and multiply, stopping at the first product past 64 bits (|x| >= 2 then
        // overflows within 63 squarings; 0, 1 and -1 never do).
        int64_t acc = 1, base = x;
        for (int64_t k = y; k > 0; k >>= 1) {
          if ((k & 1) && __builtin_mul_overflow(acc, base, &acc)) int_overflow(op);
          if (k > 1 && __builtin_mul_overflow(base, base, &base)) int_overflow(op);
        }
        return Value::integer(acc);
      }
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::real(x + y);
    if (op == "-") return Value::real(x - y);
    if (op == "*") return Value::real(x * y);
    if (op == "/") {
      if (y == 0) fail("float division by zero");
      return Value::real(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail("float modulo by zero");
      const double q = std::floor(x / y);
      return Value::real(op == "//" ? q : x - q * y);
    }
    if (op == "**") return Value::real(std::pow(x, y));
  }
  fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) +
       "'");
}

}  // namespace lynx::tmpl
