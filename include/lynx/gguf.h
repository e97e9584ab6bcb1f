// GGUF v3 reader and writer (the llama.cpp model format).
//
// Reader: the file is memory-mapped (read-only, MAP_PRIVATE); tensor data are zero-copy
// views into the mapping. Accepts v3 and v2 (identical layout for little-endian files),
// rejects v1. Every count, length and offset is validated against the file size before use,
// so a malformed file yields a lynx::Error naming the problem (never a crash, hang, or an
// allocation beyond a small multiple of the file size). Format reference: ggml/docs/gguf.md.
//
// Writer: little-endian v3, header + metadata + tensor infos, then each tensor's data
// aligned to `alignment` (general.alignment is written when it is not 32). write() streams
// tensors to the file one at a time, so lazy tensors are materialized one by one; used by
// tests, `synth`, and the model exporters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "lynx/error.h"

namespace lynx::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;
// Arrays of arrays deeper than this are rejected (bounds the reader's recursion).
inline constexpr int kMaxArrayNesting = 8;

enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

// ggml tensor types (numbering is the file format's). The engine computes with
// F32, F16, BF16, Q8_0, Q4_0; the reader knows the block sizes of the others too so it can
// validate and list files that contain them.
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};
// Name as ggml prints it ("f32", "q8_0", ...); "unknown" for a value not in the enum.
const char* tensor_type_name(TensorType t);
// Elements per block and bytes per block; false for a type value the reader does not know.
bool tensor_type_info(TensorType t, int64_t* block_elems, int64_t* block_bytes);
// Parses "f32", "F16", "q8_0", ...; throws lynx::Error on an unknown name.
TensorType tensor_type_from_name(std::string_view name);

// Bytes from a file (keys, tensor names, string values) made safe for a terminal or a log:
// control characters (C0, DEL and the C1 range U+0080..U+009F, which terminals also obey),
// invalid UTF-8 and backslashes are written as \xNN / \\; printable UTF-8 passes unchanged.
// Every message and listing that shows a name from a GGUF goes through this.
std::string printable(std::string_view s);
// Bytes of a row of `n` elements (n must be a multiple of the block size).
size_t row_size(TensorType t, int64_t n);

// A metadata value. Arrays are homogeneous (elem_type) and may nest.
struct Value {
  ValueType type = ValueType::UINT8;
  // Scalars: integers of every width are held widened; bool as u64 0/1.
  std::variant<uint64_t, int64_t, double, std::string, std::vector<Value>> v;
  ValueType elem_type = ValueType::UINT8;  // for ARRAY only

  // Typed constructors.
  static Value u8(uint8_t x);
  static Value i8(int8_t x);
  static Value u16(uint16_t x);
  static Value i16(int16_t x);
  static Value u32(uint32_t x);
  static Value i32(int32_t x);
  static Value u64(uint64_t x);
  static Value i64(int64_t x);
  static Value f32(float x);
  static Value f64(double x);
  static Value boolean(bool x);
  static Value str(std::string s);
  static Value array(ValueType elem_type, std::vector<Value> items);
  static Value str_array(const std::vector<std::string>& items);
  static Value f32_array(const std::vector<float>& items);
  static Value i32_array(const std::vector<int32_t>& items);

  bool is_integer() const;
  bool is_float() const;
  // Checked conversions: throw lynx::Error naming `what` on a type mismatch or a value
  // that does not fit.
  int64_t as_int(std::string_view what = "value") const;
  uint64_t as_uint(std::string_view what = "value") const;
  double as_float(std::string_view what = "value") const;  // accepts integers too
  bool as_bool(std::string_view what = "value") const;
  const std::string& as_string(std::string_view what = "value") const;
  const std::vector<Value>& as_array(std::string_view what = "value") const;
  // Human-readable, arrays abbreviated after `max_items`.
  std::string to_string(size_t max_items = 8) const;
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::F32;
  int n_dims = 0;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;                  // relative to the start of the data section
  size_t n_bytes = 0;
  const uint8_t* data = nullptr;  // view into the mapping (reader) or caller buffer (writer)

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;  // "[4096, 14336, 8]"
};

// A read-only GGUF file. Movable, not copyable; tensor data pointers stay valid while the
// File lives.
class File {
 public:
  // Opens and validates `path`; throws lynx::Error("<path>: <problem>") on any defect.
  static File open(const std::string& path);
  // Parses a buffer already in memory (the fuzzer and tests use this); the buffer must
  // outlive the File.
  static File from_memory(const uint8_t* data, size_t size, std::string name = "<memory>");

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  uint32_t version() const;
  uint32_t alignment() const;
  const std::string& path() const;
  size_t file_size() const;
  // Byte offset of the data section (tensor offsets are relative to it).
  uint64_t data_offset() const;

  const std::vector<KeyValue>& metadata() const;
  const Value* find(std::string_view key) const;  // nullptr when absent
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters: throw lynx::Error when the key is missing or has the wrong type.
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<Value>& get_array(std::string_view key) const;
  // Same, with a default when the key is absent (a present key of the wrong type throws).
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_float(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;
  std::string get_string(std::string_view key, std::string_view def) const;

  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  const TensorInfo& tensor(std::string_view name) const;       // throws naming the tensor

  // Asks the OS to read the mapping ahead (MADV_WILLNEED) — used when loading a model,
  // with a progress callback over bytes touched.
  void prefetch(const std::function<void(size_t done, size_t total)>& progress = {}) const;

  // Tells the OS that this process no longer reads the bytes [data, data + n) of the mapping
  // (MADV_DONTNEED on the pages entirely inside the range), so they stop counting in its
  // resident memory; used when the model loader has copied a tensor elsewhere. The bytes stay
  // readable (a later read maps them from the page cache again). Nothing happens for a File
  // that is not a mapping (from_memory: the caller's buffer is left alone).
  void release_pages(const uint8_t* data, size_t n) const;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Builds a GGUF v3 file. Keys and tensor names must be unique (throws otherwise).
class Writer {
 public:
  Writer();
  void set(std::string key, Value value);  // replaces an existing key
  // Copies `data` (n_bytes must equal the size implied by type and shape).
  void add_tensor(std::string name, TensorType type, std::vector<int64_t> ne, const void* data,
                  size_t n_bytes);
  // Large tensors (synthetic models of several GB): `fill` writes the n_bytes of data into
  // `dst` when the file is written, so the whole model never sits in memory twice.
  void add_tensor_lazy(std::string name, TensorType type, std::vector<int64_t> ne,
                       std::function<void(uint8_t* dst, size_t n_bytes)> fill);
  void set_alignment(uint32_t alignment);  // also written as general.alignment
  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;  // throws lynx::Error on I/O failure

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;  // empty when `fill` is set
    std::function<void(uint8_t*, size_t)> fill;
  };
  std::vector<KeyValue> kv_;
  std::vector<PendingTensor> tensors_;
  uint32_t alignment_ = kDefaultAlignment;
};

}  // namespace lynx::gguf
