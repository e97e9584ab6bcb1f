// gpt-oss's harmony format: the answer is a sequence of messages,
//   [<|start|>assistant][ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][
//   <|constrain|>json]<|message|>BODY
// ended by <|end|>, <|call|> or <|return|> (the last two end the generation, so they are often
// not in the text). Channel "analysis" is the reasoning, "final" the answer, "commentary" with a
// recipient functions.NAME a call whose body is the arguments' JSON; commentary without a
// recipient is a preamble the user sees (content). The generation prompt ends with
// <|start|>assistant, so the first message starts at <|channel|>. Facts from the gpt-oss
// template (tests/template/templates/openai-gpt-oss-120b.jinja) and OpenAI's harmony guide.
#include <algorithm>

#include "chatparse/parser_impl.h"

namespace lynx::chatparse {
namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>";
constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
// A header longer than this without <|message|> is not one: it is shown as text rather than
// held back for the rest of the generation.
constexpr size_t kMaxHeader = 512;

// The word after `key` in a header, up to whitespace or the next <|.
std::string word_after(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return "";
  std::string_view s = header.substr(at + key.size());
  size_t n = 0;
  while (n < s.size() && !detail::is_space(s[n]) && s.substr(n, 2) != "<|") ++n;
  return std::string(s.substr(0, n));
}

constexpr std::string_view kFunctions = "functions.";

bool is_function(const std::string& recipient) {
  return recipient.substr(0, kFunctions.size()) == kFunctions &&
         detail::valid_name(recipient.substr(kFunctions.size()));
}

// A call message's body: the arguments (the header names the function).
bool parse_arguments(std::string_view body, const ParseOptions&, std::vector<detail::RawCall>& out,
                     std::string& why) {
  detail::ojson v;
  detail::RawCall c;
  if (!detail::parse_json(body, v, why) || !detail::arguments_object(v, c.args, why)) {
    return false;
  }
  out.push_back(std::move(c));
  return true;
}

// A call parsed whole cannot see the header: the name goes on the call just made.
void fix_name(OutputParser::Impl& s, const std::string& name) {
  if (s.res.tool_calls.empty() || !s.res.tool_calls.back().name.empty()) return;
  s.res.tool_calls.back().name = name;
  for (auto& d : s.out->tool_calls) {
    if (d.index == int(s.res.tool_calls.size()) - 1 && !d.id.empty()) d.name = name;
  }
}

}  // namespace

