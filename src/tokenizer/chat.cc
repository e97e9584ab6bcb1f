// Chat formats. Each render_* function follows one reference template (cited), turn by turn.
#include "lynx/chat.h"

#include <ctime>

#include "lynx/gguf.h"
#include "lynx/tokenizer.h"
#include "util/strings.h"

namespace lynx {
namespace {

struct NameEntry {
  std::string_view name;
  ChatFamily family;
  std::string_view canonical;
};

constexpr NameEntry kNames[] = {
    {"chatml", ChatFamily::kChatML, "chatml"},
    {"qwen", ChatFamily::kChatML, "chatml"},
    {"qwen2", ChatFamily::kChatML, "chatml"},
    {"qwen3", ChatFamily::kChatML, "chatml"},
    {"mistral", ChatFamily::kMistral, "mistral"},
    {"mixtral", ChatFamily::kMistral, "mistral"},
    {"tulu", ChatFamily::kTulu, "tulu"},
    {"olmoe", ChatFamily::kTulu, "tulu"},
    {"olmo", ChatFamily::kTulu, "tulu"},
    {"deepseek2", ChatFamily::kDeepSeek2, "deepseek2"},
    {"deepseek", ChatFamily::kDeepSeek2, "deepseek2"},
    {"deepseek3", ChatFamily::kDeepSeek3, "deepseek3"},
    {"llama3", ChatFamily::kLlama3, "llama3"},
    {"phi3", ChatFamily::kPhi3, "phi3"},
    {"phi3.5", ChatFamily::kPhi3, "phi3"},
    {"glm4.5", ChatFamily::kGlm45, "glm4.5"},
    {"glm4moe", ChatFamily::kGlm45, "glm4.5"},
    {"glm", ChatFamily::kGlm45, "glm4.5"},
    {"harmony", ChatFamily::kHarmony, "harmony"},
    {"gpt-oss", ChatFamily::kHarmony, "harmony"},
    {"minimax-m2", ChatFamily::kMinimaxM2, "minimax-m2"},
    {"minimax", ChatFamily::kMinimaxM2, "minimax-m2"},
    {"dots1", ChatFamily::kDots1, "dots1"},
    {"dots", ChatFamily::kDots1, "dots1"},
    {"ling2", ChatFamily::kLing2, "ling2"},
    {"bailing2", ChatFamily::kLing2, "ling2"},
    {"bailingmoe2", ChatFamily::kLing2, "ling2"},
    {"hunyuan-moe", ChatFamily::kHunyuanMoe, "hunyuan-moe"},
    {"hunyuan", ChatFamily::kHunyuanMoe, "hunyuan-moe"},
};

using util::contains;
using util::trim;  // Jinja's `trim`: Python's str.strip() on ASCII whitespace

[[noreturn]] void bad_role(const ChatFormat& fmt, const std::string& role) {
  throw Error("chat format '" + fmt.name + "' has no '" + role +
              "' role (system, user and assistant are supported)");
}

// ChatML as Qwen's templates write it: an optional default system turn, then
// "<|im_start|>{role}\n{content}<|im_end|>\n" per message.
std::string render_chatml(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::string s;
  if (!f.default_system.empty() && (m.empty() || m[0].role != "system")) {
    s += "<|im_start|>system\n" + f.default_system + "<|im_end|>\n";
  }
  for (const auto& msg : m) s += "<|im_start|>" + msg.role + "\n" + msg.content + "<|im_end|>\n";
  if (gen) s += "<|im_start|>assistant\n";
  return s;
}

// Mixtral-8x7B-Instruct-v0.1: bos, "[INST] {user} [/INST]", "{assistant}</s>". That template
// has no system role; a system message is put in front of the first user message,
// separated by a blank line (Mistral's own convention). No generation prompt exists.
std::string render_mistral(const ChatFormat& f, std::span<const ChatMessage> m, bool) {
  std::string s = f.bos_token;
  std::string system;
  for (const auto& msg : m) {
    if (msg.role == "system") {
      system += (system.empty() ? "" : "\n\n") + msg.content;
    } else if (msg.role == "user") {
      const std::string content = system.empty() ? msg.content : system + "\n\n" + msg.content;
      system.clear();
      s += "[INST] " + content + " [/INST]";
    } else if (msg.role == "assistant") {
      s += msg.content + f.eos_token;
    } else {
      bad_role(f, msg.role);
    }
  }
  return s;
}

// Tulu (OLMoE-1B-7B-Instruct, OLMo-2): bos, "<|system|>\n..\n", "<|user|>\n..\n",
// "<|assistant|>\n..{eos}" plus "\n" unless it is the last message; then "<|assistant|>\n".
std::string render_tulu(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::string s = f.bos_token;
  for (size_t i = 0; i < m.size(); ++i) {
    const auto& msg = m[i];
    const bool last = i + 1 == m.size();
    if (msg.role == "system") {
      s += "<|system|>\n" + msg.content + "\n";
    } else if (msg.role == "user") {
      s += "<|user|>\n" + msg.content + "\n";
    } else if (msg.role == "assistant") {
      s += "<|assistant|>\n" + msg.content + f.eos_token + (last ? "" : "\n");
    } else {
      bad_role(f, msg.role);
    }
    if (last && gen) s += "<|assistant|>\n";
  }
  return s;
}

// DeepSeek-V2(-Lite)-Chat: bos, "User: {u}\n\n", "Assistant: {a}{eos}", "{system}\n\n";
// generation prompt "Assistant:".
std::string render_deepseek2(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::string s = f.bos_token;
  for (const auto& msg : m) {
    if (msg.role == "user") {
      s += "User: " + msg.content + "\n\n";
    } else if (msg.role == "assistant") {
      s += "Assistant: " + msg.content + f.eos_token;
    } else if (msg.role == "system") {
      s += msg.content + "\n\n";
    } else {
      bad_role(f, msg.role);
    }
  }
  if (gen) s += "Assistant:";
  return s;
}

// DeepSeek-V3: bos, then all system prompts joined by "\n\n", then "<｜User｜>{u}" and
// "<｜Assistant｜>{a}<｜end▁of▁sentence｜>"; generation prompt "<｜Assistant｜>".
std::string render_deepseek3(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::string system;
  bool first = true;
  for (const auto& msg : m) {
    if (msg.role != "system") continue;
    system += (first ? "" : "\n\n") + msg.content;
    first = false;
  }
  std::string s = f.bos_token + system;
  for (const auto& msg : m) {
    if (msg.role == "user") {
      s += "<｜User｜>" + msg.content;
    } else if (msg.role == "assistant") {
      s += "<｜Assistant｜>" + msg.content + "<｜end▁of▁sentence｜>";
    } else if (msg.role != "system") {
      bad_role(f, msg.role);
    }
  }
  if (gen) s += "<｜Assistant｜>";
  return s;
}

// Llama 3 (Meta-Llama-3-8B-Instruct): bos before the first turn, each turn
// "<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>".
std::string render_llama3(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::string s;
  for (size_t i = 0; i < m.size(); ++i) {
    if (i == 0) s += f.bos_token;
    s += "<|start_header_id|>" + m[i].role + "<|end_header_id|>\n\n" + trim(m[i].content) +
         "<|eot_id|>";
  }
  if (gen) s += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return s;
}

// Phi-3 / Phi-3.5-MoE-instruct: "<|{role}|>\n{content}<|end|>\n" (an empty system message is
// skipped); "<|assistant|>\n" as generation prompt, otherwise the template ends with eos.
std::string render_phi3(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::string s;
  for (const auto& msg : m) {
    if (msg.role == "system") {
      if (!msg.content.empty()) s += "<|system|>\n" + msg.content + "<|end|>\n";
    } else if (msg.role == "user" || msg.role == "assistant") {
      s += "<|" + msg.role + "|>\n" + msg.content + "<|end|>\n";
    } else {
      bad_role(f, msg.role);
    }
  }
  s += gen ? "<|assistant|>\n" : f.eos_token;
  return s;
}

// GLM-4.5 / 4.5-Air (zai-org's chat_template.jinja, rendered with the trim_blocks /
// lstrip_blocks of Hugging Face's Jinja environment; enable_thinking left undefined, no tools):
// "[gMASK]<sop>", then "<|system|>\n{s}", "<|user|>\n{u}", and
// "<|assistant|>\n<think>{r}</think>" + ("\n" + content.strip() when not blank), where an
// assistant message's "<think>r</think>content" is split at the first "</think>" and the
// reasoning r is kept only for messages after the last user message (else "<think></think>");
// generation prompt "<|assistant|>". The leading "[gMASK]<sop>" plays the BOS's part
// (renders_bos()).
std::string render_glm45(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::ptrdiff_t last_user = -1;
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].role == "user") last_user = std::ptrdiff_t(i);
  }
  std::string s = "[gMASK]<sop>";
  for (size_t i = 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (msg.role == "system" || msg.role == "user") {
      s += "<|" + msg.role + "|>\n" + msg.content;
    } else if (msg.role == "assistant") {
      std::string content = msg.content, reasoning;
      const size_t close = content.find("</think>");
      if (close != std::string::npos) {
        // Before the first close: rstrip('\n'), the text after the last "<think>",
        // lstrip('\n'); after the last close: lstrip('\n').
        std::string before = content.substr(0, close);
        while (!before.empty() && before.back() == '\n') before.pop_back();
        const size_t open = before.rfind("<think>");
        reasoning = open == std::string::npos ? before : before.substr(open + 7);
        reasoning.erase(0, reasoning.find_first_not_of('\n'));
        content = content.substr(content.rfind("</think>") + 8);
        content.erase(0, content.find_first_not_of('\n'));
      }
      const bool keep = std::ptrdiff_t(i) > last_user && !reasoning.empty();
      s += "<|assistant|>\n<think>" + (keep ? trim(reasoning) : std::string()) + "</think>";
      const std::string body = trim(content);
      if (!body.empty()) s += "\n" + body;
    } else {
      bad_role(f, msg.role);
    }
  }
  if (gen) s += "<|assistant|>";
  return s;
}

