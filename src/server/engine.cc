// The engine loop (see engine.h).
#include "server/engine.h"

#include "server/tool_grammar.h"

#include <algorithm>

namespace lynx::server {

namespace {
std::string canonical(const std::string& spec) {
  return make_routing_policy(spec)->spec();
}

// The ladder: --routing-ladder; else, with a TPOT target and --routing topk, the default
// ladder; else exact and --routing. Without a target the server stays at --routing's level.
RoutingControl make_control(const ServerOptions& o) {
  const bool adaptive = o.tpot_slo_s > 0;
  std::vector<RoutingLevel> ladder;
  if (!o.routing_ladder.empty()) {
    ladder = parse_routing_ladder(o.routing_ladder);
  } else if (adaptive && canonical(o.routing) == "topk") {
    ladder = parse_routing_ladder(kDefaultRoutingLadder);
  } else {
    ladder = parse_routing_ladder(o.routing);
  }
  const int max_level = max_level_for_budget(ladder, o.accuracy_budget_pct);
  int fixed = 0;
  if (!adaptive) {
    const std::string spec = canonical(o.routing);
    for (size_t i = 0; i < ladder.size(); ++i) {
      if (ladder[i].spec == spec) fixed = int(i);
    }
    if (ladder[size_t(fixed)].spec != spec) {
      throw Error("--routing '" + o.routing + "' is not a level of --routing-ladder");
    }
    if (fixed > max_level) {
      throw Error("--routing '" + o.routing + "' costs more than --accuracy-budget allows");
    }
  }
  return RoutingControl(std::move(ladder), max_level, o.tpot_slo_s, fixed, o.slo_window_steps,
                        o.slo_tail_requests);
}

ContextOptions context_options(const ServerOptions& o, const RoutingControl& rc) {
  ContextOptions c;
  c.n_threads = o.n_threads;
  c.exact_activations = o.exact_activations;
  c.mla_decompress_min = o.mla_decompress_min;
  c.cache_type_k = o.cache_type_k;
  c.cache_type_v = o.cache_type_v;
  c.n_ctx = o.n_ctx;
  // The server's spelling of --routing when the server starts at it (what it reports).
  const std::string& spec = rc.ladder()[size_t(rc.server_level())].spec;
  c.routing = canonical(o.routing) == spec ? o.routing : spec;
  if (o.configure_options) o.configure_options(c);
  return c;
}
}  // namespace

Engine::Engine(const Model& model, const Tokenizer& tok, const ServerOptions& opts,
               Metrics& metrics)
    : tok_(tok),
      opts_(opts),
      metrics_(metrics),
      control_(make_control(opts)),
      ctx_(model, context_options(opts, control_)),
      sched_(ctx_,
             [&] {
               SchedulerOptions s;
               s.max_batch = opts.max_batch;
               s.max_step_tokens = opts.max_step_tokens;
               s.prefix_cache_bytes = opts.cache_ram_bytes;
               s.before_step = [this](std::span<const int64_t> ids) { before_step(ids); };
               return s;
             }()),
      routing_(control_.adaptive() ? "adaptive" : ctx_.routing()) {
  // Every level must fit the model (oea:k0 above its k, ...), not only the one it starts at.
  if (model.config().is_moe()) {
    for (const RoutingLevel& lv : control_.ladder()) {
      make_routing_policy(lv.spec, model.config().gating);
    }
  }
  ctx_level_ = step_level_ = control_.server_level();
  if (opts.configure_context) opts.configure_context(ctx_);
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_eog(id)) eog_.push_back(id);
  }
  if (model.config().is_moe()) {
    for (int il = 0; il < model.config().n_layer; ++il) {
      if (model.config().layer_routed(il)) routed_layers_.push_back(il);
    }
  }
}

Engine::~Engine() {
  stop();
}

void Engine::start() {
  thread_ = std::thread([this] { loop(); });
}

Admission Engine::submit(std::shared_ptr<Task> task) {
  std::lock_guard lk(mu_);
  if (draining_ || stopping_) return Admission::kDraining;
  const int n = task->params.n;
  if (outstanding_ + n > int64_t(opts_.max_batch) + opts_.max_queue) return Admission::kFull;
  outstanding_ += n;
  inbox_.push_back(std::move(task));
  cv_.notify_one();
  return Admission::kAccepted;
}

void Engine::cancel(const std::shared_ptr<Task>& task, const std::string& error) {
  {
    std::lock_guard tl(task->mu);
    if (task->done()) return;
    if (!error.empty() && task->error.empty()) task->error = error;
  }
  std::lock_guard lk(mu_);
  cancels_.push_back(task);
  cv_.notify_one();
}

