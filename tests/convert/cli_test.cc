// `lynx-moe convert` on the command line: progress lines and a summary on stderr, exit status 1
// with the library's message for a bad checkpoint, 2 for a malformed command line.
#include <gtest/gtest.h>

#include <filesystem>

#include "../cli/util.h"
#include "../scratch.h"
#include "hf_fixtures.h"
#include "lynx/gguf.h"

namespace lynx {
namespace {

namespace fs = std::filesystem;

TEST(ConvertCli, WritesWithProgress) {
  if (test::hf_checkpoints().empty()) GTEST_SKIP() << "python3 with numpy is not available";
  const std::string out = test::scratch_path("cli.gguf");
  const auto r =
      test::run_cli("convert " + test::hf_checkpoints() + "/qwen2_moe -o " + out + " --type q8_0");
  ASSERT_EQ(r.code(), 0) << r.out;
  EXPECT_NE(r.out.find("blk.1.ffn_down_exps.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[  37/  37]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + out + ": qwen2moe (model_type qwen2_moe), 37 tensors, q8_0"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(gguf::File::open(out).tensor("blk.0.attn_q.weight").type, gguf::TensorType::Q8_0);
  fs::remove(out);
}

TEST(ConvertCli, BadInputExitsOneAndUsageTwo) {
  const std::string out = test::scratch_path("bad.gguf");
  auto r = test::run_cli("convert /nonexistent/model -o " + out);
  EXPECT_EQ(r.code(), 1) << r.out;
  EXPECT_NE(r.out.find("error: /nonexistent/model: not a directory"), std::string::npos) << r.out;
  r = test::run_cli("convert " + std::string(LYNX_SOURCE_DIR));  // no -o
  EXPECT_EQ(r.code(), 2) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace lynx
