// Tensor type table (ggml block sizes) and the metadata Value type.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "gguf/format.h"
#include "lynx/gguf.h"

namespace lynx::gguf {
namespace {

struct TypeTraits {
  TensorType type;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
};

// Block sizes are the ggml block structs' sizes (ggml-common.h); QK_K = 256.
constexpr TypeTraits kTypes[] = {
    {TensorType::F32, "f32", 1, 4},
    {TensorType::F16, "f16", 1, 2},
    {TensorType::Q4_0, "q4_0", 32, 18},
    {TensorType::Q4_1, "q4_1", 32, 20},
    {TensorType::Q5_0, "q5_0", 32, 22},
    {TensorType::Q5_1, "q5_1", 32, 24},
    {TensorType::Q8_0, "q8_0", 32, 34},
    {TensorType::Q8_1, "q8_1", 32, 36},
    {TensorType::Q2_K, "q2_K", 256, 84},
    {TensorType::Q3_K, "q3_K", 256, 110},
    {TensorType::Q4_K, "q4_K", 256, 144},
    {TensorType::Q5_K, "q5_K", 256, 176},
    {TensorType::Q6_K, "q6_K", 256, 210},
    {TensorType::Q8_K, "q8_K", 256, 292},
    {TensorType::IQ2_XXS, "iq2_xxs", 256, 66},
    {TensorType::IQ2_XS, "iq2_xs", 256, 74},
    {TensorType::IQ3_XXS, "iq3_xxs", 256, 98},
    {TensorType::IQ1_S, "iq1_s", 256, 50},
    {TensorType::IQ4_NL, "iq4_nl", 32, 18},
    {TensorType::IQ3_S, "iq3_s", 256, 110},
    {TensorType::IQ2_S, "iq2_s", 256, 82},
    {TensorType::IQ4_XS, "iq4_xs", 256, 136},
    {TensorType::I8, "i8", 1, 1},
    {TensorType::I16, "i16", 1, 2},
    {TensorType::I32, "i32", 1, 4},
    {TensorType::I64, "i64", 1, 8},
    {TensorType::F64, "f64", 1, 8},
    {TensorType::IQ1_M, "iq1_m", 256, 56},
    {TensorType::BF16, "bf16", 1, 2},
    {TensorType::TQ1_0, "tq1_0", 256, 54},
    {TensorType::TQ2_0, "tq2_0", 256, 66},
    {TensorType::MXFP4, "mxfp4", 32, 17},
};

const TypeTraits* traits(TensorType t) {
  for (const auto& tr : kTypes) {
    if (tr.type == t) return &tr;
  }
  return nullptr;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
      return "u8";
    case ValueType::INT8:
      return "i8";
    case ValueType::UINT16:
      return "u16";
    case ValueType::INT16:
      return "i16";
    case ValueType::UINT32:
      return "u32";
    case ValueType::INT32:
      return "i32";
    case ValueType::FLOAT32:
      return "f32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::UINT64:
      return "u64";
    case ValueType::INT64:
      return "i64";
    case ValueType::FLOAT64:
      return "f64";
  }
  return "unknown";
}

const char* tensor_type_name(TensorType t) {
  const TypeTraits* tr = traits(t);
  return tr ? tr->name : "unknown";
}

bool tensor_type_info(TensorType t, int64_t* block_elems, int64_t* block_bytes) {
  const TypeTraits* tr = traits(t);
  if (!tr) return false;
  if (block_elems) *block_elems = tr->block_elems;
  if (block_bytes) *block_bytes = tr->block_bytes;
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [&out](unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) {
        hex(c);
      } else if (c == '\\') {
        out += "\\\\";
      } else {
        out += char(c);
      }
      ++i;
      continue;
    }
    // Length and minimum code point of a UTF-8 sequence by its lead byte (RFC 3629:
    // no overlong forms, no surrogates, nothing above U+10FFFF).
    int len = 0;
    uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4, cp = c & 0x07;
    }
    bool ok = len > 0 && i + size_t(len) <= s.size();
    for (int j = 1; ok && j < len; ++j) {
      const auto d = static_cast<unsigned char>(s[i + size_t(j)]);
      ok = (d & 0xc0) == 0x80;
      cp = (cp << 6) | (d & 0x3f);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    ok = ok && cp >= min_cp && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    if (!ok) {  // one bad byte, then resynchronize on the next
      hex(c);
      ++i;
    } else if (cp < 0xa0) {  // C1 controls (U+0080..U+009F): CSI and friends
      for (int j = 0; j < len; ++j) hex(static_cast<unsigned char>(s[i + size_t(j)]));
      i += size_t(len);
    } else {
      out.append(s.substr(i, size_t(len)));
      i += size_t(len);
    }
  }
  return out;
}

