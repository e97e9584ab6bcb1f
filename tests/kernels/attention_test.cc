// The blocked GQA attention kernel against its scalar twin: odd head dims, 1-70 query tokens,
// earlier context, sliding windows over ring buffers, attention sinks, every SIMD target.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "test_util.h"

namespace lynx::kernels {
namespace {

using testing::for_each_target;
using testing::random_floats;

struct Case {
  int hd, n_head, n_tok, past, window;
  bool ring, sinks;
};

// Runs one case: n_tok query tokens at positions past..past+n_tok-1, interleaved in the batch
// with rows of another sequence (batch row 2i+1), over a cache of past + n_tok positions.
void run_case(const Case& cs, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "hd " << cs.hd << " heads " << cs.n_head << " tokens "
                                    << cs.n_tok << " past " << cs.past << " window " << cs.window
                                    << " ring " << cs.ring << " sinks " << cs.sinks);
  const int len = cs.past + cs.n_tok;
  // A ring as the cache keeps it: the window - 1 older positions plus the step's tokens.
  const int ring = cs.ring ? cs.window - 1 + cs.n_tok : 0;
  const int rows = ring > 0 ? ring : len;
  const int64_t kv_stride = int64_t(cs.hd) * 3 + 1;  // other KV heads and odd padding between
  const int64_t q_stride = int64_t(cs.hd) * cs.n_head + 5;
  const int batch_rows = 2 * cs.n_tok;
  std::vector<float> q = random_floats(size_t(batch_rows) * q_stride, seed, 1.f);
  std::vector<float> k(size_t(rows) * kv_stride, NAN), v(size_t(rows) * kv_stride, NAN);
  // Positions the ring has overwritten are never read; rows hold the latest position.
  const std::vector<float> kr = random_floats(size_t(len) * cs.hd, seed + 1, 1.f);
  const std::vector<float> vr = random_floats(size_t(len) * cs.hd, seed + 2, 1.f);
  for (int p = 0; p < len; ++p) {
    const int64_t row = ring > 0 ? p % ring : p;
    std::copy_n(&kr[size_t(p) * cs.hd], cs.hd, &k[size_t(row * kv_stride)]);
    std::copy_n(&vr[size_t(p) * cs.hd], cs.hd, &v[size_t(row * kv_stride)]);
  }
  std::vector<float> sinks = random_floats(size_t(cs.n_head), seed + 3, 2.f);
  std::vector<int32_t> tok(size_t(cs.n_tok)), pos(size_t(cs.n_tok));
  for (int i = 0; i < cs.n_tok; ++i) {
    tok[size_t(i)] = 2 * i + 1;
    pos[size_t(i)] = cs.past + i;
  }
  AttentionGroup a;
  a.q = q.data();
  a.q_stride = q_stride;
  a.out_stride = q_stride;
  a.tok = tok.data();
  a.pos = pos.data();
  a.n_tok = cs.n_tok;
  a.n_head = cs.n_head;
  a.hd = cs.hd;
  a.k = k.data();
  a.v = v.data();
  a.kv_stride = kv_stride;
  a.ring = ring;
  a.window = cs.window;
  a.scale = 1.f / std::sqrt(float(cs.hd));
  a.sinks = cs.sinks ? sinks.data() : nullptr;

