// Constrained generation: GBNF grammars (the format of llama.cpp's grammars/README.md), a
// matcher that follows the set of parse stacks byte by byte, JSON Schema -> GBNF, and the
// per-vocabulary index that turns a matcher state into a token mask.
//
//   Grammar    parsed and compiled once (immutable, shared by the sequences that use it).
//              Repetitions ({m,n}, *, +, ?) and groups become generated rules; left
//              recursion and rules that can never complete are refused when compiling.
//   Matcher    one per sequence: the set of parse stacks after the bytes accepted so far, plus
//              an incomplete UTF-8 character. Stacks and stack sets are interned, and byte
//              transitions between sets are memoized, so walking token bytes again and again
//              (the mask) is mostly hash lookups.
//   TokenIndex one per vocabulary: the token byte strings in a trie, walked against a
//              matcher state to find the tokens that can continue it.
//
// Every limit (grammar size, nesting, stacks per set, states per matcher) gives a lynx::Error
// that says which limit, never a hang or unbounded memory.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lynx/error.h"
#include "lynx/sampler.h"

namespace lynx::grammar {

struct Limits {
  size_t max_text = 1 << 20;     // grammar text bytes
  size_t max_rules = 1 << 16;    // rules after desugaring
  size_t max_symbols = 1 << 21;  // symbols of all alternatives after desugaring
  int max_nesting = 64;          // parenthesis depth
  int max_repeat = 1000;         // m and n of {m,n}
  size_t max_stacks = 4096;      // parse stacks in one state (ambiguity)
  size_t max_states = 1 << 14;   // interned stack sets per matcher (1 KiB each)
  size_t max_nodes = 1 << 20;    // interned stack nodes per matcher
};

// A set of code points: sorted, merged inclusive ranges, possibly negated.
struct CharSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;
  bool matches(uint32_t cp) const;
  // Whether some code point in [lo, hi] matches (an incomplete UTF-8 character).
  bool intersects(uint32_t lo, uint32_t hi) const;
  // The matched code points as sorted, merged ranges (negation resolved over 0..0x10FFFF).
  std::vector<std::pair<uint32_t, uint32_t>> positive() const;
  // Whether every code point of `other` matches / none does.
  bool contains(const CharSet& other) const;
  bool disjoint(const CharSet& other) const;
};

// One symbol of an alternative. Alternatives are stored back to back, each ended by kEnd.
struct Symbol {
  enum Kind : uint8_t { kEnd, kChars, kRule };
  Kind kind = kEnd;
  uint32_t arg = 0;  // kChars: index in sets; kRule: rule id
};

class Grammar {
 public:
  // Parses GBNF text; `root` names the start rule. Throws lynx::Error "grammar: ... at line
  // L, column C" for a syntax error, an undefined rule, left recursion, a limit.
  static std::shared_ptr<const Grammar> parse(std::string_view text, std::string_view root = "root",
                                              const Limits& limits = {});

  const std::vector<Symbol>& symbols() const { return symbols_; }
  const std::vector<CharSet>& sets() const { return sets_; }
  // Start positions (in symbols()) of each alternative of a rule.
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return alts_[rule]; }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
  size_t n_rules() const { return alts_.size(); }
  uint32_t root() const { return root_; }
  const Limits& limits() const { return limits_; }
  // The GBNF text it was parsed from (ConstraintCache keys compiled grammars by it).
  const std::string& text() const { return text_; }

  struct Builder;  // the parser's output form (grammar.cc)

 private:
  Grammar() = default;
  std::vector<Symbol> symbols_;
  std::vector<CharSet> sets_;
  std::vector<std::vector<uint32_t>> alts_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
  Limits limits_;
  std::string text_;
};