// Harmony, as gpt-oss's chat_template.jinja renders system/user/assistant turns (no tools,
// no "thinking"): a system message with the model identity, knowledge cutoff, date,
// reasoning effort (medium) and valid channels; a first system (or developer) message becomes
// the developer message "# Instructions\n\n{content}\n\n"; then
// "<|start|>user<|message|>{u}<|end|>" and "<|start|>assistant<|channel|>final<|message|>{a}"
// closed by <|end|>, or by <|return|> when it is the last message and no generation prompt
// follows; generation prompt "<|start|>assistant". Later system messages are not rendered
// (the template drops them).
std::string render_harmony(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::string date = f.date;
  if (date.empty()) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    date = buf;
  }
  std::string s =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: " +
      date +
      "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must "
      "be included for every message.<|end|>";
  size_t first = 0;
  if (!m.empty() && (m[0].role == "system" || m[0].role == "developer")) {
    if (!m[0].content.empty()) {
      s += "<|start|>developer<|message|># Instructions\n\n" + m[0].content + "\n\n<|end|>";
    }
    first = 1;
  }
  for (size_t i = first; i < m.size(); ++i) {
    const auto& msg = m[i];
    if (msg.role == "user") {
      s += "<|start|>user<|message|>" + msg.content + "<|end|>";
    } else if (msg.role == "assistant") {
      const bool last = i + 1 == m.size();
      s += "<|start|>assistant<|channel|>final<|message|>" + msg.content +
           (last && !gen ? "<|return|>" : "<|end|>");
    } else if (msg.role != "system" && msg.role != "developer") {
      bad_role(f, msg.role);
    }
  }
  if (gen) s += "<|start|>assistant";
  return s;
}

