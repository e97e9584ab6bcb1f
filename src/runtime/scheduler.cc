// Continuous batching over a Context (see lynx/scheduler.h).
#include "lynx/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <numeric>

namespace lynx {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  }
  return best;
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    default:
      return "none";
  }
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  last_logits_ = logits;
  if (p_.temperature <= 0.f) {
    const int32_t best = argmax(logits);
    last_max_ = logits[size_t(best)];
    double s = 0;
    for (float v : logits) s += std::exp(double(v - last_max_));
    last_logsum_ = float(std::log(s));
    return best;
  }
  // Temperature, then top-k, then top-p (nucleus), then a seeded draw: the order llama.cpp's
  // and vLLM's default samplers apply them.
  cand_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    cand_[i] = {logits[i] / p_.temperature, int32_t(i)};
  }
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t n = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = size_t(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  const float mx = cand_[0].first;
  std::vector<double> prob(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(double(cand_[i].first - mx));
  if (p_.top_p < 1.f) {
    double acc = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      acc += prob[i] / sum;
      if (acc >= double(p_.top_p)) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    sum = std::accumulate(prob.begin(), prob.begin() + long(n), 0.0);
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_), acc = 0;
  int32_t pick = cand_[n - 1].second;
  for (size_t i = 0; i < n; ++i) {
    acc += prob[i];
    if (r < acc) {
      pick = cand_[i].second;
      break;
    }
  }
  // log-softmax over the full temperature-scaled distribution, for logprobs.
  double s = 0;
  for (float v : logits) s += std::exp(double(v / p_.temperature - mx));
  last_max_ = mx;
  last_logsum_ = float(std::log(s));
  return pick;
}

float Sampler::last_logprob(int32_t token) const {
  if (last_logits_.empty() || token < 0 || size_t(token) >= last_logits_.size()) return 0.f;
  const float t = p_.temperature > 0.f ? p_.temperature : 1.f;
  return last_logits_[size_t(token)] / t - last_max_ - last_logsum_;
}

// ---------------------------------------------------------------------------------------

namespace {
struct Active {
  int64_t id;
  int32_t seq;
  GenerationRequest req;
  Sampler sampler;
  size_t prefilled = 0;  // prompt tokens already in the cache
  int generated = 0;
  int32_t last = -1;  // last sampled token, fed next step
  bool cancel = false;
};
}  // namespace

struct Scheduler::Impl {
  Impl(Context& c, const SchedulerOptions& o) : ctx(c), opts(o) {}
  Context& ctx;
  SchedulerOptions opts;
  int64_t next_id = 1;
  std::deque<std::pair<int64_t, GenerationRequest>> waiting;
  std::vector<Active> active;
  std::vector<int64_t> cancelled_waiting;
  std::vector<BatchToken> batch;
  std::vector<size_t> logit_owner;  // index into active for each logits row
  SchedulerStats stats;

  void finish(size_t i, FinishReason why) {
    Active& a = active[i];
    ctx.free_sequence(a.seq);
    if (a.req.on_finish) a.req.on_finish(why);
    active.erase(active.begin() + long(i));
  }

  // A step's eval threw: the requests it names (NonFiniteError), or else every request with
  // tokens in the step, finish with kError; the others are rolled back to before the step
  // (the context did not advance their sequences) and go on with the next one.
  void fail_step(const Error& e, const std::vector<std::pair<size_t, size_t>>& prefilled_before) {
    for (const auto& [i, n] : prefilled_before) active[i].prefilled = n;
    std::vector<int32_t> bad;
    if (const auto* nf = dynamic_cast<const NonFiniteError*>(&e)) bad = nf->sequences();
    auto named = [&](int32_t seq) { return std::find(bad.begin(), bad.end(), seq) != bad.end(); };
    bool any = false;
    for (const Active& a : active) any |= named(a.seq);
    if (!any) {
      for (const BatchToken& t : batch) bad.push_back(t.seq);
    }
    for (size_t i = active.size(); i-- > 0;) {
      if (!named(active[i].seq)) continue;
      ++stats.failed_requests;
      if (active[i].req.on_error) active[i].req.on_error(e.what());
      finish(i, FinishReason::kError);
    }
  }
};

Scheduler::Scheduler(Context& ctx, const SchedulerOptions& opts)
    : impl_(std::make_unique<Impl>(ctx, opts)) {
  if (opts.max_batch < 1 || opts.max_step_tokens < 1) {
    throw Error("scheduler: max_batch and max_step_tokens must be positive");
  }
}
Scheduler::~Scheduler() = default;

int64_t Scheduler::submit(GenerationRequest req) {
  if (req.prompt.empty()) throw Error("empty prompt");
  if (req.max_tokens < 1) throw Error("max_tokens must be at least 1");
  const int64_t need = int64_t(req.prompt.size()) + req.max_tokens;
  if (need > impl_->ctx.n_ctx()) {
    throw Error("prompt (" + std::to_string(req.prompt.size()) + " tokens) plus max_tokens (" +
                std::to_string(req.max_tokens) + ") exceeds the context limit of " +
                std::to_string(impl_->ctx.n_ctx()));
  }
  const int n_vocab = impl_->ctx.model().config().n_vocab;
  for (int32_t t : req.prompt) {
    if (t < 0 || t >= n_vocab)
      throw Error("prompt token id " + std::to_string(t) + " out of range");
  }
  const int64_t id = impl_->next_id++;
  impl_->waiting.emplace_back(id, std::move(req));
  return id;
}

void Scheduler::cancel(int64_t id) {
  for (auto& a : impl_->active) {
    if (a.id == id) a.cancel = true;
  }
  auto& w = impl_->waiting;
  for (auto it = w.begin(); it != w.end(); ++it) {
    if (it->first == id) {
      if (it->second.on_finish) it->second.on_finish(FinishReason::kCancelled);
      w.erase(it);
      return;
    }
  }
}

size_t Scheduler::n_active() const {
  return impl_->active.size();
}
size_t Scheduler::n_waiting() const {
  return impl_->waiting.size();
}
const SchedulerStats& Scheduler::stats() const {
  return impl_->stats;
}

bool Scheduler::step() {
  Impl& s = *impl_;
  // Drop cancelled requests, admit waiting ones into free slots.
  for (size_t i = 0; i < s.active.size();) {
    if (s.active[i].cancel) {
      s.finish(i, FinishReason::kCancelled);
    } else {
      ++i;
    }
  }
  while (!s.waiting.empty() && int(s.active.size()) < s.opts.max_batch) {
    auto [id, req] = std::move(s.waiting.front());
    s.waiting.pop_front();
    Sampler sampler(req.sampling);
    const int32_t seq = s.ctx.new_sequence();
    s.active.push_back(Active{id, seq, std::move(req), std::move(sampler)});
  }
  if (s.active.empty()) return false;

  // Decode tokens first (one per decoding sequence), then prompt chunks in admission order.
  s.batch.clear();
  s.logit_owner.clear();
  int budget = s.opts.max_step_tokens;
  bool any_prefill = false;
  std::vector<std::pair<size_t, size_t>> prefilled_before;  // (active index, prefilled)
  for (size_t i = 0; i < s.active.size(); ++i) {
    Active& a = s.active[i];
    if (a.prefilled < a.req.prompt.size()) continue;
    BatchToken t;
    t.token = a.last;
    t.seq = a.seq;
    t.pos = s.ctx.sequence_length(a.seq);
    t.flags = a.req.exact_routing ? kTokenExact : kTokenDecode;
    t.logits = true;
    s.batch.push_back(t);
    s.logit_owner.push_back(i);
    --budget;
  }
  for (size_t i = 0; i < s.active.size() && budget > 0; ++i) {
    Active& a = s.active[i];
    if (a.prefilled >= a.req.prompt.size()) continue;
    const size_t n = std::min(size_t(budget), a.req.prompt.size() - a.prefilled);
    const int32_t base = s.ctx.sequence_length(a.seq);
    for (size_t j = 0; j < n; ++j) {
      BatchToken t;
      t.token = a.req.prompt[a.prefilled + j];
      t.seq = a.seq;
      t.pos = base + int32_t(j);
      t.flags = kTokenPrefill;
      t.logits = a.prefilled + j + 1 == a.req.prompt.size();
      s.batch.push_back(t);
      if (t.logits) s.logit_owner.push_back(i);
    }
    prefilled_before.emplace_back(i, a.prefilled);
    a.prefilled += n;
    budget -= int(n);
    any_prefill = true;
  }

  const auto t0 = std::chrono::steady_clock::now();
  try {
    s.ctx.eval(s.batch);
  } catch (const Error& e) {
    s.fail_step(e, prefilled_before);
    return true;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++s.stats.steps;
  (any_prefill ? s.stats.prefill_seconds : s.stats.decode_seconds) += dt;
  for (const auto& t : s.batch) {
    ++((t.flags & kTokenPrefill) ? s.stats.prefill_tokens : s.stats.decode_tokens);
  }

  // Sample, report, and retire finished requests (highest index first keeps indices valid).
  std::vector<std::pair<size_t, FinishReason>> done;
  for (size_t r = 0; r < s.logit_owner.size(); ++r) {
    Active& a = s.active[s.logit_owner[r]];
    const int32_t tok = a.sampler.sample(s.ctx.logits(int(r)));
    a.last = tok;
    ++a.generated;
    const bool stop = std::find(a.req.stop_tokens.begin(), a.req.stop_tokens.end(), tok) !=
                      a.req.stop_tokens.end();
    FinishReason why = FinishReason::kNone;
    if (stop) {
      why = FinishReason::kStop;
    } else {
      const bool more = a.req.on_token_logprob
                            ? a.req.on_token_logprob(tok, a.sampler.last_logprob(tok))
                        : a.req.on_token ? a.req.on_token(tok)
                                         : true;
      if (!more) {
        why = FinishReason::kStop;
      } else if (a.generated >= a.req.max_tokens) {
        why = FinishReason::kLength;
      }
    }
    if (why != FinishReason::kNone) done.emplace_back(s.logit_owner[r], why);
  }
  std::sort(done.begin(), done.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (auto& [i, why] : done) s.finish(i, why);
  return true;
}

void Scheduler::run_until_idle() {
  while (step()) {
  }
}

}  // namespace lynx
