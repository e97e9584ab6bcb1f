// OpenAI request parsing/validation and response bodies (see api.h). Field semantics follow
// the OpenAI API reference for /v1/completions and /v1/chat/completions; fields this engine
// cannot honour (echo, best_of > 1, suffix, functions) are refused with a 400 naming them
// rather than silently ignored. Sampling fields: docs/serving.md, "Sampling"; tools and
// reasoning: "Tools and reasoning".
#include "server/api.h"
#include "server/api_util.h"
#include "server/structured.h"
#include "server/tool_grammar.h"

#include "lynx/error.h"
#include "lynx/routing.h"

#include <algorithm>
#include <charconv>
#include <random>

namespace lynx::server {
namespace {

// A routing level named by a request (integer, or a spec on the server's ladder), checked
// against the ladder and the accuracy budget. Only a server started with
// --allow-request-routing takes one: elsewhere the operator has not agreed to let clients
// move the batch's routing, and silently ignoring the field would give the client a routing
// it did not ask for.
int routing_level(const json& v, const char* key, const ApiModel& m) {
  const auto& lv = m.routing_levels;
  auto ladder = [&] {
    std::string s;
    for (size_t i = 0; i < lv.size(); ++i) {
      s += (i ? ", " : "") + std::to_string(i) + " = " + lv[i];
    }
    return s;
  };
  if (!m.allow_request_routing) {
    bad_value(key,
              "needs a server started with --allow-request-routing (this one takes \"routing\": "
              "\"exact\" or \"default\" only)");
  }
  int level = -1;
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    if (n < 0 || n >= int64_t(lv.size())) {
      bad_value(key, "level " + std::to_string(n) + " is not on this server's routing ladder (" +
                         ladder() + ")");
    }
    level = int(n);
  } else {
    const std::string text = v.get<std::string>();
    std::string spec;
    try {
      spec = make_routing_policy(text)->spec();
    } catch (const Error& e) {
      bad_value(key, std::string("is not a routing policy spec: ") + e.what());
    }
    const auto it = std::find(lv.begin(), lv.end(), spec);
    if (it == lv.end()) {
      // One policy runs per step; levels of one ladder are ordered by strength, so the batch
      // can take the weakest of its requests' wishes. A spec off the ladder has no place in
      // that order.
      bad_value(key,
                "'" + spec + "' is not a level of this server's routing ladder (" + ladder() + ")");
    }
    level = int(it - lv.begin());
  }
  if (level > m.max_routing_level) {
    bad_value(key, "level " + std::to_string(level) + " ('" + lv[size_t(level)] +
                       "') is above the server's accuracy budget (highest level: " +
                       std::to_string(m.max_routing_level) + ")");
  }
  return level;
}

// An integer field in [lo, hi]; `def` when absent or null.
int64_t get_int(const json& body, const char* key, int64_t lo, int64_t hi, int64_t def) {
  const json* v = field(body, key);
  if (!v) return def;
  if (!v->is_number_integer()) bad_type(key, "an integer");
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : v->get<int64_t>();
  if (x < lo || x > hi) {
    // The value as the client wrote it: a huge unsigned one is not INT64_MAX (or -1).
    bad_value(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                       " (got " + v->dump() + ")");
  }
  return x;
}

double get_num(const json& body, const char* key, double lo, double hi, double def) {
  const json* v = field(body, key);
  if (!v) return def;
  if (!v->is_number()) bad_type(key, "a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    bad_value(key, "must be between " + json(lo).dump() + " and " + json(hi).dump());
  }
  return x;
}

void check_tokens(const std::vector<int32_t>& t, const ApiModel& m) {
  for (int32_t id : t) {
    if (id < 0 || id >= m.tok->n_vocab()) {
      bad_value("prompt", "contains token id " + std::to_string(id) + " outside the vocabulary");
    }
  }
}

std::vector<int32_t> int_array(const json& a) {
  std::vector<int32_t> out;
  for (const json& x : a) {
    if (!x.is_number_integer()) bad_type("prompt", "a string or an array of token ids");
    const int64_t v = x.get<int64_t>();
    if (v < INT32_MIN || v > INT32_MAX) bad_value("prompt", "has a token id out of range");
    out.push_back(int32_t(v));
  }
  return out;
}

std::vector<int32_t> completion_prompt(const json& body, const ApiModel& m) {
  const json* p = field(body, "prompt");
  if (!p) throw ApiError(400, "'prompt' is required", "prompt", "missing_required_parameter");
  auto encode = [&](const std::string& s) { return m.tok->encode(s, true, true); };
  if (p->is_string()) return encode(p->get<std::string>());
  if (!p->is_array()) bad_type("prompt", "a string or an array of token ids");
  if (p->empty()) bad_value("prompt", "is empty");
  // One prompt per request: a batch of prompts would need one set of choices per prompt.
  if ((*p)[0].is_string() || (*p)[0].is_array()) {
    if (p->size() != 1) bad_value("prompt", "must hold one prompt (batched prompts: send n)");
    const json& q = (*p)[0];
    if (q.is_string()) return encode(q.get<std::string>());
    return int_array(q);
  }
  return int_array(*p);
}

void refuse_unsupported(const json& body) {
  if (get_bool(body, "echo", false)) bad_value("echo", "is not supported");
  if (get_int(body, "best_of", 1, 1, 1) != 1) bad_value("best_of", "is not supported");
  if (const json* v = field(body, "suffix");
      v && !(v->is_string() && v->get<std::string>().empty())) {
    bad_value("suffix", "is not supported");
  }
  // The deprecated form of tools.
  for (const char* k : {"functions", "function_call"}) {
    if (field(body, k)) bad_value(k, "is not supported: send 'tools' (and 'tool_choice')");
  }
}

[[noreturn]] void bad_bias(const std::string& what, const char* code = "invalid_value") {
  throw ApiError(400, what, "logit_bias", code);
}

// OpenAI's form, {"token id": bias}, and llama-server's, [[token id or text, bias], ...], with
// a bias of false for a ban (llama-server); text is tokenized and each of its tokens biased.
std::vector<LogitBias> logit_bias(const json& body, const ApiModel& m) {
  const json* v = field(body, "logit_bias");
  if (!v) return {};
  const int n_vocab = m.tok->n_vocab();
  auto id_of = [&](int64_t id, const std::string& shown) {
    if (id < 0 || id >= n_vocab) {
      bad_bias("'logit_bias' has token id " + shown + ", outside the vocabulary (0 to " +
               std::to_string(n_vocab - 1) + ")");
    }
    return int32_t(id);
  };
  auto bias_of = [](const json& b, const std::string& at) {
    if (b.is_boolean()) {
      if (!b.get<bool>()) return kBanBias;
      bad_bias("'" + at + "' is true: a bias is a number, or false to ban the token");
    }
    if (!b.is_number()) bad_bias("'" + at + "' must be a number or false", "invalid_type");
    const double x = b.get<double>();
    if (!(x >= -100 && x <= 100)) {
      bad_bias("'" + at + "' must be between -100 and 100 (got " + b.dump() + ")");
    }
    return float(x);
  };
  std::vector<LogitBias> out;
  if (v->is_object()) {
    for (const auto& [key, b] : v->items()) {
      int64_t id = -1;
      const char* end = key.data() + key.size();
      const auto [ptr, ec] = std::from_chars(key.data(), end, id);
      if (key.empty() || ptr != end ||
          (ec != std::errc() && ec != std::errc::result_out_of_range)) {
        bad_bias("'logit_bias' key \"" + key + "\" is not a token id (a decimal integer)");
      }
      if (ec == std::errc::result_out_of_range) id = -1;
      out.push_back({id_of(id, key), bias_of(b, "logit_bias[\"" + key + "\"]")});
    }
  } else if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      const std::string at = "logit_bias[" + std::to_string(i) + "]";
      if (!e.is_array() || e.size() != 2) {
        bad_bias("'" + at + "' must be a [token id or text, bias] pair", "invalid_type");
      }
      const float bias = bias_of(e[1], at + "[1]");
      if (e[0].is_number_integer()) {
        const bool huge = e[0].is_number_unsigned() && e[0].get<uint64_t>() > uint64_t(INT64_MAX);
        out.push_back({id_of(huge ? -1 : e[0].get<int64_t>(), e[0].dump()), bias});
      } else if (e[0].is_string()) {
        const std::vector<int32_t> toks = m.tok->encode(e[0].get<std::string>(), false, false);
        if (toks.empty()) bad_bias("'" + at + "[0]' tokenizes to nothing");
        for (int32_t t : toks) out.push_back({id_of(t, std::to_string(t)), bias});
      } else {
        bad_bias("'" + at + "[0]' must be a token id or a string", "invalid_type");
      }
    }
  } else {
    bad_bias(
        "'logit_bias' must be an object mapping token ids to biases, or an array of "
        "[token id, bias] pairs",
        "invalid_type");
  }
  std::vector<bool> banned(size_t(n_vocab), false);
  size_t n_banned = 0;
  for (const LogitBias& b : out) {
    if (b.bias == kBanBias && !banned[size_t(b.token)]) {
      banned[size_t(b.token)] = true;
      ++n_banned;
    }
  }
  if (n_vocab > 0 && n_banned == size_t(n_vocab)) bad_bias("'logit_bias' bans every token");
  return out;
}

