// bench_kernels: matmul throughput per weight type, path, shape, token count and thread count,
// next to the machine's measured memory read bandwidth (the roofline of decode), plus the
// per-call cost of ThreadPool::parallel_for.
//
// Shape as an MoE decode step sees it: `experts` matrices of [rows x cols] streamed one after
// the other through matmul() (one parallel_for each), the whole set far larger than the LLC.
// Paths: `float` (weights decoded to F32, exact activations) and `int` (the types with an
// integer kernel, kernels/types.h: activations quantized to Q8_0 or Q8_K blocks once per pass,
// as the engine quantizes each input once for all experts, then integer dot products); the
// quantization is inside the pass wall time; and `bf16` (BF16/F16 weights in panels on a CPU
// with AMX-BF16, kernels/matmul_bf16.h: activations rounded to BF16 once per pass, inside the
// wall time too).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/kernels.h"
#include "kernels/matmul_bf16.h"
#include "kernels/probes.h"
#include "kernels/thread_pool.h"
#include "kernels/types.h"

namespace lk = lynx::kernels;
using lynx::bench::seconds_since;
using lynx::gguf::TensorType;

namespace {

struct Options {
  std::vector<std::string> types = {"f32", "f16", "bf16", "q8_0", "q4_0"};
  std::vector<int> tokens = {1, 4, 16, 64};
  std::vector<int> threads = {1, 2};
  std::vector<std::string> paths = {"float", "int"};
  std::vector<std::string> shapes = {"2048x1024", "1024x2048"};  // rows x cols
  int64_t rows = 0, cols = 0, experts = 64;
  int reps = 5;
  double bw_mib = 1024;
  std::string simd;         // empty: the best target
  std::string bf16_kernel;  // empty: the best this machine has
  // Weight layout: "packed" (as the engine repacks at load when rows % 16 == 0: Q8_0/Q4_0
  // kInterleaved16, F32/F16/BF16 kPanel16) or "rows" (the file's layout).
  std::string layout = "packed";
};

// Any type of the type table, by its ggml name (case-insensitive: q4_k or q4_K).
TensorType parse_type(const std::string& s) {
  auto lower = [](std::string v) {
    for (auto& ch : v) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return v;
  };
  for (const lk::TypeTraits& tr : lk::all_type_traits()) {
    if (lower(lynx::gguf::tensor_type_name(tr.type)) == lower(s)) return tr.type;
  }
  throw CLI::ValidationError("--types", "unknown weight type " + s);
}

// "2048x1024" -> rows 2048, cols 1024.
void parse_shape(const std::string& s, int64_t* rows, int64_t* cols) {
  const size_t x = s.find('x');
  try {
    if (x == std::string::npos) throw std::invalid_argument(s);
    *rows = std::stoll(s.substr(0, x));
    *cols = std::stoll(s.substr(x + 1));
  } catch (const std::exception&) {
    throw CLI::ValidationError("--shapes", "expected ROWSxCOLS, got " + s);
  }
  if (*rows <= 0 || *cols <= 0 || *cols % 32 != 0) {
    throw CLI::ValidationError("--shapes", "rows > 0 and cols a positive multiple of 32: " + s);
  }
}

// Weights of all experts: one expert quantized from random data (repacked when `layout` is
// not kRows), copied to the others (the contents do not change the speed; distinct addresses
// do).
std::unique_ptr<uint8_t[]> make_weights(TensorType t, const Options& o, lk::WeightLayout layout,
                                        size_t* expert_bytes) {
  const size_t rb = lk::weight_row_bytes(t, o.cols);
  *expert_bytes = rb * o.rows;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(o.cols);
  std::unique_ptr<uint8_t[]> w(new uint8_t[*expert_bytes * o.experts]);
  for (int64_t r = 0; r < o.rows; ++r) {
    for (auto& v : row) v = dist(rng);
    lk::quantize_row(t, row.data(), w.get() + r * rb, o.cols);
  }
  if (layout == lk::WeightLayout::kInterleaved16) {
    lk::interleave16(t, w.get(), o.cols, 0, o.rows / lk::kInterleaveRows);
  } else if (layout == lk::WeightLayout::kPanel16) {
    std::vector<uint8_t> rows(w.get(), w.get() + *expert_bytes);
    lk::panel16_into(t, rows.data(), w.get(), o.cols, 0, o.rows / lk::kPanelRows);
  }
  for (int64_t e = 1; e < o.experts; ++e) {
    std::memcpy(w.get() + e * *expert_bytes, w.get(), *expert_bytes);
  }
  return w;
}

double parallel_for_overhead_us(lk::ThreadPool& pool) {
  const int calls = 20000;
  volatile int64_t sink = 0;
  auto body = [&](int64_t b, int64_t e, int) { sink = sink + (e - b); };
  pool.parallel_for(64, body, 1);  // warm up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) pool.parallel_for(64, body, 1);
  return seconds_since(t0) / calls * 1e6;
}

void add_options(CLI::App& app, Options& o) {
  app.add_option("--types", o.types, "weight types");
  app.add_option("--tokens", o.tokens, "token counts (activation rows per matmul)");
  app.add_option("--threads", o.threads, "thread counts");
  app.add_option("--paths", o.paths,
                 "float (exact activations), int (types with an integer kernel), bf16 (BF16/F16 on "
                 "AMX or AVX512_BF16, the --bf16-acts mode; --bf16-kernel picks the kernel)");
  app.add_option("--bf16-kernel", o.bf16_kernel,
                 "kernel of the bf16 path: auto (the best here), amx or avx512bf16");
  app.add_option("--shapes", o.shapes, "matrix shapes ROWSxCOLS (cols a multiple of 32)");
  app.add_option("--rows", o.rows, "rows per expert matrix (with --cols: replaces --shapes)")
      ->check(CLI::PositiveNumber);
  app.add_option("--cols", o.cols, "columns, a multiple of 32 (with --rows)")
      ->check(CLI::PositiveNumber);
  app.add_option("--experts", o.experts, "matrices streamed per pass")->check(CLI::PositiveNumber);
  app.add_option("--reps", o.reps, "passes per measurement (best is kept)")
      ->check(CLI::PositiveNumber);
  app.add_option("--bw-mib", o.bw_mib, "buffer size of the bandwidth probe, MiB");
  lynx::bench::add_simd_option(app, o.simd);
  app.add_option("--layout", o.layout,
                 "weight layout: packed (as the engine repacks at load: Q8_0/Q4_0/Q4_K/Q6_K 16-row "
                 "interleaved, F32/F16/BF16 16-row panels; matrices whose rows are not a "
                 "multiple of 16 stay rows) or rows (the file's)")
      ->check(CLI::IsMember({"packed", "rows"}));
}

// Every option checked before any output.
void check_options(Options& o) {
  if (o.rows > 0 || o.cols > 0) {
    if (o.rows <= 0 || o.cols <= 0) throw CLI::ValidationError("--rows/--cols", "give both");
    o.shapes = {std::to_string(o.rows) + "x" + std::to_string(o.cols)};
  }
  for (const auto& p : o.paths) {
    if (p != "float" && p != "int" && p != "bf16") {
      throw CLI::ValidationError("--paths", "unknown path " + p);
    }
  }
  for (const auto& t : o.types) parse_type(t);  // all options checked before any output
  for (const auto& sh : o.shapes) {
    int64_t r = 0, c = 0;
    parse_shape(sh, &r, &c);
  }
}

// The header line and each thread count's read bandwidth (returned), FMA peak and
// parallel_for cost.
std::vector<double> print_machine(const Options& o) {
  std::printf("bench_kernels  commit %s  simd %s  %lld matrices per pass  layout %s\n\n",
              LYNX_GIT_COMMIT, lk::simd_target_name(), static_cast<long long>(o.experts),
              o.layout.c_str());

  std::vector<double> bw(o.threads.size());
  for (size_t i = 0; i < o.threads.size(); ++i) {
    lk::ThreadPool pool(o.threads[i]);
    bw[i] = lk::measure_read_bandwidth_gbps(pool, static_cast<size_t>(o.bw_mib * (1 << 20)));
    std::printf(
        "threads %d: read bandwidth %.1f GB/s, f32 FMA peak %.0f GFLOPS, parallel_for "
        "%.2f us/call\n",
        o.threads[i], bw[i], lk::measure_fma_gflops(pool), parallel_for_overhead_us(pool));
  }
  return bw;
}

// One cell's matrices and inputs.
struct Cell {
  TensorType t;
  lk::WeightLayout layout;
  const uint8_t* w;
  size_t eb;  // bytes of one matrix
  int n_tok;
  bool int_path, bf16_path;
  lk::Bf16Kernel bf16;
};

// The cell's best time per pass as the sum of each matrix's best call, and the best wall time
// of a whole pass, in seconds.
std::pair<double, double> time_cell(const Options& o, const Cell& c, lk::ThreadPool& pool,
                                    const std::vector<float>& x, std::vector<float>& y,
                                    lk::QuantizedActs& xq, lk::Bf16Acts& xb) {
  const TensorType t = c.t;
  const int n_tok = c.n_tok;
  const bool int_path = c.int_path, bf16_path = c.bf16_path;
  // Each expert's matmul is timed on its own and its best time over the passes
  // kept: the weights of all experts are far larger than the LLC, so every timed
  // call streams from DRAM, and short per-call windows filter out the time slices
  // other processes take on a shared machine. The wall time of the best whole pass
  // (with the activation quantization of the int path) is shown too.
  std::vector<double> best_call(o.experts, 1e30);
  double best_pass = 1e30;
  for (int rep = 0; rep < o.reps + 1; ++rep) {  // the first pass warms up
    const auto t0 = std::chrono::steady_clock::now();
    if (int_path) lk::quantize_acts_for(pool, t, x.data(), o.cols, n_tok, o.cols, xq);
    if (bf16_path) lk::round_acts_bf16(x.data(), o.cols, n_tok, o.cols, xb);
    for (int64_t e = 0; e < o.experts; ++e) {
      const auto tc = std::chrono::steady_clock::now();
      float* ye = y.data() + e * o.rows * n_tok;
      if (bf16_path) {
        lk::matmul_bf16(c.bf16, pool, t, c.w + e * c.eb, o.rows, o.cols, xb, ye, o.rows);
      } else if (int_path) {
        lk::matmul(pool, t, c.w + e * c.eb, o.rows, o.cols, xq, ye, o.rows, c.layout);
      } else {
        lk::matmul(pool, t, c.w + e * c.eb, o.rows, o.cols, x.data(), o.cols, n_tok, ye, o.rows,
                   c.layout);
      }
      if (rep > 0) best_call[e] = std::min(best_call[e], seconds_since(tc));
    }
    if (rep > 0) best_pass = std::min(best_pass, seconds_since(t0));
  }
  double best = 0;
  for (double b : best_call) best += b;
  return {best, best_pass};
}

}  // namespace

