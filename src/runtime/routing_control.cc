// Routing strength that follows the load (see routing_control.h).
#include "runtime/routing_control.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>

#include "lynx/error.h"
#include "lynx/routing.h"
#include "util/strings.h"

namespace lynx {

namespace {

double parse_cost(const std::string& text, const std::string& spec) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v) || v < 0) {
    throw Error("routing ladder: level '" + spec +
                "': the cost after '@' must be a percentage >= 0 (got '" + text + "')");
  }
  return v;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Label values: specs hold only [a-z0-9:,=./-]; escape anyway as the exposition format asks.
std::string label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

std::vector<RoutingLevel> parse_routing_ladder(std::string_view text) {
  std::vector<RoutingLevel> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t semi = text.find(';', pos);
    if (semi == std::string_view::npos) semi = text.size();
    const std::string item = util::trim(text.substr(pos, semi - pos), " \t");
    pos = semi + 1;
    if (item.empty()) throw Error("routing ladder: empty level (stray ';')");
    RoutingLevel lv;
    std::string spec = item;
    if (const size_t at = item.find('@'); at != std::string::npos) {
      spec = util::trim(std::string_view(item).substr(0, at), " \t");
      lv.cost_pct = parse_cost(util::trim(std::string_view(item).substr(at + 1), " \t"), spec);
    }
    try {
      lv.spec = make_routing_policy(spec)->spec();
    } catch (const Error& e) {
      throw Error(std::string("routing ladder: ") + e.what());
    }
    for (const RoutingLevel& o : out) {
      if (o.spec == lv.spec) throw Error("routing ladder: '" + lv.spec + "' appears twice");
    }
    if (lv.spec == "topk" && !out.empty()) {
      throw Error("routing ladder: topk (exact) must be the first level");
    }
    out.push_back(std::move(lv));
  }
  if (out.front().spec != "topk") out.insert(out.begin(), RoutingLevel{"topk", 0});
  out.front().cost_pct = 0;
  double last = 0;
  for (const RoutingLevel& lv : out) {
    if (lv.cost_pct < 0) continue;
    if (lv.cost_pct < last) {
      throw Error("routing ladder: levels go from weakest to strongest, but '" + lv.spec +
                  "' costs less (" + fmt(lv.cost_pct) + "%) than a level below it (" + fmt(last) +
                  "%)");
    }
    last = lv.cost_pct;
  }
  return out;
}

int max_level_for_budget(const std::vector<RoutingLevel>& ladder, double budget_pct) {
  if (budget_pct < 0) return int(ladder.size()) - 1;
  int best = 0;
  for (size_t i = 1; i < ladder.size(); ++i) {
    if (ladder[i].cost_pct < 0) {
      throw Error("--accuracy-budget: routing level " + std::to_string(i) + " ('" + ladder[i].spec +
                  "') has no cost; give every level one as SPEC@PERCENT in --routing-ladder");
    }
    if (ladder[i].cost_pct <= budget_pct) best = int(i);
  }
  return best;
}

// ---------------------------------------------------------------------------------------

namespace {
// Steps with more decode tokens than this keep no cell (the estimate still counts them);
// their predictions extrapolate. Batches are far smaller in practice.
constexpr int kMaxCellN = 4096;
// A cell is a plain mean (of log step times) for its first samples, then an exponential
// average with this memory in samples of that cell: slow on purpose, the cells hold the
// shape of t(n) and the fast feedback scale follows a machine that gets slower or faster as
// a whole.
constexpr int64_t kCellMemory = 32;
// A cell moves the feedback scale once it holds this many samples: a younger one is a mean
// of a few noisy steps, and letting it move the scale (which the cells then make up for)
// leaves a lasting offset between the two (0.3 on a synthetic plant with 2x stalls).
constexpr int64_t kJudgeAfter = 8;
// A cell not measured for this many decisions may be measured again (see choose), one such
// step per this many decisions at most: 0.4% of the steps, under the 1% a P99 looks at.
constexpr int64_t kRefreshDecisions = 256;
// Steps over which the prompt overhead is averaged: prompts arrive every few steps, so the
// average needs several of them; and at most this share of raise_at x target goes to it.
constexpr double kOverheadSteps = 64;
constexpr double kOverheadMaxShare = 0.5;
}  // namespace

