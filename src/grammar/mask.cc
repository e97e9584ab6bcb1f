// The token mask of a matcher state (lynx/grammar.h, TokenIndex::mask).
//
// Inside a JSON string every stack top either takes all of the content class
// [^"\\\x00-\x1F] or none of it, so any n content characters lead to the same state: the
// n-th of the run. Most of a vocabulary is tokens made only of content characters, and the
// trie walk visited all of them for every new state (each character position of char{0,24}
// is a new state, so the per-state mask cache never helped). Here such a token is decided by
// its number of code points alone (one bit set per number), and any other token by stepping
// what follows its leading run from the run's state. Exactness rests on the state being
// uniform over the class at every step of the run, checked below; the mask equals
// mask_walk() and allows() (tests/grammar/mask_test.cc); the figures are in
// docs/benchmarks.md "Structured output".
#include <algorithm>

#include "lynx/grammar.h"

namespace lynx::grammar {

namespace {

// A smaller class rarely covers many tokens, and a group costs a pass over the vocabulary.
constexpr uint64_t kMinRunSet = 128;

uint64_t n_code_points(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  uint64_t n = 0;
  for (const auto& [a, b] : ranges) n += uint64_t(b) - a + 1;
  return n;
}

bool in_ranges(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, uint32_t cp) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), std::pair<uint32_t, uint32_t>(cp, ~0u));
  return it != ranges.begin() && std::prev(it)->second >= cp;
}

