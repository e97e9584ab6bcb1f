// JsonStream (json_stream.h): RFC 8259's grammar as a byte-at-a-time pushdown machine.
#include "chatparse/json_stream.h"

namespace lynx::chatparse::detail {
namespace {

bool ws(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool digit(char c) {
  return c >= '0' && c <= '9';
}

bool hex(char c) {
  return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Number states: 0 start, 1 after '-', 2 a leading 0, 3 integer digits, 4 after '.',
// 5 fraction digits, 6 after 'e', 7 after the exponent's sign, 8 exponent digits.
bool number_complete(int s) {
  return s == 2 || s == 3 || s == 5 || s == 8;
}

int number_next(int s, char c) {
  switch (s) {
    case 0:
      return c == '-' ? 1 : c == '0' ? 2 : digit(c) ? 3 : -1;
    case 1:
      return c == '0' ? 2 : digit(c) ? 3 : -1;
    case 2:
    case 3:
      if (s == 3 && digit(c)) return 3;
      return c == '.' ? 4 : (c == 'e' || c == 'E') ? 6 : -1;
    case 4:
      return digit(c) ? 5 : -1;
    case 5:
      return digit(c) ? 5 : (c == 'e' || c == 'E') ? 6 : -1;
    case 6:
      return (c == '+' || c == '-') ? 7 : digit(c) ? 8 : -1;
    case 7:
    case 8:
      return digit(c) ? 8 : -1;
    default:
      return -1;
  }
}

}  // namespace

std::string JsonStream::take() {
  std::string out = copy_.substr(taken_);
  taken_ = copy_.size();
  return out;
}

std::string JsonStream::closing() const {
  std::string out;
  if (state_ == State::kString) out += '"';
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) out += *it == '{' ? '}' : ']';
  return out;
}

JsonStream::Status JsonStream::value_ended() {
  if (stack_.empty()) {
    state_ = State::kDone;
    return Status::kDone;
  }
  state_ = State::kAfterValue;
  return Status::kMore;
}

// A string byte (value or key) appended to `to`; escapes are held until complete.
JsonStream::Status JsonStream::string_byte(char c, std::string& to) {
  if (!escape_.empty()) {
    escape_ += c;
    bool ok;
    if (escape_.size() == 2) {
      ok = c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
           c == 't' || c == 'u';
    } else {
      ok = hex(c);  // \uXXXX
    }
    if (!ok) {
      state_ = State::kError;
      return Status::kError;
    }
    if (escape_[1] != 'u' || escape_.size() == 6) {
      to += escape_;
      escape_.clear();
    }
    return Status::kMore;
  }
  if (static_cast<unsigned char>(c) < 0x20) {
    state_ = State::kError;  // a raw control character is not allowed in a string
    return Status::kError;
  }
  if (c == '\\') {
    escape_ = "\\";
    return Status::kMore;
  }
  to += c;
  return Status::kMore;
}

JsonStream::Status JsonStream::feed(char c) {
  if (first_ == 0 && !ws(c)) first_ = c;
  switch (state_) {
    case State::kDone:
    case State::kError:
      state_ = State::kError;
      return Status::kError;
    case State::kString: {
      if (escape_.empty() && c == '"') {
        copy_ += '"';
        return value_ended();
      }
      return string_byte(c, copy_);
    }
    case State::kKeyString: {
      if (escape_.empty() && c == '"') {
        pending_ += '"';
        state_ = State::kColon;
        return Status::kMore;
      }
      return string_byte(c, pending_);
    }
    case State::kNumber: {
      const int next = number_next(num_, c);
      if (next >= 0) {
        num_ = next;
        pending_ += c;
        return Status::kMore;
      }
      if (!number_complete(num_)) break;
      copy_ += pending_;
      pending_.clear();
      if (value_ended() == Status::kDone) return Status::kEnded;
      return feed(c);  // the byte after the number, in the container
    }
    case State::kLiteral: {
      if (c != literal_[size_t(num_)]) break;
      pending_ += c;
      if (size_t(++num_) < literal_.size()) return Status::kMore;
      copy_ += pending_;
      pending_.clear();
      return value_ended();
    }
    default:
      break;
  }
  if (state_ == State::kNumber || state_ == State::kLiteral) {
    state_ = State::kError;
    return Status::kError;
  }
  if (ws(c)) return Status::kMore;
  switch (state_) {
    case State::kKeyOrClose:
    case State::kKey:
      if (c == '"') {
        pending_ += '"';
        state_ = State::kKeyString;
        return Status::kMore;
      }
      if (c == '}' && state_ == State::kKeyOrClose) {
        copy_ += '}';
        stack_.pop_back();
        return value_ended();
      }
      break;
    case State::kColon:
      if (c == ':') {
        pending_ += ':';
        state_ = State::kValue;
        array_first_ = false;
        return Status::kMore;
      }
      break;
    case State::kAfterValue:
      if (c == ',') {
        pending_ += ',';
        state_ = stack_.back() == '{' ? State::kKey : State::kValue;
        array_first_ = false;
        return Status::kMore;
      }
      if (c == (stack_.back() == '{' ? '}' : ']')) {
        copy_ += c;
        stack_.pop_back();
        return value_ended();
      }
      break;
    case State::kValue:
      if (c == ']' && array_first_) {
        copy_ += ']';
        stack_.pop_back();
        array_first_ = false;
        return value_ended();
      }
      array_first_ = false;
      if (c == '{' || c == '[') {
        if (int(stack_.size()) >= kMaxDepth) break;
        copy_ += pending_;
        copy_ += c;
        pending_.clear();
        stack_.push_back(c);
        state_ = c == '{' ? State::kKeyOrClose : State::kValue;
        array_first_ = c == '[';
        return Status::kMore;
      }
      if (c == '"') {
        copy_ += pending_;
        copy_ += '"';
        pending_.clear();
        state_ = State::kString;
        return Status::kMore;
      }
      if (c == '-' || digit(c)) {
        num_ = number_next(0, c);
        pending_ += c;
        state_ = State::kNumber;
        return Status::kMore;
      }
      if (c == 't' || c == 'f' || c == 'n') {
        literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
        num_ = 1;  // bytes of the literal matched
        pending_ += c;
        state_ = State::kLiteral;
        return Status::kMore;
      }
      break;
    default:
      break;
  }
  state_ = State::kError;
  return Status::kError;
}

JsonStream::Status JsonStream::end_of_text() {
  if (state_ == State::kDone) return Status::kDone;
  if (state_ == State::kNumber && stack_.empty() && number_complete(num_)) {
    copy_ += pending_;
    pending_.clear();
    state_ = State::kDone;
    return Status::kDone;
  }
  return state_ == State::kError ? Status::kError : Status::kMore;
}

}  // namespace lynx::chatparse::detail
