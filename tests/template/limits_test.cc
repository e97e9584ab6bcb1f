// Hostile templates stop with a lynx::Error at the engine's limits, never crash or hang; and
// the parse errors name the line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lynx/chat_template.h"

namespace lynx {
namespace {

std::string render(const std::string& src, TemplateOptions opt = {}) {
  return ChatTemplate(src, opt).render(nlohmann::ordered_json::object());
}

void expect_error(const std::string& src, const std::string& what, TemplateOptions opt = {}) {
  try {
    render(src, opt);
    ADD_FAILURE() << "no error for: " << src.substr(0, 200);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos)
        << "for: " << src.substr(0, 200) << "\nerror: " << e.what();
  }
}

TEST(TemplateLimits, RecursiveMacro) {
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deeper than");
}

TEST(TemplateLimits, HugeLoopStopsAtStepLimit) {
  TemplateOptions opt;
  opt.max_steps = 50000;
  expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               "evaluation steps", opt);
}

TEST(TemplateLimits, GiantStrings) {
  expect_error("{{ 'a' * 1000000000000 }}", "longer than");
  TemplateOptions small;
  small.max_output = 1 << 20;
  expect_error(
      "{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      "longer than", small);
  TemplateOptions opt;
  opt.max_output = 1000;
  expect_error("{% for i in range(1000) %}abc{% endfor %}", "output longer than", opt);
}

TEST(TemplateLimits, HugeRange) {
  expect_error("{{ range(10000000000)|length }}", "list longer");
}

TEST(TemplateLimits, DeepSyntaxNesting) {
  expect_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "nesting");
  std::string ifs;
  for (int k = 0; k < 2000; ++k) ifs += "{% if true %}";
  expect_error(ifs, "nesting");
}

TEST(TemplateLimits, DeepValuesAreReleasedAndPrintedSafely) {
  // A chain of 100,000 lists: printing it is an error, releasing it must not overflow.
  const std::string chain =
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}";
  EXPECT_EQ(render(chain + "done"), "done");
  expect_error(chain + "{{ ns.x }}", "nested deeper");
  expect_error(chain + "{{ ns.x|tojson }}", "nested deeper");
}

TEST(TemplateLimits, SelfAppend) {
  expect_error("{% set l = [] %}{{ l.append(l) }}", "itself");
}

// Dicts with keys of any hashable type (Seed-OSS's template indexes {0: 0, 512: 128, ...} by
// number). What jinja2 does with them is in the goldens (features.json); here, what a hostile
// template can do with them.
TEST(TemplateLimits, IntegerKeysStayBounded) {
  // Python's integers are unbounded, lynx's are 64-bit: a key past that is a clear error, at
  // parse time for a literal and at run time for arithmetic, never a wrapped value.
  expect_error("{{ {99999999999999999999: 1} }}", "integer literal out of range");
  expect_error("{{ {2 ** 70: 1} }}", "integer overflow in '**'");
  expect_error("{{ {9223372036854775807 + 1: 1} }}", "integer overflow in '+'");
  expect_error("{{ -(-9223372036854775807 - 1) }}", "integer overflow in '-'");
  expect_error("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow in '//'");
  expect_error("{{ [9223372036854775807, 1]|sum }}", "integer overflow in 'sum'");
  expect_error("{{ '99999999999999999999'|int }}", "integer overflow in 'int'");
  expect_error("{{ 1e300|int }}", "integer overflow in 'int'");
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 1 ** 100000000000 }} {{ (-1) ** 7 }} "
                   "{{ 9223372036854775807 % -1 }}"),
            "4611686018427387904 -9223372036854775808 1 -1 0");
  EXPECT_EQ(render("{{ {9223372036854775807: 'max', -9223372036854775807 - 1: 'min'}"
                   "[9223372036854775807] }}"),
            "max");
  // Mixed keys: Python's 1 == 1.0 == True is one key (the first one written), '1' another;
  // ordering them is jinja2's TypeError.
  EXPECT_EQ(render("{{ {1: 'a', 1.0: 'b', true: 'c', '1': 'd'} }}"), "{1: 'c', '1': 'd'}");
  expect_error("{{ {1: 'a', 'b': 2}|dictsort }}", "'<' not supported");
  expect_error("{{ {(1, 2): 'a'}|tojson }}", "keys must be str, int, float, bool or None");
  expect_error("{{ {[1]: 'a'} }}", "unhashable type: 'list'");
}

