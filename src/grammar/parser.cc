// GBNF parser and compiler (lynx/grammar.h). The syntax is the one llama.cpp documents in
// grammars/README.md: `name ::= alternatives`, `|`, sequences, groups, string literals,
// character classes with ranges and `^`, `.`, postfix `*` `+` `?` `{m}` `{m,}` `{m,n}`
// `{,n}`, escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH, `#` comments. A rule ends at
// the end of its line unless the line ends inside parentheses or after `|` / `::=`.
#include <algorithm>
#include <map>

#include "lynx/grammar.h"

namespace lynx::grammar {

bool CharSet::matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) {
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  }
  return in != negated;
}

bool CharSet::intersects(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges) {
      if (a <= hi && b >= lo) return true;
    }
    return false;
  }
  // Negated: some code point of [lo, hi] lies outside every range. Ranges are sorted and
  // merged, so walk the gaps.
  uint32_t next = lo;
  for (const auto& [a, b] : ranges) {
    if (b < next) continue;
    if (a > next) return true;  // next itself is in a gap
    if (b >= hi) return false;
    next = b + 1;
  }
  return next <= hi;
}

std::vector<std::pair<uint32_t, uint32_t>> CharSet::positive() const {
  if (!negated) return ranges;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t next = 0;
  for (const auto& [a, b] : ranges) {
    if (a > next) out.push_back({next, a - 1});
    if (b >= 0x10FFFF) return out;
    next = std::max(next, b + 1);
  }
  out.push_back({next, 0x10FFFF});
  return out;
}

bool CharSet::contains(const CharSet& other) const {
  // Each range of `other` must lie inside one range of this set (merged: no range spans two).
  const auto mine = positive();
  for (const auto& [a, b] : other.positive()) {
    auto it = std::upper_bound(mine.begin(), mine.end(), std::pair<uint32_t, uint32_t>(a, ~0u));
    if (it == mine.begin() || std::prev(it)->second < b) return false;
  }
  return true;
}

bool CharSet::disjoint(const CharSet& other) const {
  for (const auto& [a, b] : other.positive()) {
    if (intersects(a, b)) return false;
  }
  return true;
}

namespace {

struct Item {  // one parsed symbol, with the rule name when it is a reference
  Symbol sym;
};

class Parser {
 public:
  Parser(std::string_view text, const Limits& limits) : s_(text), lim_(limits) {}

  void parse_all() {
    skip(true);
    while (i_ < s_.size()) {
      parse_rule();
      skip(true);
    }
  }

  // The rules, by id; names_[id] empty-defined flags in defined_.
  std::vector<std::vector<std::vector<Symbol>>> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;  // offset of the first reference (for the error)
  std::vector<CharSet> sets_;
  size_t n_symbols_ = 0;

  [[noreturn]] void fail(const std::string& what, size_t at) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error("grammar: " + what + " at line " + std::to_string(line) + ", column " +
                std::to_string(col));
  }

