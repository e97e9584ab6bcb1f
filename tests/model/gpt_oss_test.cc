// gpt-oss against the independent NumPy reference (tests/reference/gpt_oss_ref.py; fixtures
// from make_gpt_oss_fixtures.py): logits at every position by prefill, token by token and
// batched with another sequence, for the released layout (MXFP4 experts, Q8_0 elsewhere) and
// F32 matrices with F16 experts; the attention sink, the sliding window and the clamped SwiGLU
// checked by hand and end to end; bad files named; the real-shape presets.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "../scratch.h"
#include "family_harness.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/gpt_oss_ops.h"
#include "model/weights.h"
#include "routing/lynx.h"

namespace lynx {
namespace {

const testing_util::FamilyFixtures kFx("gpt-oss");
const std::string kDir = kFx.dir();
const char* const kVariants[] = {"tiny-gpt-oss", "tiny-gpt-oss-f16-experts"};

using testing_util::exact_ctx;
using testing_util::expect_load_error;
using testing_util::rel_err;

constexpr double kTol = 1e-5;

// Every position's logits by prefill, token by token, and batched with another sequence.
void check_goldens(const Model& m, const std::string& name) {
  testing_util::expect_goldens_at_every_position(kFx, m, name, kTol);
}

TEST(GptOss, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* name : kVariants) {
    auto m = Model::load(kDir + name + ".gguf");
    const ModelConfig& c = m->config();
    ASSERT_EQ(c.arch, "gpt-oss");
    EXPECT_EQ(c.n_swa, 4);
    EXPECT_EQ(c.layer_kinds[0].window, 4);  // even layers: sliding window
    EXPECT_EQ(c.layer_kinds[1].window, 0);
    EXPECT_EQ(c.layer_kinds[1].ffn, FfnKind::kMoe);
    EXPECT_EQ(c.rope, RopeType::kNeox);
    EXPECT_EQ(c.gating.func, GatingFunc::kSoftmaxWeight);
    EXPECT_EQ(c.expert_act, ExpertAct::kSwigluOai);
    EXPECT_EQ(m->layer(0).expert_act, ExpertAct::kSwigluOai);
    ASSERT_NE(m->layer(1).attn_sinks, nullptr);
    ASSERT_NE(m->layer(1).down_exps_b, nullptr);
    // YaRN as llama.cpp's generic rope_yarn: cos / sin times 1 + 0.1 ln 32, scale unchanged.
    EXPECT_TRUE(c.yarn.on);
    EXPECT_NEAR(c.yarn.mscale, 1 + 0.1 * std::log(32.0), 1e-6);
    EXPECT_EQ(c.yarn.kq_mul, 1.f);
    const bool released = std::string(name) == kVariants[0];
    EXPECT_EQ(m->layer(0).up_exps.type, released ? gguf::TensorType::MXFP4 : gguf::TensorType::F16);
    EXPECT_EQ(m->layer(0).wq.type, released ? gguf::TensorType::Q8_0 : gguf::TensorType::F32);
    check_goldens(*m, name);
  }
}

TEST(GptOss, SoftmaxWithSinkByHand) {
  // Scores 0 and ln 2, sink 0: exp = 1, 2 and 1 in the denominator -> 1/4, 2/4.
  float x[2] = {0.f, std::log(2.f)};
  softmax_with_sink(x, 2, 0.f);
  EXPECT_NEAR(x[0], 0.25f, 1e-7);
  EXPECT_NEAR(x[1], 0.5f, 1e-7);
  // A sink far below the scores leaves the plain softmax: 1/3, 2/3.
  float y[2] = {0.f, std::log(2.f)};
  softmax_with_sink(y, 2, -1e30f);
  EXPECT_NEAR(y[0], 1.f / 3, 1e-7);
  EXPECT_NEAR(y[1], 2.f / 3, 1e-7);
  // The sink above every score is the maximum that is subtracted: no overflow at 1000.
  float z[2] = {1000.f, 999.f};
  softmax_with_sink(z, 2, 1000.f);
  const float e1 = std::exp(-1.f);
  EXPECT_NEAR(z[0], 1 / (2 + e1), 1e-6);
  EXPECT_NEAR(z[1], e1 / (2 + e1), 1e-6);
  // No keys at all: nothing to weigh (n = 0 is harmless).
  softmax_with_sink(z, 0, 0.f);
}

TEST(GptOss, WindowStartByHand) {
  // Window 4: query 10 sees keys 7, 8, 9, 10 (10 - 6 >= 4 is masked, 10 - 7 = 3 is not).
  EXPECT_EQ(window_start(10, 4), 7);
  EXPECT_EQ(window_start(3, 4), 0);
  EXPECT_EQ(window_start(4, 4), 1);
  EXPECT_EQ(window_start(10, 1), 10);  // only itself
  EXPECT_EQ(window_start(10, 0), 0);   // no window
}

TEST(GptOss, ClampedSwigluByHand) {
  const double s1702 = 1 / (1 + std::exp(-1.702));
  const float gate[] = {0.f, 1.f, 10.f, 1.f, 1.f, -10.f};
  const float up[] = {5.f, 0.f, 0.f, 10.f, -10.f, 1.f};
  float out[6];
  swiglu_oai(gate, up, out, 6);
  EXPECT_EQ(out[0], 0.f);                                           // gate 0
  EXPECT_NEAR(out[1], s1702 * 1, 1e-6);                             // (0 + 1)
  EXPECT_NEAR(out[2], 7 / (1 + std::exp(-1.702 * 7)) * 1, 1e-5);    // gate clamped to 7
  EXPECT_NEAR(out[3], s1702 * 8, 1e-5);                             // up clamped to 7, + 1
  EXPECT_NEAR(out[4], s1702 * -6, 1e-5);                            // up clamped to -7, + 1
  EXPECT_NEAR(out[5], -10 / (1 + std::exp(1.702 * 10)) * 2, 1e-9);  // gate not clamped below
  EXPECT_LT(out[5], 0.f);
}

// Copies a fixture, letting `edit` change metadata and `tensor` replace or drop tensors.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using TensorEdit = std::function<bool(const gguf::TensorInfo&, gguf::Writer&)>;
std::string rewrite(const std::string& name, const std::string& out, const KvEdit& edit,
                    const TensorEdit& tensor) {
  gguf::File f = gguf::File::open(kDir + name + ".gguf");
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (edit(kv.key, v)) w.set(kv.key, v);
  }
  for (const auto& t : f.tensors()) {
    if (tensor(t, w)) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
  }
  const std::string path = test::scratch_path("gpt_oss_" + out + ".gguf");
  w.write(path);
  return path;
}
const auto kAllKv = [](const std::string&, gguf::Value&) { return true; };

