#include "analysis/trace.h"

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace lynx::analysis {
namespace {

static_assert(std::endian::native == std::endian::little,
              "trace I/O writes host order; add byte swapping for big-endian hosts");

constexpr char kMagic[4] = {'L', 'X', 'R', 'T'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxExperts = 1 << 16;
constexpr uint32_t kMaxLayers = 1 << 16;
constexpr uint32_t kMaxTokens = 1 << 24;

struct RawHeader {
  char magic[4];
  uint32_t version, n_layers, n_expert, n_expert_used;
  uint8_t gating, norm_topk;
  uint16_t reserved;
  float weights_scale;
};
static_assert(sizeof(RawHeader) == 28);

void check_header(const TraceHeader& h, const std::string& what) {
  if (h.n_layers < 1 || uint32_t(h.n_layers) > kMaxLayers) {
    throw Error(what + ": n_layers " + std::to_string(h.n_layers) + " is out of range");
  }
  if (h.n_expert < 1 || uint32_t(h.n_expert) > kMaxExperts) {
    throw Error(what + ": n_expert " + std::to_string(h.n_expert) + " is out of range");
  }
  if (h.n_expert_used < 1 || h.n_expert_used > h.n_expert) {
    throw Error(what + ": n_expert_used " + std::to_string(h.n_expert_used) +
                " is not in [1, n_expert]");
  }
  if (!std::isfinite(h.weights_scale) || h.weights_scale <= 0) {
    throw Error(what + ": weights_scale must be finite and > 0");
  }
}

}  // namespace

TraceWriter::TraceWriter(const std::string& path, const TraceHeader& header)
    : path_(path), h_(header) {
  check_header(h_, "trace writer '" + path + "'");
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw Error("cannot create routing trace '" + path + "': " + std::strerror(errno));
  RawHeader raw{};
  std::memcpy(raw.magic, kMagic, 4);
  raw.version = kVersion;
  raw.n_layers = uint32_t(h_.n_layers);
  raw.n_expert = uint32_t(h_.n_expert);
  raw.n_expert_used = uint32_t(h_.n_expert_used);
  raw.gating = h_.func == GatingFunc::kSigmoid ? 1 : 0;
  raw.norm_topk = h_.norm_topk ? 1 : 0;
  raw.weights_scale = h_.weights_scale;
  if (std::fwrite(&raw, sizeof raw, 1, f_) != 1) {
    throw Error("cannot write routing trace '" + path + "'");
  }
}

TraceWriter::~TraceWriter() {
  try {
    close();
  } catch (const Error&) {
  }
}

void TraceWriter::write(int step, int layer, int n_tokens, const uint8_t* flags,
                        const float* logits) {
  if (!f_) throw Error("routing trace '" + path_ + "' is closed");
  if (layer < 0 || layer >= h_.n_layers || step < 0 || n_tokens < 0 ||
      uint32_t(n_tokens) > kMaxTokens) {
    throw Error("routing trace '" + path_ + "': bad record (step " + std::to_string(step) +
                ", layer " + std::to_string(layer) + ", tokens " + std::to_string(n_tokens) + ")");
  }
  const uint32_t head[3] = {uint32_t(step), uint32_t(layer), uint32_t(n_tokens)};
  bool ok = std::fwrite(head, sizeof head, 1, f_) == 1;
  for (int t = 0; ok && t < n_tokens; ++t) {
    const uint8_t fl = flags ? flags[t] : uint8_t(kTokenDecode);
    ok = std::fwrite(&fl, 1, 1, f_) == 1;
  }
  const size_t n = size_t(n_tokens) * h_.n_expert;
  if (ok && n) ok = std::fwrite(logits, sizeof(float), n, f_) == n;
  if (!ok) throw Error("cannot write routing trace '" + path_ + "' (disk full?)");
}

void TraceWriter::close() {
  if (!f_) return;
  const bool ok = std::fflush(f_) == 0;
  std::fclose(f_);
  f_ = nullptr;
  if (!ok) throw Error("cannot write routing trace '" + path_ + "' (disk full?)");
}

TraceReader::TraceReader(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) throw Error("cannot open routing trace '" + path + "': " + std::strerror(errno));
  RawHeader raw{};
  if (std::fread(&raw, sizeof raw, 1, f_) != 1) {
    std::fclose(f_);
    f_ = nullptr;
    throw Error("routing trace '" + path + "' is truncated: no complete header");
  }
  try {
    if (std::memcmp(raw.magic, kMagic, 4) != 0) {
      throw Error("'" + path + "' is not a routing trace (bad magic)");
    }
    if (raw.version != kVersion) {
      throw Error("routing trace '" + path + "' has version " + std::to_string(raw.version) +
                  ", this build reads version " + std::to_string(kVersion));
    }
    if (raw.gating > 1 || raw.norm_topk > 1) {
      throw Error("routing trace '" + path + "': bad gating/norm_topk byte");
    }
    if (raw.n_layers > kMaxLayers || raw.n_expert > kMaxExperts ||
        raw.n_expert_used > kMaxExperts) {
      throw Error("routing trace '" + path + "': header sizes out of range");
    }
    h_.n_layers = int(raw.n_layers);
    h_.n_expert = int(raw.n_expert);
    h_.n_expert_used = int(raw.n_expert_used);
    h_.func = raw.gating ? GatingFunc::kSigmoid : GatingFunc::kSoftmax;
    h_.norm_topk = raw.norm_topk != 0;
    h_.weights_scale = raw.weights_scale;
    check_header(h_, "routing trace '" + path + "'");
  } catch (...) {
    std::fclose(f_);
    f_ = nullptr;
    throw;
  }
}

TraceReader::~TraceReader() {
  if (f_) std::fclose(f_);
}

bool TraceReader::next(TraceRecord& rec) {
  if (!f_) return false;
  uint32_t head[3];
  // Read bytes, not u32 items: fread would silently drop a partial item at the end.
  const size_t got = std::fread(head, 1, sizeof head, f_);
  if (got == 0 && std::feof(f_)) return false;
  const std::string where = "routing trace '" + path_ + "'";
  if (got != sizeof head) throw Error(where + " is truncated inside a record header");
  if (head[1] >= uint32_t(h_.n_layers)) {
    throw Error(where + ": record layer " + std::to_string(head[1]) + " >= n_layers " +
                std::to_string(h_.n_layers));
  }
  if (head[2] > kMaxTokens || head[0] > uint32_t(INT32_MAX)) {
    throw Error(where + ": record token count " + std::to_string(head[2]) + " is out of range");
  }
  rec.step = int(head[0]);
  rec.layer = int(head[1]);
  rec.n_tokens = int(head[2]);
  rec.flags.resize(rec.n_tokens);
  rec.logits.resize(size_t(rec.n_tokens) * h_.n_expert);
  if (std::fread(rec.flags.data(), 1, rec.flags.size(), f_) != rec.flags.size() ||
      std::fread(rec.logits.data(), sizeof(float), rec.logits.size(), f_) != rec.logits.size()) {
    throw Error(where + " is truncated inside a record (step " + std::to_string(rec.step) +
                ", layer " + std::to_string(rec.layer) + ")");
  }
  for (uint8_t fl : rec.flags) {
    if (fl & ~uint8_t(kTokenPrefill | kTokenExact)) {
      throw Error(where + ": unknown token flag bits " + std::to_string(fl));
    }
  }
  for (float v : rec.logits) {
    if (!std::isfinite(v)) throw Error(where + ": non-finite router logit");
  }
  return true;
}

}  // namespace lynx::analysis
