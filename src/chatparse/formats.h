// Internal: the tool-call formats as data. Most formats put calls in blocks between an opening
// and a closing marker; a block's body is handed to its format's parser (one file per format).
// gpt-oss's harmony is a sequence of messages rather than blocks in text and has its own
// machine (harmony.cc); Llama 3's calls are the whole answer (llama3.cc).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chatparse/chat_output.h"

namespace lynx::chatparse::detail {

using ojson = nlohmann::ordered_json;

struct RawCall {
  std::string name;
  ojson args = ojson::object();
  std::string id;  // the model's own id where the format carries one (Mistral, Kimi-K2)
};

// Parses one block's body; false with `why` when it is not a well-formed call of the format.
using BodyParser = bool (*)(std::string_view body, const ParseOptions& o, std::vector<RawCall>& out,
                            std::string& why);

struct BlockFormat {
  std::string_view open;
  std::string_view close;  // "": the block runs to the next `open` or to the end of the text
  BodyParser parse;
  // The body's calls have JSON arguments: a marker inside a JSON string is text, not the end.
  // (The XML formats' values are raw text, where a quote means nothing.)
  bool json_strings = true;
  // The XML formats' raw values run from value_open to value_close: the block's end marker
  // inside one is text (code that writes "</tool_call>"), as a quoted marker is in JSON.
  std::string_view value_open = {}, value_close = {};
};

// The block format of `f`; null for kNone and kHarmony.
const BlockFormat* block_format(ToolFormat f);

bool parse_hermes(std::string_view, const ParseOptions&, std::vector<RawCall>&, std::string&);
bool parse_qwen3_coder(std::string_view, const ParseOptions&, std::vector<RawCall>&, std::string&);
bool parse_glm45(std::string_view, const ParseOptions&, std::vector<RawCall>&, std::string&);
bool parse_deepseek(std::string_view, const ParseOptions&, std::vector<RawCall>&, std::string&);
bool parse_kimi_k2(std::string_view, const ParseOptions&, std::vector<RawCall>&, std::string&);
bool parse_mistral(std::string_view, const ParseOptions&, std::vector<RawCall>&, std::string&);
bool parse_llama3(std::string_view, const ParseOptions&, std::vector<RawCall>&, std::string&);
bool parse_minimax_m2(std::string_view, const ParseOptions&, std::vector<RawCall>&, std::string&);
bool parse_seed_oss(std::string_view, const ParseOptions&, std::vector<RawCall>&, std::string&);
// The body shared by Qwen3-Coder and Seed-OSS, "<function=NAME><parameter=KEY>VALUE</parameter>
// ..</function>" (qwen3_coder.cc); `newline_values`: each value between a newline on each side,
// which is layout (Qwen3-Coder), or as it is (Seed-OSS).
bool parse_function_call(std::string_view body, const ParseOptions& o, bool newline_values,
                         std::vector<RawCall>& out, std::string& why);

// Shared pieces (json_util.cc).
// Parses `text` (surrounding whitespace allowed) as one JSON value, bounded in nesting depth;
// false with `why` otherwise.
bool parse_json(std::string_view text, ojson& out, std::string& why);
// A call's arguments: an object, or a string holding one (some models write them quoted).
bool arguments_object(const ojson& v, ojson& out, std::string& why);
// {"name": .., "arguments" or "parameters": {..}} (optionally "id") as Hermes, Mistral and
// Llama 3 write a call.
bool call_from_object(const ojson& v, RawCall& out, std::string& why);
// A parameter value written as text (Qwen3-Coder, GLM-4.5): a string when the tool's schema
// says so (or the text is not JSON), else the JSON value it reads as.
ojson typed_value(std::string_view raw, const ParseOptions& o, const std::string& function,
                  const std::string& param);
std::string_view trim(std::string_view s);
// The first `marker` in s[from..) that is not inside a JSON string (s[from] outside one), or
// npos: a call's arguments may hold the format's own markers as text.
size_t find_outside_strings(std::string_view s, std::string_view marker, size_t from = 0);
bool is_space(char c);
// A valid function name as OpenAI accepts one: 1-64 of [A-Za-z0-9_.-] (other text is not a
// call but prose that happens to sit between markers).
bool valid_name(std::string_view name);
// Whether the request's tools hold a function of this name.
bool offered(const ParseOptions& o, std::string_view name);

}  // namespace lynx::chatparse::detail
