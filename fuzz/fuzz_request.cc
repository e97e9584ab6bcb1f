// libFuzzer target for the request parser of the server (src/server/api.cc): any body must
// either give parameters the engine can run or throw ApiError with a 4xx status. Any other
// exception would reach the client as a 500 with a library's text; a crash, hang or huge
// allocation is a server that one request takes down.
//
// Input: the first byte picks the endpoint (even: /v1/completions, odd: chat), the rest is
// the body. The served model is a small synthetic one with a byte-level tokenizer, written
// once to the temp directory.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "lynx/chat.h"
#include "lynx/error.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "lynx/tokenizer.h"
#include "server/api.h"

namespace {

struct Served {
  std::unique_ptr<lynx::Model> model;
  std::unique_ptr<lynx::Tokenizer> tok;
  lynx::server::ApiModel api, api_routing;
  Served() {
    lynx::SynthOptions o;
    o.shape = lynx::synth_shape("tiny-moe");
    o.shape.n_layer = 1;
    o.shape.n_vocab = 300;
    o.type = lynx::gguf::TensorType::F32;
    const auto path = std::filesystem::temp_directory_path() /
                      ("lynx-fuzz-request-" + std::to_string(::getpid()) + ".gguf");
    lynx::write_synth_model(o, path.string());
    model = lynx::Model::load(path.string());
    tok = lynx::Tokenizer::from_gguf(model->file());
    std::filesystem::remove(path);
    api.tok = tok.get();
    api.chat = lynx::chat_format_from_name("chatml");
    api.name = "tiny";
    api.n_ctx = 256;
    api.max_n = 4;
    api_routing = api;  // the same, with requests allowed to name routing levels
    api_routing.routing_levels = {"topk", "lynx", "cover:lambda=0.1"};
    api_routing.max_routing_level = 1;
    api_routing.allow_request_routing = true;
  }
};

const Served& served() {
  static const Served s;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Served& s = served();
  const bool chat = data[0] & 1;
  const lynx::server::ApiModel& api = (data[0] & 2) ? s.api_routing : s.api;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const lynx::server::CompletionParams p = lynx::server::parse_completion(body, chat, api);
    // What the engine relies on.
    if (p.prompt.empty() || p.max_tokens < 1 ||
        int64_t(p.prompt.size()) + p.max_tokens > api.n_ctx || p.n < 1 || p.n > api.max_n ||
        !(p.sampling.temperature >= 0) || !(p.sampling.top_p > 0 && p.sampling.top_p <= 1) ||
        p.sampling.top_k < 0 || p.stop.size() > 16 || p.routing_level > api.max_routing_level ||
        p.max_routing_level > api.max_routing_level) {
      __builtin_trap();
    }
    for (int32_t id : p.prompt) {
      if (id < 0 || id >= s.tok->n_vocab()) __builtin_trap();
    }
    // Sampling parameters the scheduler accepts (it throws lynx::Error on the rest).
    try {
      lynx::check_sampling_params(p.sampling, s.tok->n_vocab());
    } catch (const lynx::Error&) {
      __builtin_trap();
    }
  } catch (const lynx::server::ApiError& e) {
    if (e.status < 400 || e.status > 499) __builtin_trap();
    (void)e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
