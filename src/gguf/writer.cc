// GGUF writer: little-endian GGUF v3 with every tensor's data aligned to `alignment`.
//
// write() streams the file: header and tensor infos first, then each tensor's bytes in turn.
// A lazy tensor is materialized into a buffer of its own size just before it is written and
// freed right after, so a multi-GB synthetic model needs at most one tensor in memory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "gguf/format.h"
#include "lynx/gguf.h"

namespace lynx::gguf {

using detail::align_up;

namespace {

constexpr const char* kAlignmentKey = "general.alignment";

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}
template <typename T>
void put(std::vector<uint8_t>& out, T x) {
  put_bytes(out, &x, sizeof x);
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

// Narrows the widened integer held by `v` to the on-disk width, rejecting values that do
// not fit (a Value built by hand may hold anything).
template <typename T>
T narrow(const Value& v, const std::string& what) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u > uint64_t(std::numeric_limits<T>::max())) {
      throw Error(what + ": value " + std::to_string(*u) + " does not fit in " +
                  value_type_name(v.type));
    }
    return static_cast<T>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v.v)) {
    if (*i < int64_t(std::numeric_limits<T>::min()) ||
        (*i > 0 && uint64_t(*i) > uint64_t(std::numeric_limits<T>::max()))) {
      throw Error(what + ": value " + std::to_string(*i) + " does not fit in " +
                  value_type_name(v.type));
    }
    return static_cast<T>(*i);
  }
  throw Error(what + ": " + value_type_name(v.type) + " value does not hold an integer");
}

double get_double(const Value& v, const std::string& what) {
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  throw Error(what + ": " + value_type_name(v.type) + " value does not hold a number");
}

void put_value(std::vector<uint8_t>& out, const Value& v, const std::string& what, int depth) {
  switch (v.type) {
    case ValueType::UINT8:
      return put(out, narrow<uint8_t>(v, what));
    case ValueType::INT8:
      return put(out, narrow<int8_t>(v, what));
    case ValueType::UINT16:
      return put(out, narrow<uint16_t>(v, what));
    case ValueType::INT16:
      return put(out, narrow<int16_t>(v, what));
    case ValueType::UINT32:
      return put(out, narrow<uint32_t>(v, what));
    case ValueType::INT32:
      return put(out, narrow<int32_t>(v, what));
    case ValueType::UINT64:
      return put(out, narrow<uint64_t>(v, what));
    case ValueType::INT64:
      return put(out, narrow<int64_t>(v, what));
    case ValueType::BOOL:
      return put<uint8_t>(out, narrow<uint64_t>(v, what) != 0);
    case ValueType::FLOAT32:
      return put(out, static_cast<float>(get_double(v, what)));
    case ValueType::FLOAT64:
      return put(out, get_double(v, what));
    case ValueType::STRING: {
      const auto* s = std::get_if<std::string>(&v.v);
      if (!s) throw Error(what + ": string value does not hold a string");
      return put_string(out, *s);
    }
    case ValueType::ARRAY: {
      if (depth >= kMaxArrayNesting) {
        throw Error(what + ": arrays nested deeper than " + std::to_string(kMaxArrayNesting) +
                    " levels");
      }
      const auto* items = std::get_if<std::vector<Value>>(&v.v);
      if (!items) throw Error(what + ": array value does not hold items");
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, items->size());
      for (size_t i = 0; i < items->size(); ++i) {
        const Value& item = (*items)[i];
        if (item.type != v.elem_type) {
          throw Error(what + ": array element " + std::to_string(i) + " has type " +
                      value_type_name(item.type) + ", expected " + value_type_name(v.elem_type));
        }
        put_value(out, item, what, depth + 1);
      }
      return;
    }
  }
  throw Error(what + ": unknown value type " + std::to_string(uint32_t(v.type)));
}

