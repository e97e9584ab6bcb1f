// `lynx-moe logits`: runs token ids as one sequence and writes the last position's logits as
// raw little-endian f32, for comparisons with other engines.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "ep.h"
#include "lynx/context.h"

namespace lynx::cli {

void register_logits(CLI::App& app) {
  struct Args {
    std::string model, tokens, out, routing = "topk";
    int threads = 0;
    bool all = false, exact_acts = false, bf16_acts = false;
    std::string bf16_kernel;
    CacheTypeFlags cache_types;
    EpFlags ep;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("logits", "Run token ids and write the last position's logits");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required();
  cmd->add_option("--tokens", args->tokens, "Token ids, separated by spaces or commas")->required();
  cmd->add_option("--out", args->out, "Write raw little-endian f32 logits here");
  cmd->add_option("-t,--threads", args->threads, "Threads (default: all cores)")
      ->check(int_in(0, kMaxThreads));
  cmd->add_option("--routing", args->routing, "Routing policy spec");
  cmd->add_flag("--all", args->all, "Write the logits of every position, not only the last");
  add_exact_acts_flag(cmd, &args->exact_acts);
  add_bf16_acts_flag(cmd, &args->bf16_acts, &args->bf16_kernel);
  add_cache_type_flags(cmd, &args->cache_types);
  add_ep_flags(cmd, &args->ep);
  cmd->callback([args] {
    ExpertParallel::run(args->ep, [&](ExpertParallel& ep) {
      std::vector<int32_t> ids;
      std::string s = args->tokens;
      for (char& c : s) {
        if (c == ',') c = ' ';
      }
      std::istringstream in(s);
      std::string item;
      while (in >> item) {
        try {
          size_t used = 0;
          const long v = std::stol(item, &used);
          if (v < INT32_MIN || v > INT32_MAX) throw std::out_of_range(item);
          ids.push_back(int32_t(v));
          if (used != item.size()) throw std::invalid_argument(item);
        } catch (const std::exception&) {
          throw UsageError("--tokens: '" + item + "' is not a token id");
        }
      }
      if (ids.empty()) throw UsageError("--tokens: no token ids given");
      const auto specs = routing_specs(args->routing, "--routing");
      if (specs.size() != 1) throw UsageError("--routing: give one policy");
      auto model = ep.load_model(args->model, !args->exact_acts);
      check_specs_fit(specs, *model, "--routing");
      for (int32_t id : ids) {
        if (id < 0 || id >= model->config().n_vocab) {
          throw UsageError("--tokens: token id " + std::to_string(id) + " is out of range [0, " +
                           std::to_string(model->config().n_vocab) + ")");
        }
      }
      ContextOptions co;
      co.n_threads = args->threads;
      co.n_ctx = int(ids.size());
      co.routing = args->routing;
      co.exact_activations = args->exact_acts;
      co.bf16_activations = args->bf16_acts;
      co.bf16_kernel = args->bf16_kernel;
      args->cache_types.apply(co);
      ep.configure(co);
      Context ctx(*model, co);
      const int32_t seq = ctx.new_sequence();
      std::vector<BatchToken> batch;
      for (size_t i = 0; i < ids.size(); ++i) {
        BatchToken t;
        t.token = ids[i];
        t.seq = seq;
        t.pos = int32_t(i);
        t.flags = kTokenPrefill;
        t.logits = args->all || i + 1 == ids.size();
        batch.push_back(t);
      }
      ctx.eval(batch);
      const int V = model->config().n_vocab;
      if (!args->out.empty() && ep.rank() == 0) {
        std::ofstream f(args->out, std::ios::binary);
        for (int i = 0; i < ctx.n_logits(); ++i) {
          f.write(reinterpret_cast<const char*>(ctx.logits(i).data()), std::streamsize(V) * 4);
        }
        f.close();  // flushes: a full disk shows here, not in the destructor
        if (!f) throw Error("cannot write " + args->out);
      }
      auto last = ctx.logits(ctx.n_logits() - 1);
      int best = 0;
      for (int i = 1; i < V; ++i) {
        if (last[size_t(i)] > last[size_t(best)]) best = i;
      }
      std::printf("n_tokens=%zu n_vocab=%d argmax=%d logit=%.6f", ids.size(), V, best,
                  double(last[size_t(best)]));
      std::printf(" first=[");
      for (int i = 0; i < std::min(V, 8); ++i)
        std::printf("%s%.6f", i ? ", " : "", double(last[size_t(i)]));
      std::printf("]\n");
    });
  });
}

}  // namespace lynx::cli
