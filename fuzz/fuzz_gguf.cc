// libFuzzer target for the GGUF reader: any input must either parse into a consistent File
// or throw lynx::Error. Everything the reader hands out is then walked, so ASan/UBSan see
// every value and every byte range a caller could touch.
#include <cstddef>
#include <cstdint>

#include "lynx/gguf.h"

namespace {

// Visits a value the way library users do (typed accessors, to_string), and checks the
// invariants the reader promises.
size_t walk(const lynx::gguf::Value& v, int depth) {
  using lynx::gguf::ValueType;
  if (depth > lynx::gguf::kMaxArrayNesting) __builtin_trap();
  size_t h = v.to_string(4).size();
  if (v.is_integer()) {
    try {
      h += static_cast<size_t>(v.as_int());
    } catch (const lynx::Error&) {
      h += static_cast<size_t>(v.as_uint());
    }
    h += static_cast<size_t>(v.as_float() != 0);  // a cast of the value itself may overflow
  } else if (v.is_float()) {
    h += static_cast<size_t>(v.as_float() != 0);
  } else if (v.type == ValueType::BOOL) {
    h += v.as_bool();
  } else if (v.type == ValueType::STRING) {
    h += v.as_string().size();
  } else if (v.type == ValueType::ARRAY) {
    for (const auto& item : v.as_array()) {
      if (item.type != v.elem_type) __builtin_trap();  // arrays are homogeneous
      h += walk(item, depth + 1);
    }
  } else {
    __builtin_trap();  // the reader must reject unknown types
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const lynx::gguf::File f = lynx::gguf::File::from_memory(data, size, "fuzz");
    volatile size_t sink = f.version() + f.alignment();
    for (const auto& kv : f.metadata()) {
      if (f.find(kv.key) != &kv.value) __builtin_trap();  // keys are unique
      sink = sink + walk(kv.value, 0);
    }
    for (const auto& t : f.tensors()) {
      if (f.find_tensor(t.name) != &t) __builtin_trap();  // names are unique
      if (t.n_bytes == 0 || t.data < data || t.data + t.n_bytes > data + size) __builtin_trap();
      if (lynx::gguf::row_size(t.type, t.ne[0]) == 0) __builtin_trap();
      // First and last byte of every tensor: ASan flags any view past the input.
      sink = sink + t.data[0] + t.data[t.n_bytes - 1] + t.shape_string().size();
    }
    f.prefetch();
    (void)f.get_string("general.architecture", "");
  } catch (const lynx::Error&) {
    // Rejection with a message is the expected outcome for malformed input.
  }
  return 0;
}