// MiniMax-M2, as its chat_template.jinja renders system/user/assistant turns (no tools; the
// template of MiniMaxAI/MiniMax-M2, as llama.cpp's models/templates/MiniMax-M2.jinja):
// "]~!b[]~b]system\n" + the first message's content when it is a system message with text,
// else the model identity, + "[e~[\n"; then "]~b]user\n{u}[e~[\n" and "]~b]ai\n" + {a} +
// "[e~[\n", where an answer holding "</think>" is split as the template splits it (the
// reasoning: before the first close, '\n'-stripped, after the last "<think>", '\n'-stripped;
// the answer: after the last close, '\n'-stripped) and the reasoning is written as
// "<think>\n{r}\n</think>\n\n" only after the last user message; later system messages are
// not rendered (the template has no branch for them); generation prompt "]~b]ai\n<think>\n".
std::string render_minimax_m2(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  size_t first = 0;
  std::string system = f.default_system.empty() ? "You are a helpful assistant." : f.default_system;
  if (!m.empty() && m[0].role == "system") {
    if (!m[0].content.empty()) system = m[0].content;
    first = 1;
  }
  std::ptrdiff_t last_user = -1;
  for (size_t i = first; i < m.size(); ++i) {
    if (m[i].role == "user") last_user = std::ptrdiff_t(i);
  }
  auto strip_nl = [](std::string x) {
    x.erase(0, x.find_first_not_of('\n'));
    const size_t e = x.find_last_not_of('\n');
    x.erase(e == std::string::npos ? 0 : e + 1);
    return x;
  };
  std::string s = "]~!b[]~b]system\n" + system + "[e~[\n";
  for (size_t i = first; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (msg.role == "user") {
      s += "]~b]user\n" + msg.content + "[e~[\n";
    } else if (msg.role == "assistant") {
      std::string content = msg.content, reasoning;
      const size_t close = content.find("</think>");
      if (close != std::string::npos) {
        reasoning = strip_nl(content.substr(0, close));
        const size_t open = reasoning.rfind("<think>");
        if (open != std::string::npos) reasoning = strip_nl(reasoning.substr(open + 7));
        content = strip_nl(content.substr(content.rfind("</think>") + 8));
      }
      s += "]~b]ai\n";
      if (!reasoning.empty() && std::ptrdiff_t(i) > last_user) {
        s += "<think>\n" + reasoning + "\n</think>\n\n";
      }
      s += content + "[e~[\n";
    } else if (msg.role != "system") {
      bad_role(f, msg.role);
    }
  }
  if (gen) s += "]~b]ai\n<think>\n";
  return s;
}

