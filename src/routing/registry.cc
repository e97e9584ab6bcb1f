// The policy registry: "name" or "name:key=val,key=val" -> a RoutingPolicy.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "routing/policies.h"
#include "util/strings.h"

namespace lynx {
namespace routing {
namespace {

// Specs are trimmed of blanks only.
std::string trim(std::string_view s) {
  return util::trim(s, " \t");
}

std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (const auto& s : v) r += (r.empty() ? "" : ", ") + s;
  return r;
}

using Factory = std::unique_ptr<RoutingPolicy> (*)(SpecOptions&);
struct Registered {
  const char* name;
  Factory make;
};
// Order = the order --help lists them in: the baseline, the method, its peers, then ours.
constexpr Registered kPolicies[] = {
    {"topk", make_topk_policy},   {"lynx", make_lynx_policy},
    {"oea", make_oea_policy},     {"budget", make_budget_policy},
    {"ser", make_ser_policy},     {"static-k", make_static_k_policy},
    {"cover", make_cover_policy}, {"subst", make_subst_policy},
};

}  // namespace

SpecOptions::SpecOptions(std::string policy, std::string_view text) : policy_(std::move(policy)) {
  if (trim(text).empty()) return;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string item = trim(text.substr(pos, comma - pos));
    if (item.empty()) {
      throw Error("routing spec '" + policy_ + "': empty option (stray ',')");
    }
    Entry en;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      en.key = item;
    } else {
      en.key = trim(std::string_view(item).substr(0, eq));
      en.value = trim(std::string_view(item).substr(eq + 1));
      en.has_value = true;
      if (en.key.empty()) throw Error("routing spec '" + policy_ + "': option without a name");
      if (en.value.empty()) {
        throw Error("routing spec '" + policy_ + "': option '" + en.key + "' has an empty value");
      }
    }
    for (const auto& other : entries_) {
      if (other.key == en.key) {
        throw Error("routing spec '" + policy_ + "': option '" + en.key + "' given twice");
      }
    }
    entries_.push_back(std::move(en));
    pos = comma + 1;
  }
}

const SpecOptions::Entry* SpecOptions::take(const std::string& key) {
  known_.push_back(key);
  for (auto& e : entries_) {
    if (e.key == key) {
      e.used = true;
      return &e;
    }
  }
  return nullptr;
}

namespace {
double parse_number(const std::string& where, const std::string& text, double lo, double hi) {
  double v = 0;
  const char* b = text.data();
  const char* end = b + text.size();
  auto [p, ec] = std::from_chars(b, end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v)) {
    throw Error(where + ": '" + text + "' is not a number");
  }
  if (v < lo || v > hi) {
    throw Error(where + " = " + text + " is out of range [" + fmt_num(lo) + ", " + fmt_num(hi) +
                "]");
  }
  return v;
}
}  // namespace

double SpecOptions::get_number(const std::string& key, double def, double lo, double hi,
                               bool* is_auto) {
  const Entry* e = take(key);
  if (is_auto) *is_auto = false;
  if (!e) {
    if (is_auto) *is_auto = true;
    return def;
  }
  const std::string where = "routing spec '" + policy_ + "': option '" + key + "'";
  if (!e->has_value) throw Error(where + " needs a value (" + key + "=...)");
  if (is_auto && e->value == "auto") {
    *is_auto = true;
    return def;
  }
  return parse_number(where, e->value, lo, hi);
}

std::vector<double> SpecOptions::get_number_list(const std::string& key, double lo, double hi,
                                                 size_t max_n) {
  const Entry* e = take(key);
  if (!e) return {};
  const std::string where = "routing spec '" + policy_ + "': option '" + key + "'";
  if (!e->has_value) throw Error(where + " needs a value (" + key + "=V or V0/V1/...)");
  std::vector<double> out;
  size_t pos = 0;
  while (pos <= e->value.size()) {
    size_t slash = e->value.find('/', pos);
    if (slash == std::string::npos) slash = e->value.size();
    if (out.size() == max_n) {
      throw Error(where + ": more than " + std::to_string(max_n) + " values");
    }
    out.push_back(
        parse_number(where, trim(std::string_view(e->value).substr(pos, slash - pos)), lo, hi));
    pos = slash + 1;
  }
  return out;
}