// Penalties, min_p, typical_p and logit_bias (top_k, top_p, temperature and seed are read by
// the caller).
void sampling_fields(const json& body, const ApiModel& m, SamplingParams& s) {
  s.min_p = float(get_num(body, "min_p", 0, 1, 0));
  s.typical_p = float(get_num(body, "typical_p", 0, 1, 1));
  if (s.typical_p <= 0) bad_value("typical_p", "must be greater than 0 (1 = off)");
  s.presence_penalty = float(get_num(body, "presence_penalty", -2, 2, 0));
  s.frequency_penalty = float(get_num(body, "frequency_penalty", -2, 2, 0));
  // vLLM's name and llama-server's for one setting.
  const bool vllm = field(body, "repetition_penalty") != nullptr;
  if (vllm && field(body, "repeat_penalty")) {
    bad_value("repeat_penalty", "and 'repetition_penalty' name one setting: send one of them");
  }
  const char* rk = vllm ? "repetition_penalty" : "repeat_penalty";
  s.repeat_penalty = float(get_num(body, rk, 0, 100, 1));
  if (s.repeat_penalty <= 0) bad_value(rk, "must be greater than 0 (1 = off)");
  s.repeat_last_n = int(get_int(body, "repeat_last_n", -1, INT32_MAX, 64));
  s.logit_bias = logit_bias(body, m);
}

