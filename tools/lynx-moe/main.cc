// lynx-moe: command-line front end of the engine.
#include <cstdio>
#include <exception>
#include <vector>

#include "commands.h"
#include "common.h"
#include "lynx/error.h"

int main(int argc, char** argv) {
  CLI::App app{"lynx-moe: batch-aware Mixture-of-Experts inference on CPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("lynx-moe 0.1.0 (") + LYNX_GIT_COMMIT + ")");
  // Registration order is the order --help lists the commands in.
  lynx::cli::register_inspect(app);
  lynx::cli::register_tokenize(app);
  lynx::cli::register_chat_template(app);
  lynx::cli::register_generate(app);
  lynx::cli::register_logits(app);
  lynx::cli::register_synth(app);
  lynx::cli::register_convert(app);
  lynx::cli::register_quantize(app);
  lynx::cli::register_imatrix(app);
  lynx::cli::register_bench(app);
  lynx::cli::register_route_sim(app);
  lynx::cli::register_place(app);
  lynx::cli::register_serve(app);
  lynx::cli::register_loadgen(app);
  lynx::cli::register_eval(app);
  lynx::cli::register_calibrate(app);
  lynx::cli::harden_options(app);
  try {
    std::vector<char*> args = lynx::cli::long_cache_type_flags(argc, argv);
    app.parse(argc, args.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every malformed command line exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const lynx::cli::UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const lynx::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
