// response_format and grammar -> a compiled grammar (structured.h).
#include "server/structured.h"

#include "server/api.h"

namespace lynx::server {

namespace {
[[noreturn]] void bad(const char* param, const std::string& why,
                      const char* code = "invalid_value") {
  throw ApiError(400, std::string(param) + ": " + why, param, code);
}
}  // namespace

std::shared_ptr<const grammar::Grammar> structured_output(const nlohmann::json& body,
                                                          std::string_view text) {
  const auto rf = body.find("response_format");
  const auto gr = body.find("grammar");
  std::string gbnf;
  const char* param = "response_format";
  if (rf != body.end() && !rf->is_null()) {
    if (!rf->is_object()) bad(param, "must be an object", "invalid_type");
    const auto type = rf->find("type");
    if (type == rf->end() || !type->is_string())
      bad("response_format.type", "must be a string", "invalid_type");
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      gbnf = grammar::json_object_gbnf();
    } else if (t == "json_schema") {
      const auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object())
        bad("response_format.json_schema", "must be an object", "invalid_type");
      if (const auto n = js->find("name"); n != js->end() && !n->is_string()) {
        bad("response_format.json_schema.name", "must be a string", "invalid_type");
      }
      if (const auto s = js->find("strict"); s != js->end() && !s->is_boolean() && !s->is_null()) {
        bad("response_format.json_schema.strict", "must be a boolean", "invalid_type");
      }
      // No schema: any JSON value (OpenAI requires one; llama-server accepts its absence). The
      // schema as the client wrote it: `body` keeps keys sorted, and a strict object's
      // properties are written in the schema's order.
      std::string schema = "{}";
      if (js->contains("schema")) {
        schema = nlohmann::ordered_json::parse(text, nullptr, false)
                     .at("response_format")
                     .at("json_schema")
                     .at("schema")
                     .dump();
      }
      param = "response_format.json_schema.schema";
      try {
        gbnf = grammar::schema_to_gbnf(schema);
      } catch (const Error& e) {
        bad(param, e.what());
      }
    } else if (t != "text") {
      bad("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
    }
  }
  if (gr != body.end() && !gr->is_null()) {
    if (!gr->is_string()) bad("grammar", "must be a string of GBNF", "invalid_type");
    if (!gbnf.empty()) bad("grammar", "cannot be combined with a JSON response_format");
    gbnf = gr->get<std::string>();
    param = "grammar";
    if (gbnf.empty()) return nullptr;
  }
  if (gbnf.empty()) return nullptr;
  try {
    return grammar::Grammar::parse(gbnf);
  } catch (const Error& e) {
    bad(param, e.what());
  }
}

}  // namespace lynx::server
