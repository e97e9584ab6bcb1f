// Routing strength that follows the load (docs/serving.md, "Adaptive routing").
//
// A ladder of routing policy specs orders strengths from exact top-k (level 0) up to the
// strongest policy the operator allows. The SloController picks the server's level from the
// step times the engine measures: up one level when the smoothed TPOT comes near the target,
// down one level when there is slack and no request waits, with a hysteresis band and a dwell
// so that it does not flap. It is a pure function of what it is fed (no clock), so its tests
// replay synthetic step-time sequences. RoutingControl wraps it for the engine: the ladder,
// the accuracy budget, the per-step choice between requests' caps, and the /metrics lines.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace lynx::server {

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
  double target_s = 0;    // the P99 TPOT target (seconds), > 0
  int max_level = 0;      // highest level it may choose
  int window = 16;        // decode steps in the smoothed TPOT
  double raise_at = 0.8;  // raise when the smoothed TPOT exceeds raise_at * target
  double lower_at = 0.5;  // lower when it is below lower_at * target (and nothing waits)
  int dwell = 16;         // decode steps at a level before the next change
};

class SloController {
 public:
  explicit SloController(const SloControllerOptions& o);
  // One decode step: its wall time, its decode tokens, requests waiting for a slot. Returns
  // the level for the next steps. Steps without decode tokens are ignored.
  int observe(double step_s, int n_decode, int n_waiting);
  int level() const { return level_; }
  // The token-weighted mean step time of the window: the TPOT a request decoding through
  // these steps saw (0 before any decode step).
  double estimate() const;
  int64_t changes() const { return changes_; }

 private:
  SloControllerOptions o_;
  std::deque<std::pair<double, int>> window_;  // (step seconds, decode tokens)
  int level_ = 0;
  int since_change_ = 0;
  int64_t changes_ = 0;
};

// The engine's routing state: thread-safe for the /metrics reader, the rest engine-thread.
class RoutingControl {
 public:
  // tpot_slo_s > 0: adaptive from level 0; else fixed at `fixed_level`.
  // window_steps: the controller's window and dwell (SloControllerOptions).
  RoutingControl(std::vector<RoutingLevel> ladder, int max_level, double tpot_slo_s,
                 int fixed_level, int window_steps = 16);

  const std::vector<RoutingLevel>& ladder() const { return ladder_; }
  int max_level() const { return max_level_; }
  bool adaptive() const { return tpot_slo_s_ > 0; }
  // The level of a canonical spec on the ladder, -1 when absent.
  int level_of(const std::string& spec) const;
  // The server's level (the controller's, or the fixed one).
  int server_level() const;

  // The step's level from its decoding requests' wishes: each request allows `named` (its
  // named level, < 0: the server's) capped by `cap` (< 0: none); the step takes the strongest
  // level all of them allow (the minimum). Requests routed exact per token are not passed.
  struct Wish {
    int named = -1;
    int cap = -1;
  };
  int step_level(const std::vector<Wish>& wishes) const;
  // After a step with decode tokens, run at `level`.
  void observe(double step_s, int n_decode, int n_waiting, int level);

  // Prometheus lines: lynx_routing_level, lynx_routing_level_info, steps per level, the
  // target and the controller's estimate.
  std::string render() const;

 private:
  std::vector<RoutingLevel> ladder_;
  int max_level_;
  double tpot_slo_s_;
  int fixed_level_;
  SloController ctl_;
  mutable std::mutex mu_;  // guards the figures below (read by /metrics)
  int level_ = 0;          // server level
  int last_step_level_ = 0;
  double estimate_ = 0;
  int64_t changes_ = 0;
  std::vector<int64_t> steps_;  // decode steps run at each level
};

}  // namespace lynx::server
