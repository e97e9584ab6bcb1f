#include "routing/lynx.h"

#include <algorithm>
#include <cmath>

#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx::routing {
namespace {

// Published (alpha, beta) per model (the Lynx paper; docs/routing.md).
struct Published {
  int k, n;
  float alpha, beta;
};
constexpr Published kPublished[] = {
    {8, 64, 3.f, 4.f},   // Qwen2-57B-A14B
    {8, 128, 3.f, 2.f},  // Qwen3-30B-A3B, Qwen3-235B-A22B
    {2, 8, 0.7f, 1.f},   // Mixtral-8x7B (8x22B uses (1, 1) at the same k/N: not derivable)
    {6, 160, 1.f, 2.f},  // DeepSeek-Coder-V2
    {4, 128, 3.f, 2.f},  // GPT-OSS-120B
};

}  // namespace

AlphaBeta lynx_default_alpha_beta(int k, int n) {
  // The paper says the values follow from the sparsity k/N, but they are not monotone in it
  // (DeepSeek-Coder-V2 at k/N = 0.0375 has alpha 1 while GPT-OSS at 0.031 and Qwen3 at 0.0625
  // have 3), so no smooth rule reproduces them. We take the nearest published point in
  // (log2(k/N), log2(k)), which reproduces every listed model exactly and gives new models the
  // setting of the most similar one (docs/routing.md). Ties: the earlier table entry.
  AlphaBeta best;
  double best_d = 1e30;
  const double x = std::log2(double(k) / n), y = std::log2(double(k));
  for (const auto& p : kPublished) {
    const double d = std::fabs(x - std::log2(double(p.k) / p.n)) + std::fabs(y - std::log2(p.k));
    if (d < best_d) {
      best_d = d;
      best = {p.alpha, p.beta};
    }
  }
  return best;
}

std::string LynxPolicy::spec() const {
  std::string opts;
  auto add = [&](const std::string& s) { opts += (opts.empty() ? "" : ",") + s; };
  if (p_.alpha > 0) add("alpha=" + fmt_float(p_.alpha));
  if (p_.beta > 0) add("beta=" + fmt_float(p_.beta));
  if (!p_.window.empty()) {
    std::string w;
    for (float v : p_.window) {
      if (!w.empty()) w += '/';
      w += fmt_float(v);
    }
    add("window=" + w);
  }
  if (!p_.protect_top1) add("protect-top1=0");
  if (!p_.piggyback_prefill) add("piggyback-prefill=0");
  if (p_.mode == LynxMode::kDecodeOnlyBatches) add("mode=decode-only-batches");
  return opts.empty() ? "lynx" : "lynx:" + opts;
}