json chat_logprobs(const std::vector<std::string>& text, const std::vector<float>& lp) {
  json content = json::array();
  for (size_t i = 0; i < text.size(); ++i) {
    json bytes = json::array();
    for (unsigned char ch : text[i]) bytes.push_back(int(ch));
    content.push_back({{"token", text[i]},
                       {"logprob", lp[i]},
                       {"bytes", bytes},
                       {"top_logprobs", json::array()}});
  }
  return {{"content", content}};
}

json completion_logprobs(const std::vector<std::string>& text, const std::vector<float>& lp,
                         size_t offset) {
  json tokens = json::array(), lps = json::array(), offs = json::array();
  for (size_t i = 0; i < text.size(); ++i) {
    tokens.push_back(text[i]);
    lps.push_back(lp[i]);
    offs.push_back(offset);
    offset += text[i].size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", nullptr},
          {"text_offset", offs}};
}

}  // namespace

ApiError::ApiError(int status, std::string message, std::string param, std::string code,
                   std::string type)
    : std::runtime_error(std::move(message)),
      status(status),
      type(std::move(type)),
      param(std::move(param)),
      code(std::move(code)) {}

json ApiError::body() const {
  json e = {{"message", what()}, {"type", type}};
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = code.empty() ? json(nullptr) : json(code);
  return {{"error", e}};
}

int json_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

