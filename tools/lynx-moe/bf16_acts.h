// --bf16-acts on the commands that generate (generate, serve): the checks and reports beside
// add_bf16_acts_flag (common.h), defined in common.cc.
#pragma once
#include <string>

#include "lynx/model.h"

namespace lynx::cli {

// --bf16-acts with --expert-parallel is a UsageError: the other ranks' experts would stay
// exact while rank 0's dense products would not, a mode nobody measured.
void check_bf16_acts_combo(bool bf16_acts, bool expert_parallel);
// One line for --bf16-acts: the kernel it runs on (--bf16-kernel's, "" the best here) and
// how many of the model's weight matrices take it (BF16/F16 in panels).
std::string bf16_acts_summary(const Model& model, const std::string& bf16_kernel);
// serve's /metrics lines for the mode: lynx_bf16_activations{kernel="..."} 1 when on (kernel
// "none": the CPU has no BF16 kernel and the products stay exact), 0 with kernel "none" when
// off.
std::string bf16_acts_metrics(bool on, const std::string& bf16_kernel);

}  // namespace lynx::cli
