// --mla-decompress-min reaches the context of generate (and is refused out of range): the
// tiny DeepSeek-V2 fixture reports the run length it attends in the decompressed form, the
// value -1 resolves from its dims, and a model without MLA layers reports nothing.
// (The numerics of the form: tests/model/mla_test.cc.)
#include <gtest/gtest.h>

#include <string>

#include "util.h"

namespace {

using lynx::test::CliRun;
using lynx::test::run_cli;

const std::string kMla =
    std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/mla/tiny-deepseek-v2.gguf";
const std::string kPlain = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";
const std::string kLine = "MLA prefill: runs of ";

std::string generate(const std::string& model, const std::string& flag) {
  const CliRun r = run_cli("generate -m " + model + " -p 'hello world, a prompt' -n 2 " + flag);
  EXPECT_EQ(r.code(), 0) << r.out;
  return r.out;
}

TEST(MlaDecompressCli, GenerateReportsTheRunLengthItUses) {
  EXPECT_EQ(generate(kMla, "").find(kLine), std::string::npos);
  EXPECT_EQ(generate(kMla, "--mla-decompress-min 0").find(kLine), std::string::npos);
  EXPECT_NE(generate(kMla, "--mla-decompress-min 2").find(kLine + "2 or more"), std::string::npos);
  // -1: the break-even of the fixture's dims (Context::mla_decompress_min), 64 here.
  const std::string auto_n = generate(kMla, "--mla-decompress-min -1");
  EXPECT_NE(auto_n.find(kLine + "64 or more"), std::string::npos) << auto_n;
  EXPECT_EQ(generate(kPlain, "--mla-decompress-min 2").find(kLine), std::string::npos);
}

TEST(MlaDecompressCli, OutOfRangeIsRefusedEverywhere) {
  for (const char* cmd : {"generate", "serve", "bench"}) {
    const CliRun r = run_cli(std::string(cmd) + " -m " + kMla + " --mla-decompress-min -2");
    EXPECT_NE(r.code(), 0) << cmd;
    EXPECT_NE(r.out.find("--mla-decompress-min"), std::string::npos) << cmd << ": " << r.out;
  }
}

}  // namespace
