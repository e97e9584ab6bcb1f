// A Jinja2-compatible template engine for the chat templates stored in model files
// (`tokenizer.chat_template`). It implements the subset of Jinja2 that released chat templates
// use, with the semantics Hugging Face transformers renders them with (trim_blocks and
// lstrip_blocks on, loop controls, its `tojson`, `raise_exception` and `strftime_now`), so that
// a prompt rendered here is byte-identical to the one the model was trained on.
//
// Templates are untrusted input (they come from downloaded files): parsing and rendering stop
// with a lynx::Error at the limits below instead of recursing or looping without bound.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "lynx/error.h"

namespace lynx {

struct TemplateOptions {
  // Jinja2's environment options; Hugging Face renders chat templates with both on.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  // Bounds for hostile templates: evaluation steps (statements + expressions), nesting of
  // evaluation (macro calls, nested expressions), bytes of output and of any one string or
  // list built while rendering.
  uint64_t max_steps = 20'000'000;
  int max_depth = 400;
  size_t max_output = size_t{64} << 20;
  size_t max_items = size_t{4} << 20;
  // What `strftime_now` formats: seconds since the epoch (UTC); < 0 = the time of rendering.
  int64_t now = -1;
};

class ChatTemplate {
 public:
  // Parses the template; throws lynx::Error naming the line of a syntax error.
  explicit ChatTemplate(std::string_view source, TemplateOptions opts = {});
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the variables of `context` (a JSON object: messages, tools,
  // add_generation_prompt, bos_token, ...). Throws lynx::Error for raise_exception, for
  // operations Jinja2 rejects (attribute of an undefined value, adding a string to a number...)
  // and at the limits of the options. Ordered JSON because key order is visible to templates
  // (tojson of a tool's schema, loops over dict items), as it is in Python.
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lynx
