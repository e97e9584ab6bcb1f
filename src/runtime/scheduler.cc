// Continuous batching over a Context (see lynx/scheduler.h).
#include "lynx/scheduler.h"

#include "lynx/batch_loop.h"
#include "lynx/error.h"
#include "runtime/prefix_cache.h"

#include <algorithm>
#include <deque>

namespace lynx {

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

namespace {
struct Active {
  int64_t id;
  int32_t seq = -1;
  GenerationRequest req;
  Sampler sampler;
  int generated = 0;
  FinishReason why = FinishReason::kNone;  // set when the request ends in a step
  bool cancel = false;
  // With the prefix cache: the prompt and the generated tokens fed back so far (the first
  // Context::sequence_length of them are in the KV cache).
  std::vector<int32_t> tokens = {};
  int32_t prompt_len = 0;
};
}  // namespace

struct Scheduler::Impl {
  Impl(Context& c, const SchedulerOptions& o)
      : ctx(c), opts(o), loop(c, BatchLoopOptions{o.max_step_tokens, true}) {
    if (o.prefix_cache_bytes > 0) {
      cache = std::make_unique<PrefixCache>(c, o.prefix_cache_bytes, o.prefix_snapshot_gap);
    }
  }
  Context& ctx;
  SchedulerOptions opts;
  BatchLoop loop;
  std::unique_ptr<PrefixCache> cache;   // null: off
  std::vector<PrefixCache::Live> live;  // scratch of admit
  int64_t next_id = 1;
  std::deque<std::pair<int64_t, GenerationRequest>> waiting;
  // Admission order, as in the loop; unique_ptr: the loop's hooks hold the address.
  std::vector<std::unique_ptr<Active>> active;
  std::vector<int64_t> decoding;  // scratch of before_step
  SchedulerStats stats;

