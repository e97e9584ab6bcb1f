// Accuracy evaluation of routing policies (the `eval` command).
//
// Held-out documents are decoded B at a time with teacher forcing: every step feeds the next
// true token of B different documents as decode tokens, so every policy sees exactly the same
// tokens and acts on realistic batches. Per policy and batch size it reports perplexity,
// next-token accuracy, KL divergence to exact routing, distinct experts per layer, and the
// change from exact routing with a 95% confidence interval over documents. A second pass
// generates greedily from held-out prompts (B at a time) and reports agreement with exact
// routing's continuation and an exact-match score on held-out lines of code.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "lynx/context.h"

#include "lynx/model.h"
#include "lynx/tokenizer.h"

namespace lynx {

struct EvalOptions {
  std::vector<std::string> policies = {"topk"};  // the first is the baseline if it is not topk
  std::vector<int> batches = {1, 4, 16, 32};
  int max_tokens = 256;  // tokens per document (teacher forcing)
  int max_docs = 0;      // 0 = all
  int prefix = 0;        // first tokens of each document fed as prefill (exact)
  int gen_prompts = 32;  // documents used for greedy-continuation agreement (0 = off)
  int gen_prompt_tokens = 64;
  int gen_tokens = 32;
  int code_lines = 64;  // held-out lines for the exact-match completion score (0 = off)
  int n_threads = 0;
  bool exact_activations = false;                         // see ContextOptions
  bool bf16_activations = false;                          // see ContextOptions
  std::string bf16_kernel;                                // see ContextOptions
  gguf::TensorType cache_type_k = gguf::TensorType::F32;  // see ContextOptions
  gguf::TensorType cache_type_v = gguf::TensorType::F32;
  // ContextOptions::experts of every context eval makes (expert parallelism).
  std::shared_ptr<const ExpertBackend> experts;
  std::function<void(const std::string& what, size_t done, size_t total)> progress;
};

struct Interval {
  double mean = 0, lo = 0, hi = 0;  // 95% confidence interval over documents
};

struct EvalRow {
  std::string policy;
  int batch = 0;
  int64_t tokens = 0;
  double ppl = 0;
  double accuracy = 0;           // next-token top-1 accuracy
  double kl = 0;                 // mean KL(exact || policy) per token, nats
  double distinct = 0;           // mean distinct experts per MoE layer per step
  double distinct_exact = 0;     // what exact top-k would activate on the same steps
  double mass_kept = 0;          // router probability mass kept (vs exact top-k)
  double frac_changed = 0;       // fraction of expert assignments changed
  Interval d_nll;                // per-document mean NLL change vs exact (nats/token)
  Interval d_acc;                // per-document accuracy change vs exact
  double gen_agreement = -1;     // fraction of greedy tokens identical to exact's (-1: not run)
  double code_exact_match = -1;  // fraction of held-out lines whose second half is
                                 // completed exactly (greedy, up to the newline)
  // The expert tier over the decode steps (docs/offload.md); -1 where the model has none.
  // The policies run one after another over the same tier, each starting from the slots the
  // previous one left (a few steps of warm-up against runs of thousands).
  double tier_misses = -1;           // experts read from the file per decode step
  double tier_hit_rate = -1;         // claims found resident
  double disk_bytes_per_token = -1;  // bytes read from the file per decoded token
};

struct EvalDocument {
  std::string name;
  std::string text;
};

// Reads every regular file of `dir` (sorted by name) as one document. Throws lynx::Error when
// the directory cannot be read or holds no document.
std::vector<EvalDocument> read_eval_documents(const std::string& dir);

std::vector<EvalRow> evaluate(const Model& model, const Tokenizer& tok,
                              const std::vector<EvalDocument>& docs, const EvalOptions& opts);

// Token-level variant used by tests: documents given as token ids (no generation pass).
std::vector<EvalRow> evaluate_tokens(const Model& model,
                                     const std::vector<std::vector<int32_t>>& docs,
                                     const EvalOptions& opts);

}  // namespace lynx
