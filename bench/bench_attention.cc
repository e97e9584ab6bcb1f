// Attention of one layer on one thread: one query token (decode) at position ctx - 1, or with
// --tokens N a prefill chunk of the last N positions, over a KV cache of ctx rows, every KV
// head's group of query heads through the blocked kernel (kernels/attention.h), per cache type
// and context length. Prints microseconds per layer, GFLOPS (2 * (hd + hd_v) flops per key per
// query head) and the cache's read rate. Asserts nothing. The cache is laid out as the engine lays
// it out (head-major, in transparent huge pages), or as it was before (--interleaved-rows,
// --small-pages).
//   build/release/bin/bench_attention [--ctx 512,8192,32768] [--types f32,f16,q8_0]
//       [--heads 32] [--kv-heads 4] [--hd 128] [--passes 5] [--interleaved-rows]
//       [--small-pages] [--simd AVX2]
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/attention.h"
#include "model/scratch_vector.h"

namespace {

namespace lk = lynx::kernels;
using lynx::gguf::TensorType;

struct Shape {
  std::vector<int> ctx = {512, 8192, 32768};
  std::vector<std::string> types = {"f32", "f16", "q8_0"};
  int heads = 32, kv_heads = 4, hd = 128, passes = 5;
  int tokens = 1;  // query tokens of the sequence, the last ones (a prefill chunk)
};

TensorType parse_type(const std::string& s) {
  if (s == "f32") return TensorType::F32;
  if (s == "f16") return TensorType::F16;
  if (s == "q8_0") return TensorType::Q8_0;
  throw CLI::ValidationError("--types", "f32, f16 or q8_0, not " + s);
}

int run(int argc, char** argv) {
  Shape s;
  std::string simd;
  bool small_pages = false, interleaved = false;
  CLI::App app{"bench_attention: decode attention per layer, one thread"};
  app.add_option("--ctx", s.ctx, "context lengths")->delimiter(',');
  app.add_option("--types", s.types, "KV cache types (f32, f16, q8_0)")->delimiter(',');
  app.add_option("--heads", s.heads, "query heads");
  app.add_option("--kv-heads", s.kv_heads, "KV heads");
  app.add_option("--hd", s.hd, "head dims");
  app.add_option("--passes", s.passes, "passes (best reported)");
  app.add_option("--tokens", s.tokens, "query tokens at the context's last positions, in tiles")
      ->check(CLI::PositiveNumber);
  app.add_flag("--small-pages", small_pages, "the cache in 4 KiB pages");
  app.add_flag("--interleaved-rows", interleaved, "each position's KV heads side by side");
  lynx::bench::add_simd_option(app, simd);
  CLI11_PARSE(app, argc, argv);
  lynx::bench::apply_simd_option(simd);
  if (s.heads % s.kv_heads != 0) throw CLI::ValidationError("--heads", "a multiple of --kv-heads");
  const int G = s.heads / s.kv_heads, Q = s.heads * s.hd;

  std::printf("| type | ctx | us/layer | GFLOPS | GB/s |\n|---|--:|--:|--:|--:|\n");
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> q(static_cast<size_t>(Q) * size_t(s.tokens)), out(q.size()),
      row(static_cast<size_t>(s.hd)), scratch;
  for (float& x : q) x = nd(rng);
  for (const std::string& tname : s.types) {
    const TensorType t = parse_type(tname);
    const size_t head = lk::kv_cache_head_bytes(t, s.hd), row_bytes = head * size_t(s.kv_heads);
    for (int ctx : s.ctx) {
      // The cache as the engine allocates it (transparent huge pages from 4 MiB on, see
      // model/scratch_vector.h) or, with --small-pages, in 4 KiB pages.
      using Bytes = std::vector<uint8_t, lynx::DefaultInitAllocator<uint8_t>>;
      Bytes k, v;
      std::vector<uint8_t> ks, vs;
      if (small_pages) {
        ks.resize(row_bytes * size_t(ctx));
        vs.resize(ks.size());
      } else {
        k.resize(row_bytes * size_t(ctx));
        v.resize(k.size());
      }
      uint8_t* kd = small_pages ? ks.data() : k.data();
      uint8_t* vd = small_pages ? vs.data() : v.data();
      // Head-major as the engine lays the cache out (model/forward.h, kv_head_offset), or
      // with --interleaved-rows one row of every KV head per position.
      auto offset = [&](int h, int p) {
        return interleaved ? size_t(p) * row_bytes + size_t(h) * head
                           : (size_t(h) * size_t(ctx) + size_t(p)) * head;
      };
      for (int p = 0; p < ctx; ++p) {
        for (int h = 0; h < s.kv_heads; ++h) {
          for (float& x : row) x = nd(rng);
          lk::kv_cache_store(t, row.data(), kd + offset(h, p), s.hd);
          for (float& x : row) x = nd(rng);
          lk::kv_cache_store(t, row.data(), vd + offset(h, p), s.hd);
        }
      }
      // Query token i (row i of q / out) at position ctx - n + i, cut into tiles of
      // attention_tile_tokens as the forward pass cuts a prefill chunk.
      const int n = std::min(s.tokens, ctx), tile = lk::attention_tile_tokens(G);
      std::vector<int32_t> toks(static_cast<size_t>(n)), poss(toks.size());
      for (int i = 0; i < n; ++i) {
        toks[size_t(i)] = i;
        poss[size_t(i)] = ctx - n + i;
      }
      double best = 1e30;
      for (int pass = 0; pass < s.passes; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int b = 0; b < n; b += tile) {
          for (int h = 0; h < s.kv_heads; ++h) {
            lk::AttentionGroup a;
            a.q = q.data() + size_t(h) * G * s.hd;
            a.q_stride = Q;
            a.out = out.data() + size_t(h) * G * s.hd;
            a.out_stride = Q;
            a.tok = &toks[size_t(b)];
            a.pos = &poss[size_t(b)];
            a.n_tok = std::min(tile, n - b);
            a.n_head = G;
            a.hd = s.hd;
            a.k = kd + offset(h, 0);
            a.v = vd + offset(h, 0);
            a.k_stride = a.v_stride = int64_t(interleaved ? row_bytes : head);
            a.k_type = a.v_type = t;
            a.scale = 0.088f;
            lk::attention_group(a, scratch);
          }
        }
        best = std::min(best, lynx::bench::seconds_since(t0));
      }
      double keys = 0;  // visible keys summed over the query tokens
      for (int i = 0; i < n; ++i) keys += double(poss[size_t(i)]) + 1;
      const double flops = 4.0 * s.hd * keys * s.heads;
      const double bytes = 2.0 * double(row_bytes) * ctx;
      std::printf("| %s | %d | %.1f | %.1f | %.2f |\n", tname.c_str(), ctx, best * 1e6,
                  flops / best * 1e-9, bytes / best * 1e-9);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return lynx::bench::run_main("bench_attention", run, argc, argv);
}
