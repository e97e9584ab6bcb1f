// lynx/imatrix.h and quantize --imatrix: the sums a run collects (checked against a hand
// computation from the file's tensors), the importance-weighted quantizers (lower weighted
// error than the reference ones), the two file formats (round trips; broken files rejected
// with the defect named).
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "kernels/kernels.h"
#include "lynx/context.h"
#include "lynx/error.h"
#include "lynx/imatrix.h"
#include "lynx/model.h"
#include "lynx/quantize.h"
#include "lynx/synth.h"
#include "model/quantize_weighted.h"

namespace lynx {
namespace {

using gguf::TensorType;

// ctest runs every test in its own process, several at once: the pid keeps their files apart.
std::string tmp(const std::string& name) {
  return std::string(LYNX_BINARY_DIR) + "/imatrix_test_" + std::to_string(::getpid()) + "_" + name;
}

// A one-layer F32 tiny-mixtral (8 experts, k = 2, n_embd 256), written once.
const std::string& tiny_model() {
  static const std::string path = [] {
    SynthOptions so;
    so.shape = synth_shape("tiny-mixtral");
    so.shape.n_layer = 1;
    so.shape.n_vocab = 300;
    so.type = TensorType::F32;
    const std::string p = tmp("tiny_f32.gguf");
    write_synth_model(so, p);
    return p;
  }();
  return path;
}

std::vector<int32_t> text_tokens(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = (i * 37 + 11) % 300;
  return t;
}

std::vector<float> f32_tensor(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo& t = f.tensor(name);
  EXPECT_EQ(t.type, TensorType::F32);
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  std::memcpy(v.data(), t.data, 4 * v.size());
  return v;
}

// The attention projections of layer 0 see rmsnorm(embedding) * attn_norm of every token,
// which does not depend on position: their sums are computed here in double straight from
// the file's tensors and must match what the run collected.
TEST(Imatrix, LayerZeroAttentionSumsMatchAHandComputation) {
  auto model = Model::load(tiny_model());
  const gguf::File f = gguf::File::open(tiny_model());
  const int E = model->config().n_embd;
  const float eps = model->config().rms_eps;
  const auto emb = f32_tensor(f, "token_embd.weight");
  const auto norm = f32_tensor(f, "blk.0.attn_norm.weight");
  const auto tokens = text_tokens(48);
  ImatrixOptions o;
  o.n_ctx = 16;
  o.n_threads = 2;
  o.dataset = "hand";
  const Imatrix im = compute_imatrix(*model, tokens, /*bos=*/-1, o);
  EXPECT_EQ(im.chunk_count, 3u);
  EXPECT_EQ(im.chunk_size, 16u);
  ASSERT_EQ(im.datasets, std::vector<std::string>{"hand"});

  std::vector<double> want(static_cast<size_t>(E), 0.0);
  for (int32_t t : tokens) {
    const float* x = &emb[size_t(t) * size_t(E)];
    double ss = 0;
    for (int j = 0; j < E; ++j) ss += double(x[j]) * x[j];
    const double inv = 1.0 / std::sqrt(ss / E + eps);
    for (int j = 0; j < E; ++j) {
      const double v = x[j] * inv * norm[size_t(j)];
      want[size_t(j)] += v * v;
    }
  }
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(im.entries.count(name));
    const ImatrixEntry& e = im.entries.at(name);
    ASSERT_EQ(e.counts, std::vector<int64_t>{48});
    ASSERT_EQ(e.in_sum2.size(), size_t(E));
    for (int j = 0; j < E; ++j) {
      EXPECT_NEAR(e.in_sum2[size_t(j)], want[size_t(j)], 1e-4 * want[size_t(j)] + 1e-6) << j;
    }
  }
  // No output.weight without process_output (llama-imatrix's default).
  EXPECT_FALSE(im.entries.count("output.weight"));
}

// Every token goes to k = 2 experts: the expert counts add up to 2 per token, and summed over
// the experts the gate/up sums are twice the router's (same input rows, counted k times).
TEST(Imatrix, ExpertSumsAreCountedPerExpert) {
  auto model = Model::load(tiny_model());
  const int E = model->config().n_embd, N = model->config().n_expert;
  ImatrixOptions o;
  o.n_ctx = 32;
  o.n_threads = 2;
  o.process_output = true;
  const Imatrix im = compute_imatrix(*model, text_tokens(64), -1, o);
  const ImatrixEntry& router = im.entries.at("blk.0.ffn_gate_inp.weight");
  ASSERT_EQ(router.counts, std::vector<int64_t>{64});
  for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight"}) {
    SCOPED_TRACE(name);
    const ImatrixEntry& e = im.entries.at(name);
    ASSERT_EQ(e.counts.size(), size_t(N));
    ASSERT_EQ(e.in_sum2.size(), size_t(N) * E);
    int64_t total = 0;
    for (int64_t c : e.counts) total += c;
    EXPECT_EQ(total, 64 * model->config().n_expert_used);
    for (int j = 0; j < E; ++j) {
      double s = 0;
      for (int x = 0; x < N; ++x) s += e.in_sum2[size_t(x) * E + j];
      EXPECT_NEAR(s, 2 * router.in_sum2[size_t(j)], 1e-6 * s + 1e-9);
    }
  }
  const ImatrixEntry& down = im.entries.at("blk.0.ffn_down_exps.weight");
  EXPECT_EQ(down.in_sum2.size(), size_t(N) * model->config().n_ff_exp);
  EXPECT_EQ(down.counts, im.entries.at("blk.0.ffn_gate_exps.weight").counts);
  // With process_output the output sees every token.
  ASSERT_TRUE(im.entries.count("output.weight"));
  EXPECT_EQ(im.entries.at("output.weight").counts, std::vector<int64_t>{64});
}

