// `lynx-moe tokenize -m FILE -p TEXT [--ids-only] [--no-bos] [--special]`: the token ids and
// pieces of a text, like llama-tokenize. `--bench` instead measures encoding throughput on
// 1 MB of generated mixed text (or on --file) on the calling thread.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "common.h"
#include "lynx/gguf.h"
#include "lynx/tokenizer.h"
#include "tokenizer/report.h"

namespace lynx::cli {
namespace {

struct TokenizeArgs {
  std::string model, prompt, file;
  bool ids_only = false, no_bos = false, special = false, bench = false;
  int reps = 5;
};

void run_tokenize(const TokenizeArgs& a) {
  const gguf::File f = gguf::File::open(a.model);
  const auto tok = Tokenizer::from_gguf(f);
  std::string text = a.prompt;
  if (!a.file.empty()) text = read_text_file(a.file, "--file");
  if (a.bench) {
    if (text.empty()) text = tok::mixed_text(1000000);
    const auto r = tok::bench_encode(*tok, text, a.reps);
    std::printf("tokenizer %s (pre %s): %zu bytes -> %zu tokens, best of %d: %.3f ms, %.2f MB/s\n",
                tok->model().c_str(), tok->pre().empty() ? "-" : tok->pre().c_str(), text.size(),
                r.n_tokens, a.reps, r.seconds * 1e3, r.mb_per_s);
    return;
  }
  const auto ids = tok->encode(text, !a.no_bos, a.special);
  const std::string out = tok::describe_tokens(*tok, ids, a.ids_only);
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Print the tokens of a text (like llama-tokenize)");
  cmd->add_option("-m,--model", args->model, "GGUF file (only the vocabulary is read)")->required();
  cmd->add_option("-p,--prompt", args->prompt, "Text to tokenize");
  cmd->add_option("-f,--file", args->file, "Read the text from a file instead");
  cmd->add_flag("--ids-only", args->ids_only, "Print only the ids, as [1, 2, 3]");
  cmd->add_flag("--no-bos", args->no_bos, "Do not add BOS/EOS even if the model asks for it");
  cmd->add_flag("--special", args->special, "Parse control tokens written in the text");
  cmd->add_flag("--bench", args->bench,
                "Measure encoding speed (1 MB of mixed text unless -p/-f is given)");
  cmd->add_option("--reps", args->reps, "Benchmark repetitions (best is reported)")
      ->check(int_in(1, 1 << 16));
  cmd->callback([args] { run_tokenize(*args); });
}

}  // namespace lynx::cli
