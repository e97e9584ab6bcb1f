// The chat output parser: each family's tool-call format, reasoning blocks, malformed and
// truncated calls (kept as text, never thrown), and streams whose deltas add up to the answer
// the whole text gives, whatever the pieces.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "chatparse/chat_output.h"

namespace lynx::chatparse {
namespace {

using json = nlohmann::json;

const json& weather_tools() {
  static const json t = json::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"},"days":{"type":"integer"},"zip":{"type":"string"},
      "opts":{"type":"object"}}}}},
    {"type":"function","function":{"name":"search","parameters":{"type":"object",
      "properties":{"query":{"type":"string"}}}}}])");
  return t;
}

ParseOptions opts(ToolFormat f, bool think = false) {
  ParseOptions o;
  o.format.tools = f;
  o.format.think_tags = think;
  if (f == ToolFormat::kSeedOss) {  // the family's own reasoning tags
    o.format.think_open = "<seed:think>";
    o.format.think_close = "</seed:think>";
  }
  o.parse_tools = true;
  o.tools = weather_tools();
  o.id_seed = 42;
  return o;
}

// What a client assembles from the deltas of a stream cut into pieces of `step` bytes (0: of
// varying sizes from a fixed seed).
ParsedOutput streamed(std::string_view text, const ParseOptions& o, size_t step,
                      bool truncated = false) {
  OutputParser p(o);
  ParsedOutput got;
  auto take = [&](OutputDelta d) {
    got.content += d.content;
    got.reasoning += d.reasoning;
    for (const auto& t : d.tool_calls) {
      if (!t.id.empty()) {
        ASSERT_EQ(size_t(t.index), got.tool_calls.size()) << "calls come in index order";
        ASSERT_FALSE(t.name.empty()) << "the first delta of a call names it";
        ASSERT_TRUE(t.arguments.empty());
        got.tool_calls.push_back({t.id, t.name, ""});
      } else {
        ASSERT_LT(size_t(t.index), got.tool_calls.size()) << "arguments before the call's name";
        got.tool_calls[size_t(t.index)].arguments += t.arguments;
      }
    }
  };
  std::mt19937 rng(unsigned(step) + 1);
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = step ? step : 1 + rng() % 9;
    take(p.push(text.substr(i, n)));
    i += n;
  }
  take(p.finish(truncated));
  return got;
}

// Parses whole, checks every stream gives the same answer, returns the whole parse.
ParsedOutput parse(std::string_view text, const ParseOptions& o, bool truncated = false) {
  const ParsedOutput whole = parse_output(text, o, truncated);
  for (size_t step : {1, 2, 3, 5, 0, 1000}) {
    const ParsedOutput s = streamed(text, o, step, truncated);
    EXPECT_EQ(s.content, whole.content) << "step " << step;
    EXPECT_EQ(s.reasoning, whole.reasoning) << "step " << step;
    EXPECT_EQ(s.tool_calls.size(), whole.tool_calls.size()) << "step " << step;
    for (size_t k = 0; k < std::min(s.tool_calls.size(), whole.tool_calls.size()); ++k) {
      EXPECT_EQ(s.tool_calls[k].id, whole.tool_calls[k].id);
      EXPECT_EQ(s.tool_calls[k].name, whole.tool_calls[k].name);
      EXPECT_EQ(s.tool_calls[k].arguments, whole.tool_calls[k].arguments);
    }
  }
  for (const ToolCall& c : whole.tool_calls) {
    const json a = json::parse(c.arguments, nullptr, false);
    EXPECT_TRUE(a.is_object()) << c.arguments;
  }
  return whole;
}

json args(const ParsedOutput& r, size_t i) {
  return json::parse(r.tool_calls.at(i).arguments);
}

// Exactly one problem, and it names `what` (the response reports it to the client).
testing::AssertionResult one_problem(const ParsedOutput& r, std::string_view what) {
  if (r.problems.size() != 1)
    return testing::AssertionFailure() << r.problems.size() << " problems, not 1";
  if (r.problems[0].find(what) == std::string::npos)
    return testing::AssertionFailure() << "'" << r.problems[0] << "' does not name " << what;
  return testing::AssertionSuccess();
}

// One call, whose arguments are `want`.
testing::AssertionResult one_call(const ParsedOutput& r, const json& want) {
  if (r.tool_calls.size() != 1)
    return testing::AssertionFailure() << r.tool_calls.size() << " calls, not 1";
  if (args(r, 0) != want) return testing::AssertionFailure() << "arguments " << args(r, 0);
  return testing::AssertionSuccess();
}

// `n` calls and nothing besides: no content, no problem.
testing::AssertionResult only_calls(const ParsedOutput& r, size_t n) {
  if (r.tool_calls.size() != n)
    return testing::AssertionFailure() << r.tool_calls.size() << " calls, not " << n;
  if (!r.content.empty()) return testing::AssertionFailure() << "content '" << r.content << "'";
  if (!r.problems.empty()) return testing::AssertionFailure() << "problem: " << r.problems[0];
  return testing::AssertionSuccess();
}

// The get_weather call the XML formats' tests write (every value raw text), typed by
// weather_tools()' schema: a number, a string of digits, an object.
void expect_typed_weather_call(const ParsedOutput& r, size_t i) {
  EXPECT_EQ(r.tool_calls.at(i).name, "get_weather");
  EXPECT_EQ(args(r, i),
            json::parse(R"({"city":"New York","days":3,"zip":"10001","opts":{"units":"c"}})"));
}

// In format `f`, a block whose call has no parameters gives arguments "{}", and a block with no
// call in it is text.
void expect_empty_call_and_block(ToolFormat f, std::string_view call, const std::string& block) {
  const auto e = parse(call, opts(f));
  ASSERT_EQ(e.tool_calls.size(), 1u);
  EXPECT_EQ(e.tool_calls[0].arguments, "{}");
  EXPECT_EQ(parse(block, opts(f)).content, block);
}

TEST(ToolCallFormat, HermesQwen3) {
  const auto r = parse(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", "
      "\"arguments\": {\"query\": \"weather\"}}\n</tool_call>",
      opts(ToolFormat::kHermes));
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city":"Paris","days":2})");
  EXPECT_EQ(r.tool_calls[0].id.substr(0, 5), "call_");
  EXPECT_EQ(r.tool_calls[0].id.size(), 29u);
  EXPECT_NE(r.tool_calls[0].id, r.tool_calls[1].id);
}

