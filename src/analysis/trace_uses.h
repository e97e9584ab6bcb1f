// How often a routing trace (trace.h) selects each expert under exact top-k: what the expert
// tier pins at load (LoadOptions::expert_pin_uses, `--expert-pin TRACE`, docs/offload.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lynx/model.h"

namespace lynx::analysis {

// [model.n_layer][model.n_expert]: how many of the trace's tokens (prefill and decode) select
// each expert among their model.n_expert_used largest recorded logits (ties: the lower id),
// for each routed layer; other layers' rows are empty. The trace's layers map onto the
// model's as a replay maps them (tools/lynx-moe/trace_replay.cc): model layer il reads trace
// layer il % n_layers. Throws lynx::Error naming the file when it cannot be read, is not a
// valid trace (the reader's checks), holds no token, or records another expert count.
std::vector<std::vector<uint32_t>> trace_topk_uses(const std::string& path,
                                                   const ModelConfig& model);

}  // namespace lynx::analysis
