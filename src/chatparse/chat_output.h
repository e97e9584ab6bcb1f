// What a chat model wrote, taken apart: the answer's text, its reasoning (<think> blocks,
// gpt-oss's analysis channel) and its tool calls in the model family's own call format, as the
// OpenAI chat API returns them (message.content, message.reasoning_content,
// message.tool_calls). Works on the detokenized text, incrementally: a stream is pushed piece
// by piece and gets deltas whose concatenation is the whole answer, the same one parse_output
// gives for the full text.
//
// The formats are those the families' chat templates write for past calls (the facts are in
// tests/template/templates and docs/serving.md, "Tools and reasoning"); which one a model
// speaks is read off its template text, as llama.cpp's chat parser does.
//
// Model output is untrusted and never makes the parser throw. A block that turns out not to be
// a call before the call could begin (no valid name, arguments that are no object) is kept as
// text in the content; a call that had begun (call_stream.h) stays a call, its arguments
// closed as JSON where they stopped being valid or where the generation cut them off. Either
// way ParsedOutput::problems says what happened.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace lynx::chatparse {

enum class ToolFormat {
  kNone,
  kHermes,      // Hermes 2/3, Qwen2.5, Qwen3: <tool_call>{"name":..,"arguments":{..}}</tool_call>
  kQwen3Coder,  // <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>
  kDeepSeekV3,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>..<｜tool▁sep｜>..<｜tool▁calls▁end｜>
  kGlm45,       // <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>
  kKimiK2,  // <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>{..}..
  kHarmony,    // gpt-oss: <|channel|>commentary to=functions.NAME
               // <|constrain|>json<|message|>{..}<|call|>
  kMistral,    // [TOOL_CALLS][{"name":..,"arguments":{..},"id":..}] or [TOOL_CALLS]NAME[ARGS]{..}
  kLlama3,     // the whole answer is {"name": .., "parameters": {..}} (optionally <|python_tag|>)
  kMiniMaxM2,  // <minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter>
               // </invoke>..</minimax:tool_call>
  kSeedOss,    // <seed:tool_call><function=NAME><parameter=KEY>VALUE</parameter></function>
               // </seed:tool_call>
};

std::string_view tool_format_name(ToolFormat f);
std::optional<ToolFormat> tool_format_from_name(std::string_view name);

struct OutputFormat {
  ToolFormat tools = ToolFormat::kNone;
  bool think_tags = false;  // reasoning in think tags (kHarmony: its analysis channel)
  // The tags of a reasoning block: <think>..</think> for most families, Seed-OSS's own
  // <seed:think>..</seed:think> (string literals: the struct is copied freely).
  std::string_view think_open = "<think>", think_close = "</think>";
};

// The format a chat template's model writes, from the markers the template itself writes.
OutputFormat detect_output_format(std::string_view chat_template);

// True when a rendered prompt ends inside an open reasoning block, `think_open` (DeepSeek-R1,
// Qwen3-Thinking, DeepSeek-V3.1 with thinking: the template writes <think> and the model
// continues inside).
bool prompt_opens_reasoning(std::string_view prompt, std::string_view think_open = "<think>");

struct ParseOptions {
  OutputFormat format;
  bool parse_tools = false;          // tools were offered (and tool_choice is not "none")
  bool extract_reasoning = true;     // false: reasoning stays in the content as written
  bool starts_in_reasoning = false;  // the prompt ended inside an open think block
  bool parallel_tool_calls = true;   // false: calls after the first are dropped
  // The request's tools (OpenAI's array), for the parameter types of the XML formats, whose
  // values are text: a string parameter stays a string even when it reads as a number.
  nlohmann::json tools;
  uint64_t id_seed = 0;  // tool call ids are drawn from it (reproducible in tests)
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, as text
};

// One step of a stream. A tool call comes as deltas of one index: the first has its id and
// name (arguments ""), the next ones pieces of its arguments as the model writes them; the
// pieces concatenate to the call's final arguments.
struct ToolCallDelta {
  int index = 0;
  std::string id, name;  // non-empty on the first delta of a call only
  std::string arguments;
};

struct OutputDelta {
  std::string content, reasoning;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
  void append(OutputDelta&& o);
};

struct ParsedOutput {
  std::string content, reasoning;
  std::vector<ToolCall> tool_calls;
  std::vector<std::string> problems;  // calls kept as content or dropped, and why
};

class OutputParser {
 public:
  explicit OutputParser(ParseOptions opts);
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  // The next piece of detokenized text (valid UTF-8); returns what can be shown now. Text that
  // may be the start of a marker is held back until it is known.
  OutputDelta push(std::string_view text);
  // End of the generation; `truncated` when it was cut (max_tokens): an unfinished call is
  // then content, not a call.
  OutputDelta finish(bool truncated);
  const ParsedOutput& result() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The whole text at once: push(text) then finish(truncated).
ParsedOutput parse_output(std::string_view text, const ParseOptions& opts, bool truncated = false);

}  // namespace lynx::chatparse
