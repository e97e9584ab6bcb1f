// Internal: the field helpers of the request parser (api.cc) and the chat request's part
// (chat_request.cc). Each failure is an ApiError (400) naming the field.
#pragma once
#include <string>

#include "server/api.h"

namespace lynx::server {

// The field, or null when absent or null.
inline const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] inline void bad_type(const char* key, const char* want) {
  throw ApiError(400, std::string("'") + key + "' must be " + want, key, "invalid_type");
}

[[noreturn]] inline void bad_value(const char* key, const std::string& why) {
  throw ApiError(400, std::string("'") + key + "' " + why, key, "invalid_value");
}

inline bool get_bool(const json& body, const char* key, bool def) {
  const json* v = field(body, key);
  if (!v) return def;
  if (!v->is_boolean()) bad_type(key, "a boolean");
  return v->get<bool>();
}

// The chat request's own part (chat_request.cc): tools, tool_choice, parallel_tool_calls and
// reasoning_format into p.output / p.tool_choice, then the prompt rendered into p.prompt.
void output_fields(const json& body, const ApiModel& m, CompletionParams& p);
void chat_prompt(const json& body, const std::string& text, const ApiModel& m, CompletionParams& p);

}  // namespace lynx::server
