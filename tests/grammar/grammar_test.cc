// GBNF parser and matcher (lynx/grammar.h): valid grammars, errors with their position,
// acceptance byte by byte (UTF-8 included), and adversarial grammars that must end in a clear
// error.
#include <gtest/gtest.h>

#include <string>

#include "lynx/grammar.h"

namespace lynx::grammar {
namespace {

std::shared_ptr<const Grammar> G(const std::string& text) {
  return Grammar::parse(text);
}

// Whether the whole string is a sentence; prefix: whether it can still become one.
bool matches(const std::string& grammar, const std::string& s, bool* prefix = nullptr) {
  Matcher m(G(grammar));
  const StateId t = m.step(m.start(), s);
  if (prefix) *prefix = t != kDead;
  return t != kDead && m.accepting(t);
}

std::string error_of(const std::string& text, const Limits& lim = {}) {
  try {
    Grammar::parse(text, "root", lim);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GrammarParse, SyntaxOfLlamaCppGrammars) {
  const std::string g = R"(# a comment line
root ::= greeting ( ", " name )? "!"   # trailing comment
greeting ::= "hello" | "hi" |
  "hey"
name ::= [A-Z] [a-z]* digits{0,2}
digits ::= [0-9]
)";
  EXPECT_TRUE(matches(g, "hello!"));
  EXPECT_TRUE(matches(g, "hey, Bob!"));
  EXPECT_TRUE(matches(g, "hi, Al42!"));
  EXPECT_FALSE(matches(g, "hi, Al423!"));
  EXPECT_FALSE(matches(g, "hi, al!"));
  bool prefix = false;
  EXPECT_FALSE(matches(g, "hey, B", &prefix));
  EXPECT_TRUE(prefix);
  EXPECT_FALSE(matches(g, "hex", &prefix));
  EXPECT_FALSE(prefix);
}

TEST(GrammarParse, RepetitionForms) {
  EXPECT_TRUE(matches("root ::= \"a\"{3}", "aaa"));
  EXPECT_FALSE(matches("root ::= \"a\"{3}", "aa"));
  EXPECT_FALSE(matches("root ::= \"a\"{3}", "aaaa"));
  EXPECT_TRUE(matches("root ::= \"a\"{2,}", "aaaaaaa"));
  EXPECT_FALSE(matches("root ::= \"a\"{2,}", "a"));
  EXPECT_TRUE(matches("root ::= \"ab\"{,2}", ""));
  EXPECT_TRUE(matches("root ::= \"ab\"{,2}", "abab"));
  EXPECT_FALSE(matches("root ::= \"ab\"{,2}", "ababab"));
  EXPECT_TRUE(matches("root ::= (\"x\" | \"yz\")+ \"!\"", "xyzx!"));
  EXPECT_FALSE(matches("root ::= (\"x\" | \"yz\")+ \"!\"", "!"));
  EXPECT_TRUE(matches("root ::= \"a\"* \"b\"?", ""));
}

TEST(GrammarParse, CharClassesEscapesAndAny) {
  EXPECT_TRUE(matches(R"(root ::= [^"\\]+)", "abc def"));
  EXPECT_FALSE(matches(R"(root ::= [^"\\]+)", "ab\"c"));
  EXPECT_TRUE(matches(R"(root ::= "\x41\u00e9\n\t\"\\")", "A\xc3\xa9\n\t\"\\"));
  EXPECT_TRUE(matches(R"(root ::= [a-c0-2\-]{4})", "a-2c"));
  EXPECT_TRUE(matches(R"(root ::= . . .)", "x\xe2\x82\xac!"));  // '.' is a code point
  EXPECT_TRUE(matches(R"(root ::= [\U0001F600-\U0001F64F])", "\xf0\x9f\x98\x80"));
}

