// Tools and reasoning in the chat API: requests with tools render as python3-jinja2 renders the
// released templates (the template goldens), malformed tools are 400s naming the field, answers
// carry tool_calls / reasoning_content in OpenAI's shapes, and a served model's reasoning comes
// back apart (or in the text) whole and streamed alike.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "lynx/model.h"
#include "server/api.h"
#include "util.h"

namespace lynx::server {
namespace {

using ojson = nlohmann::ordered_json;

struct Fixture {
  std::unique_ptr<Model> model = Model::load(test::tiny_model());
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(model->file());
};

const Fixture& fx() {
  static const Fixture f;
  return f;
}

std::string read(const std::string& rel) {
  std::ifstream f(std::string(LYNX_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string template_text(const std::string& name) {
  return read("tests/template/templates/" + name);
}

// The goldens' variables: bos/eos as render_goldens.py passes them.
ApiModel model_with(const std::string& tmpl) {
  ApiModel m;
  m.tok = fx().tok.get();
  m.chat = chat_format_from_name("chatml", "<|bos|>", "<|eos|>");
  m.name = "tiny";
  m.n_ctx = 1 << 20;
  TemplateOptions to;
  to.now = 1768478400;  // 2026-01-15 12:00 UTC, render_goldens.py's strftime_now
  m.chat_template = std::make_shared<const ChatTemplate>(tmpl, to);
  m.output_format = chatparse::detect_output_format(tmpl);
  return m;
}

// A conversation of tests/template/conversations.json as an OpenAI client sends it: tool call
// arguments as JSON text, assistant content null next to calls.
ojson openai_request(const ojson& conv) {
  ojson msgs = ojson::array();
  for (ojson m : conv["messages"]) {
    if (m.contains("tool_calls")) {
      for (auto& c : m["tool_calls"])
        c["function"]["arguments"] = c["function"]["arguments"].dump();
      if (m["content"] == "") m["content"] = nullptr;
    }
    msgs.push_back(std::move(m));
  }
  ojson body = {{"messages", std::move(msgs)}};
  if (conv.contains("tools")) body["tools"] = conv["tools"];
  return body;
}

TEST(ToolsRequest, RendersAsJinja2DoesOnReleasedTemplates) {
  const ojson convs = ojson::parse(read("tests/template/conversations.json"));
  const ojson goldens = ojson::parse(read("tests/template/goldens.json"));
  int checked = 0;
  for (const ojson& g : goldens) {
    const std::string cas = g.value("case", "");
    if ((cas != "tools" && cas != "parallel-tools") || !g.contains("output")) continue;
    const ojson* conv = nullptr;
    for (const ojson& c : convs) {
      if (c["name"] == cas) conv = &c;
    }
    ASSERT_NE(conv, nullptr);
    const std::string tmpl_name = g["template"];
    const ApiModel m = model_with(template_text(tmpl_name));
    const std::string golden = g["output"];
    CompletionParams p;
    try {
      p = parse_completion(openai_request(*conv).dump(), true, m);
    } catch (const ApiError& e) {
      ADD_FAILURE() << tmpl_name << " " << cas << ": " << e.what();
      continue;
    }
    const bool has_bos = golden.rfind("<|bos|>", 0) == 0;
    const std::string got = fx().tok->decode(p.prompt);
    const std::string want = fx().tok->decode(fx().tok->encode(golden, !has_bos, true));
    size_t at = 0;
    while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
    EXPECT_EQ(p.prompt, fx().tok->encode(golden, !has_bos, true))
        << tmpl_name << " " << cas << ": differs at byte " << at << ": got \""
        << got.substr(at > 40 ? at - 40 : 0, 120) << "\" want \""
        << want.substr(at > 40 ? at - 40 : 0, 120) << "\"";
    // Phi-3.5's template ignores tools: its answers are not taken apart.
    EXPECT_EQ(p.parse_output, tmpl_name.find("Phi-3.5") == std::string::npos) << tmpl_name;
    ++checked;
  }
  // 16 templates x 2 conversations, but Llama 3.3's refuses parallel calls (as jinja2 does).
  EXPECT_EQ(checked, 31);
}

TEST(ToolsRequest, MalformedToolsAre400NamingTheField) {
  const ApiModel m = model_with(template_text("Qwen-Qwen3-0.6B.jinja"));
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  const std::string fn = R"({"type":"function","function":{"name":"f","parameters":{}}})";
  struct Case {
    std::string body, param, says;
  };
  const std::vector<Case> cases = {
      {"\"tools\":{}", "tools", "'tools' must be an array"},
      {"\"tools\":[5]", "tools", "'tools[0]' must be an object"},
      {"\"tools\":[{\"function\":{\"name\":\"f\"}}]", "tools", "'tools[0].type'"},
      {"\"tools\":[{\"type\":\"function\"}]", "tools", "'tools[0].function' must be an object"},
      {"\"tools\":[{\"type\":\"function\",\"function\":{}}]", "tools",
       "'tools[0].function.name' must be a string"},
      {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", "tools",
       "letters, digits"},
      {"\"tools\":[" + fn + "," + fn + "]", "tools", "repeats the name"},
      {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]",
       "tools", "JSON Schema object"},
      {"\"tools\":[" + fn + "],\"tool_choice\":\"always\"", "tool_choice", "must be \"auto\""},
      {"\"tools\":[" + fn +
           "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
           "\"g\"}}",
       "tool_choice", "not among 'tools'"},
      {"\"tool_choice\":\"required\"", "tool_choice", "needs 'tools'"},
      {"\"tools\":[" + fn + "],\"parallel_tool_calls\":1", "parallel_tool_calls", "boolean"},
      {"\"functions\":[" + fn + "]", "functions", "send 'tools'"},
      {"\"reasoning_format\":\"hidden\"", "reasoning_format", "\"none\""},
      {"\"chat_template_kwargs\":{\"messages\":1}", "chat_template_kwargs", "may not set"},
  };
  for (const Case& c : cases) {
    try {
      parse_completion("{" + msgs + "," + c.body + "}", true, m);
      ADD_FAILURE() << "accepted: " << c.body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, c.param) << c.body;
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos)
          << c.body << " -> " << e.what();
    }
  }
  // Messages with malformed calls.
  const std::vector<std::pair<std::string, std::string>> bad_msgs = {
      {R"({"role":"assistant","tool_calls":{}})", "tool_calls' must be an array"},
      {R"({"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{not json"}}]})",
       "arguments' must be a JSON object"},
      {R"({"role":"assistant","tool_calls":[{"type":"function","function":{"arguments":"{}"}}]})",
       "name' must be a non-empty string"},
      {R"({"role":"tool","tool_call_id":5,"content":"x"})", "tool_call_id' must be a string"},
  };
  for (const auto& [msg, says] : bad_msgs) {
    const std::string body = R"({"messages":[{"role":"user","content":"hi"},)" + msg + "]}";
    try {
      parse_completion(body, true, m);
      ADD_FAILURE() << "accepted: " << msg;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, "messages") << msg;
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
  // Tools need the model's template: the built-in formats cannot write them.
  ApiModel builtin = m;
  builtin.chat_template.reset();
  try {
    parse_completion("{" + msgs + ",\"tools\":[" + fn + "]}", true, builtin);
    ADD_FAILURE() << "tools accepted without a template";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "tools");
  }
  // Tools are a chat field.
  EXPECT_THROW(parse_completion(R"({"prompt":"a","tools":[)" + fn + "]}", false, m), ApiError);
}

std::string decode(const CompletionParams& p) {
  return fx().tok->decode(p.prompt);
}

TEST(ToolsRequest, ToolChoiceShapesThePromptAndTheParsing) {
  const ApiModel m = model_with(template_text("Qwen-Qwen3-0.6B.jinja"));
  const std::string base =
      R"({"messages":[{"role":"user","content":"weather?"}],"tools":[)"
      R"({"type":"function","function":{"name":"get_weather","parameters":{}}},)"
      R"({"type":"function","function":{"name":"search","parameters":{}}}])";
  const CompletionParams plain =
      parse_completion(R"({"messages":[{"role":"user","content":"weather?"}]})", true, m);
  const CompletionParams aut = parse_completion(base + "}", true, m);
  EXPECT_NE(decode(aut).find("\"search\""), std::string::npos);
  EXPECT_TRUE(aut.output.parse_tools);
  EXPECT_EQ(aut.output.format.tools, chatparse::ToolFormat::kHermes);
  EXPECT_TRUE(aut.output.format.think_tags);
  EXPECT_EQ(aut.tool_choice, ToolChoice::kAuto);
  // none: the tools are not offered, and calls are not parsed.
  const CompletionParams none = parse_completion(base + R"(,"tool_choice":"none"})", true, m);
  EXPECT_EQ(none.prompt, plain.prompt);
  EXPECT_FALSE(none.output.parse_tools);
  // A named function: only it is offered.
  const CompletionParams named = parse_completion(
      base + R"(,"tool_choice":{"type":"function","function":{"name":"search"}}})", true, m);
  EXPECT_NE(decode(named).find("\"search\""), std::string::npos);
  EXPECT_EQ(decode(named).find("get_weather"), std::string::npos);
  EXPECT_EQ(named.tool_choice_name, "search");
  const CompletionParams req =
      parse_completion(base + R"(,"tool_choice":"required","parallel_tool_calls":false})", true, m);
  EXPECT_EQ(req.tool_choice, ToolChoice::kRequired);
  EXPECT_FALSE(req.output.parallel_tool_calls);
  // Reasoning: apart by default, in the text on request; chat_template_kwargs reach the
  // template (Qwen3's enable_thinking closes the think block in the prompt).
  EXPECT_TRUE(aut.output.extract_reasoning);
  EXPECT_FALSE(
      parse_completion(base + R"(,"reasoning_format":"none"})", true, m).output.extract_reasoning);
  const CompletionParams nothink =
      parse_completion(base + R"(,"chat_template_kwargs":{"enable_thinking":false}})", true, m);
  EXPECT_NE(decode(nothink).find("<think>\n\n</think>"), std::string::npos);
  EXPECT_FALSE(nothink.output.starts_in_reasoning);
  // DeepSeek-R1's prompt opens <think> (this version of its template closes it again unless
  // enable_thinking): the answer starts inside it.
  const ApiModel r1 = model_with(template_text("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"));
  const std::string hi = R"({"messages":[{"role":"user","content":"hi"}])";
  EXPECT_TRUE(
      parse_completion(hi + R"(,"chat_template_kwargs":{"enable_thinking":true}})", true, r1)
          .output.starts_in_reasoning);
  EXPECT_FALSE(parse_completion(hi + "}", true, r1).output.starts_in_reasoning);
}

TEST(ToolsAnswer, BodiesAndStreamChunksInOpenAIsShapes) {
  CompletionParams p;
  p.chat = true;
  p.tool_choice = ToolChoice::kRequired;
  ChoiceResult r;
  r.finish_reason = "tool_calls";
  r.reasoning = "think";
  r.tool_calls = {{"call_1", "get_weather", R"({"city":"Paris"})"}};
  const json body = completion_body(p, "id", 1, "tiny", {r}, 3);
  const json& msg = body["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null());
  EXPECT_EQ(msg["reasoning_content"], "think");
  EXPECT_EQ(msg["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_FALSE(body["choices"][0].contains("tool_choice_unmet"));
  // tool_choice required, answered without a call: said on the choice.
  EXPECT_EQ(tool_choice_unmet(p, {}),
            "tool_choice is \"required\" but the model answered without a tool call");
  EXPECT_EQ(tool_choice_unmet(p, r.tool_calls), "");
  p.tool_choice = ToolChoice::kFunction;
  p.tool_choice_name = "search";
  EXPECT_NE(tool_choice_unmet(p, r.tool_calls).find("\"search\""), std::string::npos);

  // A stream event with text, reasoning, a call and the finish reason.
  Event ev;
  ev.choice = 1;
  ev.text = "Checking.";
  ev.reasoning = "hmm";
  ev.tool_calls = {{0, "call_1", "get_weather", ""}, {0, "", "", R"({"city":"Paris"})"}};
  ev.finish_reason = "tool_calls";
  const auto chunks = event_chunks(p, "id", 1, "tiny", ev);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["content"], "Checking.");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["reasoning_content"], "hmm");
  const json& first = chunks[1]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["id"], "call_1");
  EXPECT_EQ(first["function"]["name"], "get_weather");
  EXPECT_EQ(first["function"]["arguments"], "");
  const json& args = chunks[2]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_FALSE(args.contains("id"));
  EXPECT_EQ(args["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(chunks[3]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(chunks[3]["choices"][0]["delta"], json::object());
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(chunks[i]["choices"][0]["finish_reason"].is_null());
  // Events without tools keep their one chunk: text, or the finish reason with an empty delta.
  Event text_ev;
  text_ev.text = "a";
  ASSERT_EQ(event_chunks(p, "id", 1, "tiny", text_ev).size(), 1u);
  EXPECT_EQ(event_chunks(p, "id", 1, "tiny", text_ev)[0]["choices"][0]["delta"],
            json({{"content", "a"}}));
  Event fin;
  fin.finish_reason = "stop";
  const auto f = event_chunks(p, "id", 1, "tiny", fin);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0]["choices"][0]["delta"], json::object());
  EXPECT_EQ(f[0]["choices"][0]["finish_reason"], "stop");
}

// A served model whose template opens <think> in the prompt (DeepSeek-R1 style): its whole
// answer is reasoning (the random-weight model never closes the block), returned apart or kept
// in the text, whole and streamed alike.
TEST(ToolsServer, ReasoningApartOrInTheTextWholeAndStreamed) {
  SynthOptions o;
  o.shape = synth_shape("tiny-moe");
  o.shape.n_layer = 1;
  o.shape.n_vocab = 300;
  o.type = gguf::TensorType::F32;
  o.seed = 7;
  o.chat_template =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if tools %}<tools>{{ tools | tojson }}</tools><tool_call>{% endif %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
  const auto path = std::filesystem::temp_directory_path() /
                    ("lynx-tools-test-" + std::to_string(::getpid()) + ".gguf");
  write_synth_model(o, path.string());
  ServerOptions so = test::tiny_options();
  so.model_path = path.string();
  test::Running srv(so);
  const std::string req =
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":12,"temperature":0,)"
      R"("ignore_eos":true,"tools":[{"type":"function","function":{"name":"f"}}])";
  const test::Reply apart = test::post(srv, "/v1/chat/completions", req + "}");
  ASSERT_EQ(apart.status, 200) << apart.body;
  const json a = apart.j()["choices"][0];
  const std::string reasoning = a["message"].value("reasoning_content", "");
  EXPECT_FALSE(reasoning.empty()) << apart.body;
  EXPECT_EQ(a["message"]["content"], "");
  EXPECT_EQ(a["finish_reason"], "length");
  EXPECT_FALSE(a["message"].contains("tool_calls"));

  const test::Reply kept =
      test::post(srv, "/v1/chat/completions", req + R"(,"reasoning_format":"none"})");
  ASSERT_EQ(kept.status, 200) << kept.body;
  const json k = kept.j()["choices"][0]["message"];
  EXPECT_FALSE(k.contains("reasoning_content"));
  const std::string content = k["content"];
  EXPECT_NE(content.find(reasoning), std::string::npos) << content;

  const test::Stream st =
      test::post_stream(srv, "/v1/chat/completions", req + R"(,"stream":true})");
  ASSERT_EQ(st.status, 200);
  std::string streamed, streamed_content;
  std::string finish;
  for (const json& c : st.chunks()) {
    const json& ch = c["choices"][0];
    streamed += ch["delta"].value("reasoning_content", "");
    streamed_content += ch["delta"].value("content", "");
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(streamed, reasoning);
  EXPECT_EQ(streamed_content, "");
  EXPECT_EQ(finish, "length");
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

}  // namespace
}  // namespace lynx::server
