// tool_choice "required" / a named function enforced by a grammar (src/server/tool_grammar.cc):
// each covered format's grammar accepts the calls as the released templates write them and
// refuses others; random sentences of every grammar parse, through that format's chat parser,
// as calls of the right tools whose arguments validate; control-token markers can be sampled;
// and a served model answers a forced request with the call, whole and streamed.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <unordered_map>

#include "../grammar/json_check.h"
#include "server/api.h"
#include "server/tool_grammar.h"
#include "util.h"

namespace lynx::server {
namespace {

using chatparse::ToolFormat;
using grammar::kDead;
using grammar::Matcher;
using grammar::StateId;

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]},
                   "days": {"type": "integer"}},
    "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "search", "parameters": {
    "properties": {"q": {"type": "string"},
                   "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
    "required": ["q"]}}},
  {"type": "function", "function": {"name": "ping"}},
  {"type": "function", "function": {"name": "by_id", "parameters": {"type": "object",
    "properties": {"id": {"type": "string", "pattern": "^a"}}}}}
])";

chatparse::ParseOptions options(ToolFormat f, bool think, bool in_reasoning, bool parallel) {
  chatparse::ParseOptions o;
  o.format = {f, think};
  if (f == ToolFormat::kSeedOss) {  // the family's own reasoning tags
    o.format.think_open = "<seed:think>";
    o.format.think_close = "</seed:think>";
  }
  o.parse_tools = true;
  o.starts_in_reasoning = in_reasoning;
  o.parallel_tool_calls = parallel;
  o.tools = json::parse(kTools);
  return o;
}

ToolGrammar tool_grammar(const chatparse::ParseOptions& o, std::string_view only = "") {
  return tool_call_grammar(o, nlohmann::ordered_json::parse(kTools), only);
}

std::shared_ptr<const grammar::Grammar> compile(const chatparse::ParseOptions& o,
                                                std::string_view only = "") {
  const ToolGrammar g = tool_grammar(o, only);
  EXPECT_FALSE(g.gbnf.empty());
  return grammar::Grammar::parse(g.gbnf);
}

bool accepts(const std::shared_ptr<const grammar::Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.accept(text) && m.accepting();
}

