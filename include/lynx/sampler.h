// Token sampling: the parameters a client sends (OpenAI, llama-server, vLLM) and a seeded,
// per-sequence sampler that applies them as a chain of stages.
//
// The chain, in order (llama.cpp's default order, with the logit bias after the penalties):
//   1. penalties       repetition (over the last repeat_last_n tokens of prompt + output),
//                      then frequency and presence (over this sequence's generated tokens)
//   2. logit_bias      added to the penalized logits (a ban is -inf)
//   3. top_k -> typical_p -> top_p -> min_p   filters on the distribution at temperature 1
//   4. temperature     the kept candidates' logits divided by T, then a seeded draw
// At temperature 0 the pick is the arg max of the penalized, biased logits (of the tokens
// typical_p keeps when it is set; the other filters always keep the arg max).
// docs/serving.md ("Sampling") documents the choices and where they differ from llama.cpp
// and vLLM.
#pragma once
#include <cstdint>
#include <deque>
#include <limits>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lynx {

// A logit bias entry; bias = kBanBias removes the token (llama-server's `false`).
struct LogitBias {
  int32_t token = 0;
  float bias = 0.f;
};
inline constexpr float kBanBias = -std::numeric_limits<float>::infinity();

struct SamplingParams {
  float temperature = 0.f;  // 0 = greedy
  int top_k = 0;            // 0 = off
  float top_p = 1.f;        // 1 = off
  float min_p = 0.f;        // 0 = off: keep tokens with p >= min_p * p_max
  float typical_p = 1.f;    // 1 = off: locally typical sampling (Meister et al. 2022)
  // OpenAI: logit -= frequency_penalty * count + presence_penalty * (count > 0), count over
  // the tokens generated so far in this sequence. 0 = off.
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  // llama.cpp / vLLM / CTRL (Keskar et al. 2019): a logit of a token among the last
  // repeat_last_n tokens of prompt + output is divided by repeat_penalty when positive,
  // multiplied when not. 1 = off; repeat_last_n -1 = every token so far, 0 = off.
  float repeat_penalty = 1.f;
  int repeat_last_n = 64;
  std::vector<LogitBias> logit_bias;  // applied in order (repeated ids add up)
  uint64_t seed = 0;

  bool has_penalties() const;
  bool adjusts_logits() const { return has_penalties() || !logit_bias.empty(); }
};

// Throws lynx::Error naming the parameter when one is out of range (a NaN, a logit_bias id
// outside [0, n_vocab), a bias of +inf or NaN, a logit_bias that bans every token).
void check_sampling_params(const SamplingParams& p, int n_vocab);

// The token history the penalties read, per sequence: counts of the generated tokens
// (frequency, presence) and of the tokens in the repetition window. Kept only for the
// penalties that are on, in hash maps of the distinct tokens seen (never vocabulary-sized).
class PenaltyState {
 public:
  explicit PenaltyState(const SamplingParams& p);
  // The prompt: only the repetition window sees it.
  void accept_prompt(std::span<const int32_t> prompt);
  // A generated token.
  void accept(int32_t token);
  // Repetition penalty, then frequency and presence penalties, on `logits` (full vocabulary).
  void apply(std::span<float> logits) const;

 private:
  void push_window(int32_t token);
  float repeat_ = 1.f, frequency_ = 0.f, presence_ = 0.f;
  int last_n_ = 0;                              // -1: unbounded
  std::unordered_map<int32_t, int> generated_;  // generated token -> count
  std::unordered_map<int32_t, int> in_window_;  // token -> count in the window
  std::deque<int32_t> window_;                  // when bounded: the window's tokens
};

// One candidate token: its logit at the current stage, and its id.
using Candidate = std::pair<float, int32_t>;

