// The evaluator: walks the syntax tree with Jinja2's scoping (a for loop and a macro call open
// a scope; `set` writes to the innermost one, so namespace() is how state leaves a loop) and
// counts steps and depth against the limits.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "lynx/chat_template.h"
#include "template/ast.h"

namespace lynx::tmpl {

class Interp {
 public:
  explicit Interp(const TemplateOptions& opt) : opt_(opt) {}

  // Renders `body` with the variables of the dict `globals`.
  std::string render(const Body& body, const Value& globals);

  [[noreturn]] void fail(const std::string& what) const;
  // Python's integers have no bound; lynx's are 64-bit, so a result past them is an error
  // (jinja2 would print the big number) rather than a wrapped value.
  [[noreturn]] Value int_overflow(const std::string& op) const {
    fail("integer overflow in '" + op + "': the result does not fit in 64 bits");
  }
  // Counts work proportional to a value's size (copying a dict or list) as n steps, so that
  // copying inside a loop stays within the step limit.
  void charge(uint64_t n) {
    steps_ += n;
    step();
  }
  // Counts one evaluation step; throws at the step limit.
  void step() {
    if (++steps_ > opt_.max_steps)
      fail("stopped after " + std::to_string(opt_.max_steps) + " evaluation steps");
  }
  // Throws when a string or list being built would pass the size limits.
  void check_size(size_t bytes) const {
    if (bytes > opt_.max_output)
      fail("a string longer than " + std::to_string(opt_.max_output) + " bytes");
  }
  void check_items(size_t n) const {
    if (n > opt_.max_items) fail("a list longer than " + std::to_string(opt_.max_items) + " items");
  }
  const TemplateOptions& options() const { return opt_; }
  int line() const { return line_; }

  Value call(const Value& fn, Args& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  // The elements a for loop (or a filter) iterates: list items, dict keys, string characters.
  List iterate(const Value& v);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Scope {
    std::vector<std::pair<std::string, Value>> vars;
    Scope* parent = nullptr;
    Value* find(const std::string& name);
    void set(const std::string& name, Value v);
  };
  struct DepthGuard {
    Interp& in;
    explicit DepthGuard(Interp& i) : in(i) {
      if (++in.depth_ > in.opt_.max_depth)
        in.fail("nesting deeper than " + std::to_string(in.opt_.max_depth) +
                " levels (recursion?)");
    }
    ~DepthGuard() { --in.depth_; }
  };

  Flow exec(const Body& body, std::string& out);
  Flow exec_for(const Stmt& s, std::string& out);
  void exec_set(const Stmt& s, Value v);
  Value make_macro(const Stmt& s);
  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_slice(const Expr& e);
  Value eval_filter(const Expr& e, Value input);
  Args eval_args(const Expr& e);
  Value lookup(const std::string& name);
  void append(std::string& out, std::string_view s) {
    out += s;
    if (out.size() > opt_.max_output)
      fail("output longer than " + std::to_string(opt_.max_output) + " bytes");
  }

  const TemplateOptions& opt_;
  Scope* scope_ = nullptr;
  Scope* root_ = nullptr;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int line_ = 0;
  Value caller_;  // the body of the {% call %} block whose macro is being called
};

// Builtins (builtins.cc): filters, tests, methods of str/list/dict, global functions.
Value apply_filter(Interp& in, const std::string& name, Value input, Args& args);
bool apply_test(Interp& in, const std::string& name, const Value& v, Args& args);
// obj.name for a method of a str, list or dict; Undefined when there is none.
Value method(Interp& in, const Value& obj, const std::string& name);
// range, namespace, dict, raise_exception, strftime_now.
void add_globals(Interp& in, Value& globals);
// Python's str.replace (count < 0: all) and str.split / str.rsplit (sep None: whitespace).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count, Interp& in);
Value py_split(Interp& in, const std::string& s, const Value& sep, int64_t maxsplit, bool right);
// Python's str.strip family; chars not a string = whitespace.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);

}  // namespace lynx::tmpl
