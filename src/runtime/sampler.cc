// The sampler chain (see lynx/sampler.h): penalties, logit bias, filters, temperature.
#include "lynx/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_set>

#include "lynx/error.h"

namespace lynx {

bool SamplingParams::has_penalties() const {
  return (repeat_penalty != 1.f && repeat_last_n != 0) || frequency_penalty != 0.f ||
         presence_penalty != 0.f;
}

void check_sampling_params(const SamplingParams& p, int n_vocab) {
  auto bad = [](const std::string& what) { throw Error("sampling: " + what); };
  if (!(p.temperature >= 0) || std::isinf(p.temperature)) bad("temperature must be >= 0");
  if (p.top_k < 0) bad("top_k must be >= 0");
  if (!(p.top_p > 0 && p.top_p <= 1)) bad("top_p must be in (0, 1]");
  if (!(p.min_p >= 0 && p.min_p <= 1)) bad("min_p must be in [0, 1]");
  if (!(p.typical_p > 0 && p.typical_p <= 1)) bad("typical_p must be in (0, 1]");
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) {
    bad("presence and frequency penalties must be finite");
  }
  if (!(p.repeat_penalty > 0) || std::isinf(p.repeat_penalty)) {
    bad("repeat_penalty must be a positive number");
  }
  if (p.repeat_last_n < -1) bad("repeat_last_n must be >= -1");
  std::unordered_set<int32_t> banned;
  for (const LogitBias& b : p.logit_bias) {
    if (b.token < 0 || b.token >= n_vocab) {
      bad("logit_bias token id " + std::to_string(b.token) + " is outside the vocabulary (" +
          std::to_string(n_vocab) + " tokens)");
    }
    if (std::isnan(b.bias) || b.bias == std::numeric_limits<float>::infinity()) {
      bad("logit_bias of token " + std::to_string(b.token) + " is not a number or -inf");
    }
    if (b.bias == kBanBias) banned.insert(b.token);
  }
  if (n_vocab > 0 && banned.size() >= size_t(n_vocab)) bad("logit_bias bans every token");
}

// ---------------------------------------------------------------------------------------
// Penalties

PenaltyState::PenaltyState(const SamplingParams& p)
    : repeat_(p.repeat_penalty), frequency_(p.frequency_penalty), presence_(p.presence_penalty) {
  last_n_ = repeat_ != 1.f ? p.repeat_last_n : 0;
}

void PenaltyState::push_window(int32_t token) {
  ++in_window_[token];
  if (last_n_ < 0) return;  // unbounded: every token so far
  window_.push_back(token);
  if (window_.size() > size_t(last_n_)) {
    const int32_t old = window_.front();
    window_.pop_front();
    auto it = in_window_.find(old);
    if (--it->second == 0) in_window_.erase(it);
  }
}

void PenaltyState::accept_prompt(std::span<const int32_t> prompt) {
  if (last_n_ == 0) return;
  // A bounded window sees only the prompt's last tokens.
  const size_t from =
      last_n_ > 0 && prompt.size() > size_t(last_n_) ? prompt.size() - size_t(last_n_) : 0;
  for (size_t i = from; i < prompt.size(); ++i) push_window(prompt[i]);
}

void PenaltyState::accept(int32_t token) {
  if (frequency_ != 0.f || presence_ != 0.f) ++generated_[token];
  if (last_n_ != 0) push_window(token);
}

void PenaltyState::apply(std::span<float> logits) const {
  // llama.cpp's llama_sampler_penalties_apply and vLLM's apply_penalties: divide a positive
  // logit, multiply a non-positive one, so that the penalty always lowers the token.
  for (const auto& [tok, n] : in_window_) {
    if (size_t(tok) >= logits.size()) continue;
    float& l = logits[size_t(tok)];
    l = l <= 0.f ? l * repeat_ : l / repeat_;
  }
  // OpenAI's definition (platform.openai.com/docs/advanced-usage, "frequency and presence
  // penalties"): mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence.
  for (const auto& [tok, n] : generated_) {
    if (size_t(tok) >= logits.size()) continue;
    logits[size_t(tok)] -= float(n) * frequency_ + presence_;
  }
}

// ---------------------------------------------------------------------------------------
// Filters