// Steps 1-2 of the algorithm (docs/routing.md): AffinityBinning and adaptive expert scoring, on the
// B rows.
void LynxPolicy::score(const RoutingInput& in, const RoutingOutput& exact, int n_loaded) {
  const int n = in.gating->n_expert, k = in.gating->n_expert_used;
  const int B = st_.B;
  const float alpha = st_.alpha, beta = st_.beta;
  // q is either -beta or an integer in (-beta, 0], so h = B^q comes from a small table.
  const int n_int = int(std::ceil(beta)) + 1;
  pow_b_.resize(n_int);
  for (int j = 0; j < n_int; ++j) pow_b_[j] = float(std::pow(double(B), -double(j)));
  const float h_far = float(std::pow(double(B), -double(beta)));

  st_.q.resize(size_t(B) * n);
  st_.h.resize(size_t(B) * n);
  st_.m.resize(size_t(B) * n);
  // S is summed from per-bin counts, S[e] = sum_j count_j[e] * B^-j in a fixed order, so
  // experts whose bins are the same multiset get bit-identical S and m: mathematical ties in m
  // stay ties and are broken by the logit, as the algorithm says, not by rounding noise.
  const int n_levels = n_int + 1;  // integer bins 0..-(n_int-1), then the far bin -beta
  counts_.assign(size_t(n_levels) * n, 0);
  for (int r = 0; r < B; ++r) {
    const int t = st_.rows[r];
    // Bins are on the selection keys (the logits, unless the gating has a selection bias or a
    // group limit: docs/routing.md "Selection keys").
    const float* z = key_row(in, t);
    const float zmax = z[exact.ids[size_t(t) * k]];
    float* q = &st_.q[size_t(r) * n];
    float* h = &st_.h[size_t(r) * n];
    for (int e = 0; e < n; ++e) {
      // <= 0 for finite logits. Non-finite ones (docs/routing.md): an expert equal to the
      // top-1 (+inf beside a +inf top-1) is in bin 0, and NaN (a NaN logit, or a finite one
      // below a NaN top-1) falls to the far bin: the negated test keeps NaN out of the
      // float-to-int conversion below, which would be undefined.
      const float g = z[e] == zmax ? 0.f : alpha * (z[e] - zmax);
      int level;
      if (!(g > -beta)) {
        q[e] = -beta;
        h[e] = h_far;
        level = n_int;
      } else {
        q[e] = std::ceil(g) + 0.f;  // + 0 turns ceil's -0 into 0
        level = int(-q[e]);
        h[e] = pow_b_[level];
      }
      ++counts_[size_t(level) * n + e];
    }
  }
  st_.S.assign(n, 0.f);
  for (int level = 0; level < n_levels; ++level) {
    const float hv = level < n_int ? pow_b_[level] : h_far;
    const int32_t* c = &counts_[size_t(level) * n];
    for (int e = 0; e < n; ++e) st_.S[e] += float(c[e]) * hv;
  }
  // The bonus from the other tokens, (S - h) / B, is below 1, so it only orders experts inside
  // one bin. With piggyback, the experts prefill tokens load anyway vote like one more token
  // of bin 0 (h = 1): the bonus becomes (S - h + loaded) / (B + 1), still below 1.
  const float denom = float(B + (n_loaded > 0 ? 1 : 0));
  for (int r = 0; r < B; ++r) {
    const float* q = &st_.q[size_t(r) * n];
    const float* h = &st_.h[size_t(r) * n];
    float* m = &st_.m[size_t(r) * n];
    for (int e = 0; e < n; ++e) {
      const float bonus = st_.S[e] - h[e] + (n_loaded > 0 ? float(st_.loaded[e]) : 0.f);
      m[e] = q[e] + bonus / denom;
    }
  }
}

// Step 3: each row's top-k by m (ties: higher logit, then lower id); U = their union.
void LynxPolicy::pick_critical(const RoutingInput& in, const RoutingOutput& exact) {
  const int n = in.gating->n_expert, k = in.gating->n_expert_used;
  st_.critical.resize(size_t(st_.B) * k);
  for (int r = 0; r < st_.B; ++r) {
    const int t = st_.rows[r];
    const float* z = key_row(in, t);
    const float* m = &st_.m[size_t(r) * n];
    int32_t* pick = &st_.critical[size_t(r) * k];
    auto before = [&](int32_t a, int32_t b) {
      return m[a] > m[b] || (m[a] == m[b] && logit_before(z, a, b));
    };
    // protect-top1: the exact top-1 takes the first slot, so it is in U and, having the
    // highest logit in U, is always kept by the remap. Closes the original's gap where more
    // than k experts tie in bin 0 and the bonus pushes the top-1 out.
    const int32_t top1 = exact.ids[size_t(t) * k];
    int base = 0;
    if (p_.protect_top1) pick[base++] = top1;
    int len = base;
    for (int32_t e = 0; e < n && base < k; ++e) {
      if (base == 1 && e == top1) continue;
      if (len == k && !before(e, pick[k - 1])) continue;
      int pos = len < k ? len++ : k - 1;
      while (pos > base && before(e, pick[pos - 1])) {
        pick[pos] = pick[pos - 1];
        --pos;
      }
      pick[pos] = e;
    }
    for (int j = 0; j < k; ++j) in_u_[pick[j]] = 1;
  }
}

