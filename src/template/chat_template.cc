// The public face of the template engine (include/lynx/chat_template.h).
#include "lynx/chat_template.h"

#include <nlohmann/json.hpp>

#include "template/interp.h"

namespace lynx {

struct ChatTemplate::Impl {
  TemplateOptions opt;
  tmpl::Body body;
};

ChatTemplate::ChatTemplate(std::string_view source, TemplateOptions opts)
    : impl_(std::make_unique<Impl>()) {
  impl_->opt = opts;
  tmpl::LexOptions lo;
  lo.trim_blocks = opts.trim_blocks;
  lo.lstrip_blocks = opts.lstrip_blocks;
  impl_->body = tmpl::parse(source, lo, opts.max_depth);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) throw Error("template: the render context must be a JSON object");
  tmpl::Value globals = tmpl::from_json(context);
  tmpl::Interp in(impl_->opt);
  return in.render(impl_->body, globals);
}

}  // namespace lynx