TensorType tensor_type_from_name(std::string_view name) {
  std::string known;
  for (const auto& tr : kTypes) {
    if (iequals(name, tr.name)) return tr.type;
    known += known.empty() ? "" : ", ";
    known += tr.name;
  }
  throw Error("unknown tensor type '" + std::string(name) + "' (known: " + known + ")");
}

size_t row_size(TensorType t, int64_t n) {
  const TypeTraits* tr = traits(t);
  if (!tr) throw Error("row_size: unknown tensor type " + std::to_string(uint32_t(t)));
  if (n < 0 || n % tr->block_elems != 0) {
    throw Error(std::string("row_size: ") + std::to_string(n) + " elements is not a multiple of " +
                tr->name + "'s block size " + std::to_string(tr->block_elems));
  }
  return static_cast<size_t>(n / tr->block_elems * tr->block_bytes);
}

// ---- Value ------------------------------------------------------------------------------

namespace {
Value make_u(ValueType t, uint64_t x) {
  Value v;
  v.type = t;
  v.v = x;
  return v;
}
Value make_i(ValueType t, int64_t x) {
  Value v;
  v.type = t;
  v.v = x;
  return v;
}
Value make_f(ValueType t, double x) {
  Value v;
  v.type = t;
  v.v = x;
  return v;
}
[[noreturn]] void type_error(std::string_view what, const char* expected, ValueType got) {
  throw Error(std::string(what) + ": expected " + expected + ", got " + value_type_name(got));
}
}  // namespace

Value Value::u8(uint8_t x) {
  return make_u(ValueType::UINT8, x);
}
Value Value::i8(int8_t x) {
  return make_i(ValueType::INT8, x);
}
Value Value::u16(uint16_t x) {
  return make_u(ValueType::UINT16, x);
}
Value Value::i16(int16_t x) {
  return make_i(ValueType::INT16, x);
}
Value Value::u32(uint32_t x) {
  return make_u(ValueType::UINT32, x);
}
Value Value::i32(int32_t x) {
  return make_i(ValueType::INT32, x);
}
Value Value::u64(uint64_t x) {
  return make_u(ValueType::UINT64, x);
}
Value Value::i64(int64_t x) {
  return make_i(ValueType::INT64, x);
}
Value Value::f32(float x) {
  return make_f(ValueType::FLOAT32, x);
}
Value Value::f64(double x) {
  return make_f(ValueType::FLOAT64, x);
}
Value Value::boolean(bool x) {
  return make_u(ValueType::BOOL, x ? 1 : 0);
}

Value Value::str(std::string s) {
  Value v;
  v.type = ValueType::STRING;
  v.v = std::move(s);
  return v;
}

Value Value::array(ValueType elem_type, std::vector<Value> items) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].type != elem_type) {
      throw Error("array element " + std::to_string(i) + " has type " +
                  value_type_name(items[i].type) + ", expected " + value_type_name(elem_type));
    }
  }
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem_type;
  v.v = std::move(items);
  return v;
}