namespace {
// tool_choice "required" or a named function: the grammar of the call in the model's format
// (tool_grammar.h). Another constraint on the same output would contradict it: llama-server
// refuses `grammar` with tools, and so do we, and response_format too.
void forced_tool_call(const json& body, const std::string& text, CompletionParams& p) {
  if (p.tool_choice != ToolChoice::kRequired && p.tool_choice != ToolChoice::kFunction) return;
  if (p.grammar) {
    const char* f = field(body, "grammar") ? "grammar" : "response_format";
    bad_value(f,
              std::string("cannot be combined with tool_choice ") +
                  (p.tool_choice == ToolChoice::kRequired ? "\"required\"" : "naming a function") +
                  ": the answer must be the tool call");
  }
  if (!p.output.parse_tools) return;
  ToolGrammar g;
  try {
    // The tools in the client's key order (properties are written in the schema's order).
    const auto ordered = nlohmann::ordered_json::parse(text, nullptr, false);
    g = tool_call_grammar(p.output, ordered.at("tools"), p.tool_choice_name);
    if (!g.gbnf.empty()) p.grammar = grammar::Grammar::parse(g.gbnf);
  } catch (const Error& e) {
    bad_value("tools", std::string("the grammar of their calls does not compile: ") + e.what());
  }
  p.grammar_markers = std::move(g.markers);
}

// The request body: a JSON object no deeper than the server allows.
json parse_body(const std::string& text, const ApiModel& m) {
  if (json_depth(text, m.max_depth) > m.max_depth) {
    throw ApiError(
        400, "The JSON body is nested deeper than " + std::to_string(m.max_depth) + " levels.", "",
        "invalid_json");
  }
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded()) {
    throw ApiError(400, "We could not parse the JSON body of your request.", "", "invalid_json");
  }
  if (!body.is_object())
    throw ApiError(400, "The request body must be a JSON object.", "", "invalid_json");
  return body;
}

// The prompt (chat messages through the template, or a completion prompt) and the tokens
// asked for, within the context.
void prompt_fields(const json& body, const std::string& text, const ApiModel& m,
                   CompletionParams& p) {
  const bool chat = p.chat;
  try {
    if (chat) {
      chat_prompt(body, text, m, p);  // chat_request.cc
    } else {
      p.prompt = completion_prompt(body, m);
    }
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception& e) {
    // The tokenizer refusing the text (our own message, about the client's input).
    bad_value(chat ? "messages" : "prompt", std::string("cannot be tokenized: ") + e.what());
  }
  if (p.prompt.empty()) bad_value(chat ? "messages" : "prompt", "tokenizes to nothing");
  check_tokens(p.prompt, m);

  const int plen = int(p.prompt.size());
  const char* mt_key =
      chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  // OpenAI's defaults: 16 for completions, "as many as fit" for chat.
  const int64_t def = chat ? std::max(1, m.n_ctx - plen) : 16;
  p.max_tokens = int(get_int(body, mt_key, 1, m.n_ctx, def));
  if (plen + int64_t(p.max_tokens) > m.n_ctx) {
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(m.n_ctx) +
                       " tokens. However, you requested " + std::to_string(plen + p.max_tokens) +
                       " tokens (" + std::to_string(plen) + " in the prompt, " +
                       std::to_string(p.max_tokens) + " for the completion).",
                   chat ? "messages" : "prompt", "context_length_exceeded");
  }
}

