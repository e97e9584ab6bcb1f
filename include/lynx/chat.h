// Chat prompt formats: the families of `tokenizer.chat_template` that the served MoE models
// use, rendered natively (no Jinja engine). Each family reproduces its reference template
// output byte for byte for system/user/assistant turns, including the BOS text where the
// template writes `{{ bos_token }}`; tool calls and "thinking" variants are not covered.
//
// Prompt -> tokens: encode(render_chat(...), /*add_special=*/!fmt.renders_bos(),
//                          /*parse_special=*/true).
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lynx/error.h"

namespace lynx {

namespace gguf {
class File;
}
class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (ChatML and Llama-3 accept any role)
  std::string content;
};

enum class ChatFamily {
  kChatML,      // Qwen2/Qwen3(-MoE) and other <|im_start|> models
  kMistral,     // Mixtral / Mistral v1 [INST] ... [/INST]
  kTulu,        // OLMoE / OLMo / Tulu <|user|> <|assistant|>
  kDeepSeek2,   // DeepSeek-V2(-Lite) "User: ... Assistant:"
  kDeepSeek3,   // DeepSeek-V3 <｜User｜> <｜Assistant｜>
  kLlama3,      // Llama 3 <|start_header_id|>
  kPhi3,        // Phi-3 / Phi-3.5-MoE <|user|> ... <|end|>
  kGlm45,       // GLM-4.5 / 4.5-Air [gMASK]<sop><|system|> ... <|assistant|>
  kHarmony,     // gpt-oss (OpenAI's harmony format) <|start|>{role}<|message|> ... <|end|>
  kMinimaxM2,   // MiniMax-M2 / M2.1 / M2.5 ]~!b[]~b]system ... [e~[ ]~b]user ... ]~b]ai
  kDots1,       // dots.llm1.inst <|system|> ... <|userprompt|> ... <|response|> ...
  kLing2,       // Ling 2.0 (bailingmoe2) <role>SYSTEM</role> ... <role>HUMAN</role> ...
  kHunyuanMoe,  // Hunyuan-A13B-Instruct <|startoftext|> ... <|extra_4|> / <|extra_0|> ... <|eos|>
};

struct ChatFormat {
  ChatFamily family = ChatFamily::kChatML;
  std::string name;  // canonical name: chatml, mistral, tulu, deepseek2, deepseek3, glm4.5, ...
  std::string bos_token;  // what the template's bos_token expands to ("" when none)
  std::string eos_token;  // what the template's eos_token expands to
  // ChatML: the system prompt the template inserts when the conversation has none (Qwen's
  // "You are a helpful assistant."), taken from the template text; empty = none.
  // MiniMax-M2: its model_identity, always written when the conversation has no system text
  // (from the template text; empty = the template's fallback "You are a helpful assistant.").
  std::string default_system;
  // Harmony: the "Current date: YYYY-MM-DD" of its system message (the template writes
  // strftime_now); empty = today's date (UTC) at rendering.
  std::string date;

  // True when render_chat() writes the BOS text itself, so the prompt must be encoded
  // without adding another BOS.
  bool renders_bos() const;
};

// The canonical names, for help texts.
const std::vector<std::string>& chat_format_names();

// By name (canonical or alias: qwen, mixtral, olmoe, deepseek, phi3.5, ...); throws
// lynx::Error listing the known names.
ChatFormat chat_format_from_name(std::string_view name, std::string bos_token = "",
                                 std::string eos_token = "");
// Detects the family from the text of a Jinja chat template by distinctive substrings;
// throws lynx::Error when no family matches (the caller may then ask for a name).
ChatFormat chat_format_from_template(std::string_view tmpl, std::string bos_token = "",
                                     std::string eos_token = "");
// For a model: `name` when given, else detected from `tokenizer.chat_template`; BOS/EOS text
// from the tokenizer. Throws lynx::Error when the file has no template and no name is given.
ChatFormat chat_format_for_model(const gguf::File& file, const Tokenizer& tok,
                                 std::string_view name = "");

// Renders the conversation as the family's template does; add_generation_prompt appends the
// assistant header so the model answers next. Throws lynx::Error for a role the family's
// template cannot express.
std::string render_chat(const ChatFormat& fmt, std::span<const ChatMessage> messages,
                        bool add_generation_prompt);

}  // namespace lynx
