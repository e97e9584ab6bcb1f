// GGUF reader: parses and validates a whole file up front, so that everything handed out
// afterwards (metadata, tensor views) is known to be consistent with the bytes on disk.
//
// Hardening rule: no count, length or offset read from the file is trusted. Before anything
// is allocated or indexed, it is checked against the bytes that remain in the file, so a
// malformed or hostile file costs at most O(file size) memory and time and ends in a
// lynx::Error that names the problem and where it is.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <numeric>

#include "gguf/format.h"
#include "lynx/gguf.h"

namespace lynx::gguf {

using detail::align_up;
using detail::min_value_size;
using detail::scalar_size;

namespace {
// Everything parsed from a file. (A plain struct so the parsing helpers below can take it;
// File::Impl adds ownership of the mapping.)
struct State {
  std::string path;
  const uint8_t* base = nullptr;  // the mapping (or the caller's buffer)
  size_t size = 0;
  bool mapped = false;  // owns `base` as an mmap of `size` bytes

  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<KeyValue> kv;
  std::map<std::string, size_t, std::less<>> kv_index;
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;
};
}  // namespace

struct File::Impl : State {
  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (mapped && base) munmap(const_cast<uint8_t*>(base), size);
  }
};

namespace {

// Where a read happens, for error messages: "metadata key 'x'" or an element of an array
// ("metadata key 'x'[3][1]"). A chain on the stack, turned into a string only when an
// error is reported, so reading a 150k-token vocabulary allocates nothing per element.
struct Where {
  const std::string* what = nullptr;  // set on the root
  const Where* parent = nullptr;      // set on array elements
  uint64_t index = 0;
  std::string str() const {
    return parent ? parent->str() + "[" + std::to_string(index) + "]" : *what;
  }
};

// A bounds-checked cursor over the file bytes. Every read names what it reads, so a
// truncated file reports the section it ends in.
class Parser {
 public:
  Parser(const std::string& name, const uint8_t* data, size_t size)
      : name_(name), data_(data), size_(size) {}

  [[noreturn]] void fail(const std::string& msg) const { throw Error(name_ + ": " + msg); }

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail_truncated(size_t n, const std::string& what) const {
    fail("truncated file: " + what + " at offset " + std::to_string(pos_) + " needs " +
         std::to_string(n) + " bytes, only " + std::to_string(remaining()) + " remain");
  }

