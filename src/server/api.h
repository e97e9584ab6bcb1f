// The OpenAI request/response formats: parsing and validation of /v1/completions and
// /v1/chat/completions bodies into engine parameters, and the JSON the answers are made of.
// Everything a client can get wrong is reported as an ApiError (HTTP status + OpenAI-style
// error object), before anything reaches the engine.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "chatparse/chat_output.h"
#include "lynx/chat.h"
#include "lynx/chat_template.h"
#include "lynx/grammar.h"
#include "lynx/scheduler.h"
#include "lynx/tokenizer.h"

namespace lynx::server {

using json = nlohmann::json;

// An answer other than 200, in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "invalid_request_error");
  json body() const;
};

// What the request parser needs to know about the served model.
struct ApiModel {
  const Tokenizer* tok = nullptr;
  ChatFormat chat;
  // The model's own tokenizer.chat_template, parsed (null when the file has none, it does not
  // parse, or --chat-format names a built-in format). Chat prompts are rendered with it; when
  // rendering fails, `chat` renders instead and `log` says why.
  std::shared_ptr<const ChatTemplate> chat_template;
  std::function<void(const std::string&)> log;
  std::string name;  // served model id
  int n_ctx = 0;     // context limit per sequence
  int max_n = 8;
  int max_depth = 64;  // nesting of arrays/objects in a request body
  // The server's routing ladder (level i runs routing_levels[i]; 0 is exact top-k), the
  // highest level within its accuracy budget, and whether a request may name a level or cap
  // its own (serve --allow-request-routing). docs/serving.md, "Adaptive routing".
  std::vector<std::string> routing_levels = {"topk"};
  int max_routing_level = 0;
  bool allow_request_routing = false;
  // How the model writes tool calls and reasoning (from its chat template), and whether
  // reasoning is returned apart (serve --reasoning-format deepseek, the default) or left in the
  // text (none). docs/serving.md, "Tools and reasoning".
  chatparse::OutputFormat output_format;
  bool extract_reasoning = true;
};

// tool_choice: "auto" (the default with tools), "none", "required", or one named function.
enum class ToolChoice { kAuto, kNone, kRequired, kFunction };

struct CompletionParams {
  bool chat = false;
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings, matched on the detokenized text
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  bool exact_routing = false;  // extension "routing": "exact" (or level 0, or a cap of 0)
  int routing_level = -1;      // extension "routing": a level or spec (>= 1); -1: the server's
  int max_routing_level = -1;  // extension "max_routing_level" (>= 1); -1: no cap
  bool ignore_eos = false;     // extension (as vLLM): keep going past end-of-generation tokens
  // Chat: the answer is taken apart into content, reasoning and tool calls (parse_output);
  // `output` says how, with the request's tools. tool_choice "required" or a named function
  // is forced by `grammar` in the formats tool_grammar.h covers; in the others an answer
  // without that call is reported (ChoiceResult::tool_choice_unmet).
  bool parse_output = false;
  chatparse::ParseOptions output;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kFunction
  // Structured output (response_format json_object / json_schema, or "grammar"), or the
  // grammar of the call that tool_choice "required" / a named function forces: null when the
  // output is free text.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Texts the grammar may sample as single control tokens (the tool-call format's markers).
  std::vector<std::string> grammar_markers;
};

// Parses and validates a request body; throws ApiError (400) naming the offending field, and
// nothing else for any body (fuzz/fuzz_request.cc checks this).
CompletionParams parse_completion(const std::string& body, bool chat, const ApiModel& m);

// Largest nesting depth of arrays/objects in a JSON text (strings skipped), stopping early
// once it exceeds `limit`: checked before parsing, because a DOM parser spends about 60 bytes
// per level (a 15 MiB body of '[' would cost a gigabyte).
int json_depth(std::string_view text, int limit);

