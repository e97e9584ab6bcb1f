// tool_choice "required" or a named function, enforced (docs/serving.md, "Tools and
// reasoning"): a grammar in the model's own tool-call format whose sentences are calls of the
// request's tools (or of the named one) with arguments that match each tool's `parameters`
// schema, which the sampler then follows as it does for structured output.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chatparse/chat_output.h"
#include "lynx/grammar.h"
#include "lynx/tokenizer.h"

namespace lynx::server {

struct ToolGrammar {
  std::string gbnf;  // "" when the format has no grammar here (the call is then not enforced)
  // The texts of the format's markers (<tool_call>, [TOOL_CALLS], <think>, ...): a vocabulary
  // that holds one of them as a single control token must let the grammar sample it, or the
  // only way left to write the marker is letter by letter, which no model does.
  std::vector<std::string> markers;
  // Tools whose arguments are any JSON object because their schema has a keyword the grammar
  // cannot enforce: "name: the converter's reason".
  std::vector<std::string> free_arguments;
};

// Whether tool_call_grammar covers the format: every format the chat parser reads (hermes,
// qwen3-coder, glm-4.5, deepseek-v3, kimi-k2, harmony, mistral, llama3), not kNone.
bool tool_grammar_covers(chatparse::ToolFormat f);

// The grammar of one call (o.parallel_tool_calls: one or more) of the request's `tools` (only
// the one named `only` when not empty), in o.format's tool-call format, optionally preceded by
// a <think> block when the format has think tags (required when o.starts_in_reasoning). The
// tools are checked already (chat_request.cc) and in the client's key order, which is the
// order a schema's properties are written in.
ToolGrammar tool_call_grammar(const chatparse::ParseOptions& o, const nlohmann::ordered_json& tools,
                              std::string_view only);

// The token index a grammar samples through: every token by its bytes, control tokens never
// (they have no text a grammar could mean) except those whose text is one of `markers`;
// end-of-generation tokens (`eog`) where the grammar is complete.
std::shared_ptr<const grammar::TokenIndex> grammar_token_index(
    const Tokenizer& tok, std::span<const int32_t> eog, std::span<const std::string> markers);

}  // namespace lynx::server