// Temperature, top_p, top_k and the other samplers, the seed, and the stop strings.
void sampling_and_stop(const json& body, const ApiModel& m, CompletionParams& p) {
  p.sampling.temperature = float(get_num(body, "temperature", 0, 2, 1));
  p.sampling.top_p = float(get_num(body, "top_p", 0, 1, 1));
  if (p.sampling.top_p <= 0) bad_value("top_p", "must be greater than 0");
  p.sampling.top_k = int(get_int(body, "top_k", -1, 1 << 20, 0));
  if (p.sampling.top_k < 0) p.sampling.top_k = 0;  // vLLM's -1 = off
  sampling_fields(body, m, p.sampling);
  const json* seed = field(body, "seed");
  if (seed && !seed->is_number_integer()) bad_type("seed", "an integer");
  // -1 is llama-server's "a random seed"; other negative seeds would wrap to 2^64 - n.
  if (seed && !seed->is_number_unsigned() && seed->get<int64_t>() < -1) {
    bad_value("seed",
              "must be between -1 (random) and 18446744073709551615 (got " + seed->dump() + ")");
  }
  p.sampling.seed =
      seed && seed->is_number_unsigned() ? seed->get<uint64_t>() : std::random_device{}();

  if (const json* v = field(body, "stop")) {
    if (v->is_string()) {
      p.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const json& s : *v) {
        if (!s.is_string()) bad_type("stop", "a string or an array of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      bad_type("stop", "a string or an array of strings");
    }
    if (p.stop.size() > 16) bad_value("stop", "may hold at most 16 strings");
    for (const auto& s : p.stop) {
      if (s.empty()) bad_value("stop", "must not contain empty strings");
    }
  }
}

// The request's routing level and its cap on the server's routing ladder.
void routing_fields(const json& body, const ApiModel& m, CompletionParams& p) {
  if (const json* v = field(body, "routing")) {
    if (!v->is_string() && !v->is_number_integer()) {
      bad_type("routing", "a string (\"exact\", \"default\", a policy spec) or an integer level");
    }
    if (v->is_string() && (*v == "exact" || *v == "topk")) {
      p.exact_routing = true;
    } else if (!v->is_string() || *v != "default") {
      const int level = routing_level(*v, "routing", m);
      if (level == 0) {
        p.exact_routing = true;
      } else {
        p.routing_level = level;
      }
    }
  }
  if (const json* v = field(body, "max_routing_level")) {
    if (!v->is_string() && !v->is_number_integer()) {
      bad_type("max_routing_level", "an integer level or a policy spec of the routing ladder");
    }
    const int level = routing_level(*v, "max_routing_level", m);
    if (level == 0) {
      p.exact_routing = true;  // a cap of exact: this request's tokens are routed exact
    } else {
      p.max_routing_level = level;
    }
  }
}

CompletionParams parse_checked(const std::string& text, bool chat, const ApiModel& m) {
  const json body = parse_body(text, m);
  CompletionParams p;
  p.chat = chat;
  if (const json* v = field(body, "model")) {
    if (!v->is_string()) bad_type("model", "a string");
    if (v->get<std::string>() != m.name) {
      throw ApiError(400,
                     "The model '" + v->get<std::string>() +
                         "' does not exist (this server serves '" + m.name + "')",
                     "model", "model_not_found");
    }
  }
  refuse_unsupported(body);
  if (chat) {
    output_fields(body, m, p);
  } else {
    for (const char* k : {"tools", "tool_choice", "reasoning_format", "chat_template_kwargs"}) {
      if (field(body, k)) bad_value(k, "is a chat field (/v1/chat/completions)");
    }
  }
  prompt_fields(body, text, m, p);
  sampling_and_stop(body, m, p);
  p.n = int(get_int(body, "n", 1, m.max_n, 1));
  p.stream = get_bool(body, "stream", false);
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) bad_type("stream_options", "an object");
    if (!p.stream) bad_value("stream_options", "is only allowed with stream: true");
    p.include_usage = get_bool(*v, "include_usage", false);
  }
  if (chat) {
    p.logprobs = get_bool(body, "logprobs", false);
    get_int(body, "top_logprobs", 0, 20, 0);  // validated; alternatives are not reported
  } else {
    p.logprobs = field(body, "logprobs") && get_int(body, "logprobs", 0, 5, 0) >= 0;
  }
  routing_fields(body, m, p);
  p.ignore_eos = get_bool(body, "ignore_eos", false);
  p.grammar = structured_output(body, text);
  if (chat) forced_tool_call(body, text, p);
  if (const json* v = field(body, "user"); v && !v->is_string()) bad_type("user", "a string");
  return p;
}
}  // namespace