// Matcher state: an interned stack set with an incomplete UTF-8 character. 0 is the dead
// state (no stack can continue).
using StateId = uint32_t;
inline constexpr StateId kDead = 0;

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);

  StateId state() const { return state_; }
  void set_state(StateId s) { state_ = s; }
  StateId start() const { return start_; }
  // The state after `byte` from `s` (memoized); kDead when no stack can take it.
  StateId step(StateId s, uint8_t byte);
  // The state after the bytes, kDead as soon as one is refused.
  StateId step(StateId s, std::string_view bytes);
  // Whether the input so far is a complete sentence of the grammar.
  bool accepting(StateId s) const;
  // Accepts bytes into the current state; false (state unchanged) when refused.
  bool accept(std::string_view bytes);
  bool accepting() const { return accepting(state_); }
  bool dead() const { return state_ == kDead; }
  // The distinct character sets (indices in grammar().sets()) at the tops of the stacks of
  // `s`; none when `s` holds an incomplete UTF-8 character.
  void top_sets(StateId s, std::vector<uint32_t>& out) const;
  // Whether every stack top of `s` takes all code points of `c` or none of them, so that
  // any code point of `c` leads from `s` to the same state. False for an incomplete UTF-8
  // character.
  bool uniform(StateId s, const CharSet& c) const;

  size_t n_states() const { return states_.size(); }
  size_t n_nodes() const { return nodes_.size(); }
  const Grammar& grammar() const { return *g_; }

 private:
  struct Node {
    uint32_t pos;     // symbol position (never kEnd)
    uint32_t parent;  // node below, kNoNode at the bottom
  };
  struct State {
    std::vector<uint32_t> stacks;  // sorted node ids; kAccept = the empty stack
    uint32_t partial = 0;          // bits of an incomplete UTF-8 character
    uint8_t remaining = 0;         // continuation bytes it still needs (0: none)
  };
  static constexpr uint32_t kNoNode = 0xffffffffu;
  static constexpr uint32_t kAccept = 0xfffffffeu;

  uint32_t node(uint32_t pos, uint32_t parent);
  // Adds the stacks reached from symbol `pos` with `parent` below it, expanding rules.
  void expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out, int depth);
  StateId intern(State s);
  StateId advance(StateId s, uint32_t cp);  // a complete code point
  StateId compute_step(StateId s, uint8_t byte);
  bool any_top_intersects(const State& st, uint32_t lo, uint32_t hi) const;

  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> node_ids_;
  std::vector<State> states_;
  std::unordered_map<std::string, StateId> state_ids_;
  // Memoized transitions, 256 per state (kUnknown until computed): the mask's trie walk
  // does one of these loads per trie node.
  static constexpr StateId kUnknown = 0xffffffffu;
  std::vector<StateId> trans_;
  size_t work_ = 0;  // expand() calls of the current transition
  StateId start_ = kDead, state_ = kDead;
};