  template <typename T>
  T read(const Where& w, const char* suffix = "") {
    if (sizeof(T) > remaining()) fail_truncated(sizeof(T), w.str() + suffix);
    T x;
    std::memcpy(&x, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return x;
  }
  template <typename T>
  T read(const std::string& what) {
    return read<T>(Where{&what});
  }

  std::string read_string(const Where& w) {
    const size_t at = pos_;
    const uint64_t len = read<uint64_t>(w, " length");
    if (len > remaining()) {
      fail(w.str() + ": string length " + std::to_string(len) + " at offset " + std::to_string(at) +
           " exceeds the " + std::to_string(remaining()) + " bytes left in the file");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }
  std::string read_string(const std::string& what) { return read_string(Where{&what}); }

  // `suffix` names the tag: " value" for a key's type, " array element" for an array's.
  ValueType read_value_type(const Where& w, const char* suffix) {
    const uint32_t t = read<uint32_t>(w, suffix);
    if (!detail::is_known_value_type(t)) {
      fail(w.str() + suffix + ": unknown metadata value type " + std::to_string(t));
    }
    return static_cast<ValueType>(t);
  }

  Value read_value(ValueType type, const Where& w, int depth) {
    switch (type) {
      case ValueType::UINT8:
        return Value::u8(read<uint8_t>(w));
      case ValueType::INT8:
        return Value::i8(read<int8_t>(w));
      case ValueType::UINT16:
        return Value::u16(read<uint16_t>(w));
      case ValueType::INT16:
        return Value::i16(read<int16_t>(w));
      case ValueType::UINT32:
        return Value::u32(read<uint32_t>(w));
      case ValueType::INT32:
        return Value::i32(read<int32_t>(w));
      case ValueType::UINT64:
        return Value::u64(read<uint64_t>(w));
      case ValueType::INT64:
        return Value::i64(read<int64_t>(w));
      case ValueType::FLOAT32:
        return Value::f32(read<float>(w));
      case ValueType::FLOAT64:
        return Value::f64(read<double>(w));
      case ValueType::BOOL:
        return Value::boolean(read<uint8_t>(w) != 0);
      case ValueType::STRING:
        return Value::str(read_string(w));
      case ValueType::ARRAY:
        return read_array(w, depth + 1);
    }
    fail(w.str() + ": unknown metadata value type " + std::to_string(uint32_t(type)));
  }

  Value read_array(const Where& w, int depth) {
    if (depth > kMaxArrayNesting) {
      fail(w.str() + ": arrays nested deeper than " + std::to_string(kMaxArrayNesting) + " levels");
    }
    const ValueType elem = read_value_type(w, " array element");
    const size_t at = pos_;
    const uint64_t n = read<uint64_t>(w, " array length");
    // Each element takes at least min_value_size bytes, so this bounds the allocation below
    // by the file size.
    if (n > remaining() / min_value_size(elem)) {
      fail(w.str() + ": array of " + std::to_string(n) + " " + value_type_name(elem) +
           " elements at offset " + std::to_string(at) + " exceeds the " +
           std::to_string(remaining()) + " bytes left in the file");
    }
    Value out;
    out.type = ValueType::ARRAY;
    out.elem_type = elem;
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(n));
    for (uint64_t i = 0; i < n; ++i) {
      items.push_back(read_value(elem, Where{nullptr, &w, i}, depth));
    }
    out.v = std::move(items);
    return out;
  }

 private:
  const std::string& name_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Validates the header; returns the version.
uint32_t parse_header(Parser& p, uint64_t* n_tensors, uint64_t* n_kv) {
  const uint32_t magic = p.read<uint32_t>("header magic");
  if (magic != kMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "bad magic 0x%08x (not a GGUF file)", magic);
    p.fail(buf);
  }
  const uint32_t version = p.read<uint32_t>("header version");
  if (version == 1) p.fail("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version != 2 && version != 3) {
    std::string msg = "unsupported GGUF version " + std::to_string(version);
    // A big-endian GGUF stores the version byte-swapped.
    if (version == 0x02000000u || version == 0x03000000u) msg += " (big-endian file?)";
    p.fail(msg);
  }
  *n_tensors = p.read<uint64_t>("header tensor count");
  *n_kv = p.read<uint64_t>("header metadata count");
  // Smallest possible entries: a KV is key length + type + 1 byte of value; a tensor info
  // is name length + n_dims + one dim + type + offset.
  constexpr uint64_t kMinKv = 8 + 4 + 1;
  constexpr uint64_t kMinTensor = 8 + 4 + 8 + 4 + 8;
  if (*n_kv > p.remaining() / kMinKv) {
    p.fail("metadata count " + std::to_string(*n_kv) + " cannot fit in the " +
           std::to_string(p.remaining()) + " bytes left in the file");
  }
  if (*n_tensors > p.remaining() / kMinTensor) {
    p.fail("tensor count " + std::to_string(*n_tensors) + " cannot fit in the " +
           std::to_string(p.remaining()) + " bytes left in the file");
  }
  return version;
}

void parse_metadata(Parser& p, uint64_t n_kv, State& f) {
  f.kv.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string where = "metadata entry " + std::to_string(i);
    std::string key = p.read_string(where + " key");
    const std::string what = "metadata key '" + printable(key) + "'";
    const Where w{&what};
    const ValueType type = p.read_value_type(w, " value");
    Value value = p.read_value(type, w, 0);
    if (!f.kv_index.emplace(key, f.kv.size()).second) p.fail("duplicate " + what);
    f.kv.push_back({std::move(key), std::move(value)});
  }
  auto it = f.kv_index.find("general.alignment");
  if (it != f.kv_index.end()) {
    const Value& a = f.kv[it->second].value;
    if (a.type != ValueType::UINT32) {
      p.fail(std::string("general.alignment has type ") + value_type_name(a.type) +
             ", expected u32");
    }
    const uint64_t x = std::get<uint64_t>(a.v);
    if (x == 0 || (x & (x - 1)) != 0) {
      p.fail("general.alignment " + std::to_string(x) + " is not a power of two");
    }
    f.alignment = static_cast<uint32_t>(x);
  }
}

TensorInfo parse_tensor_info(Parser& p, uint64_t index) {
  TensorInfo t;
  t.name = p.read_string("tensor info " + std::to_string(index) + " name");
  const std::string what = "tensor '" + printable(t.name) + "'";
  const uint32_t n_dims = p.read<uint32_t>(what + " dimension count");
  if (n_dims == 0 || n_dims > uint32_t(kMaxDims)) {
    p.fail(what + " has " + std::to_string(n_dims) + " dimensions (must be 1 to " +
           std::to_string(kMaxDims) + ")");
  }
  t.n_dims = static_cast<int>(n_dims);
  for (int d = 0; d < t.n_dims; ++d) {
    const int64_t ne = p.read<int64_t>(what + " dimension " + std::to_string(d));
    if (ne <= 0) {
      p.fail(what + " dimension " + std::to_string(d) + " is " + std::to_string(ne) +
             " (must be positive)");
    }
    t.ne[d] = ne;
  }
  const uint32_t type = p.read<uint32_t>(what + " type");
  t.type = static_cast<TensorType>(type);
  int64_t block_elems = 0, block_bytes = 0;
  if (!tensor_type_info(t.type, &block_elems, &block_bytes)) {
    p.fail(what + " has unknown tensor type " + std::to_string(type));
  }
  t.offset = p.read<uint64_t>(what + " data offset");

  int64_t n_elem = 1;
  for (int d = 0; d < t.n_dims; ++d) {
    if (__builtin_mul_overflow(n_elem, t.ne[d], &n_elem)) {
      p.fail(what + " element count " + t.shape_string() + " overflows int64");
    }
  }
  if (t.ne[0] % block_elems != 0) {
    p.fail(what + " row of " + std::to_string(t.ne[0]) + " elements is not a multiple of " +
           tensor_type_name(t.type) + "'s block size " + std::to_string(block_elems));
  }
  uint64_t n_bytes = 0;
  if (__builtin_mul_overflow(uint64_t(n_elem / block_elems), uint64_t(block_bytes), &n_bytes) ||
      n_bytes > SIZE_MAX) {
    p.fail(what + " byte size overflows");
  }
  t.n_bytes = static_cast<size_t>(n_bytes);
  return t;
}

void parse_tensors(Parser& p, uint64_t n_tensors, State& f) {
  f.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t = parse_tensor_info(p, i);
    if (!f.tensor_index.emplace(t.name, f.tensors.size()).second) {
      p.fail("duplicate tensor name '" + printable(t.name) + "'");
    }
    f.tensors.push_back(std::move(t));
  }
  f.data_offset = align_up(p.pos(), f.alignment);
  if (f.tensors.empty()) return;  // vocab-only files may end before the padding