void Engine::cancel_all(const std::string& error) {
  // Which tasks are live is known to the engine thread only (queued ones become live in the
  // same loop turn): it cancels them all.
  std::lock_guard lk(mu_);
  cancel_all_error_ = error.empty() ? "cancelled" : error;
  cv_.notify_one();
}

void Engine::drain() {
  std::lock_guard lk(mu_);
  draining_ = true;
}

bool Engine::wait_idle(double seconds) {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_for(lk, std::chrono::duration<double>(seconds),
                           [&] { return outstanding_ == 0; });
}

void Engine::set_paused(bool paused) {
  std::lock_guard lk(mu_);
  paused_ = paused;
  cv_.notify_one();
}

void Engine::stop() {
  {
    std::lock_guard lk(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    cv_.notify_one();
  }
  thread_.join();
}

void Engine::submit_to_scheduler(const std::shared_ptr<Task>& t) {
  const CompletionParams& p = t->params;
  {
    std::lock_guard tl(t->mu);
    t->results.resize(size_t(p.n));
    for (auto& r : t->results) r.level_tokens.assign(control_.ladder().size(), 0);
  }
  t->choices.resize(size_t(p.n));
  std::shared_ptr<grammar::Constraint> constraint;  // choice 0's; the others fork it
  if (p.grammar) {
    // Control tokens have no text to match (only the end-of-generation ones may come, when
    // the grammar is complete), but for the markers a tool call's grammar names.
    auto& index = token_indexes_[p.grammar_markers];
    if (!index) index = grammar_token_index(tok_, eog_, p.grammar_markers);
    // Requests with the same grammar share its matcher and masks (grammar::ConstraintCache).
    constraint = constraints_.get(p.grammar, index);
  }
  for (int i = 0; i < p.n; ++i) {
    t->choices[size_t(i)].text = std::make_unique<StopTextStream>(tok_, p.stop);
    if (p.parse_output) {
      chatparse::ParseOptions po = p.output;
      po.id_seed += uint64_t(i);  // choices of one request get their own call ids
      t->choices[size_t(i)].parser = std::make_unique<chatparse::OutputParser>(std::move(po));
    }
    GenerationRequest r;
    r.prompt = p.prompt;
    r.max_tokens = p.max_tokens;
    r.sampling = p.sampling;
    r.sampling.seed = p.sampling.seed + uint64_t(i);  // choices of one request differ
    r.exact_routing = p.exact_routing;
    if (!p.ignore_eos) r.stop_tokens = eog_;
    if (constraint)
      r.constraint = i == 0 ? constraint : std::shared_ptr<grammar::Constraint>(constraint->fork());
    // The callbacks hold the task alive until the scheduler drops the request.
    r.on_token_logprob = [this, t, i](int32_t tok, float lp) { return on_token(*t, i, tok, lp); };
    r.on_finish = [this, t, i](FinishReason why) { on_finish(*t, i, why); };
    r.on_admit = [t, i](int32_t cached) {
      std::lock_guard tl(t->mu);
      t->results[size_t(i)].cached_tokens = cached;
    };
    // A step that failed for this request (e.g. non-finite values in its rows): the cause
    // becomes the request's error; the scheduler goes on with the others.
    r.on_error = [this, t](const std::string& message) {
      if (opts_.log) opts_.log("engine step failed: " + message);
      std::lock_guard tl(t->mu);
      if (t->error.empty()) t->error = "generation failed: " + message;
    };
    try {
      t->choices[size_t(i)].sched_id = sched_.submit(std::move(r));
      by_sched_[t->choices[size_t(i)].sched_id] = {t.get(), i};
    } catch (const std::exception& e) {
      // Validated by the handler already; a refusal here is a server-side inconsistency.
      {
        std::lock_guard tl(t->mu);
        if (t->error.empty()) t->error = e.what();
      }
      on_finish(*t, i, FinishReason::kError);
    }
  }
}

bool Engine::on_token(Task& t, int i, int32_t tok, float logprob) {
  Task::Choice& c = t.choices[size_t(i)];
  const double now = now_seconds();
  const bool decoded = c.tokens > 0;  // the first token comes from the prompt (exact)
  if (c.tokens == 0) {
    metrics_.first_token(now - t.t_arrival);
    c.t_first = now;
  } else {
    metrics_.inter_token(now - c.t_last);
  }
  c.t_last = now;
  ++c.tokens;
  Event ev;
  ev.choice = i;
  ev.text = c.text->push(tok);
  if (c.parser && !ev.text.empty()) {
    chatparse::OutputDelta d = c.parser->push(ev.text);
    ev.text = std::move(d.content);
    ev.reasoning = std::move(d.reasoning);
    ev.tool_calls = std::move(d.tool_calls);
  }
  if (t.params.logprobs) {
    ev.token_text.push_back(tok_.token_to_piece(tok));
    ev.token_logprob.push_back(logprob);
  }
  {
    std::lock_guard tl(t.mu);
    ChoiceResult& r = t.results[size_t(i)];
    r.text += ev.text;
    r.reasoning += ev.reasoning;
    r.token_text.insert(r.token_text.end(), ev.token_text.begin(), ev.token_text.end());
    r.token_logprob.insert(r.token_logprob.end(), ev.token_logprob.begin(), ev.token_logprob.end());
    r.completion_tokens = c.tokens;
    if (decoded) {
      ++r.level_tokens[size_t(t.params.exact_routing ? 0 : step_level_)];
      count_step(t);
    }
    if (!ev.text.empty() || !ev.reasoning.empty() || !ev.tool_calls.empty() ||
        !ev.token_text.empty()) {
      t.events.push_back(std::move(ev));
    }
  }
  t.cv.notify_all();
  return !c.text->stopped();  // a stop string ends the request
}

void Engine::on_finish(Task& t, int i, FinishReason why) {
  Task::Choice& c = t.choices[size_t(i)];
  std::string reason = finish_reason_name(why);
  // Ended by an end-of-generation token (not shown, but generated and counted, as vLLM's
  // usage does) or by a stop string.
  const bool eog = why == FinishReason::kStop && !c.text->stopped();
  const bool eog_decoded = eog && c.tokens > 0;  // made by a decode step of this step
  // The request's TPOT as a client measures it (its decoded tokens' mean gap): the SLO
  // controller's tail loop reads it.
  if (c.tokens >= 2 && why != FinishReason::kError) {
    control_.observe_request((c.t_last - c.t_first) / double(c.tokens - 1));
  }
  if (eog) ++c.tokens;
  by_sched_.erase(c.sched_id);
  Event ev;
  ev.choice = i;
  if (why == FinishReason::kLength || why == FinishReason::kStop) ev.text = c.text->finish();
  std::vector<chatparse::ToolCall> calls;
  if (c.parser) {
    // The answer taken apart; an unfinished call is text when max_tokens cut it.
    chatparse::OutputDelta d = c.parser->push(ev.text);
    d.append(c.parser->finish(why == FinishReason::kLength));
    ev.text = std::move(d.content);
    ev.reasoning = std::move(d.reasoning);
    ev.tool_calls = std::move(d.tool_calls);
    calls = c.parser->result().tool_calls;
    // OpenAI's reason for an answer that ends in calls; one cut by max_tokens stays "length".
    if (!calls.empty() && why == FinishReason::kStop) reason = "tool_calls";
    if (why == FinishReason::kLength || why == FinishReason::kStop) {
      ev.tool_choice_unmet = tool_choice_unmet(t.params, calls);
    }
  }
  {
    std::lock_guard tl(t.mu);
    if (!t.error.empty() && why == FinishReason::kCancelled) reason = "error";
    // A sequence the scheduler failed on its own (e.g. non-finite logits in its rows): the
    // request is answered as failed (500 / an error event), never as a normal finish.
    if (why == FinishReason::kError && t.error.empty()) {
      t.error = "generation failed: the engine reported an error for this request";
    }
  }
  // Metrics first: a client that reads them right after its answer sees its request counted.
  metrics_.request_finished(reason, int(t.params.prompt.size()), c.tokens,
                            now_seconds() - t.t_arrival);
  {
    std::lock_guard tl(t.mu);
    ChoiceResult& r = t.results[size_t(i)];
    r.text += ev.text;
    r.reasoning += ev.reasoning;
    r.tool_calls = std::move(calls);
    r.tool_choice_unmet = ev.tool_choice_unmet;
    r.completion_tokens = c.tokens;
    if (eog_decoded) {
      ++r.level_tokens[size_t(t.params.exact_routing ? 0 : step_level_)];
      count_step(t);
    }
    r.finish_reason = reason;
    ev.finish_reason = reason;
    t.events.push_back(std::move(ev));
    ++t.n_finished;
  }
  t.cv.notify_all();
  std::lock_guard lk(mu_);
  if (--outstanding_ == 0) idle_cv_.notify_all();
}

void Engine::count_step(Task& t) {
  // Tokens are handed out after the step's evaluation, so the context's last step is the one
  // that made this token.
  if (t.last_step_counted == step_no_) return;
  t.last_step_counted = step_no_;
  const StepStats& st = ctx_.last_step();
  ++t.experts.steps;
  for (const int il : routed_layers_) {
    ++t.experts.layer_steps;
    t.experts.distinct += st.layers[size_t(il)].distinct_experts;
    t.experts.distinct_exact += st.layers[size_t(il)].distinct_exact;
  }
}

void Engine::before_step(std::span<const int64_t> decoding) {
  wishes_.clear();
  for (int64_t id : decoding) {
    const auto it = by_sched_.find(id);
    if (it == by_sched_.end()) continue;
    const CompletionParams& p = it->second.first->params;
    if (p.exact_routing) continue;  // routed exact per token: no constraint on the others
    wishes_.push_back({p.routing_level, p.max_routing_level});
  }
  // The controller decides for this step's decode batch size (feed-forward): every decoding
  // request, exact-routed ones included, adds a token to the step.
  step_level_ = control_.step_level(wishes_, int(decoding.size()));
  // A step whose decode tokens are all routed exact runs like level 0 whatever the policy:
  // the controller learns it as such.
  learn_level_ = wishes_.empty() ? 0 : step_level_;
  if (step_level_ != ctx_level_) {
    ctx_.set_routing(control_.ladder()[size_t(step_level_)].spec);
    ctx_level_ = step_level_;
  }
}

void Engine::fail_all(const std::string& error) {
  for (auto& t : live_) {
    {
      std::lock_guard tl(t->mu);
      if (t->error.empty()) t->error = error;
    }
    for (auto& c : t->choices) sched_.cancel(c.sched_id);
  }
}

void Engine::loop() {
  for (;;) {
    std::deque<std::shared_ptr<Task>> incoming;
    std::vector<std::shared_ptr<Task>> cancels;
    bool stopping = false, paused = false;
    std::string cancel_all_error;
    {
      std::unique_lock lk(mu_);
      const bool busy = sched_.n_active() + sched_.n_waiting() > 0;
      cv_.wait(lk, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !cancel_all_error_.empty() ||
               (busy && !paused_);
      });
      incoming.swap(inbox_);
      cancels.swap(cancels_);
      cancel_all_error.swap(cancel_all_error_);
      stopping = stopping_;
      paused = paused_;
    }
    for (auto& t : incoming) {
      submit_to_scheduler(t);
      live_.push_back(t);
    }
    for (auto& t : cancels) {
      for (auto& c : t->choices) sched_.cancel(c.sched_id);
    }
    if (!cancel_all_error.empty()) fail_all(cancel_all_error);
    if (stopping) {
      fail_all("server is shutting down");
      sched_.run_until_idle();  // only cancelled requests remain: frees them, runs no step
      metrics_.set_queue(0, 0);
      return;
    }
    if (!paused) {
      ++step_no_;
      const double t0 = now_seconds();
      const int64_t steps_before = sched_.stats().steps;
      try {
        if (sched_.step()) {
          const double dt = now_seconds() - t0;
          metrics_.step(ctx_.last_step(), dt, ctx_.routing_stats());
          // A step that ran (a failed one is not counted by the scheduler): its time is what
          // each of its decode tokens waited, the controller's input.
          const StepStats& st = ctx_.last_step();
          if (sched_.stats().steps > steps_before && st.n_decode > 0) {
            control_.observe(dt, st.n_decode, st.n_tokens - st.n_decode, learn_level_);
          }
        }
      } catch (const std::exception& e) {
        // A failed step (the engine's non-finite logits check, a kernel error) leaves the
        // batch's sequences in an unknown state: end them all with the cause rather than serve
        // corrupt text. The server itself keeps running.
        if (opts_.log) opts_.log(std::string("engine step failed: ") + e.what());
        fail_all(std::string("generation failed: ") + e.what());
      } catch (...) {
        if (opts_.log) opts_.log("engine step failed: unknown exception");
        fail_all("generation failed: unknown error");
      }
    }
    metrics_.set_queue(int64_t(sched_.n_waiting()), int64_t(sched_.n_active()));
    metrics_.set_prefix_cache(sched_.prefix_cache_stats());
    std::erase_if(live_, [](const std::shared_ptr<Task>& t) {
      std::lock_guard tl(t->mu);
      return t->done();
    });
  }
}

}  // namespace lynx::server