namespace sampling {
namespace {

bool by_logit(const Candidate& a, const Candidate& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

void ensure_sorted(std::vector<Candidate>& c) {
  if (!std::is_sorted(c.begin(), c.end(), by_logit)) std::sort(c.begin(), c.end(), by_logit);
}

// Softmax of sorted candidates' logits (c[0] is the largest), in double.
std::vector<double> softmax(const std::vector<Candidate>& c) {
  std::vector<double> p(c.size());
  if (c.empty()) return p;
  const double top = c[0].first;
  double sum = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    // All -inf (every token banned): uniform rather than NaN.
    p[i] = std::isinf(top) ? 1.0 : std::exp(double(c[i].first) - top);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

}  // namespace

void sort_by_logit(std::vector<Candidate>& c) {
  std::sort(c.begin(), c.end(), by_logit);
}

void top_k(std::vector<Candidate>& c, int k) {
  if (k <= 0 || size_t(k) >= c.size()) return;
  std::partial_sort(c.begin(), c.begin() + k, c.end(), by_logit);
  c.resize(size_t(k));
}

void top_p(std::vector<Candidate>& c, float p) {
  if (p >= 1.f || c.size() <= 1) return;
  if (!std::is_sorted(c.begin(), c.end(), by_logit)) {
    // Unsorted (no top_k before): sort only the tokens above a threshold whose mass already
    // reaches p, lowering it until it does. Those tokens are a prefix of the sorted order, so
    // the cut below is the one over all of them (normalized by the whole mass), without the
    // O(V log V) sort of a 150k-token vocabulary.
    double top = -HUGE_VAL;
    for (const Candidate& x : c) top = std::max(top, double(x.first));
    if (std::isinf(top)) return;  // all banned: nothing to cut
    double total = 0;
    for (const Candidate& x : c) total += std::exp(double(x.first) - top);
    for (double d = 8;; d *= 2) {
      const double thr = top - d;
      double mass = 0;
      for (const Candidate& x : c) {
        if (double(x.first) >= thr) mass += std::exp(double(x.first) - top);
      }
      if (mass >= double(p) * total || d > 1e300) {
        std::erase_if(c, [&](const Candidate& x) { return !(double(x.first) >= thr); });
        break;
      }
    }
    std::sort(c.begin(), c.end(), by_logit);
    double acc = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      acc += std::exp(double(c[i].first) - top) / total;
      if (acc >= double(p)) {
        c.resize(i + 1);
        return;
      }
    }
    return;
  }
  const std::vector<double> prob = softmax(c);
  double acc = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    acc += prob[i];
    if (acc >= double(p)) {
      c.resize(i + 1);
      return;
    }
  }
}

void min_p(std::vector<Candidate>& c, float p) {
  if (p <= 0.f || c.size() <= 1) return;
  // p_i / p_max = exp(l_i - l_max) >= p; the largest always stays. A condition on each
  // token's own logit: cut first, then sort the (few) kept.
  double top = -HUGE_VAL;
  for (const Candidate& x : c) top = std::max(top, double(x.first));
  if (std::isinf(top)) return;
  std::erase_if(
      c, [&](const Candidate& x) { return !(std::exp(double(x.first) - top) >= double(p)); });
  ensure_sorted(c);
}

void typical(std::vector<Candidate>& c, float p) {
  if (p >= 1.f || c.size() <= 1) return;
  ensure_sorted(c);
  // Meister et al. 2022, "Locally Typical Sampling", as llama.cpp's llama_sampler_typical:
  // the tokens whose information -log p_i is closest to the entropy H, taken in that order
  // until their mass exceeds p.
  const std::vector<double> prob = softmax(c);
  double h = 0;
  for (double x : prob) {
    if (x > 0) h -= x * std::log(x);
  }
  std::vector<double> score(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    score[i] = prob[i] > 0 ? std::abs(-std::log(prob[i]) - h) : HUGE_VAL;
  }
  std::vector<size_t> order(c.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return score[a] < score[b]; });
  double acc = 0;
  size_t keep = order.size();
  for (size_t i = 0; i < order.size(); ++i) {
    acc += prob[order[i]];
    if (acc > double(p)) {
      keep = i + 1;
      break;
    }
  }
  std::vector<Candidate> kept;
  kept.reserve(keep);
  for (size_t i = 0; i < keep; ++i) kept.push_back(c[order[i]]);
  std::sort(kept.begin(), kept.end(), by_logit);
  c = std::move(kept);
}

