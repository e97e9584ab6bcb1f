// Models whose matrices are in the block types beyond F32/F16/BF16/Q8_0/Q4_0 (K-quants, IQ4,
// MXFP4, legacy Q4_1/Q5_0/Q5_1; fallback types where a row does not fit a super-block, as
// llama.cpp's quantizer writes them) against the NumPy reference's float64 logits
// (tests/reference/make_type_fixtures.py). Exact activations, and default activations for the
// types without an integer kernel (weights decoded to F32, F32 activations), are held to the
// F32 bound of golden_test.cc at every position, and the arg-max and the routing must match.
// Types with an integer kernel (all of these: Q8_K activations for the K-quants and IQ4_XS,
// Q8_0 blocks for the 32-element types) run it in the default mode, on every SIMD target of
// the machine, and are compared with the reference's actq goldens
// (activations rounded as ggml does) by golden_test.cc's rule for the Q8_0 integer path: every
// position within a rounding flip (kMaxNmseActqFlip), the positions without one (kMaxNmseActq)
// matching arg-max and routing, and at least half the positions without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "../simd_target.h"
#include "kernels/kernels.h"
#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx {
namespace {

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/types/";

// Normalized MSE (sum (a-b)^2 / sum b^2) bound of golden_test.cc's exact comparisons, and
// its bounds for the integer path against the actq goldens (why: golden_test.cc).
constexpr double kMaxNmse = 1e-5;
constexpr double kMaxNmseActq = 1e-12;
constexpr double kMaxNmseActqFlip = 1e-3;

using testing_util::nmse;

nlohmann::json manifest() {
  std::ifstream f(kDir + "goldens.json");
  EXPECT_TRUE(f.good()) << "missing " << kDir << "goldens.json";
  return nlohmann::json::parse(f);
}

TEST(TypeGolden, FixturesCoverEveryNewType) {
  std::set<std::string> types;
  const nlohmann::json m = manifest();
  for (const auto& x : m["fixtures"]) types.insert(x["type"].get<std::string>());
  for (const char* t : {"q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl",
                        "iq4_xs", "mxfp4"}) {
    EXPECT_TRUE(types.count(t)) << t;
  }
}

TEST(TypeGolden, LogitsArgmaxAndRoutingMatchReferenceInBothModes) {
  const nlohmann::json m = manifest();
  EXPECT_EQ(m["fixtures"].size(), 11u);
  for (const auto& x : m["fixtures"]) {
    const std::string name = x["name"];
    const auto tokens = x["tokens"].get<std::vector<int32_t>>();
    const int n_vocab = x["n_vocab"];
    const bool has_actq = x.contains("logits_actq_file");
    auto read_logits = [&](const std::string& file) {
      std::vector<float> v(tokens.size() * size_t(n_vocab));
      std::ifstream lf(kDir + file, std::ios::binary);
      lf.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
      EXPECT_TRUE(lf.good()) << file;
      return v;
    };
    auto model = Model::load(kDir + x["file"].get<std::string>());
    const ModelConfig& c = model->config();
    int actq_positions = 0, actq_tight = 0;
    for (bool exact : {true, false}) {
      const bool actq = !exact && has_actq;
      // The integer kernels differ per instruction set (VNNI, vpmaddubsw, plain Highway): the
      // actq goldens hold on each one the machine has.
      for (int64_t target : actq ? kernels::available_simd_targets() : std::vector<int64_t>{0}) {
        test::force_simd_target(target);
        SCOPED_TRACE(name + (exact ? ", exact_activations" : ", default activations") +
                     (target ? std::string(" on ") + kernels::simd_target_name(target) : ""));
        const std::string sfx = actq ? "_actq" : "";
        const auto argmax = x["argmax" + sfx].get<std::vector<int>>();
        const auto routing = x["routing" + sfx].get<std::vector<std::vector<std::vector<int>>>>();
        const std::vector<float> want = read_logits(x["logits" + sfx + "_file"].get<std::string>());
        std::vector<bool> tight(tokens.size(), true);
        ContextOptions co;
        co.n_threads = 2;
        co.n_ctx = 64;
        co.record_trace = true;
        co.exact_activations = exact;
        Context ctx(*model, co);
        const int32_t seq = ctx.new_sequence();
        std::vector<BatchToken> batch;
        for (size_t i = 0; i < tokens.size(); ++i) {
          batch.push_back({tokens[i], seq, int32_t(i), kTokenPrefill, true});
        }
        ctx.eval(batch);
        ASSERT_EQ(ctx.n_logits(), int(tokens.size()));
        for (size_t p = 0; p < tokens.size(); ++p) {
          const auto got = ctx.logits(int(p));
          std::span<const float> w(want.data() + p * size_t(n_vocab), size_t(n_vocab));
          const double e = nmse(got, w);
          if (actq) {
            EXPECT_LE(e, kMaxNmseActqFlip) << "position " << p;
            tight[p] = e <= kMaxNmseActq;
            ++actq_positions;
            actq_tight += tight[p];
            if (!tight[p]) continue;  // a rounding flip may move a close arg-max
          } else {
            EXPECT_LE(e, kMaxNmse) << "position " << p;
          }
          const int am = int(std::max_element(got.begin(), got.end()) - got.begin());
          // The golden's arg-max, or a token tied with it in the golden (equal float32
          // logits: q2_K's actq golden has one), which may go either way.
          EXPECT_TRUE(am == argmax[p] || w[size_t(am)] == w[size_t(argmax[p])])
              << "position " << p << ": arg-max " << am << ", golden " << argmax[p];
        }
        // Routing: the k largest router logits per layer and position, ascending ids.
        for (const TraceRecord& rec : ctx.take_trace()) {
          for (int t = 0; t < rec.n_tokens; ++t) {
            if (!tight[size_t(t)]) continue;
            std::vector<int> ids(size_t(c.n_expert));
            for (int e = 0; e < c.n_expert; ++e) ids[size_t(e)] = e;
            const float* l = &rec.logits[size_t(t) * size_t(c.n_expert)];
            std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return l[a] > l[b]; });
            ids.resize(size_t(c.n_expert_used));
            std::sort(ids.begin(), ids.end());
            EXPECT_EQ(ids, routing[size_t(rec.layer)][size_t(t)])
                << "layer " << rec.layer << " position " << t;
          }
        }
      }
    }
    test::force_simd_target(0);
    EXPECT_GE(2 * actq_tight, actq_positions)
        << name << ": too many positions off the actq goldens";
  }
}

}  // namespace
}  // namespace lynx