TEST(TemplateLimits, ManyKeysAreHashed) {
  // 200,000 keys added one at a time: a scan per insertion would be 2e10 comparisons; the
  // hash index makes it linear. Lookups past the index still unify 1, 1.0 and True.
  const std::string fill =
      "{% set d = {} %}{% for i in range(200000) %}{% set _ = d.update({i: i * 2}) %}"
      "{% endfor %}";
  EXPECT_EQ(render(fill + "{{ d|length }} {{ d[199999] }} {{ d[150.0] }} {{ d[true] }} "
                          "{{ '5' in d }} {{ 5 in d }} [{{ d[200000] }}] {{ d.get(-1, 'no') }}"),
            "200000 399998 300 2 False True [] no");
  // Strings and integers side by side in one big dict stay distinct keys.
  EXPECT_EQ(render("{% set d = {} %}{% for i in range(100) %}"
                   "{% set _ = d.update({i: 'int', i|string: 'str'}) %}{% endfor %}"
                   "{{ d|length }} {{ d[42] }} {{ d['42'] }}"),
            "200 int str");
}

TEST(TemplateLimits, CopiesCountAsSteps) {
  // Copying a growing dict or list on every iteration is quadratic work for linear steps;
  // each copy is charged per item, so it stops at the step limit.
  TemplateOptions opt;
  opt.max_steps = 200000;
  expect_error(
      "{% set ns = namespace(d={}) %}{% for i in range(5000) %}"
      "{% set _ = ns.d.update({i: i}) %}{% set ns.d = dict(ns.d) %}{% endfor %}",
      "evaluation steps", opt);
  expect_error(
      "{% set ns = namespace(l=[]) %}{% for i in range(5000) %}"
      "{% set ns.l = ns.l + [i] %}{% endfor %}",
      "evaluation steps", opt);
  // A repeat count that would wrap the size computation is refused, not wrapped; an empty
  // sequence repeated any number of times is empty at once.
  expect_error("{{ 'abcd' * 4611686018427387904 }}", "longer than");
  expect_error("{{ [1, 2] * 4611686018427387904 }}", "list longer than");
  EXPECT_EQ(render("[{{ '' * 9223372036854775807 }}]{{ [] * 9223372036854775807 }}"), "[][]");
}

TEST(TemplateErrors, SyntaxErrorsNameTheLine) {
  expect_error("a\nb\n{% if x %}", "missing '{% endif %}'");
  expect_error("line1\n{{ 1 + }}", "line 2");
  expect_error("{% for %}", "expected a name");
  expect_error("{{ 'abc }}", "unterminated string");
  expect_error("{% include 'x' %}", "unsupported tag 'include'");
  expect_error("{{ x|nosuchfilter }}", "unknown filter 'nosuchfilter'");
}

TEST(TemplateRender, ContextAndOptions) {
  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                {"add_generation_prompt", true}};
  ChatTemplate t(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}");
  EXPECT_EQ(t.render(ctx), "<user>hi\n<assistant>");
  TemplateOptions keep;
  keep.trim_blocks = false;
  keep.lstrip_blocks = false;
  EXPECT_EQ(render("  {% if true %}\nx{% endif %}", keep), "  \nx");
  EXPECT_EQ(render("  {% if true %}\nx{% endif %}"), "x");
  TemplateOptions fixed;
  fixed.now = 0;
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') }}", fixed), "1970-01-01");
  EXPECT_THROW(t.render(nlohmann::ordered_json::array()), Error);
}

}  // namespace
}  // namespace lynx