void add_logit_bias(std::span<float> logits, std::span<const LogitBias> bias) {
  for (const LogitBias& b : bias) {
    if (b.token >= 0 && size_t(b.token) < logits.size()) logits[size_t(b.token)] += b.bias;
  }
}

}  // namespace sampling

// ---------------------------------------------------------------------------------------
// Sampler

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) return 0;
  int32_t best = 0;
  float v = logits[0];  // kept in a register: the loop is one compare per logit
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > v) {
      v = logits[i];
      best = int32_t(i);
    }
  }
  return best;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), penalties_(p), rng_(p.seed) {}

void Sampler::set_prompt(std::span<const int32_t> prompt) {
  if (p_.has_penalties()) penalties_.accept_prompt(prompt);
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (p_.adjusts_logits()) {
    // One buffer per sequence, reused: the default path (no penalty, no bias) reads the
    // model's logits in place.
    adjusted_.assign(logits.begin(), logits.end());
    penalties_.apply(adjusted_);
    sampling::add_logit_bias(adjusted_, p_.logit_bias);
    logits = adjusted_;
  }
  last_logits_ = logits;
  logsum_ready_ = false;
  masked_ = false;
  // Greedy: top_k, top_p and min_p always keep the arg max.
  const int32_t pick = p_.temperature <= 0.f && p_.typical_p >= 1.f ? argmax(logits) : draw();
  if (p_.has_penalties()) penalties_.accept(pick);
  return pick;
}

int32_t Sampler::sample(std::span<const float> logits, TokenConstraint* constraint) {
  if (!constraint) return sample(logits);
  std::span<const float> base = logits;
  if (p_.adjusts_logits()) {
    adjusted_.assign(logits.begin(), logits.end());
    penalties_.apply(adjusted_);
    sampling::add_logit_bias(adjusted_, p_.logit_bias);
    base = adjusted_;
  }
  last_logits_ = base;
  logsum_ready_ = false;
  masked_ = false;
  const bool greedy = p_.temperature <= 0.f && p_.typical_p >= 1.f;
  const bool filters = p_.top_k > 0 || p_.top_p < 1.f || p_.min_p > 0.f || p_.typical_p < 1.f;
  int32_t pick = -1;
  if (!filters) {
    // The lazy check (exact without filters, see the header): most drawn tokens are allowed,
    // and then no mask is computed and the logits are not copied.
    const int32_t first = greedy ? argmax(base) : draw();
    if (!std::isinf(base[size_t(first)]) && constraint->allows(first)) pick = first;
  }
  size_t n_bits = 0;
  const uint64_t* bits = pick < 0 ? constraint->mask_bits(n_bits) : nullptr;
  if (bits) {
    pick = pick_masked(base, bits, n_bits);
    if (pick < 0) return -1;  // nothing allowed, or every allowed token banned by a bias
  } else if (pick < 0) {
    if (base.data() != adjusted_.data()) adjusted_.assign(logits.begin(), logits.end());
    if (!constraint->apply(adjusted_)) return -1;
    last_logits_ = adjusted_;
    logsum_ready_ = false;
    pick = greedy ? argmax(adjusted_) : draw();
    if (std::isinf(adjusted_[size_t(pick)])) return -1;  // every allowed token banned by a bias
  }
  constraint->accept(pick);
  if (p_.has_penalties()) penalties_.accept(pick);
  return pick;
}

int32_t Sampler::pick_masked(std::span<const float> base, const uint64_t* bits, size_t n_bits) {
  const size_t n = std::min(n_bits, base.size());
  mask_.assign(bits, bits + (n + 63) / 64);
  if (n % 64) mask_.back() &= (uint64_t(1) << (n % 64)) - 1;
  mask_n_ = n;
  masked_ = true;
  if (p_.temperature > 0.f || p_.typical_p < 1.f) return draw();
  // The arg max over the allowed tokens, lowest id on ties, as argmax() of the masked copy.
  int32_t best = -1;
  float v = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w < mask_.size(); ++w) {
    uint64_t word = mask_[w];
    const float* row = base.data() + w * 64;
    if (word == ~uint64_t(0)) {
      for (size_t k = 0; k < 64; ++k) {
        if (row[k] > v) {
          v = row[k];
          best = int32_t(w * 64 + k);
        }
      }
      continue;
    }
    for (; word; word &= word - 1) {
      const int k = __builtin_ctzll(word);
      if (row[k] > v) {
        v = row[k];
        best = int32_t(w * 64 + size_t(k));
      }
    }
  }
  return best;  // -1 when nothing is allowed or every allowed logit is -inf
}