void OutputParser::Impl::step_harmony(bool final, bool truncated) {
  for (;;) {
    const std::string_view all(text);
    const std::string_view rest = all.substr(pos);
    switch (state) {
      case State::kReasoning:
      case State::kBlock:
      case State::kText: {
        // Text outside messages (a model that answers without a header) is content; the next
        // header starts at <|start|> or <|channel|>.
        const size_t a = rest.find(kStart), b = rest.find(kChannel);
        const size_t found = std::min(a, b);
        if (found != std::string_view::npos) {
          emit_content(rest.substr(0, found));
          block_start = pos + found;
          pos = block_start;
          state = State::kHeader;
          continue;
        }
        const size_t hold =
            final ? 0 : std::max(partial_marker(rest, kStart), partial_marker(rest, kChannel));
        emit_content(rest.substr(0, rest.size() - hold));
        pos += rest.size() - hold;
        return;
      }
      case State::kHeader: {
        const size_t found = rest.find(kMessage);
        if (found == std::string_view::npos || found > kMaxHeader) {
          // Wait while a header may still complete within the bound (the same decision the
          // whole text gives, whatever the pieces).
          if (!final && found == std::string_view::npos &&
              rest.size() <= kMaxHeader + kMessage.size()) {
            return;
          }
          // Not a header: its opening marker is text, and the scan goes on after it.
          const size_t len =
              rest.substr(0, kStart.size()) == kStart ? kStart.size() : kChannel.size();
          res.problems.push_back("a harmony header without <|message|>, kept as text");
          emit_content(rest.substr(0, len));
          pos += len;
          state = State::kText;
          continue;
        }
        const std::string_view header = rest.substr(0, found);
        channel = word_after(header, kChannel);
        recipient = word_after(header, "to=");
        pos += found + kMessage.size();
        body_start = pos;
        scan = pos;
        state = State::kBody;
        calls.reset();
        if (o.parse_tools && channel == "commentary" && is_function(recipient)) {
          start_calls(recipient.substr(kFunctions.size()));
        }
        // Reasoning kept in the text: the analysis message as the model wrote it.
        if (channel == "analysis" && !o.extract_reasoning) {
          emit_content(all.substr(block_start, pos - block_start));
        }
        continue;
      }
      case State::kBody: {
        // A held call body is searched from where the last search stopped (linear time).
        const size_t from = scan > pos ? scan - pos : 0;
        size_t found = std::string_view::npos, end_len = 0;
        if (calls) {
          // A streamed call: an end marker inside its JSON strings is text.
          size_t which = 0;
          const size_t at = find_end(kEnds, &which);
          if (at != std::string_view::npos) {
            found = at - pos;
            end_len = kEnds[which] == kStart ? 0 : kEnds[which].size();
          }
        } else {
          for (std::string_view e : kEnds) {
            const size_t at = rest.find(e, from);
            if (at < found) {
              found = at;
              // <|start|> begins the next message: it is not consumed with this one.
              end_len = e == kStart ? 0 : e.size();
            }
          }
        }
        const bool call = channel == "commentary" && !recipient.empty();
        if (call) {
          if (found == std::string_view::npos && !final) {
            if (calls) {
              calls->advance(all.substr(body_start, scan - body_start), false);
              pump();
            } else {
              scan = text.size() - std::min(text.size(), size_t{9});  // longest end marker - 1
            }
            return;  // held until complete
          }
          const size_t body_end = found == std::string_view::npos ? text.size() : pos + found;
          const size_t end = found == std::string_view::npos ? text.size() : body_end + end_len;
          const std::string_view raw = all.substr(block_start, end - block_start);
          if (calls) {
            end_block(body_end, end, found == std::string_view::npos && truncated, parse_arguments);
            fix_name(*this, recipient.substr(kFunctions.size()));
          } else if (!o.parse_tools) {
            emit_content(raw);
          } else if (found == std::string_view::npos && truncated) {
            not_a_call(raw, "a tool call cut off by max_tokens, kept as text");
          } else if (recipient.substr(0, kFunctions.size()) != kFunctions) {
            not_a_call(raw, "a call of the built-in tool '" + recipient + "', kept as text");
          } else if (!detail::valid_name(recipient.substr(kFunctions.size()))) {
            not_a_call(raw, "a call of an invalid function name, kept as text");
          } else {
            // The arguments as the body writes them; the recipient names the function.
            take_block(all.substr(body_start, body_end - body_start), raw, parse_arguments);
            fix_name(*this, recipient.substr(kFunctions.size()));
          }
          pos = end;
          state = State::kText;
          if (found == std::string_view::npos) return;
          continue;
        }
        const bool reasoning = channel == "analysis";
        auto emit = [&](std::string_view s) {
          if (reasoning && o.extract_reasoning) {
            emit_reasoning(s);
          } else {
            emit_content(s);
          }
        };
        if (found != std::string_view::npos) {
          emit(rest.substr(0, found));
          if (reasoning && !o.extract_reasoning) emit_content(rest.substr(found, end_len));
          if (reasoning) pending_rws.clear();
          pos += found + end_len;
          state = State::kText;
          continue;
        }
        size_t hold = 0;
        if (!final) {
          for (std::string_view e : kEnds) hold = std::max(hold, partial_marker(rest, e));
        }
        emit(rest.substr(0, rest.size() - hold));
        pos += rest.size() - hold;
        return;
      }
    }
  }
}

}  // namespace lynx::chatparse