// dots.llm1.inst, as llama.cpp's and ik_llama.cpp's built-in LLM_CHAT_TEMPLATE_DOTS1 renders
// it (chosen there by "<|endofuserprompt|>" in the template): "<|system|>{s}<|endofsystem|>",
// "<|userprompt|>{u}<|endofuserprompt|>", "<|response|>{a}<|endofresponse|>", no separators;
// generation prompt "<|response|>". Without a leading system message the template's default
// system text comes first ("You are a helpful assistant.", as ms-swift's dots1 template has it).
std::string render_dots1(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::string s;
  if (m.empty() || m[0].role != "system") {
    s = "<|system|>" +
        (f.default_system.empty() ? std::string("You are a helpful assistant.")
                                  : f.default_system) +
        "<|endofsystem|>";
  }
  for (const ChatMessage& msg : m) {
    if (msg.role == "system") {
      s += "<|system|>" + msg.content + "<|endofsystem|>";
    } else if (msg.role == "user") {
      s += "<|userprompt|>" + msg.content + "<|endofuserprompt|>";
    } else if (msg.role == "assistant") {
      s += "<|response|>" + msg.content + "<|endofresponse|>";
    } else {
      bad_role(f, msg.role);
    }
  }
  if (gen) s += "<|response|>";
  return s;
}

