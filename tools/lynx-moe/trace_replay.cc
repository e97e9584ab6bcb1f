#include "trace_replay.h"

#include <cstring>

#include "analysis/trace.h"

namespace lynx::cli {

TraceReplay::TraceReplay(const std::string& path, const ModelConfig& model) {
  analysis::TraceReader r(path);
  const auto& h = r.header();
  if (h.n_expert != model.n_expert) {
    throw Error("routing trace " + path + " has " + std::to_string(h.n_expert) +
                " experts, the model " + std::to_string(model.n_expert));
  }
  n_expert_ = h.n_expert;
  layers_.resize(size_t(h.n_layers));
  analysis::TraceRecord rec;
  while (r.next(rec)) {
    auto& l = layers_[size_t(rec.layer)];
    l.insert(l.end(), rec.logits.begin(), rec.logits.end());
  }
  // Keep the rows every layer has, so row i is the same recorded token at every layer.
  size_t rows = SIZE_MAX;
  for (const auto& l : layers_) rows = std::min(rows, l.size() / size_t(n_expert_));
  if (layers_.empty() || rows == 0 || rows == SIZE_MAX) {
    throw Error("routing trace " + path + " holds no complete step");
  }
  n_rows_ = int(rows);
}

Context::RouterOverride TraceReplay::override_fn() const {
  return [this](int layer, std::span<const BatchToken> batch, float* logits) {
    const auto& l = layers_[size_t(layer) % layers_.size()];
    for (size_t t = 0; t < batch.size(); ++t) {
      // Each sequence walks its own stretch of the trace; consecutive positions take
      // consecutive recorded tokens.
      const uint64_t row =
          (uint64_t(batch[t].seq) * 7919u + uint64_t(batch[t].pos)) % uint64_t(n_rows_);
      std::memcpy(logits + t * size_t(n_expert_), l.data() + row * size_t(n_expert_),
                  sizeof(float) * size_t(n_expert_));
    }
  };
}

}  // namespace lynx::cli
