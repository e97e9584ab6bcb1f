// The chat request's part of the OpenAI API: messages (text parts, tool calls, tool results)
// rendered by the model's chat template with the tools offered, and how the answer will be
// taken apart (tools, tool_choice, parallel_tool_calls, reasoning_format). docs/serving.md,
// "Tools and reasoning".
#include <algorithm>
#include <random>

#include "lynx/error.h"
#include "server/api_util.h"

namespace lynx::server {
namespace {

std::string message_content(const json& msg, size_t i) {
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) bad_type("messages", "objects whose content is a string or text parts");
  std::string s;
  const std::string where = "messages[" + std::to_string(i) + "].content";
  for (size_t k = 0; k < it->size(); ++k) {
    const json& part = (*it)[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    if (!part.is_object()) {
      throw ApiError(400, "'" + at + "' must be an object", "messages", "invalid_type");
    }
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      throw ApiError(400, "'" + at + ".type' must be a string", "messages", "invalid_type");
    }
    if (type->get<std::string>() != "text") {
      throw ApiError(400, "'" + at + ".type': only text content parts are supported", "messages",
                     "invalid_value");
    }
    const auto txt = part.find("text");
    if (txt == part.end() || !txt->is_string()) {
      throw ApiError(400, "'" + at + ".text' must be a string", "messages", "invalid_type");
    }
    s += txt->get<std::string>();
  }
  return s;
}

using ojson = nlohmann::ordered_json;

[[noreturn]] void bad_at(const std::string& at, const std::string& why, const char* param,
                         const char* code = "invalid_value") {
  throw ApiError(400, "'" + at + "' " + why, param, code);
}

// OpenAI's tools: [{"type": "function", "function": {"name", "description", "parameters",
// "strict"}}]. Names as OpenAI accepts them (they are written into the prompt and come back in
// calls).
void check_tools(const json& tools) {
  if (!tools.is_array()) bad_type("tools", "an array of tools");
  if (tools.size() > 128) bad_value("tools", "may hold at most 128 tools");
  std::vector<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) bad_at(at, "must be an object", "tools", "invalid_type");
    const json* type = field(t, "type");
    if (!type || *type != "function") bad_at(at + ".type", "must be \"function\"", "tools");
    const json* f = field(t, "function");
    if (!f || !f->is_object())
      bad_at(at + ".function", "must be an object", "tools", "invalid_type");
    const json* name = field(*f, "name");
    if (!name || !name->is_string()) {
      bad_at(at + ".function.name", "must be a string", "tools", "invalid_type");
    }
    const std::string n = name->get<std::string>();
    bool ok = !n.empty() && n.size() <= 64;
    for (char c : n) {
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.');
    }
    if (!ok) {
      bad_at(
          at + ".function.name",
          "must be 1 to 64 letters, digits, underscores, dashes or dots (got " + name->dump() + ")",
          "tools");
    }
    if (std::find(names.begin(), names.end(), n) != names.end()) {
      bad_at(at + ".function.name", "repeats the name \"" + n + "\"", "tools");
    }
    names.push_back(n);
    if (const json* d = field(*f, "description"); d && !d->is_string()) {
      bad_at(at + ".function.description", "must be a string", "tools", "invalid_type");
    }
    if (const json* prm = field(*f, "parameters"); prm && !prm->is_object()) {
      bad_at(at + ".function.parameters", "must be a JSON Schema object", "tools", "invalid_type");
    }
    if (const json* st = field(*f, "strict"); st && !st->is_boolean()) {
      bad_at(at + ".function.strict", "must be a boolean", "tools", "invalid_type");
    }
  }
}

// tool_choice, checked against the tools; sets p.tool_choice / tool_choice_name.
void tool_choice(const json& body, const json* tools, CompletionParams& p) {
  const json* v = field(body, "tool_choice");
  if (!v) return;
  if (v->is_string()) {
    const std::string c = v->get<std::string>();
    if (c == "auto") {
      p.tool_choice = ToolChoice::kAuto;
    } else if (c == "none") {
      p.tool_choice = ToolChoice::kNone;
    } else if (c == "required") {
      p.tool_choice = ToolChoice::kRequired;
    } else {
      bad_value("tool_choice",
                "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                "\"function\": {\"name\": ...}} (got \"" +
                    c + "\")");
    }
  } else if (v->is_object()) {
    const json* type = field(*v, "type");
    const json* f = field(*v, "function");
    const json* name = f && f->is_object() ? field(*f, "name") : nullptr;
    if (!type || *type != "function" || !name || !name->is_string()) {
      bad_value("tool_choice",
                "must name a function: {\"type\": \"function\", \"function\": "
                "{\"name\": ...}}");
    }
    p.tool_choice = ToolChoice::kFunction;
    p.tool_choice_name = name->get<std::string>();
    bool found = false;
    for (const json& t : tools ? *tools : json::array())
      found |= t.at("function").at("name") == *name;
    if (!found) {
      bad_value("tool_choice",
                "names the function \"" + p.tool_choice_name + "\", which is not among 'tools'");
    }
  } else {
    bad_type("tool_choice", "a string or an object");
  }
  if (!tools && p.tool_choice != ToolChoice::kNone && p.tool_choice != ToolChoice::kAuto) {
    bad_value("tool_choice", "needs 'tools'");
  }
}