// Ling 2.0 (Ling-mini-2.0 / Ling-flash-2.0 / Ling-1T), as its released chat_template renders
// system/user/assistant/tool turns (no tool definitions or tool calls): "<role>SYSTEM</role>",
// the first message's content + "\n" when it is a system message, then "detailed thinking
// off<|role_end|>" (always; the template's thinking_option is 'off'); "<role>HUMAN</role>{u}
// <|role_end|>" (no space); a later system message "<role>SYSTEM</role>{s}<|role_end|>";
// "<role>ASSISTANT</role>{a}<|role_end|>", where an answer holding "</think>" is split as the
// template splits it (the reasoning: before the first close, after the last "<think>",
// '\n'-stripped; the answer: after the last close, '\n'-stripped at the start) and the
// reasoning written as "\n<think>\n{r}\n</think>\n\n" only after the last user message;
// consecutive tool messages as one "<role>OBSERVATION</role>" turn of
// "\n<tool_response>\n{t}\n</tool_response>" each; generation prompt "<role>ASSISTANT</role>".
// Unlike llama.cpp's built-in LLM_CHAT_TEMPLATE_BAILING2, which writes a leading system
// message as its own turn without the "detailed thinking off" line, this is the template's text.
std::string render_ling2(const ChatFormat& f, std::span<const ChatMessage> m, bool gen) {
  std::string s = "<role>SYSTEM</role>";
  if (!m.empty() && m[0].role == "system") s += m[0].content + "\n";
  s += "detailed thinking off<|role_end|>";
  // The last user message that is not a wrapped tool response (the template's
  // last_query_index; the last message when there is none).
  std::ptrdiff_t last_query = std::ptrdiff_t(m.size()) - 1;
  for (size_t i = m.size(); i-- > 0;) {
    const std::string& c = m[i].content;
    const bool wrapped = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (m[i].role == "user" && !wrapped) {
      last_query = std::ptrdiff_t(i);
      break;
    }
  }
  auto lstrip_nl = [](std::string x) { return x.erase(0, x.find_first_not_of('\n')); };
  auto strip_nl = [&](std::string x) {
    x = lstrip_nl(std::move(x));
    const size_t e = x.find_last_not_of('\n');
    x.erase(e == std::string::npos ? 0 : e + 1);
    return x;
  };
  for (size_t i = 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (msg.role == "user") {
      s += "<role>HUMAN</role>" + msg.content + "<|role_end|>";
    } else if (msg.role == "system") {
      if (i > 0) s += "<role>SYSTEM</role>" + msg.content + "<|role_end|>";
    } else if (msg.role == "assistant") {
      std::string content = msg.content, reasoning;
      const size_t close = content.find("</think>");
      if (close != std::string::npos) {
        reasoning = content.substr(0, close);
        const size_t open = reasoning.rfind("<think>");
        if (open != std::string::npos) reasoning = reasoning.substr(open + 7);
        reasoning = strip_nl(reasoning);
        content = lstrip_nl(content.substr(content.rfind("</think>") + 8));
      }
      s += "<role>ASSISTANT</role>";
      if (!reasoning.empty() && std::ptrdiff_t(i) > last_query) {
        s += "\n<think>\n" + reasoning + "\n</think>\n\n";
      }
      s += content + "<|role_end|>";
    } else if (msg.role == "tool") {
      if (i == 0 || m[i - 1].role != "tool") s += "<role>OBSERVATION</role>";
      s += "\n<tool_response>\n" + msg.content + "\n</tool_response>";
      if (i + 1 == m.size() || m[i + 1].role != "tool") s += "<|role_end|>";
    } else {
      bad_role(f, msg.role);
    }
  }
  if (gen) s += "<role>ASSISTANT</role>";
  return s;
}

// Hunyuan-A13B-Instruct, as its Jinja template renders a conversation (checked with Jinja2):
// a non-empty first message that is a system message is "<|startoftext|>{s}<|extra_4|>"; a
// user turn is "<|startoftext|>{u}<|extra_0|>", except the turn right after that head, which is
// "{u}<|extra_0|>" (the head's <|startoftext|> opens it), and, after an empty first message, the
// template's "<|startoftext|><|startoftext|>{u}<|extra_0|>"; an assistant turn "{a}<|eos|>";
// nothing between turns and no generation prompt (the model answers right after <|extra_0|>,
// its reasoning as "<think>\n...\n</think>\n<answer>\n...\n</answer>", which past turns keep
// as written). A system message after the first is written bare, as the template writes it.
// llama.cpp's built-in LLM_CHAT_TEMPLATE_HUNYUAN_MOE differs on the turn after the head (it
// repeats <|startoftext|>). Other roles are refused.
std::string render_hunyuan_moe(const ChatFormat& f, std::span<const ChatMessage> m, bool) {
  std::string s;
  bool has_head = true;
  for (size_t i = 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    std::string content = msg.content;
    if (i == 0) {
      if (content.empty()) {
        has_head = false;
      } else if (msg.role == "system") {
        content = "<|startoftext|>" + content + "<|extra_4|>";
      }
    }
    if (msg.role == "user") {
      if (i == 1 && !has_head) content = "<|startoftext|>" + content;
      if (i == 1 && has_head) {
        content += "<|extra_0|>";
      } else {
        content = "<|startoftext|>" + content + "<|extra_0|>";
      }
    } else if (msg.role == "assistant") {
      content += "<|eos|>";
    } else if (msg.role != "system") {
      bad_role(f, msg.role);
    }
    s += content;
  }
  return s;
}

