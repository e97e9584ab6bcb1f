// `lynx-moe calibrate`: bad input exits 2 with a message naming the flag, before any work;
// a small run on the bundled 8x2 model writes one spec line that the engine accepts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lynx/routing.h"
#include "util.h"

namespace lynx {
namespace {

using test::run_cli;

const std::string kModel = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";
// One folder per test: ctest runs the tests as separate processes, at the same time.
std::string tmp_dir() {
  const std::string d = std::string(LYNX_BINARY_DIR) + "/calibrate_cli_" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::create_directories(d);
  return d;
}

// Two short documents, enough for a run that measures something.
std::string make_data() {
  const std::string dir = tmp_dir() + "/docs";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/a.txt") << "The quick brown fox jumps over the lazy dog. It was the best "
                                   "of times, it was the worst of times.\n";
  std::ofstream(dir + "/b.txt") << "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n";
  return dir;
}

TEST(CalibrateCli, BadInputExitsTwoWithAMessage) {
  const std::string kTmp = tmp_dir();
  const std::string data = make_data();
  const std::string c = "calibrate -m " + kModel + " --data " + data + " ";
  const std::string o = " -o " + kTmp + "/spec.txt";
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {c + "--budget 0.5%", "--output"},  // -o is required
      {c + "--budget nan" + o, "--budget"},
      {c + "--budget -1%" + o, "--budget"},
      {c + "--budget 0%" + o, "--budget"},
      {c + "--budget 200%" + o, "--budget"},
      {c + "--budget 2" + o, "--budget"},
      {c + "--budget 0.5%%" + o, "--budget"},
      {c + "--budget abc" + o, "--budget"},
      {c + "--budget 0.5% --metric kl" + o, "nats"},
      {c + "--budget 0.5% --metric mse" + o, "--metric"},
      {c + "--budget 0.5% --policy budget" + o, "no per-layer ladder"},
      {c + "--budget 0.5% --policy oea --ladder 1.5" + o, "whole number"},
      {c + "--budget 0.5% --policy oea --ladder 2" + o, "below k"},  // the 8x2 model: k = 2
      {c + "--budget 0.5% --policy oea --options mass=2" + o, "--options"},
      {c + "--budget 0.5% --policy nosuch" + o, "nosuch"},
      {c + "--budget 0.5% --policy subst --options weights=twin" + o, "--options"},
      {c + "--budget 0.5% --policy subst --options lambda=0.1" + o, "--options"},
      {c + "--budget 0.5% --policy lynx --options growth=1" + o, "--options"},
      {c + "--budget 0.5% --policy subst --ladder 0.1/-1" + o, "--ladder"},
      {c + "--budget 0.5% --ladder 0.1//0.2" + o, "--ladder"},
      {c + "--budget 0.5% --batch 0" + o, "--batch"},
      {c + "--budget 0.5% --tau 1.5" + o, "--tau"},
      {c + "--budget 0.5% --tau nan" + o, "--tau"},
      {c + "--budget 0.5% -o " + kTmp, "not a regular file"},
      {"calibrate -m " + kModel + " --budget 0.5%" + o, "--data"},
  };
  for (const auto& cs : cases) {
    SCOPED_TRACE(cs.args);
    const auto r = run_cli(cs.args);
    EXPECT_EQ(r.code(), 2) << r.out;
    EXPECT_NE(r.out.find(cs.expect), std::string::npos) << r.out;
  }
}

// A run on two small documents: one line, a spec the registry parses and the model accepts
// (cover with one lambda per MoE layer), and eval runs it.
TEST(CalibrateCli, WritesASpecTheEngineAccepts) {
  const std::string kTmp = tmp_dir();
  const std::string data = make_data();
  const std::string out = kTmp + "/fit.txt";
  std::filesystem::remove(out);
  const auto r = run_cli("calibrate -m " + kModel + " --data " + data +
                         " --budget 1% --batch 2 --max-tokens 24 -t 1 -o " + out);
  ASSERT_EQ(r.code(), 0) << r.out;
  EXPECT_NE(r.out.find("Per-layer probes"), std::string::npos) << r.out;
  std::ifstream f(out);
  std::string spec, extra;
  ASSERT_TRUE(std::getline(f, spec));
  EXPECT_FALSE(std::getline(f, extra));
  EXPECT_EQ(spec.rfind("cover:", 0), 0u) << spec;
  EXPECT_NE(spec.find("lambda="), std::string::npos) << spec;
  EXPECT_NO_THROW(make_routing_policy(spec));
  const auto e = run_cli("eval -m " + kModel + " --data " + data +
                         " --batch 2 --max-tokens 24 --gen-prompts 0 --code-lines 0 -t 1 "
                         "--routing 'topk;" +
                         spec + "'");
  EXPECT_EQ(e.code(), 0) << e.out;
}

// oea: one k0 per MoE layer, each a level of the ladder (k = 2 on this model: 2 exact, 1).
TEST(CalibrateCli, OeaWritesAK0PerLayer) {
  const std::string kTmp = tmp_dir();
  const std::string data = make_data();
  const std::string out = kTmp + "/fit.txt";
  std::filesystem::remove(out);
  const auto r = run_cli("calibrate -m " + kModel + " --data " + data +
                         " --policy oea --options window=0.7 --budget 5% --batch 2 "
                         "--max-tokens 24 -t 1 -o " +
                         out);
  ASSERT_EQ(r.code(), 0) << r.out;
  EXPECT_NE(r.out.find("| k0 |"), std::string::npos) << r.out;
  std::ifstream f(out);
  std::string spec;
  ASSERT_TRUE(std::getline(f, spec));
  ASSERT_EQ(spec.rfind("oea:window=0.7,k0=", 0), 0u) << spec;
  std::stringstream levels(spec.substr(spec.find("k0=") + 3));
  std::string level;
  int n = 0;
  while (std::getline(levels, level, '/')) {
    EXPECT_TRUE(level == "1" || level == "2") << spec;
    ++n;
  }
  EXPECT_GE(n, 1) << spec;
  EXPECT_NO_THROW(make_routing_policy(spec));
}

}  // namespace
}  // namespace lynx