// The F32 / F16-experts fixture cut to its first layer (a sliding-window one), with layer 0's sinks
// set to `sink` when given.
std::string one_layer(const std::string& out, const float* sink) {
  std::vector<float> sinks(4, sink ? *sink : 0.f);
  return rewrite(
      kVariants[1], out,
      [](const std::string& k, gguf::Value& v) {
        if (k == "gpt-oss.block_count") v = gguf::Value::u32(1);
        return true;
      },
      [&, sink](const gguf::TensorInfo& t, gguf::Writer& w) {
        if (t.name.rfind("blk.1.", 0) == 0) return true;
        if (!sink || t.name != "blk.0.attn_sinks.weight") return false;
        w.add_tensor(t.name, gguf::TensorType::F32, {4}, sinks.data(), sinks.size() * 4);
        return true;
      });
}

// Logits at the last position of `toks`, prefilled in one batch.
std::vector<float> last_logits(const Model& m, const std::vector<int32_t>& toks) {
  Context ctx(m, exact_ctx());
  const int32_t s = ctx.new_sequence();
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < toks.size(); ++i) {
    batch.push_back({toks[i], s, int32_t(i), kTokenPrefill, i + 1 == toks.size()});
  }
  ctx.eval(batch);
  const auto l = ctx.logits(0);
  return {l.begin(), l.end()};
}

// With one sliding-window layer (window 4), the last position's logits depend on the tokens
// at the last 4 positions only: a change 4 positions back leaves them bit for bit, one 3
// positions back changes them.
TEST(GptOss, SlidingWindowMasksKeysOutsideIt) {
  auto m = Model::load(one_layer("window", nullptr));
  ASSERT_EQ(m->config().n_layer, 1);
  ASSERT_EQ(m->config().layer_kinds[0].window, 4);
  const std::vector<int32_t> base = {5, 9, 11, 20, 33, 47, 60, 72, 81, 99};
  const auto want = last_logits(*m, base);
  auto outside = base, inside = base;
  outside[10 - 1 - 4] = 200;  // position 5: 9 - 5 = 4 >= 4, masked
  outside[0] = 201;
  inside[10 - 1 - 3] = 200;  // position 6: 9 - 6 = 3, seen
  EXPECT_EQ(last_logits(*m, outside), want);
  EXPECT_NE(last_logits(*m, inside), want);
}

