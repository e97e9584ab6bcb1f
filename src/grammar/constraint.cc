// Constraint: a grammar as the sampler's TokenConstraint (lynx/grammar.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "lynx/grammar.h"

namespace lynx::grammar {

struct Constraint::Shared {
  Shared(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> i)
      : matcher(std::move(g)), index(std::move(i)) {}
  Matcher matcher;
  std::shared_ptr<const TokenIndex> index;
  // Masks by state: a JSON grammar comes back to the same states (inside a string, after a
  // comma at one depth), so most steps that need a mask find it here. Bounded: cleared when
  // full (64 masks of a 151,936-token vocabulary are 1.2 MB).
  static constexpr size_t kMaxMasks = 64;
  std::unordered_map<StateId, std::vector<uint64_t>> masks;

  const std::vector<uint64_t>& mask(StateId s) {
    auto it = masks.find(s);
    if (it != masks.end()) return it->second;
    if (masks.size() >= kMaxMasks) masks.clear();
    std::vector<uint64_t> bits;
    index->mask(matcher, s, bits);
    return masks.emplace(s, std::move(bits)).first->second;
  }
};

Constraint::Constraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> index)
    : sh_(std::make_shared<Shared>(std::move(g), std::move(index))), state_(sh_->matcher.start()) {}

std::unique_ptr<Constraint> Constraint::fork() const {
  return std::unique_ptr<Constraint>(new Constraint(sh_, sh_->matcher.start()));
}

bool Constraint::allows(int32_t token) {
  return sh_->index->allows(sh_->matcher, state_, token);
}

bool Constraint::apply(std::span<float> logits) {
  const std::vector<uint64_t>& bits = sh_->mask(state_);
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
  return sh_->mask(state_).data();
}

void Constraint::accept(int32_t token) {
  if (sh_->index->is_eog(token)) return;  // the end: nothing follows
  const StateId t = sh_->matcher.step(state_, sh_->index->piece(token));
  if (t == kDead)
    throw Error("grammar: token " + std::to_string(token) + " does not continue the grammar");
  state_ = t;
}

bool Constraint::accepting() const {
  return sh_->matcher.accepting(state_);
}

}  // namespace lynx::grammar