int32_t Sampler::draw() {
  const std::span<const float> logits = last_logits_;
  // Banned tokens (-inf: a logit_bias ban, a grammar's mask) have probability 0 in every
  // stage and are left out, so that a masked draw costs the allowed tokens only; when every
  // token is banned, all stay (a uniform draw, as before).
  cand_.clear();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (masked_) {
    // Under a constraint's mask (pick_masked): its allowed tokens, in id order as below.
    for (size_t w = 0; w < mask_.size(); ++w) {
      for (uint64_t word = mask_[w]; word; word &= word - 1) {
        const size_t i = w * 64 + size_t(__builtin_ctzll(word));
        if (logits[i] != kNegInf) cand_.push_back({logits[i], int32_t(i)});
      }
    }
    if (cand_.empty()) return -1;  // every allowed token banned
  } else {
    cand_.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] != kNegInf) cand_.push_back({logits[i], int32_t(i)});
    }
    if (cand_.empty()) {
      for (size_t i = 0; i < logits.size(); ++i) cand_.push_back({logits[i], int32_t(i)});
    }
  }
  // Filters on the temperature-1 distribution, in llama.cpp's default order, then the
  // temperature: top_p and min_p mean the same mass whatever the temperature. With none on,
  // the draw runs over the vocabulary in id order, unsorted.
  sampling::top_k(cand_, p_.top_k);
  sampling::typical(cand_, p_.typical_p);
  sampling::top_p(cand_, p_.top_p);
  sampling::min_p(cand_, p_.min_p);
  // The largest kept logit (lowest id on ties).
  size_t best = 0;
  for (size_t i = 1; i < cand_.size(); ++i) {
    if (cand_[i].first > cand_[best].first ||
        (cand_[i].first == cand_[best].first && cand_[i].second < cand_[best].second)) {
      best = i;
    }
  }
  if (p_.temperature <= 0.f) return cand_[best].second;
  // Logits are scaled relative to the kept maximum, (l - max) / T <= 0, so that a tiny
  // temperature (down to subnormal floats) drives the others towards probability 0 instead
  // of overflowing every logit to inf: the limit of sampling as T -> 0 is the greedy choice
  // (a uniform draw among exact ties).
  const float top = cand_[best].first;
  prob_.resize(cand_.size());
  double sum = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    sum += prob_[i] = std::exp(double((cand_[i].first - top) / p_.temperature));
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  const double r = u(rng_);
  double acc = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    acc += prob_[i];
    if (r < acc) return cand_[i].second;
  }
  return cand_[best].second;  // r rounded up to sum: the most likely, never a 0-probability tail
}

float Sampler::last_logprob(int32_t token) const {
  if (last_logits_.empty() || token < 0 || size_t(token) >= last_logits_.size()) return 0.f;
  if (masked_ && !allowed(size_t(token))) return -std::numeric_limits<float>::infinity();
  if (!logsum_ready_) {
    // log-softmax over the full (temperature-scaled) distribution, computed only when asked
    // for: a pass of exp over the vocabulary that requests without logprobs skip.
    const float t = p_.temperature <= 0.f ? 1.f : p_.temperature;
    double s = 0;
    if (masked_) {  // the masked distribution: the allowed tokens only, in id order as below
      last_max_ = -std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < mask_n_; ++i) {
        if (allowed(i)) last_max_ = std::max(last_max_, last_logits_[i]);
      }
      for (size_t i = 0; i < mask_n_; ++i) {
        if (allowed(i)) s += std::exp(double((last_logits_[i] - last_max_) / t));
      }
    } else {
      last_max_ = last_logits_[size_t(argmax(last_logits_))];
      for (float v : last_logits_) s += std::exp(double((v - last_max_) / t));
    }
    last_logsum_ = float(std::log(s));
    logsum_ready_ = true;
  }
  if (p_.temperature <= 0.f) return last_logits_[size_t(token)] - last_max_ - last_logsum_;
  return (last_logits_[size_t(token)] - last_max_) / p_.temperature - last_logsum_;
}

}  // namespace lynx
