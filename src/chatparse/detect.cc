// Which format a model writes, read off its chat template: the template writes past calls in
// the format the model was trained to produce, so its markers name the format (llama.cpp's
// chat parser chooses the same way). Order matters where formats share a marker: Qwen3-Coder
// and GLM-4.5 both use <tool_call> with their own bodies.
#include "chatparse/formats.h"

namespace lynx::chatparse {
namespace {

struct Name {
  ToolFormat format;
  std::string_view name;
};
constexpr Name kNames[] = {
    {ToolFormat::kNone, "none"},
    {ToolFormat::kHermes, "hermes"},
    {ToolFormat::kQwen3Coder, "qwen3-coder"},
    {ToolFormat::kDeepSeekV3, "deepseek-v3"},
    {ToolFormat::kGlm45, "glm-4.5"},
    {ToolFormat::kKimiK2, "kimi-k2"},
    {ToolFormat::kHarmony, "harmony"},
    {ToolFormat::kMistral, "mistral"},
    {ToolFormat::kLlama3, "llama3"},
    {ToolFormat::kMiniMaxM2, "minimax-m2"},
    {ToolFormat::kSeedOss, "seed-oss"},
};

bool has(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

}  // namespace

std::string_view tool_format_name(ToolFormat f) {
  for (const Name& n : kNames) {
    if (n.format == f) return n.name;
  }
  return "none";
}

std::optional<ToolFormat> tool_format_from_name(std::string_view name) {
  for (const Name& n : kNames) {
    if (n.name == name) return n.format;
  }
  return std::nullopt;
}

OutputFormat detect_output_format(std::string_view t) {
  OutputFormat f;
  f.think_tags = has(t, "<think>") || has(t, "</think>");
  if (has(t, "<seed:think>")) {
    f.think_tags = true;
    f.think_open = "<seed:think>";
    f.think_close = "</seed:think>";
  } else if (has(t, "[THINK]") && has(t, "[/THINK]")) {  // Magistral's reasoning tokens
    f.think_tags = true;
    f.think_open = "[THINK]";
    f.think_close = "[/THINK]";
  }
  if (has(t, "<|channel|>") && has(t, "<|message|>")) {
    f.tools = ToolFormat::kHarmony;
    f.think_tags = false;  // its reasoning is the analysis channel
  } else if (has(t, "<｜tool▁calls▁begin｜>") || has(t, "<｜tool▁call▁begin｜>")) {
    f.tools = ToolFormat::kDeepSeekV3;
  } else if (has(t, "<minimax:tool_call>")) {
    f.tools = ToolFormat::kMiniMaxM2;
  } else if (has(t, "<seed:tool_call>")) {  // before Qwen3-Coder: the same body in its block
    f.tools = ToolFormat::kSeedOss;
  } else if (has(t, "<|tool_calls_section_begin|>")) {
    f.tools = ToolFormat::kKimiK2;
  } else if (has(t, "<arg_key>") && has(t, "<tool_call>")) {
    f.tools = ToolFormat::kGlm45;
  } else if (has(t, "<function=") && has(t, "<parameter=")) {
    f.tools = ToolFormat::kQwen3Coder;
  } else if (has(t, "<tool_call>")) {
    f.tools = ToolFormat::kHermes;
  } else if (has(t, "[TOOL_CALLS]")) {
    f.tools = ToolFormat::kMistral;
  } else if (has(t, "<|start_header_id|>") && has(t, "tools")) {
    f.tools = ToolFormat::kLlama3;
  }
  return f;
}

bool prompt_opens_reasoning(std::string_view prompt, std::string_view think_open) {
  prompt = detail::trim(prompt);
  return !think_open.empty() && prompt.size() >= think_open.size() &&
         prompt.substr(prompt.size() - think_open.size()) == think_open;
}

namespace detail {

const BlockFormat* block_format(ToolFormat f) {
  static constexpr BlockFormat kHermesF{"<tool_call>", "</tool_call>", parse_hermes};
  static constexpr BlockFormat kCoderF{"<tool_call>", "</tool_call>", parse_qwen3_coder,
                                       false,         "<parameter=",  "</parameter>"};
  static constexpr BlockFormat kGlmF{"<tool_call>", "</tool_call>", parse_glm45,
                                     false,         "<arg_value>",  "</arg_value>"};
  static constexpr BlockFormat kDeepSeekF{"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                                          parse_deepseek};
  static constexpr BlockFormat kKimiF{"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                                      parse_kimi_k2};
  static constexpr BlockFormat kMistralF{"[TOOL_CALLS]", "", parse_mistral};
  static constexpr BlockFormat kMiniMaxF{"<minimax:tool_call>", "</minimax:tool_call>",
                                         parse_minimax_m2, false};
  static constexpr BlockFormat kSeedF{"<seed:tool_call>", "</seed:tool_call>", parse_seed_oss,
                                      false};
  // Llama 3's block has no opening marker of its own; the parser starts one where the answer
  // starts with '{' or <|python_tag|> (parser.cc).
  static constexpr BlockFormat kLlamaF{"<|python_tag|>", "", parse_llama3};
  switch (f) {
    case ToolFormat::kHermes:
      return &kHermesF;
    case ToolFormat::kQwen3Coder:
      return &kCoderF;
    case ToolFormat::kGlm45:
      return &kGlmF;
    case ToolFormat::kDeepSeekV3:
      return &kDeepSeekF;
    case ToolFormat::kKimiK2:
      return &kKimiF;
    case ToolFormat::kMistral:
      return &kMistralF;
    case ToolFormat::kLlama3:
      return &kLlamaF;
    case ToolFormat::kMiniMaxM2:
      return &kMiniMaxF;
    case ToolFormat::kSeedOss:
      return &kSeedF;
    case ToolFormat::kNone:
    case ToolFormat::kHarmony:
      return nullptr;
  }
  return nullptr;
}

}  // namespace detail
}  // namespace lynx::chatparse