  void erase(const Active* a) {
    std::erase_if(active, [a](const auto& p) { return p.get() == a; });
  }
  void admit(int64_t id, GenerationRequest req);
  // `live`: the running sequences other than `except`, with the tokens they hold.
  void gather_live(const Active* except) {
    live.clear();
    for (const auto& o : active) {
      if (o.get() != except && o->seq >= 0) live.push_back({o->seq, o->tokens});
    }
  }
  // With the prefix cache: whether a waiting request should wait for a running one's prefill,
  // which will hold a longer prefix of its prompt than anything does now (the choices of an
  // `n > 1` request, requests sent together with one system prompt): admitted at once, each
  // would evaluate the shared part itself.
  bool should_wait(const std::vector<int32_t>& prompt);
  // A step's eval threw: the requests it names (NonFiniteError), or else every request with
  // tokens in the step, finish with kError; the context did not advance any sequence, so the
  // others go on with the next step.
  void fail_step(const Error& e);
  // Samples the next token of `a` from its logits and reports it; kEndSequence when the
  // request ends (its reason kept in a.why for on_end).
  int32_t on_logits(Active& a, std::span<const float> logits);
};

void Scheduler::Impl::admit(int64_t id, GenerationRequest req) {
  Sampler sampler(req.sampling);
  sampler.set_prompt(req.prompt);  // the repetition penalty's window starts in the prompt
  active.push_back(std::make_unique<Active>(Active{id, -1, std::move(req), std::move(sampler)}));
  Active* a = active.back().get();
  LoopSequence ls;
  PrefixCache::Reuse reuse;
  if (cache) {
    // Running sequences may share the prefix too (they are copied from, not taken).
    gather_live(a);
    a->tokens = a->req.prompt;
    a->prompt_len = int32_t(a->tokens.size());
    const auto& p = a->req.prompt;
    reuse = cache->acquire(p, int32_t(p.size()) - 1, live);
    ls.seq = reuse.seq;
    ls.keep = true;
    ls.snapshot_at = cache->snapshot_plan(reuse.len, int32_t(p.size()));
    ls.prompt.assign(p.begin() + reuse.len, p.end());
    a->req.prompt.clear();
  } else {
    ls.prompt = std::move(a->req.prompt);  // the loop feeds it
  }
  ls.decode_flags = a->req.exact_routing ? kTokenExact : kTokenDecode;
  ls.on_logits = [this, a](std::span<const float> logits) { return on_logits(*a, logits); };
  ls.on_end = [this, a] {
    if (cache) cache->release(a->seq, std::move(a->tokens));
    if (a->req.on_finish) a->req.on_finish(a->why);
    erase(a);
  };
  try {
    a->seq = loop.add(std::move(ls));
  } catch (...) {
    if (reuse.seq >= 0) ctx.free_sequence(reuse.seq);
    active.pop_back();
    throw;
  }
  if (a->req.on_admit) a->req.on_admit(reuse.len);
}

bool Scheduler::Impl::should_wait(const std::vector<int32_t>& prompt) {
  constexpr int32_t kWorthWaiting = 16;  // tokens; a few cost less to evaluate than to wait
  const int32_t max_len = int32_t(prompt.size()) - 1;
  gather_live(nullptr);
  const int32_t now = cache->longest(prompt, max_len, live);
  for (const auto& a : active) {
    if (a->seq < 0 || ctx.sequence_length(a->seq) >= a->prompt_len) continue;  // not prefilling
    const auto& t = a->tokens;
    const size_t n = std::min({prompt.size(), size_t(a->prompt_len), size_t(max_len)});
    const auto shared = cache->usable_prefix(
        int32_t(std::mismatch(prompt.begin(), prompt.begin() + long(n), t.begin()).first -
                prompt.begin()),
        a->prompt_len);
    if (shared >= now + kWorthWaiting) return true;
  }
  return false;
}

void Scheduler::Impl::fail_step(const Error& e) {
  std::vector<int32_t> bad;
  if (const auto* nf = dynamic_cast<const NonFiniteError*>(&e)) bad = nf->sequences();
  auto named = [&](int32_t seq) { return std::find(bad.begin(), bad.end(), seq) != bad.end(); };
  const bool any =
      std::any_of(active.begin(), active.end(), [&](const auto& a) { return named(a->seq); });
  if (!any) {
    for (const BatchToken& t : loop.last_batch()) bad.push_back(t.seq);
  }
  for (size_t i = active.size(); i-- > 0;) {
    Active& a = *active[i];
    if (!named(a.seq)) continue;
    ++stats.failed_requests;
    loop.remove(a.seq);
    if (a.req.on_error) a.req.on_error(e.what());
    if (a.req.on_finish) a.req.on_finish(FinishReason::kError);
    active.erase(active.begin() + long(i));
  }
}

int32_t Scheduler::Impl::on_logits(Active& a, std::span<const float> logits) {
  int32_t tok;
  try {
    tok = a.sampler.sample(logits, a.req.constraint.get());
  } catch (const Error& e) {  // a grammar limit reached by this output
    if (a.req.on_error) a.req.on_error(e.what());
    a.why = FinishReason::kError;
    return kEndSequence;
  }
  if (tok < 0) {
    if (a.req.on_error) a.req.on_error("no token of the vocabulary can continue the grammar");
    a.why = FinishReason::kError;
    return kEndSequence;
  }
  ++a.generated;
  const bool stop =
      std::find(a.req.stop_tokens.begin(), a.req.stop_tokens.end(), tok) != a.req.stop_tokens.end();
  if (stop) {
    a.why = FinishReason::kStop;
  } else {
    const bool more = a.req.on_token_logprob
                          ? a.req.on_token_logprob(tok, a.sampler.last_logprob(tok))
                      : a.req.on_token ? a.req.on_token(tok)
                                       : true;
    if (!more) {
      a.why = FinishReason::kStop;
    } else if (a.generated >= a.req.max_tokens) {
      a.why = FinishReason::kLength;
    }
  }
  if (a.why != FinishReason::kNone) return kEndSequence;
  if (cache) a.tokens.push_back(tok);  // fed in the next step
  return tok;
}

Scheduler::Scheduler(Context& ctx, const SchedulerOptions& opts) {
  if (opts.max_batch < 1 || opts.max_step_tokens < 1) {
    throw Error("scheduler: max_batch and max_step_tokens must be positive");
  }
  impl_ = std::make_unique<Impl>(ctx, opts);
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
  check_sampling_params(req.sampling, n_vocab);
  const int64_t id = impl_->next_id++;
  impl_->waiting.emplace_back(id, std::move(req));
  return id;
}

void Scheduler::cancel(int64_t id) {
  for (auto& a : impl_->active) {
    if (a->id == id) a->cancel = true;
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
PrefixCacheStats Scheduler::prefix_cache_stats() const {
  return impl_->cache ? impl_->cache->stats() : PrefixCacheStats{};
}

bool Scheduler::step() {
  Impl& s = *impl_;
  // Drop cancelled requests, admit waiting ones into free slots.
  for (size_t i = 0; i < s.active.size();) {
    Active& a = *s.active[i];
    if (a.cancel) {
      s.loop.remove(a.seq);
      if (a.req.on_finish) a.req.on_finish(FinishReason::kCancelled);
      s.active.erase(s.active.begin() + long(i));
    } else {
      ++i;
    }
  }
  while (!s.waiting.empty() && int(s.active.size()) < s.opts.max_batch) {
    if (s.cache && s.should_wait(s.waiting.front().second.prompt)) break;  // admitted after it
    auto [id, req] = std::move(s.waiting.front());
    s.waiting.pop_front();
    s.admit(id, std::move(req));
  }
  if (s.active.empty()) return false;
  if (s.opts.before_step) {
    // A request has a decode token in this step once the logits of its prompt's last token
    // gave it a first token (generated > 0) and it has not ended.
    s.decoding.clear();
    for (const auto& a : s.active) {
      if (a->generated > 0 && a->why == FinishReason::kNone) s.decoding.push_back(a->id);
    }
    s.opts.before_step(s.decoding);
  }

  // Decode tokens first, then prompt chunks (BatchLoop, mixed); sampling and reporting in
  // Impl::on_logits, retirement in on_end.
  StepReport rep;
  try {
    rep = s.loop.step();
  } catch (const Error& e) {
    s.fail_step(e);
    return true;
  }
  ++s.stats.steps;
  (rep.n_prefill > 0 ? s.stats.prefill_seconds : s.stats.decode_seconds) += rep.seconds;
  s.stats.prefill_tokens += rep.n_prefill;
  s.stats.decode_tokens += rep.n_decode;
  return true;
}

void Scheduler::run_until_idle() {
  while (step()) {
  }
}

}  // namespace lynx
