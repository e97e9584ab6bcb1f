// Replays recorded router logits on a model of the same expert count: every token of a
// sequence takes one recorded token's logits at every layer (rows stay aligned across
// layers, so a token's routing keeps its cross-layer correlation). Used by `bench
// --routing-trace` so random-weight models at real shapes route like trained ones.
#pragma once
#include <string>
#include <vector>

#include "lynx/context.h"

namespace lynx::cli {

class TraceReplay {
 public:
  // Loads every record of the trace; throws lynx::Error when it does not fit the model
  // (expert count) or holds no complete step.
  TraceReplay(const std::string& path, const ModelConfig& model);
  // The override to install with Context::set_router_override.
  Context::RouterOverride override_fn() const;
  int rows() const { return n_rows_; }
  int trace_layers() const { return int(layers_.size()); }

 private:
  int n_expert_ = 0;
  int n_rows_ = 0;
  std::vector<std::vector<float>> layers_;  // [trace layer][row x N]
};

}  // namespace lynx::cli