TEST(ToolGrammar, AcceptsTheTemplatesLayoutsAndRefusesOthers) {
  const std::string args = R"({"city": "Paris", "unit": "c"})";
  struct Case {
    ToolFormat f;
    std::vector<std::string> good, bad;
  };
  const std::vector<Case> cases = {
      {ToolFormat::kHermes,
       {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
        "{\"name\": \"search\", \"arguments\": {\"q\": \"x\", \"tags\": [\"a\"]}}\n</tool_call>"},
       {"Sure. <tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
        // a required property missing, a value outside the enum
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"k\"}}"
        "</tool_call>",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n"}},
      {ToolFormat::kMistral,
       {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + args +
            ", \"id\": \"abcDEF123\"}]",
        "[TOOL_CALLS]get_weather[ARGS]" + args + "[TOOL_CALLS]ping[ARGS]{}",
        "[TOOL_CALLS]get_weather[CALL_ID]abcDEF123[ARGS]" + args +
            "[TOOL_CALLS]ping[CALL_ID]xyzXYZ789[ARGS]{}"},
       {"[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"short\"}]",
        "[TOOL_CALLS]nope[ARGS]{}", "ping[ARGS]{}", "[TOOL_CALLS]ping[CALL_ID]short[ARGS]{}",
        "[TOOL_CALLS]ping[ARGS][CALL_ID]abcDEF123{}"}},
      {ToolFormat::kLlama3,
       {"{\"name\": \"get_weather\", \"parameters\": " + args + "}",
        "<|python_tag|>{\"name\": \"ping\", \"parameters\": {}}; {\"name\": \"search\", "
        "\"parameters\": {\"q\": \"\"}}"},
       {"{\"name\": \"ping\", \"arguments\": {}}", "{\"name\": \"ping\"}"}},
      {ToolFormat::kDeepSeekV3,
       {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" + args +
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>ping\n```json\n{}\n```"
        "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>ping<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜>"},
       {"<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>ping<｜tool▁sep｜>{}<｜tool▁call▁end｜>"}},
      {ToolFormat::kKimiK2,
       {"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        "<|tool_call_argument_begin|>" +
        args + "<|tool_call_end|><|tool_calls_section_end|>"},
       {"<|tool_calls_section_begin|><|tool_call_begin|>functions.ping"
        "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"}},
      {ToolFormat::kQwen3Coder,
       {"<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
        "<parameter=unit>\nc\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
        "</tool_call>",
        "<tool_call>\n<function=ping>\n</function>\n</tool_call>\n<tool_call>\n<function=search>"
        "\n<parameter=q>\na < b\n</parameter>\n<parameter=tags>\n[\"x\"]\n</parameter>\n"
        "</function>\n</tool_call>"},
       {// city longer than 12, unit missing, a closing tag inside a value, an unknown parameter
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nLlanfairpwllgwyngyll\n"
        "</parameter>\n<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
        "</function>\n</tool_call>",
        "<tool_call>\n<function=search>\n<parameter=q>\na</b>\n</parameter>\n</function>\n"
        "</tool_call>",
        "<tool_call>\n<function=search>\n<parameter=q>\na\n</parameter>\n<parameter=zz>\n1\n"
        "</parameter>\n</function>\n</tool_call>"}},
      {ToolFormat::kGlm45,
       {"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n"
        "<arg_key>unit</arg_key>\n<arg_value>f</arg_value>\n</tool_call>",
        "<tool_call>ping\n</tool_call>"},
       {"<tool_call>get_weather\n<arg_key>unit</arg_key>\n<arg_value>f</arg_value>\n</tool_call>",
        "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x</arg_value>\n<arg_key>tags"
        "</arg_key>\n<arg_value>[1]</arg_value>\n</tool_call>"}},
      {ToolFormat::kMiniMaxM2,
       {"<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">New York"
        "</parameter>\n<parameter name=\"unit\">c</parameter>\n<parameter name=\"days\">3"
        "</parameter>\n</invoke>\n</minimax:tool_call>",
        "<minimax:tool_call>\n<invoke name=\"ping\">\n</invoke>\n<invoke name=\"search\">\n"
        "<parameter name=\"q\">a < b</parameter>\n<parameter name=\"tags\">[\"x\"]</parameter>\n"
        "</invoke>\n</minimax:tool_call>"},
       {// unit missing, a closing tag inside a value, an unknown parameter, no block
        "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Rome"
        "</parameter>\n</invoke>\n</minimax:tool_call>",
        "<minimax:tool_call>\n<invoke name=\"search\">\n<parameter name=\"q\">a</b></parameter>\n"
        "</invoke>\n</minimax:tool_call>",
        "<minimax:tool_call>\n<invoke name=\"search\">\n<parameter name=\"q\">a</parameter>\n"
        "<parameter name=\"zz\">1</parameter>\n</invoke>\n</minimax:tool_call>",
        "<invoke name=\"ping\">\n</invoke>\n"}},
      {ToolFormat::kSeedOss,
       {"<seed:tool_call>\n<function=get_weather>\n<parameter=city>New York</parameter>\n"
        "<parameter=unit>c</parameter>\n<parameter=days>3</parameter>\n</function>\n"
        "</seed:tool_call>",
        "<seed:tool_call>\n<function=ping>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n"
        "<function=search>\n<parameter=q>a < b</parameter>\n<parameter=tags>[\"x\"]</parameter>"
        "\n</function>\n</seed:tool_call>"},
       {// unit missing, a closing tag inside a value, an unknown parameter, Qwen3-Coder's block
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Rome</parameter>\n"
        "</function>\n</seed:tool_call>",
        "<seed:tool_call>\n<function=search>\n<parameter=q>a</b></parameter>\n</function>\n"
        "</seed:tool_call>",
        "<seed:tool_call>\n<function=search>\n<parameter=q>a</parameter>\n<parameter=zz>1"
        "</parameter>\n</function>\n</seed:tool_call>",
        "<tool_call>\n<function=ping>\n</function>\n</tool_call>"}},
      {ToolFormat::kHarmony,
       {"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + args,
        "<|channel|>analysis<|message|>Need the weather, a < b.<|end|><|start|>assistant"
        "<|channel|>commentary to=functions.ping <|constrain|>json<|message|>{}<|call|>"},
       {"<|channel|>final<|message|>Hi",
        "<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}",
        "<|channel|>analysis<|message|>a<|end|><|channel|>commentary to=functions.ping "
        "<|constrain|>json<|message|>{}"}},
  };
  for (const Case& c : cases) {
    const auto g = compile(options(c.f, false, false, true));
    for (const auto& s : c.good) {
      EXPECT_TRUE(accepts(g, s)) << tool_format_name(c.f) << ": " << s;
      // What the grammar accepts, the format's parser reads as calls, and nothing else.
      const auto out = chatparse::parse_output(s, options(c.f, false, false, true));
      EXPECT_FALSE(out.tool_calls.empty()) << s;
      EXPECT_EQ(out.content, "") << s;
    }
    for (const auto& s : c.bad) EXPECT_FALSE(accepts(g, s)) << tool_format_name(c.f) << ": " << s;
  }
  // parallel_tool_calls false: one call; a named function: only it.
  const auto one = compile(options(ToolFormat::kHermes, false, false, false));
  const std::string ping = "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>";
  EXPECT_TRUE(accepts(one, ping));
  EXPECT_FALSE(accepts(one, ping + "\n" + ping));
  const auto named = compile(options(ToolFormat::kHermes, false, false, true), "search");
  EXPECT_FALSE(accepts(named, ping));
  EXPECT_TRUE(accepts(
      named, "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}</tool_call>"));
}

TEST(ToolGrammar, ReasoningBeforeTheCall) {
  const std::string call = "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>";
  const auto open = compile(options(ToolFormat::kHermes, true, false, true));
  EXPECT_TRUE(accepts(open, call));
  EXPECT_TRUE(accepts(open, "<think>\nI should ping. a<b </thin </think>\n\n" + call));
  EXPECT_TRUE(accepts(open, "<think><</think>" + call));
  // The block ends at its first </think>: no second one, no text after it but the call.
  EXPECT_FALSE(accepts(open, "<think>a</think>b</think>" + call));
  EXPECT_FALSE(accepts(open, "<think>a</think>b" + call));
  EXPECT_FALSE(accepts(open, "<think>a</think>"));
  // The prompt opened the block: the answer starts inside it and must close it.
  const auto inside = compile(options(ToolFormat::kHermes, true, true, true));
  EXPECT_TRUE(accepts(inside, "plan</think>\n" + call));
  EXPECT_TRUE(accepts(inside, "</think>" + call));
  EXPECT_FALSE(accepts(inside, call));
  // Seed-OSS: its own tags, not <think>.
  const std::string seed = "<seed:tool_call>\n<function=ping>\n</function>\n</seed:tool_call>";
  const auto s = compile(options(ToolFormat::kSeedOss, true, false, true));
  EXPECT_TRUE(accepts(s, "<seed:think>Ping.</seed:think>\n" + seed));
  EXPECT_FALSE(accepts(s, "<think>Ping.</think>\n" + seed));
  EXPECT_TRUE(accepts(compile(options(ToolFormat::kSeedOss, true, true, true)),
                      "Ping.</seed:think>" + seed));
  const ToolGrammar sg = tool_grammar(options(ToolFormat::kSeedOss, true, false, true));
  EXPECT_NE(std::find(sg.markers.begin(), sg.markers.end(), "<seed:think>"), sg.markers.end());
}

TEST(ToolGrammar, UncoveredFormatsAndSchemasTheGrammarCannotEnforce) {
  EXPECT_FALSE(tool_grammar_covers(ToolFormat::kNone));
  EXPECT_EQ(tool_grammar(options(ToolFormat::kNone, false, false, true)).gbnf, "");
  // The XML formats: a string parameter with a pattern makes that tool's parameters free.
  for (ToolFormat f : {ToolFormat::kQwen3Coder, ToolFormat::kGlm45, ToolFormat::kMiniMaxM2,
                       ToolFormat::kSeedOss}) {
    const ToolGrammar x = tool_grammar(options(f, false, false, true));
    ASSERT_EQ(x.free_arguments.size(), 1u) << tool_format_name(f);
    EXPECT_NE(x.free_arguments[0].find("'pattern'"), std::string::npos) << x.free_arguments[0];
  }
  const ToolGrammar g = tool_grammar(options(ToolFormat::kHermes, false, false, true));
  ASSERT_EQ(g.free_arguments.size(), 1u);
  EXPECT_NE(g.free_arguments[0].find("by_id: "), std::string::npos);
  EXPECT_NE(g.free_arguments[0].find("pattern"), std::string::npos);
  // Its arguments are any object.
  EXPECT_TRUE(accepts(grammar::Grammar::parse(g.gbnf),
                      "<tool_call>{\"name\": \"by_id\", \"arguments\": {\"x\": [1]}}</tool_call>"));
}

// The shortest continuation from `s` to an accepting state (breadth first over bytes).
std::string to_accept(Matcher& m, StateId s) {
  std::unordered_map<StateId, std::pair<StateId, int>> prev{{s, {kDead, -1}}};
  std::deque<StateId> q{s};
  while (!q.empty()) {
    const StateId x = q.front();
    q.pop_front();
    if (m.accepting(x)) {
      std::string path;
      for (StateId y = x; prev[y].second >= 0; y = prev[y].first) path += char(prev[y].second);
      return {path.rbegin(), path.rend()};
    }
    // The bytes tried, narrowest first: ASCII that opens no array or object (nesting and
    // incomplete UTF-8 characters make thousands of states within a few bytes), else any
    // ASCII, else any byte (DeepSeek's markers).
    std::vector<int> next;
    for (int pass = 0; pass < 3 && next.empty(); ++pass) {
      for (int b = 0; b < (pass < 2 ? 0x80 : 0x100); ++b) {
        if (pass == 0 && (b == '[' || b == '{')) continue;
        if (m.step(x, uint8_t(b)) != kDead) next.push_back(b);
      }
    }
    for (int b : next) {
      const StateId y = m.step(x, uint8_t(b));
      if (prev.emplace(y, std::make_pair(x, b)).second) q.push_back(y);
    }
  }
  ADD_FAILURE() << "no way to an accepting state";
  return "";
}

// A random sentence of the grammar: random allowed bytes (mostly printable ASCII), stopping
// at random where accepting; past `budget` bytes, the shortest way to the end.
std::string random_sentence(const std::shared_ptr<const grammar::Grammar>& g, std::mt19937& rng,
                            size_t budget) {
  Matcher m(g);
  StateId s = m.start();
  std::string out;
  while (out.size() < budget) {
    if (m.accepting(s) && rng() % 8 == 0) return out;
    std::vector<uint8_t> ascii, any;
    for (int b = 0; b < 256; ++b) {
      if (m.step(s, uint8_t(b)) == kDead) continue;
      any.push_back(uint8_t(b));
      if ((b >= 0x20 && b < 0x7F) || b == '\n') ascii.push_back(uint8_t(b));
    }
    if (any.empty()) {
      EXPECT_TRUE(m.accepting(s)) << "a dead end after: " << out;
      return out;
    }
    const auto& pick = !ascii.empty() && rng() % 10 != 0 ? ascii : any;
    const uint8_t b = pick[rng() % pick.size()];
    out += char(b);
    s = m.step(s, b);
  }
  return out + to_accept(m, s);
}

TEST(ToolGrammar, RandomSentencesParseAsValidCalls) {
  const json tools = json::parse(kTools);
  auto schema_of = [&](const std::string& name) {
    for (const json& t : tools) {
      if (t["function"]["name"] == name) return t["function"].value("parameters", json::object());
    }
    return json();
  };
  std::mt19937 rng(11);
  int sentences = 0;
  for (ToolFormat f :
       {ToolFormat::kHermes, ToolFormat::kMistral, ToolFormat::kLlama3, ToolFormat::kDeepSeekV3,
        ToolFormat::kKimiK2, ToolFormat::kQwen3Coder, ToolFormat::kGlm45, ToolFormat::kHarmony,
        ToolFormat::kMiniMaxM2, ToolFormat::kSeedOss}) {
    for (int variant = 0; variant < 8; ++variant) {
      const bool parallel = variant & 1, think = (variant & 2) && f != ToolFormat::kHarmony;
      const bool inside = think && (variant & 4);
      const std::string only = variant == 4 ? "get_weather" : "";
      const chatparse::ParseOptions o = options(f, think, inside, parallel);
      const auto g = compile(o, only);
      for (int r = 0; r < 12; ++r) {
        std::string text;
        try {
          text = random_sentence(g, rng, 300);
        } catch (const std::exception& e) {
          FAIL() << tool_format_name(f) << " variant " << variant << " r " << r << ": " << e.what();
        }
        ASSERT_TRUE(accepts(g, text)) << text;
        ++sentences;
        const auto out = chatparse::parse_output(text, o);
        const std::string at =
            std::string(tool_format_name(f)) + " variant " + std::to_string(variant) + ": " + text;
        EXPECT_TRUE(out.problems.empty()) << at << "\n" << out.problems[0];
        EXPECT_EQ(out.content, "") << at;
        ASSERT_FALSE(out.tool_calls.empty()) << at;
        if (!parallel) {
          EXPECT_EQ(out.tool_calls.size(), 1u) << at;
        }
        for (const auto& c : out.tool_calls) {
          if (!only.empty()) {
            EXPECT_EQ(c.name, only) << at;
          }
          const json schema = schema_of(c.name);
          ASSERT_FALSE(schema.is_null()) << c.name << " " << at;
          const json args = json::parse(c.arguments);
          EXPECT_TRUE(args.is_object()) << at;
          if (c.name != "by_id") {
            EXPECT_EQ(grammar::test::check(args, schema, schema), "") << at;
          }
        }
      }
    }
  }
  EXPECT_EQ(sentences, 10 * 8 * 12);
}

TEST(ToolGrammar, ControlTokenMarkersCanBeSampled) {
  Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "[TOOL_CALLS]", "[ARGS]", "<think>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
             TokenType::kControl, TokenType::kControl, TokenType::kUserDefined};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.types.push_back(TokenType::kByte);
  }
  v.scores.assign(v.tokens.size(), 0.f);
  const auto tok = Tokenizer::from_vocab(v);
  const ToolGrammar tg = tool_grammar(options(ToolFormat::kMistral, false, false, true));
  const auto g = grammar::Grammar::parse(tg.gbnf);
  const std::vector<int32_t> eog = {2};
  const auto with = grammar_token_index(*tok, eog, tg.markers);
  const auto without = grammar_token_index(*tok, eog, {});
  Matcher m(g);
  EXPECT_TRUE(with->allows(m, m.start(), 3));      // [TOOL_CALLS] as one token
  EXPECT_FALSE(without->allows(m, m.start(), 3));  // what a plain index does
  EXPECT_FALSE(with->allows(m, m.start(), 1));     // other control tokens: never
  EXPECT_FALSE(with->allows(m, m.start(), 2));     // the end: not before the call
  const StateId after_name = m.step(m.start(), std::string_view("[TOOL_CALLS]ping"));
  ASSERT_NE(after_name, kDead);
  EXPECT_TRUE(with->allows(m, after_name, 4));  // [ARGS]
  const StateId done = m.step(after_name, std::string_view("[ARGS]{}"));
  EXPECT_TRUE(with->allows(m, done, 2));
}