// A sink far above every score takes all of the attention: the block then adds only the
// output bias, and the last position's logits no longer depend on the tokens before it; with
// sinks at 0 they do.
TEST(GptOss, SinkInTheDenominatorTakesTheAttention) {
  const float big = 1e4f, zero = 0.f;
  auto sunk = Model::load(one_layer("sink_big", &big));
  auto plain = Model::load(one_layer("sink_zero", &zero));
  const std::vector<int32_t> a = {5, 9, 11, 20}, b = {150, 160, 170, 20};
  EXPECT_EQ(last_logits(*sunk, a), last_logits(*sunk, b));
  EXPECT_NE(last_logits(*plain, a), last_logits(*plain, b));
}

std::vector<int32_t> long_tokens() {
  std::ifstream f(kDir + "tokens_long.txt");
  std::string s;
  std::getline(f, s);
  std::vector<int32_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// The window layer keeps a ring of window - 1 + 64 = 67 KV rows (a step's chunk when longer),
// the full layer every position; 80 tokens wrap the ring. Token by token, in chunks of 16,
// and with a ring grown mid-sequence by a 70-token chunk, every position matches the
// reference; a 10-token rollback keeps its window, one to position 10 is refused.
TEST(GptOss, WindowLayerCacheIsARingOfTheRecentPositions) {
  auto m = Model::load(kDir + std::string(kVariants[0]) + ".gguf");
  const ModelConfig& c = m->config();
  const auto toks = long_tokens();
  const int n = int(toks.size()), V = c.n_vocab;
  ASSERT_EQ(n, 80);
  std::vector<float> want(size_t(n) * V);
  {
    std::ifstream f(kDir + "tiny-gpt-oss.long.logits.f32", std::ios::binary);
    f.read(reinterpret_cast<char*>(want.data()), std::streamsize(want.size() * 4));
    ASSERT_TRUE(f.good());
  }
  ContextOptions o = exact_ctx();
  o.n_ctx = 256;
  auto run = [&](Context& ctx, int32_t s, int from, int to) {  // positions [from, to)
    std::vector<BatchToken> batch;
    for (int i = from; i < to; ++i) batch.push_back({toks[size_t(i)], s, i, kTokenPrefill, true});
    ctx.eval(batch);
    for (int i = from; i < to; ++i) {
      EXPECT_LT(rel_err(ctx.logits(i - from), &want[size_t(i) * V], size_t(V)), kTol)
          << "position " << i;
    }
  };
  {
    Context ctx(*m, o);
    const int32_t s = ctx.new_sequence();
    for (int i = 0; i < n; ++i) run(ctx, s, i, i + 1);
    // F32 rows of K and V (2 KV heads x 48): the full layer grew to 128 rows, the window
    // layer holds 3 + 64.
    const size_t row = size_t(c.kv_dim()) * 2 * sizeof(float);
    EXPECT_EQ(ctx.kv_cache_bytes(), (128 + 67) * row);
    // A rollback within the ring's slack finds its window; one further back is refused.
    ctx.truncate_sequence(s, 70);
    run(ctx, s, 70, n);
    try {
      ctx.truncate_sequence(s, 10);
      ADD_FAILURE() << "truncating past the ring did not fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sliding-window layers (window 4)"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(ctx.sequence_length(s), n);
  }
  {
    Context ctx(*m, o);
    const int32_t s = ctx.new_sequence();
    for (int i = 0; i < n; i += 16) run(ctx, s, i, i + 16);
  }
  {
    Context ctx(*m, o);
    const int32_t s = ctx.new_sequence();
    run(ctx, s, 0, 10);   // ring of 67
    run(ctx, s, 10, 80);  // a 70-token chunk: the ring grows to 73, rows moved
  }
}

TEST(GptOss, BadFilesAreNamed) {
  const std::string name = kVariants[0];
  auto drop = [](const char* tensor) {
    return [tensor](const gguf::TensorInfo& t, gguf::Writer&) { return t.name == tensor; };
  };
  expect_load_error(rewrite(name, "nosink", kAllKv, drop("blk.1.attn_sinks.weight")),
                    "missing tensor 'blk.1.attn_sinks.weight'");
  expect_load_error(rewrite(name, "nobias", kAllKv, drop("blk.0.ffn_down_exps.bias")),
                    "missing tensor 'blk.0.ffn_down_exps.bias'");
  expect_load_error(rewrite(name, "norouterb", kAllKv, drop("blk.0.ffn_gate_inp.bias")),
                    "missing tensor 'blk.0.ffn_gate_inp.bias'");
  expect_load_error(rewrite(name, "nopostnorm", kAllKv, drop("blk.1.post_attention_norm.weight")),
                    "missing tensor 'blk.1.post_attention_norm.weight'");
  // Five sinks for four heads.
  std::vector<float> five(5, 0.f);
  expect_load_error(rewrite(name, "sinkshape", kAllKv,
                            [&](const gguf::TensorInfo& t, gguf::Writer& w) {
                              if (t.name != "blk.0.attn_sinks.weight") return false;
                              w.add_tensor(t.name, gguf::TensorType::F32, {5}, five.data(), 20);
                              return true;
                            }),
                    "tensor 'blk.0.attn_sinks.weight' has shape [5], expected [4]");
  // An expert bias table one expert short.
  std::vector<float> bias(size_t(96 * 15), 0.f);
  expect_load_error(
      rewrite(name, "biasshape", kAllKv,
              [&](const gguf::TensorInfo& t, gguf::Writer& w) {
                if (t.name != "blk.1.ffn_up_exps.bias") return false;
                w.add_tensor(t.name, gguf::TensorType::F32, {96, 15}, bias.data(), bias.size() * 4);
                return true;
              }),
      "tensor 'blk.1.ffn_up_exps.bias' has shape");
  expect_load_error(rewrite(
                        name, "noswa",
                        [](const std::string& k, gguf::Value&) {
                          return k != "gpt-oss.attention.sliding_window";
                        },
                        [](auto&, auto&) { return false; }),
                    "gpt-oss.attention.sliding_window");
}

// The presets carry the released configs, and their routing gets the published Lynx setting
// (GPT-OSS-120B: 4 of 128 -> alpha 3, beta 2) from the k/N table.
TEST(GptOss, SynthPresetsHaveTheReleasedShapes) {
  const SynthShape s20 = synth_shape("gpt-oss-20b"), s120 = synth_shape("gpt-oss-120b");
  EXPECT_EQ(s20.arch, "gpt-oss");
  EXPECT_EQ(s20.n_layer, 24);
  EXPECT_EQ(s120.n_layer, 36);
  EXPECT_EQ(s20.n_expert, 32);
  EXPECT_EQ(s120.n_expert, 128);
  for (const SynthShape& s : {s20, s120}) {
    EXPECT_EQ(s.n_embd, 2880);
    EXPECT_EQ(s.n_head, 64);
    EXPECT_EQ(s.n_head_kv, 8);
    EXPECT_EQ(s.head_dim, 64);
    EXPECT_EQ(s.n_ff_exp, 2880);
    EXPECT_EQ(s.n_expert_used, 4);
    EXPECT_EQ(s.n_vocab, 201088);
    EXPECT_EQ(s.sliding_window, 128);
    EXPECT_EQ(s.rope_base, 150000.f);
    EXPECT_EQ(s.yarn_factor, 32.f);
    EXPECT_EQ(s.yarn_orig_ctx, 4096);
    EXPECT_TRUE(s.mxfp4_experts);
  }
  const auto ab = routing::lynx_default_alpha_beta(s120.n_expert_used, s120.n_expert);
  EXPECT_EQ(ab.alpha, 3.f);
  EXPECT_EQ(ab.beta, 2.f);
  // A reduced 20b (1 layer, 4 experts, small vocabulary) loads with the preset's layout.
  SynthOptions o;
  o.shape = s20;
  o.shape.n_layer = 1;
  o.shape.n_expert = 4;
  o.shape.n_vocab = 300;
  o.type = gguf::TensorType::Q8_0;
  const std::string path = test::scratch_path("gpt_oss_20b.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  EXPECT_EQ(m->config().q_dim(), 4096);
  EXPECT_EQ(m->config().layer_kinds[0].window, 128);
  EXPECT_EQ(m->layer(0).gate_exps.type, gguf::TensorType::MXFP4);
  EXPECT_EQ(m->layer(0).wq.type, gguf::TensorType::Q8_0);
  // On request the experts take another type.
  o.expert_type = gguf::TensorType::F16;
  write_synth_model(o, path);
  EXPECT_EQ(Model::load(path)->layer(0).down_exps.type, gguf::TensorType::F16);
}

}  // namespace
}  // namespace lynx
