// A small client of a reference engine's libllama (llama.cpp or ik_llama.cpp), for
// scripts/compare-llamacpp.sh: per batch size B, a fresh context, B distinct sequences (the
// first B lines of a prompt file, the first P ids of each) prefilled in one batch, then G
// decode steps of one batch of B tokens (each sequence's greedy argmax, its own sequence id and
// position), as `lynx-moe bench --prompt-file` runs them. Only llama_decode +
// llama_synchronize are timed. With -q N, also one sequence of the first line's first N ids
// prefilled in one batch (prompt tokens/s). Not part of lynx-moe: the compare script compiles it
// against the peer's own build; it uses only calls both trees have (and `repack_tensors`,
// ik_llama.cpp's run-time repack, when PEER_IK is defined).
//
//   peer-decode -m FILE -f PROMPTS -b 1,2,4 -p P -g G -t T [-q N] [--rtr]
//   peer-decode -m FILE --tokens 1,7,42 --logits OUT.f32 [-t T] [--rtr]
//
// Prints one line per batch size (and one for -q): key=value pairs (decode_tps, prefill_tps,
// distinct_tokens: the mean number of distinct next tokens per step, a check that the
// sequences differ; storage_bytes_per_token: what the decode steps read from storage). With
// --logits (scripts/peer-logits.sh): the tokens are one sequence prefilled in one batch, and the
// logits of every position are written as raw little-endian f32, [tokens x vocabulary], as
// `lynx-moe logits --all --out` writes them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

struct Options {
  std::string model, prompts, logits_out;
  std::vector<int> batches{1};
  std::vector<int> tokens;  // --tokens, for --logits
  int prompt = 32, gen = 32, threads = 2, long_prompt = 0;
  bool rtr = false;
  std::string cache_type;  // --cache-type: K and V cache element type (f16, q8_0); "" default
};

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "peer-decode: %s\n", msg.c_str());
  std::exit(1);
}

int to_int(const char* s, const char* flag) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0 || v > (1 << 20))
    fail(std::string("bad value for ") + flag);
  return int(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) fail("missing value for " + a);
      return argv[++i];
    };
    if (a == "-m")
      o.model = next();
    else if (a == "-f")
      o.prompts = next();
    else if (a == "-b") {
      o.batches.clear();
      std::stringstream in(next());
      for (std::string item; std::getline(in, item, ',');)
        o.batches.push_back(to_int(item.c_str(), "-b"));
    } else if (a == "-q")
      o.long_prompt = to_int(next(), "-q");
    else if (a == "-p")
      o.prompt = to_int(next(), "-p");
    else if (a == "-g")
      o.gen = to_int(next(), "-g");
    else if (a == "-t")
      o.threads = to_int(next(), "-t");
    else if (a == "--rtr")
      o.rtr = true;
    else if (a == "--cache-type") {
      o.cache_type = next();
      if (o.cache_type != "f16" && o.cache_type != "q8_0" && o.cache_type != "f32")
        fail("--cache-type must be f32, f16 or q8_0");
    } else if (a == "--logits")
      o.logits_out = next();
    else if (a == "--tokens") {
      std::string list = next();
      for (char& c : list) {
        if (c == ',') c = ' ';
      }
      std::istringstream in(list);
      for (std::string item; in >> item;) o.tokens.push_back(to_int(item.c_str(), "--tokens"));
    } else
      fail("unknown option " + a);
  }
  if (!o.logits_out.empty()) {
    if (o.model.empty() || o.tokens.empty())
      fail("usage: peer-decode -m FILE --tokens IDS --logits OUT.f32 [-t T] [--rtr]");
    return o;
  }
  if (o.model.empty() || o.prompts.empty()) fail("usage: peer-decode -m FILE -f PROMPTS [...]");
  for (int b : o.batches) {
    if (b < 1) fail("-b values must be >= 1");
  }
  if (o.prompt < 1 || o.threads < 1) fail("-p and -t must be >= 1");
  return o;
}

