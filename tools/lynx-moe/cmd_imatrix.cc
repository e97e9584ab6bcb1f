// `lynx-moe imatrix -m MODEL --data DIR|FILE -o imatrix.gguf`: runs the model over text in
// chunks and writes its importance matrix (lynx/imatrix.h) for `quantize --imatrix`, in
// llama.cpp's GGUF format (or the legacy format for an output name ending in .dat).
#include <sys/stat.h>

#include <cstdio>

#include "commands.h"
#include "common.h"
#include "lynx/eval.h"
#include "lynx/imatrix.h"
#include "lynx/tokenizer.h"

namespace lynx::cli {

void register_imatrix(CLI::App& app) {
  struct Args {
    std::string model, data, out = "imatrix.gguf", format;
    ImatrixOptions opts;
    bool quiet = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "imatrix",
      "Compute an importance matrix over text for quantize --imatrix (llama.cpp format)");
  cmd->add_option("-m,--model", a->model, "GGUF model (F32/F16/BF16 preferably)")->required();
  cmd->add_option("--data", a->data,
                  "Text file, or directory of documents (every regular file, by name, joined)")
      ->required();
  cmd->add_option("-o,--output", a->out, "Output file (GGUF; legacy .dat format by extension)");
  cmd->add_option("--output-format", a->format, "gguf or dat (default: by the output's extension)")
      ->check(CLI::IsMember({"gguf", "dat"}));
  cmd->add_option("--chunks", a->opts.max_chunks, "Chunks to evaluate (0: all whole chunks)")
      ->check(int_in(0, 1 << 20));
  cmd->add_option("-c,--ctx", a->opts.n_ctx, "Tokens per chunk")->check(int_in(16, 1 << 16));
  cmd->add_option("-t,--threads", a->opts.n_threads, "Threads (0 = all cores)")
      ->check(int_in(0, kMaxThreads));
  cmd->add_flag("--process-output", a->opts.process_output,
                "Also collect output.weight (llama-imatrix's flag of the same name)");
  cmd->add_flag("-q,--quiet", a->quiet, "No per-chunk progress");
  cmd->callback([a] {
    struct stat st {};
    std::string text;
    if (::stat(a->data.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      for (const EvalDocument& d : read_eval_documents(a->data)) text += d.text + "\n\n";
    } else {
      text = read_text_file(a->data, "--data");
    }
    const bool dat = a->format.empty()
                         ? a->out.size() >= 4 && a->out.compare(a->out.size() - 4, 4, ".dat") == 0
                         : a->format == "dat";
    auto model = load_model(a->model, false, false);
    auto tok = Tokenizer::from_gguf(model->file());
    // As llama-imatrix and llama-perplexity: the text tokenized with BOS (when the vocabulary
    // adds one), and each chunk's first token replaced by BOS, so the chunks, and the
    // perplexity printed per chunk, are those tools' on the same file.
    const std::vector<int32_t> tokens = tok->encode(text, true, false);
    ImatrixOptions o = a->opts;
    o.dataset = a->data;
    if (!a->quiet) {
      o.progress = [](int done, int total, double ppl) {
        std::fprintf(stderr, "chunk %d/%d: ppl %.4f\n", done, total, ppl);
      };
    }
    const double t0 = now_seconds();
    const Imatrix im = compute_imatrix(*model, tokens, tok->add_bos() ? tok->bos() : -1, o);
    if (dat) {
      write_imatrix_dat(im, a->out);
    } else {
      write_imatrix_gguf(im, a->out);
    }
    std::fprintf(stderr, "wrote %s (%s): %zu entries, %u chunks of %u tokens, %.1f s\n",
                 a->out.c_str(), dat ? "legacy dat" : "gguf", im.entries.size(), im.chunk_count,
                 im.chunk_size, now_seconds() - t0);
  });
}

}  // namespace lynx::cli
