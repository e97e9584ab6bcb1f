// Cost of structured output per decode step (lynx/grammar.h, docs/benchmarks.md "Structured
// output"): B sequences, each under the grammar of a JSON schema (or json_object), sampled
// from random logits over a vocabulary; the figure is the time of the constrained sampler
// minus the plain one, per step of B tokens. Also the full-mask trie walk per state, cold
// (fresh matcher) and warm (transitions memoized, mask not cached).
//
// The vocabulary: a GGUF's tokens (--vocab-file), grown to --vocab tokens with pieces made of
// two of its tokens (BPE merges are concatenations of tokens), as Qwen3's 151,936 tokens when
// its GGUF is not at hand. Random logits are a worst case for the lazy check: a model's own
// pick is allowed far more often than a random token is.
//   build/release/bin/bench_grammar --vocab-file ../shared/data/vocab/ggml-vocab-deepseek-llm.gguf
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "lynx/gguf.h"
#include "lynx/grammar.h"
#include "lynx/sampler.h"
#include "lynx/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The sampling loops' timer: wall time, or with --clock cpu this thread's CPU time, which a
// machine shared with other jobs inflates far less (the loops run on one thread).
bool g_cpu_clock = false;
double now_ms() {
  if (!g_cpu_clock) {
    return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
  }
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    "kind": {"enum": ["person", "robot", "other"]},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "maxLength": 8}}, "required": ["city"]}},
  "required": ["name", "age", "tags", "kind", "address"]})";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Structured output: mask cost per decode step");
  std::string vocab_file;
  int vocab = 151936, batch = 16, steps = 64;
  float temperature = 1.f;
  app.add_option("--vocab-file", vocab_file, "GGUF whose tokens are used")->required();
  app.add_option("--vocab", vocab, "vocabulary size (grown with merged pieces)");
  app.add_option("--batch", batch, "sequences per step");
  app.add_option("--steps", steps, "decode steps");
  app.add_option("--temperature", temperature, "0 = greedy");
  std::string clock = "wall";
  app.add_option("--clock", clock, "what the sampling loops time: wall or cpu (this thread)")
      ->check(CLI::IsMember({"wall", "cpu"}));
  bool share = false;
  app.add_flag("--share", share,
               "each new output takes its constraint from one grammar::ConstraintCache, as the "
               "server does (requests with the same grammar share the matcher and masks)");
  CLI11_PARSE(app, argc, argv);
  g_cpu_clock = clock == "cpu";

  auto tok = lynx::Tokenizer::from_gguf(lynx::gguf::File::open(vocab_file));
  std::vector<std::string> pieces;
  std::vector<bool> eog;
  for (int32_t id = 0; id < tok->n_vocab(); ++id) {
    eog.push_back(tok->is_eog(id));
    pieces.push_back(tok->is_control(id) ? "" : tok->token_to_piece(id));
  }
  const size_t base = pieces.size();
  std::mt19937 rng(7);
  while (pieces.size() < size_t(vocab)) {
    const std::string& a = pieces[rng() % base];
    const std::string& b = pieces[rng() % base];
    pieces.push_back(a + b);
    eog.push_back(false);
  }
  int32_t eos = -1;
  for (size_t i = 0; i < eog.size(); ++i) {
    if (eog[i]) eos = int32_t(i);
  }
  auto t0 = Clock::now();
  auto index = std::make_shared<lynx::grammar::TokenIndex>(pieces, eog);
  std::printf("vocabulary %zu tokens (%zu from %s), trie %zu nodes, built in %.1f ms\n",
              pieces.size(), base, vocab_file.c_str(), index->n_nodes(), ms_since(t0));

  for (const char* which : {"schema", "json_object"}) {
    const std::string gbnf = std::string(which) == "schema" ? lynx::grammar::schema_to_gbnf(kSchema)
                                                            : lynx::grammar::json_object_gbnf();
    auto g = lynx::grammar::Grammar::parse(gbnf);
    // The full mask at a few states, cold and warm.
    {
      lynx::grammar::Matcher m(g);
      std::vector<uint64_t> bits;
      for (const char* prefix : {"", "{\"name\": \"Jo", "{\"name\": \"Jo\", \"age\": 4"}) {
        const auto s = m.step(m.start(), std::string(prefix));
        if (s == lynx::grammar::kDead) continue;
        t0 = Clock::now();
        index->mask(m, s, bits);
        const double cold = ms_since(t0);
        t0 = Clock::now();
        index->mask(m, s, bits);
        const double warm = ms_since(t0);
        size_t allowed = 0;
        for (uint64_t w : bits) allowed += size_t(__builtin_popcountll(w));
        std::printf("%-11s full mask after '%s': cold %.2f ms, warm %.2f ms, %zu tokens allowed\n",
                    which, prefix, cold, warm, allowed);
      }
    }
    // B sequences, `steps` steps: constrained against plain sampling of the same logits.
    lynx::SamplingParams p;
    p.temperature = temperature;
    std::normal_distribution<float> normal(0.f, 2.f);
    std::vector<std::vector<float>> logits(size_t(batch), std::vector<float>(pieces.size()));
    double plain_ms = 0, constrained_ms = 0;
    int tokens = 0, finished = 0;
    std::vector<std::unique_ptr<lynx::grammar::Constraint>> cs;
    std::vector<lynx::Sampler> plain, constrained;
    // Each sequence its own request: its own compiled grammar, or with --share the cache's.
    lynx::grammar::ConstraintCache cache;
    auto request = [&] {
      return share ? cache.get(g, index) : std::make_unique<lynx::grammar::Constraint>(g, index);
    };
    for (int b = 0; b < batch; ++b) {
      cs.push_back(request());
      p.seed = uint64_t(b);
      plain.emplace_back(p);
      constrained.emplace_back(p);
    }
    for (int step = 0; step < steps; ++step) {
      for (auto& l : logits) {
        for (float& x : l) x = normal(rng);
        if (eos >= 0) l[size_t(eos)] += 8.f;
      }
      double t = now_ms();
      for (int b = 0; b < batch; ++b) plain[size_t(b)].sample(logits[size_t(b)]);
      plain_ms += now_ms() - t;
      t = now_ms();
      for (int b = 0; b < batch; ++b) {
        const int32_t t = constrained[size_t(b)].sample(logits[size_t(b)], cs[size_t(b)].get());
        ++tokens;
        if (t >= 0 && index->is_eog(t)) {
          ++finished;  // start a new output in its place
          cs[size_t(b)] = request();
        }
      }
      constrained_ms += now_ms() - t;
    }
    std::printf(
        "%-11s B=%d T=%.1f: plain sampling %.2f ms/step, constrained %.2f ms/step, mask cost "
        "%.2f ms/step (%d tokens, %d outputs completed; %s time%s)\n",
        which, batch, double(temperature), plain_ms / steps, constrained_ms / steps,
        (constrained_ms - plain_ms) / steps, tokens, finished, g_cpu_clock ? "CPU" : "wall",
        share ? ", shared" : "");
  }
  return 0;
}
