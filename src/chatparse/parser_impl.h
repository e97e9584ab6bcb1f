// Internal: the state of an OutputParser, shared by the block formats' machine (parser.cc) and
// harmony's (harmony.cc).
#pragma once
#include <string>
#include <string_view>

#include "chatparse/chat_output.h"
#include "chatparse/formats.h"

namespace lynx::chatparse {

struct OutputParser::Impl {
  enum class State {
    kText,       // answer text, looking for the next reasoning block or call
    kReasoning,  // inside <think>
    kBlock,      // inside a call block, held until it closes
    kHeader,     // harmony: a message header, held until <|message|>
    kBody,       // harmony: a message body
  };

  ParseOptions o;
  const detail::BlockFormat* block = nullptr;
  ParsedOutput res;
  OutputDelta* out = nullptr;  // the delta being built by push() / finish()

  std::string text;  // everything pushed so far
  size_t pos = 0;    // text[0, pos) has been consumed
  State state = State::kText;
  bool at_start = true;    // nothing but whitespace consumed as answer text yet
  size_t block_start = 0;  // where the current block (markers included) begins
  size_t body_start = 0;   // where its body begins
  // Where the search for a held block's end resumes: text before it was searched already, so
  // a long block costs linear time, not a rescan per piece.
  size_t scan = 0;
  std::string pending_ws;   // trailing whitespace of the content, shown once text follows
  bool skip_ws = false;     // drop whitespace before the next content (after </think>, a call)
  std::string pending_rws;  // the same for the reasoning
  uint64_t rng = 0;         // tool call ids
  // harmony: the current message
  std::string channel, recipient;

  void emit_content(std::string_view s);
  void emit_reasoning(std::string_view s);
  void emit_calls(std::vector<detail::RawCall>& calls);
  // A block that is not a call: its text becomes content, the reason a problem.
  void not_a_call(std::string_view raw, const std::string& why);
  // Parses a block body into calls (or not_a_call on `raw`).
  void take_block(std::string_view body, std::string_view raw, detail::BodyParser parse);
  std::string new_id();

  void step(bool final, bool truncated);
  void step_harmony(bool final, bool truncated);
};

// Length of the longest proper prefix of `marker` that `text` ends with: text that may be the
// start of the marker and must be held back until the next piece.
size_t partial_marker(std::string_view text, std::string_view marker);

}  // namespace lynx::chatparse
