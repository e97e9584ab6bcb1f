// Internal: a call block read as it grows, so that a stream can send each call's name as soon
// as it is known and its arguments in pieces as the model writes them (what OpenAI clients,
// vLLM and llama-server do). One reader per block (or per harmony call message).
//
// A call is opened once its name is known and valid and its arguments have begun as a JSON
// object (or, in the XML formats, once the function is named); from then on it is a call,
// whatever follows. Its arguments are the compact copy of what the model wrote (JsonStream),
// or in the XML formats one `"key":value` per completed parameter, values typed as
// parse_qwen3_coder / parse_glm45 type them. A layout the reader cannot follow in order (the
// arguments before the name, arguments written as a quoted string) stops it: the block's
// remaining calls come from the format's whole-block parser when the block closes.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chatparse/chat_output.h"
#include "chatparse/formats.h"
#include "chatparse/json_stream.h"

namespace lynx::chatparse::detail {

struct OpenCall {
  std::string id;  // the model's own id (Kimi-K2, Mistral), else ""
  std::string name;
  std::string arguments;  // so far
  bool ended = false;
  // Not to be sent yet: its id may still follow. Mistral's JSON calls (tokenizers v3 to v7:
  // Mistral-7B-v0.3, Nemo, Small-3.1, Large-2407) write "id" after "arguments", and a stream
  // names a call's id in its first delta; so such a call is sent when its object closes.
  bool held = false;
};

class CallStream {
 public:
  // `harmony_name`: a harmony call message, whose body is the arguments of that function.
  CallStream(ToolFormat f, const ParseOptions& o, std::string harmony_name = "");

  // The block's body so far; it only grows. `closed`: this is all of it.
  void advance(std::string_view body, bool closed);
  // Ends an open call whose arguments were cut: closes their JSON (JsonStream::closing).
  void close_open_call();
  // The block ended: a call still held for its id is sent as it stands.
  void release_held() {
    for (OpenCall& c : calls_) c.held = false;
  }

  const std::vector<OpenCall>& calls() const { return calls_; }
  // Every opened call ended and the body held nothing else.
  bool clean() const { return !stopped_ && done_; }
  bool stopped() const { return stopped_; }
  const std::string& why() const { return why_; }

 private:
  enum class Seen { kNo, kPartial, kYes };
  // Whether body[pos_..] starts with `m` (kPartial: it may, once more text comes).
  Seen at(std::string_view m) const;
  void skip_space();
  // body_.find(m, from), resuming where the last search of the same `m` from the same `from`
  // stopped: a piece the model never finishes costs linear time, not a rescan per push.
  size_t find(std::string_view m, size_t from);
  // Stops the reader: `malformed` text, or a layout it cannot stream (`why`).
  void stop(std::string why);
  bool open(std::string id, std::string name);
  // Feeds the arguments' JSON from pos_; true once the value ended.
  bool feed_arguments();
  // Feeds a whole JSON value (not streamed) from pos_; true once it ended.
  bool feed_value(JsonStream& js);
  // Between two calls of a block of `begin`-marked calls (`block` names it in errors): true
  // once `begin` is consumed; at the body's end the block is done, or malformed without a call.
  bool next_call(std::string_view begin, const char* block);
  // The call's arguments object: opens call (id, name_) at its '{'; true once the object ended.
  bool object_arguments(const std::string& id);
  // Skips space and `end` after a call's arguments: true once `end` is consumed.
  bool call_end(std::string_view end);

  void step_object_calls();  // hermes, llama3, mistral's array
  bool step_call_object();   // one {"name":..,"arguments":{..}} object
  void step_mistral_v11();
  void step_deepseek();
  void step_kimi();
  void step_harmony();
  void step_qwen3_coder();
  void step_glm45();
  void step_minimax_m2();

  ToolFormat f_;
  const ParseOptions& o_;
  std::string harmony_name_;
  std::string_view body_;
  bool closed_ = false;
  size_t pos_ = 0;
  int phase_ = 0;  // the format's own step (call_stream.cc)
  bool stopped_ = false, done_ = false;
  std::string why_;
  std::vector<OpenCall> calls_;
  const char* find_m_ = nullptr;
  size_t find_from_ = 0, find_at_ = 0;
  JsonStream js_;  // the arguments (or another value) being read
  // The call object being read (hermes, llama3, mistral's array).
  std::string key_, name_, id_;
  int ophase_ = 0;  // where in the call object (call_stream.cc)
  bool have_args_ = false;
  JsonStream value_;  // a key or a value other than the arguments
};

}  // namespace lynx::chatparse::detail