TEST(Imatrix, TooLittleTextIsAnError) {
  auto model = Model::load(tiny_model());
  ImatrixOptions o;
  o.n_ctx = 64;
  EXPECT_THROW(compute_imatrix(*model, text_tokens(10), -1, o), Error);
}

double weighted_err(const std::vector<float>& x, const std::vector<float>& y,
                    const std::vector<float>& w) {
  double s = 0;
  for (size_t j = 0; j < x.size(); ++j) s += double(w[j]) * (x[j] - y[j]) * (x[j] - y[j]);
  return s;
}

// On rows whose columns differ in importance by orders of magnitude (as activations do), each
// weighted quantizer's error in the importance-weighted norm is below the reference
// quantizer's, and with uniform importance its plain error is close to the reference's.
TEST(ImatrixQuantize, WeightedQuantizersLowerTheWeightedError) {
  const int64_t n = 4096;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n)), imp(static_cast<size_t>(n)),
      ones(static_cast<size_t>(n), 1.f);
  for (int64_t j = 0; j < n; ++j) {
    x[size_t(j)] = g(rng) * (1 + 0.3f * g(rng));
    imp[size_t(j)] = std::exp(2.5f * g(rng));
  }
  for (TensorType t : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                       TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                       TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS}) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    ASSERT_TRUE(has_weighted_quantizer(t));
    std::vector<uint8_t> q(gguf::row_size(t, n));
    std::vector<float> ref(static_cast<size_t>(n)), wtd(static_cast<size_t>(n)),
        uni(static_cast<size_t>(n));
    kernels::quantize_row(t, x.data(), q.data(), n);
    kernels::dequantize_row(t, q.data(), ref.data(), n);
    quantize_row_weighted(t, x.data(), imp.data(), q.data(), n);
    kernels::dequantize_row(t, q.data(), wtd.data(), n);
    quantize_row_weighted(t, x.data(), ones.data(), q.data(), n);
    kernels::dequantize_row(t, q.data(), uni.data(), n);
    const double e_ref = weighted_err(x, ref, imp), e_wtd = weighted_err(x, wtd, imp);
    std::printf(
        "%-7s weighted error: reference %.4g, with importance %.4g (%.2fx); "
        "uniform importance: plain error %.4g vs %.4g\n",
        gguf::tensor_type_name(t), e_ref, e_wtd, e_wtd / e_ref, weighted_err(x, uni, ones),
        weighted_err(x, ref, ones));
    EXPECT_LT(e_wtd, 0.9 * e_ref) << "weighted " << e_wtd << " reference " << e_ref;
    EXPECT_LT(weighted_err(x, uni, ones), 1.15 * weighted_err(x, ref, ones));
  }
  EXPECT_FALSE(has_weighted_quantizer(TensorType::Q8_0));
  EXPECT_THROW(quantize_row_weighted(TensorType::Q8_0, x.data(), imp.data(), nullptr, n), Error);
}

