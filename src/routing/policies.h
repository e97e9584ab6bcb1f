// Internal to src/routing: the spec-string options reader and the factory of each policy.
// The registry (registry.cc) maps a policy name to its factory; each policy file parses its
// own options through SpecOptions, so adding a policy touches only its file and the table.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lynx/routing.h"

namespace lynx::routing {

// The "key=val,key=val" part of a spec, consumed key by key by a policy's factory. Every
// accessor validates the value and throws lynx::Error naming the policy, the key and the
// problem; finish() rejects keys the policy does not know.
class SpecOptions {
 public:
  // `policy` is the name (for messages), `text` the part after ':' (may be empty).
  SpecOptions(std::string policy, std::string_view text);

  // A number in [lo, hi]. "auto" is accepted when allow_auto, and returns `def` with
  // *is_auto set.
  double get_number(const std::string& key, double def, double lo, double hi,
                    bool* is_auto = nullptr);
  // One number or a '/'-separated list of up to max_n numbers, each in [lo, hi]; empty when
  // the key is absent.
  std::vector<double> get_number_list(const std::string& key, double lo, double hi, size_t max_n);
  int get_int(const std::string& key, int def, int lo, int hi);
  // Any non-empty text (a file path); `def` when the key is absent.
  std::string get_string(const std::string& key, const std::string& def);
  // "1/0/true/false/on/off/yes/no"; a bare key ("protect-top1") means true.
  bool get_bool(const std::string& key, bool def);
  // One of `choices`; returns its index.
  int get_choice(const std::string& key, int def, const std::vector<std::string>& choices);
  // Throws for any key no accessor asked for, listing the keys this policy knows.
  void finish() const;
  const std::string& policy() const { return policy_; }

 private:
  struct Entry {
    std::string key, value;
    bool has_value = false;
    bool used = false;
  };
  const Entry* take(const std::string& key);
  std::string policy_;
  std::vector<Entry> entries_;
  std::vector<std::string> known_;
};

// Number formatting for canonical specs: shortest text that reads back to the same value.
std::string fmt_num(double v);
std::string fmt_float(float v);  // the same for a float parameter

// RoutingPolicy::check of the policies whose option counts experts per token: throws when
// `value` (option `key`) exceeds the model's k.
void check_at_most_k(const std::string& spec, const char* key, int value, const GatingConfig& g);

std::unique_ptr<RoutingPolicy> make_topk_policy(SpecOptions& o);
std::unique_ptr<RoutingPolicy> make_lynx_policy(SpecOptions& o);
std::unique_ptr<RoutingPolicy> make_oea_policy(SpecOptions& o);
std::unique_ptr<RoutingPolicy> make_budget_policy(SpecOptions& o);
std::unique_ptr<RoutingPolicy> make_ser_policy(SpecOptions& o);
std::unique_ptr<RoutingPolicy> make_static_k_policy(SpecOptions& o);
std::unique_ptr<RoutingPolicy> make_cover_policy(SpecOptions& o);
std::unique_ptr<RoutingPolicy> make_subst_policy(SpecOptions& o);

}  // namespace lynx::routing
