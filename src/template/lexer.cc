// Template lexer: Jinja2's whitespace rules, which decide every byte of a chat prompt.
//  - `{%-` / `{{-` / `{#-` strip all whitespace before the tag; `-%}` / `-}}` / `-#}` after it.
//  - trim_blocks: the first newline after a block or comment tag is removed.
//  - lstrip_blocks: spaces and tabs from the start of a line up to a block or comment tag are
//    removed (`{%+` opts out); "start of a line" includes text that directly follows a tag
//    whose end consumed a newline, as Jinja2 tracks it.
//  - one trailing newline of the source is dropped (keep_trailing_newline=False).
#include <cctype>
#include <charconv>

#include "template/ast.h"

namespace lynx::tmpl {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

[[noreturn]] void fail(int line, const std::string& what) {
  throw Error("template: line " + std::to_string(line) + ": " + what);
}

class Lexer {
 public:
  Lexer(std::string_view src, const LexOptions& opt) : src_(src), opt_(opt) {
    if (!src_.empty() && src_.back() == '\n') {
      src_.remove_suffix(1);
      if (!src_.empty() && src_.back() == '\r') src_.remove_suffix(1);
    }
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t start = find_tag(pos_);
      std::string text(src_.substr(pos_, start - pos_));
      if (start == src_.size()) {
        emit_text(std::move(text));
        count_lines(pos_, start);
        pos_ = start;
        break;
      }
      const char kind = src_[start + 1];
      const char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
      if (sign == '-') {
        size_t n = text.size();
        while (n > 0 && is_space(text[n - 1])) --n;
        text.resize(n);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        const size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool blank = true;
          for (size_t k = l_pos; k < text.size(); ++k) blank = blank && is_space(text[k]);
          if (blank) text.resize(l_pos);
        }
      }
      emit_text(std::move(text));
      count_lines(pos_, start);
      pos_ = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = comment();
      } else if (kind == '%' && is_raw()) {
        line_starting = raw();
      } else {
        line_starting = tag(kind == '{');
      }
    }
    push(Token::Kind::kEof);
    return std::move(toks_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string_view::npos; k = src_.find('{', k + 1)) {
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    }
    return src_.size();
  }

  void count_lines(size_t from, size_t to) {
    for (size_t k = from; k < to && k < src_.size(); ++k) line_ += src_[k] == '\n';
  }

  void emit_text(std::string text) {
    if (text.empty()) return;
    toks_.push_back({Token::Kind::kText, std::move(text), 0, 0, line_});
  }
  void push(Token::Kind k, std::string s = {}) { toks_.push_back({k, std::move(s), 0, 0, line_}); }

  // After a tag's closing delimiter at `end` (its length `len`, `strip` for a `-` before it):
  // consumes the whitespace the rules remove; returns whether what was consumed ended with a
  // newline (Jinja2's line_starting for the next lstrip decision).
  bool close(size_t end, size_t len, bool strip, bool block_like, bool keep_newline) {
    count_lines(pos_, end + len);
    size_t p = end + len;
    bool ends_nl = false;
    if (strip) {
      size_t q = p;
      while (q < src_.size() && is_space(src_[q])) ++q;
      ends_nl = q > p && src_[q - 1] == '\n';
      count_lines(p, q);
      p = q;
    } else if (block_like && opt_.trim_blocks && !keep_newline && p < src_.size() &&
               src_[p] == '\n') {
      ++line_;
      ++p;
      ends_nl = true;
    }
    pos_ = p;
    return ends_nl;
  }

  bool comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string_view::npos) fail(line_, "unterminated comment");
    const bool strip = end > pos_ && src_[end - 1] == '-';
    return close(end, 2, strip, true, false);
  }

  bool is_raw() const {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    return src_.substr(p, 3) == "raw" && p + 3 < src_.size() &&
           !(std::isalnum(static_cast<unsigned char>(src_[p + 3])) || src_[p + 3] == '_');
  }

  // {% raw %}...{% endraw %}: the text between is output as written.
  bool raw() {
    size_t p = src_.find("%}", pos_);
    if (p == std::string_view::npos) fail(line_, "unterminated raw tag");
    const bool strip_open = src_[p - 1] == '-';
    close(p, 2, strip_open, true, false);
    size_t search = pos_;
    for (;;) {
      const size_t k = src_.find("{%", search);
      if (k == std::string_view::npos) fail(line_, "missing endraw");
      size_t q = k + 2;
      const bool strip_before = q < src_.size() && src_[q] == '-';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.substr(q, 6) != "endraw") {
        search = k + 2;
        continue;
      }
      std::string text(src_.substr(pos_, k - pos_));
      if (strip_before) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      count_lines(pos_, k);
      emit_text(std::move(text));
      const size_t end = src_.find("%}", q);
      if (end == std::string_view::npos) fail(line_, "unterminated endraw tag");
      pos_ = k;
      return close(end, 2, src_[end - 1] == '-', true, false);
    }
  }

  // The expression tokens of one {{ }} or {% %} tag.
  bool tag(bool variable) {
    push(variable ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin);
    int balance = 0;
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= src_.size()) fail(line_, variable ? "unterminated {{" : "unterminated {%");
      const std::string_view rest = src_.substr(pos_);
      if (balance == 0) {
        const std::string_view end = variable ? "}}" : "%}";
        for (char sign : {'-', '+', '\0'}) {
          if (sign && rest.size() > 2 && rest[0] == sign && rest.substr(1, 2) == end) {
            push(variable ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd);
            return close(pos_ + 1, 2, sign == '-', !variable, sign == '+');
          }
        }
        if (rest.substr(0, 2) == end) {
          push(variable ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd);
          return close(pos_, 2, false, !variable, false);
        }
      }
      const char c = rest[0];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (n < rest.size() &&
               (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
          ++n;
        push(Token::Kind::kName, std::string(rest.substr(0, n)));
        pos_ += n;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number(rest);
      } else if (c == '\'' || c == '"') {
        string_literal(rest);
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                     "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        bool found = false;
        for (const char* op : kOps) {
          const std::string_view o(op);
          if (rest.substr(0, o.size()) == o) {
            if (o == "(" || o == "[" || o == "{") ++balance;
            if (o == ")" || o == "]" || o == "}") --balance;
            push(Token::Kind::kOp, std::string(o));
            pos_ += o.size();
            found = true;
            break;
          }
        }
        if (!found) fail(line_, std::string("unexpected character '") + c + "'");
      }
    }
  }

  void number(std::string_view rest) {
    size_t n = 0;
    std::string digits;
    auto take_digits = [&] {
      while (n < rest.size() &&
             (std::isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) {
        if (rest[n] != '_') digits += rest[n];
        ++n;
      }
    };
    take_digits();
    bool is_float = false;
    if (n + 1 < rest.size() && rest[n] == '.' &&
        std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
      is_float = true;
      digits += '.';
      ++n;
      take_digits();
    }
    if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
      size_t m = n + 1;
      if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
      if (m < rest.size() && std::isdigit(static_cast<unsigned char>(rest[m]))) {
        is_float = true;
        digits += 'e';
        digits += rest.substr(n + 1, m - n - 1);
        n = m;
        take_digits();
      }
    }
    Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, digits, 0, 0, line_};
    if (is_float) {
      t.f = std::strtod(digits.c_str(), nullptr);
    } else {
      auto r = std::from_chars(digits.data(), digits.data() + digits.size(), t.i);
      if (r.ec != std::errc()) fail(line_, "integer literal out of range: " + digits);
    }
    toks_.push_back(std::move(t));
    pos_ += n;
  }

  // A quoted literal with Python's backslash escapes (Jinja2 decodes them the same way).
  void string_literal(std::string_view rest) {
    const char q = rest[0];
    std::string out;
    size_t n = 1;
    for (;; ++n) {
      if (n >= rest.size()) fail(line_, "unterminated string literal");
      const char c = rest[n];
      if (c == q) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++n >= rest.size()) fail(line_, "unterminated string literal");
      const char e = rest[n];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (n + len >= rest.size()) fail(line_, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          auto r = std::from_chars(rest.data() + n + 1, rest.data() + n + 1 + len, cp, 16);
          if (r.ec != std::errc() || r.ptr != rest.data() + n + 1 + len)
            fail(line_, "bad \\" + std::string(1, e) + " escape");
          out += to_utf8(std::u32string(1, char32_t(cp)));
          n += len;
          break;
        }
        default:
          out += '\\';
          out += e;  // Python keeps unknown escapes as written
      }
    }
    push(Token::Kind::kString, std::move(out));
    pos_ += n + 1;
  }

  std::string_view src_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> lex(std::string_view src, const LexOptions& opt) {
  return Lexer(src, opt).run();
}

}  // namespace lynx::tmpl
