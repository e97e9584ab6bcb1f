// Recursive-descent parser with Jinja2's grammar and operator precedence:
//   cond-expr < or < and < not < comparison < + - < ~ < * / // % < ** < unary - +
//   < primary with postfix (.attr [index] [a:b:c] (call)) and then filters `|f` and tests `is t`.
// Nesting is bounded (max_depth) so that a hostile template cannot exhaust the stack here.
#include <initializer_list>

#include "template/ast.h"

namespace lynx::tmpl {
namespace {

using TK = Token::Kind;
using EK = Expr::Kind;
using SK = Stmt::Kind;

class Parser {
 public:
  Parser(std::vector<Token> toks, int max_depth) : t_(std::move(toks)), max_depth_(max_depth) {}

  Body run() {
    std::string ended;
    Body b = body({}, &ended);
    return b;
  }

 private:
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.max_depth_)
        p.fail("nesting deeper than " + std::to_string(p.max_depth_) + " levels");
    }
    ~DepthGuard() { --p.depth_; }
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("template: line " + std::to_string(cur().line) + ": " + what);
  }
  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  Token take() {
    Token t = t_[p_];
    if (p_ + 1 < t_.size()) ++p_;
    return t;
  }
  bool is_op(const char* op) const { return cur().kind == TK::kOp && cur().s == op; }
  bool is_name(const char* n) const { return cur().kind == TK::kName && cur().s == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    take();
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    take();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', got '" + describe(cur()) + "'");
  }
  void expect_name_kw(const char* n) {
    if (!accept_name(n)) fail(std::string("expected '") + n + "', got '" + describe(cur()) + "'");
  }
  std::string expect_name() {
    if (cur().kind != TK::kName) fail("expected a name, got '" + describe(cur()) + "'");
    return take().s;
  }
  void expect_block_end() {
    if (cur().kind != TK::kBlockEnd) fail("expected '%}', got '" + describe(cur()) + "'");
    take();
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TK::kBlockEnd:
        return "%}";
      case TK::kVarEnd:
        return "}}";
      case TK::kEof:
        return "end of template";
      case TK::kText:
        return "text";
      default:
        return t.s;
    }
  }

  // Statements up to a block tag whose keyword is in `ends`; that keyword is consumed and
  // returned in *ended (the rest of its tag is left to the caller).
  Body body(std::initializer_list<const char*> ends, std::string* ended) {
    DepthGuard g(*this);
    Body out;
    for (;;) {
      const Token& t = cur();
      if (t.kind == TK::kEof) {
        if (ends.size() != 0) fail(std::string("missing '{% ") + *(ends.end() - 1) + " %}'");
        return out;
      }
      if (t.kind == TK::kText) {
        auto s = std::make_unique<Stmt>(SK::kText, t.line);
        s->text = take().s;
        out.push_back(std::move(s));
      } else if (t.kind == TK::kVarBegin) {
        auto s = std::make_unique<Stmt>(SK::kOutput, take().line);
        s->expr = tuple_expr(true);
        if (cur().kind != TK::kVarEnd) fail("expected '}}', got '" + describe(cur()) + "'");
        take();
        out.push_back(std::move(s));
      } else if (t.kind == TK::kBlockBegin) {
        take();
        const std::string kw = cur().kind == TK::kName ? cur().s : "";
        for (const char* e : ends) {
          if (kw == e) {
            take();
            *ended = kw;
            return out;
          }
        }
        out.push_back(statement());
      } else {
        fail("unexpected '" + describe(t) + "'");
      }
    }
  }

  StmtP statement() {
    const int line = cur().line;
    const std::string kw = expect_name();
    std::string ended;
    if (kw == "if") {
      auto s = std::make_unique<Stmt>(SK::kIf, line);
      ExprP c = expr();
      for (;;) {
        expect_block_end();
        Body b = body({"elif", "else", "endif"}, &ended);
        s->branches.emplace_back(std::move(c), std::move(b));
        if (ended == "elif") {
          c = expr();
          continue;
        }
        if (ended == "else") {
          expect_block_end();
          s->else_body = body({"endif"}, &ended);
        }
        expect_block_end();
        return s;
      }
    }
    if (kw == "for") {
      auto s = std::make_unique<Stmt>(SK::kFor, line);
      const bool paren = accept_op("(");
      do s->targets.push_back(expect_name());
      while (accept_op(","));
      if (paren) expect_op(")");
      expect_name_kw("in");
      s->expr = tuple_expr(false);
      if (accept_name("if")) s->cond = expr();
      if (is_name("recursive")) fail("recursive loops are not supported");
      expect_block_end();
      s->body = body({"else", "endfor"}, &ended);
      if (ended == "else") {
        expect_block_end();
        s->else_body = body({"endfor"}, &ended);
      }
      expect_block_end();
      return s;
    }
    if (kw == "set") {
      std::vector<std::string> targets{expect_name()};
      bool attr = false;
      if (accept_op(".")) {
        targets.push_back(expect_name());
        attr = true;
      } else {
        while (accept_op(",")) targets.push_back(expect_name());
      }
      if (accept_op("=")) {
        auto s = std::make_unique<Stmt>(SK::kSet, line);
        s->targets = std::move(targets);
        s->attr_target = attr;
        s->expr = tuple_expr(true);
        expect_block_end();
        return s;
      }
      if (attr || targets.size() != 1) fail("a block set assigns one name");
      auto s = std::make_unique<Stmt>(SK::kSetBlock, line);
      s->targets = std::move(targets);
      if (is_op("|")) s->filter = filters(std::make_unique<Expr>(EK::kLiteral, line));
      expect_block_end();
      s->body = body({"endset"}, &ended);
      expect_block_end();
      return s;
    }
    if (kw == "macro") {
      auto s = std::make_unique<Stmt>(SK::kMacro, line);
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        std::string p = expect_name();
        ExprP def;
        if (accept_op("=")) def = expr();
        s->params.emplace_back(std::move(p), std::move(def));
        if (!accept_op(",")) break;
      }
      expect_op(")");
      expect_block_end();
      s->body = body({"endmacro"}, &ended);
      if (cur().kind == TK::kName) take();  // {% endmacro name %}
      expect_block_end();
      return s;
    }
    if (kw == "call") {
      auto s = std::make_unique<Stmt>(SK::kCallBlock, line);
      if (is_op("(")) fail("call blocks with caller arguments are not supported");
      s->expr = expr();
      if (s->expr->kind != EK::kCall) fail("{% call %} needs a macro call");
      expect_block_end();
      s->body = body({"endcall"}, &ended);
      expect_block_end();
      return s;
    }
    if (kw == "filter") {
      auto s = std::make_unique<Stmt>(SK::kFilterBlock, line);
      // The first filter has no leading '|'; parse it as if it had one.
      s->filter = filters(std::make_unique<Expr>(EK::kLiteral, line), true);
      expect_block_end();
      s->body = body({"endfilter"}, &ended);
      expect_block_end();
      return s;
    }
    if (kw == "break" || kw == "continue") {
      expect_block_end();
      return std::make_unique<Stmt>(kw == "break" ? SK::kBreak : SK::kContinue, line);
    }
    if (kw == "generation") {  // transformers' AssistantTracker: renders its body
      auto s = std::make_unique<Stmt>(SK::kScope, line);
      expect_block_end();
      s->body = body({"endgeneration"}, &ended);
      expect_block_end();
      return s;
    }
    fail("unknown or unsupported tag '" + kw + "'");
  }

  // ---- expressions ----
  ExprP tuple_expr(bool with_cond) {
    const int line = cur().line;
    ExprP first = with_cond ? expr() : or_expr();
    if (!is_op(",")) return first;
    auto t = std::make_unique<Expr>(EK::kTuple, line);
    t->items.push_back(std::move(first));
    while (accept_op(",")) {
      if (cur().kind == TK::kBlockEnd || cur().kind == TK::kVarEnd || is_op("=")) break;
      t->items.push_back(with_cond ? expr() : or_expr());
    }
    return t;
  }

  ExprP expr() {
    DepthGuard g(*this);
    ExprP e = or_expr();
    while (is_name("if")) {
      const int line = take().line;
      auto c = std::make_unique<Expr>(EK::kCond, line);
      c->a = std::move(e);
      c->b = or_expr();
      if (accept_name("else")) c->c = expr();
      e = std::move(c);
    }
    return e;
  }

  ExprP binary(EK kind, const std::string& op, ExprP l, ExprP r, int line) {
    auto e = std::make_unique<Expr>(kind, line);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprP or_expr() {
    ExprP e = and_expr();
    while (is_name("or")) {
      const int line = take().line;
      e = binary(EK::kOr, "or", std::move(e), and_expr(), line);
    }
    return e;
  }
  ExprP and_expr() {
    ExprP e = not_expr();
    while (is_name("and")) {
      const int line = take().line;
      e = binary(EK::kAnd, "and", std::move(e), not_expr(), line);
    }
    return e;
  }
  ExprP not_expr() {
    DepthGuard g(*this);
    if (is_name("not")) {
      auto e = std::make_unique<Expr>(EK::kNot, take().line);
      e->a = not_expr();
      return e;
    }
    return compare();
  }
  ExprP compare() {
    ExprP e = math1();
    for (;;) {
      const int line = cur().line;
      if (cur().kind == TK::kOp && (cur().s == "==" || cur().s == "!=" || cur().s == "<" ||
                                    cur().s == ">" || cur().s == "<=" || cur().s == ">=")) {
        const std::string op = take().s;
        e = binary(EK::kCompare, op, std::move(e), math1(), line);
      } else if (is_name("in")) {
        take();
        e = binary(EK::kCompare, "in", std::move(e), math1(), line);
      } else if (is_name("not") && peek().kind == TK::kName && peek().s == "in") {
        take();
        take();
        e = binary(EK::kCompare, "in", std::move(e), math1(), line);
        e->negated = true;
      } else {
        return e;
      }
    }
  }
  ExprP math1() {
    ExprP e = concat();
    while (is_op("+") || is_op("-")) {
      const Token t = take();
      e = binary(EK::kBinary, t.s, std::move(e), concat(), t.line);
    }
    return e;
  }
  ExprP concat() {
    ExprP e = math2();
    while (is_op("~")) {
      const Token t = take();
      e = binary(EK::kBinary, "~", std::move(e), math2(), t.line);
    }
    return e;
  }
  ExprP math2() {
    ExprP e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = take();
      e = binary(EK::kBinary, t.s, std::move(e), power(), t.line);
    }
    return e;
  }
  ExprP power() {
    ExprP e = unary(true);
    while (is_op("**")) {
      const Token t = take();
      e = binary(EK::kBinary, "**", std::move(e), unary(true), t.line);
    }
    return e;
  }
  ExprP unary(bool with_filter) {
    DepthGuard g(*this);
    ExprP e;
    if (is_op("-") || is_op("+")) {
      const Token t = take();
      e = std::make_unique<Expr>(t.s == "-" ? EK::kNeg : EK::kPos, t.line);
      e->a = unary(false);
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }

  ExprP primary() {
    DepthGuard g(*this);
    const Token t = cur();
    switch (t.kind) {
      case TK::kName: {
        take();
        auto e = std::make_unique<Expr>(EK::kLiteral, t.line);
        if (t.s == "true" || t.s == "True")
          e->value = Value::boolean(true);
        else if (t.s == "false" || t.s == "False")
          e->value = Value::boolean(false);
        else if (t.s == "none" || t.s == "None")
          e->value = Value::none();
        else {
          e->kind = EK::kName;
          e->name = t.s;
        }
        return e;
      }
      case TK::kString: {
        std::string s;
        while (cur().kind == TK::kString) s += take().s;  // adjacent literals concatenate
        auto e = std::make_unique<Expr>(EK::kLiteral, t.line);
        e->value = Value::str(std::move(s));
        return e;
      }
      case TK::kInt:
      case TK::kFloat: {
        take();
        auto e = std::make_unique<Expr>(EK::kLiteral, t.line);
        e->value = t.kind == TK::kInt ? Value::integer(t.i) : Value::real(t.f);
        return e;
      }
      default:
        break;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return std::make_unique<Expr>(EK::kTuple, t.line);
      ExprP e = expr();
      if (is_op(",")) {
        auto tup = std::make_unique<Expr>(EK::kTuple, t.line);
        tup->items.push_back(std::move(e));
        while (accept_op(",") && !is_op(")")) tup->items.push_back(expr());
        e = std::move(tup);
      }
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      auto e = std::make_unique<Expr>(EK::kList, t.line);
      while (!is_op("]")) {
        e->items.push_back(expr());
        if (!accept_op(",")) break;
      }
      expect_op("]");
      return e;
    }
    if (accept_op("{")) {
      auto e = std::make_unique<Expr>(EK::kDict, t.line);
      while (!is_op("}")) {
        e->items.push_back(expr());
        expect_op(":");
        e->items.push_back(expr());
        if (!accept_op(",")) break;
      }
      expect_op("}");
      return e;
    }
    fail("unexpected '" + describe(t) + "'");
  }

  ExprP postfix(ExprP e) {
    for (;;) {
      const int line = cur().line;
      if (accept_op(".")) {
        if (cur().kind == TK::kInt) {  // x.0 is x[0]
          auto idx = std::make_unique<Expr>(EK::kIndex, line);
          auto lit = std::make_unique<Expr>(EK::kLiteral, line);
          lit->value = Value::integer(take().i);
          idx->a = std::move(e);
          idx->b = std::move(lit);
          e = std::move(idx);
          continue;
        }
        auto a = std::make_unique<Expr>(EK::kAttr, line);
        a->name = expect_name();
        a->a = std::move(e);
        e = std::move(a);
      } else if (accept_op("[")) {
        e = subscript(std::move(e), line);
      } else if (is_op("(")) {
        auto c = std::make_unique<Expr>(EK::kCall, line);
        c->a = std::move(e);
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprP subscript(ExprP obj, int line) {
    ExprP parts[3];
    int n = 0;
    bool slice = false;
    for (;;) {
      if (!is_op(":") && !is_op("]")) parts[n] = expr();
      if (accept_op(":")) {
        slice = true;
        if (++n > 2) fail("too many ':' in a slice");
        continue;
      }
      break;
    }
    expect_op("]");
    auto e = std::make_unique<Expr>(slice ? EK::kSlice : EK::kIndex, line);
    e->a = std::move(obj);
    if (slice) {
      for (auto& p : parts) e->items.push_back(std::move(p));
    } else {
      if (!parts[0]) fail("empty subscript");
      e->b = std::move(parts[0]);
    }
    return e;
  }

  void call_args(Expr& c) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().kind == TK::kName && peek().kind == TK::kOp && peek().s == "=") {
        std::string k = take().s;
        take();
        c.kwargs.emplace_back(std::move(k), expr());
      } else {
        c.items.push_back(expr());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  // `|name(args)` filters and `is [not] name args` tests, left to right.
  ExprP filters(ExprP e, bool first_without_bar = false) {
    for (;;) {
      const int line = cur().line;
      if (first_without_bar || accept_op("|")) {
        first_without_bar = false;
        auto f = std::make_unique<Expr>(EK::kFilter, line);
        f->name = expect_name();
        while (accept_op(".")) f->name += "." + expect_name();
        f->a = std::move(e);
        if (is_op("(")) call_args(*f);
        e = std::move(f);
      } else if (accept_name("is")) {
        auto t = std::make_unique<Expr>(EK::kTest, line);
        t->negated = accept_name("not");
        t->name = expect_name();
        t->a = std::move(e);
        if (is_op("(")) {
          call_args(*t);
        } else if ((cur().kind == TK::kName || cur().kind == TK::kString ||
                    cur().kind == TK::kInt || cur().kind == TK::kFloat || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") &&
                   !is_name("is") && !is_name("in") && !is_name("not")) {
          t->items.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int max_depth_;
  int depth_ = 0;
};

}  // namespace

Body parse(std::string_view src, const LexOptions& opt, int max_depth) {
  return Parser(lex(src, opt), max_depth).run();
}

}  // namespace lynx::tmpl
