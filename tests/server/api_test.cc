// Request parsing and stop-string streaming, without HTTP.
#include <gtest/gtest.h>

#include <map>

#include "lynx/model.h"
#include "server/api.h"
#include "util.h"

namespace lynx::server {
namespace {

struct Fixture {
  std::unique_ptr<Model> model = Model::load(test::tiny_model());
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(model->file());
  ApiModel api() const {
    ApiModel m;
    m.tok = tok.get();
    m.chat = chat_format_from_name("chatml");
    m.name = "tiny";
    m.n_ctx = 64;
    m.max_n = 4;
    return m;
  }
};

const Fixture& fx() {
  static const Fixture f;
  return f;
}

// Streams `text` byte by byte through the stop matcher (each byte is one token of the
// byte-level vocabulary) and returns what was shown, piece by piece.
std::vector<std::string> stream_text(const std::string& text, std::vector<std::string> stops,
                                     bool* stopped = nullptr) {
  StopTextStream s(*fx().tok, std::move(stops));
  std::vector<std::string> out;
  for (int32_t id : fx().tok->encode(text, false, false)) {
    out.push_back(s.push(id));
    if (s.stopped()) break;
  }
  if (!s.stopped()) out.push_back(s.finish());
  if (stopped) *stopped = s.stopped();
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x;
  return s;
}

TEST(StopTextStream, CutsBeforeTheStopStringAndHoldsBackPrefixes) {
  bool stopped = false;
  auto pieces = stream_text("hello wor-ld END tail", {"END"}, &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(join(pieces), "hello wor-ld ");
  // While "E" and "EN" could start the stop string they were not shown.
  pieces = stream_text("aEbENc", {"END"}, &stopped);
  EXPECT_FALSE(stopped);
  EXPECT_EQ(join(pieces), "aEbENc");
  ASSERT_EQ(pieces.size(), 7u);
  EXPECT_EQ(pieces[1], "");     // "E" held
  EXPECT_EQ(pieces[2], "Eb");   // released with the next byte
  EXPECT_EQ(pieces[3], "");     // "E" held
  EXPECT_EQ(pieces[4], "");     // "EN" held
  EXPECT_EQ(pieces[5], "ENc");  // not the stop string after all
  EXPECT_EQ(pieces[6], "");     // finish(): nothing left
}

TEST(StopTextStream, EarliestOfSeveralStopsAndNoStops) {
  bool stopped = false;
  EXPECT_EQ(join(stream_text("one two three", {"three", "two"}, &stopped)), "one ");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(join(stream_text("one two three", {}, &stopped)), "one two three");
  EXPECT_FALSE(stopped);
  // A stop string at the very start leaves nothing.
  EXPECT_EQ(join(stream_text("##x", {"##"}, &stopped)), "");
  EXPECT_TRUE(stopped);
  // Multi-byte characters are never split by holding back.
  EXPECT_EQ(join(stream_text("caf\xc3\xa9 ok", {"\xc3\xa9!"}, &stopped)), "caf\xc3\xa9 ok");
}

TEST(ParseCompletion, Defaults) {
  const ApiModel m = fx().api();
  CompletionParams p = parse_completion(R"({"prompt":"abc"})", false, m);
  EXPECT_EQ(p.prompt.size(), 3u);
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 1.f);
  EXPECT_EQ(p.n, 1);
  EXPECT_FALSE(p.stream);
  EXPECT_FALSE(p.exact_routing);
  // Chat: as many tokens as fit by default.
  p = parse_completion(R"({"messages":[{"role":"user","content":"hi"}]})", true, m);
  EXPECT_EQ(int(p.prompt.size()) + p.max_tokens, 64);
  // Token-id prompts and the extensions.
  p = parse_completion(
      R"({"prompt":[1,2,3],"routing":"exact","ignore_eos":true,"stop":"x","seed":5,"n":2})", false,
      m);
  EXPECT_EQ(p.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(p.exact_routing);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(p.sampling.seed, 5u);
  EXPECT_EQ(p.n, 2);
}

TEST(ParseCompletion, RejectsBadInputNamingTheField) {
  const ApiModel m = fx().api();
  struct Case {
    const char* body;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {R"({"prompt":"a",)", "", "invalid_json"},
      {R"([1,2])", "", "invalid_json"},
      {R"({"prompt":"a","max_tokens":"5"})", "max_tokens", "invalid_type"},
      {R"({"prompt":"a","max_tokens":0})", "max_tokens", "invalid_value"},
      {R"({"prompt":"a","max_tokens":65})", "max_tokens", "invalid_value"},
      {R"({"prompt":"a","max_tokens":1.5})", "max_tokens", "invalid_type"},
      {R"({"prompt":"a","temperature":"hot"})", "temperature", "invalid_type"},
      {R"({"prompt":"a","temperature":3})", "temperature", "invalid_value"},
      {R"({"prompt":"a","top_p":0})", "top_p", "invalid_value"},
      {R"({"prompt":"a","stream":"yes"})", "stream", "invalid_type"},
      {R"({"prompt":"a","stop":[1]})", "stop", "invalid_type"},
      {R"({"prompt":"a","stop":[""]})", "stop", "invalid_value"},
      {R"({"prompt":"a","n":9})", "n", "invalid_value"},
      {R"({"prompt":"a","seed":"1"})", "seed", "invalid_type"},
      {R"({"prompt":"a","seed":-2})", "seed", "invalid_value"},
      {R"({"prompt":"a","max_tokens":18446744073709551615})", "max_tokens", "invalid_value"},
      {R"({"prompt":"a","model":"gpt-4"})", "model", "model_not_found"},
      {R"({"prompt":"a","routing":"lynx"})", "routing", "invalid_value"},
      {R"({"prompt":"a","echo":true})", "echo", "invalid_value"},
      {R"({"prompt":"a","logit_bias":{"300":1}})", "logit_bias", "invalid_value"},
      {R"({"prompt":"a","logit_bias":{"-1":1}})", "logit_bias", "invalid_value"},
      {R"({"prompt":"a","logit_bias":{"99999999999999999999999":1}})", "logit_bias",
       "invalid_value"},
      {R"({"prompt":"a","logit_bias":{"abc":1}})", "logit_bias", "invalid_value"},
      {R"({"prompt":"a","logit_bias":{"5 ":1}})", "logit_bias", "invalid_value"},
      {R"({"prompt":"a","logit_bias":{"5":101}})", "logit_bias", "invalid_value"},
      {R"({"prompt":"a","logit_bias":{"5":-100.5}})", "logit_bias", "invalid_value"},
      {R"({"prompt":"a","logit_bias":{"5":"1"}})", "logit_bias", "invalid_type"},
      {R"({"prompt":"a","logit_bias":{"5":true}})", "logit_bias", "invalid_value"},
      {R"({"prompt":"a","logit_bias":[[5]]})", "logit_bias", "invalid_type"},
      {R"({"prompt":"a","logit_bias":[[300,1]]})", "logit_bias", "invalid_value"},
      {R"({"prompt":"a","logit_bias":[[1.5,1]]})", "logit_bias", "invalid_type"},
      {R"({"prompt":"a","logit_bias":[["",1]]})", "logit_bias", "invalid_value"},
      {R"({"prompt":"a","logit_bias":5})", "logit_bias", "invalid_type"},
      {R"({"prompt":"a","presence_penalty":2.5})", "presence_penalty", "invalid_value"},
      {R"({"prompt":"a","frequency_penalty":-3})", "frequency_penalty", "invalid_value"},
      {R"({"prompt":"a","frequency_penalty":"1"})", "frequency_penalty", "invalid_type"},
      {R"({"prompt":"a","repeat_penalty":0})", "repeat_penalty", "invalid_value"},
      {R"({"prompt":"a","repetition_penalty":-1})", "repetition_penalty", "invalid_value"},
      {R"({"prompt":"a","repetition_penalty":1.1,"repeat_penalty":1.2})", "repeat_penalty",
       "invalid_value"},
      {R"({"prompt":"a","repeat_last_n":-2})", "repeat_last_n", "invalid_value"},
      {R"({"prompt":"a","repeat_last_n":1.5})", "repeat_last_n", "invalid_type"},
      {R"({"prompt":"a","min_p":1.5})", "min_p", "invalid_value"},
      {R"({"prompt":"a","min_p":true})", "min_p", "invalid_type"},
      {R"({"prompt":"a","typical_p":0})", "typical_p", "invalid_value"},
      {R"({"prompt":"a","typical_p":1.01})", "typical_p", "invalid_value"},
      {R"({"prompt":"a","stream_options":{"include_usage":true}})", "stream_options",
       "invalid_value"},
      {R"({"prompt":[1,99999]})", "prompt", "invalid_value"},
      {R"({"prompt":["a","b"]})", "prompt", "invalid_value"},
      {R"({"prompt":{}})", "prompt", "invalid_type"},
      {R"({"max_tokens":3})", "prompt", "missing_required_parameter"},
      {R"({"prompt":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})", "prompt",
       "context_length_exceeded"},
  };
  for (const Case& c : cases) {
    try {
      parse_completion(c.body, false, m);
      ADD_FAILURE() << "accepted " << c.body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << c.body;
      EXPECT_EQ(e.param, c.param) << c.body;
      EXPECT_EQ(e.code, c.code) << c.body << ": " << e.what();
      const json b = e.body();
      EXPECT_TRUE(b["error"]["message"].is_string());
      EXPECT_EQ(b["error"]["type"], "invalid_request_error");
    }
  }
  for (const char* body :
       {R"({"messages":"hi"})", R"({"messages":[]})", R"({"messages":[{"content":"x"}]})",
        R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})"}) {
    EXPECT_THROW(parse_completion(body, true, m), ApiError) << body;
  }
}

// A value out of range is quoted as the client sent it (2^64 - 1 used to read as -1 or
// INT64_MAX); seed -1 is llama-server's "random", a huge seed is a seed.
TEST(ParseCompletion, OutOfRangeValuesAreQuotedAsSent) {
  const ApiModel m = fx().api();
  try {
    parse_completion(R"({"prompt":"a","max_tokens":18446744073709551615})", false, m);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("got 18446744073709551615"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(parse_completion(R"({"prompt":"a","seed":-1})", false, m));
  EXPECT_EQ(
      parse_completion(R"({"prompt":"a","seed":18446744073709551615})", false, m).sampling.seed,
      18446744073709551615u);
}

// Every field of both endpoints, and every part inside content parts and response_format,
// given a value of every wrong type: a 400 that names the field, never another exception
// (which the server would answer with 500 and a library's text).
TEST(ParseCompletion, WrongTypesEverywhereAre400NamingTheField) {
  const ApiModel m = fx().api();
  const std::vector<json> values = {json(nullptr),
                                    json(true),
                                    json(-3),
                                    json(2.5),
                                    json("s"),
                                    json::array(),
                                    json::array({1, "x", nullptr}),
                                    json::object(),
                                    json{{"type", 5}},
                                    json{{"a", {{"b", 1}}}}};
  const json base_chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
  const json base_cmpl = {{"prompt", "hi"}, {"max_tokens", 2}};
  const std::vector<std::string> fields = {"model",
                                           "prompt",
                                           "messages",
                                           "max_tokens",
                                           "max_completion_tokens",
                                           "temperature",
                                           "top_p",
                                           "top_k",
                                           "seed",
                                           "stop",
                                           "n",
                                           "stream",
                                           "stream_options",
                                           "logprobs",
                                           "top_logprobs",
                                           "routing",
                                           "max_routing_level",
                                           "ignore_eos",
                                           "user",
                                           "echo",
                                           "best_of",
                                           "suffix",
                                           "logit_bias",
                                           "presence_penalty",
                                           "frequency_penalty",
                                           "repeat_penalty",
                                           "repetition_penalty",
                                           "repeat_last_n",
                                           "min_p",
                                           "typical_p",
                                           "tools",
                                           "functions",
                                           "response_format",
                                           "grammar"};
  // Paths inside nested objects, as JSON pointers.
  const std::vector<std::string> nested = {"/messages/0/content",
                                           "/messages/0/content/0",
                                           "/messages/0/content/0/type",
                                           "/messages/0/content/0/text",
                                           "/messages/0/role",
                                           "/response_format/type",
                                           "/stream_options/include_usage",
                                           "/messages/0"};
  auto check = [&](const json& body, bool chat, const std::string& what) {
    try {
      parse_completion(body.dump(), chat, m);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << what;
      EXPECT_FALSE(e.param.empty() && std::string(e.what()).find('\'') == std::string::npos)
          << what << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  };
  for (bool chat : {false, true}) {
    const json base = chat ? base_chat : base_cmpl;
    for (const auto& f : fields) {
      for (const json& v : values) {
        json b = base;
        b[f] = v;
        check(b, chat, f + "=" + v.dump());
      }
    }
    if (!chat) continue;
    for (const auto& path : nested) {
      for (const json& v : values) {
        json b = base;
        b["messages"][0]["content"] = json::array({{{"type", "text"}, {"text", "hi"}}});
        b["response_format"] = {{"type", "text"}};
        b["stream"] = true;
        b["stream_options"] = {{"include_usage", true}};
        b[json::json_pointer(path)] = v;
        check(b, chat, path + "=" + v.dump());
      }
    }
  }
  // The two of the issue, with the field in the message.
  json b = base_chat;
  b["messages"][0]["content"] = json::array({{{"type", 5}, {"text", "hi"}}});
  try {
    parse_completion(b.dump(), true, m);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("messages[0].content[0].type"), std::string::npos)
        << e.what();
  }
  b = base_chat;
  b["response_format"] = {{"type", 7}};
  try {
    parse_completion(b.dump(), true, m);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "response_format.type");
  }
}

// Structured output: response_format json_object / json_schema and grammar compile into the
// grammar sampling follows; a bad schema or grammar is a 400 naming the field with the reason.
TEST(ParseCompletion, StructuredOutput) {
  const ApiModel m = fx().api();
  EXPECT_EQ(parse_completion(R"({"prompt":"a"})", false, m).grammar, nullptr);
  EXPECT_EQ(
      parse_completion(R"({"prompt":"a","response_format":{"type":"text"}})", false, m).grammar,
      nullptr);
  EXPECT_NE(parse_completion(R"({"prompt":"a","response_format":{"type":"json_object"}})", false, m)
                .grammar,
            nullptr);
  const auto p = parse_completion(
      R"({"prompt":"a","response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,
          "schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}})",
      false, m);
  ASSERT_NE(p.grammar, nullptr);
  grammar::Matcher matcher(p.grammar);
  EXPECT_TRUE(matcher.accept("{\"a\": 12}"));
  EXPECT_TRUE(matcher.accepting());
  // A strict object's properties in the schema's order as the client wrote it (not sorted).
  const auto ordered = parse_completion(
      R"({"prompt":"a","response_format":{"type":"json_schema","json_schema":{"schema":{
          "type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"integer"}},
          "required":["zeta","alpha"]}}}})",
      false, m);
  grammar::Matcher om(ordered.grammar);
  EXPECT_TRUE(om.accept(R"({"zeta": 1, "alpha": 2})"));
  EXPECT_TRUE(om.accepting());
  EXPECT_FALSE(grammar::Matcher(ordered.grammar).accept(R"({"alpha")"));
  EXPECT_NE(parse_completion(R"({"prompt":"a","grammar":"root ::= [0-9]+"})", false, m).grammar,
            nullptr);
  auto refusal = [&](const std::string& body) -> std::pair<std::string, std::string> {
    try {
      parse_completion(body, true, m);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return {e.param, e.what()};
    }
    return {"", "accepted"};
  };
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],)";
  auto [param, why] = refusal(chat + R"("grammar":"root ::= x"})");
  EXPECT_EQ(param, "grammar");
  EXPECT_NE(why.find("undefined rule 'x' at line 1, column 10"), std::string::npos) << why;
  std::tie(param, why) = refusal(
      chat +
      R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"a+"}}}})");
  EXPECT_EQ(param, "response_format.json_schema.schema");
  EXPECT_NE(why.find("'pattern' is not supported"), std::string::npos) << why;
  std::tie(param, why) = refusal(chat + R"("response_format":{"type":"xml"}})");
  EXPECT_EQ(param, "response_format.type");
  std::tie(param, why) =
      refusal(chat + R"("response_format":{"type":"json_object"},"grammar":"root ::= \"a\""})");
  EXPECT_EQ(param, "grammar");
}