int run(int argc, char** argv) {
  Options o;
  CLI::App app{"lynx-moe kernel benchmark: matmul GB/s per weight type vs. read bandwidth"};
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);
  lynx::bench::apply_simd_option(o.simd);

  if (o.rows > 0 || o.cols > 0) {
    if (o.rows <= 0 || o.cols <= 0) throw CLI::ValidationError("--rows/--cols", "give both");
    o.shapes = {std::to_string(o.rows) + "x" + std::to_string(o.cols)};
  }
  for (const auto& p : o.paths) {
    if (p != "float" && p != "int" && p != "bf16") {
      throw CLI::ValidationError("--paths", "unknown path " + p);
    }
  }
  for (const auto& t : o.types) parse_type(t);  // all options checked before any output
  const lk::Bf16Kernel bf16 = lk::bf16_kernel_by_name(o.bf16_kernel);
  for (const auto& sh : o.shapes) {
    int64_t r = 0, c = 0;
    parse_shape(sh, &r, &c);
  }

  const std::vector<double> bw = print_machine(o);
  std::printf(
      "\n| type | path | shape | n_tok | threads | ms/pass (sum of best calls) | ms/pass (best "
      "wall) | weight GB/s | %% of read bw | GFLOPS |\n");
  std::printf("|------|------|------|------:|--------:|------:|------:|------:|------:|------:|\n");

  const int max_tok = *std::max_element(o.tokens.begin(), o.tokens.end());
  for (const auto& shape : o.shapes) {
    parse_shape(shape, &o.rows, &o.cols);
    std::vector<float> x(static_cast<size_t>(max_tok * o.cols));
    std::mt19937 rng(2);
    std::normal_distribution<float> dist;
    for (auto& v : x) v = dist(rng);
    std::vector<float> y(static_cast<size_t>(max_tok * o.rows * o.experts));
    lk::QuantizedActs xq;
    lk::Bf16Acts xb;

    for (const auto& ts : o.types) {
      const TensorType t = parse_type(ts);
      size_t eb = 0;
      lk::WeightLayout layout = lk::WeightLayout::kRows;
      if (o.layout == "packed" && lk::can_interleave(t, o.rows, o.cols)) {
        layout = lk::WeightLayout::kInterleaved16;
      } else if (o.layout == "packed" && lk::can_panel16(t, o.rows, o.cols)) {
        layout = lk::WeightLayout::kPanel16;
      }
      if (o.cols % lk::block_elems(t) != 0) {
        std::printf("| %s | skipped: %lld columns are not a multiple of its block |\n", ts.c_str(),
                    static_cast<long long>(o.cols));
        continue;
      }
      const auto w = make_weights(t, o, layout, &eb);
      for (int n_tok : o.tokens) {
        for (const auto& path : o.paths) {
          const bool int_path = path == "int";
          const bool bf16_path = path == "bf16";
          if (int_path && !lk::has_int_path(t)) continue;
          if (bf16_path && !lk::has_bf16_path(t, layout, bf16)) continue;
          for (size_t ti = 0; ti < o.threads.size(); ++ti) {
            lk::ThreadPool pool(o.threads[ti]);
            const Cell cell{t, layout, w.get(), eb, n_tok, int_path, bf16_path, bf16};
            const auto [best, best_pass] = time_cell(o, cell, pool, x, y, xq, xb);
            const double bytes = static_cast<double>(eb) * o.experts;
            const double flops = 2.0 * o.rows * o.cols * o.experts * n_tok;
            std::printf("| %s | %s | %s | %d | %d | %.2f | %.2f | %.1f | %.0f%% | %.1f |\n",
                        ts.c_str(), path.c_str(), shape.c_str(), n_tok, o.threads[ti], best * 1e3,
                        best_pass * 1e3, bytes / best / 1e9, 100.0 * bytes / best / 1e9 / bw[ti],
                        flops / best / 1e9);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  return lynx::bench::run_main("bench_kernels", run, argc, argv);
}