SloController::SloController(const SloControllerOptions& o)
    : o_(o), model_(size_t(std::max(o.max_level, 0)) + 1), cold_left_(o.cold_steps) {
  if (!(o_.target_s > 0) || o_.max_level < 0 || o_.window < 1 || !(o_.raise_at > 0) ||
      !(o_.hysteresis >= 0 && o_.hysteresis < 1) || o_.explore_steps < 1 || o_.cold_steps < 0 ||
      !(o_.scale_min > 0 && o_.scale_min <= 1 && o_.scale_max >= 1)) {
    throw Error(
        "SLO controller: the target and raise_at must be positive, the window and the "
        "exploration at least one step, 0 <= hysteresis < 1 and scale_min <= 1 <= scale_max");
  }
  if (o_.tail_requests < 0 ||
      (o_.tail_requests > 0 &&
       (o_.tail_min_requests < 1 || o_.tail_min_requests > o_.tail_requests ||
        !(o_.tail_quantile > 0 && o_.tail_quantile <= 1) || !(o_.tail_goal > 0) ||
        !(o_.aim_min > 0 && o_.aim_min <= 1) || !(o_.aim_gain > 0)))) {
    throw Error(
        "SLO controller: the tail loop needs 1 <= tail_min_requests <= tail_requests, a "
        "quantile in (0, 1], a positive goal and gain and 0 < aim_min <= 1");
  }
}

double SloController::estimate() const {
  double s = 0;
  int64_t n = 0;
  for (const auto& [sec, tok] : window_) {
    s += sec * tok;
    n += tok;
  }
  return n ? s / double(n) : 0;
}

int64_t SloController::samples(int level) const {
  return level >= 0 && level <= o_.max_level ? model_[size_t(level)].samples : 0;
}

// Why cells per n rather than one line t = a + b*n per level: the distinct experts a step
// streams grow concavely with n (64 experts, 8 per token: about 8 at n=1, 42 at n=8, 56 at
// n=16), so a line fitted over the whole range is wrong in the middle, where the decisions
// are. Between cells the prediction interpolates linearly, which is exact for a line and
// close for a smooth concave curve.
double SloController::predict_unscaled(int level, int n) const {
  const LevelModel& m = model_[size_t(level)];
  if (m.samples < o_.explore_steps || n < 1) return -1;
  const std::vector<Cell>& c = m.cells;
  const int top = int(c.size()) - 1;
  int lo = -1, hi = -1;  // the nearest cells with samples at or below n, and above it
  for (int k = std::min(n, top); k >= 1; --k) {
    if (c[size_t(k)].count > 0) {
      lo = k;
      break;
    }
  }
  if (lo == n) return c[size_t(n)].t;
  for (int k = n + 1; k <= top; ++k) {
    if (c[size_t(k)].count > 0) {
      hi = k;
      break;
    }
  }
  auto t = [&](int k) { return c[size_t(k)].t; };
  if (lo > 0 && hi > 0) return t(lo) + (t(hi) - t(lo)) * double(n - lo) / double(hi - lo);
  const int edge = lo > 0 ? lo : hi;  // n lies beyond every cell of this level
  if (edge < 0) return -1;
  // Beyond the cells: the level below's shape when it knows both n and the edge. A stronger
  // level's time grows no faster with n than a weaker one's (it cuts more experts the larger
  // the batch), so this errs on the slow side.
  if (level > 0) {
    const double at_n = predict_unscaled(level - 1, n);
    const double at_edge = predict_unscaled(level - 1, edge);
    if (at_n >= 0 && at_edge > 0) return t(edge) * at_n / at_edge;
  }
  // Else the slope of the two cells nearest the edge (never negative), else flat.
  int next = -1;
  if (edge == lo) {
    for (int k = lo - 1; k >= 1 && next < 0; --k) {
      if (c[size_t(k)].count > 0) next = k;
    }
  } else {
    for (int k = hi + 1; k <= top && next < 0; ++k) {
      if (c[size_t(k)].count > 0) next = k;
    }
  }
  if (next < 0) return t(edge);
  const double slope = std::max(0.0, (t(edge) - t(next)) / double(edge - next));
  return std::max(0.0, t(edge) + slope * double(n - edge));
}

double SloController::predict(int level, int n) const {
  if (level < 0 || level > o_.max_level) return -1;
  const double p = predict_unscaled(level, n);
  return p < 0 ? p : p * scale_;
}

