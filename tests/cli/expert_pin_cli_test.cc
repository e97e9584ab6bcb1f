// `--expert-pin TRACE` end to end on the bundled 8x2 model: a trace recorded by `generate
// --record-trace` pins experts at load (the load line says how many), greedy text is the
// fully loaded model's, and a trace of another model or a missing file fails with a message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "util.h"

namespace {

using lynx::test::CliRun;
using lynx::test::run_cli;

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/models/";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("lynx_pin_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// The generated text: from the sequence's "[0]" to the summary table.
std::string text_of(const CliRun& r) {
  const size_t at = r.out.find("[0]");
  if (at == std::string::npos) return "";
  return r.out.substr(at, r.out.find("\nrouting", at) - at);
}

TEST(ExpertPinCli, PinsFromATraceAndKeepsTheText) {
  const std::string trace = temp_path("a.lxrt");
  const std::string model = kDir + "lynx-moe-8x2.gguf";
  const CliRun rec = run_cli("generate -m " + model +
                             " -p 'the cat sat on' -n 12 --temp 0.8 --seed 3 --ignore-eos -q "
                             "--record-trace " +
                             trace);
  ASSERT_EQ(rec.code(), 0) << rec.out;
  const std::string gen = "generate -m " + model + " -p 'a dog ran to' -n 12 --temp 0 --ignore-eos";
  const CliRun full = run_cli(gen + " --expert-cache 0");
  ASSERT_EQ(full.code(), 0) << full.out;
  const CliRun pinned = run_cli(gen + " --expert-cache 4M --expert-pin " + trace);
  ASSERT_EQ(pinned.code(), 0) << pinned.out;
  EXPECT_NE(pinned.out.find("experts pinned from a routing trace"), std::string::npos)
      << pinned.out;
  EXPECT_FALSE(text_of(full).empty()) << full.out;
  EXPECT_EQ(text_of(pinned), text_of(full)) << pinned.out;

  // A trace of the 64-expert model does not fit the 8-expert one.
  const std::string other = temp_path("b.lxrt");
  const CliRun rec64 = run_cli("generate -m " + kDir +
                               "lynx-moe-64x8.gguf -p 'hello' -n 2 -q --record-trace " + other);
  ASSERT_EQ(rec64.code(), 0) << rec64.out;
  const CliRun bad = run_cli(gen + " --expert-cache 4M --expert-pin " + other);
  EXPECT_NE(bad.code(), 0);
  EXPECT_NE(bad.out.find("--expert-pin: routing trace"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("records 64 experts per layer, the model has 8"), std::string::npos)
      << bad.out;
  const CliRun missing = run_cli(gen + " --expert-cache 4M --expert-pin " + temp_path("none"));
  EXPECT_NE(missing.code(), 0);
  EXPECT_NE(missing.out.find("cannot open routing trace"), std::string::npos) << missing.out;
  std::remove(trace.c_str());
  std::remove(other.c_str());
}

}  // namespace
