// `lynx-moe synth`: writes a random-weight model at a real model's shape.
#include <cstdio>
#include <fstream>
#include <iterator>

#include "commands.h"
#include "common.h"
#include "lynx/synth.h"

namespace lynx::cli {

void register_synth(CLI::App& app) {
  struct Args {
    std::string shape, type = "f16", expert_type, out, chat_template;
    int layers = 0, experts = 0, vocab = 0, nextn = -1;
    bool fused_gate_up = false;
    uint64_t seed = 1;
    float router_std = 1.5f;
  };
  auto args = std::make_shared<Args>();
  std::string shapes;
  for (const auto& n : synth_shape_names()) shapes += (shapes.empty() ? "" : ", ") + n;
  auto* cmd = app.add_subcommand("synth", "Write a random-weight GGUF model at a real shape");
  cmd->add_option("--shape", args->shape, "Shape: " + shapes)->required();
  cmd->add_option("--layers", args->layers, "Number of layers (default: the shape's)")
      ->check(int_in(0, 4096));
  cmd->add_option("--experts", args->experts, "Override the expert count")->check(int_in(0, 4096));
  cmd->add_option("--vocab", args->vocab, "Override the vocabulary size")
      ->check(int_in(0, 1 << 24));
  cmd->add_option("--nextn", args->nextn,
                  "Next-token-prediction blocks after the layers (glm4moe; default: the shape's)")
      ->check(int_in(0, 16));
  cmd->add_option("--type", args->type, "Weight type: f32, f16, bf16, q8_0, q4_0");
  cmd->add_option("--expert-type", args->expert_type,
                  "Routed experts' weight type (default: mxfp4 for the gpt-oss shapes, as the "
                  "released files; else --type)");
  cmd->add_flag("--fused-gate-up", args->fused_gate_up,
                "Write the routed experts' gate and up as one ffn_gate_up_exps tensor, as "
                "llama.cpp's gemma4 converter does (gemma4 shapes)");
  cmd->add_option("--seed", args->seed, "Random seed");
  cmd->add_option("--router-std", args->router_std, "Std of router logits")
      ->check(number_in(0, 1e6));
  cmd->add_option("--chat-template", args->chat_template,
                  "Jinja file stored as tokenizer.chat_template (the server reads its chat and "
                  "tool-call format off it)")
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", args->out, "Output file")->required();
  cmd->callback([args] {
    SynthOptions o;
    try {
      o.shape = synth_shape(args->shape);
      o.type = gguf::tensor_type_from_name(args->type);
      if (!args->expert_type.empty()) {
        o.expert_type = gguf::tensor_type_from_name(args->expert_type);
      }
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    if (args->layers > 0) o.shape.n_layer = args->layers;
    if (args->experts > 0) o.shape.n_expert = args->experts;
    if (args->vocab > 0) o.shape.n_vocab = args->vocab;
    if (args->nextn >= 0) o.shape.n_nextn = args->nextn;
    o.seed = args->seed;
    o.fused_gate_up = args->fused_gate_up;
    o.router_std = args->router_std;
    if (!args->chat_template.empty()) {
      std::ifstream in(args->chat_template, std::ios::binary);
      o.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) throw Error("cannot read " + args->chat_template);
      if (o.chat_template.empty()) throw UsageError(args->chat_template + " is empty");
    }
    int last = -1;
    o.progress = [&](size_t done, size_t total) {
      const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
      if (pct != last) std::fprintf(stderr, "\rwriting %s: %3d%%", args->out.c_str(), pct);
      last = pct;
    };
    write_synth_model(o, args->out);
    std::fprintf(stderr, "\nwrote %s (%s, %d layers, %d experts, %s)\n", args->out.c_str(),
                 o.shape.name.c_str(), o.shape.n_layer, o.shape.n_expert, args->type.c_str());
  });
}

}  // namespace lynx::cli
