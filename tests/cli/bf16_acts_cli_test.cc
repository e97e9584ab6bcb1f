// --bf16-acts on the commands users run (generate, its --chat form, serve): the flag parses and
// generate says which kernel runs it and how many of the model's matrices take it; combined
// with --expert-parallel it is refused with exit code 2 and a message naming both flags.
// (That the option reaches the server's context: tests/server/bf16_acts_test.cc.)
#include <gtest/gtest.h>

#include <string>

#include "kernels/matmul_bf16.h"
#include "util.h"

namespace {

using lynx::test::CliRun;
using lynx::test::run_cli;

const std::string kModel = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";

TEST(Bf16ActsCli, GenerateTakesTheFlagAndReportsTheKernel) {
  const std::string base =
      "generate -m " + kModel + " -p 'Once upon a time there was a' -n 3 -t 1 --temp 0 -q";
  const CliRun on = run_cli(base + " --bf16-acts");
  ASSERT_EQ(on.code(), 0) << on.out;
  EXPECT_NE(on.out.find("bf16-acts: kernel "), std::string::npos) << on.out;
  // The bundled models are F16: on a machine with a BF16 kernel their projection and expert
  // matrices take the mode; without one none does.
  const std::string kernel = lynx::kernels::bf16_kernel_name(lynx::kernels::best_bf16_kernel());
  EXPECT_NE(on.out.find("bf16-acts: kernel " + kernel + ", "), std::string::npos) << on.out;
  EXPECT_EQ(on.out.find(" 0 of ") == std::string::npos, kernel != "none") << on.out;
  const CliRun chat = run_cli(base + " --chat --chat-format chatml --bf16-acts");
  EXPECT_EQ(chat.code(), 0) << chat.out;
  const CliRun off = run_cli(base);
  ASSERT_EQ(off.code(), 0) << off.out;
  EXPECT_EQ(off.out.find("bf16-acts"), std::string::npos) << off.out;  // off by default
}

TEST(Bf16ActsCli, WithExpertParallelIsRefused) {
  for (const std::string& cmd :
       {"generate -m " + kModel + " -p hi -n 1 --bf16-acts --expert-parallel",
        "serve -m " + kModel + " --port 0 --bf16-acts --expert-parallel"}) {
    const CliRun r = run_cli(cmd);
    EXPECT_EQ(r.code(), 2) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("--bf16-acts cannot be combined with --expert-parallel"),
              std::string::npos)
        << r.out;
  }
}

}  // namespace