TEST(GrammarParse, ErrorsSayWhatAndWhere) {
  EXPECT_NE(error_of("root ::= \"abc").find("unterminated string literal at line 1, column 10"),
            std::string::npos)
      << error_of("root ::= \"abc");
  EXPECT_NE(error_of("root ::= a\n").find("undefined rule 'a' at line 1, column 10"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= [a-").find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"\n").find("expected ')'"), std::string::npos);
  EXPECT_NE(error_of("root = \"a\"").find("expected '::='"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(error_of("root ::= [z-a]").find("end before its start"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("defined twice at line 2"),
            std::string::npos);
  EXPECT_NE(error_of("start ::= \"a\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= *").find("repetition without an item"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" @").find("unexpected character '@' at line 1, column 14"),
            std::string::npos);
}

TEST(GrammarParse, LeftRecursionAndRulesThatNeverEnd) {
  EXPECT_NE(error_of("root ::= root \"a\" | \"a\"").find("left recursion"), std::string::npos);
  // Through a nullable rule and a group.
  EXPECT_NE(
      error_of("root ::= e? (x \"b\")\ne ::= \"\"\nx ::= root | \"c\"").find("left recursion"),
      std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" x\nx ::= \"b\" x").find("can never complete"),
            std::string::npos);
  // Right recursion is fine.
  EXPECT_TRUE(matches("root ::= \"a\" root | \"b\"", "aaab"));
}

TEST(GrammarLimits, AdversarialGrammarsGiveAnError) {
  // Deep parentheses: a nesting limit, not a stack overflow.
  std::string deep = "root ::= " + std::string(10000, '(') + "\"a\"" + std::string(10000, ')');
  EXPECT_NE(error_of(deep).find("nested deeper"), std::string::npos);
  // Huge repetition counts.
  EXPECT_NE(error_of("root ::= \"a\"{1000000}").find("repetition count above"), std::string::npos);
  // Repetitions adding up to too many symbols.
  Limits small;
  small.max_symbols = 10000;
  std::string many = "root ::=";
  for (int i = 0; i < 20; ++i) many += " \"a\"{1000}";
  EXPECT_NE(error_of(many, small).find("symbols"), std::string::npos);
  // An ambiguous grammar whose parse stacks double with every byte (each 'x' may be closed by
  // a 'y' or a 'z' later): the stack bound ends it with an error after a dozen bytes.
  Matcher m(G("root ::= a\na ::= \"x\" a \"y\" | \"x\" a \"z\" | \"\""));
  try {
    StateId s = m.start();
    for (int i = 0; i < 200 && s != kDead; ++i) s = m.step(s, uint8_t('x'));
    ADD_FAILURE() << "no limit reached";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parse stacks"), std::string::npos) << e.what();
  }
}

TEST(GrammarMatcher, Utf8IsCheckedPerCodePoint) {
  const std::string g = "root ::= [\\u00e0-\\u00ff] \"!\"";
  Matcher m(G(g));
  // U+00E9 is C3 A9: the lead byte is alive (it can become a code point of the class) ...
  const StateId lead = m.step(m.start(), uint8_t(0xC3));
  EXPECT_NE(lead, kDead);
  EXPECT_FALSE(m.accepting(lead));
  EXPECT_NE(m.step(lead, uint8_t(0xA9)), kDead);
  // ... C3 80 is U+00C0, outside; D0 (U+0400..) can never be inside.
  EXPECT_EQ(m.step(lead, uint8_t(0x80)), kDead);
  EXPECT_EQ(m.step(m.start(), uint8_t(0xD0)), kDead);
  // Invalid UTF-8 never matches, even '.'.
  Matcher any(G("root ::= .*"));
  EXPECT_EQ(any.step(any.start(), uint8_t(0x80)), kDead);
  EXPECT_EQ(any.step(any.start(), uint8_t(0xC0)), kDead);
  EXPECT_EQ(any.step(any.start(), std::string("\xe2\x82x")), kDead);
  EXPECT_NE(any.step(any.start(), std::string("\xe2\x82\xac")), kDead);
  // Overlong forms and surrogates are not UTF-8 (byte-level vocabularies hold such tokens).
  EXPECT_EQ(any.step(any.start(), std::string("\xe0\x81")), kDead);      // 'm' in 3 bytes
  EXPECT_EQ(any.step(any.start(), std::string("\xf0\x80\x80")), kDead);  // in 4 bytes
  EXPECT_EQ(any.step(any.start(), std::string("\xed\xa0")), kDead);      // U+D800..
  EXPECT_NE(any.step(any.start(), std::string("\xf0\x9f\x98\x80")), kDead);
}

TEST(GrammarMatcher, NegatedClassIntersectsAnIncompleteCharacter) {
  CharSet cs{{{0x80, 0x7FF}}, true};  // anything but U+0080..U+07FF
  EXPECT_FALSE(cs.intersects(0x80, 0x7FF));
  EXPECT_TRUE(cs.intersects(0x7FF, 0x800));
  EXPECT_TRUE(cs.matches('a'));
  EXPECT_FALSE(cs.matches(0x100));
}

TEST(GrammarMatcher, AcceptKeepsStateOnRefusal) {
  Matcher m(G("root ::= \"ab\" | \"ac\""));
  EXPECT_TRUE(m.accept("a"));
  EXPECT_FALSE(m.accept("x"));
  EXPECT_TRUE(m.accept("c"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.accept("c"));
}

TEST(TokenIndexMask, TrieWalkEqualsTokenByTokenCheck) {
  std::vector<std::string> pieces = {"",  "{", "\"",   "{\"",  "a",        "ab",    "abc",  "\"}",
                                     "}", " ", "\xc3", "\xa9", "\xc3\xa9", "x\xc3", "<eos>"};
  std::vector<bool> eog(pieces.size(), false);
  eog.back() = true;
  TokenIndex idx(pieces, eog);
  Matcher m(G("root ::= \"{\" \"\\\"\" [a-z\\u00e9]* \"\\\"\" \"}\""));
  std::vector<StateId> states = {m.start()};
  for (const char* prefix : {"{", "{\"", "{\"ab", "{\"a\xc3", "{\"x\"", "{\"x\"}"}) {
    states.push_back(m.step(m.start(), std::string(prefix)));
    ASSERT_NE(states.back(), kDead) << prefix;
  }
  for (StateId s : states) {
    std::vector<uint64_t> bits;
    idx.mask(m, s, bits);
    for (int32_t id = 0; id < int32_t(pieces.size()); ++id) {
      const bool bit = (bits[0] >> id) & 1;
      EXPECT_EQ(bit, idx.allows(m, s, id)) << "state " << s << " token " << id;
    }
  }
  // The accepting state allows only the end token; the empty token never.
  std::vector<uint64_t> bits;
  idx.mask(m, states.back(), bits);
  EXPECT_EQ(bits[0], uint64_t(1) << 14);
  EXPECT_FALSE(idx.allows(m, m.start(), 0));
}

}  // namespace
}  // namespace lynx::grammar
