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
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(args(r, 0), json({{"query", "x"}}));
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallFormat, Qwen3CoderTypesValuesBySchema) {
  const auto r = parse(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n10001\n</parameter>\n"
      "<parameter=opts>\n{\"units\": \"c\"}\n</parameter>\n</function>\n</tool_call>",
      opts(ToolFormat::kQwen3Coder));
  ASSERT_EQ(r.tool_calls.size(), 1u) << (r.problems.empty() ? "" : r.problems[0]);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(args(r, 0),
            json::parse(R"({"city":"New York","days":3,"zip":"10001","opts":{"units":"c"}})"));
  EXPECT_EQ(r.content, "");
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
  ASSERT_EQ(r1.tool_calls.size(), 1u);
  EXPECT_EQ(args(r1, 0), json({{"city", "Rome"}}));
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
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(args(r, 0), json({{"city", "Berlin"}, {"days", 5}}));
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
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}, \"id\": "
      "\"abcDEF123\"}, {\"name\": \"search\", \"arguments\": {\"query\": \"z\"}}]",
      opts(ToolFormat::kMistral));
  ASSERT_EQ(arr.tool_calls.size(), 2u);
  EXPECT_EQ(arr.tool_calls[0].id, "abcDEF123");  // the model's id, 9 alphanumerics
  EXPECT_EQ(arr.tool_calls[1].id.size(), 9u);    // Mistral's templates refuse other ids
  const auto args_form = parse(
      "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}[TOOL_CALLS]search[ARGS]{\"query\": \"z\"}",
      opts(ToolFormat::kMistral));
  ASSERT_EQ(args_form.tool_calls.size(), 2u);
  EXPECT_EQ(args_form.tool_calls[0].name, "get_weather");
  EXPECT_EQ(args(args_form, 1), json({{"query", "z"}}));
  EXPECT_EQ(args_form.content, "");
}

TEST(ToolCallFormat, Llama3Json) {
  const auto r = parse(R"({"name": "get_weather", "parameters": {"city": "Quito"}})",
                       opts(ToolFormat::kLlama3));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(args(r, 0), json({{"city", "Quito"}}));
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
  const ParseOptions o = opts(ToolFormat::kHermes);
  const std::string bad =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
  const auto r = parse("Before " + bad, o);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, "Before " + bad);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("not valid JSON"), std::string::npos) << r.problems[0];
  // Cut off by max_tokens: the unfinished call is text, even where it would parse.
  const std::string cut = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}";
  const auto t = parse(cut, o, true);
  EXPECT_TRUE(t.tool_calls.empty());
  EXPECT_EQ(t.content, cut);
  // Ended by the end-of-generation token right after the JSON: a call.
  EXPECT_EQ(parse(cut, o, false).tool_calls.size(), 1u);
  // A name that is not a function name, arguments that are not an object, nesting past the
  // bound: text.
  EXPECT_TRUE(
      parse("<tool_call>{\"name\": \"a b\", \"arguments\": {}}</tool_call>", o).tool_calls.empty());
  EXPECT_TRUE(
      parse("<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", o).tool_calls.empty());
  const std::string deep =
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + std::string(5000, '[') +
      std::string(5000, ']') + "}}</tool_call>";
  EXPECT_EQ(parse(deep, o).content, deep);
  for (ToolFormat f : {ToolFormat::kQwen3Coder, ToolFormat::kGlm45, ToolFormat::kDeepSeekV3,
                       ToolFormat::kKimiK2, ToolFormat::kMistral, ToolFormat::kHarmony}) {
    const ParseOptions of = opts(f);
    for (const char* text :
         {"<tool_call><function=x><parameter=a>1</function></tool_call>",
          "<tool_call>get_weather<arg_key>city</arg_key></tool_call>",
          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
          "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_end|>"
          "<|tool_calls_section_end|>",
          "[TOOL_CALLS]f[ARGS]{oops", "[TOOL_CALLS][{\"name\": 1}]",
          "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":<|call|>"}) {
      const auto m = parse(text, of);
      EXPECT_TRUE(m.tool_calls.empty()) << tool_format_name(f) << ": " << text;
      EXPECT_FALSE(m.content.empty()) << tool_format_name(f) << ": " << text;
    }
  }
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
      "<",
      "|"};
  std::mt19937 rng(1234);
  const ToolFormat formats[] = {
      ToolFormat::kHermes, ToolFormat::kQwen3Coder, ToolFormat::kDeepSeekV3, ToolFormat::kGlm45,
      ToolFormat::kKimiK2, ToolFormat::kHarmony,    ToolFormat::kMistral,    ToolFormat::kLlama3};
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    const int n = 1 + int(rng() % 12);
    for (int k = 0; k < n; ++k) text += pieces[rng() % pieces.size()];
    ParseOptions o = opts(formats[iter % 8], iter % 3 != 0);
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
      {ToolFormat::kMistral, "[TOOL_CALLS]f[ARGS]{\"a\": \"" + filler},
      {ToolFormat::kHarmony,
       "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": \"" + filler}};
  for (const auto& [format, text] : cases) {
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
}

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
  };
  for (const Case& c : cases) {
    const OutputFormat f = detect_output_format(read_template(c.file));
    EXPECT_EQ(tool_format_name(f.tools), tool_format_name(c.tools)) << c.file;
    EXPECT_EQ(f.think_tags, c.think) << c.file;
  }
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_EQ(tool_format_from_name("glm-4.5"), ToolFormat::kGlm45);
  EXPECT_FALSE(tool_format_from_name("nope").has_value());
}

}  // namespace
}  // namespace lynx::chatparse