// The token byte strings of a vocabulary in a trie (built once per vocabulary, shared).
class TokenIndex {
 public:
  // pieces[id]: the bytes token id stands for; eog[id]: an end-of-generation token; tokens
  // with no bytes that are not eog (control, unused) are never allowed.
  TokenIndex(std::vector<std::string> pieces, std::vector<bool> eog);
  int n_vocab() const { return int(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  bool is_eog(int32_t id) const { return eog_[size_t(id)]; }

  // Whether token `id` can follow state `s` (eog: only when `s` is accepting).
  bool allows(Matcher& m, StateId s, int32_t id) const;
  // Bit id of `allowed` (64 tokens per word) = allows(m, s, id), for every token. Where the
  // state is uniform over a large character set C along a run of code points (the content
  // of a JSON string, bounded by maxLength or not), a token is a run of n code points of C
  // and a rest: the run leads to the n-th state of the run whatever its code points, so the
  // tokens without a rest are decided by n alone (a bit set per n) and the others by
  // stepping their rest from that state (mask.cc, docs/benchmarks.md "Structured output").
  // Otherwise one walk of the trie.
  void mask(Matcher& m, StateId s, std::vector<uint64_t>& allowed) const;
  // The same by one walk of the whole trie: the reference the tests hold mask() to.
  void mask_walk(Matcher& m, StateId s, std::vector<uint64_t>& allowed) const;
  size_t n_nodes() const { return nodes_.size(); }
  // Longest run of code points decided by length (a longer one is a run of kMaxRun and a rest).
  static constexpr int kMaxRun = 32;

 private:
  struct TrieNode {
    uint32_t first_child = 0, n_children = 0;  // children are contiguous, sorted by byte
    uint8_t byte = 0;
    int32_t first_token = -1;  // tokens ending here: token_list_[first_token..+n_tokens)
    uint32_t n_tokens = 0;
  };
  std::vector<std::string> pieces_;
  std::vector<bool> eog_;
  std::vector<TrieNode> nodes_;  // nodes_[0]: the root
  std::vector<int32_t> token_list_;
  std::vector<int32_t> eog_ids_;

  // The tokens split for one character set C: by_length[n] has those made of 1..n code
  // points of C (complete, valid UTF-8; n <= kMaxRun); rest the others, by the length of
  // the run of C they start with (capped at kMaxRun), with the offset of what follows it.
  struct RunGroup {
    struct Rest {
      int32_t id;
      uint32_t run;     // code points of C first
      uint32_t offset;  // bytes of the run
      // The rest is the start of one character that some code point of C completes: it
      // follows wherever a code point of C can (no state is made for it).
      bool open_in_set;
    };
    std::vector<std::pair<uint32_t, uint32_t>> set;  // C, positive ranges (the cache key)
    std::vector<std::vector<uint64_t>> by_length;
    std::vector<Rest> rest;  // sorted by run
  };
  std::shared_ptr<const RunGroup> run_group(const CharSet& c) const;
  // Built on first use per character set and kept (a few sets per grammar: the string
  // content class). Guarded: one index serves the requests of every scheduler thread.
  static constexpr size_t kMaxRunGroups = 8;
  mutable std::mutex runs_mu_;
  mutable std::vector<std::shared_ptr<const RunGroup>> runs_;
};

// The constraint of one sequence for the sampler (lynx/sampler.h): a state in a matcher
// that other sequences may share (with its transitions and the masks computed so far, cached
// per state), so n choices, repeated states and requests with the same grammar
// (ConstraintCache) cost one trie walk per state. The shared part is guarded by a mutex; a
// Constraint itself belongs to one sequence, sampled from one thread at a time.
class Constraint final : public TokenConstraint {
 public:
  Constraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> index);
  ~Constraint() override;
  // Another sequence of the same grammar, at the start, sharing the matcher and masks.
  std::unique_ptr<Constraint> fork() const;
  bool allows(int32_t token) override;
  bool apply(std::span<float> logits) override;
  // Valid until this constraint's next mask_bits() or apply() (the constraint holds the mask,
  // whatever the shared cache evicts meanwhile).
  const uint64_t* mask_bits(size_t& n_tokens) override;
  void accept(int32_t token) override;
  bool accepting() const;

 private:
  friend class ConstraintCache;
  struct Shared;
  Constraint(std::shared_ptr<Shared> sh, StateId s);
  std::shared_ptr<Shared> sh_;
  StateId state_;
  std::shared_ptr<const std::vector<uint64_t>> mask_;  // the last mask handed out
};

// Compiled grammars shared between requests: one matcher and per-state mask cache per
// (GBNF text, start rule, limits, token index), handed to every request with the same
// grammar, so that the states and masks one request made serve the next (a server sees the
// same json_schema again and again). Thread-safe. The tokens picked are the same as with a
// Constraint of its own: a mask is a function of the state's parse stacks, not of the matcher
// that interned them. Bounded: past max_entries the least recently used grammar is dropped
// (requests still on it keep it alive until they end), and a matcher that has made a quarter
// of its state or node limit, or reached a limit, is retired: the next request starts a new
// one, so the limits still bound one output's matcher to a small multiple of what it made.
class ConstraintCache {
 public:
  explicit ConstraintCache(size_t max_entries = 16);
  ~ConstraintCache();
  // A constraint at the start of `g` over `index`, sharing with the other constraints this
  // cache gave for a grammar of the same text and the same index.
  std::unique_ptr<Constraint> get(const std::shared_ptr<const Grammar>& g,
                                  const std::shared_ptr<const TokenIndex>& index);
  struct Stats {
    size_t entries = 0, hits = 0, misses = 0, evicted = 0, retired = 0;
  };
  Stats stats() const;

 private:
  struct Entry;
  const size_t max_entries_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;  // most recently used last
  Stats stats_;
};

// JSON Schema -> GBNF (the subset structured output needs: docs/serving.md, "Structured
// output"). Throws lynx::Error naming the schema location for an unsupported keyword, a bad
// $ref, or a limit (nesting, enum size, repeat counts).
std::string schema_to_gbnf(std::string_view schema_json, const Limits& limits = {});
// The grammar of any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();
// For grammars that combine several schemas (tool calls: one per tool): the schema's rules
// alone, every rule name starting with `prefix` and the start rule named prefix + "root",
// referring to the shared rules of json_primitives_gbnf() (value, object, array, string,
// char, uesc, number, integer, boolean, null, space), which the combined grammar holds once.
std::string schema_rules_gbnf(std::string_view schema_json, std::string_view prefix,
                              const Limits& limits = {});
std::string json_primitives_gbnf();

}  // namespace lynx::grammar
