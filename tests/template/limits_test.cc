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
