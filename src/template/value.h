// Values of the template language: Python's object model as far as chat templates see it
// (None, bool, int, float, str, list, dict with insertion order, callables) plus Jinja2's
// Undefined. Lists and dicts are shared references, as in Python, so that a namespace or a
// list changed inside a loop is seen outside it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "lynx/error.h"

namespace lynx::tmpl {

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Args;
class Interp;
using Fn = std::function<Value(Interp&, Args&)>;

struct Value {
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFn };
  Kind kind = Kind::kUndefined;
  bool b = false;
  bool tuple = false;       // a list written as a tuple: repr uses parentheses
  bool namespace_ = false;  // a dict made by namespace(): attributes may be assigned
  int64_t i = 0;
  double f = 0;
  std::string s;  // the string; for Undefined the name that was looked up (for errors)
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Fn> fn;

  Value() = default;
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;
  // A template can chain lists or namespaces as deep as its step limit allows; releasing such
  // a chain would recurse once per level, so the last owner releases it iteratively instead.
  ~Value();

  static Value undefined(std::string name = {}) {
    Value v;
    v.s = std::move(name);
    return v;
  }
  static Value none() { return make(Kind::kNone); }
  static Value boolean(bool x) {
    Value v = make(Kind::kBool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = make(Kind::kInt);
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v = make(Kind::kFloat);
    v.f = x;
    return v;
  }
  static Value str(std::string x) {
    Value v = make(Kind::kString);
    v.s = std::move(x);
    return v;
  }
  static Value new_list(List items = {});
  static Value new_dict();
  static Value function(Fn f) {
    Value v = make(Kind::kFn);
    v.fn = std::make_shared<Fn>(std::move(f));
    return v;
  }
  static Value make(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  double as_double() const {
    return kind == Kind::kFloat ? f : double(kind == Kind::kBool ? b : i);
  }

  bool truthy() const;
};

// Python's dict: insertion-ordered, keyed by any hashable value (str, int, float, bool, None,
// tuples of those), with 1, 1.0 and True one key as in Python. Entries are only ever appended
// or have their value replaced (set()), never removed or reordered: the hash index below
// relies on it.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  // `key` must be hashable() (callers raise Python's TypeError otherwise).
  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  void set(std::string key, Value v);
  void set(Value key, Value v);

 private:
  // Small dicts are scanned; past kIndexFrom entries lookups go through a hash index of the
  // keys, so that a template adding n keys in a loop costs O(n), not O(n^2).
  static constexpr size_t kIndexFrom = 16;
  mutable std::unordered_multimap<uint64_t, uint32_t> index_;
  mutable size_t indexed_ = 0;  // items[0, indexed_) are in index_
  void update_index() const;
  template <class Eq>
  const Value* lookup(uint64_t hash, Eq eq) const;
};

// Whether a value can be a dict key (Python's hash() succeeds): not a list, dict or namespace,
// nor a tuple holding one. key_hash is equal for keys Python's == calls equal.
bool hashable(const Value& v);
uint64_t key_hash(const Value& v);

// Call arguments: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at `index` or named `name`, else `def`; marks keywords as used.
  Value get(size_t index, std::string_view name, Value def = Value::undefined()) const;
  bool has(size_t index, std::string_view name) const;
};

// Python's str() and repr() of a value (what {{ x }} prints for lists, dicts, floats...).
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string type_name(const Value& v);
// Python's == (1 == 1.0, deep for lists and dicts) and ordering (numbers, strings, lists);
// compare() throws lynx::Error for types Python cannot order.
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);
// Python's float repr: the shortest digits that round-trip, exponent form outside 1e-4..1e16.
std::string float_repr(double x);

// JSON in and out; object key order is kept, as Python's json.loads keeps it.
Value from_json(const nlohmann::ordered_json& j);
// json.dumps(x, ensure_ascii, indent, separators, sort_keys) as Python writes it.
struct DumpOptions {
  bool ensure_ascii = false;
  int indent = -1;  // < 0: None (one line)
  bool indent_is_string = false;
  std::string indent_str;
  std::string item_sep, key_sep;  // empty: Python's defaults for the indent
  bool custom_separators = false;
  bool sort_keys = false;
};
std::string dumps(const Value& v, const DumpOptions& opt);

// UTF-8 <-> code points, for Python's len(), indexing and slicing of strings.
std::u32string to_u32(std::string_view s);
std::string to_utf8(std::u32string_view s);
bool is_ascii(std::string_view s);

}  // namespace lynx::tmpl