CompletionParams parse_completion(const std::string& text, bool chat, const ApiModel& m) {
  try {
    return parse_checked(text, chat, m);
  } catch (const ApiError&) {
    throw;
  } catch (const json::exception&) {
    // Every field is type-checked above; this is the net under a check that was missed, so
    // the client still gets a 400 (and no library text) rather than a 500.
    throw ApiError(400, "The request has a value of the wrong type.", "", "invalid_type");
  }
}

json completion_body(const CompletionParams& p, const std::string& id, int64_t created,
                     const std::string& model, const std::vector<ChoiceResult>& choices,
                     int prompt_tokens) {
  json out = {{"id", id},
              {"object", p.chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model}};
  json arr = json::array();
  int completion = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    completion += c.completion_tokens;
    json ch = {{"index", i}, {"finish_reason", c.finish_reason}};
    json lp = nullptr;
    if (p.logprobs) {
      lp = p.chat ? chat_logprobs(c.token_text, c.token_logprob)
                  : completion_logprobs(c.token_text, c.token_logprob, 0);
    }
    ch["logprobs"] = lp;
    if (p.chat) {
      json msg = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) msg["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        // OpenAI: content is null when the answer is only calls.
        if (c.text.empty()) msg["content"] = nullptr;
        json calls = json::array();
        for (const auto& t : c.tool_calls) {
          calls.push_back({{"id", t.id},
                           {"type", "function"},
                           {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        }
        msg["tool_calls"] = std::move(calls);
      }
      ch["message"] = std::move(msg);
      if (!c.tool_choice_unmet.empty()) ch["tool_choice_unmet"] = c.tool_choice_unmet;
    } else {
      ch["text"] = c.text;
    }
    arr.push_back(std::move(ch));
  }
  out["choices"] = std::move(arr);
  // The prompt is counted once; its cached part is the first choice's (the others may have
  // started from its rows or from the same entry).
  out["usage"] = {{"prompt_tokens", prompt_tokens},
                  {"completion_tokens", completion},
                  {"total_tokens", prompt_tokens + completion},
                  {"prompt_tokens_details",
                   {{"cached_tokens", choices.empty() ? 0 : choices[0].cached_tokens}}}};
  return out;
}

json routing_usage(const std::vector<ChoiceResult>& choices, const std::vector<std::string>& specs,
                   const StepExperts& experts) {
  std::vector<int64_t> tokens(specs.size(), 0);
  for (const ChoiceResult& c : choices) {
    for (size_t l = 0; l < c.level_tokens.size() && l < tokens.size(); ++l) {
      tokens[l] += c.level_tokens[l];
    }
  }
  json levels = json::array();
  for (size_t l = 0; l < specs.size(); ++l) {
    if (tokens[l] > 0) {
      levels.push_back({{"level", l}, {"spec", specs[l]}, {"decode_tokens", tokens[l]}});
    }
  }
  // null where nothing was measured: no decode step (max_tokens 1) or no MoE layer.
  auto mean = [&](int64_t sum) {
    return experts.layer_steps > 0 ? json(double(sum) / double(experts.layer_steps)) : json();
  };
  return {{"levels", std::move(levels)},
          {"decode_steps", experts.steps},
          {"distinct_experts_per_step", mean(experts.distinct)},
          {"distinct_experts_exact_per_step", mean(experts.distinct_exact)}};
}

std::vector<json> event_chunks(const CompletionParams& p, const std::string& id, int64_t created,
                               const std::string& model, const Event& ev) {
  auto wrap = [&](json ch) {
    return json{{"id", id},
                {"object", p.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array({std::move(ch)})}};
  };
  std::vector<json> out;
  json ch = {{"index", ev.choice}};
  json lp = nullptr;
  if (p.logprobs && !ev.token_text.empty()) {
    lp = p.chat ? chat_logprobs(ev.token_text, ev.token_logprob)
                : completion_logprobs(ev.token_text, ev.token_logprob, 0);
  }
  ch["logprobs"] = lp;
  if (!p.chat) {
    ch["text"] = ev.text;
    ch["finish_reason"] = ev.finish_reason.empty() ? json(nullptr) : json(ev.finish_reason);
    out.push_back(wrap(std::move(ch)));
    return out;
  }
  // As before tools: the text delta carries the finish reason, with an empty delta when the
  // last event has no text.
  json delta = json::object();
  if (!ev.text.empty() ||
      (ev.finish_reason.empty() && ev.reasoning.empty() && ev.tool_calls.empty())) {
    delta["content"] = ev.text;
  }
  if (!ev.reasoning.empty()) delta["reasoning_content"] = ev.reasoning;
  if (!delta.empty() || !lp.is_null() || ev.tool_calls.empty()) {
    ch["delta"] = std::move(delta);
    ch["finish_reason"] = nullptr;
    out.push_back(wrap(std::move(ch)));
  }
  for (const auto& t : ev.tool_calls) {
    json call = {{"index", t.index}};
    if (!t.id.empty()) {
      call["id"] = t.id;
      call["type"] = "function";
      call["function"] = {{"name", t.name}, {"arguments", ""}};
    } else {
      call["function"] = {{"arguments", t.arguments}};
    }
    out.push_back(wrap({{"index", ev.choice},
                        {"delta", {{"tool_calls", json::array({std::move(call)})}}},
                        {"logprobs", nullptr},
                        {"finish_reason", nullptr}}));
  }
  if (!ev.finish_reason.empty()) {
    if (!ev.tool_calls.empty()) {
      out.push_back(wrap({{"index", ev.choice},
                          {"delta", json::object()},
                          {"logprobs", nullptr},
                          {"finish_reason", nullptr}}));
    }
    json& fin = out.back()["choices"][0];
    fin["finish_reason"] = ev.finish_reason;
    if (!ev.tool_choice_unmet.empty()) fin["tool_choice_unmet"] = ev.tool_choice_unmet;
  }
  return out;
}

std::string tool_choice_unmet(const CompletionParams& p,
                              const std::vector<chatparse::ToolCall>& calls) {
  if (p.tool_choice == ToolChoice::kRequired && calls.empty()) {
    return "tool_choice is \"required\" but the model answered without a tool call";
  }
  if (p.tool_choice == ToolChoice::kFunction) {
    for (const auto& c : calls) {
      if (c.name == p.tool_choice_name) return "";
    }
    return "tool_choice names \"" + p.tool_choice_name +
           "\" but the model answered without calling it";
  }
  return "";
}

json chat_role_chunk(const std::string& id, int64_t created, const std::string& model, int index) {
  json ch = {{"index", index},
             {"delta", {{"role", "assistant"}, {"content", ""}}},
             {"logprobs", nullptr},
             {"finish_reason", nullptr}};
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices", json::array({ch})}};
}

json usage_chunk(const CompletionParams& p, const std::string& id, int64_t created,
                 const std::string& model, int prompt_tokens, int completion_tokens,
                 int cached_tokens) {
  return {{"id", id},
          {"object", p.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}}}};
}

