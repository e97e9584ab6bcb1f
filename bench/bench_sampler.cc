// Microseconds per sampled token of the sampler chain (lynx/sampler.h) on random logits of a
// vocabulary size, per configuration: the default greedy and sampled paths, and with
// penalties and a logit bias. Prints figures, asserts nothing.
//   build/release/bin/bench_sampler [--vocab 151936] [--reps 200]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "lynx/sampler.h"

namespace {

double us_per_sample(const lynx::SamplingParams& p, const std::vector<std::vector<float>>& logits,
                     int reps) {
  lynx::Sampler s(p);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  s.set_prompt(prompt);
  int64_t sum = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) sum += s.sample(logits[size_t(r) % logits.size()]);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (sum == -1) std::puts("");  // keeps the loop
  return us / reps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Sampler chain cost per token");
  int vocab = 151936, reps = 200;
  app.add_option("--vocab", vocab, "vocabulary size")->check(CLI::Range(2, 1 << 24));
  app.add_option("--reps", reps, "samples per configuration")->check(CLI::Range(1, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<std::vector<float>> logits(8, std::vector<float>(size_t(vocab)));
  for (auto& l : logits) {
    for (float& x : l) x = normal(gen);
  }
  auto with = [](float t, int k, float top_p, float min_p, bool penalties) {
    lynx::SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    if (penalties) {
      p.frequency_penalty = 0.5f;
      p.presence_penalty = 0.5f;
      p.repeat_penalty = 1.1f;
      p.logit_bias = {{5, 3.f}, {7, -100.f}};
    }
    return p;
  };
  const std::pair<std::string, lynx::SamplingParams> configs[] = {
      {"greedy", with(0, 0, 1, 0, false)},
      {"greedy + penalties + bias", with(0, 0, 1, 0, true)},
      {"T=0.8 top_k=40 top_p=0.95", with(0.8f, 40, 0.95f, 0, false)},
      {"T=0.8 top_k=40 + penalties + bias", with(0.8f, 40, 0.95f, 0, true)},
      {"T=0.8 min_p=0.05", with(0.8f, 0, 1, 0.05f, false)},
      {"T=0.8, no filter", with(0.8f, 0, 1, 0, false)},
      // These logits are flat (normal, sigma 3): the nucleus holds much of the vocabulary.
      {"T=0.8 top_p=0.95, no top_k", with(0.8f, 0, 0.95f, 0, false)},
  };
  std::printf("vocabulary %d, %d samples each\n", vocab, reps);
  for (const auto& [name, p] : configs) {
    std::printf("%-36s %10.1f us/token\n", name.c_str(), us_per_sample(p, logits, reps));
  }
  return 0;
}
