// The matcher and the token index (lynx/grammar.h).
//
// A parse stack is a chain of nodes (symbol position, node below), interned so that equal
// stacks are one id and stacks that share their bottom share its nodes. The top of a stack in
// a state always points at a character set; a rule reference at the top is expanded into its
// alternatives when the stack is made (as llama.cpp's grammar stacks are). A reference that
// is the last symbol of its alternative pushes nothing (tail call), so right-recursive
// repetition keeps stacks bounded.
#include <algorithm>
#include <cstring>

#include "lynx/grammar.h"

namespace lynx::grammar {

namespace {
constexpr int kMaxExpandDepth = 4096;
constexpr size_t kMaxExpandWork = 1 << 20;
}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  states_.push_back({});  // kDead
  trans_.assign(256, kDead);
  State s;
  for (uint32_t a : g_->alternatives(g_->root())) expand(a, kNoNode, s.stacks, 0);
  std::sort(s.stacks.begin(), s.stacks.end());
  s.stacks.erase(std::unique(s.stacks.begin(), s.stacks.end()), s.stacks.end());
  start_ = state_ = intern(std::move(s));
}

uint32_t Matcher::node(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t(pos) << 32) | parent;
  auto [it, fresh] = node_ids_.try_emplace(key, uint32_t(nodes_.size()));
  if (fresh) {
    if (nodes_.size() >= g_->limits().max_nodes) {
      node_ids_.erase(it);  // no id without its node: the matcher stays usable
      throw Error("grammar: more than " + std::to_string(g_->limits().max_nodes) +
                  " parse stack nodes (the grammar nests too deeply for this output)");
    }
    nodes_.push_back({pos, parent});
  }
  return it->second;
}

void Matcher::expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out, int depth) {
  // Work and depth are bounded: an ambiguous grammar can reach the same stacks along
  // exponentially many paths.
  if (depth > kMaxExpandDepth || ++work_ > kMaxExpandWork) {
    throw Error("grammar: expanding the parse stacks took too long (an ambiguous grammar)");
  }
  const std::vector<Symbol>& sym = g_->symbols();
  for (;;) {
    const Symbol s = sym[pos];
    if (s.kind == Symbol::kEnd) {
      if (parent == kNoNode) {
        out.push_back(kAccept);
        return;
      }
      pos = nodes_[parent].pos;
      parent = nodes_[parent].parent;
      continue;
    }
    if (s.kind == Symbol::kChars) {
      out.push_back(node(pos, parent));
      if (out.size() > g_->limits().max_stacks * 4) {
        throw Error("grammar: more than " + std::to_string(g_->limits().max_stacks) +
                    " parse stacks at once (an ambiguous grammar)");
      }
      return;
    }
    const uint32_t cont = sym[pos + 1].kind == Symbol::kEnd ? parent : node(pos + 1, parent);
    for (uint32_t a : g_->alternatives(s.arg)) expand(a, cont, out, depth + 1);
    return;
  }
}

StateId Matcher::intern(State s) {
  if (s.stacks.empty()) return kDead;
  if (s.stacks.size() > g_->limits().max_stacks) {
    throw Error("grammar: more than " + std::to_string(g_->limits().max_stacks) +
                " parse stacks at once (an ambiguous grammar)");
  }
  std::string key(s.stacks.size() * 4 + 5, '\0');
  std::memcpy(key.data(), s.stacks.data(), s.stacks.size() * 4);
  std::memcpy(key.data() + s.stacks.size() * 4, &s.partial, 4);
  key.back() = char(s.remaining);
  auto [it, fresh] = state_ids_.try_emplace(std::move(key), StateId(states_.size()));
  if (fresh) {
    if (states_.size() >= g_->limits().max_states) {
      state_ids_.erase(it);  // no id without its state: the matcher stays usable
      throw Error("grammar: more than " + std::to_string(g_->limits().max_states) +
                  " matcher states");
    }
    states_.push_back(std::move(s));
    trans_.resize(states_.size() * 256, kUnknown);
  }
  return it->second;
}

