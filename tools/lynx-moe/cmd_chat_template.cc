// `lynx-moe chat-template (-m MODEL | --template FILE) --messages FILE.json [--tools FILE.json]
// [--no-generation-prompt] [--kwargs JSON]`: prints the prompt that the model's own chat
// template (or the given Jinja file) renders for a conversation, byte for byte, with the
// variables Hugging Face passes (messages, tools, add_generation_prompt, bos_token, eos_token,
// and extra template arguments such as enable_thinking).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "lynx/chat_template.h"
#include "lynx/gguf.h"
#include "lynx/tokenizer.h"

namespace lynx::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct ChatTemplateArgs {
  std::string model, template_file, messages, tools, kwargs, bos, eos;
  bool no_generation_prompt = false;
  int64_t now = -1;
};

ojson parse_json(const std::string& text, const std::string& what) {
  try {
    return ojson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not valid JSON: " + e.what());
  }
}

void run_chat_template(const ChatTemplateArgs& a) {
  std::string source, bos = a.bos, eos = a.eos;
  if (!a.model.empty()) {
    const gguf::File f = gguf::File::open(a.model);
    source = f.get_string("tokenizer.chat_template", "");
    if (source.empty()) throw Error(a.model + ": the file has no tokenizer.chat_template");
    const auto tok = Tokenizer::from_gguf(f);
    if (bos.empty() && tok->bos() >= 0) bos = tok->token_to_piece(tok->bos());
    if (eos.empty() && tok->eos() >= 0) eos = tok->token_to_piece(tok->eos());
  } else {
    source = read_text_file(a.template_file, "--template");
  }
  // --messages: a JSON array of messages, or a chat request object with "messages" (and
  // optionally "tools").
  ojson msgs = parse_json(read_text_file(a.messages, "--messages"), "--messages");
  ojson tools = nullptr;
  if (msgs.is_object()) {
    if (msgs.contains("tools")) tools = msgs["tools"];
    msgs = ojson(msgs.value("messages", ojson::array()));
  }
  if (!msgs.is_array()) throw UsageError("--messages: expected a JSON array of messages");
  if (!a.tools.empty()) tools = parse_json(read_text_file(a.tools, "--tools"), "--tools");
  if (!tools.is_null() && !tools.is_array())
    throw UsageError("--tools: expected a JSON array of tools");
  ojson ctx = {{"messages", msgs},     {"tools", tools},
               {"documents", nullptr}, {"add_generation_prompt", !a.no_generation_prompt},
               {"bos_token", bos},     {"eos_token", eos}};
  if (!a.kwargs.empty()) {
    const ojson extra = parse_json(a.kwargs, "--kwargs");
    if (!extra.is_object()) throw UsageError("--kwargs: expected a JSON object");
    for (auto it = extra.begin(); it != extra.end(); ++it) ctx[it.key()] = it.value();
  }
  TemplateOptions opt;
  opt.now = a.now;
  const std::string out = ChatTemplate(source, opt).render(ctx);
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void register_chat_template(CLI::App& app) {
  auto args = std::make_shared<ChatTemplateArgs>();
  CLI::App* cmd = app.add_subcommand("chat-template",
                                     "Print the prompt a chat template renders for a conversation");
  auto* m = cmd->add_option("-m,--model", args->model,
                            "GGUF file: its tokenizer.chat_template and BOS/EOS text");
  auto* t = cmd->add_option("--template", args->template_file, "A Jinja chat template file");
  m->excludes(t);
  cmd->add_option("--messages", args->messages,
                  "JSON file: an array of messages, or an object with \"messages\" (and "
                  "\"tools\")")
      ->required();
  cmd->add_option("--tools", args->tools, "JSON file: an array of tools (OpenAI format)");
  cmd->add_flag("--no-generation-prompt", args->no_generation_prompt,
                "Render without add_generation_prompt");
  cmd->add_option("--kwargs", args->kwargs,
                  "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  cmd->add_option("--bos", args->bos, "bos_token text (default: the model's, or empty)");
  cmd->add_option("--eos", args->eos, "eos_token text (default: the model's, or empty)");
  cmd->add_option("--now", args->now,
                  "Time strftime_now formats, in seconds since the epoch (UTC; default: now)");
  cmd->callback([args] {
    if (args->model.empty() && args->template_file.empty())
      throw UsageError("chat-template needs -m MODEL or --template FILE");
    run_chat_template(*args);
  });
}

}  // namespace lynx::cli