// A message's tool_calls (assistant) as the template gets them: OpenAI sends arguments as JSON
// text, templates expect a mapping (Hugging Face's convention; Qwen3's writes it with tojson).
ojson template_tool_calls(const ojson& calls, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].tool_calls";
  if (!calls.is_array()) bad_at(where, "must be an array", "messages", "invalid_type");
  ojson out = ojson::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const ojson& c = calls[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    if (!c.is_object()) bad_at(at, "must be an object", "messages", "invalid_type");
    if (auto t = c.find("type"); t != c.end() && !t->is_null() && *t != "function") {
      bad_at(at + ".type", "must be \"function\"", "messages");
    }
    if (auto id = c.find("id"); id != c.end() && !id->is_null() && !id->is_string()) {
      bad_at(at + ".id", "must be a string", "messages", "invalid_type");
    }
    const auto f = c.find("function");
    if (f == c.end() || !f->is_object()) {
      bad_at(at + ".function", "must be an object", "messages", "invalid_type");
    }
    const auto name = f->find("name");
    if (name == f->end() || !name->is_string() || name->get<std::string>().empty()) {
      bad_at(at + ".function.name", "must be a non-empty string", "messages", "invalid_type");
    }
    ojson call = c;
    const auto a = f->find("arguments");
    ojson args = ojson::object();
    if (a != f->end() && a->is_string()) {
      args = ojson::parse(a->get<std::string>(), nullptr, false);
      if (!args.is_object()) {
        bad_at(at + ".function.arguments", "must be a JSON object (as text)", "messages");
      }
    } else if (a != f->end() && a->is_object()) {
      args = *a;
    } else if (a != f->end() && !a->is_null()) {
      bad_at(at + ".function.arguments", "must be a JSON object (as text)", "messages",
             "invalid_type");
    }
    call["function"]["arguments"] = std::move(args);
    out.push_back(std::move(call));
  }
  return out;
}

// The messages as the template gets them: each keeps its fields (name, tool_call_id, ...), its
// content flattened to text, tool_calls' arguments as objects. Key order is the client's, as
// Python keeps it (visible through tojson).
ojson template_messages(const json& msgs, const ojson& omsgs,
                        const std::vector<ChatMessage>& conv) {
  ojson messages = ojson::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    ojson o;
    o["role"] = conv[i].role;
    o["content"] = conv[i].content;
    for (auto it = omsgs[i].begin(); it != omsgs[i].end(); ++it) {
      if (it.key() == "role" || it.key() == "content") continue;
      if (it.key() == "tool_calls" && !it.value().is_null()) {
        o["tool_calls"] = template_tool_calls(it.value(), i);
      } else {
        o[it.key()] = it.value();
      }
    }
    if (conv[i].role == "tool") {
      if (const json* id = field(msgs[i], "tool_call_id"); id && !id->is_string()) {
        bad_at("messages[" + std::to_string(i) + "].tool_call_id", "must be a string", "messages",
               "invalid_type");
      }
    }
    messages.push_back(std::move(o));
  }
  return messages;
}

// Renders the chat prompt into p.prompt; with the model's template, the tools offered (none
// under tool_choice "none"; only the named one under a named tool_choice, so that the prompt
// agrees with the grammar that forces it, tool_grammar.h) and chat_template_kwargs (as vLLM
// and llama-server take them: enable_thinking, reasoning_effort, ...).
}  // namespace