  uint32_t rule_id(const std::string& name, size_t at) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    return new_rule(name, at);
  }

 private:
  uint32_t new_rule(const std::string& name, size_t at) {
    if (rules_.size() >= lim_.max_rules) {
      fail("more than " + std::to_string(lim_.max_rules) + " rules", at);
    }
    const auto id = uint32_t(rules_.size());
    rules_.emplace_back();
    names_.push_back(name);
    defined_.push_back(false);
    first_use_.push_back(at);
    ids_[name] = id;
    return id;
  }
  uint32_t generated(const std::string& base, size_t at) {
    const uint32_t id = new_rule(base + "-" + std::to_string(rules_.size()), at);
    defined_[id] = true;
    return id;
  }

  static bool word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }
  char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  bool at_end() const { return i_ >= s_.size(); }

  // Spaces, tabs, comments; newlines too when `newlines`.
  void skip(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (c == '\n' && newlines) {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string name() {
    const size_t from = i_;
    while (i_ < s_.size() && word_char(s_[i_])) ++i_;
    if (i_ == from) fail("expected a rule name", from);
    return std::string(s_.substr(from, i_ - from));
  }

  void parse_rule() {
    const size_t at = i_;
    const std::string n = name();
    const uint32_t id = rule_id(n, at);
    if (defined_[id]) fail("rule '" + n + "' is defined twice", at);
    defined_[id] = true;
    skip(false);
    if (s_.substr(i_, 3) != "::=") fail("expected '::=' after rule name '" + n + "'", i_);
    i_ += 3;
    skip(true);
    rules_[id] = alternatives(n, 0);
    skip(false);
    if (!at_end() && peek() != '\n')
      fail("unexpected character '" + std::string(1, peek()) + "'", i_);
  }

  std::vector<std::vector<Symbol>> alternatives(const std::string& rule, int depth) {
    std::vector<std::vector<Symbol>> alts;
    alts.push_back(sequence(rule, depth));
    for (;;) {
      // A line that starts with '|' continues the rule (as well as a '|' ending the line).
      size_t save = i_;
      skip(true);
      if (peek() != '|') {
        i_ = save;
        break;
      }
      ++i_;
      skip(true);
      alts.push_back(sequence(rule, depth));
    }
    return alts;
  }

  void count(size_t n, size_t at) {
    n_symbols_ += n;
    if (n_symbols_ > lim_.max_symbols) {
      fail("more than " + std::to_string(lim_.max_symbols) + " symbols", at);
    }
  }

  uint32_t add_set(CharSet cs) {
    std::sort(cs.ranges.begin(), cs.ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : cs.ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    cs.ranges = std::move(merged);
    std::string key(cs.negated ? "^" : "");
    for (const auto& [a, b] : cs.ranges) key += std::to_string(a) + "-" + std::to_string(b) + ",";
    auto it = set_ids_.find(key);
    if (it != set_ids_.end()) return it->second;
    const auto id = uint32_t(sets_.size());
    sets_.push_back(std::move(cs));
    set_ids_[key] = id;
    return id;
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char c = peek();
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) fail("expected " + std::to_string(digits) + " hex digits", i_);
      v = v * 16 + uint32_t(d);
      ++i_;
    }
    return v;
  }

  // One character of a literal or class (UTF-8 decoded, escapes resolved).
  uint32_t character() {
    if (at_end()) fail("unexpected end of grammar", i_);
    const auto c = uint8_t(s_[i_]);
    if (c == '\\') {
      ++i_;
      const char e = peek();
      ++i_;
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return uint8_t(e);
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U': {
          const uint32_t v = hex(8);
          if (v > 0x10FFFF) fail("code point above U+10FFFF", i_);
          return v;
        }
        default:
          fail("unknown escape '\\" + std::string(1, e) + "'", i_ - 2);
      }
    }
    // UTF-8: the code point, invalid sequences refused (a grammar is text).
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i_ + size_t(len) > s_.size()) fail("invalid UTF-8", i_);
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; ++k) {
      const auto b = uint8_t(s_[i_ + size_t(k)]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8", i_);
      v = (v << 6) | (b & 0x3F);
    }
    i_ += size_t(len);
    return v;
  }

  int number() {
    const size_t from = i_;
    long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > lim_.max_repeat)
        fail("repetition count above " + std::to_string(lim_.max_repeat), from);
      ++i_;
    }
    return i_ == from ? -1 : int(v);
  }

  // Replaces the last item (symbols [from, end) of seq) by its repetition {lo, hi} (hi -1:
  // unbounded), as generated rules: X{m,n} = m copies of X, then n-m nested optionals
  // (opt_k ::= X opt_{k-1} | ""), or star ::= X star | "" when unbounded.
  void repeat(const std::string& rule, std::vector<Symbol>& seq, size_t from, int lo, int hi,
              size_t at) {
    if (from == seq.size()) fail("repetition without an item before it", at);
    Symbol x;
    if (seq.size() - from == 1) {
      x = seq.back();
    } else {
      const uint32_t r = generated(rule, at);
      rules_[r] = {std::vector<Symbol>(seq.begin() + long(from), seq.end())};
      x = {Symbol::kRule, r};
    }
    seq.resize(from);
    count(size_t(lo) + size_t(hi < 0 ? 2 : (hi - lo) * 2), at);
    for (int k = 0; k < lo; ++k) seq.push_back(x);
    if (hi < 0) {
      const uint32_t r = generated(rule, at);
      rules_[r] = {{x, {Symbol::kRule, r}}, {}};
      seq.push_back({Symbol::kRule, r});
    } else if (hi > lo) {
      uint32_t prev = 0;
      for (int k = 0; k < hi - lo; ++k) {
        const uint32_t r = generated(rule, at);
        if (k == 0) {
          rules_[r] = {{x}, {}};
        } else {
          rules_[r] = {{x, {Symbol::kRule, prev}}, {}};
        }
        prev = r;
      }
      seq.push_back({Symbol::kRule, prev});
    }
  }

  std::vector<Symbol> sequence(const std::string& rule, int depth) {
    std::vector<Symbol> seq;
    size_t last = seq.size();  // start of the last item
    const bool nested = depth > 0;
    for (;;) {
      skip(nested);
      const char c = peek();
      const size_t at = i_;
      if (at_end() || c == '|' || c == ')' || c == '\n') break;
      if (c == '"') {
        ++i_;
        last = seq.size();
        while (peek() != '"') {
          if (at_end() || peek() == '\n') fail("unterminated string literal", at);
          const uint32_t cp = character();
          seq.push_back({Symbol::kChars, add_set({{{cp, cp}}, false})});
          count(1, at);
        }
        ++i_;
      } else if (c == '[') {
        ++i_;
        CharSet cs;
        if (peek() == '^') {
          cs.negated = true;
          ++i_;
        }
        while (peek() != ']') {
          if (at_end() || peek() == '\n') fail("unterminated character class", at);
          const uint32_t a = character();
          uint32_t b = a;
          if (peek() == '-' && peek(1) != ']' && i_ + 1 < s_.size()) {
            ++i_;
            b = character();
            if (b < a) fail("character range with its end before its start", at);
          }
          cs.ranges.push_back({a, b});
        }
        ++i_;
        last = seq.size();
        seq.push_back({Symbol::kChars, add_set(std::move(cs))});
        count(1, at);
      } else if (c == '.') {
        ++i_;
        last = seq.size();
        seq.push_back({Symbol::kChars, add_set({{}, true})});
        count(1, at);
      } else if (c == '(') {
        if (depth + 1 > lim_.max_nesting) {
          fail("parentheses nested deeper than " + std::to_string(lim_.max_nesting), at);
        }
        ++i_;
        skip(true);
        const uint32_t r = generated(rule, at);
        auto alts = alternatives(rule, depth + 1);
        rules_[r] = std::move(alts);
        skip(true);
        if (peek() != ')') fail("expected ')'", i_);
        ++i_;
        last = seq.size();
        seq.push_back({Symbol::kRule, r});
        count(1, at);
      } else if (word_char(c)) {
        const std::string n = name();
        // A name followed by '::=' starts the next rule: the sequence ended (only reachable
        // inside parentheses, where newlines are skipped).
        size_t save = i_;
        skip(false);
        if (s_.substr(i_, 3) == "::=")
          fail("rule definition '" + n +
                   " ::=' inside a sequence (an unclosed '(' or a '|' ending the line before)",
               at);
        i_ = save;
        last = seq.size();
        seq.push_back({Symbol::kRule, rule_id(n, at)});
        count(1, at);
      } else if (c == '*' || c == '+' || c == '?') {
        ++i_;
        repeat(rule, seq, last, c == '+' ? 1 : 0, c == '?' ? 1 : -1, at);
      } else if (c == '{') {
        ++i_;
        skip(false);
        int lo = number();
        int hi;
        skip(false);
        if (peek() == ',') {
          ++i_;
          skip(false);
          hi = number();
          if (lo < 0) lo = 0;
        } else {
          if (lo < 0) fail("expected a number in '{}'", i_);
          hi = lo;
        }
        skip(false);
        if (peek() != '}') fail("expected '}'", i_);
        ++i_;
        if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m", at);
        repeat(rule, seq, last, lo, hi, at);
      } else {
        fail("unexpected character '" + std::string(1, c) + "'", at);
      }
    }
    return seq;
  }

  std::string_view s_;
  const Limits& lim_;
  size_t i_ = 0;
  std::map<std::string, uint32_t, std::less<>> ids_;
  std::map<std::string, uint32_t> set_ids_;
};

}  // namespace

