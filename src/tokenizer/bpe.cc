// Byte-level BPE (GPT-2 style) merging of one pre-tokenized word, by merge rank.
//
// Symbols are interned integers rather than strings: a merge "A B" (rank i) becomes the pair
// (id(A), id(B)) -> (i, id(AB)). A word starts as one symbol per byte (the byte's encoded
// code point); the lowest-rank adjacent pair is merged first (ties: leftmost), with a
// priority queue and lazy invalidation as in llama.cpp's llm_tokenizer_bpe_session. Pair
// equality by id is equivalent to its string check, since texts and ids correspond 1:1.
#include <queue>

#include "lynx/error.h"
#include "tokenizer/impl.h"

namespace lynx::tok {

BpeModel::BpeModel(const std::vector<std::string>& merges, const TokenMap& token_to_id,
                   int32_t n_vocab)
    : n_vocab_(n_vocab) {
  merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    // Split at the first space after position 0, as llama.cpp does (a merge operand never
    // starts with a space: spaces are encoded as U+0120).
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) continue;  // malformed entry: llama.cpp ranks ("","") — inert
    const std::string a = m.substr(0, sp);
    const std::string b = m.substr(sp + 1);
    const int32_t ia = intern(a, token_to_id);
    const int32_t ib = intern(b, token_to_id);
    const int32_t iab = intern(a + b, token_to_id);
    // First rank wins for a repeated pair (llama.cpp's map emplace).
    merges_.emplace(key(ia, ib), Merge{static_cast<int32_t>(rank), iab});
  }
  for (int b = 0; b < 256; ++b) {
    const std::string& s = bytes_.byte_to_utf8[b];
    auto it = token_to_id.find(s);
    if (it != token_to_id.end()) {
      byte_sym_[b] = it->second;
    } else {
      auto e = extra_ids_.find(s);
      byte_sym_[b] = e == extra_ids_.end() ? -1 : e->second;
    }
  }
}

int32_t BpeModel::intern(const std::string& s, const TokenMap& token_to_id) {
  auto it = token_to_id.find(s);
  if (it != token_to_id.end()) return it->second;
  auto [e, inserted] = extra_ids_.emplace(s, n_vocab_ + static_cast<int32_t>(extra_.size()));
  if (inserted) extra_.push_back(s);
  return e->second;
}

// A final symbol that is not a token: llama.cpp looks up each byte of its encoded text as a
// one-byte token and drops the bytes that are none (only possible with inconsistent
// vocabularies; every byte-level vocabulary has all 256 byte tokens).
void BpeModel::emit_symbol(int32_t sym, uint8_t byte, const TokenMap& token_to_id,
                           std::vector<int32_t>* out) const {
  if (sym >= 0 && sym < n_vocab_) {
    out->push_back(sym);
    return;
  }
  const std::string& text = sym >= 0 ? extra_[sym - n_vocab_] : bytes_.byte_to_utf8[byte];
  for (char c : text) {
    auto it = token_to_id.find(std::string_view(&c, 1));
    if (it != token_to_id.end()) out->push_back(it->second);
  }
}

namespace {

struct Node {
  int32_t sym;
  int32_t prev;
  int32_t next;
  bool alive;
};

struct Pair {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_sym;
  int32_t right_sym;
  int32_t result;
};

struct PairOrder {
  bool operator()(const Pair& a, const Pair& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void BpeModel::encode_word(std::string_view word, bool ignore_merges, const TokenMap& token_to_id,
                           std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges || word.size() == 1) {
    std::string enc;
    enc.reserve(word.size() * 2);
    for (char c : word) enc += bytes_.byte_to_utf8[static_cast<uint8_t>(c)];
    auto it = token_to_id.find(enc);
    if (it != token_to_id.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Node> nodes(n);
  for (int32_t i = 0; i < n; ++i) {
    nodes[i] = {byte_sym_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  }
  std::priority_queue<Pair, std::vector<Pair>, PairOrder> queue;
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const int32_t a = nodes[l].sym, b = nodes[r].sym;
    if (a < 0 || b < 0) return;
    auto it = merges_.find(key(a, b));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, l, r, a, b, it->second.result});
  };
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Node& l = nodes[p.left];
    Node& r = nodes[p.right];
    if (!l.alive || !r.alive || l.next != p.right || l.sym != p.left_sym || r.sym != p.right_sym) {
      continue;  // outdated
    }
    l.sym = p.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) nodes[r.next].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }
  for (int32_t i = 0; i != -1; i = nodes[i].next) {
    emit_symbol(nodes[i].sym, static_cast<uint8_t>(word[i]), token_to_id, out);
  }
}

}  // namespace lynx::tok
