// `lynx-moe convert HF_DIR -o OUT.gguf [--type T]`: a Hugging Face checkpoint (config.json,
// safetensors, tokenizer) to a GGUF that lynx-moe and llama.cpp load (docs/models.md).
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "common.h"
#include "lynx/convert.h"
#include "lynx/quantize.h"

namespace lynx::cli {

void register_convert(CLI::App& app) {
  struct Args {
    std::string dir, out, type = "auto", pre, name;
    int threads = 1;
    bool quiet = false, mla_split = false;
  };
  auto args = std::make_shared<Args>();
  std::string types, mts;
  for (const auto& m : quant_mix_names()) types += ", " + m;
  for (const auto& m : convert_model_types()) mts += (mts.empty() ? "" : ", ") + m;
  auto* cmd = app.add_subcommand(
      "convert",
      "Convert a Hugging Face checkpoint (safetensors) to GGUF (model_type: " + mts + ")");
  cmd->add_option("hf_dir", args->dir, "Directory with config.json, *.safetensors, tokenizer.json")
      ->required();
  cmd->add_option("-o,--output", args->out, "Output GGUF")->required();
  cmd->add_option(
      "--type", args->type,
      "Weight type: auto (the checkpoint's precision)" + types + " (see docs/models.md)");
  cmd->add_option("--tokenizer-pre", args->pre,
                  "tokenizer.ggml.pre to write instead of the family's default");
  cmd->add_option("--name", args->name, "general.name (default: the directory's name)");
  cmd->add_flag("--mla-split", args->mla_split,
                "DeepSeek: write attn_k_b / attn_v_b (newer llama.cpp) instead of attn_kv_b");
  cmd->add_option("-t,--threads", args->threads, "Threads converting the rows of a tensor")
      ->check(int_in(1, kMaxThreads));
  cmd->add_flag("-q,--quiet", args->quiet, "No per-tensor progress lines");
  cmd->callback([args] {
    const auto t0 = std::chrono::steady_clock::now();
    ConvertOptions o;
    o.type = args->type;
    o.n_threads = args->threads;
    o.tokenizer_pre = args->pre;
    o.name = args->name;
    o.mla_split = args->mla_split;
    o.warn = [](const std::string& w) { std::fprintf(stderr, "warning: %s\n", w.c_str()); };
    if (!args->quiet) {
      o.progress = [](size_t i, size_t n, const gguf::TensorInfo& t) {
        std::fprintf(stderr, "[%4zu/%4zu] %-36s %-20s %s\n", i + 1, n, t.name.c_str(),
                     t.shape_string().c_str(), gguf::tensor_type_name(t.type));
      };
    }
    const ConvertResult r = convert_hf(args->dir, args->out, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr,
                 "wrote %s: %s (model_type %s), %zu tensors, %s; tensor data %.1f MiB -> %.1f MiB "
                 "in %.1f s\n",
                 args->out.c_str(), r.arch.c_str(), r.model_type.c_str(), r.n_tensors,
                 r.type.c_str(), double(r.bytes_in) / 1048576.0, double(r.bytes_out) / 1048576.0,
                 s);
  });
}

}  // namespace lynx::cli