int SloController::choose(int n_decode) {
  if (n_decode <= 0) return level_;
  last_n_ = n_decode;
  ++decisions_;
  // A request's TPOT averages every step it decodes in, those that also carry another
  // request's prompt too: a decode step must leave room for what they add on average.
  // The tail loop's aim scales the threshold: the requests' tail is what the target is on.
  const double budget = o_.raise_at * aim_ * o_.target_s;
  const double fit = budget - std::min(overhead_, kOverheadMaxShare * budget);
  int pick = o_.max_level;  // none fits: the strongest allowed
  for (int l = 0; l <= o_.max_level; ++l) {
    const double p = predict(l, n_decode);
    // Every level below is predicted too slow and this one has not run enough to say:
    // try it (it is learned from this step on).
    if (p < 0) {
      pick = l;
      break;
    }
    // Going down to a weaker level than the last decision needs a margin, so that noise
    // around the threshold does not switch the level at every step.
    if (p <= fit * (l < level_ ? 1 - o_.hysteresis : 1)) {
      pick = l;
      break;
    }
    // A level over the threshold whose cell at this n is empty or young (a sample taken
    // while the scale moved can be 10% off) and predicted within the target itself, or old
    // and predicted within twice the target (rarely: see kRefreshDecisions): tried, so that a
    // prediction on the slow side does not lock a more accurate level out for good (one on
    // the fast side corrects itself: the level runs and is measured).
    if (p <= 2 * o_.target_s && n_decode <= kMaxCellN) {
      const std::vector<Cell>& c = model_[size_t(l)].cells;
      const Cell none;
      const Cell& cell = size_t(n_decode) < c.size() ? c[size_t(n_decode)] : none;
      const bool young = cell.count < o_.explore_steps && p <= o_.target_s;
      const bool old = decisions_ - cell.seen >= kRefreshDecisions &&
                       decisions_ - last_refresh_ >= kRefreshDecisions;
      if (young || old) {
        if (!young) last_refresh_ = decisions_;
        pick = l;
        break;
      }
    }
  }
  if (pick != level_) {
    level_ = pick;
    ++changes_;
  }
  return level_;
}

void SloController::observe(double step_s, int n_decode, int n_prefill, int level) {
  if (n_decode <= 0 || !std::isfinite(step_s) || step_s < 0) return;
  ++steps_since_request_;
  if (level >= o_.max_level) ++top_steps_since_request_;
  window_.emplace_back(step_s, n_decode);
  if (int(window_.size()) > o_.window) window_.pop_front();
  // The first decode steps of a server pay first-touch costs (weights paged in, buffers
  // grown) whatever the level: learned, they would lock exact out as too slow.
  if (cold_left_ > 0) {
    --cold_left_;
    return;
  }
  // Steps that also carry prompt tokens teach the model nothing about the level: prompt
  // tokens are routed exact and their union covers most experts, so their time is the
  // prompt's, which no level changes (the scheduler's max_step_tokens bounds it). They count
  // in the estimate (their decode tokens waited) but not in the cells or the feedback.
  if (level < 0 || level > o_.max_level || n_decode > kMaxCellN) return;
  // The prompt overhead: what a step's time exceeds its level's decode-only prediction by,
  // averaged over all steps (decode-only steps add 0), so it is the mean extra a decode
  // token waits because prompts share its steps.
  if (const double pred = predict(level, n_decode); pred >= 0) {
    const double extra = n_prefill > 0 ? std::max(0.0, step_s - pred) : 0.0;
    overhead_ += (extra - overhead_) / kOverheadSteps;
  }
  if (n_prefill > 0 || !(step_s > 0)) return;
  LevelModel& m = model_[size_t(level)];
  if (m.cells.size() <= size_t(n_decode)) m.cells.resize(size_t(n_decode) + 1);
  Cell& c = m.cells[size_t(n_decode)];
  // In logs (step time = scale x cell): one error e = log(measured / predicted), with the
  // prediction from the cell measured at this very n (interpolations are not judged; young
  // cells only learn), moves the scale by e / window and the cell by e / min(count, 32).
  // Feeding both the same error keeps their common mode fixed once the cells are mature:
  // noise cannot make the scale wander while the cells make up for it, and a change of the
  // machine goes mostly into the fast scale, which also moves the levels not running now,
  // so that a machine that gets 30% slower moves every decision at once. Logs also keep one
  // step that another process stalled from moving either much (cells hold geometric means).
  const double e = std::log(step_s / scale_) - c.log_t;
  if (c.count >= kJudgeAfter) {
    scale_ = std::clamp(scale_ * std::exp(e / o_.window), o_.scale_min, o_.scale_max);
  }
  ++c.count;
  ++m.samples;
  c.seen = decisions_;
  c.log_t += e / double(std::min(c.count, kCellMemory));
  c.t = std::exp(c.log_t);
}