  if (f.data_offset > f.size) {
    p.fail("truncated file: data section starts at offset " + std::to_string(f.data_offset) +
           " past the end of the file (" + std::to_string(f.size) + " bytes)");
  }
  const uint64_t data_size = f.size - f.data_offset;
  for (auto& t : f.tensors) {
    if (t.offset % f.alignment != 0) {
      p.fail("tensor '" + printable(t.name) + "' data offset " + std::to_string(t.offset) +
             " is not a multiple of the alignment " + std::to_string(f.alignment));
    }
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      p.fail("tensor '" + printable(t.name) + "' data [" + std::to_string(t.offset) + ", +" +
             std::to_string(t.n_bytes) + ") extends past the end of the file (data section is " +
             std::to_string(data_size) + " bytes)");
    }
    t.data = f.base + f.data_offset + t.offset;
  }
  // Overlap: sort by offset and compare neighbours.
  std::vector<size_t> order(f.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return f.tensors[a].offset < f.tensors[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo& a = f.tensors[order[i - 1]];
    const TensorInfo& b = f.tensors[order[i]];
    if (a.offset + a.n_bytes > b.offset) {
      p.fail("tensor '" + printable(a.name) + "' data overlaps tensor '" + printable(b.name) + "'");
    }
  }
}

void parse(State& f) {
  Parser p(f.path, f.base, f.size);
  uint64_t n_tensors = 0, n_kv = 0;
  f.version = parse_header(p, &n_tensors, &n_kv);
  parse_metadata(p, n_kv, f);
  parse_tensors(p, n_tensors, f);
}

}  // namespace

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  impl->size = static_cast<size_t>(st.st_size);
  if (impl->size > 0) {
    void* m = mmap(nullptr, impl->size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (m == MAP_FAILED) throw Error(path + ": cannot mmap: " + std::strerror(e));
    impl->base = static_cast<const uint8_t*>(m);
    impl->mapped = true;
  } else {
    ::close(fd);
  }
  parse(*impl);
  return File(std::move(impl));
}

