// Routing strength that follows the load (docs/serving.md, "Adaptive routing").
//
// A ladder of routing policy specs orders strengths from exact top-k (level 0) up to the
// strongest policy the operator allows. The SloController learns each level's step time as a
// function of the step's decode batch size from the steps the engine measures, and before
// each step picks the weakest level predicted to keep the step under the target (a bounded
// feedback scale corrects the predictions; a hysteresis margin keeps it from flapping); an
// outer loop on the TPOT of the requests that finish scales that step threshold. It is
// a pure function of what it is fed (no clock), so its tests replay synthetic step times.
// RoutingControl wraps it for the engine: the ladder, the accuracy budget, the per-step choice
// between requests' caps, and the /metrics lines.
// In the runtime layer, beside the Scheduler whose steps it is fed, so that any loop over
// steps can use it; the server's engine thread (src/server/engine.cc) is its user today.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace lynx {

struct RoutingLevel {
  std::string spec;      // canonical routing policy spec (RoutingPolicy::spec)
  double cost_pct = -1;  // measured perplexity increase in percent; < 0: not given
};

// Parses "SPEC[@PCT];SPEC[@PCT];..." (levels in increasing strength). Exact top-k is level 0:
// prepended when the text does not start with it. Throws lynx::Error on a bad spec, a bad
// cost, a duplicate level, topk above level 0, or costs that decrease along the ladder.
std::vector<RoutingLevel> parse_routing_ladder(std::string_view text);

// The ladder `serve --tpot-slo` uses when none is given and --routing is topk: cover at
// increasing strength, with the perplexity costs measured on the trained 64x8 model at B=16
// (docs/evaluation.md: data/eval for the first three, the validation sweep for lambda=0.2).
// Other models have other costs: calibrate for them and pass --routing-ladder.
inline constexpr const char* kDefaultRoutingLadder =
    "topk;cover:lambda=0.03@0.22;cover@0.34;cover:lambda=0.1@0.76;cover:lambda=0.2@1.47";

// The highest level whose cost is within `budget_pct` (< 0: no budget: the top level).
// Throws lynx::Error when a level above 0 has no cost and a budget is given.
int max_level_for_budget(const std::vector<RoutingLevel>& ladder, double budget_pct);

struct SloControllerOptions {
  double target_s = 0;      // the P99 TPOT target (seconds), > 0
  int max_level = 0;        // highest level it may choose
  int window = 16;          // decode steps in the measured TPOT, and the feedback's time constant
  double raise_at = 0.8;    // a level fits a step when its predicted time is <= raise_at * target
  double hysteresis = 0.1;  // a weaker level than the last decision must fit with this margin
  int explore_steps = 3;    // decode steps a level runs before its predictions are trusted
  int cold_steps = 8;       // the server's first decode steps, not learned from
  double scale_min = 0.5;   // bounds of the feedback scale on every prediction
  double scale_max = 2.0;
  // The tail loop (observe_request): the step threshold is scaled by an aim in
  // [aim_min, 1] that moves until the tail_quantile of the last tail_requests finished
  // requests' TPOT sits at tail_goal x target. 0 tail_requests: off.
  int tail_requests = 16;
  int tail_min_requests = 8;
  double tail_quantile = 0.9;
  double tail_goal = 0.85;
  double aim_min = 0.4;
  double aim_gain = 0.1;  // log-step of the aim per finished request, per unit of log error
};

// Feed-forward: the engine knows a step's decode batch size n before the step, and the step
// time depends mostly on n and the level. The controller learns t(level, n) online from the
// steps it observes and, before each step, picks the weakest level predicted to fit the
// target at that n (choose), instead of reacting to a window of past steps.
class SloController {
 public:
  explicit SloController(const SloControllerOptions& o);
  // The level for a step of `n_decode` decode tokens, decided before the step; n_decode <= 0
  // (a prompt-only step) keeps the last decision.
  int choose(int n_decode);
  // After a step with decode tokens: its wall time, decode tokens, prompt tokens and the
  // level it ran at (which requests' caps may have held below the decision). Steps without
  // decode tokens or with a nonsensical time are ignored.
  void observe(double step_s, int n_decode, int n_prefill, int level);
  // A request finished with this mean time per output token (its decode steps' wall time
  // over its decoded tokens): the outer loop on the requests' tail (see SloControllerOptions).
  void observe_request(double tpot_s);
  // The tail loop's factor on the step threshold (1: none), and the quantile it last saw
  // (0 before tail_min_requests requests finished).
  double aim() const { return aim_; }
  double tail() const { return tail_; }
  int level() const { return level_; }    // the last decision
  int last_n() const { return last_n_; }  // the decode tokens it was made for
  // The token-weighted mean step time of the last `window` decode steps: the TPOT a request
  // decoding through them saw (0 before any decode step). Reported, not used to decide.
  double estimate() const;
  // The feedback scale: recent measured step times over the model's predictions for them.
  double scale() const { return scale_; }
  // What prompt-carrying steps add to the mean decode step (seconds): the decode threshold is
  // raise_at x target less this (docs/serving.md, "Controller").
  double prompt_overhead() const { return overhead_; }
  // Predicted step time (seconds, scale applied) of `level` at n decode tokens; < 0 when the
  // level has run fewer than explore_steps decode-only steps.
  double predict(int level, int n) const;
  int64_t samples(int level) const;
  int64_t changes() const { return changes_; }