// The run of code points in `ranges` that `bytes` starts with, at most `cap` of them, as
// complete, valid UTF-8 by the matcher's rules (no overlong forms, no surrogates, at most
// 0x10FFFF): its number of code points and its bytes.
std::pair<int, size_t> leading_run(std::string_view bytes,
                                   const std::vector<std::pair<uint32_t, uint32_t>>& ranges,
                                   int cap) {
  int n = 0;
  size_t i = 0;
  while (i < bytes.size() && n < cap) {
    const auto b = uint8_t(bytes[i]);
    uint32_t cp, len;
    if (b < 0x80) {
      cp = b, len = 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
      cp = b & 0x1F, len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      cp = b & 0x0F, len = 3;
    } else if (b >= 0xF0 && b <= 0xF4) {
      cp = b & 0x07, len = 4;
    } else {
      break;
    }
    if (i + len > bytes.size()) break;
    bool ok = true;
    for (uint32_t k = 1; k < len; ++k) {
      const auto c = uint8_t(bytes[i + k]);
      ok = ok && (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t min_cp = len == 1 ? 0 : len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (!ok || cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) break;
    if (!in_ranges(ranges, cp)) break;
    i += len;
    ++n;
  }
  return {n, i};
}

// Whether `bytes` is the start of one UTF-8 character (a lead byte and fewer continuation
// bytes than it announces) that some code point in `ranges` completes, by the matcher's rules
// (the smallest code point of its length, at most 0x10FFFF, no surrogate).
bool opens_a_code_point_in(std::string_view bytes,
                           const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  if (bytes.empty()) return false;
  const auto b = uint8_t(bytes[0]);
  uint32_t value, len;
  if (b >= 0xC2 && b <= 0xDF) {
    value = b & 0x1F, len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    value = b & 0x0F, len = 3;
  } else if (b >= 0xF0 && b <= 0xF4) {
    value = b & 0x07, len = 4;
  } else {
    return false;
  }
  if (bytes.size() >= len) return false;
  for (size_t k = 1; k < bytes.size(); ++k) {
    const auto c = uint8_t(bytes[k]);
    if ((c & 0xC0) != 0x80) return false;
    value = (value << 6) | (c & 0x3F);
  }
  const uint32_t left = len - uint32_t(bytes.size());
  const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  const uint32_t lo = std::max(value << (6 * left), min_cp);
  const uint32_t hi = std::min((value << (6 * left)) | ((1u << (6 * left)) - 1), 0x10FFFFu);
  for (const auto& [a, z] : ranges) {
    const uint32_t from = std::max(a, lo), to = std::min(z, hi);
    if (from > to) continue;
    if (from < 0xD800 || to > 0xDFFF) return true;  // not surrogates only
  }
  return false;
}

// One code point of the ranges that UTF-8 can encode (not a surrogate), as UTF-8; empty when
// there is none.
std::string some_code_point(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  for (auto [a, b] : ranges) {
    if (a >= 0xD800 && a <= 0xDFFF) a = 0xE000;
    if (a > b || a > 0x10FFFF) continue;
    std::string out;
    if (a < 0x80) {
      out += char(a);
    } else if (a < 0x800) {
      out += char(0xC0 | (a >> 6));
      out += char(0x80 | (a & 0x3F));
    } else if (a < 0x10000) {
      out += char(0xE0 | (a >> 12));
      out += char(0x80 | ((a >> 6) & 0x3F));
      out += char(0x80 | (a & 0x3F));
    } else {
      out += char(0xF0 | (a >> 18));
      out += char(0x80 | ((a >> 12) & 0x3F));
      out += char(0x80 | ((a >> 6) & 0x3F));
      out += char(0x80 | (a & 0x3F));
    }
    return out;
  }
  return {};
}

}  // namespace

std::shared_ptr<const TokenIndex::RunGroup> TokenIndex::run_group(const CharSet& c) const {
  auto set = c.positive();
  std::lock_guard<std::mutex> lock(runs_mu_);
  for (const auto& r : runs_) {
    if (r->set == set) return r;
  }
  auto r = std::make_shared<RunGroup>();
  const size_t words = (pieces_.size() + 63) / 64;
  r->by_length.assign(size_t(kMaxRun) + 1, std::vector<uint64_t>(words, 0));
  for (size_t id = 0; id < pieces_.size(); ++id) {
    if (eog_[id] || pieces_[id].empty()) continue;
    const auto [n, bytes] = leading_run(pieces_[id], set, kMaxRun);
    if (bytes == pieces_[id].size()) {
      r->by_length[size_t(n)][id >> 6] |= uint64_t(1) << (id & 63);
    } else {
      const std::string_view rest = std::string_view(pieces_[id]).substr(bytes);
      r->rest.push_back(
          {int32_t(id), uint32_t(n), uint32_t(bytes), opens_a_code_point_in(rest, set)});
    }
  }
  for (size_t n = 1; n < r->by_length.size(); ++n) {
    for (size_t w = 0; w < words; ++w) r->by_length[n][w] |= r->by_length[n - 1][w];
  }
  std::stable_sort(r->rest.begin(), r->rest.end(),
                   [](const RunGroup::Rest& a, const RunGroup::Rest& b) { return a.run < b.run; });
  r->set = std::move(set);
  if (runs_.size() >= kMaxRunGroups) runs_.erase(runs_.begin());
  runs_.push_back(r);
  return r;
}

void TokenIndex::mask(Matcher& m, StateId s, std::vector<uint64_t>& allowed) const {
  allowed.assign((pieces_.size() + 63) / 64, 0);
  if (m.accepting(s)) {
    for (int32_t id : eog_ids_) allowed[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
  }
  if (s == kDead) return;
  std::vector<uint32_t> sets;
  m.top_sets(s, sets);
  for (uint32_t set : sets) {
    const CharSet& c = m.grammar().sets()[set];
    const auto ranges = c.positive();
    if (n_code_points(ranges) < kMinRunSet) continue;
    const std::string one = some_code_point(ranges);
    if (one.empty()) continue;
    // Follow the run: from a state uniform over C, every code point of C leads to the same
    // state, so `one` stands for all of them. run[n]: the state after n code points of C;
    // `alive` of them can follow s.
    StateId run[kMaxRun + 1];
    run[0] = s;
    int alive = 0;
    bool uniform = true;
    while (alive < kMaxRun) {
      if (!m.uniform(run[alive], c)) {
        uniform = false;
        break;
      }
      const StateId t = m.step(run[alive], one);
      if (t == kDead) break;
      run[++alive] = t;
    }
    if (!uniform) continue;
    const auto group = run_group(c);
    const std::vector<uint64_t>& whole = group->by_length[size_t(alive)];
    for (size_t w = 0; w < allowed.size(); ++w) allowed[w] |= whole[w];
    for (const RunGroup::Rest& r : group->rest) {
      if (int(r.run) > alive) break;  // the run itself dies
      // Within the run a top takes every code point of C, so one that the rest may become:
      // the matcher keeps it (an incomplete character), without making a state per prefix.
      if (r.open_in_set && int(r.run) < alive) {
        allowed[size_t(r.id) >> 6] |= uint64_t(1) << (r.id & 63);
        continue;
      }
      const std::string_view rest = std::string_view(pieces_[size_t(r.id)]).substr(r.offset);
      if (m.step(run[r.run], rest) != kDead) {
        allowed[size_t(r.id) >> 6] |= uint64_t(1) << (r.id & 63);
      }
    }
    return;
  }
  mask_walk(m, s, allowed);
}

}  // namespace lynx::grammar