// A served model whose template writes Hermes calls: tool_choice "required" and a named
// function come back as that call, with arguments that validate, whole and streamed.
struct HermesServer {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("lynx-toolchoice-test-" + std::to_string(::getpid()) + ".gguf");
  std::unique_ptr<test::Running> srv;
  HermesServer() {
    SynthOptions o;
    o.shape = synth_shape("tiny-moe");
    o.shape.n_layer = 1;
    o.shape.n_vocab = 300;
    o.type = gguf::TensorType::F32;
    o.seed = 7;
    o.chat_template =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }} {% endfor %}</tools>"
        "<tool_call>{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    write_synth_model(o, path.string());
    ServerOptions so = test::tiny_options();
    so.model_path = path.string();
    so.n_ctx = 1024;
    srv = std::make_unique<test::Running>(so);
  }
  ~HermesServer() {
    srv.reset();
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

TEST(ToolChoiceServer, RequiredAndNamedAreTheCallWholeAndStreamed) {
  HermesServer h;
  const json tools = json::parse(kTools);
  // The random model writes strings without end: '"' (byte token 34) raised; the end token
  // (256) raised too, and allowed only where the grammar is complete.
  const std::string base = R"({"messages":[{"role":"user","content":"weather?"}],"max_tokens":400,)"
                           R"("logit_bias":{"256":30,"34":4},"tools":)" +
                           tools.dump();
  struct Case {
    std::string extra, want;  // want: the name the call must have ("" any tool)
  };
  const std::vector<Case> cases = {
      {R"(,"tool_choice":"required","temperature":0)", ""},
      {R"(,"tool_choice":"required","temperature":1,"seed":3,"parallel_tool_calls":false)", ""},
      {R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"temperature":1,)"
       R"("seed":5,"n":2)",
       "get_weather"},
  };
  for (const Case& c : cases) {
    const test::Reply r = test::post(*h.srv, "/v1/chat/completions", base + c.extra + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = r.j();
    for (const json& ch : j["choices"]) {
      EXPECT_EQ(ch["finish_reason"], "tool_calls") << r.body;
      EXPECT_FALSE(ch.contains("tool_choice_unmet")) << r.body;
      const json& calls = ch["message"]["tool_calls"];
      ASSERT_TRUE(calls.is_array() && !calls.empty()) << r.body;
      for (const json& call : calls) {
        const std::string name = call["function"]["name"];
        if (!c.want.empty()) {
          EXPECT_EQ(name, c.want);
        }
        const json args = json::parse(call["function"]["arguments"].get<std::string>());
        for (const json& t : tools) {
          if (t["function"]["name"] != name || !t["function"].contains("parameters")) continue;
          const json& schema = t["function"]["parameters"];
          if (name != "by_id") {
            EXPECT_EQ(grammar::test::check(args, schema, schema), "") << args;
          }
        }
      }
    }
    // Streamed: the same calls (the same seed draws the same tokens).
    const test::Stream s = test::post_stream(*h.srv, "/v1/chat/completions",
                                             base + c.extra + R"(,"n":1,"stream":true})");
    ASSERT_EQ(s.status, 200);
    std::vector<std::pair<std::string, std::string>> streamed;
    std::string finish;
    for (const json& chunk : s.chunks()) {
      if (chunk["choices"].empty()) continue;
      const json& ch = chunk["choices"][0];
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
      for (const json& d : ch["delta"].value("tool_calls", json::array())) {
        const json& fn = d["function"];
        if (fn.contains("name")) streamed.emplace_back(fn["name"], "");
        if (!streamed.empty()) streamed.back().second += fn.value("arguments", "");
      }
    }
    EXPECT_EQ(finish, "tool_calls");
    const json& calls = j["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(streamed.size(), calls.size());
    for (size_t k = 0; k < streamed.size(); ++k) {
      EXPECT_EQ(streamed[k].first, calls[k]["function"]["name"]);
      EXPECT_EQ(streamed[k].second, calls[k]["function"]["arguments"]);
    }
  }
  // tool_choice auto is free text as before; a second constraint on the forced call is a 400.
  const test::Reply aut =
      test::post(*h.srv, "/v1/chat/completions",
                 base + R"(,"max_tokens":8,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(aut.status, 200) << aut.body;
  EXPECT_EQ(aut.j()["choices"][0]["finish_reason"], "length");
  for (const std::string& bad :
       {std::string(R"(,"tool_choice":"required","response_format":{"type":"json_object"}})"),
        std::string(R"(,"tool_choice":{"type":"function","function":{"name":"ping"}},)"
                    R"("grammar":"root ::= \"x\""})")}) {
    const test::Reply r = test::post(*h.srv, "/v1/chat/completions", base + bad);
    EXPECT_EQ(r.status, 400) << r.body;
    const std::string param = r.j()["error"]["param"];
    EXPECT_TRUE(param == "response_format" || param == "grammar") << r.body;
    EXPECT_NE(r.body.find("tool_choice"), std::string::npos) << r.body;
  }
}

}  // namespace
}  // namespace lynx::server
