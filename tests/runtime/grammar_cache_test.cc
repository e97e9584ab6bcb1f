// grammar::ConstraintCache: requests with the same grammar share one matcher and mask cache,
// and pick the same tokens, with the same log-probabilities bit for bit, as each request with
// a constraint of its own: interleaved on one thread (as the server's loop samples them), on
// several threads at once, and while the cache evicts and retires the entries they run on.
// Random logits over DeepSeek LLM's vocabulary, a function of the request's seed and step.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <random>
#include <thread>

#include "lynx/gguf.h"
#include "lynx/grammar.h"
#include "lynx/sampler.h"
#include "lynx/tokenizer.h"

namespace lynx::grammar {
namespace {

const std::shared_ptr<const TokenIndex>& index() {
  static const std::shared_ptr<const TokenIndex> i = [] {
    auto tok = Tokenizer::from_gguf(gguf::File::open(std::string(LYNX_SHARED_DIR) +
                                                     "/data/vocab/ggml-vocab-deepseek-llm.gguf"));
    std::vector<std::string> pieces(size_t(tok->n_vocab()));
    std::vector<bool> eog(pieces.size());
    for (int32_t id = 0; id < tok->n_vocab(); ++id) {
      eog[size_t(id)] = tok->is_eog(id);
      if (!tok->is_control(id)) pieces[size_t(id)] = tok->token_to_piece(id);
    }
    return std::make_shared<TokenIndex>(std::move(pieces), std::move(eog));
  }();
  return i;
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 16},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    "kind": {"enum": ["person", "robot"]}},
  "required": ["name", "age", "tags", "kind"]})";

// One request: its sampler, constraint, step and what it picked (token, logprob bits).
struct Request {
  Request(std::unique_ptr<Constraint> constraint, SamplingParams p, unsigned s)
      : c(std::move(constraint)), sampler((p.seed = s, p)), seed(s) {}
  std::unique_ptr<Constraint> c;
  Sampler sampler;
  unsigned seed;
  int step = 0;
  bool done = false;
  std::vector<std::pair<int32_t, uint32_t>> picks;
};

constexpr int kMaxSteps = 120;

// The logits of step `step` of the request with `seed`: a few noise vectors drawn once,
// mixed and shifted per step, closing characters and the end token raised so outputs end.
void make_logits(unsigned seed, int step, std::vector<float>& logits) {
  static const std::vector<std::vector<float>> noise = [] {
    std::mt19937 g(11);
    std::normal_distribution<float> normal(0.f, 2.f);
    std::vector<std::vector<float>> n(6, std::vector<float>(size_t(index()->n_vocab())));
    for (auto& x : n) {
      for (float& y : x) y = normal(g);
    }
    return n;
  }();
  static const std::vector<float> raise = [] {
    std::vector<float> r(size_t(index()->n_vocab()));
    for (size_t i = 0; i < r.size(); ++i) {
      if (index()->piece(int32_t(i)).find_first_of("\"]}") != std::string::npos) r[i] = 3.f;
      if (index()->is_eog(int32_t(i))) r[i] = 12.f;
    }
    return r;
  }();
  std::mt19937 rng(seed * 1000u + unsigned(step));
  const auto& a = noise[rng() % noise.size()];
  const size_t shift = rng() % a.size();
  logits.resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    logits[i] = a[i] + 0.5f * a[(i + shift) % a.size()] + raise[i];
  }
}

void step(Request& r, std::vector<float>& logits) {
  if (r.done) return;
  make_logits(r.seed, r.step++, logits);
  const int32_t t = r.sampler.sample(logits, r.c.get());
  r.picks.emplace_back(t, t < 0 ? 0u : std::bit_cast<uint32_t>(r.sampler.last_logprob(t)));
  r.done = t < 0 || index()->is_eog(t) || r.step == kMaxSteps;
}

// The picks of the request with `seed` under a constraint of its own.
std::vector<std::pair<int32_t, uint32_t>> alone(const std::shared_ptr<const Grammar>& g,
                                                const SamplingParams& p, unsigned seed) {
  Request r(std::make_unique<Constraint>(g, index()), p, seed);
  std::vector<float> logits;
  while (!r.done) step(r, logits);
  return r.picks;
}

