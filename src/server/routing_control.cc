// Routing strength that follows the load (see routing_control.h).
#include "server/routing_control.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>

#include "lynx/error.h"
#include "lynx/routing.h"
#include "util/strings.h"

namespace lynx::server {

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

SloController::SloController(const SloControllerOptions& o) : o_(o) {
  if (!(o_.target_s > 0) || o_.max_level < 0 || o_.window < 1 || o_.dwell < 0 ||
      !(o_.lower_at > 0 && o_.lower_at < o_.raise_at)) {
    throw Error(
        "SLO controller: the target must be positive, the window at least one step, and "
        "0 < lower_at < raise_at");
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

int SloController::observe(double step_s, int n_decode, int n_waiting) {
  if (n_decode <= 0 || !std::isfinite(step_s) || step_s < 0) return level_;
  window_.emplace_back(step_s, n_decode);
  if (int(window_.size()) > o_.window) window_.pop_front();
  ++since_change_;
  // A full window of steps at the current level, and the dwell since the last change: the
  // estimate then describes this level only (the window is cleared at each change).
  if (int(window_.size()) < o_.window || since_change_ < o_.dwell) return level_;
  const double est = estimate();
  int next = level_;
  if (est > o_.raise_at * o_.target_s && level_ < o_.max_level) {
    next = level_ + 1;
  } else if (est < o_.lower_at * o_.target_s && level_ > 0 && n_waiting == 0) {
    // A queue means the batch is full and will stay full: a weaker level now would only
    // be raised again.
    next = level_ - 1;
  }
  if (next != level_) {
    level_ = next;
    since_change_ = 0;
    window_.clear();
    ++changes_;
  }
  return level_;
}

// ---------------------------------------------------------------------------------------

namespace {
SloControllerOptions controller_options(double target_s, int max_level, int window_steps) {
  SloControllerOptions o;
  o.target_s = target_s > 0 ? target_s : 1;  // unused when not adaptive
  o.max_level = max_level;
  o.window = o.dwell = window_steps;
  return o;
}
}  // namespace

RoutingControl::RoutingControl(std::vector<RoutingLevel> ladder, int max_level, double tpot_slo_s,
                               int fixed_level, int window_steps)
    : ladder_(std::move(ladder)),
      max_level_(max_level),
      tpot_slo_s_(tpot_slo_s),
      fixed_level_(fixed_level),
      ctl_(controller_options(tpot_slo_s, max_level, window_steps)),
      steps_(ladder_.size(), 0) {
  if (ladder_.empty() || max_level_ < 0 || max_level_ >= int(ladder_.size()) || fixed_level_ < 0 ||
      fixed_level_ > max_level_) {
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

int RoutingControl::step_level(const std::vector<Wish>& wishes) const {
  const int server = server_level();
  if (wishes.empty()) return server;
  int level = INT_MAX;
  for (const Wish& w : wishes) {
    int a = w.named >= 0 ? w.named : server;
    if (w.cap >= 0) a = std::min(a, w.cap);
    level = std::min(level, a);
  }
  return std::clamp(level, 0, max_level_);
}

void RoutingControl::observe(double step_s, int n_decode, int n_waiting, int level) {
  const int next = adaptive() ? ctl_.observe(step_s, n_decode, n_waiting) : fixed_level_;
  std::lock_guard lk(mu_);
  if (n_decode > 0 && level >= 0 && level < int(steps_.size())) ++steps_[size_t(level)];
  last_step_level_ = level;
  level_ = next;
  estimate_ = ctl_.estimate();
  changes_ = ctl_.changes();
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
         "The controller's smoothed TPOT (token-weighted mean step time of its window).");
    o += "lynx_routing_tpot_estimate_seconds " + fmt(estimate_) + "\n";
    head("lynx_routing_level_changes_total", "counter", "Level changes by the controller.");
    o += "lynx_routing_level_changes_total " + std::to_string(changes_) + "\n";
  }
  return o;
}

}  // namespace lynx::server
