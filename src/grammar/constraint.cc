// Constraint: a grammar as the sampler's TokenConstraint, and ConstraintCache, which shares
// one compiled grammar's matcher and masks between requests (lynx/grammar.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "lynx/grammar.h"

namespace lynx::grammar {

struct Constraint::Shared {
  Shared(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> i)
      : matcher(std::move(g)), index(std::move(i)) {}
  // Guards everything below: the sequences of a request, and with ConstraintCache the
  // requests with the same grammar, step one matcher (the server samples them all on its
  // loop thread, so the lock is uncontended there).
  std::mutex mu;
  Matcher matcher;
  std::shared_ptr<const TokenIndex> index;
  // Masks by state: a JSON grammar comes back to the same states (inside a string, after a
  // comma at one depth), so most steps that need a mask find it here. Bounded: cleared when
  // full (64 masks of a 151,936-token vocabulary are 1.2 MB); a constraint keeps the mask it
  // was handed until it asks for the next one.
  static constexpr size_t kMaxMasks = 64;
  std::unordered_map<StateId, std::shared_ptr<const std::vector<uint64_t>>> masks;
  // A limit was reached: ConstraintCache gives this matcher to no new request.
  bool failed = false;

  std::shared_ptr<const std::vector<uint64_t>> mask(StateId s) {
    auto it = masks.find(s);
    if (it != masks.end()) return it->second;
    if (masks.size() >= kMaxMasks) masks.clear();
    auto bits = std::make_shared<std::vector<uint64_t>>();
    index->mask(matcher, s, *bits);
    return masks.emplace(s, std::move(bits)).first->second;
  }

  // Runs f with the lock held, marking the matcher failed when a limit throws.
  template <class F>
  auto locked(F&& f) {
    std::lock_guard lk(mu);
    try {
      return f();
    } catch (const Error&) {
      failed = true;
      throw;
    }
  }
};

Constraint::Constraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> index)
    : sh_(std::make_shared<Shared>(std::move(g), std::move(index))), state_(sh_->matcher.start()) {}

Constraint::Constraint(std::shared_ptr<Shared> sh, StateId s) : sh_(std::move(sh)), state_(s) {}

Constraint::~Constraint() = default;

std::unique_ptr<Constraint> Constraint::fork() const {
  return std::unique_ptr<Constraint>(new Constraint(sh_, sh_->matcher.start()));
}

bool Constraint::allows(int32_t token) {
  return sh_->locked([&] { return sh_->index->allows(sh_->matcher, state_, token); });
}

bool Constraint::apply(std::span<float> logits) {
  mask_ = sh_->locked([&] { return sh_->mask(state_); });
  const std::vector<uint64_t>& bits = *mask_;
  bool any = false;
  const size_t n = std::min(logits.size(), size_t(sh_->index->n_vocab()));
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = bits[w];
    if (word == ~uint64_t(0)) {
      any = true;
      continue;
    }
    const size_t end = std::min(n, w * 64 + 64);
    if (word == 0) {  // most words in a structural state: a plain fill
      std::fill(logits.begin() + long(w * 64), logits.begin() + long(end),
                -std::numeric_limits<float>::infinity());
      continue;
    }
    for (size_t i = w * 64; i < end; ++i) {
      if (!((word >> (i & 63)) & 1)) logits[i] = -std::numeric_limits<float>::infinity();
    }
    any = any || word != 0;
  }
  // Tokens past the index's vocabulary (a model whose output layer is wider) never follow.
  for (size_t i = n; i < logits.size(); ++i) logits[i] = -std::numeric_limits<float>::infinity();
  return any;
}

const uint64_t* Constraint::mask_bits(size_t& n_tokens) {
  n_tokens = size_t(sh_->index->n_vocab());
  mask_ = sh_->locked([&] { return sh_->mask(state_); });
  return mask_->data();
}

void Constraint::accept(int32_t token) {
  if (sh_->index->is_eog(token)) return;  // the end: nothing follows
  const StateId t =
      sh_->locked([&] { return sh_->matcher.step(state_, sh_->index->piece(token)); });
  if (t == kDead)
    throw Error("grammar: token " + std::to_string(token) + " does not continue the grammar");
  state_ = t;
}

bool Constraint::accepting() const {
  return sh_->locked([&] { return sh_->matcher.accepting(state_); });
}

struct ConstraintCache::Entry {
  std::string key;  // limits, start rule and text
  std::shared_ptr<const TokenIndex> index;
  std::shared_ptr<Constraint::Shared> shared;
};

namespace {
std::string cache_key(const Grammar& g) {
  const Limits& l = g.limits();
  std::string key;
  for (size_t v : {l.max_text, l.max_rules, l.max_symbols, size_t(l.max_nesting),
                   size_t(l.max_repeat), l.max_stacks, l.max_states, l.max_nodes}) {
    key += std::to_string(v) + ',';
  }
  key += g.rule_name(g.root());
  key += '\0';
  key += g.text();
  return key;
}
}  // namespace

ConstraintCache::ConstraintCache(size_t max_entries)
    : max_entries_(std::max<size_t>(1, max_entries)) {}

ConstraintCache::~ConstraintCache() = default;

std::unique_ptr<Constraint> ConstraintCache::get(const std::shared_ptr<const Grammar>& g,
                                                 const std::shared_ptr<const TokenIndex>& index) {
  std::string key = cache_key(*g);
  std::lock_guard lk(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const auto& e) { return e->index == index && e->key == key; });
  if (it != entries_.end()) {
    std::shared_ptr<Constraint::Shared> sh = (*it)->shared;
    bool usable;
    StateId start;
    {
      std::lock_guard sl(sh->mu);
      const Limits& l = sh->matcher.grammar().limits();
      usable = !sh->failed && sh->matcher.n_states() < l.max_states / 4 &&
               sh->matcher.n_nodes() < l.max_nodes / 4;
      start = sh->matcher.start();
    }
    if (usable) {
      ++stats_.hits;
      std::rotate(it, it + 1, entries_.end());  // most recently used last
      return std::unique_ptr<Constraint>(new Constraint(std::move(sh), start));
    }
    ++stats_.retired;
    entries_.erase(it);
  } else {
    ++stats_.misses;
  }
  if (entries_.size() >= max_entries_) {
    entries_.erase(entries_.begin());
    ++stats_.evicted;
  }
  auto e = std::make_unique<Entry>();
  e->key = std::move(key);
  e->index = index;
  e->shared = std::make_shared<Constraint::Shared>(g, index);
  const StateId start = e->shared->matcher.start();
  auto c = std::unique_ptr<Constraint>(new Constraint(e->shared, start));
  entries_.push_back(std::move(e));
  return c;
}

ConstraintCache::Stats ConstraintCache::stats() const {
  std::lock_guard lk(mu_);
  Stats s = stats_;
  s.entries = entries_.size();
  return s;
}

}  // namespace lynx::grammar
