// The syntax tree of a parsed template, and the lexer/parser entry points.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/value.h"

namespace lynx::tmpl {

// Tokens: template text and tag delimiters, and inside tags the expression tokens.
struct Token {
  enum class Kind {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Kind kind;
  std::string s;  // text, name, string literal (unescaped), operator
  int64_t i = 0;
  double f = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};
// Splits the source into tokens, applying {%- -%} and trim/lstrip_blocks to the text between
// tags, and dropping comments and the final newline (Jinja2's keep_trailing_newline=False).
std::vector<Token> lex(std::string_view src, const LexOptions& opt);

struct Expr;
using ExprP = std::unique_ptr<Expr>;
struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kTuple,
    kDict,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNeg,
    kPos,
    kNot,
    kBinary,
    kAnd,
    kOr,
    kCompare,
    kCond
  };
  Kind kind;
  int line = 0;
  Value value;               // kLiteral
  std::string name;          // kName, kAttr, kFilter, kTest; operator of kBinary/kCompare
  std::vector<ExprP> items;  // elements; kDict: key, value, key, value...; call positional args;
                             // kSlice: start, stop, step (null where omitted)
  std::vector<std::pair<std::string, ExprP>> kwargs;  // call / filter / test keyword arguments
  ExprP a, b, c;         // operands; kAttr/kIndex/kSlice/kCall/kFilter/kTest: a = the object;
                         // kCond: a = value, b = condition, c = else value (may be null)
  bool negated = false;  // `is not`, `not in`
  explicit Expr(Kind k, int ln) : kind(k), line(ln) {}
};

struct Stmt;
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;
struct Stmt {
  enum class Kind {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kCallBlock,
    kFilterBlock,
    kBreak,
    kContinue,
    kScope
  };
  Kind kind;
  int line = 0;
  std::string text;  // kText
  ExprP expr;        // kOutput, kSet value, kFor iterable, kCallBlock call
  std::vector<std::pair<ExprP, Body>> branches;  // kIf: condition and body, for if and elifs
  Body body, else_body;                          // kFor, kSetBlock, kMacro, kScope, kFilterBlock
  std::vector<std::string> targets;              // kFor / kSet names; kSet attr: {"ns", "attr"}
  bool attr_target = false;                      // kSet: `set ns.attr = ...`
  ExprP cond;                                    // kFor: `if` filter
  std::string name;                              // kMacro name
  std::vector<std::pair<std::string, ExprP>> params;  // kMacro parameters and defaults
  ExprP filter;  // kSetBlock / kFilterBlock: filters applied (a =
                 // null placeholder for the body's text)
  explicit Stmt(Kind k, int ln) : kind(k), line(ln) {}
};

// Parses a template; throws lynx::Error naming the line. `max_depth` bounds nesting.
Body parse(std::string_view src, const LexOptions& opt, int max_depth);

}  // namespace lynx::tmpl