size_t tensor_bytes(const std::string& name, TensorType type, const std::vector<int64_t>& ne) {
  const std::string what = "tensor '" + name + "'";
  int64_t block_elems = 0, block_bytes = 0;
  if (!tensor_type_info(type, &block_elems, &block_bytes)) {
    throw Error(what + ": unknown tensor type " + std::to_string(uint32_t(type)));
  }
  if (ne.empty() || ne.size() > size_t(kMaxDims)) {
    throw Error(what + ": " + std::to_string(ne.size()) + " dimensions (must be 1 to " +
                std::to_string(kMaxDims) + ")");
  }
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0) throw Error(what + ": dimension " + std::to_string(d) + " is not positive");
    if (__builtin_mul_overflow(n, d, &n)) throw Error(what + ": element count overflows");
  }
  if (ne[0] % block_elems != 0) {
    throw Error(what + ": row of " + std::to_string(ne[0]) + " elements is not a multiple of " +
                tensor_type_name(type) + "'s block size " + std::to_string(block_elems));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(uint64_t(n / block_elems), uint64_t(block_bytes), &bytes)) {
    throw Error(what + ": byte size overflows");
  }
  return static_cast<size_t>(bytes);
}

// Everything before the data section, and each tensor's offset within it.
struct Layout {
  std::vector<uint8_t> head;  // header + metadata + tensor infos + padding
  std::vector<uint64_t> offsets;
  std::vector<size_t> sizes;
  uint64_t data_size = 0;
};

}  // namespace

Writer::Writer() = default;

void Writer::set(std::string key, Value value) {
  if (key == kAlignmentKey) {
    if (value.type != ValueType::UINT32) {
      throw Error(std::string("general.alignment must be u32, got ") + value_type_name(value.type));
    }
    set_alignment(static_cast<uint32_t>(value.as_uint(kAlignmentKey)));
    return;
  }
  for (auto& kv : kv_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kv_.push_back({std::move(key), std::move(value)});
}

void Writer::set_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error("alignment " + std::to_string(alignment) + " is not a power of two");
  }
  alignment_ = alignment;
  // The key is written only when it differs from the format's default, as llama.cpp does.
  auto it = std::find_if(kv_.begin(), kv_.end(),
                         [](const KeyValue& kv) { return kv.key == kAlignmentKey; });
  if (alignment == kDefaultAlignment) {
    if (it != kv_.end()) kv_.erase(it);
  } else if (it != kv_.end()) {
    it->value = Value::u32(alignment);
  } else {
    kv_.push_back({kAlignmentKey, Value::u32(alignment)});
  }
}

void Writer::add_tensor(std::string name, TensorType type, std::vector<int64_t> ne,
                        const void* data, size_t n_bytes) {
  const size_t expected = tensor_bytes(name, type, ne);
  if (n_bytes != expected) {
    throw Error("tensor '" + name + "': " + std::to_string(n_bytes) + " bytes given, " +
                tensor_type_name(type) + " " + std::to_string(ne.size()) + "-d shape needs " +
                std::to_string(expected));
  }
  for (const auto& t : tensors_) {
    if (t.name == name) throw Error("duplicate tensor name '" + name + "'");
  }
  const auto* b = static_cast<const uint8_t*>(data);
  tensors_.push_back(
      {std::move(name), type, std::move(ne), std::vector<uint8_t>(b, b + n_bytes), nullptr});
}

void Writer::add_tensor_lazy(std::string name, TensorType type, std::vector<int64_t> ne,
                             std::function<void(uint8_t* dst, size_t n_bytes)> fill) {
  tensor_bytes(name, type, ne);  // validates
  if (!fill) throw Error("tensor '" + name + "': no fill function");
  for (const auto& t : tensors_) {
    if (t.name == name) throw Error("duplicate tensor name '" + name + "'");
  }
  tensors_.push_back({std::move(name), type, std::move(ne), {}, std::move(fill)});
}