// MiniMax-M2's model identity: the first `set model_identity = "..."` literal of its template
// (the released templates name the model there); empty when there is none.
std::string minimax_identity(std::string_view tmpl) {
  const std::string_view head = "set model_identity = \"";
  const size_t pos = tmpl.find(head);
  if (pos == std::string_view::npos) return "";
  const size_t b = pos + head.size();
  const size_t e = tmpl.find('"', b);
  if (e == std::string_view::npos) return "";
  const std::string_view text = tmpl.substr(b, e - b);
  if (text.find_first_of("'{}\\") != std::string_view::npos) return "";
  return std::string(text);
}

// The literal default system prompt of a ChatML template:
// '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' written as a Jinja string.
std::string chatml_default_system(std::string_view tmpl) {
  const std::string_view head = "<|im_start|>system\\n";
  for (size_t pos = 0; (pos = tmpl.find(head, pos)) != std::string_view::npos; ++pos) {
    const size_t b = pos + head.size();
    const size_t e = tmpl.find("<|im_end|>", b);
    if (e == std::string_view::npos) break;
    const std::string_view text = tmpl.substr(b, e - b);
    if (text.empty() || text.find_first_of("'\"{}+\\") != std::string_view::npos) continue;
    return std::string(text);
  }
  return "";
}

}  // namespace

bool ChatFormat::renders_bos() const {
  if (family == ChatFamily::kGlm45) return true;       // "[gMASK]<sop>" always leads
  if (family == ChatFamily::kMinimaxM2) return true;   // "]~!b[" (its BOS) always leads
  if (family == ChatFamily::kHunyuanMoe) return true;  // "<|startoftext|>" (its BOS) leads
  if (bos_token.empty()) return false;
  switch (family) {
    case ChatFamily::kMistral:
    case ChatFamily::kTulu:
    case ChatFamily::kDeepSeek2:
    case ChatFamily::kDeepSeek3:
    case ChatFamily::kLlama3:
      return true;
    default:
      return false;
  }
}

const std::vector<std::string>& chat_format_names() {
  static const std::vector<std::string> names = {
      "chatml", "mistral", "tulu",       "deepseek2", "deepseek3", "llama3",     "phi3",
      "glm4.5", "harmony", "minimax-m2", "dots1",     "ling2",     "hunyuan-moe"};
  return names;
}

ChatFormat chat_format_from_name(std::string_view name, std::string bos, std::string eos) {
  for (const auto& e : kNames) {
    if (e.name == name) {
      ChatFormat f;
      f.family = e.family;
      f.name = std::string(e.canonical);
      f.bos_token = std::move(bos);
      f.eos_token = std::move(eos);
      return f;
    }
  }
  std::string list;
  for (const auto& n : chat_format_names()) list += (list.empty() ? "" : ", ") + n;
  throw Error("unknown chat format '" + std::string(name) + "' (known: " + list + ")");
}

