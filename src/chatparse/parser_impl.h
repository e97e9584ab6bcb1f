// Internal: the state of an OutputParser, shared by the block formats' machine (parser.cc) and
// harmony's (harmony.cc).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chatparse/call_stream.h"
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
  // The current block's calls as they stream (call_stream.h); null where there is none.
  std::unique_ptr<detail::CallStream> calls;
  std::vector<int> call_index;  // each streamed call's index in res.tool_calls (-1: dropped)
  std::vector<size_t> sent;     // bytes of each streamed call's arguments sent
  // The search for a block's end outside JSON strings resumes in this state at `scan`.
  bool in_string = false, escaped = false;

  void emit_content(std::string_view s);
  void emit_reasoning(std::string_view s);
  void emit_calls(std::vector<detail::RawCall>& calls);
  // A block that is not a call: its text becomes content, the reason a problem.
  void not_a_call(std::string_view raw, const std::string& why);
  // Parses a block body into calls (or not_a_call on `raw`).
  void take_block(std::string_view body, std::string_view raw, detail::BodyParser parse);
  std::string new_id();
  // The id a call gets: the model's where the format's clients accept it, else a new one.
  std::string call_id(const std::string& model_id);
  // A new block whose calls stream (`harmony_name`: a harmony call of that function).
  void start_calls(std::string harmony_name = "");
  // Sends what the streaming calls added since the last pump: new calls' names, argument bytes.
  void pump();
  // The block text[block_start, end) ended (its body text[body_start, body_end)): its calls,
  // streamed or parsed whole.
  void end_block(size_t body_end, size_t end, bool truncated, detail::BodyParser parse);
  // The first of `markers` at or after `scan` outside JSON strings, or npos (then `scan` is
  // where the search resumes: text before it holds no marker and no marker's start).
  size_t find_end(std::span<const std::string_view> markers, size_t* which = nullptr);
  // The same for raw XML values: `end` outside [value_open, value_close) (in_string: inside).
  size_t find_end_outside_values(std::string_view end, std::string_view value_open,
                                 std::string_view value_close);

  void step(bool final, bool truncated);
  void step_harmony(bool final, bool truncated);
};

// Length of the longest proper prefix of `marker` that `text` ends with: text that may be the
// start of the marker and must be held back until the next piece.
size_t partial_marker(std::string_view text, std::string_view marker);

}  // namespace lynx::chatparse