namespace {
template <typename Tensors>
Layout make_layout(const std::vector<KeyValue>& kv, const Tensors& tensors, uint32_t alignment) {
  Layout l;
  auto& out = l.head;
  put<uint32_t>(out, kMagic);
  put<uint32_t>(out, kVersion);
  put<uint64_t>(out, tensors.size());
  put<uint64_t>(out, kv.size());
  for (const auto& e : kv) {
    put_string(out, e.key);
    put<uint32_t>(out, static_cast<uint32_t>(e.value.type));
    put_value(out, e.value, "metadata key '" + e.key + "'", 0);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const size_t bytes = tensor_bytes(t.name, t.type, t.ne);
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<int64_t>(out, d);
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    l.offsets.push_back(offset);
    l.sizes.push_back(bytes);
    offset = align_up(offset + bytes, alignment);
  }
  l.data_size = offset;
  out.resize(align_up(out.size(), alignment), 0);
  return l;
}
}  // namespace

std::vector<uint8_t> Writer::to_bytes() const {
  Layout l = make_layout(kv_, tensors_, alignment_);
  std::vector<uint8_t> out = std::move(l.head);
  const size_t data_start = out.size();
  out.resize(data_start + l.data_size, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    uint8_t* dst = out.data() + data_start + l.offsets[i];
    const auto& t = tensors_[i];
    if (t.fill) {
      t.fill(dst, l.sizes[i]);
    } else {
      std::memcpy(dst, t.data.data(), l.sizes[i]);
    }
  }
  return out;
}

void Writer::write(const std::string& path) const {
  const Layout l = make_layout(kv_, tensors_, alignment_);
  // Regular files only: the rename below would replace a device node (/dev/full, /dev/null)
  // or a FIFO with the file, and a directory cannot take it.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw Error(path + ": not a regular file (GGUF files are written to regular files only)");
  }
  // Written to a temporary name and renamed, so a failed or interrupted write never leaves
  // a truncated file under the final name. O_NOFOLLOW and the fstat keep the temporary name
  // from being a link or a device someone placed there (O_NONBLOCK: a FIFO fails at once
  // instead of waiting for a reader; it changes nothing for a regular file).
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": " + tmp + " exists and is not a regular file");
  }
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    const int e = errno;
    ::close(fd);
    std::remove(tmp.c_str());
    throw Error(path + ": cannot create: " + std::strerror(e));
  }
  auto fail = [&](const char* what) {
    const int e = errno;
    std::fclose(f);
    std::remove(tmp.c_str());
    throw Error(path + ": " + what + ": " + std::strerror(e));
  };
  if (std::fwrite(l.head.data(), 1, l.head.size(), f) != l.head.size()) fail("write failed");
  uint64_t pos = 0;  // within the data section
  const std::vector<uint8_t> zeros(alignment_, 0);
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const uint64_t pad = l.offsets[i] - pos;
    if (pad && std::fwrite(zeros.data(), 1, pad, f) != pad) fail("write failed");
    const auto& t = tensors_[i];
    const uint8_t* src = t.data.data();
    if (t.fill) {
      try {
        buf.assign(l.sizes[i], 0);
        t.fill(buf.data(), l.sizes[i]);
      } catch (...) {
        std::fclose(f);
        std::remove(tmp.c_str());
        throw;
      }
      src = buf.data();
    }
    if (std::fwrite(src, 1, l.sizes[i], f) != l.sizes[i]) fail("write failed");
    if (t.fill) std::vector<uint8_t>().swap(buf);  // release before the next tensor
    pos = l.offsets[i] + l.sizes[i];
  }
  const uint64_t tail = l.data_size - pos;
  if (tail && std::fwrite(zeros.data(), 1, tail, f) != tail) fail("write failed");
  if (std::fflush(f) != 0) fail("write failed");
  if (std::fclose(f) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw Error(path + ": write failed: " + std::strerror(e));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename from " + tmp + ": " + std::strerror(e));
  }
}

}  // namespace lynx::gguf
