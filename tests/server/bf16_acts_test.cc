// `lynx-moe serve --bf16-acts` as a process on the bundled F16 model: the flag reaches the
// engine's context (a served greedy completion has the tokens and log-probabilities of a
// context with ContextOptions::bf16_activations, not those of the exact path) and /metrics
// reports the mode with the kernel that runs it; without the flag it reports it off.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/matmul_bf16.h"
#include "lynx/context.h"
#include "lynx/model.h"
#include "lynx/tokenizer.h"
#include "serve_child.h"
#include "util.h"

namespace lynx::test {
namespace {

const std::string kModel = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;  // of each chosen token
};

// Greedy decoding on a context of the test's own: the prompt in one step, then one token per
// step, as the server runs a lone request.
Greedy greedy(const Model& model, const std::vector<int32_t>& prompt, int n, bool bf16) {
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 256;
  co.bf16_activations = bf16;
  Context ctx(model, co);
  const int32_t seq = ctx.new_sequence();
  auto token = [seq](int32_t id, int32_t pos, uint8_t flags, bool logits) {
    BatchToken t;
    t.token = id;
    t.seq = seq;
    t.pos = pos;
    t.flags = flags;
    t.logits = logits;
    return t;
  };
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.push_back(token(prompt[i], int32_t(i), kTokenPrefill, i + 1 == prompt.size()));
  }
  Greedy g;
  for (int step = 0; step < n; ++step) {
    ctx.eval(batch);
    const auto l = ctx.logits(0);
    size_t best = 0;
    for (size_t v = 1; v < l.size(); ++v) {
      if (l[v] > l[best]) best = v;
    }
    double z = 0;
    for (float v : l) z += std::exp(double(v) - double(l[best]));
    g.tokens.push_back(int32_t(best));
    g.logprobs.push_back(-std::log(z));
    batch = {token(int32_t(best), int32_t(prompt.size()) + step, kTokenDecode, true)};
  }
  return g;
}

TEST(ServeBf16Acts, ServedCompletionIsTheBf16ContextsAndMetricsNameTheKernel) {
  ServeChild srv({"serve", "-m", kModel, "--port", "0", "-t", "1", "--bf16-acts"});
  ASSERT_GT(srv.port, 0) << srv.log;
  const std::string kernel = kernels::bf16_kernel_name(kernels::best_bf16_kernel());
  EXPECT_NE(srv.log.find("bf16-acts: BF16/F16 products on kernel " + kernel), std::string::npos)
      << srv.log;

  auto model = Model::load(kModel);
  auto tok = Tokenizer::from_gguf(model->file());
  // A prefill of at least kBf16MinTokens tokens, so that the first token's logits come from
  // BF16 products; the decode steps (one token) are exact in both modes.
  const auto ids = tok->encode("Once upon a time there was a little girl who lived", false, false);
  ASSERT_GE(ids.size(), size_t(kernels::kBf16MinTokens));
  const int n = 5;
  json body = {{"prompt", ids},
               {"max_tokens", n},
               {"temperature", 0},
               {"ignore_eos", true},
               {"logprobs", 0}};
  auto res = srv.client().Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  const json lp = j["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(lp.size(), size_t(n)) << res->body;

  const Greedy fast = greedy(*model, ids, n, true), exact = greedy(*model, ids, n, false);
  std::string text;
  for (int32_t t : fast.tokens) text += tok->token_to_piece(t);
  EXPECT_EQ(j["choices"][0]["text"], text);
  double to_fast = 0, to_exact = 0;
  for (int i = 0; i < n; ++i) {
    to_fast = std::max(to_fast, std::abs(lp[size_t(i)].get<double>() - fast.logprobs[size_t(i)]));
    to_exact =
        std::max(to_exact, std::abs(lp[size_t(i)].get<double>() - exact.logprobs[size_t(i)]));
  }
  EXPECT_LT(to_fast, 2e-5);
  // Where the machine has a BF16 kernel the first token's prefill ran in BF16, which moves its
  // log-probability far more than float printing does (without a kernel both are exact).
  if (kernel != "none") {
    EXPECT_GT(to_exact, 1e-4) << "served like the exact path";
  }

  res = srv.client().Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(metric(res->body, "lynx_bf16_activations{kernel=\"" + kernel + "\"}"), 1) << res->body;
}

TEST(ServeBf16Acts, OffByDefaultAndReportedSo) {
  ServeChild srv({"serve", "-m", kModel, "--port", "0", "-t", "1"});
  ASSERT_GT(srv.port, 0) << srv.log;
  EXPECT_EQ(srv.log.find("bf16-acts"), std::string::npos) << srv.log;
  auto res = srv.client().Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(metric(res->body, "lynx_bf16_activations{kernel=\"none\"}"), 0) << res->body;
}

}  // namespace
}  // namespace lynx::test
