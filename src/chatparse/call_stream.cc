// CallStream (call_stream.h): each format's call layout as a resumable reader. The layouts are
// those of the whole-block parsers (one file per format); every step consumes what can be
// decided and waits, without consuming, where the next bytes may still be a marker.
#include "chatparse/call_stream.h"

#include <algorithm>

namespace lynx::chatparse::detail {
namespace {

std::string_view strip_newlines(std::string_view s) {
  if (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// The string a compact JSON copy holds, or nullopt when it is not a string.
std::optional<std::string> json_string(const std::string& copy) {
  const auto v = ojson::parse(copy, nullptr, false);
  if (v.is_discarded() || !v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

// "key":value as a parameter of an XML format adds it to the arguments' object.
std::string member(const std::string& key, const ojson& value) {
  return ojson(key).dump(-1, ' ', false, ojson::error_handler_t::replace) + ":" +
         value.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

CallStream::CallStream(ToolFormat f, const ParseOptions& o, std::string harmony_name)
    : f_(f), o_(o), harmony_name_(std::move(harmony_name)) {}

CallStream::Seen CallStream::at(std::string_view m) const {
  const std::string_view rest = body_.substr(pos_);
  if (rest.substr(0, m.size()) == m) return Seen::kYes;
  if (!closed_ && rest.size() < m.size() && m.substr(0, rest.size()) == rest) {
    return Seen::kPartial;
  }
  return Seen::kNo;
}

void CallStream::skip_space() {
  while (pos_ < body_.size() && is_space(body_[pos_])) ++pos_;
}

size_t CallStream::find(std::string_view m, size_t from) {
  const size_t start = m.data() == find_m_ && from == find_from_ ? find_at_ : from;
  const size_t at = body_.find(m, start);
  if (at == std::string_view::npos) {
    find_m_ = m.data();
    find_from_ = from;
    find_at_ = std::max(from, body_.size() - std::min(body_.size(), m.size() - 1));
  }
  return at;
}

void CallStream::stop(std::string why) {
  if (stopped_) return;
  stopped_ = true;
  why_ = std::move(why);
}

bool CallStream::open(std::string id, std::string name) {
  if (!valid_name(name)) {
    stop("the function name is not valid");
    return false;
  }
  if (f_ == ToolFormat::kLlama3 && !offered(o_, name)) {
    stop("\"" + name + "\" is not one of the request's tools");
    return false;
  }
  calls_.push_back({std::move(id), std::move(name), "", false});
  js_ = JsonStream();
  return true;
}

void CallStream::close_open_call() {
  if (calls_.empty() || calls_.back().ended) return;
  OpenCall& c = calls_.back();
  if (f_ == ToolFormat::kQwen3Coder || f_ == ToolFormat::kGlm45 || f_ == ToolFormat::kMiniMaxM2 ||
      f_ == ToolFormat::kSeedOss) {
    c.arguments += c.arguments.empty() ? "{}" : "}";
  } else {
    c.arguments = js_.copy();
    c.arguments += js_.closing();
    if (c.arguments.empty()) c.arguments = "{}";
  }
  c.ended = true;
}

bool CallStream::feed_value(JsonStream& js) {
  while (pos_ < body_.size()) {
    const JsonStream::Status s = js.feed(body_[pos_]);
    if (s == JsonStream::Status::kError) {
      stop("not valid JSON");
      return false;
    }
    if (s == JsonStream::Status::kEnded) return true;  // the byte belongs to what follows
    ++pos_;
    if (s == JsonStream::Status::kDone) return true;
  }
  return false;
}

bool CallStream::feed_arguments() {
  const bool ended = feed_value(js_);
  calls_.back().arguments = js_.copy();
  if (ended) calls_.back().ended = true;
  return ended;
}

bool CallStream::next_call(std::string_view begin, const char* block) {
  skip_space();
  if (pos_ == body_.size()) {
    done_ = closed_ && !calls_.empty();
    if (closed_ && calls_.empty()) stop(std::string("no call in the ") + block);
    return false;
  }
  const Seen s = at(begin);
  if (s == Seen::kPartial) return false;
  if (s == Seen::kNo) {
    stop("text other than " + std::string(begin) + " between the calls");
    return false;
  }
  pos_ += begin.size();
  return true;
}

bool CallStream::object_arguments(const std::string& id) {
  if (calls_.empty() || calls_.back().ended) {
    skip_space();
    if (pos_ == body_.size()) return false;
    if (body_[pos_] != '{') {
      stop("the arguments are not written as an object");
      return false;
    }
    if (!open(id, name_)) return false;
  }
  return feed_arguments();
}

bool CallStream::call_end(std::string_view end) {
  skip_space();
  const Seen s = at(end);
  if (s == Seen::kPartial || pos_ == body_.size()) return false;
  if (s == Seen::kNo) {
    stop("a call without " + std::string(end));
    return false;
  }
  pos_ += end.size();
  return true;
}

void CallStream::advance(std::string_view body, bool closed) {
  body_ = body;
  closed_ = closed;
  if (stopped_ || done_) return;
  switch (f_) {
    case ToolFormat::kHermes:
    case ToolFormat::kLlama3:
      step_object_calls();
      break;
    case ToolFormat::kMistral:
      if (phase_ == 0) {
        skip_space();
        if (pos_ == body_.size()) break;
        phase_ = body_[pos_] == '[' ? 1 : 10;
      }
      if (phase_ < 10) {
        step_object_calls();
      } else {
        step_mistral_v11();
      }
      break;
    case ToolFormat::kDeepSeekV3:
      step_deepseek();
      break;
    case ToolFormat::kKimiK2:
      step_kimi();
      break;
    case ToolFormat::kHarmony:
      step_harmony();
      break;
    case ToolFormat::kQwen3Coder:
    case ToolFormat::kSeedOss:
      step_qwen3_coder();
      break;
    case ToolFormat::kGlm45:
      step_glm45();
      break;
    case ToolFormat::kMiniMaxM2:
      step_minimax_m2();
      break;
    case ToolFormat::kNone:
      stop("no call format");
      break;
  }
  if (closed_ && !stopped_ && !done_) {
    stop(calls_.empty() || calls_.back().ended ? "an unfinished call block"
                                               : "a call whose arguments are unfinished");
  }
}

// Hermes: one call object; Llama 3: call objects separated by ';' or whitespace; Mistral's
// array: [obj, obj, ...]. Phases: 0 before an object, 1 inside one, 2 after one (mistral: ','
// or ']'), 3 after the array.
void CallStream::step_object_calls() {
  const bool array = f_ == ToolFormat::kMistral;
  if (array && phase_ == 1) {  // after '['
    skip_space();
    if (pos_ == body_.size()) return;
    ++pos_;
    phase_ = 4;  // an object inside the array
  }
  for (;;) {
    const int p = array ? phase_ - 4 : phase_;
    if (p == 0) {
      while (pos_ < body_.size() &&
             (is_space(body_[pos_]) || (f_ == ToolFormat::kLlama3 && body_[pos_] == ';'))) {
        ++pos_;
      }
      if (pos_ == body_.size()) {
        // Hermes' one object or Llama 3's objects ended (in Mistral's array one must follow).
        done_ = closed_ && !array && !calls_.empty();
        return;
      }
      if (f_ == ToolFormat::kHermes && !calls_.empty()) return stop("text after the call");
      if (body_[pos_] != '{') return stop("text other than a JSON call object");
      phase_ += 1;
      ophase_ = 0;
      key_.clear();
      name_.clear();
      id_.clear();
      have_args_ = false;
      continue;
    }
    if (p == 1) {
      if (!step_call_object()) return;
      phase_ = array ? 6 : 0;
      continue;
    }
    // Mistral's array: ',' and another object, or ']' and the end.
    skip_space();
    if (pos_ == body_.size()) {
      done_ = closed_ && phase_ == 7;
      return;
    }
    if (phase_ == 6) {
      const char c = body_[pos_++];
      if (c == ',') {
        phase_ = 4;
        continue;
      }
      if (c != ']') return stop("text other than ',' or ']' after a call");
      phase_ = 7;
      continue;
    }
    return stop("text after the array of calls");  // phase 7 with text left
  }
}

// One call object, from its '{'. Keys other than name, arguments/parameters and id are read and
// ignored, as call_from_object ignores them. Returns true once the object closed.
bool CallStream::step_call_object() {
  for (;;) {
    switch (ophase_) {
      case 0:  // '{'
        ++pos_;
        ophase_ = 1;
        continue;
      case 1:  // a key, or '}' right after '{' or after a value
      case 2: {
        skip_space();
        if (pos_ == body_.size()) return false;
        const char c = body_[pos_];
        if (c == '}') {
          ++pos_;
          if (have_args_) {
            calls_.back().held = false;  // its id, if any, has been read
            return true;
          }
          // No arguments: an empty object where the format allows it (Llama 3 does not).
          if (f_ == ToolFormat::kLlama3) {
            stop("a JSON object without \"parameters\"");
          } else if (name_.empty()) {
            stop("a call has no valid \"name\"");
          } else if (open(id_, name_)) {
            calls_.back().arguments = "{}";
            calls_.back().ended = true;
            return true;
          }
          return false;
        }
        if (ophase_ == 2) {
          if (c != ',') {
            stop("not valid JSON");
            return false;
          }
          ++pos_;
          ophase_ = 1;
          continue;
        }
        if (c != '"') {
          stop("not valid JSON");
          return false;
        }
        value_ = JsonStream();
        ophase_ = 3;
        continue;
      }
      case 3: {  // the key's string
        if (!feed_value(value_)) return false;
        key_ = json_string(value_.copy()).value_or("");
        ophase_ = 4;
        continue;
      }
      case 4:  // ':'
        skip_space();
        if (pos_ == body_.size()) return false;
        if (body_[pos_++] != ':') {
          stop("not valid JSON");
          return false;
        }
        ophase_ = 5;
        continue;
      case 5: {  // the value's first byte
        skip_space();
        if (pos_ == body_.size()) return false;
        if ((key_ == "arguments" || key_ == "parameters") && !have_args_) {
          if (body_[pos_] != '{' || name_.empty()) {
            // Quoted arguments or the name after them: the whole-block parser reads the rest.
            stop(name_.empty() ? "the arguments come before the name"
                               : "the arguments are not written as an object");
            return false;
          }
          if (!open(id_, name_)) return false;
          calls_.back().held = f_ == ToolFormat::kMistral && id_.empty();
          have_args_ = true;
          ophase_ = 7;
          continue;
        }
        value_ = JsonStream();
        ophase_ = 6;
        continue;
      }
      case 6: {  // another value, read whole
        if (!feed_value(value_)) return false;
        if (key_ == "name" && !have_args_) name_ = json_string(value_.copy()).value_or("");
        if (key_ == "id" && !have_args_) id_ = json_string(value_.copy()).value_or("");
        if (key_ == "id" && have_args_ && calls_.back().held && calls_.back().id.empty()) {
          calls_.back().id = json_string(value_.copy()).value_or("");
        }
        ophase_ = 2;
        continue;
      }
      case 7:  // the arguments, streamed
        if (!feed_arguments()) return false;
        ophase_ = 2;
        continue;
      default:
        return false;
    }
  }
}

// Mistral 2506+: NAME[ARGS]{..} or NAME[CALL_ID]ID[ARGS]{..}, one call per [TOOL_CALLS].
// Phases: 10 the head, 11 the arguments, 12 after them.
void CallStream::step_mistral_v11() {
  constexpr std::string_view kArgs = "[ARGS]", kId = "[CALL_ID]";
  if (phase_ == 10) {
    const size_t found = find(kArgs, pos_);
    if (found == std::string_view::npos) {
      if (closed_) stop("[TOOL_CALLS] is followed neither by an array nor by NAME[ARGS]");
      return;
    }
    const size_t at = found - pos_;
    std::string_view head = body_.substr(pos_, at);
    std::string id;
    if (const size_t i = head.find(kId); i != std::string_view::npos) {
      id = std::string(trim(head.substr(i + kId.size())));
      head = head.substr(0, i);
    }
    const size_t p0 = pos_;
    pos_ += at + kArgs.size();
    skip_space();
    if (pos_ == body_.size()) {
      pos_ = p0;  // the arguments' first byte decides; wait for it
      if (closed_) stop("no arguments after [ARGS]");
      return;
    }
    if (body_[pos_] != '{') return stop("the arguments are not written as an object");
    if (!open(id, std::string(trim(head)))) return;
    phase_ = 11;
  }
  if (phase_ == 11) {
    if (!feed_arguments()) return;
    phase_ = 12;
  }
  skip_space();
  if (pos_ < body_.size()) return stop("text after the call");
  done_ = closed_;
}

// DeepSeek: calls <｜tool▁call▁begin｜>HEAD<｜tool▁sep｜>..<｜tool▁call▁end｜> in a row. Phases:
// 0 between calls, 1 the head, 2 the V3/R1 name line, 3 the fence, 4 the arguments, 5 after them.
void CallStream::step_deepseek() {
  constexpr std::string_view kBegin = "<｜tool▁call▁begin｜>", kEnd = "<｜tool▁call▁end｜>",
                             kSep = "<｜tool▁sep｜>", kFence = "```json", kClose = "```";
  for (;;) {
    switch (phase_) {
      case 0:
        if (!next_call(kBegin, "block")) return;
        phase_ = 1;
        continue;
      case 1: {
        const size_t sep = find(kSep, pos_);
        if (sep == std::string_view::npos) {
          if (closed_) stop("a call without <｜tool▁sep｜>");
          return;
        }
        const std::string_view head = trim(body_.substr(pos_, sep - pos_));
        pos_ = sep + kSep.size();
        if (head == "function") {
          phase_ = 2;
          continue;
        }
        name_ = std::string(head);
        phase_ = 4;
        continue;
      }
      case 2: {  // V3 / R1: NAME up to the newline
        const size_t nl = find("\n", pos_);
        if (nl == std::string_view::npos) {
          if (closed_) stop("a call without arguments");
          return;
        }
        name_ = std::string(trim(body_.substr(pos_, nl - pos_)));
        pos_ = nl + 1;
        phase_ = 3;
        continue;
      }
      case 3: {
        skip_space();
        const Seen s = at(kFence);
        if (s == Seen::kPartial || pos_ == body_.size()) return;
        if (s == Seen::kYes) pos_ += kFence.size();
        phase_ = 4;
        continue;
      }
      case 4:
        if (!object_arguments("")) return;
        phase_ = 5;
        continue;
      case 5: {
        skip_space();
        if (at(kClose) == Seen::kYes && at(kEnd) != Seen::kYes) {
          pos_ += kClose.size();
          skip_space();
        }
        const Seen s = at(kEnd);
        if (s == Seen::kPartial || pos_ == body_.size() ||
            (s == Seen::kNo && at(kClose) == Seen::kPartial)) {
          return;
        }
        if (s == Seen::kNo) return stop("a call without <｜tool▁call▁end｜>");
        pos_ += kEnd.size();
        phase_ = 0;
        continue;
      }
      default:
        return;
    }
  }
}

// Kimi-K2: <|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>{..}<|tool_call_end|>
// in a row. Phases: 0 between calls, 1 the id, 2 the arguments, 3 after them.
void CallStream::step_kimi() {
  constexpr std::string_view kBegin = "<|tool_call_begin|>", kArgs = "<|tool_call_argument_begin|>",
                             kEnd = "<|tool_call_end|>", kPrefix = "functions.";
  for (;;) {
    switch (phase_) {
      case 0:
        if (!next_call(kBegin, "section")) return;
        phase_ = 1;
        continue;
      case 1: {
        const size_t a = find(kArgs, pos_);
        if (a == std::string_view::npos) {
          if (closed_) stop("a call without <|tool_call_argument_begin|>");
          return;
        }
        id_ = std::string(trim(body_.substr(pos_, a - pos_)));
        std::string_view name = id_;
        if (name.substr(0, kPrefix.size()) == kPrefix) name.remove_prefix(kPrefix.size());
        if (const size_t colon = name.rfind(':'); colon != std::string_view::npos) {
          name = name.substr(0, colon);
        }
        name_ = std::string(name);
        pos_ = a + kArgs.size();
        phase_ = 2;
        continue;
      }
      case 2:
        if (!object_arguments(id_)) return;
        phase_ = 3;
        continue;
      case 3:
        if (!call_end(kEnd)) return;
        phase_ = 0;
        continue;
      default:
        return;
    }
  }
}

// gpt-oss: the message body is the arguments of the function its header names.
void CallStream::step_harmony() {
  if (phase_ == 0) {
    skip_space();
    if (pos_ == body_.size()) {
      if (closed_) stop("no arguments");
      return;
    }
    if (body_[pos_] != '{') return stop("the arguments are not written as an object");
    if (!open("", harmony_name_)) return;
    phase_ = 1;
  }
  if (phase_ == 1) {
    if (!feed_arguments()) return;
    phase_ = 2;
  }
  skip_space();
  if (pos_ < body_.size()) return stop("text after the arguments");
  done_ = closed_;
}

// Qwen3-Coder and Seed-OSS: <function=NAME> <parameter=KEY>VALUE</parameter>... </function>.
// Phases: 0 the function, 1 between parameters, 2 after </function>.
void CallStream::step_qwen3_coder() {
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>",
                             kPar = "<parameter=", kParEnd = "</parameter>";
  for (;;) {
    skip_space();
    if (phase_ == 2) {
      if (pos_ < body_.size()) return stop("text after </function>");
      done_ = closed_;
      return;
    }
    if (pos_ == body_.size()) return;
    if (phase_ == 0) {
      const Seen s = at(kFn);
      if (s == Seen::kPartial) return;
      if (s == Seen::kNo) return stop("no <function=NAME> in the call");
      const size_t gt = find(">", pos_ + kFn.size());
      if (gt == std::string_view::npos) {
        if (closed_) stop("<function= is not closed by '>'");
        return;
      }
      if (!open("", std::string(trim(body_.substr(pos_ + kFn.size(), gt - pos_ - kFn.size()))))) {
        return;
      }
      pos_ = gt + 1;
      phase_ = 1;
      continue;
    }
    OpenCall& c = calls_.back();
    const Seen end = at(kFnEnd);
    if (end == Seen::kYes) {
      pos_ += kFnEnd.size();
      c.arguments += c.arguments.empty() ? "{}" : "}";
      c.ended = true;
      phase_ = 2;
      continue;
    }
    const Seen par = at(kPar);
    if (end == Seen::kPartial || par == Seen::kPartial) return;
    if (par == Seen::kNo) return stop("text other than <parameter=..> inside <function>");
    const size_t gt = find(">", pos_ + kPar.size());
    if (gt == std::string_view::npos) {
      if (closed_) stop("<parameter= is not closed by '>'");
      return;
    }
    const size_t pend = find(kParEnd, gt + 1);
    if (pend == std::string_view::npos) {
      if (closed_) stop("a parameter without </parameter>");
      return;
    }
    const std::string key(trim(body_.substr(pos_ + kPar.size(), gt - pos_ - kPar.size())));
    if (key.empty()) return stop("a parameter without a name");
    // Qwen3-Coder writes a newline on each side of a value, Seed-OSS none.
    const std::string_view v = body_.substr(gt + 1, pend - gt - 1);
    const std::string_view raw = f_ == ToolFormat::kQwen3Coder ? strip_newlines(v) : v;
    c.arguments +=
        (c.arguments.empty() ? "{" : ",") + member(key, typed_value(raw, o_, c.name, key));
    pos_ = pend + kParEnd.size();
  }
}

// GLM-4.5: NAME <arg_key>K</arg_key><arg_value>V</arg_value>... Phases: 0 the name, 1 the
// pairs.
void CallStream::step_glm45() {
  constexpr std::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>", kVal = "<arg_value>",
                             kValEnd = "</arg_value>";
  if (phase_ == 0) {
    const size_t first = find(kKey, pos_);
    if (first == std::string_view::npos && !closed_) return;
    const size_t name_end = first == std::string_view::npos ? body_.size() : first;
    if (!open("", std::string(trim(body_.substr(pos_, name_end - pos_))))) return;
    pos_ = name_end;
    phase_ = 1;
  }
  OpenCall& c = calls_.back();
  for (;;) {
    skip_space();
    if (pos_ == body_.size()) {
      if (closed_) {
        c.arguments += c.arguments.empty() ? "{}" : "}";
        c.ended = true;
        done_ = true;
      }
      return;
    }
    const Seen k = at(kKey);
    if (k == Seen::kPartial) return;
    if (k == Seen::kNo) return stop("text other than <arg_key>/<arg_value> pairs in the call");
    const size_t kend = find(kKeyEnd, pos_ + kKey.size());
    if (kend == std::string_view::npos) {
      if (closed_) stop("<arg_key> without </arg_key>");
      return;
    }
    const std::string key(trim(body_.substr(pos_ + kKey.size(), kend - pos_ - kKey.size())));
    size_t v = kend + kKeyEnd.size();
    while (v < body_.size() && is_space(body_[v])) ++v;
    const std::string_view after = body_.substr(v);
    if (after.size() < kVal.size() && !closed_ && kVal.substr(0, after.size()) == after) return;
    if (key.empty() || after.substr(0, kVal.size()) != kVal) {
      return stop("an <arg_key> without a name or not followed by <arg_value>");
    }
    const size_t vend = find(kValEnd, v + kVal.size());
    if (vend == std::string_view::npos) {
      if (closed_) stop("<arg_value> without </arg_value>");
      return;
    }
    const std::string_view raw = body_.substr(v + kVal.size(), vend - v - kVal.size());
    c.arguments +=
        (c.arguments.empty() ? "{" : ",") + member(key, typed_value(raw, o_, c.name, key));
    pos_ = vend + kValEnd.size();
  }
}

// MiniMax-M2: <invoke name="NAME"><parameter name="KEY">VALUE</parameter>..</invoke> in a
// row; each parameter is sent once it is closed (its raw text is typed whole). Phases: 0
// between calls, 1 the name, 2 inside the call.
void CallStream::step_minimax_m2() {
  constexpr std::string_view kInv = "<invoke name=\"", kInvEnd = "</invoke>",
                             kPar = "<parameter name=\"", kParEnd = "</parameter>", kQ = "\">";
  for (;;) {
    if (phase_ == 0) {
      if (!next_call(kInv, "block")) return;
      phase_ = 1;
      continue;
    }
    if (phase_ == 1) {
      const size_t q = find(kQ, pos_);
      if (q == std::string_view::npos) {
        if (closed_) stop("<invoke name=\" is not closed by \">");
        return;
      }
      if (!open("", std::string(trim(body_.substr(pos_, q - pos_))))) return;
      pos_ = q + kQ.size();
      phase_ = 2;
      continue;
    }
    skip_space();
    if (pos_ == body_.size()) return;
    OpenCall& c = calls_.back();
    const Seen end = at(kInvEnd);
    if (end == Seen::kYes) {
      pos_ += kInvEnd.size();
      c.arguments += c.arguments.empty() ? "{}" : "}";
      c.ended = true;
      phase_ = 0;
      continue;
    }
    const Seen par = at(kPar);
    if (end == Seen::kPartial || par == Seen::kPartial) return;
    if (par == Seen::kNo) return stop("text other than <parameter name=\"..\"> inside <invoke>");
    const size_t q = find(kQ, pos_ + kPar.size());
    if (q == std::string_view::npos) {
      if (closed_) stop("a parameter not closed by \">");
      return;
    }
    const size_t pend = find(kParEnd, q + kQ.size());
    if (pend == std::string_view::npos) {
      if (closed_) stop("a parameter without </parameter>");
      return;
    }
    const std::string key(trim(body_.substr(pos_ + kPar.size(), q - pos_ - kPar.size())));
    if (key.empty()) return stop("a parameter without a name");
    const std::string_view raw = body_.substr(q + kQ.size(), pend - q - kQ.size());
    c.arguments +=
        (c.arguments.empty() ? "{" : ",") + member(key, typed_value(raw, o_, c.name, key));
    pos_ = pend + kParEnd.size();
  }
}

}  // namespace lynx::chatparse::detail