// The filter stages, on candidates in any order; each keeps at least one candidate and, when
// it cuts, leaves the kept ones sorted by logit (descending, lower id first on ties); a stage
// that is off leaves them as they are. They read the
// softmax of the candidates' logits (temperature 1), renormalized over the candidates left
// by the stages before, as llama.cpp's do.
namespace sampling {
void sort_by_logit(std::vector<Candidate>& c);
void top_k(std::vector<Candidate>& c, int k);      // the k largest logits
void top_p(std::vector<Candidate>& c, float p);    // the smallest prefix with mass >= p
void min_p(std::vector<Candidate>& c, float p);    // p_i >= p * p_max
void typical(std::vector<Candidate>& c, float p);  // smallest set by |-log p_i - H|, mass > p
void add_logit_bias(std::span<float> logits, std::span<const LogitBias> bias);
}  // namespace sampling

// What may come next in a sequence whose output is constrained (structured output:
// lynx/grammar.h implements it for grammars). The sampler asks allows() for the token it
// drew when that is exact (below), else apply() removes what cannot follow, then accept()s
// the token it picks.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual bool allows(int32_t token) = 0;
  // Sets the logits of the tokens that cannot follow to -inf; false when none can follow.
  virtual bool apply(std::span<float> logits) = 0;
  virtual void accept(int32_t token) = 0;
  // The tokens that can follow as bits (token t: bit t % 64 of word t / 64), covering the
  // first `n_tokens` ids (the ones past it cannot follow); null where the constraint has no
  // such mask (then the sampler copies the logits and calls apply()). Valid until the next
  // call on the constraint. Lets the sampler pick among the allowed tokens in place of
  // copying and masking the whole vocabulary's logits.
  virtual const uint64_t* mask_bits(size_t& n_tokens) {
    n_tokens = 0;
    return nullptr;
  }
};

// Seeded sampler of one sequence: the same seed, prompt and logits give the same tokens.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // The sequence's prompt, for the repetition penalty's window (call before sampling).
  void set_prompt(std::span<const int32_t> prompt);
  // Picks the next token from the model's logits (full vocabulary) and records it as
  // generated (the penalties of the next call see it).
  int32_t sample(std::span<const float> logits);
  // The same under a constraint: only tokens it allows are picked. When no filter is on
  // (top_k, top_p, min_p, typical_p off), the token is first drawn from the unconstrained
  // distribution and kept when the constraint allows it (llama.cpp's lazy check); otherwise,
  // or when refused, the constraint masks the logits and the draw is made again. Both give
  // exactly the masked distribution: greedy keeps the arg max, and for a plain temperature
  // draw, rejecting and drawing again from the renormalized rest is P(t) / P(allowed).
  // With a filter on, the mask comes first (filters on the masked distribution). Returns -1
  // when the constraint allows no token.
  int32_t sample(std::span<const float> logits, TokenConstraint* constraint);
  // log-probability of `token` under the distribution last sampled from, over the whole
  // vocabulary: the log-softmax of the penalized, biased logits divided by the temperature
  // (1 when greedy), before the filters (top_k, typical_p, top_p, min_p) cut it. Reads the
  // logits given to the last sample(), which must still be alive.
  float last_logprob(int32_t token) const;

 private:
  int32_t draw();
  // The refused or filtered path under a constraint with mask_bits(): the arg max or the draw
  // among the allowed tokens of `base`, which stays as it is (no copy of the vocabulary).
  int32_t pick_masked(std::span<const float> base, const uint64_t* bits, size_t n_bits);
  bool allowed(size_t i) const { return i < mask_n_ && ((mask_[i >> 6] >> (i & 63)) & 1); }
  SamplingParams p_;
  PenaltyState penalties_;
  std::mt19937_64 rng_;
  std::vector<Candidate> cand_;
  std::vector<double> prob_;
  std::vector<float> adjusted_;  // penalized and biased logits, when p_.adjusts_logits()
  // last_logprob's log-sum-exp, computed on its first call after a sample().
  mutable bool logsum_ready_ = false;
  mutable float last_logsum_ = 0.f;
  mutable float last_max_ = 0.f;
  std::span<const float> last_logits_;  // the logits of the last sample()
  // The mask the last sample() picked under (a copy: the constraint's own may be freed), and
  // whether it applies: then tokens outside it have probability 0 in last_logprob().
  std::vector<uint64_t> mask_;
  size_t mask_n_ = 0;
  bool masked_ = false;
};

// Greedy arg max (lowest id on ties).
int32_t argmax(std::span<const float> logits);

}  // namespace lynx