 private:
  // Step time (divided by the scale) of one level at one n: the mean of its logs, an
  // exponential average after its first kCellMemory samples; t = exp(log_t).
  struct Cell {
    double log_t = 0;
    double t = 0;
    int64_t count = 0;
    int64_t seen = 0;  // the decision it was last measured after
  };
  struct LevelModel {
    std::vector<Cell> cells;  // index n
    int64_t samples = 0;      // decode-only steps observed at this level
  };
  double predict_unscaled(int level, int n) const;
  bool fits(double predicted, int level) const;

  SloControllerOptions o_;
  std::vector<LevelModel> model_;
  std::deque<std::pair<double, int>> window_;  // (step seconds, decode tokens)
  double scale_ = 1;
  int level_ = 0;
  int last_n_ = 0;
  int64_t decisions_ = 0;
  int64_t last_refresh_ = 0;
  double overhead_ = 0;
  int cold_left_ = 0;
  int64_t changes_ = 0;
  std::deque<double> requests_;  // the last finished requests' TPOT (seconds)
  double aim_ = 1;
  double tail_ = 0;
  int64_t steps_since_request_ = 0;      // decode steps observed since the last finished request
  int64_t top_steps_since_request_ = 0;  // of which at max_level
};

// The engine's routing state: thread-safe for the /metrics reader, the rest engine-thread.
class RoutingControl {
 public:
  // tpot_slo_s > 0: adaptive from level 0; else fixed at `fixed_level`.
  // window_steps, tail_requests: the controller's window and tail loop (SloControllerOptions).
  RoutingControl(std::vector<RoutingLevel> ladder, int max_level, double tpot_slo_s,
                 int fixed_level, int window_steps = 16, int tail_requests = 16);

  const std::vector<RoutingLevel>& ladder() const { return ladder_; }
  int max_level() const { return max_level_; }
  bool adaptive() const { return tpot_slo_s_ > 0; }
  // The level of a canonical spec on the ladder, -1 when absent.
  int level_of(const std::string& spec) const;
  // The server's level: the controller's last decision, or the fixed one.
  int server_level() const;

  // The step's level from its decoding requests' wishes: each request allows `named` (its
  // named level, < 0: the server's) capped by `cap` (< 0: none); the step takes the strongest
  // level all of them allow (the minimum). Requests routed exact per token are not passed.
  struct Wish {
    int named = -1;
    int cap = -1;
  };
  // With the server's level decided first for a step of `n_decode` decode tokens (engine
  // thread, before each step).
  int step_level(const std::vector<Wish>& wishes, int n_decode);
  // With the server's last decision.
  int step_level(const std::vector<Wish>& wishes) const;
  // After a step with decode tokens (and `n_prefill` prompt tokens), run at `level`.
  void observe(double step_s, int n_decode, int n_prefill, int level);
  // A request finished with this TPOT (engine thread).
  void observe_request(double tpot_s);

  // Prometheus lines: lynx_routing_level, lynx_routing_level_info, steps per level, the
  // target, the controller's estimate, feedback scale and predictions.
  std::string render() const;

 private:
  int combine(const std::vector<Wish>& wishes, int server) const;

  std::vector<RoutingLevel> ladder_;
  int max_level_;
  double tpot_slo_s_;
  int fixed_level_;
  SloController ctl_;
  mutable std::mutex mu_;  // guards the figures below (read by /metrics)
  int level_ = 0;          // server level
  int last_step_level_ = 0;
  double estimate_ = 0;
  double scale_ = 1;
  double overhead_ = 0;
  double aim_ = 1;
  double tail_ = 0;
  int last_n_ = 0;
  int64_t changes_ = 0;
  std::vector<int64_t> steps_;     // decode steps run at each level
  std::vector<double> predicted_;  // each level's predicted step time at last_n_ (< 0: unknown)
};

}  // namespace lynx
