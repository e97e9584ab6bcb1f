// `lynx-moe bench` end to end on the bundled 8x2 model: the JSON it prints carries every
// policy's row per batch size with the fields the benchmark docs quote, the first policy's
// speedups are 1 by construction, and bad options fail with a message instead of a crash.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "util.h"

namespace {

using lynx::test::CliRun;
using lynx::test::run_cli;

const std::string kModel = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";

TEST(BenchCli, JsonHasEveryPolicyAndBatchWithExpertFields) {
  const CliRun r = run_cli("bench -m " + kModel +
                           " --routing 'topk;lynx;static-k:k=1' --batch 1,3 --prompt 4 --gen 3 -r 2"
                           " --bandwidth 50 -o json");
  ASSERT_EQ(r.status, 0) << r.out;
  // stderr (load and progress lines) comes first; the JSON document starts at its first '{'.
  const size_t start = r.out.find("{\n");
  ASSERT_NE(start, std::string::npos) << r.out;
  const auto doc = nlohmann::json::parse(r.out.substr(start));
  ASSERT_TRUE(doc.contains("fma_peak_gflops"));
  EXPECT_GT(doc["fma_peak_gflops"]["2"].get<double>(), 0.0);
  const auto& rows = doc["rows"];
  ASSERT_EQ(rows.size(), 6u);
  for (const auto& row : rows) {
    for (const char* key :
         {"tpot_ms", "expert_ms", "expert_speedup_vs_first", "expert_bytes_per_step",
          "expert_roofline_ratio", "distinct_experts", "speedup_vs_first", "routing_ms"}) {
      ASSERT_TRUE(row.contains(key)) << key;
    }
    EXPECT_GT(row["tpot_ms"].get<double>(), 0.0);
    EXPECT_GT(row["expert_ms"].get<double>(), 0.0);
    EXPECT_LT(row["expert_ms"].get<double>(), row["tpot_ms"].get<double>());
    if (row["policy"] == "topk") {
      EXPECT_DOUBLE_EQ(row["speedup_vs_first"].get<double>(), 1.0);
      EXPECT_DOUBLE_EQ(row["expert_speedup_vs_first"].get<double>(), 1.0);
    }
    // static-k:k=1 reads one expert per token: fewer expert bytes than exact top-2 from B=1.
    if (row["policy"] == "static-k:k=1") {
      for (const auto& o : rows) {
        if (o["policy"] == "topk" && o["batch"] == row["batch"]) {
          EXPECT_LT(row["expert_bytes_per_step"].get<double>(),
                    o["expert_bytes_per_step"].get<double>());
        }
      }
    }
  }
}

TEST(BenchCli, BadOptionsFailWithAMessage) {
  const CliRun bad_batch = run_cli("bench -m " + kModel + " --batch 0 -o json");
  EXPECT_NE(bad_batch.status, 0);
  EXPECT_NE(bad_batch.out.find("--batch"), std::string::npos) << bad_batch.out;
  const CliRun bad_policy = run_cli("bench -m " + kModel + " --routing 'nosuch' --batch 1 --gen 1");
  EXPECT_NE(bad_policy.status, 0);
  EXPECT_NE(bad_policy.out.find("nosuch"), std::string::npos) << bad_policy.out;
  const CliRun bad_bw = run_cli("bench -m " + kModel + " --batch 1 --bw-sizes 1024,4");
  EXPECT_NE(bad_bw.status, 0);
  EXPECT_NE(bad_bw.out.find("--bw-sizes"), std::string::npos) << bad_bw.out;
  const CliRun no_file = run_cli("bench -m /nonexistent.gguf --batch 1");
  EXPECT_NE(no_file.status, 0);
  EXPECT_EQ(no_file.out.find("terminate called"), std::string::npos) << no_file.out;
}

// Writes `lines` to a file under the test's temporary directory and returns its path.
std::string write_prompts(const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = ::testing::TempDir() + name + "." + std::to_string(getpid());
  std::ofstream f(path);
  for (const auto& l : lines) f << l << "\n";
  return path;
}

double distinct_at(const nlohmann::json& rows, int batch) {
  for (const auto& row : rows) {
    if (row["batch"] == batch) return row["distinct_experts"].get<double>();
  }
  ADD_FAILURE() << "no row for batch " << batch;
  return 0;
}

nlohmann::json bench_rows(const std::string& prompt_file) {
  const CliRun r = run_cli("bench -m " + kModel + " --batch 1,3 --prompt 4 --gen 3 -r 1" +
                           " --bandwidth 50 -o json --prompt-file " + prompt_file);
  EXPECT_EQ(r.status, 0) << r.out;
  const size_t start = r.out.find("{\n");
  if (start == std::string::npos) {
    ADD_FAILURE() << r.out;
    return nlohmann::json::array();
  }
  return nlohmann::json::parse(r.out.substr(start))["rows"];
}

// --prompt-file's lines are the sequences: three copies of one prompt decode in lockstep and
// route alike (the batch activates what one sequence does, llama-batched-bench's trap), three
// different prompts activate more experts per layer.
TEST(BenchCli, PromptFileLinesAreTheSequences) {
  const std::string same = write_prompts("same", {"5 6 7 8", "5 6 7 8", "5,6,7,8 9"});
  const std::string diff = write_prompts("diff", {"5 6 7 8", "100 200 300 400", "11 52 93 14"});
  const auto same_rows = bench_rows(same);
  const auto diff_rows = bench_rows(diff);
  EXPECT_DOUBLE_EQ(distinct_at(same_rows, 3), distinct_at(same_rows, 1));
  EXPECT_GT(distinct_at(diff_rows, 3), distinct_at(diff_rows, 1));
  std::remove(same.c_str());
  std::remove(diff.c_str());
}

// --warmup runs each cell's prompts once, untimed, in the same context before the measured
// ones: the measured steps route the same sequences alike (the warm-up's sequences are gone),
// and the prefill is still timed.
TEST(BenchCli, WarmupLeavesTheMeasuredStepsAlone) {
  const std::string diff = write_prompts("warm", {"5 6 7 8", "100 200 300 400", "11 52 93 14"});
  const auto cold = bench_rows(diff);
  const CliRun r = run_cli("bench -m " + kModel + " --batch 1,3 --prompt 4 --gen 3 -r 1" +
                           " --bandwidth 50 -o json --warmup --prompt-file " + diff);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto warm = nlohmann::json::parse(r.out.substr(r.out.find("{\n")))["rows"];
  ASSERT_EQ(warm.size(), cold.size());
  for (size_t i = 0; i < warm.size(); ++i) {
    EXPECT_EQ(warm[i]["batch"], cold[i]["batch"]);
    EXPECT_DOUBLE_EQ(warm[i]["distinct_experts"].get<double>(),
                     cold[i]["distinct_experts"].get<double>());
    EXPECT_DOUBLE_EQ(warm[i]["expert_bytes_per_step"].get<double>(),
                     cold[i]["expert_bytes_per_step"].get<double>());
    EXPECT_GT(warm[i]["prefill_tps"].get<double>(), 0.0);
  }
  std::remove(diff.c_str());
}

TEST(BenchCli, BadPromptFileFailsWithAMessage) {
  const std::string few = write_prompts("few", {"1 2 3 4"});
  const std::string shrt = write_prompts("short", {"1 2", "3 4"});
  const std::string oov = write_prompts("oov", {"1 2 3 99999999"});
  const std::string text = write_prompts("text", {"1 2 x 4"});
  for (const auto& [file, batch, what] :
       {std::tuple{few, 2, "largest --batch"}, std::tuple{shrt, 1, "--prompt needs"},
        std::tuple{oov, 1, "not a token id"}, std::tuple{text, 1, "not a token id"},
        std::tuple{std::string("/nonexistent/prompts"), 1, "cannot open"}}) {
    const CliRun r = run_cli("bench -m " + kModel + " --batch " + std::to_string(batch) +
                             " --prompt 4 --gen 1 -r 1 --bandwidth 50 --prompt-file " + file);
    EXPECT_NE(r.status, 0) << file;
    EXPECT_NE(r.out.find(what), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("terminate called"), std::string::npos) << r.out;
  }
  for (const auto& f : {few, shrt, oov, text}) std::remove(f.c_str());
}

}  // namespace