File File::from_memory(const uint8_t* data, size_t size, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->base = data;
  impl->size = size;
  parse(*impl);
  return File(std::move(impl));
}

uint32_t File::version() const {
  return impl_->version;
}
uint32_t File::alignment() const {
  return impl_->alignment;
}
const std::string& File::path() const {
  return impl_->path;
}
size_t File::file_size() const {
  return impl_->size;
}
uint64_t File::data_offset() const {
  return impl_->data_offset;
}
const std::vector<KeyValue>& File::metadata() const {
  return impl_->kv;
}
const std::vector<TensorInfo>& File::tensors() const {
  return impl_->tensors;
}

const Value* File::find(std::string_view key) const {
  auto it = impl_->kv_index.find(key);
  return it == impl_->kv_index.end() ? nullptr : &impl_->kv[it->second].value;
}

namespace {
const Value& require(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (!v) throw Error(f.path() + ": missing metadata key '" + std::string(key) + "'");
  return *v;
}
std::string key_what(const File& f, std::string_view key) {
  return f.path() + ": metadata key '" + std::string(key) + "'";
}
}  // namespace

int64_t File::get_int(std::string_view key) const {
  return require(*this, key).as_int(key_what(*this, key));
}
double File::get_float(std::string_view key) const {
  return require(*this, key).as_float(key_what(*this, key));
}
bool File::get_bool(std::string_view key) const {
  return require(*this, key).as_bool(key_what(*this, key));
}
const std::string& File::get_string(std::string_view key) const {
  return require(*this, key).as_string(key_what(*this, key));
}
const std::vector<Value>& File::get_array(std::string_view key) const {
  return require(*this, key).as_array(key_what(*this, key));
}
int64_t File::get_int(std::string_view key, int64_t def) const {
  const Value* v = find(key);
  return v ? v->as_int(key_what(*this, key)) : def;
}
double File::get_float(std::string_view key, double def) const {
  const Value* v = find(key);
  return v ? v->as_float(key_what(*this, key)) : def;
}
bool File::get_bool(std::string_view key, bool def) const {
  const Value* v = find(key);
  return v ? v->as_bool(key_what(*this, key)) : def;
}
std::string File::get_string(std::string_view key, std::string_view def) const {
  const Value* v = find(key);
  return v ? v->as_string(key_what(*this, key)) : std::string(def);
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw Error(path() + ": missing tensor '" + std::string(name) + "'");
  return *t;
}

void File::prefetch(const std::function<void(size_t done, size_t total)>& progress) const {
  const Impl& f = *impl_;
  if (f.tensors.empty() || f.data_offset >= f.size) {
    if (progress) progress(0, 0);
    return;
  }
  const size_t total = f.size - f.data_offset;
  const uint8_t* start = f.base + f.data_offset;
  if (f.mapped) {
    // madvise wants a page-aligned start: round down into the header, which is mapped too.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t s = reinterpret_cast<uintptr_t>(start) / page * page;
    madvise(reinterpret_cast<void*>(s), reinterpret_cast<uintptr_t>(start) + total - s,
            MADV_WILLNEED);
  }
  // Touch one byte per page, chunk by chunk, so the progress callback reports bytes that
  // are really resident rather than merely requested.
  constexpr size_t kChunk = size_t(64) << 20;
  constexpr size_t kPage = 4096;
  volatile uint8_t sink = 0;
  for (size_t done = 0; done < total;) {
    const size_t end = std::min(total, done + kChunk);
    for (size_t i = done; i < end; i += kPage) sink = sink + start[i];
    done = end;
    if (progress) progress(done, total);
  }
}

void File::release_pages(const uint8_t* data, size_t n) const {
  const Impl& f = *impl_;
  if (!f.mapped || data < f.base || n > f.size || data > f.base + (f.size - n)) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t s = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(data) + n) / page * page;
  // Pages shared with a neighbouring tensor stay. Advice only: a failure changes nothing.
  if (s < e) madvise(reinterpret_cast<void*>(s), e - s, MADV_DONTNEED);
}

}  // namespace lynx::gguf