// Why an outer loop on finished requests: the inner loop keeps each *step* under
// raise_at x target, but the target is on the requests' P99 TPOT, which sits 1.3-1.5x above
// their median under Poisson load (docs/serving.md, section 7): bursts make runs of large
// steps and prompt-heavy steps that a request averages over. How far above depends on the
// load, so it is measured rather than assumed: the aim lowers the step threshold while the
// tail of the last requests is over its goal and gives it back when it is under. It reads a
// quantile below the P99 (a P99 of 16 requests is their maximum: one outlier would steer).
void SloController::observe_request(double tpot_s) {
  if (o_.tail_requests == 0 || !std::isfinite(tpot_s) || !(tpot_s > 0)) return;
  requests_.push_back(tpot_s);
  if (int(requests_.size()) > o_.tail_requests) requests_.pop_front();
  const int64_t steps = steps_since_request_, top = top_steps_since_request_;
  steps_since_request_ = top_steps_since_request_ = 0;
  if (int(requests_.size()) < o_.tail_min_requests) return;
  std::vector<double> v(requests_.begin(), requests_.end());
  const size_t rank = size_t(std::ceil(o_.tail_quantile * double(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(rank), v.end());
  tail_ = v[rank];
  const double e = std::log(tail_ / (o_.tail_goal * o_.target_s));
  // Anti-windup: when (nearly) every step since the last request already ran the strongest
  // allowed level, a lower aim changes nothing now and would only hold the level up later.
  if (e > 0 && steps > 0 && double(top) >= 0.9 * double(steps)) return;
  aim_ = std::clamp(aim_ * std::exp(-o_.aim_gain * e), o_.aim_min, 1.0);
}

// ---------------------------------------------------------------------------------------

namespace {
SloControllerOptions controller_options(double target_s, int max_level, int window_steps,
                                        int tail_requests) {
  SloControllerOptions o;
  o.target_s = target_s > 0 ? target_s : 1;  // unused when not adaptive
  o.max_level = max_level;
  o.window = window_steps;
  o.tail_requests = std::max(tail_requests, 0);
  o.tail_min_requests = std::clamp(o.tail_min_requests, 1, std::max(o.tail_requests, 1));
  return o;
}
}  // namespace

RoutingControl::RoutingControl(std::vector<RoutingLevel> ladder, int max_level, double tpot_slo_s,
                               int fixed_level, int window_steps, int tail_requests)
    : ladder_(std::move(ladder)),
      max_level_(max_level),
      tpot_slo_s_(tpot_slo_s),
      fixed_level_(fixed_level),
      ctl_(controller_options(tpot_slo_s, std::max(max_level, 0), std::max(window_steps, 1),
                              tail_requests)),
      steps_(ladder_.size(), 0),
      predicted_(ladder_.size(), -1) {
  if (ladder_.empty() || max_level_ < 0 || max_level_ >= int(ladder_.size()) || fixed_level_ < 0 ||
      fixed_level_ > max_level_ || window_steps < 1) {
    throw Error("routing control: levels out of the ladder");
  }
  level_ = adaptive() ? 0 : fixed_level_;
  last_step_level_ = level_;
}

int RoutingControl::level_of(const std::string& spec) const {
  for (size_t i = 0; i < ladder_.size(); ++i) {
    if (ladder_[i].spec == spec) return int(i);
  }
  return -1;
}

int RoutingControl::server_level() const {
  std::lock_guard lk(mu_);
  return level_;
}

int RoutingControl::combine(const std::vector<Wish>& wishes, int server) const {
  if (wishes.empty()) return server;
  int level = INT_MAX;
  for (const Wish& w : wishes) {
    int a = w.named >= 0 ? w.named : server;
    if (w.cap >= 0) a = std::min(a, w.cap);
    level = std::min(level, a);
  }
  return std::clamp(level, 0, max_level_);
}

int RoutingControl::step_level(const std::vector<Wish>& wishes) const {
  return combine(wishes, server_level());
}

int RoutingControl::step_level(const std::vector<Wish>& wishes, int n_decode) {
  if (!adaptive() || n_decode <= 0) return step_level(wishes);
  const int server = ctl_.choose(n_decode);
  std::lock_guard lk(mu_);
  level_ = server;
  last_n_ = n_decode;
  changes_ = ctl_.changes();
  for (size_t i = 0; i < predicted_.size(); ++i) predicted_[i] = ctl_.predict(int(i), n_decode);
  return combine(wishes, server);
}

void RoutingControl::observe_request(double tpot_s) {
  if (!adaptive()) return;
  ctl_.observe_request(tpot_s);
  std::lock_guard lk(mu_);
  aim_ = ctl_.aim();
  tail_ = ctl_.tail();
}

void RoutingControl::observe(double step_s, int n_decode, int n_prefill, int level) {
  if (adaptive()) ctl_.observe(step_s, n_decode, n_prefill, level);
  std::lock_guard lk(mu_);
  if (n_decode > 0 && level >= 0 && level < int(steps_.size())) ++steps_[size_t(level)];
  last_step_level_ = level;
  estimate_ = ctl_.estimate();
  scale_ = ctl_.scale();
  overhead_ = ctl_.prompt_overhead();
}

std::string RoutingControl::render() const {
  std::lock_guard lk(mu_);
  std::string o;
  auto head = [&](const char* name, const char* type, const char* help) {
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  head("lynx_routing_level", "gauge",
       "The server's routing level (0 = exact top-k; see lynx_routing_level_info).");
  o += "lynx_routing_level " + std::to_string(level_) + "\n";
  head("lynx_routing_step_level", "gauge",
       "Routing level of the last decode step (requests' caps can hold it below the server's).");
  o += "lynx_routing_step_level " + std::to_string(last_step_level_) + "\n";
  head("lynx_routing_max_level", "gauge", "Highest level allowed (ladder and accuracy budget).");
  o += "lynx_routing_max_level " + std::to_string(max_level_) + "\n";
  head("lynx_routing_level_info", "gauge",
       "The routing ladder: spec and perplexity cost (percent, -1 unknown) of each level; 1 for "
       "the server's current level.");
  for (size_t i = 0; i < ladder_.size(); ++i) {
    o += "lynx_routing_level_info{level=\"" + std::to_string(i) + "\",spec=\"" +
         label(ladder_[i].spec) + "\",cost_pct=\"" + fmt(ladder_[i].cost_pct) + "\"} " +
         (int(i) == level_ ? "1" : "0") + "\n";
  }
  head("lynx_routing_level_steps_total", "counter", "Decode steps run at each routing level.");
  for (size_t i = 0; i < ladder_.size(); ++i) {
    o += "lynx_routing_level_steps_total{level=\"" + std::to_string(i) + "\",spec=\"" +
         label(ladder_[i].spec) + "\"} " + std::to_string(steps_[i]) + "\n";
  }
  if (adaptive()) {
    head("lynx_routing_tpot_slo_seconds", "gauge", "The P99 TPOT target of --tpot-slo.");
    o += "lynx_routing_tpot_slo_seconds " + fmt(tpot_slo_s_) + "\n";
    head("lynx_routing_tpot_estimate_seconds", "gauge",
         "Measured TPOT: token-weighted mean step time of the last decode steps (--slo-window).");
    o += "lynx_routing_tpot_estimate_seconds " + fmt(estimate_) + "\n";
    head("lynx_routing_level_changes_total", "counter", "Level changes by the controller.");
    o += "lynx_routing_level_changes_total " + std::to_string(changes_) + "\n";
    head("lynx_routing_decision_decode_tokens", "gauge",
         "Decode tokens of the step the controller's last decision was for.");
    o += "lynx_routing_decision_decode_tokens " + std::to_string(last_n_) + "\n";
    head("lynx_routing_predicted_step_seconds", "gauge",
         "The controller's predicted step time of each level at that many decode tokens "
         "(levels that have not run enough are absent).");
    for (size_t i = 0; i < predicted_.size(); ++i) {
      if (predicted_[i] < 0) continue;
      o += "lynx_routing_predicted_step_seconds{level=\"" + std::to_string(i) + "\"} " +
           fmt(predicted_[i]) + "\n";
    }
    head("lynx_routing_model_scale", "gauge",
         "The controller's feedback: measured over predicted step times (bounded 0.5-2).");
    o += "lynx_routing_model_scale " + fmt(scale_) + "\n";
    head("lynx_routing_prompt_overhead_seconds", "gauge",
         "What prompt-carrying steps add to the mean decode step; the decode steps' threshold "
         "is 0.8 x aim x target less this (at most half of it).");
    o += "lynx_routing_prompt_overhead_seconds " + fmt(overhead_) + "\n";
    head("lynx_routing_tail_tpot_seconds", "gauge",
         "The tail loop's input: the P90 TPOT of the last finished requests (0 before 8).");
    o += "lynx_routing_tail_tpot_seconds " + fmt(tail_) + "\n";
    head("lynx_routing_aim", "gauge",
         "The tail loop's factor on the decode steps' threshold (1 = none, at least 0.4).");
    o += "lynx_routing_aim " + fmt(aim_) + "\n";
  }
  return o;
}

}  // namespace lynx
