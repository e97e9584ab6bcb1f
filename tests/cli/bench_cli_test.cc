// `lynx-moe bench` end to end on the bundled 8x2 model: the JSON it prints carries every
// policy's row per batch size with the fields the benchmark docs quote, the first policy's
// speedups are 1 by construction, and bad options fail with a message instead of a crash.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

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
  const CliRun no_file = run_cli("bench -m /nonexistent.gguf --batch 1");
  EXPECT_NE(no_file.status, 0);
  EXPECT_EQ(no_file.out.find("terminate called"), std::string::npos) << no_file.out;
}

}  // namespace