// ---------------------------------------------------------------------------------------

StopTextStream::StopTextStream(const Tokenizer& tok, std::vector<std::string> stops)
    : dec_(tok), stops_(std::move(stops)) {}

std::string StopTextStream::release() {
  // Earliest stop string starting at or after emitted_: text before emitted_ has been shown,
  // so it was checked not to start a stop string.
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = text_.find(s, emitted_);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = text_.substr(emitted_, cut - emitted_);
    emitted_ = text_.size();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, text_.size() - emitted_);
    for (size_t len = max_len; len > hold; --len) {
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  // Never split a UTF-8 character when holding back bytes (a stop string may begin inside
  // one only if it is itself not valid UTF-8 at its start, which we do not split for).
  size_t end = text_.size() - hold;
  while (end > emitted_ && end < text_.size() && (uint8_t(text_[end]) & 0xC0) == 0x80) --end;
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

std::string StopTextStream::push(int32_t token) {
  if (stopped_) return "";
  text_ += dec_.push(token);
  return release();
}

std::string StopTextStream::finish() {
  if (stopped_) return "";
  text_ += dec_.flush();
  std::string out = release();
  if (stopped_) return out;
  out += text_.substr(emitted_);
  emitted_ = text_.size();
  return out;
}

}  // namespace lynx::server
