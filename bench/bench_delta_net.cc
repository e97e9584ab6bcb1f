// Microseconds per token of one Gated DeltaNet layer's recurrent steps on one thread: the
// causal conv over the q/k/v channels and the delta rule over every value head's state
// (kernels/delta_net.h), the SIMD kernels against their scalar twins, and the chunked delta
// rule (each head's `tokens` in one call, as a prefill of that many tokens runs it), in
// interleaved passes (SIMD, scalar, chunked, SIMD, ...; the best of each reported). Timed in
// this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall time: the figures hold on a shared
// machine as long as the caches are not. Default shape: Qwen3-Next-80B / Qwen3.5 (16 key and
// 32 value heads of 128, conv of 4 over 8192 channels). Prints figures, asserts nothing.
//   build/release/bin/bench_delta_net [--heads 32] [--dk 128] [--dv 128] [--conv 8192]
//       [--kernel 4] [--tokens 64] [--passes 5] [--simd AVX2]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/delta_net.h"

namespace {

namespace lk = lynx::kernels;

struct Shape {
  int heads = 32;
  int64_t dk = 128, dv = 128, conv = 8192;
  int kernel = 4, tokens = 64, passes = 5;
};

std::vector<float> randoms(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Seconds per token of `tokens` steps of the whole layer's state (every head), one thread.
template <class Step>
double delta_rule_pass(const Shape& s, std::vector<float>& S, const std::vector<float>& qkv,
                       Step step) {
  std::vector<float> mem(size_t(s.dv)), out(size_t(s.dv));
  const double t0 = cpu_now();
  for (int t = 0; t < s.tokens; ++t) {
    const float* x = &qkv[size_t(t) * size_t(2 * s.dk + s.dv)];
    for (int h = 0; h < s.heads; ++h) {
      step(&S[size_t(h) * size_t(s.dk * s.dv)], x, x + s.dk, x + 2 * s.dk, 0.97f, 0.5f, s.dk, s.dv,
           mem.data(), out.data());
    }
  }
  return (cpu_now() - t0) / s.tokens;
}

// The same tokens through delta_rule_chunked, head after head.
double chunked_pass(const Shape& s, std::vector<float>& S, const std::vector<float>& qkv) {
  std::vector<float> mem(lk::delta_rule_chunked_scratch(s.dk, s.dv));
  std::vector<float> out(size_t(s.tokens) * size_t(s.dv));
  const std::vector<float> decay(size_t(s.tokens), 0.97f), beta(size_t(s.tokens), 0.5f);
  const int64_t ld = 2 * s.dk + s.dv;
  const double t0 = cpu_now();
  for (int h = 0; h < s.heads; ++h) {
    const lk::DeltaRuleRows rows{qkv.data(), qkv.data() + s.dk, qkv.data() + 2 * s.dk,
                                 ld,         decay.data(),      beta.data(),
                                 1,          out.data(),        s.dv};
    lk::delta_rule_chunked(&S[size_t(h) * size_t(s.dk * s.dv)], rows, s.tokens, s.dk, s.dv,
                           mem.data());
  }
  return (cpu_now() - t0) / s.tokens;
}

// The same for the conv; each token's input is copied from `xs` (the step overwrites its
// input, and fed its own outputs the values would shrink into denormals).
template <class Step>
double conv_pass(const Shape& s, std::vector<float>& window, const std::vector<float>& w,
                 const std::vector<float>& xs, Step step) {
  std::vector<float> x(size_t(s.conv));
  const double t0 = cpu_now();
  for (int t = 0; t < s.tokens; ++t) {
    std::copy_n(&xs[size_t(t) * size_t(s.conv)], s.conv, x.begin());
    step(x.data(), window.data(), w.data(), s.conv, s.kernel, 0, s.conv);
  }
  return (cpu_now() - t0) / s.tokens;
}

int run(int argc, char** argv) {
  Shape s;
  std::string simd;
  CLI::App app{"Gated DeltaNet steps per token: SIMD against the scalar twins"};
  app.add_option("--heads", s.heads, "value heads")->check(CLI::Range(1, 1024));
  app.add_option("--dk", s.dk, "key dims per head")->check(CLI::Range(1, 4096));
  app.add_option("--dv", s.dv, "value dims per head")->check(CLI::Range(1, 4096));
  app.add_option("--conv", s.conv, "conv channels")->check(CLI::Range(1, 1 << 20));
  app.add_option("--kernel", s.kernel, "conv taps")->check(CLI::Range(1, 16));
  app.add_option("--tokens", s.tokens, "steps per pass")->check(CLI::Range(1, 1 << 20));
  app.add_option("--passes", s.passes, "interleaved passes of each")->check(CLI::Range(1, 1000));
  lynx::bench::add_simd_option(app, simd);
  CLI11_PARSE(app, argc, argv);
  lynx::bench::apply_simd_option(simd);

  const auto qkv = randoms(size_t(s.tokens) * size_t(2 * s.dk + s.dv), 1, 0.1f);
  std::vector<float> S = randoms(size_t(s.heads) * size_t(s.dk * s.dv), 2, 0.1f), S_ref = S,
                     S_chunked = S;
  const auto w = randoms(size_t(s.conv) * size_t(s.kernel), 3, 0.5f);
  std::vector<float> win = randoms(size_t(s.conv) * size_t(s.kernel - 1), 4, 1.f), win_ref = win;
  const auto xs = randoms(size_t(s.tokens) * size_t(s.conv), 5, 1.f);
  double dr = 1e30, dr_ref = 1e30, dr_chunked = 1e30, cv = 1e30, cv_ref = 1e30;
  for (int p = 0; p < s.passes; ++p) {
    dr = std::min(dr, delta_rule_pass(s, S, qkv, lk::delta_rule_step));
    dr_ref = std::min(dr_ref, delta_rule_pass(s, S_ref, qkv, lk::ref::delta_rule_step));
    dr_chunked = std::min(dr_chunked, chunked_pass(s, S_chunked, qkv));
    cv = std::min(cv, conv_pass(s, win, w, xs, lk::conv_step));
    cv_ref = std::min(cv_ref, conv_pass(s, win_ref, w, xs, lk::ref::conv_step));
  }
  const double state_bytes = 4.0 * s.heads * s.dk * s.dv;
  std::printf(
      "bench_delta_net  commit %s  simd %s  %d heads of %lld x %lld, conv %lld x %d, "
      "%d tokens x %d passes (best)\n\n",
      LYNX_GIT_COMMIT, lk::simd_target_name(), s.heads, (long long)s.dk, (long long)s.dv,
      (long long)s.conv, s.kernel, s.tokens, s.passes);
  std::printf(
      "| step | scalar us/token | SIMD us/token | speedup | SIMD state GB/s (read + write) |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  std::printf("| delta rule | %.1f | %.1f | %.2fx | %.1f |\n", dr_ref * 1e6, dr * 1e6, dr_ref / dr,
              2 * state_bytes / dr / 1e9);
  std::printf("| conv | %.1f | %.1f | %.2fx | |\n", cv_ref * 1e6, cv * 1e6, cv_ref / cv);
  std::printf(
      "\nchunked delta rule (%d tokens per call): %.1f us/token, %.2fx the SIMD recurrence\n",
      s.tokens, dr_chunked * 1e6, dr / dr_chunked);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return lynx::bench::run_main("bench_delta_net", run, argc, argv);
}
