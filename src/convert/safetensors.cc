// safetensors reader (see safetensors.h): the header is parsed with nlohmann-json and
// validated entry by entry against the mapped file before any tensor is used.
#include "convert/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "lynx/error.h"
#include "lynx/gguf.h"
#include "util/file.h"

namespace lynx::convert {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A header larger than this is not a checkpoint (real ones are a few MB at most).
constexpr uint64_t kMaxHeader = uint64_t(256) << 20;

bool parse_dtype(const std::string& s, DType* d) {
  if (s == "F32")
    *d = DType::kF32;
  else if (s == "F16")
    *d = DType::kF16;
  else if (s == "BF16")
    *d = DType::kBF16;
  else if (s == "U8")
    *d = DType::kU8;
  else if (s == "F8_E4M3")
    *d = DType::kF8E4M3;
  else
    return false;
  return true;
}

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kU8:
      return "U8";
    case DType::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

size_t dtype_size(DType d) {
  return d == DType::kF32 ? 4 : d == DType::kU8 || d == DType::kF8E4M3 ? 1 : 2;
}

int64_t StTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string StTensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void release_pages(const StTensor& t) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (uintptr_t(t.data) + page - 1) / page * page;
  const uintptr_t e = (uintptr_t(t.data) + t.n_bytes) / page * page;
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

std::unique_ptr<StFile> StFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  std::unique_ptr<StFile> f(new StFile());
  f->size_ = size_t(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    throw Error(path + ": truncated safetensors file (" + std::to_string(f->size_) +
                " bytes, the 8-byte header length is missing)");
  }
  void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (m == MAP_FAILED) throw Error(path + ": cannot mmap: " + std::strerror(e));
  f->base_ = static_cast<const uint8_t*>(m);

  uint64_t n_header = 0;
  std::memcpy(&n_header, f->base_, 8);  // little-endian host (gguf/format.h asserts it)
  if (n_header > kMaxHeader || n_header > f->size_ - 8) {
    throw Error(path + ": truncated or not a safetensors file (header length " +
                std::to_string(n_header) + ", file size " + std::to_string(f->size_) + ")");
  }
  json h;
  try {
    h = json::parse(f->base_ + 8, f->base_ + 8 + n_header);
  } catch (const json::exception& ex) {
    throw Error(path + ": the safetensors header is not valid JSON: " + ex.what());
  }
  if (!h.is_object()) throw Error(path + ": the safetensors header is not a JSON object");
  const uint8_t* data = f->base_ + 8 + n_header;
  const uint64_t data_size = f->size_ - 8 - n_header;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = path + ": tensor '" + gguf::printable(it.key()) + "'";
    const json& v = it.value();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets") || !v["dtype"].is_string() || !v["shape"].is_array() ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2) {
      throw Error(where + ": header entry needs dtype, shape and data_offsets [begin, end]");
    }
    StTensor t;
    t.name = it.key();
    t.file = path;
    const std::string dt = v["dtype"].get<std::string>();
    if (!parse_dtype(dt, &t.dtype)) {
      throw Error(where + ": dtype " + gguf::printable(dt) +
                  " is not supported (F32, F16, BF16, and U8 for MXFP4 experts are; other "
                  "quantized or FP8 checkpoints must be dequantized first)");
    }
    uint64_t n = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) throw Error(where + ": shape holds a non-integer");
      const uint64_t x = d.get<uint64_t>();
      if (x > (uint64_t(1) << 40) || __builtin_mul_overflow(n, x, &n)) {
        throw Error(where + ": shape is out of range");
      }
      t.shape.push_back(int64_t(x));
    }
    const json& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      throw Error(where + ": data_offsets must be non-negative integers");
    }
    const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (b > end || end > data_size) {
      throw Error(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(end) +
                  "] are out of range (data section of " + std::to_string(data_size) +
                  " bytes; truncated file?)");
    }
    uint64_t want = 0;
    if (__builtin_mul_overflow(n, uint64_t(dtype_size(t.dtype)), &want) || want != end - b) {
      throw Error(where + ": " + std::to_string(end - b) + " bytes for dtype " + dt + " shape " +
                  t.shape_string() + ", which needs " + std::to_string(n * dtype_size(t.dtype)));
    }
    t.data = data + b;
    t.n_bytes = size_t(end - b);
    f->tensors_.push_back(std::move(t));
  }
  return f;
}

StFile::~StFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

Checkpoint Checkpoint::open(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw Error(dir + ": not a directory (expected a Hugging Face model)");
  Checkpoint c;
  std::vector<std::string> shards;
  std::map<std::string, std::string> index;  // tensor -> shard, when there is an index
  const fs::path idx = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(idx)) {
    json j;
    try {
      j = json::parse(util::read_file_bounded(idx.string(), 256 * util::kMiB, "index"));
    } catch (const json::exception& e) {
      throw Error(idx.string() + ": not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw Error(idx.string() + ": no \"weight_map\" object");
    }
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        throw Error(idx.string() + ": weight_map values must be strings");
      const std::string file = it.value().get<std::string>();
      if (file.find('/') != std::string::npos) {
        throw Error(idx.string() + ": shard name '" + gguf::printable(file) + "' has a path");
      }
      index[it.key()] = file;
      if (seen.insert(file).second) {
        if (!fs::exists(fs::path(dir) / file)) {
          throw Error(idx.string() + ": shard " + gguf::printable(file) +
                      " is missing (it holds tensor '" + gguf::printable(it.key()) + "')");
        }
        shards.push_back(file);
      }
    }
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    shards.push_back("model.safetensors");
  } else {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
    }
    std::sort(shards.begin(), shards.end());
  }
  if (shards.empty()) throw Error(dir + ": no *.safetensors files");
  for (const std::string& s : shards) {
    c.files_.push_back(StFile::open((fs::path(dir) / s).string()));
    for (const StTensor& t : c.files_.back()->tensors()) {
      if (!c.by_name_.emplace(t.name, &t).second) {
        throw Error(dir + ": tensor '" + gguf::printable(t.name) + "' is in two shards");
      }
      if (!index.empty()) {
        auto it = index.find(t.name);
        if (it == index.end() || it->second != s) {
          throw Error(t.file + ": tensor '" + gguf::printable(t.name) +
                      "' is not listed for this shard in model.safetensors.index.json");
        }
      }
    }
  }
  for (const auto& [name, file] : index) {
    if (!c.by_name_.count(name)) {
      throw Error(dir + ": tensor '" + gguf::printable(name) + "' is listed in the index but " +
                  gguf::printable(file) + " does not hold it");
    }
  }
  return c;
}

const StTensor* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

}  // namespace lynx::convert