TEST(ToolCallFormat, HermesArgumentsAsString) {
  const auto r = parse(
      "<tool_call>{\"name\": \"search\", \"arguments\": \"{\\\"query\\\": "
      "\\\"x\\\"}\"}</tool_call>",
      opts(ToolFormat::kHermes));
  ASSERT_TRUE(one_call(r, json({{"query", "x"}})));
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallFormat, Qwen3CoderTypesValuesBySchema) {
  const auto r = parse(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n10001\n</parameter>\n"
      "<parameter=opts>\n{\"units\": \"c\"}\n</parameter>\n</function>\n</tool_call>",
      opts(ToolFormat::kQwen3Coder));
  ASSERT_EQ(r.tool_calls.size(), 1u) << (r.problems.empty() ? "" : r.problems[0]);
  expect_typed_weather_call(r, 0);
  EXPECT_EQ(r.content, "");
}

// MiniMax-M2: several <invoke>s in one block, values raw text typed by the schema, reasoning
// in <think> before the calls.
TEST(ToolCallFormat, MiniMaxM2SeveralInvokesTypedBySchema) {
  const auto r = parse(
      "<think>\nThe user wants weather.\n</think>\n\nLet me look.\n<minimax:tool_call>\n"
      "<invoke name=\"get_weather\">\n<parameter name=\"city\">New York</parameter>\n"
      "<parameter name=\"days\">3</parameter>\n<parameter name=\"zip\">10001</parameter>\n"
      "<parameter name=\"opts\">{\"units\": \"c\"}</parameter>\n</invoke>\n"
      "<invoke name=\"search\">\n<parameter name=\"query\">a < b & \"c\"</parameter>\n</invoke>\n"
      "</minimax:tool_call>",
      opts(ToolFormat::kMiniMaxM2, true));
  ASSERT_EQ(r.tool_calls.size(), 2u) << (r.problems.empty() ? "" : r.problems[0]);
  expect_typed_weather_call(r, 0);
  EXPECT_EQ(r.tool_calls[1].name, "search");
  EXPECT_EQ(args(r, 1), json({{"query", "a < b & \"c\""}}));
  EXPECT_EQ(r.content, "Let me look.");
  EXPECT_EQ(r.reasoning, "The user wants weather.");
  // A call with no parameters; a block with no <invoke> is text.
  expect_empty_call_and_block(
      ToolFormat::kMiniMaxM2,
      "<minimax:tool_call><invoke name=\"search\"></invoke></minimax:tool_call>",
      "<minimax:tool_call>\n</minimax:tool_call>");
}

// Seed-OSS: one function per <seed:tool_call> block, values as written (no newlines around
// them, unlike Qwen3-Coder) typed by the schema, reasoning in <seed:think>.
TEST(ToolCallFormat, SeedOssBlocksTypedBySchema) {
  const auto r = parse(
      "<seed:think>The user wants weather.<seed:cot_budget_reflect>I have used 12 tokens."
      "</seed:cot_budget_reflect></seed:think>\nLet me look.\n\n<seed:tool_call>\n"
      "<function=get_weather>\n<parameter=city>New York</parameter>\n"
      "<parameter=days>3</parameter>\n<parameter=zip>10001</parameter>\n"
      "<parameter=opts>{\"units\": \"c\"}</parameter>\n</function>\n</seed:tool_call>\n"
      "<seed:tool_call>\n<function=search>\n<parameter=query>\na < b & \"c\"\n</parameter>\n"
      "</function>\n</seed:tool_call>",
      opts(ToolFormat::kSeedOss, true));
  ASSERT_EQ(r.tool_calls.size(), 2u) << (r.problems.empty() ? "" : r.problems[0]);
  expect_typed_weather_call(r, 0);
  EXPECT_EQ(r.tool_calls[1].name, "search");
  EXPECT_EQ(args(r, 1), json({{"query", "\na < b & \"c\"\n"}}));  // its newlines are the value's
  EXPECT_EQ(r.content, "Let me look.");
  EXPECT_EQ(r.reasoning,
            "The user wants weather.<seed:cot_budget_reflect>I have used 12 tokens."
            "</seed:cot_budget_reflect>");
  // Plain <think> is text for Seed-OSS; a block with no function is text; no parameters: {}.
  EXPECT_EQ(parse("<think>x</think>y", opts(ToolFormat::kSeedOss, true)).content,
            "<think>x</think>y");
  ASSERT_NO_FATAL_FAILURE(expect_empty_call_and_block(
      ToolFormat::kSeedOss, "<seed:tool_call><function=search></function></seed:tool_call>",
      "<seed:tool_call>\n</seed:tool_call>"));
  // A prompt that ends inside an open <seed:think>: the answer starts in the reasoning.
  ParseOptions in = opts(ToolFormat::kSeedOss, true);
  in.starts_in_reasoning = true;
  const auto opened = parse("Quick.</seed:think>4", in);
  EXPECT_EQ(opened.reasoning, "Quick.");
  EXPECT_EQ(opened.content, "4");
}

