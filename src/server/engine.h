// The engine loop: one thread owns the Context and the Scheduler (neither is thread-safe) and
// runs steps while there is work. HTTP handlers talk to it only through Engine's thread-safe
// methods (submit, cancel) and through each Task's mutex-guarded event queue.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "lynx/context.h"
#include "lynx/grammar.h"
#include "lynx/scheduler.h"
#include "lynx/server.h"
#include "lynx/tokenizer.h"
#include "runtime/routing_control.h"
#include "server/api.h"
#include "server/metrics.h"
#include "util/clock.h"

namespace lynx::server {

// A request in flight, shared by its HTTP handler and the engine.
struct Task {
  CompletionParams params;
  double t_arrival = 0;  // steady-clock seconds

  // Guarded by mu: what the engine produced and the handler has not consumed yet.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  std::vector<ChoiceResult> results;  // accumulated per choice
  int n_finished = 0;
  std::string error;    // set when the server (not the client) ended the request
  StepExperts experts;  // the request's decode steps (usage.routing)
  bool done() const { return n_finished == params.n; }

  // Engine thread only.
  struct Choice {
    int64_t sched_id = -1;
    std::unique_ptr<StopTextStream> text;
    std::unique_ptr<chatparse::OutputParser> parser;  // chat answers taken apart (parse_output)
    double t_first = 0;                               // when the first token was emitted
    double t_last = 0;
    int tokens = 0;
  };
  std::vector<Choice> choices;
  int64_t last_step_counted = -1;  // the engine's step number last added to `experts`
};

enum class Admission { kAccepted, kFull, kDraining };

class Engine {
 public:
  Engine(const Model& model, const Tokenizer& tok, const ServerOptions& opts, Metrics& metrics);
  ~Engine();

  void start();
  // Admission control: refuses when max_batch + max_queue choices are already in the system
  // (running or waiting), so the backlog is bounded and the client is told to retry.
  Admission submit(std::shared_ptr<Task> task);
  // Ends a task at the next step boundary (any thread). `error` non-empty marks it as ended by
  // the server, so the client is told why.
  void cancel(const std::shared_ptr<Task>& task, const std::string& error = "");
  void cancel_all(const std::string& error);
  // Refuse new work from now on (shutdown).
  void drain();
  // Waits until no task is in the system or `seconds` passed; true when idle.
  bool wait_idle(double seconds);
  void set_paused(bool paused);
  // Ends the loop thread (cancelling whatever is left).
  void stop();
  const std::string& routing() const { return routing_; }
  // The routing ladder, its level and the SLO controller (thread-safe reads for /metrics).
  const RoutingControl& routing_control() const { return control_; }

 private:
  void loop();
  void submit_to_scheduler(const std::shared_ptr<Task>& t);
  bool on_token(Task& t, int i, int32_t tok, float logprob);
  void on_finish(Task& t, int i, FinishReason why);
  void fail_all(const std::string& error);
  // Adds the step being run to t.experts, once per step (call with t.mu held).
  void count_step(Task& t);
  // Scheduler hook: picks the step's routing level from its decoding requests' wishes and
  // switches the context's policy when it changes.
  void before_step(std::span<const int64_t> decoding);

  const Tokenizer& tok_;
  const ServerOptions& opts_;
  Metrics& metrics_;
  RoutingControl control_;
  Context ctx_;
  Scheduler sched_;
  std::string routing_;
  std::vector<int32_t> eog_;  // end-of-generation ids
  // The vocabulary's token bytes for structured output, built on the first request with a
  // grammar (engine thread); one per set of control tokens allowed (a tool-call format's
  // markers, tool_grammar.h), so at most a few.
  std::map<std::vector<std::string>, std::shared_ptr<const grammar::TokenIndex>> token_indexes_;
  // Compiled grammars by GBNF text and index, shared by the requests that use them (filled on
  // the engine thread; the cache is thread-safe regardless).
  grammar::ConstraintCache constraints_;

  std::mutex mu_;
  std::condition_variable cv_;       // wakes the loop
  std::condition_variable idle_cv_;  // outstanding_ reached 0
  std::deque<std::shared_ptr<Task>> inbox_;
  std::vector<std::shared_ptr<Task>> cancels_;
  int64_t outstanding_ = 0;       // choices admitted and not finished
  std::string cancel_all_error_;  // non-empty: the loop cancels every live task
  bool paused_ = false, draining_ = false, stopping_ = false;

  std::vector<std::shared_ptr<Task>> live_;  // engine thread: tasks given to the scheduler
  // Engine thread: scheduler id -> its task and choice (for before_step), the level of the
  // step being run and the level the context's policy is at.
  std::unordered_map<int64_t, std::pair<Task*, int>> by_sched_;
  std::vector<RoutingControl::Wish> wishes_;
  int step_level_ = 0;
  int learn_level_ =
      0;  // the level the step's time is learned at (0 when all its tokens were exact)
  int ctx_level_ = 0;
  // Engine thread: steps attempted, so that a request counts each of its steps once.
  int64_t step_no_ = 0;
  std::vector<int> routed_layers_;  // the model's MoE layers
  std::thread thread_;
};

using util::now_seconds;

}  // namespace lynx::server