int SpecOptions::get_int(const std::string& key, int def, int lo, int hi) {
  const Entry* e = take(key);
  if (!e) return def;
  const std::string where = "routing spec '" + policy_ + "': option '" + key + "'";
  if (!e->has_value) throw Error(where + " needs a value (" + key + "=...)");
  int v = 0;
  const char* b = e->value.data();
  const char* end = b + e->value.size();
  auto [p, ec] = std::from_chars(b, end, v);
  if (ec != std::errc() || p != end) {
    throw Error(where + ": '" + e->value + "' is not an integer");
  }
  if (v < lo || v > hi) {
    throw Error(where + " = " + e->value + " is out of range [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  }
  return v;
}

std::string SpecOptions::get_string(const std::string& key, const std::string& def) {
  const Entry* e = take(key);
  if (!e) return def;
  if (!e->has_value) {
    throw Error("routing spec '" + policy_ + "': option '" + key + "' needs a value (" + key +
                "=...)");
  }
  return e->value;
}

bool SpecOptions::get_bool(const std::string& key, bool def) {
  const Entry* e = take(key);
  if (!e) return def;
  if (!e->has_value) return true;
  const std::string& v = e->value;
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  throw Error("routing spec '" + policy_ + "': option '" + key + "' = '" + v +
              "' is not a boolean (use 1/0, true/false, on/off)");
}

int SpecOptions::get_choice(const std::string& key, int def,
                            const std::vector<std::string>& choices) {
  const Entry* e = take(key);
  if (!e) return def;
  const std::string where = "routing spec '" + policy_ + "': option '" + key + "'";
  if (!e->has_value) throw Error(where + " needs a value (one of: " + join(choices) + ")");
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i] == e->value) return int(i);
  }
  throw Error(where + " = '" + e->value + "' is not one of: " + join(choices));
}

void SpecOptions::finish() const {
  for (const auto& e : entries_) {
    if (e.used) continue;
    throw Error(
        "routing spec '" + policy_ + "': unknown option '" + e.key + "' (" +
        (known_.empty() ? std::string("this policy takes no options") : "known: " + join(known_)) +
        ")");
  }
}

void check_at_most_k(const std::string& spec, const char* key, int value, const GatingConfig& g) {
  if (value > g.n_expert_used) {
    throw Error("routing spec '" + spec + "': " + key + " = " + std::to_string(value) +
                " is more than the model's " + std::to_string(g.n_expert_used) +
                " experts per token");
  }
}

std::string fmt_num(double v) {
  char buf[32];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string fmt_float(float v) {
  char buf[32];
  for (int prec = 1; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, double(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace routing

std::unique_ptr<RoutingPolicy> make_routing_policy(std::string_view spec) {
  std::string s = routing::trim(spec);
  if (s.empty())
    throw Error("routing spec is empty (known policies: " + routing::join(routing_policy_names()) +
                ")");
  size_t colon = s.find(':');
  std::string name = routing::trim(std::string_view(s).substr(0, colon));
  std::string_view rest =
      colon == std::string::npos ? std::string_view() : std::string_view(s).substr(colon + 1);
  if (colon != std::string::npos && routing::trim(rest).empty()) {
    throw Error("routing spec '" + s + "': nothing after ':' (write '" + name +
                "' or give options key=val)");
  }
  for (const auto& r : routing::kPolicies) {
    if (name != r.name) continue;
    routing::SpecOptions opts(name, rest);
    auto p = r.make(opts);
    opts.finish();
    return p;
  }
  throw Error("unknown routing policy '" + name +
              "' (known: " + routing::join(routing_policy_names()) + ")");
}

std::unique_ptr<RoutingPolicy> make_routing_policy(std::string_view spec, const GatingConfig& g) {
  auto p = make_routing_policy(spec);
  p->check(g);
  return p;
}

std::vector<std::string> routing_policy_names() {
  std::vector<std::string> names;
  for (const auto& r : routing::kPolicies) names.push_back(r.name);
  return names;
}

}  // namespace lynx