std::vector<std::vector<llama_token>> read_prompts(const Options& o, int n_vocab, int lines,
                                                   int len) {
  std::ifstream f(o.prompts);
  if (!f) fail("cannot open " + o.prompts);
  std::vector<std::vector<llama_token>> out;
  for (std::string line; std::getline(f, line) && int(out.size()) < lines;) {
    for (char& c : line) {
      if (c == ',') c = ' ';
    }
    std::istringstream in(line);
    std::vector<llama_token> ids;
    long v;
    while (int(ids.size()) < len && in >> v) {
      if (v < 0 || v >= n_vocab) fail("token id out of the vocabulary in " + o.prompts);
      ids.push_back(llama_token(v));
    }
    if (ids.empty()) continue;
    if (int(ids.size()) < len) fail("a prompt line has fewer than " + std::to_string(len) + " ids");
    out.push_back(std::move(ids));
  }
  if (int(out.size()) < lines) fail("fewer prompt lines than " + std::to_string(lines));
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Bytes the process has made the kernel read from storage (/proc/self/io read_bytes: the page
// faults of the file mapping, for a model larger than memory); `lynx-moe bench` counts the same.
double storage_read_bytes() {
  std::ifstream f("/proc/self/io");
  std::string key;
  double v = 0;
  while (f >> key >> v) {
    if (key == "read_bytes:") return v;
  }
  return 0;
}

struct Result {
  double prefill_tps = 0, decode_tps = 0, distinct = 0;
  double storage_per_token = 0;  // storage bytes read per decoded token
};

// One fresh context: prefill the prompts in one batch, then `gen` greedy decode steps.
Result run(llama_model* model, const Options& o,
           const std::vector<std::vector<llama_token>>& prompts, int gen, int n_vocab) {
  const int B = int(prompts.size()), P = int(prompts[0].size());
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t((B * (P + gen + 1) + 255) / 256 * 256);
  cp.n_batch = cp.n_ubatch = uint32_t(std::max(B * P, 32));
  cp.n_seq_max = uint32_t(B);
  cp.n_threads = cp.n_threads_batch = o.threads;
  if (!o.cache_type.empty()) {  // as -ctk T -ctv T
    const ggml_type t = o.cache_type == "q8_0"  ? GGML_TYPE_Q8_0
                        : o.cache_type == "f16" ? GGML_TYPE_F16
                                                : GGML_TYPE_F32;
    cp.type_k = cp.type_v = t;
  }
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) fail("cannot create a context");

  llama_batch batch = llama_batch_init(std::max(B * P, B), 0, 1);
  auto add = [&](llama_token t, int pos, int seq, bool logits) {
    const int i = batch.n_tokens++;
    batch.token[i] = t;
    batch.pos[i] = pos;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = seq;
    batch.logits[i] = logits;
  };
  // Prefill: all prompts in one batch; logits at each sequence's last prompt token.
  std::vector<int> logit_row(static_cast<size_t>(B));
  batch.n_tokens = 0;
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < P; ++i) add(prompts[size_t(b)][size_t(i)], i, b, i == P - 1);
    logit_row[size_t(b)] = batch.n_tokens - 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  if (llama_decode(ctx, batch) != 0) fail("prefill failed");
  llama_synchronize(ctx);
  Result r;
  r.prefill_tps = double(B) * P / seconds_since(t0);

  double decode_s = 0;
  std::vector<llama_token> next(static_cast<size_t>(B));
  for (int g = 0; g < gen; ++g) {
    std::set<llama_token> seen;
    for (int b = 0; b < B; ++b) {
      const float* l = llama_get_logits_ith(ctx, logit_row[size_t(b)]);
      if (!l) fail("no logits");
      int best = 0;
      for (int v = 1; v < n_vocab; ++v) best = l[v] > l[best] ? v : best;
      next[size_t(b)] = llama_token(best);
      seen.insert(llama_token(best));
    }
    r.distinct += double(seen.size());
    batch.n_tokens = 0;
    for (int b = 0; b < B; ++b) {
      add(next[size_t(b)], P + g, b, true);
      logit_row[size_t(b)] = b;
    }
    t0 = std::chrono::steady_clock::now();
    const double io0 = storage_read_bytes();
    if (llama_decode(ctx, batch) != 0) fail("decode step failed");
    llama_synchronize(ctx);
    decode_s += seconds_since(t0);
    r.storage_per_token += (storage_read_bytes() - io0) / B;
  }
  if (gen > 0) {
    r.decode_tps = double(B) * gen / decode_s;
    r.distinct /= gen;
    r.storage_per_token /= gen;
  }
  llama_batch_free(batch);
  llama_free(ctx);
  return r;
}

// One sequence of the given ids in one batch, logits at every position, written to a file.
void write_logits(llama_model* model, const Options& o, int n_vocab) {
  const int n = int(o.tokens.size());
  for (int t : o.tokens) {
    if (t >= n_vocab) fail("token id " + std::to_string(t) + " out of the vocabulary");
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t((n + 255) / 256 * 256);
  cp.n_batch = cp.n_ubatch = uint32_t(std::max(n, 32));
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = o.threads;
#ifdef PEER_IK
  // ik_llama.cpp routes Ling 2 (bailingmoe2) by plain top-k unless told (-ger); the released
  // model and llama.cpp pick the top groups first (expert_group_count / _used_count).
  cp.grouped_expert_routing = true;
#endif
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) fail("cannot create a context");
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = o.tokens[size_t(i)];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = true;
  }
  batch.n_tokens = n;
  if (llama_decode(ctx, batch) != 0) fail("decode failed");
  llama_synchronize(ctx);
  std::ofstream out(o.logits_out, std::ios::binary);
  for (int i = 0; i < n; ++i) {
    const float* l = llama_get_logits_ith(ctx, i);
    if (!l) fail("no logits at position " + std::to_string(i));
    out.write(reinterpret_cast<const char*>(l), std::streamsize(sizeof(float)) * n_vocab);
  }
  if (!out) fail("cannot write " + o.logits_out);
  llama_batch_free(batch);
  llama_free(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
#ifdef PEER_IK
  if (o.rtr) {  // what ik_llama.cpp's -rtr sets
    mp.repack_tensors = true;
    mp.use_mmap = false;
  }
#else
  if (o.rtr) fail("--rtr needs a build with -DPEER_IK");
#endif
  llama_model* model = llama_model_load_from_file(o.model.c_str(), mp);
  if (!model) fail("cannot load " + o.model);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  if (!o.logits_out.empty()) {
    write_logits(model, o, n_vocab);
    llama_free_model(model);
    llama_backend_free();
    return 0;
  }
  for (int B : o.batches) {
    const Result r = run(model, o, read_prompts(o, n_vocab, B, o.prompt), o.gen, n_vocab);
    std::printf(
        "batch=%d prompt=%d gen=%d decode_tps=%.3f prefill_tps=%.3f distinct_tokens=%.2f "
        "storage_bytes_per_token=%.0f\n",
        B, o.prompt, o.gen, r.decode_tps, r.prefill_tps, r.distinct, r.storage_per_token);
    std::fflush(stdout);
  }
  if (o.long_prompt > 0) {
    const Result r = run(model, o, read_prompts(o, n_vocab, 1, o.long_prompt), 0, n_vocab);
    std::printf("batch=1 prompt=%d gen=0 decode_tps=0 prefill_tps=%.3f distinct_tokens=0\n",
                o.long_prompt, r.prefill_tps);
  }
  llama_free_model(model);
  llama_backend_free();
  return 0;
}
