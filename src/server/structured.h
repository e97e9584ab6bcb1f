// Structured output fields of a request (docs/serving.md, "Structured output"):
// response_format {"type": "json_object"} / {"type": "json_schema", "json_schema": {...}} and
// llama-server's "grammar" (GBNF text), compiled into the grammar that constrains sampling.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "lynx/grammar.h"

namespace lynx::server {

// Null when the request asks for no structure ({"type": "text"} or nothing). Throws ApiError
// (400) with the grammar's or the schema's error for one that does not compile. `text`: the
// body as sent (a schema's key order is the client's).
std::shared_ptr<const grammar::Grammar> structured_output(const nlohmann::json& body,
                                                          std::string_view text);

}  // namespace lynx::server