// The sampling controls clients send: OpenAI's penalties and logit_bias map, llama-server's
// repeat_penalty / repeat_last_n / min_p / typical_p and its logit_bias array (false bans,
// text is tokenized), vLLM's repetition_penalty.
TEST(ParseCompletion, SamplingControls) {
  const ApiModel m = fx().api();
  CompletionParams p = parse_completion(R"({"prompt":"a"})", false, m);
  EXPECT_FALSE(p.sampling.adjusts_logits());
  EXPECT_EQ(p.sampling.repeat_last_n, 64);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.f);
  EXPECT_FLOAT_EQ(p.sampling.typical_p, 1.f);
  p = parse_completion(
      R"({"prompt":"a","presence_penalty":-2,"frequency_penalty":1.5,"repeat_penalty":1.1,)"
      R"("repeat_last_n":-1,"min_p":0.05,"typical_p":0.9,"top_k":-1,)"
      R"("logit_bias":{"7":-100,"0":100,"12":false,"299":0.5}})",
      false, m);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, -2.f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, 1.5f);
  EXPECT_FLOAT_EQ(p.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(p.sampling.repeat_last_n, -1);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.sampling.typical_p, 0.9f);
  EXPECT_EQ(p.sampling.top_k, 0);
  std::map<int32_t, float> bias;
  for (const LogitBias& b : p.sampling.logit_bias) bias[b.token] = b.bias;
  EXPECT_EQ(bias, (std::map<int32_t, float>{{0, 100.f}, {7, -100.f}, {12, kBanBias}, {299, 0.5f}}));
  p = parse_completion(R"({"prompt":"a","repetition_penalty":1.3})", false, m);
  EXPECT_FLOAT_EQ(p.sampling.repeat_penalty, 1.3f);
  // llama-server's array: ids, false, and text whose tokens all get the bias.
  p = parse_completion(R"({"prompt":"a","logit_bias":[[3,-1.5],[4,false],["ab",2]]})", false, m);
  const std::vector<int32_t> ab = fx().tok->encode("ab", false, false);
  ASSERT_EQ(p.sampling.logit_bias.size(), 2 + ab.size());
  EXPECT_EQ(p.sampling.logit_bias[0].token, 3);
  EXPECT_FLOAT_EQ(p.sampling.logit_bias[0].bias, -1.5f);
  EXPECT_EQ(p.sampling.logit_bias[1].bias, kBanBias);
  for (size_t i = 0; i < ab.size(); ++i) {
    EXPECT_EQ(p.sampling.logit_bias[2 + i].token, ab[i]);
    EXPECT_FLOAT_EQ(p.sampling.logit_bias[2 + i].bias, 2.f);
  }
  // Empty forms are no bias; chat takes the same fields.
  EXPECT_TRUE(
      parse_completion(R"({"prompt":"a","logit_bias":{}})", false, m).sampling.logit_bias.empty());
  EXPECT_TRUE(
      parse_completion(R"({"prompt":"a","logit_bias":[]})", false, m).sampling.logit_bias.empty());
  p = parse_completion(
      R"({"messages":[{"role":"user","content":"x"}],"frequency_penalty":0.5,"logit_bias":{"9":3}})",
      true, m);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, 0.5f);
  ASSERT_EQ(p.sampling.logit_bias.size(), 1u);
  // A ban of every token leaves nothing to sample: a 400, as is the message naming the key.
  json all = json::array();
  for (int i = 0; i < fx().tok->n_vocab(); ++i) all.push_back({i, false});
  json body = {{"prompt", "a"}, {"logit_bias", all}};
  try {
    parse_completion(body.dump(), false, m);
    ADD_FAILURE() << "accepted a ban of every token";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "logit_bias");
  }
  all.erase(all.size() - 1);
  body["logit_bias"] = all;
  EXPECT_EQ(parse_completion(body.dump(), false, m).sampling.logit_bias.size(), all.size());
  try {
    parse_completion(R"({"prompt":"a","logit_bias":{"5":1,"1000":2}})", false, m);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("1000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  }
}

// With per-request routing allowed: levels and specs of the ladder map to levels, anything
// else is a 400 naming the field, never another exception.
TEST(ParseCompletion, RequestRoutingLevelsAndCaps) {
  ApiModel m = fx().api();
  m.routing_levels = {"topk", "lynx:alpha=3,beta=4", "cover:lambda=0.2"};
  m.max_routing_level = 1;
  m.allow_request_routing = true;
  auto parse = [&](const std::string& extra) {
    return parse_completion(R"({"prompt":"a",)" + extra + "}", false, m);
  };
  EXPECT_EQ(parse(R"("routing":1)").routing_level, 1);
  EXPECT_EQ(parse(R"("routing":"lynx:beta=4,alpha=3")").routing_level, 1);
  EXPECT_TRUE(parse(R"("routing":0)").exact_routing);
  EXPECT_TRUE(parse(R"("max_routing_level":"topk")").exact_routing);
  const CompletionParams p = parse(R"("routing":"default","max_routing_level":1)");
  EXPECT_EQ(p.routing_level, -1);
  EXPECT_EQ(p.max_routing_level, 1);
  EXPECT_FALSE(p.exact_routing);
  for (const char* bad :
       {R"("routing":2)", R"("routing":3)", R"("routing":"oea:k0=4")",
        R"("routing":"lynx:alpha=x")", R"("max_routing_level":-1)", R"("max_routing_level":2)",
        R"("routing":1.0)", R"("max_routing_level":{"a":1})", R"("routing":"")"}) {
    try {
      parse(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << bad;
      EXPECT_FALSE(e.param.empty()) << bad;
    } catch (const std::exception& e) {
      ADD_FAILURE() << bad << ": " << e.what();
    }
  }
}

TEST(ParseCompletion, NestingDepthIsBoundedBeforeParsing) {
  ApiModel m = fx().api();
  m.max_depth = 8;
  EXPECT_EQ(json_depth(R"({"a":[[1]],"s":"[[[[[[[[[[\"[["})", 100), 3);
  EXPECT_EQ(json_depth(std::string(1000, '['), 8), 9);  // stops past the limit
  try {
    parse_completion(std::string(1 << 20, '['), false, m);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("nested deeper than 8"), std::string::npos) << e.what();
  }
  // Within the limit (the prompt's own array nesting counts): parsed as usual.
  EXPECT_NO_THROW(parse_completion(R"({"prompt":[[104,105]],"max_tokens":1})", false, m));
}

}  // namespace
}  // namespace lynx::server

namespace lynx::server {
namespace {

// A model's own Jinja chat template renders chat prompts; when it fails, the built-in format
// renders instead and the failure is logged.
TEST(ChatTemplatePrompt, RendersWithTheModelsTemplateElseFallsBack) {
  ApiModel m = fx().api();
  m.n_ctx = 512;  // room for the built-in ChatML prompt with its default system text
  std::vector<std::string> logged;
  m.log = [&](const std::string& s) { logged.push_back(s); };
  m.chat_template = std::make_shared<const ChatTemplate>(
      "{% for x in messages %}[{{ x.role }}:{{ x.content }}{{ '|' ~ x.name if x.name }}]"
      "{% endfor %}{% if add_generation_prompt %}>{% endif %}");
  const char* body =
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"h"},{"type":"text","text":"i"}],"name":"bob"}]})";
  CompletionParams p = parse_completion(body, true, m);
  EXPECT_EQ(p.prompt, fx().tok->encode("[system:s][user:hi|bob]>", true, true));
  EXPECT_TRUE(logged.empty());
  m.chat_template = std::make_shared<const ChatTemplate>("{{ raise_exception('no system') }}");
  p = parse_completion(body, true, m);
  ApiModel builtin = fx().api();
  builtin.n_ctx = 512;
  EXPECT_EQ(p.prompt, parse_completion(body, true, builtin).prompt);
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("no system"), std::string::npos) << logged[0];
}

}  // namespace
}  // namespace lynx::server
