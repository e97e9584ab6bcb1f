// `lynx-moe quantize IN.gguf OUT.gguf MIX`: writes IN with the weight types of a quantization
// mix (Q4_K_M, Q8_0, IQ4_XS, ...), as llama-quantize chooses them per tensor.
#include <chrono>
#include <cstdio>
#include <map>

#include "commands.h"
#include "common.h"
#include "lynx/quantize.h"

namespace lynx::cli {

void register_quantize(CLI::App& app) {
  struct Args {
    std::string in, out, mix, imatrix;
    int threads = 1;
    bool quiet = false;
  };
  auto args = std::make_shared<Args>();
  std::string mixes;
  for (const auto& m : quant_mix_names()) mixes += (mixes.empty() ? "" : ", ") + m;
  auto* cmd = app.add_subcommand("quantize", "Quantize a GGUF model to a mix of ggml block types");
  cmd->add_option("input", args->in, "Input GGUF (F32/F16/BF16; quantized inputs are requantized)")
      ->required();
  cmd->add_option("output", args->out, "Output GGUF")->required();
  cmd->add_option("mix", args->mix, "Mix: " + mixes + " (see docs/models.md)")->required();
  cmd->add_option("--imatrix", args->imatrix,
                  "Importance matrix (lynx-moe imatrix or llama-imatrix; GGUF or legacy .dat) "
                  "weighting the error of the K-quants, IQ4_NL/IQ4_XS and Q4_0..Q5_1");
  cmd->add_option("-t,--threads", args->threads, "Threads quantizing the rows of a tensor")
      ->check(int_in(1, kMaxThreads));
  cmd->add_flag("-q,--quiet", args->quiet, "No per-tensor progress lines");
  cmd->callback([args] {
    const auto t0 = std::chrono::steady_clock::now();
    QuantizeOptions o;
    o.mix = args->mix;
    o.n_threads = args->threads;
    Imatrix im;
    if (!args->imatrix.empty()) {
      im = read_imatrix(args->imatrix);
      o.imatrix = &im;
      std::fprintf(stderr, "imatrix %s: %zu entries, %u chunks\n", args->imatrix.c_str(),
                   im.entries.size(), im.chunk_count);
    }
    o.warn = [](const std::string& w) { std::fprintf(stderr, "warning: %s\n", w.c_str()); };
    if (!args->quiet) {
      o.progress = [](size_t i, size_t n, const gguf::TensorInfo& t, gguf::TensorType to) {
        std::fprintf(stderr, "[%4zu/%4zu] %-36s %-20s %6s -> %s\n", i + 1, n, t.name.c_str(),
                     t.shape_string().c_str(), gguf::tensor_type_name(t.type),
                     gguf::tensor_type_name(to));
      };
    }
    const QuantizeResult r = quantize_model(args->in, args->out, o);
    std::map<std::string, int> count;
    for (const auto& [name, type] : r.types) ++count[gguf::tensor_type_name(type)];
    std::string summary;
    for (const auto& [type, c] : count) {
      summary += (summary.empty() ? "" : ", ") + std::to_string(c) + " " + type;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.imatrix)
      std::fprintf(stderr, "%d tensors quantized with importance weights\n", r.n_weighted);
    std::fprintf(stderr, "wrote %s: %s; tensor data %.1f MiB -> %.1f MiB (%.2fx) in %.1f s\n",
                 args->out.c_str(), summary.c_str(), double(r.bytes_in) / 1048576.0,
                 double(r.bytes_out) / 1048576.0,
                 r.bytes_out ? double(r.bytes_in) / double(r.bytes_out) : 0.0, s);
  });
}

}  // namespace lynx::cli