std::vector<SamplingParams> params() {
  SamplingParams lazy;  // temperature 1: the lazy check, the mask on refusal
  lazy.temperature = 1.f;
  SamplingParams filtered = lazy;  // a filter: the mask on every step
  filtered.top_p = 0.9f;
  SamplingParams greedy;
  greedy.temperature = 0.f;
  return {lazy, filtered, greedy};
}

TEST(ConstraintCache, InterleavedRequestsPickWhatEachPicksAlone) {
  const auto schema = Grammar::parse(schema_to_gbnf(kSchema));
  for (const SamplingParams& p : params()) {
    ConstraintCache cache;
    std::vector<Request> rs;
    // Four requests with the same grammar, two more arriving mid-way (a parsed copy of the
    // same text: the cache keys by text).
    for (unsigned s = 1; s <= 4; ++s) rs.emplace_back(cache.get(schema, index()), p, s);
    std::vector<float> logits;
    for (int n = 0; n < kMaxSteps; ++n) {
      if (n == 5) {
        for (unsigned s = 5; s <= 6; ++s) {
          rs.emplace_back(cache.get(Grammar::parse(schema->text()), index()), p, s);
        }
      }
      for (Request& r : rs) step(r, logits);
    }
    const ConstraintCache::Stats st = cache.stats();
    EXPECT_EQ(st.misses, 1u);
    EXPECT_EQ(st.hits, 5u);
    for (const Request& r : rs) {
      EXPECT_TRUE(r.done);
      EXPECT_EQ(r.picks, alone(schema, p, r.seed)) << "seed " << r.seed << " T " << p.temperature;
    }
  }
}

TEST(ConstraintCache, ConcurrentThreadsPickWhatEachPicksAlone) {
  const auto schema = Grammar::parse(schema_to_gbnf(kSchema));
  const SamplingParams p = params()[0];
  ConstraintCache cache;
  constexpr unsigned kThreads = 3, kPerThread = 3;
  std::vector<std::vector<Request>> got(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> logits;
      for (unsigned k = 0; k < kPerThread; ++k) {
        Request r(cache.get(schema, index()), p, 100 + t * kPerThread + k);
        while (!r.done) step(r, logits);
        got[t].push_back(std::move(r));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.stats().misses + cache.stats().hits, kThreads * kPerThread);
  for (const auto& rs : got) {
    for (const Request& r : rs) EXPECT_EQ(r.picks, alone(schema, p, r.seed)) << r.seed;
  }
}

TEST(ConstraintCache, EvictionAndRetirementUnderLoadChangeNoPick) {
  // Room for one grammar: each request with the other grammar evicts the entry that the
  // requests in flight run on.
  const auto schema = Grammar::parse(schema_to_gbnf(kSchema));
  const auto object = Grammar::parse(json_object_gbnf());
  Limits small;  // retired once it made a quarter of this
  small.max_states = 1200;
  const auto schema_small = Grammar::parse(schema_to_gbnf(kSchema), "root", small);
  const std::shared_ptr<const Grammar> gs[] = {schema, object, schema_small};
  const SamplingParams p = params()[0];
  ConstraintCache cache(1);
  std::vector<Request> rs;
  std::vector<size_t> which;
  std::vector<float> logits;
  for (int n = 0; rs.size() < 18 ||
                  !std::all_of(rs.begin(), rs.end(), [](const Request& r) { return r.done; });
       ++n) {
    if (n % 4 == 0 && rs.size() < 18) {
      which.push_back(rs.size() % 3);
      rs.emplace_back(cache.get(gs[which.back()], index()), p, unsigned(200 + rs.size()));
    }
    for (Request& r : rs) step(r, logits);
  }
  const ConstraintCache::Stats st = cache.stats();
  EXPECT_EQ(st.entries, 1u);
  EXPECT_GE(st.evicted, 10u);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_TRUE(rs[i].done) << i;
    EXPECT_EQ(rs[i].picks, alone(gs[which[i]], p, rs[i].seed)) << i;
  }
  // Retirement: one grammar, requests one after the other, until its matcher passes a
  // quarter of its state limit; the requests after it start a new one.
  ConstraintCache one;
  for (unsigned s = 300; s < 340 && one.stats().retired == 0; ++s) {
    Request r(one.get(schema_small, index()), p, s);
    while (!r.done) step(r, logits);
    EXPECT_EQ(r.picks, alone(schema_small, p, s)) << s;
  }
  EXPECT_GE(one.stats().retired, 1u);
}

}  // namespace
}  // namespace lynx::grammar
