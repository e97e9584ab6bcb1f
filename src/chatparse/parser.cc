// The output parser's machine for the block formats (every format but harmony): answer text,
// one leading reasoning block, and call blocks between their markers. Each push consumes what
// can be decided and holds back only text that may still turn out to be a marker or an
// unfinished call, so a stream shows the answer as it comes.
#include <algorithm>
#include <cctype>
#include <iterator>

#include "chatparse/parser_impl.h"

namespace lynx::chatparse {

using detail::is_space;

namespace {

size_t leading_space(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && is_space(s[n])) ++n;
  return n;
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

}  // namespace

size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t len = std::min(marker.size() - 1, text.size()); len > 0; --len) {
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  }
  return 0;
}

void OutputDelta::append(OutputDelta&& o) {
  content += o.content;
  reasoning += o.reasoning;
  for (auto& t : o.tool_calls) tool_calls.push_back(std::move(t));
}

void OutputParser::Impl::emit_content(std::string_view s) {
  if (skip_ws) {
    s.remove_prefix(leading_space(s));
    if (s.empty()) return;
    skip_ws = false;
  }
  size_t last = s.size();
  while (last > 0 && is_space(s[last - 1])) --last;
  if (last == 0) {
    pending_ws += s;
    return;
  }
  std::string piece = pending_ws;
  piece += s.substr(0, last);
  pending_ws = std::string(s.substr(last));
  res.content += piece;
  out->content += piece;
  at_start = false;
}

void OutputParser::Impl::emit_reasoning(std::string_view s) {
  if (res.reasoning.empty()) s.remove_prefix(leading_space(s));
  size_t last = s.size();
  while (last > 0 && is_space(s[last - 1])) --last;
  if (last == 0) {
    if (!res.reasoning.empty()) pending_rws += s;
    return;
  }
  std::string piece = pending_rws;
  piece += s.substr(0, last);
  pending_rws = std::string(s.substr(last));
  res.reasoning += piece;
  out->reasoning += piece;
}

std::string OutputParser::Impl::new_id() {
  // splitmix64: ids need to be distinct within a conversation, not secret.
  auto next = [this] {
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  // Mistral's templates refuse ids that are not 9 alphanumeric characters.
  const bool mistral = o.format.tools == ToolFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[next() % 62];
  return id;
}

std::string OutputParser::Impl::call_id(const std::string& model_id) {
  const bool keep =
      !model_id.empty() &&
      (o.format.tools != ToolFormat::kMistral ||
       (model_id.size() == 9 && std::all_of(model_id.begin(), model_id.end(), [](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch));
        })));
  return keep ? model_id : new_id();
}

void OutputParser::Impl::emit_calls(std::vector<detail::RawCall>& calls) {
  for (auto& c : calls) {
    if (!o.parallel_tool_calls && !res.tool_calls.empty()) {
      res.problems.push_back("call of '" + c.name + "' dropped: parallel_tool_calls is false");
      continue;
    }
    ToolCall t;
    t.name = c.name;
    t.arguments = c.args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    t.id = call_id(c.id);
    const int index = int(res.tool_calls.size());
    out->tool_calls.push_back({index, t.id, t.name, ""});
    out->tool_calls.push_back({index, "", "", t.arguments});
    res.tool_calls.push_back(std::move(t));
  }
  skip_ws = true;
  at_start = false;
}

void OutputParser::Impl::start_calls(std::string harmony_name) {
  calls = std::make_unique<detail::CallStream>(o.format.tools, o, std::move(harmony_name));
  call_index.clear();
  sent.clear();
  in_string = escaped = false;
}

void OutputParser::Impl::pump() {
  if (!calls) return;
  const std::vector<detail::OpenCall>& cs = calls->calls();
  for (size_t k = 0; k < cs.size(); ++k) {
    if (k == call_index.size()) {
      if (cs[k].held) break;  // sent with its id once its object closes; calls stay in order
      sent.push_back(0);
      if (!o.parallel_tool_calls && !res.tool_calls.empty()) {
        res.problems.push_back("call of '" + cs[k].name +
                               "' dropped: parallel_tool_calls is false");
        call_index.push_back(-1);
        continue;
      }
      ToolCall t;
      t.name = cs[k].name;
      t.id = call_id(cs[k].id);
      const int index = int(res.tool_calls.size());
      out->tool_calls.push_back({index, t.id, t.name, ""});
      res.tool_calls.push_back(std::move(t));
      call_index.push_back(index);
      at_start = false;
    }
    if (call_index[k] < 0 || cs[k].arguments.size() <= sent[k]) continue;
    std::string piece = cs[k].arguments.substr(sent[k]);
    sent[k] = cs[k].arguments.size();
    res.tool_calls[size_t(call_index[k])].arguments += piece;
    out->tool_calls.push_back({call_index[k], "", "", std::move(piece)});
  }
}

