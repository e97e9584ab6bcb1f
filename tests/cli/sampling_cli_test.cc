// generate's sampling flags on the bundled model: penalties lead a greedy loop out, a logit
// bias forces a token, bad values exit 2 naming the flag.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util.h"

namespace lynx {
namespace {

using test::run_cli;

const std::string kModel = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";
const std::string kGen = "generate -m " + kModel + " -p 'Once upon a time' -n 40 -t 1 -q ";

// The text of sequence 0 (from "[0] " to the summary table); -q is left out to get it.
std::string text_of(const std::string& args, int n = 40) {
  const auto r = run_cli("generate -m " + kModel + " -p 'Once upon a time' -t 1 -n " +
                         std::to_string(n) + " " + args);
  EXPECT_EQ(r.code(), 0) << r.out;
  const size_t b = r.out.find("[0] ");
  if (b == std::string::npos) return {};
  return r.out.substr(b, r.out.find("\nrouting ", b) - b);
}

TEST(SamplingCli, PenaltiesAndLogitBias) {
  const std::string plain = text_of("");
  ASSERT_NE(plain.find("the same as the same as the same as"), std::string::npos) << plain;
  for (const char* flags : {"--frequency-penalty 2", "--presence-penalty 2",
                            "--repeat-penalty 1.5 --repeat-last-n -1"}) {
    const std::string t = text_of(flags);
    EXPECT_EQ(t.find("the same as the same as"), std::string::npos) << flags << ": " << t;
  }
  // Token 278 is " the"; llama.cpp's ID+BIAS spelling too.
  for (const char* flags : {"--logit-bias 278=100 --ignore-eos", "--logit-bias 278+100"}) {
    EXPECT_EQ(text_of(flags, 5), "[0] Once upon a time the the the the the\n") << flags;
  }
  // A sampled run with every filter on still runs and is reproducible.
  const std::string all =
      "--temp 0.8 --seed 3 --top-k 40 --typical-p 0.9 --top-p 0.95 --min-p 0.05 "
      "--logit-bias 278=-inf --logit-bias 13=false";
  EXPECT_EQ(text_of(all), text_of(all));
}

TEST(SamplingCli, BadValuesExitTwo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--min-p 1.5", "--min-p"},
      {"--min-p nan", "--min-p"},
      {"--typical-p 0", "--typical-p"},
      {"--presence-penalty 3", "--presence-penalty"},
      {"--frequency-penalty -2.5", "--frequency-penalty"},
      {"--repeat-penalty 0", "--repeat-penalty"},
      {"--repeat-last-n -2", "--repeat-last-n"},
      {"--logit-bias 5", "--logit-bias"},
      {"--logit-bias x=1", "--logit-bias"},
      {"--logit-bias 5=200", "--logit-bias"},
      {"--logit-bias 5=inf", "--logit-bias"},
      {"--logit-bias 5=", "--logit-bias"},
      {"--logit-bias 4096=1", "outside the vocabulary"},
  };
  for (const auto& [flags, expect] : cases) {
    SCOPED_TRACE(flags);
    const auto r = run_cli(kGen + flags);
    EXPECT_EQ(r.code(), 2) << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace lynx