Value Value::str_array(const std::vector<std::string>& items) {
  std::vector<Value> vs;
  vs.reserve(items.size());
  for (const auto& s : items) vs.push_back(str(s));
  return array(ValueType::STRING, std::move(vs));
}

Value Value::f32_array(const std::vector<float>& items) {
  std::vector<Value> vs;
  vs.reserve(items.size());
  for (float x : items) vs.push_back(f32(x));
  return array(ValueType::FLOAT32, std::move(vs));
}

Value Value::i32_array(const std::vector<int32_t>& items) {
  std::vector<Value> vs;
  vs.reserve(items.size());
  for (int32_t x : items) vs.push_back(i32(x));
  return array(ValueType::INT32, std::move(vs));
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool Value::is_float() const {
  return type == ValueType::FLOAT32 || type == ValueType::FLOAT64;
}

int64_t Value::as_int(std::string_view what) const {
  if (!is_integer()) type_error(what, "an integer", type);
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > uint64_t(std::numeric_limits<int64_t>::max())) {
      throw Error(std::string(what) + ": value " + std::to_string(*u) + " does not fit in int64");
    }
    return static_cast<int64_t>(*u);
  }
  return std::get<int64_t>(v);
}

uint64_t Value::as_uint(std::string_view what) const {
  if (!is_integer()) type_error(what, "an integer", type);
  if (const auto* i = std::get_if<int64_t>(&v)) {
    if (*i < 0) {
      throw Error(std::string(what) + ": negative value " + std::to_string(*i) +
                  " where an unsigned integer is expected");
    }
    return static_cast<uint64_t>(*i);
  }
  return std::get<uint64_t>(v);
}

double Value::as_float(std::string_view what) const {
  if (is_float()) return std::get<double>(v);
  if (is_integer()) {
    if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
    return static_cast<double>(std::get<int64_t>(v));
  }
  type_error(what, "a number", type);
}

bool Value::as_bool(std::string_view what) const {
  if (type != ValueType::BOOL) type_error(what, "a bool", type);
  return std::get<uint64_t>(v) != 0;
}

const std::string& Value::as_string(std::string_view what) const {
  if (type != ValueType::STRING) type_error(what, "a string", type);
  return std::get<std::string>(v);
}

const std::vector<Value>& Value::as_array(std::string_view what) const {
  if (type != ValueType::ARRAY) type_error(what, "an array", type);
  return std::get<std::vector<Value>>(v);
}

std::string Value::to_string(size_t max_items) const {
  switch (type) {
    case ValueType::BOOL:
      return std::get<uint64_t>(v) ? "true" : "false";
    case ValueType::FLOAT32:
    case ValueType::FLOAT64: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", std::get<double>(v));
      return buf;
    }
    case ValueType::STRING: {
      // Quoted and printable (control characters and invalid UTF-8 escaped), so one value
      // stays on one line and cannot drive the terminal.
      std::string out = "\"";
      for (char c : printable(std::get<std::string>(v))) {
        if (c == '"') out += '\\';
        out += c;
      }
      return out + "\"";
    }
    case ValueType::ARRAY: {
      const auto& items = std::get<std::vector<Value>>(v);
      std::string out = "[";
      for (size_t i = 0; i < items.size() && i < max_items; ++i) {
        if (i) out += ", ";
        out += items[i].to_string(max_items);
      }
      if (items.size() > max_items) {
        out += ", ... (" + std::to_string(items.size()) + " items)";
      }
      return out + "]";
    }
    default:
      if (const auto* u = std::get_if<uint64_t>(&v)) return std::to_string(*u);
      if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
      return "?";
  }
}

std::string TensorInfo::shape_string() const {
  std::string out = "[";
  for (int i = 0; i < n_dims; ++i) {
    if (i) out += ", ";
    out += std::to_string(ne[i]);
  }
  return out + "]";
}

}  // namespace lynx::gguf