// One generated choice, as the engine reports it.
struct ChoiceResult {
  std::string text;
  std::vector<std::string> token_text;  // per token (when logprobs were asked)
  std::vector<float> token_logprob;
  std::string finish_reason;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens taken from the prefix cache (usage's cached_tokens)
  // Tokens produced by decode steps at each routing level (the first token of a choice comes
  // from its prompt, which is always routed exact, and is not counted).
  std::vector<int> level_tokens;
  // Chat with parse_output: `text` is the content, and these the rest of the answer.
  std::string reasoning;
  std::vector<chatparse::ToolCall> tool_calls;
  std::string tool_choice_unmet;  // why the answer does not satisfy tool_choice ("" = it does)
};

// Something the engine produced for one choice of a stream: a text delta (possibly empty), the
// reasoning and tool-call deltas of a parsed chat answer, the tokens it came from when
// logprobs were asked, and the finish reason on the choice's last event.
struct Event {
  int choice = 0;
  std::string text;
  std::string reasoning;
  std::vector<chatparse::ToolCallDelta> tool_calls;
  std::vector<std::string> token_text;
  std::vector<float> token_logprob;
  std::string finish_reason;
  std::string tool_choice_unmet;
};

// Whether the finished answer satisfies the request's tool_choice; "" or why not.
std::string tool_choice_unmet(const CompletionParams& p,
                              const std::vector<chatparse::ToolCall>& calls);

// What the engine measured on the decode steps of one request (each step once, however many
// of the request's choices it carried): the distinct experts those steps activated, summed
// over the steps and the model's MoE layers (the whole batch's experts, as the step streamed
// them), beside what exact top-k would have activated on the same tokens.
struct StepExperts {
  int64_t steps = 0;        // decode steps that made a token of the request
  int64_t layer_steps = 0;  // steps x MoE layers (0 for a dense model)
  int64_t distinct = 0;     // sum of distinct experts activated, per step and layer
  int64_t distinct_exact = 0;
};

// usage.routing of an answer: per routing level used, its spec and the decode tokens it made;
// the request's decode steps and their mean distinct experts per MoE layer (docs/serving.md,
// "Adaptive routing").
json routing_usage(const std::vector<ChoiceResult>& choices, const std::vector<std::string>& specs,
                   const StepExperts& experts);

// Non-streaming bodies.
json completion_body(const CompletionParams& p, const std::string& id, int64_t created,
                     const std::string& model, const std::vector<ChoiceResult>& choices,
                     int prompt_tokens);

// The streaming chunks of one event: its text / reasoning delta with its tokens' logprobs, one
// chunk per tool-call delta (OpenAI's delta.tool_calls[{index, id, type, function}]), and the
// finish reason (with the chunk of the last delta, or alone).
std::vector<json> event_chunks(const CompletionParams& p, const std::string& id, int64_t created,
                               const std::string& model, const Event& ev);
json chat_role_chunk(const std::string& id, int64_t created, const std::string& model, int index);
json usage_chunk(const CompletionParams& p, const std::string& id, int64_t created,
                 const std::string& model, int prompt_tokens, int completion_tokens,
                 int cached_tokens);

// Incremental detokenization with stop strings: feeds tokens, returns the text that can be
// shown now. Text that could be the beginning of a stop string is held back until it is
// known not to be one; when a stop string appears, the text is cut before it and stopped()
// becomes true (the stop string itself is never returned, as OpenAI does).
class StopTextStream {
 public:
  StopTextStream(const Tokenizer& tok, std::vector<std::string> stops);
  std::string push(int32_t token);
  // End of generation: the held-back text (and an incomplete UTF-8 tail, as U+FFFD).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::string release();  // what of text_[emitted_..] is safe to show
  StreamDecoder dec_;
  std::vector<std::string> stops_;
  std::string text_;  // everything decoded so far
  size_t emitted_ = 0;
  bool stopped_ = false;
};

}  // namespace lynx::server
