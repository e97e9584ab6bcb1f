// The expert tier's read backends without compute (docs/offload.md "Reads"): GB/s and ms per
// step of claiming, reading and laying out `--experts` random experts of each routed layer,
// the way a decode step's misses arrive, through each backend named by --io, the backends
// interleaved round by round in one process (one model, hence one tier, per backend; the same
// random experts for each backend within a round, fresh ones each round).
//
//   bench_expert_io -m FILE.gguf [--io threads,uring] [--experts 8] [--steps 8] [--rounds 5]
//                   [--readers 4] [--depth 16] [--slots 64]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "lynx/model.h"
#include "model/expert_tier.h"

namespace {

using lynx::ExpertTier;

int run(int argc, char** argv) {
  CLI::App app{"expert tier read backends: GB/s of random experts, no compute"};
  std::string path, ios = "threads,uring";
  int experts = 8, steps = 8, rounds = 5, readers = 4, depth = 16, slots = 64;
  unsigned seed = 1;
  app.add_option("-m,--model", path, "GGUF file")->required();
  app.add_option("--io", ios, "backends, comma separated (threads, uring)");
  app.add_option("--experts", experts, "experts claimed per routed layer and step");
  app.add_option("--steps", steps, "steps per round and backend");
  app.add_option("--rounds", rounds, "rounds (each runs every backend once)");
  app.add_option("--readers", readers, "reader threads (threads backend)");
  app.add_option("--depth", depth, "reads in flight (uring backend)");
  app.add_option("--slots", slots, "slots of each tier");
  app.add_option("--seed", seed, "random experts' seed");
  CLI11_PARSE(app, argc, argv);

  struct Backend {
    std::string name;
    std::unique_ptr<lynx::Model> model;
    std::vector<double> gbps, ms_per_step;
  };
  std::vector<Backend> backends;
  for (size_t a = 0; a <= ios.size();) {
    const size_t b = std::min(ios.find(',', a), ios.size());
    Backend be;
    be.name = ios.substr(a, b - a);
    lynx::LoadOptions o;
    o.expert_io = be.name == "uring" ? lynx::ExpertIo::kUring : lynx::ExpertIo::kThreads;
    o.expert_readers = readers;
    o.expert_queue_depth = depth;
    o.expert_cache = 1;  // one slot, to learn the slot size first
    be.model = lynx::Model::load(path, o);
    const size_t slot = be.model->expert_tier()->slot_bytes();
    o.expert_cache = int64_t(slot) * slots;
    be.model = lynx::Model::load(path, o);
    std::printf("%s: %s\n", be.name.c_str(), be.model->expert_tier_summary().c_str());
    backends.push_back(std::move(be));
    a = b + 1;
  }
  const lynx::ModelConfig& c = backends[0].model->config();
  std::vector<int> routed;
  for (int il = 0; il < c.n_layer; ++il) {
    if (c.layer_routed(il)) routed.push_back(il);
  }
  std::mt19937 rng(seed);
  std::vector<int32_t> all(size_t(c.n_expert));
  for (int e = 0; e < c.n_expert; ++e) all[size_t(e)] = e;
  for (int r = 0; r < rounds; ++r) {
    // This round's experts: [step][layer] `experts` distinct ones.
    std::vector<std::vector<std::vector<int32_t>>> plan(static_cast<size_t>(steps));
    for (auto& step : plan) {
      for (size_t l = 0; l < routed.size(); ++l) {
        std::shuffle(all.begin(), all.end(), rng);
        step.emplace_back(all.begin(), all.begin() + std::min(experts, c.n_expert));
      }
    }
    for (Backend& be : backends) {
      ExpertTier& tier = *be.model->expert_tier();
      const lynx::ExpertTierStats s0 = tier.stats();
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& step : plan) {
        for (size_t l = 0; l < routed.size(); ++l) {
          std::vector<int32_t> want = step[l];
          while (!want.empty()) {
            std::vector<ExpertTier::Claim> claims;
            tier.claim(routed[l], want, claims);
            for (const ExpertTier::Claim& cl : claims) tier.wait(cl);
            tier.release(claims);
          }
        }
      }
      const double s = lynx::bench::seconds_since(t0);
      const lynx::ExpertTierStats s1 = tier.stats();
      const double gb = double(s1.bytes_read - s0.bytes_read) / 1e9;
      const double lay = double(s1.repack_ns - s0.repack_ns) * 1e-9;
      be.gbps.push_back(gb / s);
      be.ms_per_step.push_back(s * 1e3 / steps);
      std::printf("round %d %-8s %.3f GB in %.3f s: %.2f GB/s, %.1f ms/step (%.3f s laying out)\n",
                  r + 1, be.name.c_str(), gb, s, gb / s, s * 1e3 / steps, lay);
      std::fflush(stdout);
    }
  }
  for (Backend& be : backends) {
    std::vector<double> g = be.gbps;
    std::sort(g.begin(), g.end());
    std::printf("%-8s GB/s median %.2f (%.2f-%.2f) over %d rounds; %s\n", be.name.c_str(),
                g[g.size() / 2], g.front(), g.back(), rounds,
                be.model->expert_tier()->io_describe().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return lynx::bench::run_main("bench_expert_io", run, argc, argv);
}
