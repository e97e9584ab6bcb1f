// `lynx-moe place` and `route-sim --ranks` end to end: the placement file's shape, the
// expert-parallel table and the measured-vs-predicted hook, and bad input failing with the
// README's exit codes (2: bad command line, 1: a broken file or a failed write).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "analysis/trace.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using lynx::test::CliRun;
using lynx::test::run_cli;

const std::string kModel = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";

class EpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lynx_ep_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // A trace of 2 layers, 8 experts, 2 per token, 64 tokens of random logits: the bundled
    // 8x2 model's expert count, so -m sizes fit it.
    trace_ = (dir_ / "t.lxrt").string();
    lynx::analysis::TraceHeader h;
    h.n_layers = 2;
    h.n_expert = 8;
    h.n_expert_used = 2;
    lynx::analysis::TraceWriter w(trace_, h);
    std::mt19937_64 rng(7);
    std::normal_distribution<float> nd(0.f, 2.f);
    std::vector<float> z(64 * 8);
    for (int l = 0; l < 2; ++l) {
      for (float& v : z) v = nd(rng);
      w.write(0, l, 64, nullptr, z.data());
    }
    w.close();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void put(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
  }
  fs::path dir_;
  std::string trace_;
};

TEST_F(EpCli, PlaceWritesEveryExpertOnceWithEqualCounts) {
  const CliRun r = run_cli("place --trace " + trace_ + " --ranks 4 -o " + path("p.json"));
  ASSERT_EQ(r.code(), 0) << r.out;
  EXPECT_NE(r.out.find("contiguous"), std::string::npos) << r.out;  // the imbalance report
  std::ifstream f(path("p.json"));
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["ranks"], 4);
  EXPECT_EQ(j["experts"], 8);
  ASSERT_EQ(j["layers"].size(), 2u);
  for (const auto& layer : j["layers"]) {
    ASSERT_EQ(layer.size(), 8u);
    std::vector<int> held(4, 0);
    for (const auto& rank : layer) ++held.at(rank.get<size_t>());
    EXPECT_EQ(held, (std::vector<int>{2, 2, 2, 2}));
  }
  const CliRun c = run_cli("place --contiguous --experts 8 --layers 3 --ranks 4");
  ASSERT_EQ(c.code(), 0) << c.out;
  const auto jc = nlohmann::json::parse(c.out.substr(c.out.find('{')));
  EXPECT_EQ(jc["layers"], nlohmann::json::parse("[[0,0,1,1,2,2,3,3],[0,0,1,1,2,2,3,3],"
                                                "[0,0,1,1,2,2,3,3]]"));
}

TEST_F(EpCli, PlaceRejectsBadInput) {
  EXPECT_EQ(run_cli("place --trace " + trace_ + " --ranks 0").code(), 2);
  const CliRun many = run_cli("place --trace " + trace_ + " --ranks 9");
  EXPECT_EQ(many.code(), 2);
  EXPECT_NE(many.out.find("more than the 8 experts"), std::string::npos) << many.out;
  EXPECT_EQ(run_cli("place --ranks 2").code(), 2);               // neither trace nor sizes
  EXPECT_EQ(run_cli("place --contiguous --ranks 2").code(), 2);  // no --experts / --layers
  EXPECT_EQ(run_cli("place --trace " + dir_.string() + " --ranks 2").code(), 2);  // a directory
  put("junk.lxrt", "this is not a routing trace at all, just text");
  const CliRun junk = run_cli("place --trace " + path("junk.lxrt") + " --ranks 2");
  EXPECT_EQ(junk.code(), 1);
  EXPECT_NE(junk.out.find("not a routing trace"), std::string::npos) << junk.out;
  EXPECT_EQ(run_cli("place --trace /nonexistent.lxrt --ranks 2").code(), 1);
  EXPECT_EQ(run_cli("place --trace " + trace_ + " --ranks 2 -o /nonexistent-dir/p.json").code(), 1);
  EXPECT_EQ(run_cli("place --trace " + trace_ + " --ranks 2 -o " + dir_.string()).code(), 2);
}

TEST_F(EpCli, RouteSimRanksTable) {
  const CliRun r = run_cli("route-sim --routing 'topk;lynx' --trace " + trace_ + " -m " + kModel +
                           " --ranks 1,2,4,8,16 --batch 4,8 --steps 20 -o json");
  ASSERT_EQ(r.code(), 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find("[\n")));
  // Per batch and policy: R = 1, then contiguous + balanced at 2, 4 and 8, sliced at 16.
  ASSERT_EQ(j.size(), 2u * 2u * 8u);
  for (const auto& row : j) {
    EXPECT_GT(row["tpot_allreduce_ms"].get<double>(), 0);
    EXPECT_GE(row["imbalance"].get<double>(), 1.0 - 1e-9);
    if (row["ranks"] == 16) {
      EXPECT_EQ(row["slices"], 2);
    }
  }
}

