// SentencePiece-style tokenization as llama.cpp's llm_tokenizer_spm does it: split into UTF-8
// characters (by lead byte, unvalidated), then repeatedly merge the adjacent pair whose
// concatenation is a vocabulary token with the highest score (ties: leftmost first). A
// priority queue with lazy invalidation keeps this O(n log n).
//
// Invalid UTF-8 bytes are single symbols (see below). llama.cpp also keeps a reverse-merge map to
// re-split a final symbol that is not a token; that never triggers: merged symbols are tokens by
// construction, so only single characters can miss, and those fall back to byte tokens directly.
#include <algorithm>

#include "lynx/error.h"
#include "tokenizer/impl.h"

namespace lynx::tok {
namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t off;  // into the text
  uint32_t n;    // bytes; 0 once merged away
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;
};

struct BigramOrder {
  // "less" for a max-heap: lower score is worse; on equal score the larger left index is.
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// Buffers reused across the word runs of one call.
struct Scratch {
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
};

void spm_encode_run(const SpmView& v, std::string_view text, Scratch& scratch,
                    std::vector<int32_t>* out) {
  std::vector<Symbol>& sym = scratch.sym;
  sym.clear();
  for (size_t off = 0; off < text.size();) {
    // llama.cpp takes the length from the lead byte alone; on invalid UTF-8 that swallows
    // the next character (often an escaped space), which then decodes as bytes. Splitting
    // invalid bytes one by one gives the same symbols on valid text and stays lossless.
    uint32_t cp;
    const int dec =
        utf8_decode(reinterpret_cast<const uint8_t*>(text.data()) + off, text.size() - off, &cp);
    const size_t len = dec > 0 ? static_cast<size_t>(dec) : 1;
    const auto idx = static_cast<int32_t>(sym.size());
    sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, static_cast<uint32_t>(off),
                   static_cast<uint32_t>(len)});
    off += len;
  }

  std::vector<Bigram>& heap = scratch.heap;  // max-heap under BigramOrder
  heap.clear();
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    // Adjacent symbols are adjacent in the text, so the pair is one contiguous view.
    const std::string_view pair = text.substr(sym[l].off, sym[l].n + sym[r].n);
    auto it = v.token_to_id->find(pair);
    if (it == v.token_to_id->end()) return;
    const float score = v.scores->empty() ? 0.f : (*v.scores)[it->second];
    heap.push_back({score, l, r, static_cast<uint32_t>(pair.size())});
    std::push_heap(heap.begin(), heap.end(), BigramOrder{});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramOrder{});
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    // Symbols only grow, so a size mismatch means the pair changed since it was queued.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int32_t i = 0; i != -1; i = sym[i].next) {
    const Symbol& s = sym[i];
    const std::string_view piece = text.substr(s.off, s.n);
    auto it = v.token_to_id->find(piece);
    if (it != v.token_to_id->end()) {
      out->push_back(it->second);
      continue;
    }
    for (char c : piece) {
      const int32_t id = (*v.byte_token)[static_cast<uint8_t>(c)];
      if (id >= 0) {
        out->push_back(id);
      } else if (v.unk >= 0) {
        out->push_back(v.unk);
      } else {
        throw Error("tokenizer: byte " + std::to_string(static_cast<uint8_t>(c)) +
                    " has no <0xXX> token and the vocabulary has no unknown token");
      }
    }
  }
}

}  // namespace

void spm_encode(const SpmView& v, std::string_view text, std::vector<int32_t>* out) {
  // Cut before every escaped space whose preceding character never precedes one inside a
  // token: no merged symbol (always a token) can span such a cut.
  const std::string_view space = "\xE2\x96\x81";
  Scratch scratch;
  size_t start = 0;
  for (size_t p = text.find(space, 1); p != std::string_view::npos; p = text.find(space, p + 1)) {
    if ((*v.joins_space)[static_cast<uint8_t>(text[p - 1])]) continue;
    spm_encode_run(v, text.substr(start, p - start), scratch, out);
    start = p;
  }
  spm_encode_run(v, text.substr(start), scratch, out);
}

}  // namespace lynx::tok