ChatFormat chat_format_from_template(std::string_view t, std::string bos, std::string eos) {
  const char* name = nullptr;
  if (contains(t, "<|start|>") && contains(t, "<|message|>") && contains(t, "<|channel|>")) {
    name = "harmony";
  } else if (contains(t, "]~b]ai") && contains(t, "[e~[")) {
    name = "minimax-m2";
  } else if (contains(t, "<|endofuserprompt|>")) {
    name = "dots1";
  } else if (contains(t, "<role>HUMAN</role>") && contains(t, "<|role_end|>")) {
    // Ling 2.0's template (thinking off). Another Bailing template (Ling 1.x has no
    // <|role_end|>; Ring 2.0's was not at hand to check) would be rendered wrong: no name.
    if (contains(t, "thinking_option = 'off'")) name = "ling2";
  } else if (contains(t, "<|startoftext|>") && contains(t, "<|extra_4|>")) {
    name = "hunyuan-moe";
  } else if (contains(t, "[gMASK]<sop>")) {
    // GLM-4.5 / 4.6 (the empty think block of past turns); other GLM templates (GLM-4,
    // GLM-4.7) differ in their newlines and would be rendered wrong: no name, ask for one.
    // GLM-5.2's has the think blocks too but opens with a "<|system|>Reasoning Effort: .."
    // turn of its own (ik_llama.cpp's models/templates/GLM-5.2.jinja): not this format either.
    if (contains(t, "<think></think>") && contains(t, "<|assistant|>") &&
        !contains(t, "Reasoning Effort")) {
      name = "glm4.5";
    }
  } else if (contains(t, "<|im_start|>")) {
    name = "chatml";
  } else if (contains(t, "[INST]")) {
    name = "mistral";
  } else if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) {
    name = "phi3";
  } else if (contains(t, "<|assistant|>") && contains(t, "<|user|>")) {
    name = "tulu";
  } else if (contains(t, "<｜Assistant｜>") && contains(t, "<｜User｜>")) {
    name = "deepseek3";
  } else if (contains(t, "'Assistant: ' + message['content'] + eos_token") ||
             (contains(t, "'User: '") && contains(t, "'Assistant:'"))) {
    name = "deepseek2";
  } else if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) {
    name = "llama3";
  }
  if (!name) {
    std::string list;
    for (const auto& n : chat_format_names()) list += (list.empty() ? "" : ", ") + n;
    throw Error("unrecognized chat template (tokenizer.chat_template starts with \"" +
                gguf::printable(t.substr(0, 60)) + "\"); choose a format by name: " + list);
  }
  ChatFormat f = chat_format_from_name(name, std::move(bos), std::move(eos));
  if (f.family == ChatFamily::kChatML) f.default_system = chatml_default_system(t);
  if (f.family == ChatFamily::kMinimaxM2) f.default_system = minimax_identity(t);
  return f;
}

ChatFormat chat_format_for_model(const gguf::File& file, const Tokenizer& tok,
                                 std::string_view name) {
  const std::string bos = tok.bos() >= 0 ? tok.token_to_piece(tok.bos()) : "";
  const std::string eos = tok.eos() >= 0 ? tok.token_to_piece(tok.eos()) : "";
  if (!name.empty()) return chat_format_from_name(name, bos, eos);
  const std::string tmpl = file.get_string("tokenizer.chat_template", "");
  if (tmpl.empty()) {
    throw Error(file.path() +
                ": no tokenizer.chat_template in the file; choose a chat format "
                "by name");
  }
  return chat_format_from_template(tmpl, bos, eos);
}

std::string render_chat(const ChatFormat& fmt, std::span<const ChatMessage> messages,
                        bool add_generation_prompt) {
  switch (fmt.family) {
    case ChatFamily::kChatML:
      return render_chatml(fmt, messages, add_generation_prompt);
    case ChatFamily::kMistral:
      return render_mistral(fmt, messages, add_generation_prompt);
    case ChatFamily::kTulu:
      return render_tulu(fmt, messages, add_generation_prompt);
    case ChatFamily::kDeepSeek2:
      return render_deepseek2(fmt, messages, add_generation_prompt);
    case ChatFamily::kDeepSeek3:
      return render_deepseek3(fmt, messages, add_generation_prompt);
    case ChatFamily::kLlama3:
      return render_llama3(fmt, messages, add_generation_prompt);
    case ChatFamily::kPhi3:
      return render_phi3(fmt, messages, add_generation_prompt);
    case ChatFamily::kGlm45:
      return render_glm45(fmt, messages, add_generation_prompt);
    case ChatFamily::kHarmony:
      return render_harmony(fmt, messages, add_generation_prompt);
    case ChatFamily::kMinimaxM2:
      return render_minimax_m2(fmt, messages, add_generation_prompt);
    case ChatFamily::kDots1:
      return render_dots1(fmt, messages, add_generation_prompt);
    case ChatFamily::kLing2:
      return render_ling2(fmt, messages, add_generation_prompt);
    case ChatFamily::kHunyuanMoe:
      return render_hunyuan_moe(fmt, messages, add_generation_prompt);
  }
  throw Error("render_chat: unknown chat family");
}

}  // namespace lynx
