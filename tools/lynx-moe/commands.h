// Each command of the `lynx-moe` tool lives in its own cmd_<name>.cc and registers a CLI11
// subcommand here. Commands are thin: they parse flags and call the library.
#pragma once
#include <CLI/CLI.hpp>

namespace lynx::cli {

void register_inspect(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_chat_template(CLI::App& app);
void register_generate(CLI::App& app);
void register_logits(CLI::App& app);
void register_synth(CLI::App& app);
void register_quantize(CLI::App& app);
void register_convert(CLI::App& app);
void register_imatrix(CLI::App& app);
void register_bench(CLI::App& app);
void register_route_sim(CLI::App& app);
void register_place(CLI::App& app);
void register_serve(CLI::App& app);
void register_loadgen(CLI::App& app);
void register_eval(CLI::App& app);
void register_calibrate(CLI::App& app);

}  // namespace lynx::cli
