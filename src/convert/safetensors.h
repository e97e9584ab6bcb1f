// Reading Hugging Face checkpoints: safetensors files, single or sharded.
//
// safetensors layout (huggingface/safetensors, docs "format"): u64 little-endian N, then N
// bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section; offsets are relative to its start, tensors are row-major (the last
// dimension contiguous). Files are memory-mapped read-only; every offset, shape and dtype is
// checked against the file before a tensor is handed out, so a truncated or inconsistent file
// is a lynx::Error naming the file and the tensor.
//
// A checkpoint is a directory: model.safetensors.index.json ({"weight_map": {name: file}})
// names the shards; without it, model.safetensors, or else every *.safetensors file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lynx::convert {

// kU8: raw bytes, which only MXFP4 expert blocks / scales (gpt-oss) may be. kF8E4M3: float8
// e4m3fn weights of the FP8 releases, read times their weight_scale_inv (StTensor::scale).
enum class DType : uint8_t { kF32, kF16, kBF16, kU8, kF8E4M3 };
const char* dtype_name(DType d);
size_t dtype_size(DType d);

struct StTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major, as the file says (outermost first)
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
  std::string file;  // the shard it is in (for messages)
  // FP8 only: the factor each value is read times (weight_scale_inv), one for the tensor, or
  // one per block of scale_rows x scale_cols values (a row-major grid over the matrix).
  std::vector<float> scale;
  int64_t scale_rows = 0, scale_cols = 0;

  int64_t n_elements() const;
  std::string shape_string() const;  // "[4096, 14336]"
};

// Tells the OS this process is done with the tensor's bytes (MADV_DONTNEED on the pages
// entirely inside them): a converted tensor's source pages stop counting in the resident set,
// so converting a checkpoint larger than memory keeps only the tensor in hand resident. The
// bytes stay readable (a later read maps them in again).
void release_pages(const StTensor& t);

// One mapped .safetensors file.
class StFile {
 public:
  static std::unique_ptr<StFile> open(const std::string& path);
  ~StFile();
  StFile(const StFile&) = delete;
  StFile& operator=(const StFile&) = delete;
  const std::vector<StTensor>& tensors() const { return tensors_; }

 private:
  StFile() = default;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::vector<StTensor> tensors_;
};

// All tensors of a checkpoint directory, by name.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir);
  const StTensor* find(const std::string& name) const;
  const std::map<std::string, const StTensor*>& tensors() const { return by_name_; }
  size_t n_files() const { return files_.size(); }

 private:
  std::vector<std::unique_ptr<StFile>> files_;
  std::map<std::string, const StTensor*> by_name_;
};

}  // namespace lynx::convert
