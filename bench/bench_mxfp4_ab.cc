// bench_mxfp4_ab: the MXFP4 / IQ4_NL / Q8_0 integer kernel against its baseline
// (kernels/matmul_q8_baseline.h), interleaved in one process. On a shared machine absolute
// times drift with the neighbours' load, so every round times a pass of the baseline and a
// pass of the current kernel back to back (which one goes first alternates between rounds)
// and the figure kept is the median over the rounds of baseline / current: above 1 the
// current kernel is faster. Ratios survive `nice -n 19` and a busy machine; times do not.
//
// A pass is what one expert matmul of a gpt-oss decode step does per expert: `experts`
// distinct [rows x cols] matrices in kInterleaved16 (as the engine repacks them at load; more
// bytes than the LLC by default, so each call streams from DRAM), each multiplied by n_tok
// tokens (the rows the expert plan groups for it) with the rows split over the pool in tiles
// of 16 as matmul_id splits them. Both kernels give the same bits; the bench checks it.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/kernels.h"
#include "kernels/matmul_q8_baseline.h"
#include "kernels/thread_pool.h"
#include "kernels/types.h"

namespace lk = lynx::kernels;
using lynx::bench::seconds_since;
using lynx::gguf::TensorType;

namespace {

struct Options {
  std::vector<std::string> types = {"mxfp4"};
  std::vector<int> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int> threads = {1};
  int64_t rows = 2880, cols = 2880, experts = 96;
  int rounds = 7;
  std::string simd;  // empty: the best target
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// `experts` copies of one random matrix, interleaved (distinct addresses are what matters for
// the speed, not distinct contents).
std::vector<uint8_t> make_weights(TensorType t, const Options& o, size_t* mat_bytes) {
  const size_t rb = lk::weight_row_bytes(t, o.cols);
  *mat_bytes = rb * size_t(o.rows);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(size_t(o.cols));
  std::vector<uint8_t> one(*mat_bytes), w(*mat_bytes * size_t(o.experts));
  for (int64_t r = 0; r < o.rows; ++r) {
    for (auto& v : row) v = dist(rng);
    lk::quantize_row(t, row.data(), one.data() + size_t(r) * rb, o.cols);
  }
  lk::interleave16_into(t, one.data(), w.data(), o.cols, 0, o.rows / lk::kInterleaveRows);
  for (int64_t e = 1; e < o.experts; ++e) {
    std::memcpy(w.data() + size_t(e) * *mat_bytes, w.data(), *mat_bytes);
  }
  return w;
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{"lynx-moe MXFP4 kernel A/B: baseline kernel vs current, interleaved rounds"};
  app.add_option("--types", o.types, "weight types (mxfp4, iq4_nl, q8_0)");
  app.add_option("--tokens", o.tokens, "tokens per expert matmul");
  app.add_option("--threads", o.threads, "thread counts");
  app.add_option("--rows", o.rows, "rows per matrix (a multiple of 16)")
      ->check(CLI::PositiveNumber);
  app.add_option("--cols", o.cols, "columns (a multiple of 32)")->check(CLI::PositiveNumber);
  app.add_option("--experts", o.experts, "matrices per pass")->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "A/B rounds per row of the table")
      ->check(CLI::PositiveNumber);
  lynx::bench::add_simd_option(app, o.simd);
  CLI11_PARSE(app, argc, argv);
  if (o.rows % lk::kInterleaveRows != 0 || o.cols % 32 != 0) {
    throw CLI::ValidationError("--rows/--cols", "rows a multiple of 16, cols a multiple of 32");
  }
  std::vector<TensorType> types;
  for (const auto& s : o.types) {
    if (s == "mxfp4") {
      types.push_back(TensorType::MXFP4);
    } else if (s == "iq4_nl") {
      types.push_back(TensorType::IQ4_NL);
    } else if (s == "q8_0") {
      types.push_back(TensorType::Q8_0);
    } else {
      throw CLI::ValidationError("--types", "mxfp4, iq4_nl or q8_0, not " + s);
    }
  }
  lynx::bench::apply_simd_option(o.simd);

  std::printf(
      "bench_mxfp4_ab  commit %s  simd %s  %lld matrices of %lldx%lld per pass, %d rounds\n\n",
      LYNX_GIT_COMMIT, lk::simd_target_name(), static_cast<long long>(o.experts),
      static_cast<long long>(o.rows), static_cast<long long>(o.cols), o.rounds);
  std::printf(
      "| type | n_tok | threads | baseline ms/pass | current ms/pass | baseline/current "
      "(median) | min | max |\n");
  std::printf("|------|------:|--------:|------:|------:|------:|------:|------:|\n");

  const int max_tok = *std::max_element(o.tokens.begin(), o.tokens.end());
  std::vector<float> x(size_t(max_tok) * size_t(o.cols));
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  for (auto& v : x) v = dist(rng);
  lk::QuantizedActs xq;
  lk::quantize_acts(x.data(), o.cols, max_tok, o.cols, xq);
  const size_t out = size_t(max_tok) * size_t(o.rows);
  std::vector<float> ya(out * size_t(o.experts)), yb(ya.size());

  for (TensorType t : types) {
    size_t mb = 0;
    const auto w = make_weights(t, o, &mb);
    for (int nth : o.threads) {
      lk::ThreadPool pool(nth);
      for (int n_tok : o.tokens) {
        auto pass = [&](bool baseline, std::vector<float>& y) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int64_t e = 0; e < o.experts; ++e) {
            const uint8_t* we = w.data() + size_t(e) * mb;
            float* ye = y.data() + size_t(e) * out;
            pool.parallel_for(
                o.rows,
                [&](int64_t r0, int64_t r1, int) {
                  if (baseline) {
                    lk::matmul_rows_q8_baseline(t, we, o.cols, r0, r1, xq, 0, n_tok, ye, o.rows,
                                                lk::WeightLayout::kInterleaved16);
                  } else {
                    lk::matmul_rows_q8(t, we, o.cols, r0, r1, xq, 0, n_tok, ye, o.rows,
                                       lk::WeightLayout::kInterleaved16);
                  }
                },
                16);
          }
          return seconds_since(t0);
        };
        pass(true, ya);  // warm-up of both
        pass(false, yb);
        if (std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)) != 0) {
          std::fprintf(stderr, "bench_mxfp4_ab: the two kernels disagree (%s, %d tokens)\n",
                       lynx::gguf::tensor_type_name(t), n_tok);
          return 1;
        }
        std::vector<double> ta, tb, ratio;
        for (int r = 0; r < o.rounds; ++r) {
          double a, b;
          if (r % 2 == 0) {
            a = pass(true, ya);
            b = pass(false, yb);
          } else {
            b = pass(false, yb);
            a = pass(true, ya);
          }
          ta.push_back(a);
          tb.push_back(b);
          ratio.push_back(a / b);
        }
        std::printf("| %s | %d | %d | %.2f | %.2f | %.3f | %.3f | %.3f |\n",
                    lynx::gguf::tensor_type_name(t), n_tok, nth, median(ta) * 1e3, median(tb) * 1e3,
                    median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                    *std::max_element(ratio.begin(), ratio.end()));
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return lynx::bench::run_main("bench_mxfp4_ab", run, argc, argv);
}