struct Grammar::Builder {
  // Nullable rules, then left recursion (a cycle of rules each first, after nullable ones,
  // in an alternative of the one before) and rules that can never complete: both would make
  // the matcher loop or wait forever, so they are refused here.
  static void check(const Parser& p, uint32_t root) {
    const size_t n = p.rules_.size();
    std::vector<bool> nullable(n, false), productive(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        for (const auto& alt : p.rules_[r]) {
          bool all_null = true, all_prod = true;
          for (const Symbol& s : alt) {
            if (s.kind == Symbol::kChars) {
              all_null = false;
            } else {
              if (!nullable[s.arg]) all_null = false;
              if (!productive[s.arg]) all_prod = false;
            }
          }
          if (all_null && !nullable[r]) nullable[r] = changed = true;
          if (all_prod && !productive[r]) productive[r] = changed = true;
        }
      }
    }
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
      for (const auto& alt : p.rules_[r]) {
        for (const Symbol& s : alt) {
          if (s.kind == Symbol::kChars) break;
          left[r].push_back(s.arg);
          if (!nullable[s.arg]) break;
        }
      }
    }
    // Iterative DFS (a grammar may have 65k rules): 0 unvisited, 1 on the path, 2 done.
    std::vector<uint8_t> color(n, 0);
    std::vector<std::pair<uint32_t, size_t>> path;
    for (size_t s = 0; s < n; ++s) {
      if (color[s]) continue;
      path.push_back({uint32_t(s), 0});
      color[s] = 1;
      while (!path.empty()) {
        auto& [r, k] = path.back();
        if (k == left[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t t = left[r][k++];
        if (color[t] == 1) {
          throw Error("grammar: left recursion through rule '" + p.names_[t] +
                      "' (a rule reaches itself before reading a character)");
        }
        if (color[t] == 0) {
          color[t] = 1;
          path.push_back({t, 0});
        }
      }
    }
    for (size_t r = 0; r < n; ++r) {
      if (!productive[r]) {
        throw Error("grammar: rule '" + p.names_[r] +
                    "' can never complete (every alternative recurses)");
      }
    }
    (void)root;
  }
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text, std::string_view root,
                                              const Limits& limits) {
  if (text.size() > limits.max_text) {
    throw Error("grammar: longer than " + std::to_string(limits.max_text) + " bytes");
  }
  Parser p(text, limits);
  p.parse_all();
  for (size_t r = 0; r < p.rules_.size(); ++r) {
    if (!p.defined_[r]) p.fail("undefined rule '" + p.names_[r] + "'", p.first_use_[r]);
  }
  const auto it = std::find(p.names_.begin(), p.names_.end(), root);
  if (it == p.names_.end()) throw Error("grammar: no rule named '" + std::string(root) + "'");
  const auto root_id = uint32_t(it - p.names_.begin());
  Builder::check(p, root_id);
  auto g = std::shared_ptr<Grammar>(new Grammar());
  g->limits_ = limits;
  g->text_ = std::string(text);
  g->sets_ = std::move(p.sets_);
  g->names_ = std::move(p.names_);
  g->root_ = root_id;
  g->alts_.resize(p.rules_.size());
  for (size_t r = 0; r < p.rules_.size(); ++r) {
    for (const auto& alt : p.rules_[r]) {
      g->alts_[r].push_back(uint32_t(g->symbols_.size()));
      g->symbols_.insert(g->symbols_.end(), alt.begin(), alt.end());
      g->symbols_.push_back({Symbol::kEnd, 0});
    }
  }
  return g;
}

}  // namespace lynx::grammar