  std::vector<float> want(size_t(batch_rows) * q_stride, -7.f);
  a.out = want.data();
  ref::attention_group(a);
  for_each_target([&] {
    std::vector<float> got(want.size(), -7.f), scratch;
    a.out = got.data();
    attention_group(a, scratch);
    for (size_t r = 0; r < size_t(batch_rows); ++r) {
      for (size_t c = 0; c < size_t(q_stride); ++c) {
        const size_t x = r * size_t(q_stride) + c;
        const bool written = r % 2 == 1 && c < size_t(cs.hd) * size_t(cs.n_head);
        if (!written) {
          ASSERT_EQ(got[x], -7.f) << "wrote outside its rows at " << r << "," << c;
          continue;
        }
        // The outputs are convex combinations of unit-normal values: absolute error in f32.
        ASSERT_NEAR(got[x], want[x], 2e-5 + 2e-5 * std::abs(want[x]))
            << "row " << r << " col " << c;
      }
    }
  });
}

TEST(Attention, BlockedMatchesScalarTwinCausal) {
  uint32_t seed = 1;
  for (int hd : {1, 3, 17, 64, 128}) {
    for (int n_head : {1, 3, 4, 8}) {
      for (int n_tok : {1, 2, 5, 16, 33, 70}) {
        run_case({hd, n_head, n_tok, 0, 0, false, false}, seed++);
      }
    }
  }
}

TEST(Attention, BlockedMatchesScalarTwinWithPastContext) {
  uint32_t seed = 100;
  for (int hd : {5, 64, 130}) {
    for (int n_tok : {1, 7, 64, 70}) run_case({hd, 4, n_tok, 45, 0, false, false}, seed++);
  }
}

TEST(Attention, BlockedMatchesScalarTwinWindowsRingsAndSinks) {
  uint32_t seed = 200;
  for (int hd : {3, 64}) {
    for (int n_tok : {1, 9, 40, 70}) {
      for (int window : {1, 4, 33}) {
        for (bool ring : {false, true}) {
          for (bool sinks : {false, true}) {
            run_case({hd, 8, n_tok, 50, window, ring, sinks}, seed++);
          }
        }
      }
      run_case({hd, 2, n_tok, 3, 0, false, true}, seed++);  // sinks without a window
    }
  }
}

TEST(Attention, LargeScoresStayFinite) {
  // Scores in the hundreds: a naive exp overflows; the online max keeps every term <= 1.
  const int hd = 16, n_tok = 20;
  std::vector<float> q(size_t(n_tok) * hd, 30.f), k(size_t(n_tok) * hd), v(size_t(n_tok) * hd);
  for (int p = 0; p < n_tok; ++p) {
    for (int d = 0; d < hd; ++d) {
      k[size_t(p * hd + d)] = float(p % 3);
      v[size_t(p * hd + d)] = float(p);
    }
  }
  std::vector<int32_t> tok(static_cast<size_t>(n_tok)), pos(static_cast<size_t>(n_tok));
  for (int i = 0; i < n_tok; ++i) tok[size_t(i)] = pos[size_t(i)] = i;
  AttentionGroup a;
  a.q = q.data();
  a.q_stride = hd;
  a.out_stride = hd;
  a.tok = tok.data();
  a.pos = pos.data();
  a.n_tok = n_tok;
  a.n_head = 1;
  a.hd = hd;
  a.k = k.data();
  a.v = v.data();
  a.kv_stride = hd;
  a.scale = 1.f;
  std::vector<float> want(q.size()), got(q.size()), scratch;
  a.out = want.data();
  ref::attention_group(a);
  for_each_target([&] {
    a.out = got.data();
    attention_group(a, scratch);
    for (size_t x = 0; x < got.size(); ++x) {
      ASSERT_TRUE(std::isfinite(got[x])) << x;
      ASSERT_NEAR(got[x], want[x], 1e-4 * (1 + std::abs(want[x]))) << x;
    }
  });
}

TEST(Attention, PositionOutOfRangeIsAnError) {
  std::vector<float> q(4), k(4), v(4), out(4), scratch;
  const int32_t tok = 0, pos = 1 << 24;
  AttentionGroup a;
  a.q = q.data();
  a.out = out.data();
  a.tok = &tok;
  a.pos = &pos;
  a.n_tok = 1;
  a.n_head = 1;
  a.hd = 4;
  a.k = k.data();
  a.v = v.data();
  EXPECT_THROW(attention_group(a, scratch), std::exception);
}

}  // namespace
}  // namespace lynx::kernels