bool Matcher::accepting(StateId s) const {
  const State& st = states_[s];
  return st.remaining == 0 && !st.stacks.empty() && st.stacks.back() == kAccept;
}

void Matcher::top_sets(StateId s, std::vector<uint32_t>& out) const {
  out.clear();
  const State& st = states_[s];
  if (st.remaining != 0) return;
  for (uint32_t id : st.stacks) {
    if (id == kAccept) continue;
    const uint32_t set = g_->symbols()[nodes_[id].pos].arg;
    if (std::find(out.begin(), out.end(), set) == out.end()) out.push_back(set);
  }
}

bool Matcher::uniform(StateId s, const CharSet& c) const {
  if (states_[s].remaining != 0) return false;
  std::vector<uint32_t> sets;
  top_sets(s, sets);
  for (uint32_t set : sets) {
    const CharSet& d = g_->sets()[set];
    if (!d.contains(c) && !d.disjoint(c)) return false;
  }
  return true;
}

bool Matcher::any_top_intersects(const State& st, uint32_t lo, uint32_t hi) const {
  for (uint32_t id : st.stacks) {
    if (id == kAccept) continue;
    const CharSet& cs = g_->sets()[g_->symbols()[nodes_[id].pos].arg];
    if (cs.intersects(lo, hi)) return true;
  }
  return false;
}

StateId Matcher::advance(StateId s, uint32_t cp) {
  State next;
  work_ = 0;
  const size_t n = states_[s].stacks.size();
  for (size_t k = 0; k < n; ++k) {
    const uint32_t id = states_[s].stacks[k];  // states_ does not grow in this loop
    if (id == kAccept) continue;
    const Node nd = nodes_[id];
    if (!g_->sets()[g_->symbols()[nd.pos].arg].matches(cp)) continue;
    expand(nd.pos + 1, nd.parent, next.stacks, 0);
  }
  std::sort(next.stacks.begin(), next.stacks.end());
  next.stacks.erase(std::unique(next.stacks.begin(), next.stacks.end()), next.stacks.end());
  return intern(std::move(next));
}