TEST_F(EpCli, RouteSimEvaluatesAPlacementFile) {
  // place's balanced file for the same trace is the placement route-sim balances: same rows.
  ASSERT_EQ(run_cli("place --trace " + trace_ + " --ranks 4 -o " + path("p4.json")).code(), 0);
  const CliRun r = run_cli("route-sim --routing topk --trace " + trace_ + " -m " + kModel +
                           " --ranks 2 --batch 8 --steps 30 --placement balanced "
                           "--placement-file " +
                           path("p4.json") + " -o json");
  ASSERT_EQ(r.code(), 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find("[\n")));
  const nlohmann::json* balanced = nullptr;
  const nlohmann::json* file = nullptr;
  for (const auto& row : j) {
    if (row["ranks"] == 4 && row["placement"] == "balanced") balanced = &row;
    if (row["ranks"] == 4 && row["placement"] == "file") file = &row;
  }
  ASSERT_TRUE(balanced && file) << r.out;  // rank count 4 was added for the file
  EXPECT_EQ((*file)["experts_max"], (*balanced)["experts_max"]);
  EXPECT_EQ((*file)["tpot_a2a_ms"], (*balanced)["tpot_a2a_ms"]);
  put("bad.json", "{\"ranks\": 4, \"experts\": 8, \"layers\": [[0, 0, 0, 1, 1, 2, 2, 3]]}");
  const CliRun bad = run_cli("route-sim --routing topk --trace " + trace_ + " -m " + kModel +
                             " --ranks 2 --placement-file " + path("bad.json"));
  EXPECT_EQ(bad.code(), 1);
  EXPECT_NE(bad.out.find("holds 3 experts"), std::string::npos) << bad.out;
  put("junk.json", "{\"ranks\": 4,");
  EXPECT_EQ(run_cli("route-sim --routing topk --trace " + trace_ + " -m " + kModel +
                    " --ranks 2 --placement-file " + path("junk.json"))
                .code(),
            1);
}

TEST_F(EpCli, RouteSimMeasuredHook) {
  put("m.csv",
      "policy,batch,ranks,tpot_ms\n"
      "topk,4,1,1.0\n"
      "topk,4,2,0.8\n"
      "\"lynx:alpha=3,beta=4\",4,4,0.7\n");
  const CliRun r = run_cli(
      "route-sim --routing topk --experts 8 --k 2 --expert-bytes 1e6 "
      "--hidden 256 --moe-layers 4 --ranks 8 --batch 16 --steps 20 "
      "--measured " +
      path("m.csv") + " -o json");
  ASSERT_EQ(r.code(), 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find("[\n")));
  ASSERT_EQ(j.size(), 3u);  // the measured rows' batch, ranks and policies were simulated
  for (const auto& row : j) {
    ASSERT_FALSE(row["predicted_ms"].is_null()) << row;
    EXPECT_NEAR(row["ratio"].get<double>(),
                row["predicted_ms"].get<double>() / row["measured_ms"].get<double>(), 1e-3);
  }
  put("bad.csv", "policy,batch,ranks,tpot_ms\ntopk,4,two,1.0\n");
  const CliRun bad = run_cli(
      "route-sim --routing topk --experts 8 --k 2 --expert-bytes 1e6 "
      "--hidden 256 --ranks 2 --measured " +
      path("bad.csv"));
  EXPECT_EQ(bad.code(), 1);
  EXPECT_NE(bad.out.find("line 2"), std::string::npos) << bad.out;
}

TEST_F(EpCli, RouteSimRanksRejectsBadInput) {
  const std::string sizes = " --expert-bytes 1e6 --hidden 256 --routing topk --steps 5";
  EXPECT_EQ(run_cli("route-sim --experts 8 --k 2 --ranks 0" + sizes).code(), 2);
  EXPECT_EQ(run_cli("route-sim --experts 8 --k 2 --ranks 12" + sizes).code(), 2);        // not 8m
  EXPECT_EQ(run_cli("route-sim --experts 8 --k 2 --ranks 4 --routing topk").code(), 2);  // sizes
  EXPECT_EQ(run_cli("route-sim --experts 8 --k 2 --ranks 4 --placement nosuch" + sizes).code(), 2);
  EXPECT_EQ(
      run_cli("route-sim --experts 64 --k 8 --ranks 4 -m " + kModel + " --routing topk").code(),
      2);  // the model has 8 experts
  EXPECT_EQ(run_cli("route-sim --ranks 4 --shape nosuch --routing topk").code(), 2);
  EXPECT_EQ(run_cli("route-sim --measured x.csv --routing topk").code(), 2);  // needs --ranks
  put("junk.lxrt", "LXRT but nothing else");
  EXPECT_EQ(run_cli("route-sim --ranks 2 --trace " + path("junk.lxrt") + sizes).code(), 1);
}

}  // namespace