size_t OutputParser::Impl::find_end(std::span<const std::string_view> markers, size_t* which) {
  const std::string_view all(text);
  for (size_t i = scan; i < all.size(); ++i) {
    const char c = all[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    const std::string_view rest = all.substr(i);
    bool partial = false;
    for (size_t k = 0; k < markers.size(); ++k) {
      const std::string_view m = markers[k];
      if (rest.substr(0, m.size()) == m) {
        scan = i;
        if (which) *which = k;
        return i;
      }
      partial |= rest.size() < m.size() && m.substr(0, rest.size()) == rest;
    }
    if (partial) {
      scan = i;  // may be a marker once more text comes
      return std::string_view::npos;
    }
  }
  scan = all.size();
  return std::string_view::npos;
}

size_t OutputParser::Impl::find_end_outside_values(std::string_view end,
                                                   std::string_view value_open,
                                                   std::string_view value_close) {
  const std::string_view all(text);
  for (size_t i = scan; i < all.size(); ++i) {
    const std::string_view rest = all.substr(i);
    auto at = [&](std::string_view m) { return rest.substr(0, m.size()) == m; };
    auto may_become = [&](std::string_view m) {
      return rest.size() < m.size() && m.substr(0, rest.size()) == rest;
    };
    if (in_string) {
      if (at(value_close)) {
        in_string = false;
        i += value_close.size() - 1;
      } else if (may_become(value_close)) {
        scan = i;
        return std::string_view::npos;
      }
      continue;
    }
    if (at(end)) {
      scan = i;
      return i;
    }
    if (at(value_open)) {
      in_string = true;
      i += value_open.size() - 1;
      continue;
    }
    if (may_become(end) || may_become(value_open)) {
      scan = i;  // may be a marker once more text comes
      return std::string_view::npos;
    }
  }
  scan = all.size();
  return std::string_view::npos;
}

void OutputParser::Impl::end_block(size_t body_end, size_t end, bool truncated,
                                   detail::BodyParser parse) {
  const std::string_view all(text);
  const std::string_view body = all.substr(body_start, body_end - body_start);
  const std::string_view raw = all.substr(block_start, end - block_start);
  if (calls) {
    calls->advance(body, true);
    calls->release_held();  // a call cut or malformed after its arguments is sent as it stands
    pump();
  }
  if (!calls || calls->calls().empty()) {
    // Nothing was sent: the block as a whole is a call or text.
    calls.reset();
    if (truncated) {
      not_a_call(raw, "a tool call cut off by max_tokens, kept as text");
    } else {
      take_block(body, raw, parse);
    }
    return;
  }
  // Calls were sent: they stand, whatever follows them in the block.
  if (!calls->clean()) {
    const std::vector<detail::OpenCall>& sent_calls = calls->calls();
    bool rest = false;
    if (!truncated && sent_calls.back().ended) {
      // A layout the stream does not follow (arguments before the name, or quoted): the
      // calls after those sent come from the whole block.
      std::vector<detail::RawCall> whole;
      std::string why;
      bool ok = false;
      try {
        ok = parse(body, o, whole, why);
      } catch (const std::exception&) {
      }
      ok = ok && whole.size() >= sent_calls.size();
      for (size_t k = 0; ok && k < sent_calls.size(); ++k) ok = whole[k].name == sent_calls[k].name;
      if (ok) {
        std::vector<detail::RawCall> more(
            std::make_move_iterator(whole.begin() + ptrdiff_t(sent_calls.size())),
            std::make_move_iterator(whole.end()));
        emit_calls(more);
        rest = true;
      }
    }
    if (!rest) {
      const bool open = !sent_calls.back().ended;
      calls->close_open_call();
      pump();
      if (truncated) {
        res.problems.push_back(open ? "a tool call cut off by max_tokens: its arguments were "
                                      "closed as JSON where they stopped"
                                    : "a tool call block cut off by max_tokens after its calls");
      } else {
        res.problems.push_back("a tool call block that is not well formed (" + calls->why() +
                               "): the calls begun before that stand" +
                               (open ? ", their arguments closed as JSON where they stopped" : ""));
      }
    }
  }
  calls.reset();
  skip_ws = true;
  at_start = false;
}

void OutputParser::Impl::not_a_call(std::string_view raw, const std::string& why) {
  res.problems.push_back(why);
  emit_content(raw);
}

void OutputParser::Impl::take_block(std::string_view body, std::string_view raw,
                                    detail::BodyParser parse) {
  std::vector<detail::RawCall> calls;
  std::string why;
  bool ok = false;
  try {
    ok = parse(body, o, calls, why);
  } catch (const std::exception& e) {  // a parser's own mistake must not end the request
    why = e.what();
  }
  if (ok) {
    emit_calls(calls);
  } else {
    not_a_call(raw, "not a tool call (" + why + "), kept as text");
  }
}

void OutputParser::Impl::step(bool final, bool truncated) {
  for (;;) {
    const std::string_view rest = std::string_view(text).substr(pos);
    switch (state) {
      case State::kText: {
        const size_t ws = leading_space(rest);
        const std::string_view r = rest.substr(ws);
        if (at_start && o.format.think_tags && o.extract_reasoning && res.reasoning.empty()) {
          // Reasoning is taken from the start of the answer only: a model that writes about
          // <think> tags later is answering.
          const std::string_view open = o.format.think_open;
          if (starts_with(r, open)) {
            pos += ws + open.size();
            state = State::kReasoning;
            continue;
          }
          if (!final && starts_with(open, r)) return;  // may still become the open tag
        }
        if (at_start && o.parse_tools && o.format.tools == ToolFormat::kLlama3) {
          if (starts_with(r, "{")) {
            block_start = body_start = pos + ws;
            pos = body_start;
            scan = body_start;
            state = State::kBlock;
            start_calls();
            continue;
          }
          if (!final && r.empty()) return;
        }
        size_t found = std::string_view::npos;
        if (o.parse_tools && block) found = rest.find(block->open);
        if (found != std::string_view::npos) {
          emit_content(rest.substr(0, found));
          block_start = pos + found;
          body_start = block_start + block->open.size();
          pos = body_start;
          scan = body_start;
          state = State::kBlock;
          at_start = false;
          start_calls();
          continue;
        }
        const size_t hold =
            final || !o.parse_tools || !block ? 0 : partial_marker(rest, block->open);
        emit_content(rest.substr(0, rest.size() - hold));
        pos += rest.size() - hold;
        return;
      }
      case State::kReasoning: {
        const std::string_view close = o.format.think_close;
        const size_t found = rest.find(close);
        if (found != std::string_view::npos) {
          emit_reasoning(rest.substr(0, found));
          pending_rws.clear();
          pos += found + close.size();
          state = State::kText;
          at_start = false;
          skip_ws = true;
          continue;
        }
        const size_t hold = final ? 0 : partial_marker(rest, close);
        emit_reasoning(rest.substr(0, rest.size() - hold));
        pos += rest.size() - hold;
        return;
      }
      case State::kBlock: {
        const std::string_view all(text);
        // The block's end: its closing marker, else (formats without one) the next opening.
        const std::string_view end_marker = block->close.empty() ? block->open : block->close;
        size_t found, known;  // the end, or npos; the end of the body known to be body
        if (block->json_strings) {
          const std::string_view m[] = {end_marker};
          found = find_end(m);
          known = found == std::string_view::npos ? scan : found;
        } else if (!block->value_open.empty()) {
          scan = std::max(scan, body_start);
          found = find_end_outside_values(end_marker, block->value_open, block->value_close);
          known = found == std::string_view::npos ? scan : found;
        } else {
          found = all.find(end_marker, std::max(scan, body_start));
          if (found == std::string_view::npos) {
            scan = text.size() - std::min(text.size(), end_marker.size() - 1);
          }
          known = found == std::string_view::npos ? std::max(scan, body_start) : found;
        }
        if (found != std::string_view::npos) {
          const size_t end = found + (block->close.empty() ? 0 : block->close.size());
          end_block(found, end, false, block->parse);
          pos = end;
          state = State::kText;
          continue;
        }
        if (!final) {
          if (calls) {
            calls->advance(all.substr(body_start, known - body_start), false);
            pump();
          }
          return;
        }
        // The closing marker may be an end-of-generation token (not part of the text).
        end_block(text.size(), text.size(), truncated, block->parse);
        pos = text.size();
        state = State::kText;
        return;
      }
      case State::kHeader:
      case State::kBody:
        return;  // harmony's states (step_harmony)
    }
  }
}

OutputParser::OutputParser(ParseOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.o = std::move(opts);
  s.block = detail::block_format(s.o.format.tools);
  s.rng = s.o.id_seed;
  if (s.o.starts_in_reasoning && s.o.extract_reasoning && s.o.format.think_tags) {
    s.state = Impl::State::kReasoning;
  }
}

OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

OutputDelta OutputParser::push(std::string_view piece) {
  Impl& s = *impl_;
  OutputDelta d;
  s.out = &d;
  s.text += piece;
  if (s.o.format.tools == ToolFormat::kHarmony) {
    s.step_harmony(false, false);
  } else {
    s.step(false, false);
  }
  s.out = nullptr;
  return d;
}

OutputDelta OutputParser::finish(bool truncated) {
  Impl& s = *impl_;
  OutputDelta d;
  s.out = &d;
  if (s.o.format.tools == ToolFormat::kHarmony) {
    s.step_harmony(true, truncated);
  } else {
    s.step(true, truncated);
  }
  // Whitespace after the last text is the answer's when it is only text; around calls it is
  // layout.
  if (s.res.tool_calls.empty() && !s.pending_ws.empty()) {
    s.res.content += s.pending_ws;
    d.content += s.pending_ws;
  }
  s.pending_ws.clear();
  s.out = nullptr;
  return d;
}

const ParsedOutput& OutputParser::result() const {
  return impl_->res;
}

ParsedOutput parse_output(std::string_view text, const ParseOptions& opts, bool truncated) {
  OutputParser p(opts);
  p.push(text);
  p.finish(truncated);
  return p.result();
}

}  // namespace lynx::chatparse