StateId Matcher::compute_step(StateId s, uint8_t byte) {
  // An incomplete character is kept as its bits so far, with its total length in bits 24-25.
  const uint32_t partial = states_[s].partial;
  const uint8_t remaining = states_[s].remaining;
  uint32_t value, len;
  uint8_t left;
  if (remaining == 0) {
    if (byte < 0x80) return advance(s, byte);
    // Lead bytes of 2-4 byte characters; C0, C1 (overlong) and F5-FF are never UTF-8.
    if (byte >= 0xC2 && byte <= 0xDF) {
      value = byte & 0x1F, left = 1;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      value = byte & 0x0F, left = 2;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      value = byte & 0x07, left = 3;
    } else {
      return kDead;
    }
    len = left + 1u;
  } else {
    if ((byte & 0xC0) != 0x80) return kDead;
    len = partial >> 24;
    value = ((partial & 0xFFFFFFu) << 6) | (byte & 0x3F);
    left = uint8_t(remaining - 1);
  }
  // Overlong forms (a code point below the smallest of its length) and surrogates are not
  // UTF-8 (RFC 3629): byte-level vocabularies hold tokens made of them.
  const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  if (left == 0) {
    if (value < min_cp || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return kDead;
    State plain;
    plain.stacks = states_[s].stacks;
    const StateId base = intern(std::move(plain));
    return advance(base, value);
  }
  // An incomplete character: alive while some stack can take a code point it may become.
  const uint32_t lo = std::max(value << (6 * left), min_cp);
  const uint32_t hi = std::min((value << (6 * left)) | ((1u << (6 * left)) - 1), 0x10FFFFu);
  if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return kDead;
  if (!any_top_intersects(states_[s], lo, hi)) return kDead;
  State st;
  st.stacks = states_[s].stacks;
  st.partial = value | (len << 24);
  st.remaining = left;
  return intern(std::move(st));
}

StateId Matcher::step(StateId s, uint8_t byte) {
  const StateId known = trans_[size_t(s) * 256 + byte];
  if (known != kUnknown) return known;
  const StateId t = compute_step(s, byte);
  trans_[size_t(s) * 256 + byte] = t;
  return t;
}

StateId Matcher::step(StateId s, std::string_view bytes) {
  for (char c : bytes) {
    s = step(s, uint8_t(c));
    if (s == kDead) return kDead;
  }
  return s;
}

bool Matcher::accept(std::string_view bytes) {
  const StateId t = step(state_, bytes);
  if (t == kDead) return false;
  state_ = t;
  return true;
}

// ---------------------------------------------------------------------------------------
// TokenIndex

TokenIndex::TokenIndex(std::vector<std::string> pieces, std::vector<bool> eog)
    : pieces_(std::move(pieces)), eog_(std::move(eog)) {
  eog_.resize(pieces_.size(), false);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (eog_[i]) {
      eog_ids_.push_back(int32_t(i));
    } else if (!pieces_[i].empty()) {
      ids.push_back(int32_t(i));
    }
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return pieces_[size_t(a)] < pieces_[size_t(b)] ||
           (pieces_[size_t(a)] == pieces_[size_t(b)] && a < b);
  });
  token_list_ = ids;
  // Breadth-first from sorted ranges: a node's tokens share its depth-byte prefix; those of
  // exactly that length come first in sorted order and end at the node; the rest group by
  // their next byte into contiguous children.
  struct Work {
    uint32_t node;
    size_t lo, hi, depth;
  };
  nodes_.push_back({});
  std::vector<Work> queue = {{0, 0, ids.size(), 0}};
  for (size_t q = 0; q < queue.size(); ++q) {
    const Work w = queue[q];
    size_t k = w.lo;
    while (k < w.hi && pieces_[size_t(ids[k])].size() == w.depth) ++k;
    if (k > w.lo) {
      nodes_[w.node].first_token = int32_t(w.lo);
      nodes_[w.node].n_tokens = uint32_t(k - w.lo);
    }
    const auto first = uint32_t(nodes_.size());
    uint32_t n = 0;
    while (k < w.hi) {
      const char b = pieces_[size_t(ids[k])][w.depth];
      size_t e = k;
      while (e < w.hi && pieces_[size_t(ids[e])][w.depth] == b) ++e;
      TrieNode child;
      child.byte = uint8_t(b);
      nodes_.push_back(child);
      queue.push_back({uint32_t(nodes_.size() - 1), k, e, w.depth + 1});
      ++n;
      k = e;
    }
    nodes_[w.node].first_child = first;
    nodes_[w.node].n_children = n;
  }
}

bool TokenIndex::allows(Matcher& m, StateId s, int32_t id) const {
  if (id < 0 || size_t(id) >= pieces_.size()) return false;
  if (eog_[size_t(id)]) return m.accepting(s);
  const std::string& p = pieces_[size_t(id)];
  return !p.empty() && m.step(s, p) != kDead;
}

void TokenIndex::mask_walk(Matcher& m, StateId s, std::vector<uint64_t>& allowed) const {
  allowed.assign((pieces_.size() + 63) / 64, 0);
  if (m.accepting(s)) {
    for (int32_t id : eog_ids_) allowed[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
  }
  if (s == kDead) return;
  auto set = [&](int32_t id) { allowed[size_t(id) >> 6] |= uint64_t(1) << (id & 63); };
  // Depth-first over the trie: a subtree whose prefix the grammar refuses is skipped whole,
  // and each node costs one (memoized) transition.
  std::vector<std::pair<uint32_t, StateId>> todo;
  const TrieNode& root = nodes_[0];
  for (uint32_t c = 0; c < root.n_children; ++c) todo.push_back({root.first_child + c, s});
  while (!todo.empty()) {
    const auto [n, from] = todo.back();
    todo.pop_back();
    const TrieNode& node = nodes_[n];
    const StateId t = m.step(from, node.byte);
    if (t == kDead) continue;
    for (uint32_t k = 0; k < node.n_tokens; ++k) set(token_list_[size_t(node.first_token) + k]);
    for (uint32_t c = 0; c < node.n_children; ++c) todo.push_back({node.first_child + c, t});
  }
}

}  // namespace lynx::grammar