void LynxPolicy::route(const RoutingInput& in, RoutingOutput& out) {
  // Everyone starts from exact top-k: prefill and exact tokens keep it, and a decode token
  // whose remapped set equals its exact set keeps its exact weights bit for bit.
  route_topk_keep_gates(in, out, gates_);
  st_.applied = false;
  st_.B = 0;
  const GatingConfig& g = *in.gating;
  const int n = g.n_expert, k = g.n_expert_used;
  if (k == n || in.n_tokens == 0) return;

  st_.rows.clear();
  bool any_prefill = false;
  for (int t = 0; t < in.n_tokens; ++t) {
    if (is_remappable(in, t)) {
      st_.rows.push_back(t);
    } else {
      any_prefill |= is_prefill(in, t);
    }
  }
  // The original turns itself off for any batch that holds a prefill token.
  if (p_.mode == LynxMode::kDecodeOnlyBatches && any_prefill) return;
  st_.B = int(st_.rows.size());
  if (st_.B == 0) return;
  const AlphaBeta def = lynx_default_alpha_beta(k, n);
  st_.alpha = p_.alpha > 0 ? p_.alpha : def.alpha;
  st_.beta = p_.beta > 0 ? p_.beta : def.beta;
  if (!p_.window.empty()) {
    const float w = p_.window[size_t(std::min<int>(in.layer, int(p_.window.size()) - 1))];
    if (w == 0.f) {  // this layer routes exactly
      st_.B = 0;
      return;
    }
    // beta >= 1 keeps q's range valid; a window under 1/alpha is a single bin 0.
    st_.beta = std::max(1.f, st_.alpha * w);
  }

  st_.loaded.assign(n, 0);
  int n_loaded = 0;
  // With the expert tier, the experts in memory cost no read: loaded, as a prefill's are.
  if (in.resident) {
    for (int e = 0; e < n; ++e) {
      st_.loaded[e] = in.resident[e] ? 1 : 0;
      n_loaded += st_.loaded[e];
    }
  }
  if (p_.piggyback_prefill && st_.B < in.n_tokens) {
    for (int t = 0; t < in.n_tokens; ++t) {
      if (is_remappable(in, t)) continue;
      for (int j = 0; j < k; ++j) {
        uint8_t& l = st_.loaded[out.ids[size_t(t) * k + j]];
        n_loaded += l == 0;
        l = 1;
      }
    }
  }

  score(in, out, n_loaded);
  in_u_.assign(n, 0);
  pick_critical(in, out);
  st_.U.clear();
  for (int32_t e = 0; e < n; ++e) {
    if (in_u_[e] || st_.loaded[e]) st_.U.push_back(e);
  }
  st_.applied = true;

  // Step 4: remap. Each row takes its top-k by ORIGINAL logit among U; its own k critical
  // picks are in U, so there are always k candidates.
  chosen_.resize(k);
  for (int r = 0; r < st_.B; ++r) {
    const int t = st_.rows[r];
    const float* z = in.logits + size_t(t) * n;
    const float* key = key_row(in, t);
    int32_t* ids = out.ids + size_t(t) * k;
    topk_among(key, st_.U.data(), int(st_.U.size()), k, chosen_.data());
    keep_group_limit(g, key, ids, k, chosen_.data());
    bool same = true;
    for (int j = 0; j < k; ++j) same &= chosen_[j] == ids[j];
    if (same) continue;
    const RowGate& rg = gates_[t];
    const float target = g.norm_topk ? 0.f : prob_mass(z, rg, g.func, ids, k);
    for (int j = 0; j < k; ++j) ids[j] = chosen_[j];
    set_weights(z, rg, g, ids, k, target, out.weights + size_t(t) * k);
  }
}

std::unique_ptr<RoutingPolicy> make_lynx_policy(SpecOptions& o) {
  LynxParams p;
  bool a_auto = false, b_auto = false;
  p.alpha = float(o.get_number("alpha", 0, 1e-3, 1e3, &a_auto));
  p.beta = float(o.get_number("beta", 0, 1, 64, &b_auto));
  if (a_auto) p.alpha = 0;
  if (b_auto) p.beta = 0;
  p.protect_top1 = o.get_bool("protect-top1", true);
  p.piggyback_prefill = o.get_bool("piggyback-prefill", true);
  p.mode = LynxMode(o.get_choice("mode", 0, {"decode-tokens", "decode-only-batches"}));
  for (double w : o.get_number_list("window", 0, 1e3, 1024)) p.window.push_back(float(w));
  if (!p.window.empty() && !b_auto) {
    throw Error("routing spec 'lynx': give beta or window (= beta / alpha), not both");
  }
  return std::make_unique<LynxPolicy>(p);
}

}  // namespace lynx::routing
