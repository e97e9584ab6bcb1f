// Which rank holds which expert of every layer: analysis::Placement (src/analysis/placement.h,
// the type and the JSON that `lynx-moe place` writes), contiguous by default or read from a
// placement file checked against the job.
#pragma once
#include <cstdint>
#include <string>

#include "analysis/placement.h"

namespace lynx::dist {

using Placement = analysis::Placement;

// Without a placement file: expert e of every layer on rank e * R / N. When R does not divide N
// this spreads the larger shares differently from analysis::contiguous_placement (which gives
// them to the first ranks), and it allows R > N (ranks without experts).
Placement default_placement(int ranks, int experts, int moe_layers);
// A placement file for this job (analysis::placement_from_json with the job's ranks, experts
// and layers); lynx::Error naming `origin` and the defect.
Placement read_placement(const std::string& json, const std::string& origin, int ranks, int experts,
                         int moe_layers);
// 64-bit FNV-1a over the whole table (compared between ranks at start).
uint64_t placement_hash(const Placement& p);

}  // namespace lynx::dist