// A model quantized with its own importance matrix loads, runs, and used the weights for every
// quantized matrix the matrix covers.
TEST(ImatrixQuantize, ModelQuantizedWithItsImatrixRuns) {
  auto model = Model::load(tiny_model());
  ImatrixOptions o;
  o.n_ctx = 32;
  o.n_threads = 2;
  const Imatrix im = compute_imatrix(*model, text_tokens(64), -1, o);
  for (const char* mix : {"Q4_K_M", "IQ4_XS", "Q2_K_S"}) {
    SCOPED_TRACE(mix);
    QuantizeOptions qo;
    qo.mix = mix;
    qo.n_threads = 2;
    qo.imatrix = &im;
    const std::string out = tmp(std::string(mix) + ".gguf");
    const QuantizeResult r = quantize_model(tiny_model(), out, qo);
    EXPECT_GE(r.n_weighted, 3);  // the three expert tensors at least
    auto q = Model::load(out);
    ContextOptions co;
    co.n_threads = 2;
    co.n_ctx = 16;
    Context ctx(*q, co);
    const int32_t seq = ctx.new_sequence();
    std::vector<BatchToken> batch;
    for (int i = 0; i < 4; ++i) batch.push_back({i + 5, seq, i, kTokenPrefill, i == 3});
    ctx.eval(batch);
    for (float v : ctx.logits(0)) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(ImatrixQuantize, Q2KSWithoutAnImatrixIsRefusedAsByLlamaQuantize) {
  QuantizeOptions qo;
  qo.mix = "Q2_K_S";
  try {
    quantize_model(tiny_model(), tmp("q2ks.gguf"), qo);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("importance matrix"), std::string::npos) << e.what();
  }
}

TEST(ImatrixQuantize, AnEntryOfTheWrongShapeIsRefusedBeforeWriting) {
  Imatrix im;
  im.entries["blk.0.attn_q.weight"] = {std::vector<double>(100, 1.0), {4}};
  QuantizeOptions qo;
  qo.mix = "Q4_K_M";
  qo.imatrix = &im;
  const std::string out = tmp("wrong_shape.gguf");
  std::remove(out.c_str());
  EXPECT_THROW(quantize_model(tiny_model(), out, qo), Error);
  EXPECT_FALSE(std::ifstream(out).good());
}

Imatrix sample_imatrix() {
  Imatrix im;
  im.entries["blk.0.attn_q.weight"] = {{1.5, 2.25, 0.0, 7.0}, {3}};
  // Two experts of 4 columns, the second never routed to.
  im.entries["blk.0.ffn_up_exps.weight"] = {{4, 8, 12, 16, 0, 0, 0, 0}, {4, 0}};
  im.datasets = {"data/eval"};
  im.chunk_count = 2;
  im.chunk_size = 2;
  return im;
}

TEST(ImatrixFile, GgufRoundTripsAndHasLlamaCppsLayout) {
  const Imatrix im = sample_imatrix();
  const std::string p = tmp("rt.gguf");
  write_imatrix_gguf(im, p);
  const Imatrix back = read_imatrix(p);
  EXPECT_EQ(back.datasets, im.datasets);
  EXPECT_EQ(back.chunk_count, 2u);
  EXPECT_EQ(back.chunk_size, 2u);
  ASSERT_EQ(back.entries.size(), 2u);
  for (const auto& [name, e] : im.entries) {
    EXPECT_EQ(back.entries.at(name).in_sum2, e.in_sum2) << name;
    EXPECT_EQ(back.entries.at(name).counts, e.counts) << name;
  }
  const gguf::File f = gguf::File::open(p);
  EXPECT_EQ(f.get_string("general.type"), "imatrix");
  const auto& s = f.tensor("blk.0.ffn_up_exps.weight.in_sum2");
  EXPECT_EQ(s.type, TensorType::F32);
  EXPECT_EQ(s.ne[0], 4);
  EXPECT_EQ(s.ne[1], 2);
  const auto& c = f.tensor("blk.0.ffn_up_exps.weight.counts");
  EXPECT_EQ(c.ne[0], 1);
  EXPECT_EQ(c.ne[1], 2);
  // Importance: mean squares; nothing for the unused expert.
  EXPECT_EQ(back.importance("blk.0.attn_q.weight", 0, 4, 1),
            (std::vector<float>{0.5f, 0.75f, 0.f, 7.f / 3}));
  EXPECT_EQ(back.importance("blk.0.ffn_up_exps.weight", 0, 4, 2), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_TRUE(back.importance("blk.0.ffn_up_exps.weight", 1, 4, 2).empty());
  EXPECT_TRUE(back.importance("blk.9.attn_q.weight", 0, 4, 1).empty());
  EXPECT_THROW(back.importance("blk.0.attn_q.weight", 0, 8, 1), Error);
}

TEST(ImatrixFile, LegacyDatRoundTripsTheMeans) {
  const Imatrix im = sample_imatrix();
  const std::string p = tmp("rt.dat");
  write_imatrix_dat(im, p);
  const Imatrix back = read_imatrix(p);
  EXPECT_EQ(back.datasets, im.datasets);
  EXPECT_EQ(back.chunk_count, 2u);
  // ncall = ceil(max count / chunk size): 2 for both; an unused expert is stored as 1s.
  EXPECT_EQ(back.entries.at("blk.0.attn_q.weight").counts, std::vector<int64_t>{2});
  EXPECT_EQ(back.importance("blk.0.attn_q.weight", 0, 4, 1),
            (std::vector<float>{0.5f, 0.75f, 0.f, 7.f / 3}));
  EXPECT_EQ(back.importance("blk.0.ffn_up_exps.weight", 0, 4, 2), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(back.importance("blk.0.ffn_up_exps.weight", 1, 4, 2), (std::vector<float>{1, 1, 1, 1}));
}

void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

void expect_rejected(const std::string& p, const std::string& needle) {
  try {
    read_imatrix(p);
    FAIL() << "accepted " << p;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ImatrixFile, BrokenFilesAreRejectedWithTheDefectNamed) {
  expect_rejected(tmp("missing.none"), "cannot open");
  const std::string p = tmp("bad");
  write_bytes(p, {});
  expect_rejected(p, "truncated");
  write_bytes(p, {0, 0, 0, 0});
  expect_rejected(p, "no entries");
  // A legacy file cut inside its values.
  write_imatrix_dat(sample_imatrix(), p);
  {
    std::ifstream in(p, std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    b.resize(40);
    write_bytes(p, b);
  }
  expect_rejected(p, "cannot hold");
  {  // cut inside a name
    std::vector<uint8_t> b = {1, 0, 0, 0, 19, 0, 0, 0, 'b', 'l', 'k'};
    write_bytes(p, b);
  }
  expect_rejected(p, "truncated");
  // A legacy entry claiming more values than the file holds.
  write_bytes(p, {1, 0, 0, 0, 1, 0, 0, 0, 'a', 1, 0, 0, 0, 0xff, 0xff, 0, 0});
  expect_rejected(p, "cannot hold");
  // GGUF: sums without counts; shapes that do not fit; a negative sum; a model file.
  {
    gguf::Writer w;
    w.set("general.type", gguf::Value::str("imatrix"));
    const float s[4] = {1, 2, 3, 4};
    w.add_tensor("a.weight.in_sum2", TensorType::F32, {4, 1}, s, 16);
    w.write(p);
  }
  expect_rejected(p, "sums without counts");
  {
    gguf::Writer w;
    const float s[4] = {1, 2, 3, 4}, c[3] = {1, 1, 1};
    w.add_tensor("a.weight.in_sum2", TensorType::F32, {4, 1}, s, 16);
    w.add_tensor("a.weight.counts", TensorType::F32, {1, 3}, c, 12);
    w.write(p);
  }
  expect_rejected(p, "do not fit");
  {
    gguf::Writer w;
    const float s[4] = {1, -2, 3, 4}, c[1] = {1};
    w.add_tensor("a.weight.in_sum2", TensorType::F32, {4, 1}, s, 16);
    w.add_tensor("a.weight.counts", TensorType::F32, {1, 1}, c, 4);
    w.write(p);
  }
  expect_rejected(p, "negative");
  expect_rejected(tiny_model(), "not an imatrix");
}

}  // namespace
}  // namespace lynx