void chat_prompt(const json& body, const std::string& text, const ApiModel& m,
                 CompletionParams& p) {
  const json* msgs = field(body, "messages");
  if (!msgs)
    throw ApiError(400, "'messages' is required", "messages", "missing_required_parameter");
  if (!msgs->is_array()) bad_type("messages", "an array");
  if (msgs->empty()) bad_value("messages", "must not be empty");
  std::vector<ChatMessage> conv;
  bool uses_tools = false;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& msg = (*msgs)[i];
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) {
      bad_type("messages", "objects with a string 'role'");
    }
    std::string role = msg["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system turn
    uses_tools |= role == "tool" || field(msg, "tool_calls") != nullptr;
    conv.push_back({role, message_content(msg, i)});
  }
  const json* tools = field(body, "tools");
  if (tools && tools->empty()) tools = nullptr;  // as no tools
  uses_tools |= tools != nullptr;
  if (m.chat_template) {
    // Key order matters to templates (tojson of a schema): the body once more, in order.
    const ojson ob = ojson::parse(text, nullptr, false);
    ojson otools = nullptr;
    if (tools && p.tool_choice != ToolChoice::kNone) {
      otools = ojson::array();
      // Empty tools were dropped above, so ob's tools is a non-empty array.
      for (const ojson& t : ob.at("tools")) {
        if (p.tool_choice != ToolChoice::kFunction ||
            t.at("function").at("name") == p.tool_choice_name) {
          otools.push_back(t);
        }
      }
    }
    ojson ctx = {{"messages", template_messages(*msgs, ob.at("messages"), conv)},
                 {"tools", std::move(otools)},
                 {"documents", nullptr},
                 {"add_generation_prompt", true},
                 {"bos_token", m.chat.bos_token},
                 {"eos_token", m.chat.eos_token}};
    if (field(body, "chat_template_kwargs")) {
      const ojson& kw = ob.at("chat_template_kwargs");
      if (!kw.is_object()) bad_type("chat_template_kwargs", "an object");
      for (auto it = kw.begin(); it != kw.end(); ++it) {
        if (ctx.contains(it.key())) {
          bad_value("chat_template_kwargs",
                    "may not set '" + it.key() + "' (the request's own fields set it)");
        }
        ctx[it.key()] = it.value();
      }
    }
    try {
      const std::string prompt = m.chat_template->render(ctx);
      p.output.starts_in_reasoning =
          chatparse::prompt_opens_reasoning(prompt, m.output_format.think_open);
      // Templates that write bos_token themselves (Llama 3, Mistral) must not get a second.
      const bool has_bos = !m.chat.bos_token.empty() &&
                           prompt.compare(0, m.chat.bos_token.size(), m.chat.bos_token) == 0;
      p.prompt = m.tok->encode(prompt, !has_bos, true);
      return;
    } catch (const Error& e) {
      // The built-in formats cannot write tools or calls: falling back would drop them.
      if (uses_tools) {
        bad_value("messages",
                  std::string("could not be rendered by the model's chat template: ") + e.what());
      }
      if (m.log)
        m.log(std::string("chat template failed, using the ") + m.chat.name +
              " format: " + e.what());
    }
  } else if (uses_tools) {
    bad_value(tools ? "tools" : "messages",
              "needs the model's own chat template (tokenizer.chat_template) to be written "
              "into the prompt; this server renders chat with the built-in " +
                  m.chat.name + " format");
  }
  std::string prompt;
  try {
    prompt = render_chat(m.chat, conv, true);
  } catch (const Error& e) {
    bad_value("messages", e.what());
  }
  p.prompt = m.tok->encode(prompt, !m.chat.renders_bos(), true);
}

// Tools, tool_choice, parallel_tool_calls and reasoning_format: how the answer is parsed.
void output_fields(const json& body, const ApiModel& m, CompletionParams& p) {
  const json* tools = field(body, "tools");
  if (tools) check_tools(*tools);
  if (tools && tools->empty()) tools = nullptr;  // as no tools
  tool_choice(body, tools, p);
  const bool parallel = get_bool(body, "parallel_tool_calls", true);
  bool extract = m.extract_reasoning;
  if (const json* v = field(body, "reasoning_format")) {
    // llama-server's field; "auto" is its default, which returns reasoning apart.
    if (*v == "none") {
      extract = false;
    } else if (*v == "deepseek" || *v == "auto") {
      extract = true;
    } else {
      bad_value("reasoning_format",
                "must be \"none\" (reasoning stays in the content) or "
                "\"deepseek\" (returned as reasoning_content)");
    }
  }
  chatparse::ParseOptions& o = p.output;
  o.format = m.output_format;
  o.parse_tools = tools && p.tool_choice != ToolChoice::kNone &&
                  m.output_format.tools != chatparse::ToolFormat::kNone;
  o.extract_reasoning = extract;
  o.parallel_tool_calls = parallel;
  if (tools) o.tools = *tools;
  o.id_seed = uint64_t(std::random_device{}()) << 32 | std::random_device{}();
  p.parse_output = o.parse_tools || (o.format.think_tags && extract) ||
                   o.format.tools == chatparse::ToolFormat::kHarmony;
}

}  // namespace lynx::server
