// `lynx-moe generate`: a batch of prompts generated together (continuous batching), once per
// routing policy, printing the texts, speed, and distinct experts per layer for each.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "analysis/trace.h"
#include "bf16_acts.h"
#include "commands.h"
#include "common.h"
#include "ep.h"
#include "lynx/chat.h"
#include "lynx/context.h"
#include "lynx/scheduler.h"
#include "lynx/tokenizer.h"

namespace lynx::cli {
namespace {

struct Args {
  std::string model, prompt, prompts_file, routing = "topk", record_trace;
  int n_predict = 32, parallel = 1, threads = 0, ctx = 2048, top_k = 0;
  int mla_decompress_min = 0;  // ContextOptions::mla_decompress_min
  uint64_t seed = 1;
  float temp = 0.f, top_p = 1.f, min_p = 0.f, typical_p = 1.f;
  float presence_penalty = 0.f, frequency_penalty = 0.f, repeat_penalty = 1.f;
  int repeat_last_n = 64;
  std::vector<std::string> logit_bias;  // ID=BIAS
  SamplingParams sampling;              // the above, parsed (seed set per sequence)
  bool no_bos = false, quiet = false, ignore_eos = false, chat = false, exact_acts = false;
  bool bf16_acts = false;
  std::string bf16_kernel;
  CacheTypeFlags cache_types;
  std::string chat_format, system;
  EpFlags ep;
};

struct PolicyRun {
  std::string spec;
  std::vector<std::string> texts;
  int64_t gen_tokens = 0, prompt_tokens = 0;
  double decode_s = 0, prefill_s = 0;
  double distinct = 0, distinct_exact = 0;  // mean per MoE layer over pure-decode steps
  int64_t decode_steps = 0;
  int64_t decode_tokens = 0;  // tokens of pure-decode steps
  RoutingStats total;
  std::string first_error;  // of a request the scheduler failed (non-finite values, ...)
  int failed = 0;
  int mla_decompress_min = 0;  // as the context ran it (Context::mla_decompress_min)
};

PolicyRun run_policy(const Args& a, const Model& model, const Tokenizer& tok,
                     const std::vector<std::string>& prompts, const std::string& spec,
                     analysis::TraceWriter* trace, ExpertParallel& ep) {
  ContextOptions co;
  ep.configure(co);
  co.n_threads = a.threads;
  co.n_ctx = a.ctx;
  co.routing = spec;
  co.record_trace = trace != nullptr;
  co.exact_activations = a.exact_acts;
  co.mla_decompress_min = a.mla_decompress_min;
  co.bf16_activations = a.bf16_acts;
  co.bf16_kernel = a.bf16_kernel;
  a.cache_types.apply(co);
  Context ctx(model, co);
  SchedulerOptions so;
  so.max_batch = a.parallel;
  Scheduler sched(ctx, so);
  PolicyRun run;
  run.spec = spec;
  run.mla_decompress_min = ctx.mla_decompress_min();
  run.texts.resize(prompts.size());
  std::vector<std::unique_ptr<StreamDecoder>> dec;
  for (size_t i = 0; i < prompts.size(); ++i) {
    dec.push_back(std::make_unique<StreamDecoder>(tok));
    GenerationRequest r;
    if (a.chat) {
      // The rendered conversation contains the template's special tokens as text.
      const ChatFormat fmt = chat_format_for_model(model.file(), tok, a.chat_format);
      std::vector<ChatMessage> msgs;
      if (!a.system.empty()) msgs.push_back({"system", a.system});
      msgs.push_back({"user", prompts[i]});
      const std::string text = render_chat(fmt, msgs, true);
      r.prompt = tok.encode(text, !a.no_bos && !fmt.renders_bos(), true);
    } else {
      r.prompt = tok.encode(prompts[i], !a.no_bos, false);
    }
    if (r.prompt.empty()) throw Error("prompt " + std::to_string(i) + " tokenizes to nothing");
    run.prompt_tokens += int64_t(r.prompt.size());
    r.max_tokens = a.n_predict;
    r.sampling = a.sampling;
    r.sampling.seed = a.seed + i;  // copies of one prompt still differ when sampling
    if (!a.ignore_eos) {
      for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        if (tok.is_eog(id)) r.stop_tokens.push_back(id);
      }
    }
    StreamDecoder* d = dec.back().get();
    std::string* text = &run.texts[i];
    r.on_token = [d, text, &run](int32_t t) {
      *text += d->push(t);
      ++run.gen_tokens;
      return true;
    };
    r.on_finish = [d, text](FinishReason) { *text += d->flush(); };
    r.on_error = [&run, i](const std::string& msg) {
      if (run.failed++ == 0) run.first_error = "sequence " + std::to_string(i) + ": " + msg;
    };
    sched.submit(std::move(r));
  }
  int step = 0;
  while (sched.step()) {
    if (trace) {
      for (const auto& r : ctx.take_trace()) {
        trace->write(step, r.layer, r.n_tokens, r.flags.data(), r.logits.data());
      }
    }
    ++step;
    const StepStats& st = ctx.last_step();
    if (st.n_decode == st.n_tokens) run.decode_tokens += st.n_tokens;
    if (st.n_decode == st.n_tokens && model.config().is_moe()) {
      run.distinct += st.mean_distinct();
      run.distinct_exact += st.mean_distinct_exact();
    }
    if (st.n_decode == st.n_tokens) ++run.decode_steps;
  }
  if (run.decode_steps) {
    run.distinct /= double(run.decode_steps);
    run.distinct_exact /= double(run.decode_steps);
  }
  run.decode_s = sched.stats().decode_seconds;
  run.prefill_s = sched.stats().prefill_seconds;
  for (const auto& r : ctx.routing_stats()) run.total.add(r);
  return run;
}

// --logit-bias values: ID=BIAS, or llama.cpp's ID+BIAS / ID-BIAS; a bias of -inf or false
// bans the token.
std::vector<LogitBias> parse_logit_bias(const std::vector<std::string>& values) {
  std::vector<LogitBias> out;
  for (const std::string& v : values) {
    auto bad = [&](const std::string& why) {
      throw UsageError("--logit-bias " + v + ": " + why + " (want ID=BIAS, e.g. 15043=-100)");
    };
    const size_t at = v.find_first_of("=+-");
    if (at == 0 || at == std::string::npos) bad("no token id");
    const std::string id = v.substr(0, at);
    std::string bias = v.substr(v[at] == '=' ? at + 1 : at);
    if (id.find_first_not_of("0123456789") != std::string::npos || id.size() > 9) {
      bad("the token id is not a non-negative integer");
    }
    LogitBias b;
    b.token = int32_t(std::stol(id));
    if (bias == "-inf" || bias == "false") {
      b.bias = kBanBias;
    } else {
      char* end = nullptr;
      const double x = bias.empty() ? NAN : std::strtod(bias.c_str(), &end);
      if (bias.empty() || *end != '\0' || !(x >= -100 && x <= 100)) {
        bad("the bias must be a number in [-100, 100], -inf or false");
      }
      b.bias = float(x);
    }
    out.push_back(b);
  }
  return out;
}

// -p first, then the non-empty lines of -f, repeated to fill the batch (-B).
std::vector<std::string> read_prompts(const Args& a) {
  std::vector<std::string> base;
  if (!a.prompts_file.empty()) {
    std::istringstream f(read_text_file(a.prompts_file, "--prompts-file"));
    for (std::string line; std::getline(f, line);) {
      if (!line.empty()) base.push_back(line);
    }
  }
  if (!a.prompt.empty()) base.insert(base.begin(), a.prompt);
  if (base.empty()) throw Error("give a prompt with -p or -f");
  std::vector<std::string> prompts;
  for (int i = 0; i < std::max<int>(a.parallel, int(base.size())); ++i) {
    prompts.push_back(base[size_t(i) % base.size()]);
  }
  return prompts;
}

// The sampling flags into a.sampling (checked against the vocabulary once the model is loaded).
void set_sampling(Args& a) {
  SamplingParams& sp = a.sampling;
  sp.temperature = a.temp;
  sp.top_k = a.top_k;
  sp.top_p = a.top_p;
  sp.min_p = a.min_p;
  sp.typical_p = a.typical_p;
  sp.presence_penalty = a.presence_penalty;
  sp.frequency_penalty = a.frequency_penalty;
  sp.repeat_penalty = a.repeat_penalty;
  sp.repeat_last_n = a.repeat_last_n;
  sp.logit_bias = parse_logit_bias(a.logit_bias);
}

// --record-trace's writer (nullptr without the flag).
std::unique_ptr<analysis::TraceWriter> open_trace(const Args& a, const ModelConfig& c) {
  if (a.record_trace.empty()) return nullptr;
  if (!c.is_moe()) throw Error("--record-trace: the model has no experts");
  analysis::TraceHeader h;
  h.n_layers = c.n_layer;
  h.n_expert = c.n_expert;
  h.n_expert_used = c.n_expert_used;
  h.func = c.gating.func;
  h.norm_topk = c.gating.norm_topk;
  h.weights_scale = c.gating.weights_scale;
  return std::make_unique<analysis::TraceWriter>(a.record_trace, h);
}

// One line per routing policy: tokens, prefill and decode speed, experts against top-k's.
void print_summary(const std::vector<PolicyRun>& runs) {
  std::printf("\n%-28s %8s %10s %10s %9s %9s %9s %8s\n", "routing", "gen tok", "prefill/s",
              "decode/s", "TPOT ms", "experts", "exact", "mass");
  for (const PolicyRun& r : runs) {
    const double dec_tps = r.decode_s > 0 ? double(r.decode_tokens) / r.decode_s : 0;
    const double tpot = r.decode_steps > 0 ? 1e3 * r.decode_s / double(r.decode_steps) : 0;
    std::printf("%-28s %8lld %10.1f %10.1f %9.2f %9.2f %9.2f %8.3f\n", r.spec.c_str(),
                (long long)r.gen_tokens,
                r.prefill_s > 0 ? double(r.prompt_tokens) / r.prefill_s : 0.0, dec_tps, tpot,
                r.distinct, r.distinct_exact, r.total.mean_mass_kept());
  }
  std::printf(
      "(decode/s over steps without prefill; experts = mean distinct experts per MoE "
      "layer per decode step, exact = what top-k would activate)\n");
}

void run_generate(Args& a, ExpertParallel& ep) {
  const std::vector<std::string> specs = routing_specs(a.routing, "--routing");
  const std::vector<std::string> prompts = read_prompts(a);
  set_sampling(a);
  SamplingParams& sp = a.sampling;
  auto model = ep.load_model(a.model, !a.exact_acts);
  check_specs_fit(specs, *model, "--routing");
  try {
    check_sampling_params(sp, model->config().n_vocab);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  auto tok = Tokenizer::from_gguf(model->file());
  const ModelConfig& c = model->config();
  std::printf("model: %s (%s), %d layers, %d experts, %d per token; batch %d, %d tokens each\n",
              c.name.c_str(), c.arch.c_str(), c.n_layer, c.n_expert, c.n_expert_used, a.parallel,
              a.n_predict);
  if (a.bf16_acts) std::printf("%s\n", bf16_acts_summary(*model, a.bf16_kernel).c_str());
  std::vector<PolicyRun> runs;
  std::unique_ptr<analysis::TraceWriter> trace;
  // Under --expert-parallel every rank computes the same trace: rank 0 writes it.
  if (ep.rank() == 0) trace = open_trace(a, c);
  for (const std::string& spec : specs) {
    runs.push_back(run_policy(a, *model, *tok, prompts, spec, trace.get(), ep));
    if (runs.back().failed > 0) {
      throw Error("routing " + spec + ": " + std::to_string(runs.back().failed) + " of " +
                  std::to_string(prompts.size()) +
                  " sequences failed; first: " + runs.back().first_error);
    }
    if (trace) {
      trace->close();
      trace.reset();
      std::fprintf(stderr, "wrote routing trace %s\n", a.record_trace.c_str());
    }
    const PolicyRun& r = runs.back();
    if (runs.size() == 1 && r.mla_decompress_min > 0) {
      std::printf("MLA prefill: runs of %d or more tokens attend in the decompressed form\n",
                  r.mla_decompress_min);
    }
    if (!a.quiet) {
      std::printf("\n=== routing %s ===\n", spec.c_str());
      for (size_t i = 0; i < prompts.size(); ++i) {
        std::printf("[%zu] %s%s\n", i, prompts[i].c_str(), r.texts[i].c_str());
      }
    }
  }
  print_summary(runs);
}

void add_generate_flags(CLI::App* cmd, Args& a) {
  cmd->add_option("-m,--model", a.model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", a.prompt, "Prompt text");
  cmd->add_option("-f,--prompts-file", a.prompts_file, "File with one prompt per line");
  cmd->add_option("-n,--n-predict", a.n_predict, "Tokens to generate per sequence")
      ->check(int_in(1, 1 << 30));
  cmd->add_option("-B,--parallel", a.parallel, "Sequences decoding together in one batch")
      ->check(int_in(1, 1 << 16));
  cmd->add_option("-t,--threads", a.threads, "Threads (default: all cores)")
      ->check(int_in(0, kMaxThreads));
  cmd->add_option("-c,--ctx", a.ctx, "Context limit per sequence")->check(int_in(1, 1 << 30));
  cmd->add_option("--seed", a.seed, "Sampling seed (sequence i uses seed + i)");
  cmd->add_option("--temp", a.temp, "Temperature (0 = greedy)")->check(number_in(0, 1e4));
  cmd->add_option("--top-k", a.top_k, "Top-k sampling (0 = off)")->check(int_in(0, 1 << 30));
  cmd->add_option("--top-p", a.top_p, "Top-p sampling (1 = off)")->check(number_in(0, 1, true));
  cmd->add_option("--min-p", a.min_p, "Min-p sampling: keep p >= MIN_P * p_max (0 = off)")
      ->check(number_in(0, 1));
  cmd->add_option("--typical-p,--typical", a.typical_p, "Locally typical sampling (1 = off)")
      ->check(number_in(0, 1, true));
  cmd->add_option("--presence-penalty", a.presence_penalty,
                  "OpenAI presence penalty over the generated tokens (0 = off)")
      ->check(number_in(-2, 2));
  cmd->add_option("--frequency-penalty", a.frequency_penalty,
                  "OpenAI frequency penalty over the generated tokens (0 = off)")
      ->check(number_in(-2, 2));
  cmd->add_option("--repeat-penalty", a.repeat_penalty,
                  "Repetition penalty over the last --repeat-last-n tokens (1 = off)")
      ->check(number_in(0, 100, true));
  cmd->add_option("--repeat-last-n", a.repeat_last_n,
                  "Tokens of prompt + output the repetition penalty sees (-1 = all, 0 = off)")
      ->check(int_in(-1, INT32_MAX));
  cmd->add_option("--logit-bias", a.logit_bias,
                  "ID=BIAS added to a token's logit (BIAS in [-100, 100], -inf or false bans); "
                  "repeatable");
  cmd->add_option("--routing", a.routing,
                  "Routing policy spec; several separated by ';' run one after the other");
  cmd->add_option("--record-trace", a.record_trace,
                  "Write the router logits of every MoE layer and step (first policy) to FILE");
  cmd->add_flag("--chat", a.chat, "Wrap each prompt as a user turn in the model's chat format");
  cmd->add_option("--chat-format", a.chat_format,
                  "Chat format name when the model's template is not recognized");
  cmd->add_option("--system", a.system, "System prompt (with --chat)");
  cmd->add_flag("--no-bos", a.no_bos, "Do not add BOS");
  cmd->add_flag("--ignore-eos", a.ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("-q,--quiet", a.quiet, "Print only the summary lines");
  add_exact_acts_flag(cmd, &a.exact_acts);
  add_mla_decompress_flag(cmd, &a.mla_decompress_min);
  add_bf16_acts_flag(cmd, &a.bf16_acts, &a.bf16_kernel);
  add_cache_type_flags(cmd, &a.cache_types);
  add_ep_flags(cmd, &a.ep);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "Generate text for a batch of prompts");
  add_generate_flags(cmd, *a);
  cmd->callback([a] {
    check_bf16_acts_combo(a->bf16_acts, a->ep.on);
    ExpertParallel::run(a->ep, [&](ExpertParallel& ep) { run_generate(*a, ep); });
  });
}

}  // namespace lynx::cli