TEST(ToolCallFormat, DeepSeekV31AndR1) {
  const auto v31 = parse(
      "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
      "\"Oslo\"}"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": "
      "\"q\"}<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>",
      opts(ToolFormat::kDeepSeekV3, true));
  EXPECT_EQ(v31.content, "Sure.");
  ASSERT_EQ(v31.tool_calls.size(), 2u);
  EXPECT_EQ(v31.tool_calls[1].name, "search");
  EXPECT_EQ(args(v31, 0), json({{"city", "Oslo"}}));
  const auto r1 = parse(
      "<think>\nneed "
      "weather\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_weather\n```json\n{\"city\": \"Rome\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      opts(ToolFormat::kDeepSeekV3, true));
  EXPECT_EQ(r1.reasoning, "need weather");
  ASSERT_TRUE(one_call(r1, json({{"city", "Rome"}})));
  EXPECT_EQ(r1.content, "");
}

TEST(ToolCallFormat, Glm45) {
  const auto r = parse(
      "<think>plan</think>\nCalling.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
      "<arg_value>Berlin</arg_value>\n<arg_key>days</arg_key>\n<arg_value>5</arg_value>\n"
      "</tool_call>",
      opts(ToolFormat::kGlm45, true));
  EXPECT_EQ(r.reasoning, "plan");
  EXPECT_EQ(r.content, "Calling.");
  ASSERT_TRUE(one_call(r, json({{"city", "Berlin"}, {"days", 5}})));
}

TEST(ToolCallFormat, KimiK2KeepsTheModelsIds) {
  const auto r = parse(
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Lima\"}<|tool_call_end|><|tool_call_begin|>"
      "functions.search:1<|tool_call_argument_begin|>{\"query\": \"x\"}<|tool_call_end|>"
      "<|tool_calls_section_end|>",
      opts(ToolFormat::kKimiK2));
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(r.tool_calls[1].name, "search");
  EXPECT_EQ(args(r, 0), json({{"city", "Lima"}}));
}

TEST(ToolCallFormat, HarmonyChannels) {
  // The generation prompt ends with <|start|>assistant; <|call|> ends the generation.
  const auto call = parse(
      "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Tokyo\"}",
      opts(ToolFormat::kHarmony));
  EXPECT_EQ(call.reasoning, "User wants weather.");
  EXPECT_EQ(call.content, "");
  ASSERT_EQ(call.tool_calls.size(), 1u);
  EXPECT_EQ(call.tool_calls[0].name, "get_weather");
  EXPECT_EQ(args(call, 0), json({{"city", "Tokyo"}}));
  // The recipient before the channel, as the template writes past calls, and <|call|> present.
  const auto call2 = parse(
      "<|start|>assistant to=functions.search<|channel|>commentary json<|message|>"
      "{\"query\":\"a\"}<|call|>",
      opts(ToolFormat::kHarmony));
  ASSERT_EQ(call2.tool_calls.size(), 1u);
  EXPECT_EQ(call2.tool_calls[0].name, "search");
  const auto answer = parse(
      "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hello there.",
      opts(ToolFormat::kHarmony));
  EXPECT_EQ(answer.reasoning, "Simple.");
  EXPECT_EQ(answer.content, "Hello there.");
  EXPECT_TRUE(answer.tool_calls.empty());
  // Reasoning kept in the text: the analysis message as written.
  ParseOptions keep = opts(ToolFormat::kHarmony);
  keep.extract_reasoning = false;
  const auto kept = parse(
      "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant"
      "<|channel|>final<|message|>Hi.",
      keep);
  EXPECT_EQ(kept.reasoning, "");
  EXPECT_EQ(kept.content, "<|channel|>analysis<|message|>Simple.<|end|>Hi.");
  // A built-in tool (not functions.*) is not a function call.
  const auto builtin = parse(
      "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary "
      "to=browser.search <|constrain|>json<|message|>{\"q\":1}<|call|>",
      opts(ToolFormat::kHarmony));
  EXPECT_TRUE(builtin.tool_calls.empty());
  EXPECT_NE(builtin.content.find("browser.search"), std::string::npos);
}

TEST(ToolCallFormat, MistralBothForms) {
  const auto arr = parse(
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"id\": \"abcDEF123\", \"arguments\": "
      "{\"city\": \"Nice\"}}, {\"name\": \"search\", \"arguments\": {\"query\": \"z\"}, "
      "\"id\": \"xyzXYZ789\"}]",
      opts(ToolFormat::kMistral));
  ASSERT_EQ(arr.tool_calls.size(), 2u);
  EXPECT_EQ(arr.tool_calls[0].id, "abcDEF123");  // the model's id, 9 alphanumerics
  // An id after the arguments (where mistral-common's v3-v7 tokenizers put it) is the model's
  // too: that call is sent, with it, when its object closes.
  EXPECT_EQ(arr.tool_calls[1].id, "xyzXYZ789");
  const auto args_form = parse(
      "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}[TOOL_CALLS]search[ARGS]{\"query\": \"z\"}",
      opts(ToolFormat::kMistral));
  ASSERT_EQ(args_form.tool_calls.size(), 2u);
  EXPECT_EQ(args_form.tool_calls[0].name, "get_weather");
  EXPECT_EQ(args(args_form, 1), json({{"query", "z"}}));
  EXPECT_EQ(args_form.content, "");
}

// Every layout Mistral's releases write (mistral-common's tokenizers; the templates of
// Mistral-Nemo, Small-3.1, Small-3.2, Devstral Small 2), each parsed whole and streamed in
// pieces to the same calls (parse() checks), ids included.
TEST(ToolCallFormat, MistralReleasedLayouts) {
  const ParseOptions o = opts(ToolFormat::kMistral);
  auto ids = [](const ParsedOutput& r) {
    std::vector<std::string> v;
    for (const auto& c : r.tool_calls) v.push_back(c.id);
    return v;
  };
  // v3-v7 (Mistral-7B-v0.3, Mixtral-8x22B, Nemo, Small-3.1, Large-2407): one JSON array, each
  // id after its arguments; SentencePiece tokenizers put a space after [TOOL_CALLS].
  const auto v3 = parse(
      "Checking.[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\", "
      "\"days\": 2}, \"id\": \"abcDEF123\"}, {\"name\": \"search\", \"arguments\": {\"query\": "
      "\"z\"}, \"id\": \"xyzXYZ789\"}]",
      o);
  EXPECT_EQ(v3.content, "Checking.");
  ASSERT_EQ(v3.tool_calls.size(), 2u);
  EXPECT_EQ(ids(v3), (std::vector<std::string>{"abcDEF123", "xyzXYZ789"}));
  EXPECT_EQ(args(v3, 0), json({{"city", "Nice"}, {"days", 2}}));
  EXPECT_TRUE(v3.problems.empty());
  // v2 (no id), an id that Mistral's templates would refuse (not 9 alphanumerics), an id that
  // is not a string: the server's own 9-character ids.
  for (const std::string tail : {"}]", ", \"id\": \"call_abcDEF123\"}]", ", \"id\": 123456789}]",
                                 ", \"id\": \"abc DEF12\"}]"}) {
    const auto r =
        parse("[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"query\": \"q\"}" + tail, o);
    ASSERT_EQ(r.tool_calls.size(), 1u) << tail;
    EXPECT_EQ(r.tool_calls[0].id.size(), 9u) << tail;
    EXPECT_EQ(r.tool_calls[0].id.find_first_not_of(
                  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
              std::string::npos);
    EXPECT_NE(r.tool_calls[0].id, "abcDEF123");
    EXPECT_TRUE(r.problems.empty()) << tail;
  }
  // v11 (Small-3.2, Magistral/Devstral 2506-2507): one [TOOL_CALLS] per call, the id between
  // [CALL_ID] and [ARGS].
  const auto v11 = parse(
      "[TOOL_CALLS]get_weather[CALL_ID]abcDEF123[ARGS]{\"city\": \"Nice\"}"
      "[TOOL_CALLS]search[CALL_ID]xyzXYZ789[ARGS]{\"query\": \"z\"}",
      o);
  EXPECT_EQ(ids(v11), (std::vector<std::string>{"abcDEF123", "xyzXYZ789"}));
  EXPECT_EQ(args(v11, 1), json({{"query", "z"}}));
  // v13 (Magistral 2509, Devstral 2, Ministral 3): no id at all; reasoning in [THINK] first.
  ParseOptions think = o;
  think.format.think_tags = true;
  think.format.think_open = "[THINK]";
  think.format.think_close = "[/THINK]";
  const auto v13 = parse(
      "[THINK]Need the weather.[/THINK]On it.[TOOL_CALLS]get_weather[ARGS]{\"city\": "
      "\"Nice\"}[TOOL_CALLS]search[ARGS]{}",
      think);
  EXPECT_EQ(v13.reasoning, "Need the weather.");
  EXPECT_EQ(v13.content, "On it.");
  ASSERT_EQ(v13.tool_calls.size(), 2u);
  EXPECT_EQ(v13.tool_calls[0].id.size(), 9u);
  EXPECT_NE(v13.tool_calls[0].id, v13.tool_calls[1].id);
  EXPECT_EQ(args(v13, 1), json::object());
  // The layouts side by side in one answer: each block is read by its own form.
  const auto mixed = parse(
      "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}, \"id\": \"abcDEF123\"}]"
      "[TOOL_CALLS]search[CALL_ID]xyzXYZ789[ARGS]{}[TOOL_CALLS]search[ARGS]{}",
      o);
  ASSERT_EQ(mixed.tool_calls.size(), 3u);
  EXPECT_EQ(mixed.tool_calls[0].id, "abcDEF123");
  EXPECT_EQ(mixed.tool_calls[1].id, "xyzXYZ789");
}

// Cut and malformed Mistral calls around the id: never thrown, the calls begun stand (a held
// call is sent when the block ends), the rest is text or a problem the response reports.
TEST(MalformedCalls, MistralIds) {
  const ParseOptions o = opts(ToolFormat::kMistral);
  // Cut inside the id after complete arguments: the call stands with a server id.
  const auto cut_id =
      parse("[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"query\": \"a\"}, \"id\": \"abc",
            o, true);
  ASSERT_TRUE(one_call(cut_id, json({{"query", "a"}})));
  EXPECT_EQ(cut_id.tool_calls[0].id.size(), 9u);
  ASSERT_TRUE(one_problem(cut_id, "cut off by max_tokens"));
  // Cut inside the arguments of a call whose id would follow: closed where they stopped.
  const auto cut_args =
      parse("[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"query\": \"a", o, true);
  ASSERT_TRUE(one_call(cut_args, json({{"query", "a"}})));
  ASSERT_TRUE(one_problem(cut_args, "closed as JSON"));
  // Cut right after the arguments, before the object closed (no id yet).
  const auto cut_after =
      parse("[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"query\": \"a\"}, ", o, true);
  ASSERT_TRUE(one_call(cut_after, json({{"query", "a"}})));
  // A complete call, then junk where ',' or ']' belongs: the call (and its id) stands.
  const auto junk = parse(
      "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}, \"id\": \"abcDEF123\"} and more", o);
  ASSERT_EQ(junk.tool_calls.size(), 1u);
  EXPECT_EQ(junk.tool_calls[0].id, "abcDEF123");
  ASSERT_TRUE(one_problem(junk, "not well formed"));
  // A second call without a name after a good one: the first stands.
  const auto second = parse(
      "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}, \"id\": \"abcDEF123\"}, "
      "{\"name\": 5, \"arguments\": {}}]",
      o);
  ASSERT_EQ(second.tool_calls.size(), 1u);
  EXPECT_EQ(second.tool_calls[0].id, "abcDEF123");
  EXPECT_EQ(second.problems.size(), 1u);
  // Invalid JSON inside the object after the arguments: the call stands with a server id.
  const auto bad_id = parse(
      "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"query\": \"a\"}, \"id\": abc}]", o);
  ASSERT_TRUE(one_call(bad_id, json({{"query", "a"}})));
  EXPECT_NE(bad_id.tool_calls[0].id, "abc");
  EXPECT_EQ(bad_id.problems.size(), 1u);
  // v11 cut after [CALL_ID] (no [ARGS] yet): no call, the text kept and the cut reported.
  const std::string cut_v11 = "[TOOL_CALLS]search[CALL_ID]abcDEF123";
  const auto r11 = parse(cut_v11, o, true);
  EXPECT_TRUE(r11.tool_calls.empty());
  EXPECT_EQ(r11.content, cut_v11);
  EXPECT_EQ(r11.problems.size(), 1u);
  // v11 cut inside the arguments: the id came first, so the call was sent with it.
  const auto r11b = parse("[TOOL_CALLS]search[CALL_ID]abcDEF123[ARGS]{\"query\": \"a", o, true);
  ASSERT_EQ(r11b.tool_calls.size(), 1u);
  EXPECT_EQ(r11b.tool_calls[0].id, "abcDEF123");
  EXPECT_EQ(args(r11b, 0), json({{"query", "a"}}));
  // An empty or spaced [CALL_ID]: a server id.
  const auto empty_id = parse("[TOOL_CALLS]search[CALL_ID][ARGS]{}", o);
  ASSERT_EQ(empty_id.tool_calls.size(), 1u);
  EXPECT_EQ(empty_id.tool_calls[0].id.size(), 9u);
  // [ARGS] not followed by an object; a bare [TOOL_CALLS]: text, with the reason.
  for (const std::string text : {"[TOOL_CALLS]search[CALL_ID]abcDEF123[ARGS]\"q\"", "[TOOL_CALLS]",
                                 "[TOOL_CALLS] [", "[TOOL_CALLS][]"}) {
    const auto r = parse(text, o);
    EXPECT_TRUE(r.tool_calls.empty()) << text;
    EXPECT_EQ(r.content, text);
    EXPECT_EQ(r.problems.size(), 1u) << text;
  }
}

TEST(ToolCallFormat, Llama3Json) {
  const auto r = parse(R"({"name": "get_weather", "parameters": {"city": "Quito"}})",
                       opts(ToolFormat::kLlama3));
  ASSERT_TRUE(one_call(r, json({{"city", "Quito"}})));
  const auto tagged = parse(
      "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"q\"}}; {\"name\": "
      "\"get_weather\", \"parameters\": {\"city\": \"Rio\"}}",
      opts(ToolFormat::kLlama3));
  EXPECT_EQ(tagged.tool_calls.size(), 2u);
  // A JSON answer that is not a call of an offered tool stays the answer.
  const std::string answer = R"({"name": "Ada", "parameters": {"born": 1815}})";
  const auto plain = parse(answer, opts(ToolFormat::kLlama3));
  EXPECT_TRUE(plain.tool_calls.empty());
  EXPECT_EQ(plain.content, answer);
}

TEST(Reasoning, ThinkBlocks) {
  ParseOptions o = opts(ToolFormat::kHermes, true);
  const auto r = parse("<think>\nStep 1.\nStep 2.\n</think>\n\nThe answer is 4.", o);
  EXPECT_EQ(r.reasoning, "Step 1.\nStep 2.");
  EXPECT_EQ(r.content, "The answer is 4.");
  // The prompt opened <think> (DeepSeek-R1): the output starts inside the block.
  o.starts_in_reasoning = true;
  const auto inside = parse("Hmm, 2+2.\n</think>\n\n4", o);
  EXPECT_EQ(inside.reasoning, "Hmm, 2+2.");
  EXPECT_EQ(inside.content, "4");
  // Kept in the text when asked.
  o.extract_reasoning = false;
  const std::string raw = "Hmm.\n</think>\n\n4";
  EXPECT_EQ(parse(raw, o).content, raw);
  EXPECT_EQ(parse(raw, o).reasoning, "");
  // A <think> later in the answer is text.
  o = opts(ToolFormat::kHermes, true);
  const auto late = parse("Use <think>tags</think> like this.", o);
  EXPECT_EQ(late.content, "Use <think>tags</think> like this.");
  // Unclosed reasoning (cut off): all reasoning.
  const auto cut = parse("<think>still thinking", o, true);
  EXPECT_EQ(cut.reasoning, "still thinking");
  EXPECT_EQ(cut.content, "");
}

TEST(MalformedCalls, KeptAsTextNeverThrown) {
  // Malformed before the call could be sent (no valid name yet, arguments that are no object,
  // the name after the arguments and the whole not a call): the block is text.
  const ParseOptions o = opts(ToolFormat::kHermes);
  const std::string bad =
      "<tool_call>\n{\"arguments\": {\"city\": }, \"name\": \"get_weather\"\n</tool_call>";
  const auto r = parse("Before " + bad, o);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, "Before " + bad);
  ASSERT_TRUE(one_problem(r, "not valid JSON"));
  // Cut off by max_tokens before the arguments began: text.
  const std::string cut = "<tool_call>\n{\"name\": \"search\", \"argu";
  const auto t = parse(cut, o, true);
  EXPECT_TRUE(t.tool_calls.empty());
  EXPECT_EQ(t.content, cut);
  // A name that is not a function name, arguments that are not an object: text.
  EXPECT_TRUE(
      parse("<tool_call>{\"name\": \"a b\", \"arguments\": {}}</tool_call>", o).tool_calls.empty());
  EXPECT_TRUE(
      parse("<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", o).tool_calls.empty());
  for (ToolFormat f :
       {ToolFormat::kQwen3Coder, ToolFormat::kGlm45, ToolFormat::kDeepSeekV3, ToolFormat::kKimiK2,
        ToolFormat::kMistral, ToolFormat::kHarmony, ToolFormat::kMiniMaxM2, ToolFormat::kSeedOss}) {
    const ParseOptions of = opts(f);
    for (const char* text :
         {"<tool_call><function x><parameter=a>1</parameter></function></tool_call>",
          "<tool_call>get weather<arg_key>city</arg_key></tool_call>",
          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
          "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_end|>"
          "<|tool_calls_section_end|>",
          "[TOOL_CALLS]f[ARGS]oops", "[TOOL_CALLS][{\"name\": 1}]",
          "<|channel|>commentary to=functions.f <|constrain|>json<|message|>[\"a\"]<|call|>",
          "<minimax:tool_call><invoke name=\"get weather\"></invoke></minimax:tool_call>",
          "<minimax:tool_call>get_weather</minimax:tool_call>",
          "<seed:tool_call><function=get weather></function></seed:tool_call>",
          "<seed:tool_call>get_weather</seed:tool_call>",
          "<seed:tool_call><function=></function></seed:tool_call>"}) {
      const auto m = parse(text, of);
      EXPECT_TRUE(m.tool_calls.empty()) << tool_format_name(f) << ": " << text;
      EXPECT_FALSE(m.content.empty()) << tool_format_name(f) << ": " << text;
    }
  }
}

// Once a call's name and the start of its arguments were seen, it was sent: whatever follows,
// it stays a call, its arguments what the model wrote, closed as JSON where they stopped (only
// quotes and brackets added: no value the model did not write), and the problem named.
TEST(MalformedCalls, SentCallsStandWithClosedArguments) {
  const ParseOptions o = opts(ToolFormat::kHermes);
  // Cut by max_tokens inside a string, after a dangling key, inside a number.
  const std::pair<std::string, std::string> cuts[] = {
      {"<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"par", R"({"query":"par"})"},
      {"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"X\", \"da",
       R"({"city":"X"})"},
      {"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"opts\": {\"n\": [1, 2",
       R"({"opts":{"n":[1]}})"},
      {"<tool_call>{\"name\": \"search\", \"arguments\": {", "{}"},
  };
  for (const auto& [text, closed] : cuts) {
    const auto r = parse(text, o, true);
    ASSERT_EQ(r.tool_calls.size(), 1u) << text;
    EXPECT_EQ(r.tool_calls[0].arguments, closed) << text;
    EXPECT_EQ(r.content, "");
    ASSERT_TRUE(one_problem(r, "max_tokens")) << text;
  }
  // A complete call cut before its closing marker is a call.
  const auto whole =
      parse("<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}", o, true);
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].arguments, R"({"query":"x"})");
  // Invalid JSON after the arguments began: the call stands, closed before the bad byte.
  const auto bad = parse(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", o);
  ASSERT_EQ(bad.tool_calls.size(), 1u);
  EXPECT_EQ(bad.tool_calls[0].arguments, "{}");
  ASSERT_TRUE(one_problem(bad, "not valid JSON"));
  // Nesting past the bound stops the arguments there.
  const std::string deep =
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + std::string(5000, '[') +
      std::string(5000, ']') + "}}</tool_call>";
  const auto d = parse(deep, o);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_LT(d.tool_calls[0].arguments.size(), 200u);
  // Every format: a call cut inside its arguments.
  const std::pair<ToolFormat, std::string> formats[] = {
      {ToolFormat::kQwen3Coder,
       "<tool_call><function=search><parameter=query>a</parameter><parameter=x>"},
      {ToolFormat::kGlm45, "<tool_call>search<arg_key>query</arg_key><arg_value>a</arg_value><arg"},
      {ToolFormat::kDeepSeekV3,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"a"},
      {ToolFormat::kKimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
       "<|tool_call_argument_begin|>{\"query\": \"a"},
      {ToolFormat::kMistral, "[TOOL_CALLS]search[ARGS]{\"query\": \"a"},
      {ToolFormat::kHarmony,
       "<|channel|>commentary to=functions.search <|constrain|>json<|message|>{\"query\": \"a"},
      {ToolFormat::kLlama3, "{\"name\": \"search\", \"parameters\": {\"query\": \"a"},
      {ToolFormat::kMiniMaxM2,
       "<minimax:tool_call><invoke name=\"search\"><parameter name=\"query\">a</parameter>"
       "<parameter name=\"x\">"},
      {ToolFormat::kSeedOss,
       "<seed:tool_call>\n<function=search>\n<parameter=query>a</parameter>\n<parameter=x>"},
  };
  for (const auto& [f, text] : formats) {
    const auto r = parse(text, opts(f), true);
    ASSERT_EQ(r.tool_calls.size(), 1u) << tool_format_name(f);
    EXPECT_EQ(r.tool_calls[0].name, "search");
    EXPECT_EQ(args(r, 0), json({{"query", "a"}})) << tool_format_name(f);
    EXPECT_EQ(r.content, "") << tool_format_name(f);
  }
}

// A stream sends a call's name first, then its arguments in pieces as the model writes them
// (the JSON formats byte by byte, the XML formats one parameter at a time).
TEST(Streaming, ArgumentsComeInPieces) {
  const std::string code = "def f(x):\n    return \"</tool_call>\" + x  # <|call|>";
  const json a = {{"query", code}, {"n", 3}};
  // The XML formats have no quoting: a value cannot hold the block's closing marker.
  const std::string xcode = "def f(x):\n    return \"<tool_call>\" + x  # <|call|>";
  const json xa = {{"query", xcode}, {"n", 3}};
  const std::string aj = a.dump();
  const std::pair<ToolFormat, std::string> cases[] = {
      {ToolFormat::kHermes,
       "Let me look. <tool_call>\n{\"name\": \"search\", \"arguments\": " + aj + "}\n</tool_call>"},
      {ToolFormat::kLlama3, "{\"name\": \"search\", \"parameters\": " + aj + "}"},
      {ToolFormat::kMistral, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": " + aj + "}]"},
      {ToolFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"search\", \"id\": \"abcDEF123\", \"arguments\": " + aj + "}]"},
      {ToolFormat::kMistral, "[TOOL_CALLS]search[ARGS]" + aj},
      {ToolFormat::kDeepSeekV3, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>" +
                                    aj + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolFormat::kKimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
       "<|tool_call_argument_begin|>" +
           aj + "<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolFormat::kHarmony,
       "<|channel|>commentary to=functions.search <|constrain|>json<|message|>" + aj + "<|call|>"},
      {ToolFormat::kQwen3Coder,
       "<tool_call>\n<function=search>\n<parameter=query>\n" + xcode +
           "\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>"},
      {ToolFormat::kGlm45, "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>" + xcode +
                               "</arg_value>\n<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n"
                               "</tool_call>"},
      {ToolFormat::kMiniMaxM2,
       "<minimax:tool_call>\n<invoke name=\"search\">\n<parameter "
       "name=\"query\">" +
           xcode +
           "</parameter>\n<parameter name=\"n\">3</parameter>\n</invoke>\n"
           "</minimax:tool_call>"},
      {ToolFormat::kSeedOss, "<seed:tool_call>\n<function=search>\n<parameter=query>" + xcode +
                                 "</parameter>\n<parameter=n>3</parameter>\n</function>\n"
                                 "</seed:tool_call>"},
  };
  for (const auto& [f, text] : cases) {
    const auto whole = parse(text, opts(f));  // also: every stream adds up to this
    ASSERT_EQ(whole.tool_calls.size(), 1u) << tool_format_name(f) << ": " << text;
    const bool xml = f == ToolFormat::kQwen3Coder || f == ToolFormat::kGlm45 ||
                     f == ToolFormat::kMiniMaxM2 || f == ToolFormat::kSeedOss;
    EXPECT_EQ(args(whole, 0), xml ? xa : a) << tool_format_name(f);
    EXPECT_TRUE(whole.problems.empty()) << tool_format_name(f) << ": " << whole.problems[0];
    // Mistral's JSON call with no id before its arguments may write one after them: it is sent
    // whole when its object closes (before the array's ']').
    const bool held = f == ToolFormat::kMistral && text.find("[{") != std::string::npos &&
                      text.find("\"id\"") == std::string::npos;
    // A byte at a time: the header before any argument, then many pieces.
    OutputParser p(opts(f));
    int pieces = 0, headers = 0;
    std::string assembled, content;
    for (size_t i = 0; i <= text.size(); ++i) {
      const OutputDelta d = i < text.size() ? p.push(text.substr(i, 1)) : p.finish(false);
      content += d.content;
      for (const auto& t : d.tool_calls) {
        if (!t.id.empty()) {
          ++headers;
          EXPECT_EQ(assembled, "");
          if (held) {
            EXPECT_EQ(i, text.size() - 2) << "sent when the object closes";
          }
        } else {
          ++pieces;
          assembled += t.arguments;
        }
      }
    }
    EXPECT_EQ(headers, 1);
    EXPECT_EQ(assembled, whole.tool_calls[0].arguments);
    EXPECT_GE(pieces, held ? 1 : xml ? 3 : int(aj.size()) / 2) << tool_format_name(f);
    EXPECT_EQ(content, whole.content);
  }
}

// The format's own markers inside a JSON string of the arguments are text: the call is not
// split there (the arguments above hold </tool_call> and <|call|>; these the others').
TEST(Streaming, MarkersInsideArgumentStrings) {
  const std::pair<ToolFormat, std::string> cases[] = {
      {ToolFormat::kDeepSeekV3,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": "
       "\"a<｜tool▁call▁end｜><｜tool▁calls▁end｜>b\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolFormat::kKimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
       "<|tool_call_argument_begin|>{\"query\": \"a<|tool_call_end|><|tool_calls_section_end|>b\"}"
       "<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolFormat::kMistral, "[TOOL_CALLS]search[ARGS]{\"query\": \"a[TOOL_CALLS]x[ARGS]{}b\"}"},
      {ToolFormat::kLlama3,
       "{\"name\": \"search\", \"parameters\": {\"query\": \"a<|python_tag|>b\"}}"},
      {ToolFormat::kHarmony,
       "<|channel|>commentary to=functions.search <|constrain|>json<|message|>{\"query\": "
       "\"a<|end|><|start|>b\"}<|call|>"},
      {ToolFormat::kHermes,
       "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"a</tool_call>\\\"<tool_call>"
       "b\"}}</tool_call>"},
  };
  for (const auto& [f, text] : cases) {
    const auto r = parse(text, opts(f));
    ASSERT_TRUE(only_calls(r, 1)) << tool_format_name(f);
    const std::string q = args(r, 0).at("query").get<std::string>();
    EXPECT_EQ(q.front(), 'a') << tool_format_name(f);
    EXPECT_EQ(q.back(), 'b') << tool_format_name(f);
    // The whole-block parsers agree (a layout that is not streamed: name after arguments).
  }
  const auto late = parse(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{"
      "\"query\": "
      "\"```<｜tool▁call▁end｜>\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      opts(ToolFormat::kDeepSeekV3));
  ASSERT_TRUE(one_call(late, json({{"query", "```<｜tool▁call▁end｜>"}})));
  const auto name_last = parse(
      "<tool_call>{\"arguments\": {\"query\": \"</tool_call>\"}, \"name\": \"search\"}</tool_call>",
      opts(ToolFormat::kHermes));
  ASSERT_TRUE(one_call(name_last, json({{"query", "</tool_call>"}})));
}

// In the XML formats a raw value may hold the block's markers (code that writes
// "</tool_call>"): inside <parameter=..> / <arg_value> they are text, and the call ends at
// the marker after its last value; streamed at every piece size the same (parse()).
TEST(Streaming, XmlValuesHoldingTheEndMarker) {
  const std::string code = "print(\"</tool_call>\")\n# <tool_call> </tool_call";
  const std::pair<ToolFormat, std::string> cases[] = {
      {ToolFormat::kQwen3Coder,
       "<tool_call>\n<function=search>\n<parameter=query>\n" + code +
           "\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n"
           "<parameter=query>\nb\n</parameter>\n</function>\n</tool_call>"},
      {ToolFormat::kGlm45, "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>" + code +
                               "</arg_value>\n</tool_call><tool_call>search\n<arg_key>query"
                               "</arg_key>\n<arg_value>b</arg_value>\n</tool_call>"},
  };
  for (const auto& [f, text] : cases) {
    const auto r = parse(text, opts(f));
    ASSERT_TRUE(only_calls(r, 2)) << tool_format_name(f);
    EXPECT_EQ(args(r, 0), json({{"query", code}})) << tool_format_name(f);
    EXPECT_EQ(args(r, 1), json({{"query", "b"}})) << tool_format_name(f);
  }
  // A value never closed: the marker in it is text, so the call runs to the end of the
  // output and is taken as cut there (as when the closing marker is an end-of-generation
  // token): the unfinished parameter is dropped. (Before, the marker ended the block and the
  // call was refused as malformed, "tail" being content.)
  const auto open = parse("<tool_call>\n<function=search>\n<parameter=query>\nx</tool_call> tail",
                          opts(ToolFormat::kQwen3Coder));
  ASSERT_TRUE(one_call(open, json::object()));
  EXPECT_EQ(open.content, "");
}

TEST(ToolChoice, NoneAndParallel) {
  ParseOptions o = opts(ToolFormat::kHermes);
  o.parse_tools = false;  // tool_choice "none": markers are text
  const std::string text = "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>";
  EXPECT_EQ(parse(text, o).content, text);
  o.parse_tools = true;
  o.parallel_tool_calls = false;
  const auto one = parse(text + text, o);
  EXPECT_EQ(one.tool_calls.size(), 1u);
  EXPECT_EQ(one.problems.size(), 1u);
}

// Random text made of the formats' markers and JSON pieces: whatever the model writes, the
// parser ends without throwing, and every stream gives the whole text's answer.
TEST(MalformedCalls, RandomMarkerSoup) {
  const std::vector<std::string> pieces = {
      "<tool_call>",
      "</tool_call>",
      "{\"name\": \"search\", \"arguments\": {\"query\": \"q\"}}",
      "<think>",
      "</think>",
      "[TOOL_CALLS]",
      "[ARGS]",
      "[CALL_ID]",
      "abcDEF123",
      "[{\"name\": \"search\", \"arguments\": {\"query\": \"q\"}",
      ", \"id\": \"xyzXYZ789\"}",
      "]",
      "{",
      "}",
      "\"",
      "\n",
      " text ",
      "<|channel|>",
      "analysis",
      "final",
      "commentary to=functions.search",
      "<|message|>",
      "<|end|>",
      "<|call|>",
      "<|start|>assistant",
      "<function=search>",
      "<parameter=query>",
      "</parameter>",
      "</function>",
      "<arg_key>",
      "</arg_key>",
      "<arg_value>",
      "</arg_value>",
      "<｜tool▁calls▁begin｜>",
      "<｜tool▁call▁begin｜>",
      "<｜tool▁sep｜>",
      "<｜tool▁call▁end｜>",
      "<｜tool▁calls▁end｜>",
      "<|tool_calls_section_begin|>",
      "<|tool_call_begin|>",
      "<|tool_call_argument_begin|>",
      "<|tool_call_end|>",
      "<|tool_calls_section_end|>",
      "<minimax:tool_call>",
      "</minimax:tool_call>",
      "<invoke name=\"search\">",
      "<parameter name=\"query\">",
      "</invoke>",
      "<seed:tool_call>",
      "</seed:tool_call>",
      "<seed:think>",
      "</seed:think>",
      "<",
      "|"};
  std::mt19937 rng(1234);
  const ToolFormat formats[] = {
      ToolFormat::kHermes,    ToolFormat::kQwen3Coder, ToolFormat::kDeepSeekV3, ToolFormat::kGlm45,
      ToolFormat::kKimiK2,    ToolFormat::kHarmony,    ToolFormat::kMistral,    ToolFormat::kLlama3,
      ToolFormat::kMiniMaxM2, ToolFormat::kSeedOss};
  for (int iter = 0; iter < 400; ++iter) {
    std::string text;
    const int n = 1 + int(rng() % 12);
    for (int k = 0; k < n; ++k) text += pieces[rng() % pieces.size()];
    ParseOptions o = opts(formats[iter % std::size(formats)], iter % 3 != 0);
    o.starts_in_reasoning = iter % 5 == 0;
    o.extract_reasoning = iter % 7 != 0;
    parse(text, o, iter % 2 == 0);
  }
}

// A call that never closes, pushed a byte at a time (a model looping inside a call until
// max_tokens): held to the end, then text. The search for its end resumes where it stopped, so
// this is linear; a rescan per piece would take minutes here.
TEST(MalformedCalls, LongUnclosedCallsAreHeldThenText) {
  const std::string filler(200000, 'x');
  const std::pair<ToolFormat, std::string> cases[] = {
      {ToolFormat::kHermes, "<tool_call>{\"name\": \"" + filler},
      {ToolFormat::kMistral, "[TOOL_CALLS]" + filler},
      {ToolFormat::kDeepSeekV3, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" + filler},
      {ToolFormat::kKimiK2, "<|tool_calls_section_begin|><|tool_call_begin|>functions." + filler},
      {ToolFormat::kQwen3Coder, "<tool_call><function=f><parameter=a>" + filler},
      {ToolFormat::kGlm45, "<tool_call>" + filler},
      {ToolFormat::kMiniMaxM2, "<minimax:tool_call><invoke name=\"" + filler},
      {ToolFormat::kSeedOss, "<seed:tool_call><function=" + filler},
      {ToolFormat::kHarmony,
       "<|channel|>commentary to=functions.f <|constrain|>json<|message|>\"" + filler}};
  for (const auto& [format, text] : cases) {
    if (format == ToolFormat::kQwen3Coder) {
      // The function is named: the call was sent; the unfinished parameter is not.
      const auto r = parse_output(text, opts(format), true);
      ASSERT_EQ(r.tool_calls.size(), 1u);
      EXPECT_EQ(r.tool_calls[0].arguments, "{}");
      continue;
    }
    OutputParser p(opts(format));
    std::string shown;
    for (char c : text) {
      const OutputDelta d = p.push(std::string_view(&c, 1));
      EXPECT_TRUE(d.empty());
      if (!d.empty()) break;
    }
    shown += p.finish(true).content;
    EXPECT_EQ(shown, text) << tool_format_name(format);
    EXPECT_TRUE(p.result().tool_calls.empty());
  }
  // A long argument streamed a byte at a time: linear too, every byte sent once.
  OutputParser p(opts(ToolFormat::kMistral));
  std::string sent;
  const std::string text = "[TOOL_CALLS]f[ARGS]{\"a\": \"" + filler;
  for (char c : text) {
    for (const auto& t : p.push(std::string_view(&c, 1)).tool_calls) sent += t.arguments;
  }
  for (const auto& t : p.finish(true).tool_calls) sent += t.arguments;
  EXPECT_EQ(sent, "{\"a\":\"" + filler + "\"}");
}

// The golden set's templates (tests/template/templates).
std::string read_template(const std::string& name) {
  std::ifstream f(std::string(LYNX_SOURCE_DIR) + "/tests/template/templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

TEST(DetectFormat, FromReleasedTemplates) {
  struct Case {
    const char* file;
    ToolFormat tools;
    bool think;
  };
  const Case cases[] = {
      {"Qwen-Qwen3-0.6B.jinja", ToolFormat::kHermes, true},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::kHermes, false},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolFormat::kHermes, false},
      {"Qwen3-Coder.jinja", ToolFormat::kQwen3Coder, false},
      {"deepseek-ai-DeepSeek-V3.1.jinja", ToolFormat::kDeepSeekV3, true},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolFormat::kDeepSeekV3, true},
      {"GLM-4.6.jinja", ToolFormat::kGlm45, true},
      {"moonshotai-Kimi-K2.jinja", ToolFormat::kKimiK2, false},
      {"openai-gpt-oss-120b.jinja", ToolFormat::kHarmony, false},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::kMistral, false},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolFormat::kMistral, false},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolFormat::kLlama3, false},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ToolFormat::kNone, false},
      {"MiniMax-M2.jinja", ToolFormat::kMiniMaxM2, true},
  };
  for (const Case& c : cases) {
    const OutputFormat f = detect_output_format(read_template(c.file));
    EXPECT_EQ(tool_format_name(f.tools), tool_format_name(c.tools)) << c.file;
    EXPECT_EQ(f.think_tags, c.think) << c.file;
  }
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_EQ(tool_format_from_name("glm-4.5"), ToolFormat::kGlm45);
  EXPECT_EQ(tool_format_from_name("minimax-m2"), ToolFormat::kMiniMaxM2);
  EXPECT_EQ(tool_format_from_name("seed-oss"), ToolFormat::kSeedOss);
  // Seed-OSS's reasoning tags are its own, read off the template too.
  const OutputFormat seed = detect_output_format(read_template("ByteDance-Seed-OSS.jinja"));
  EXPECT_EQ(seed.tools, ToolFormat::kSeedOss);
  EXPECT_TRUE(seed.think_tags);
  EXPECT_EQ(seed.think_open, "<seed:think>");
  EXPECT_EQ(seed.think_close, "</seed:think>");
  EXPECT_TRUE(prompt_opens_reasoning("<seed:bos>assistant\n<seed:think>", seed.think_open));
  EXPECT_FALSE(prompt_opens_reasoning("<seed:bos>assistant\n<seed:think>"));
  EXPECT_EQ(detect_output_format(read_template("Qwen-Qwen3-0.6B.jinja")).think_open, "<think>");
  // Magistral writes its reasoning between [THINK] and [/THINK] (its template names them).
  const OutputFormat magistral = detect_output_format(
      "{{- '[THINK]' + message.reasoning_content + '[/THINK]' }}{{- '[TOOL_CALLS]' + name }}");
  EXPECT_EQ(magistral.tools, ToolFormat::kMistral);
  EXPECT_TRUE(magistral.think_tags);
  EXPECT_EQ(magistral.think_open, "[THINK]");
  EXPECT_EQ(magistral.think_close, "[/THINK]");
  EXPECT_FALSE(tool_format_from_name("nope").has_value());
}

}  // namespace
}  // namespace lynx::chatparse
