// `lynx-moe inspect -m FILE [--json] [--tensors] [--metadata]`: what a GGUF file holds —
// architecture, hyper-parameters, MoE layout, bytes per weight type, routed-expert bytes
// versus the rest, and optionally every tensor and metadata key. The work is done by
// lynx::gguf::summarize (src/gguf/inspect.h); this file only parses flags and prints.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "gguf/inspect.h"
#include "lynx/gguf.h"

namespace lynx::cli {
namespace {

struct InspectArgs {
  std::string model;
  bool json = false;
  gguf::InspectOptions opt;
};

void run_inspect(const InspectArgs& a) {
  const gguf::File f = gguf::File::open(a.model);
  const gguf::ModelSummary s = gguf::summarize(f);
  if (a.json) {
    // Metadata strings are arbitrary bytes: replace invalid UTF-8 rather than fail.
    const std::string text =
        gguf::summary_json(f, s, a.opt)
            .dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    std::printf("%s\n", text.c_str());
  } else {
    const std::string text = gguf::format_summary(f, s, a.opt);
    std::fputs(text.c_str(), stdout);
  }
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "Summarize a GGUF model file");
  cmd->add_option("-m,--model", args->model, "GGUF file")->required();
  cmd->add_flag("--json", args->json, "Print JSON (includes the tensor list)");
  cmd->add_flag("--tensors", args->opt.tensors, "List every tensor: name, type, shape, bytes");
  cmd->add_flag("--metadata", args->opt.metadata, "List every metadata key and value");
  cmd->callback([args] { run_inspect(*args); });
}

}  // namespace lynx::cli
