// lynx/quantize.h: the per-tensor types of each mix (llama-quantize's rules), and whole files
// quantized here that load and run, with logits close to the source model's and every
// quantized tensor holding exactly what the reference quantizer gives for its rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "../scratch.h"
#include "kernels/kernels.h"
#include "lynx/context.h"
#include "lynx/error.h"
#include "lynx/model.h"
#include "lynx/quantize.h"
#include "lynx/synth.h"

namespace lynx {
namespace {

using gguf::TensorType;

gguf::TensorInfo tensor(const std::string& name, std::vector<int64_t> ne,
                        TensorType t = TensorType::F16) {
  gguf::TensorInfo info;
  info.name = name;
  info.type = t;
  info.n_dims = int(ne.size());
  for (size_t i = 0; i < ne.size(); ++i) info.ne[i] = ne[i];
  return info;
}

// A 32-layer dense-attention MoE with 64 experts and GQA 4 (the Qwen3-30B-A3B shape's counts).
QuantModelInfo qwen3_like() {
  QuantModelInfo m;
  m.n_layer = 32;
  m.n_expert = 64;
  m.n_gqa = 4;
  m.has_output = true;
  m.n_attention_wv = 32;
  return m;
}

TEST(QuantMix, OutputIsQ6KInEveryQuantizedMixButQ8_0) {
  const auto m = qwen3_like();
  const auto out = tensor("output.weight", {2048, 151936});
  for (const char* mix : {"Q4_0", "Q4_K_M", "Q4_K_S", "Q3_K_M", "Q2_K", "IQ4_XS", "Q5_K_M"}) {
    EXPECT_EQ(quant_tensor_type(mix, m, out, 0), TensorType::Q6_K) << mix;
  }
  EXPECT_EQ(quant_tensor_type("Q8_0", m, out, 0), TensorType::Q8_0);
  EXPECT_EQ(quant_tensor_type("MXFP4_MOE", m, out, 0), TensorType::Q8_0);
  EXPECT_EQ(quant_tensor_type("F16", m, out, 0), TensorType::F16);
  // A tied model's output is token_embd.
  auto tied = m;
  tied.has_output = false;
  EXPECT_EQ(quant_tensor_type("Q4_K_M", tied, tensor("token_embd.weight", {2048, 1000}), 0),
            TensorType::Q6_K);
  EXPECT_EQ(quant_tensor_type("Q4_K_M", m, tensor("token_embd.weight", {2048, 1000}), 0),
            TensorType::Q4_K);
}

TEST(QuantMix, NormsRoutersAndOneDimensionalTensorsKeepTheirType) {
  const auto m = qwen3_like();
  EXPECT_EQ(
      quant_tensor_type("Q4_K_M", m, tensor("blk.0.attn_norm.weight", {2048}, TensorType::F32), 0),
      TensorType::F32);
  EXPECT_EQ(quant_tensor_type("Q2_K", m, tensor("blk.3.ffn_gate_inp.weight", {2048, 128}), 0),
            TensorType::F16);
  EXPECT_EQ(quant_tensor_type("Q4_K_M", m, tensor("blk.0.attn_q.bias", {4096, 1}), 0),
            TensorType::F16);
}

TEST(QuantMix, MediumMixesPromoteAttnVAndFfnDownOnTheUseMoreBitsLayers) {
  const auto m = qwen3_like();
  // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2.
  std::string v, down;
  for (int il = 0; il < 32; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const TensorType tv =
        quant_tensor_type("Q4_K_M", m, tensor(p + "attn_v.weight", {2048, 512}), il);
    const TensorType td =
        quant_tensor_type("Q4_K_M", m, tensor(p + "ffn_down_exps.weight", {768, 2048, 128}), il);
    v += tv == TensorType::Q6_K ? '6' : tv == TensorType::Q4_K ? '4' : '?';
    down += td == TensorType::Q6_K ? '6' : td == TensorType::Q4_K ? '4' : '?';
  }
  EXPECT_EQ(v, "66664464464464464464464464466666");
  EXPECT_EQ(down, v);
  EXPECT_EQ(quant_tensor_type("Q4_K_M", m, tensor("blk.5.ffn_up_exps.weight", {2048, 768, 128}), 5),
            TensorType::Q4_K);
  EXPECT_EQ(quant_tensor_type("Q5_K_M", m, tensor("blk.0.attn_v.weight", {2048, 512}), 0),
            TensorType::Q6_K);
  EXPECT_EQ(quant_tensor_type("Q4_K_S", m, tensor("blk.0.attn_v.weight", {2048, 512}), 3),
            TensorType::Q5_K);
  EXPECT_EQ(quant_tensor_type("Q4_K_S", m, tensor("blk.0.attn_v.weight", {2048, 512}), 4),
            TensorType::Q4_K);
  // Q2_K: attn_v Q4_K with GQA >= 4, ffn_down and attn_output Q3_K.
  EXPECT_EQ(quant_tensor_type("Q2_K", m, tensor("blk.9.attn_v.weight", {2048, 512}), 9),
            TensorType::Q4_K);
  EXPECT_EQ(quant_tensor_type("Q2_K", m, tensor("blk.9.ffn_down_exps.weight", {768, 2048, 128}), 9),
            TensorType::Q3_K);
  EXPECT_EQ(quant_tensor_type("Q2_K", m, tensor("blk.9.attn_output.weight", {4096, 2048}), 9),
            TensorType::Q3_K);
  // Q3_K_M: attn_v Q5_K on the first two, ffn_down Q5_K on the first n/16 layers, Q4_K after.
  EXPECT_EQ(quant_tensor_type("Q3_K_M", m, tensor("blk.1.attn_v.weight", {2048, 512}), 1),
            TensorType::Q5_K);
  EXPECT_EQ(quant_tensor_type("Q3_K_M", m, tensor("blk.1.ffn_down_exps.weight", {768, 2048, 8}), 1),
            TensorType::Q5_K);
  EXPECT_EQ(quant_tensor_type("Q3_K_M", m, tensor("blk.2.ffn_down_exps.weight", {768, 2048, 8}), 2),
            TensorType::Q4_K);
  // IQ4_XS: attn_v Q5_K with GQA >= 4.
  EXPECT_EQ(quant_tensor_type("IQ4_XS", m, tensor("blk.7.attn_v.weight", {2048, 512}), 7),
            TensorType::Q5_K);
}

TEST(QuantMix, EightExpertModelsKeepAttentionKAndVInQ8_0) {
  auto m = qwen3_like();
  m.n_expert = 8;
  EXPECT_EQ(quant_tensor_type("Q4_K_M", m, tensor("blk.0.attn_v.weight", {4096, 1024}), 5),
            TensorType::Q8_0);
  EXPECT_EQ(quant_tensor_type("Q4_K_M", m, tensor("blk.0.attn_k.weight", {4096, 1024}), 0),
            TensorType::Q8_0);
  EXPECT_EQ(quant_tensor_type("Q4_K_M", m, tensor("blk.0.attn_output.weight", {4096, 4096}), 0),
            TensorType::Q5_K);
}

TEST(QuantMix, RowsASuperBlockDoesNotDivideFallBack) {
  const auto m = qwen3_like();
  auto t = [&](const char* mix) {
    return quant_tensor_type(mix, m, tensor("blk.5.ffn_up_exps.weight", {96, 64, 8}), 5);
  };
  EXPECT_EQ(t("Q4_K_M"), TensorType::Q5_0);
  EXPECT_EQ(t("Q5_K_M"), TensorType::Q5_1);
  EXPECT_EQ(t("Q6_K"), TensorType::Q8_0);
  EXPECT_EQ(t("Q2_K"), TensorType::IQ4_NL);
  EXPECT_EQ(t("IQ4_XS"), TensorType::IQ4_NL);
  EXPECT_EQ(quant_tensor_type("Q4_0", m, tensor("blk.5.ffn_up_exps.weight", {48, 64, 8}), 5),
            TensorType::F16);
  // MXFP4_MOE: expert tensors MXFP4, everything else Q8_0.
  EXPECT_EQ(
      quant_tensor_type("MXFP4_MOE", m, tensor("blk.5.ffn_up_exps.weight", {2048, 768, 8}), 5),
      TensorType::MXFP4);
  EXPECT_EQ(quant_tensor_type("MXFP4_MOE", m, tensor("blk.5.attn_q.weight", {2048, 4096}), 5),
            TensorType::Q8_0);
  EXPECT_THROW(quant_tensor_type("Q4_K_X", m, tensor("a.weight", {256, 2}), 0), Error);
  EXPECT_EQ(quant_tensor_type("q4_k_m", m, tensor("blk.5.attn_q.weight", {2048, 4096}), 5),
            TensorType::Q4_K);
}

// A synthetic tiny-mixtral (llama, 8 experts, n_embd 256) in F32, quantized to several mixes:
// each file loads, runs, and its logits stay near the F32 model's; each quantized tensor is
// byte for byte the reference quantizer's output for the source rows.
TEST(Quantize, FilesLoadRunAndHoldTheReferenceQuantizersBytes) {
  const std::string dir = test::scratch_path("quant") + "/";
  std::filesystem::create_directories(dir);
  SynthOptions so;
  so.shape = synth_shape("tiny-mixtral");
  so.shape.n_layer = 2;
  so.shape.n_vocab = 300;
  so.type = TensorType::F32;
  const std::string src = dir + "quant_src_f32.gguf";
  write_synth_model(so, src);
  auto run = [](const std::string& path) {
    auto model = Model::load(path);
    ContextOptions co;
    co.n_threads = 2;
    co.n_ctx = 32;
    co.exact_activations = true;
    Context ctx(*model, co);
    const int32_t seq = ctx.new_sequence();
    std::vector<BatchToken> batch;
    for (int i = 0; i < 6; ++i) batch.push_back({(i * 37) % 300, seq, i, kTokenPrefill, i == 5});
    ctx.eval(batch);
    const auto l = ctx.logits(0);
    return std::vector<float>(l.begin(), l.end());
  };
  const auto ref = run(src);
  const gguf::File in = gguf::File::open(src);
  // Relative RMS logit error bounds per mix, loose (the synthetic weights are Gaussian):
  // a mix that silently wrote wrong bytes or types would be far off.
  // Measured (2 layers, 6 tokens): Q8_0 0.012, Q6_K 0.034, Q5_0 0.069, Q5_K_M 0.087,
  // MXFP4_MOE 0.10, Q4_K_M 0.11, IQ4_XS 0.13, Q4_1 0.13, Q3_K_M 0.25, Q2_K 0.42 (the
  // router may pick other experts in a quantized model, so the order need not follow the
  // types' bits). Bounds about 1.5x; wrong bytes or types give errors near 1.
  const std::map<std::string, double> bound = {
      {"Q8_0", 0.02}, {"Q6_K", 0.05}, {"Q5_K_M", 0.13}, {"Q4_K_M", 0.17},    {"IQ4_XS", 0.2},
      {"Q4_1", 0.2},  {"Q5_0", 0.1},  {"Q3_K_M", 0.38}, {"MXFP4_MOE", 0.16}, {"Q2_K", 0.63}};
  for (const auto& [mix, max_err] : bound) {
    SCOPED_TRACE(mix);
    const std::string out = dir + "quant_" + mix + ".gguf";
    QuantizeOptions qo;
    qo.mix = mix;
    qo.n_threads = 2;
    int progress_calls = 0;
    qo.progress = [&](size_t, size_t, const gguf::TensorInfo&, TensorType) { ++progress_calls; };
    const QuantizeResult r = quantize_model(src, out, qo);
    EXPECT_EQ(progress_calls, int(in.tensors().size()));
    EXPECT_LT(r.bytes_out, r.bytes_in);
    const gguf::File q = gguf::File::open(out);
    ASSERT_EQ(q.tensors().size(), in.tensors().size());
    for (size_t i = 0; i < q.tensors().size(); ++i) {
      const auto& qt = q.tensors()[i];
      const auto& st = in.tensors()[i];
      ASSERT_EQ(qt.name, st.name);
      EXPECT_EQ(qt.type, r.types[i].second);
      if (qt.type == st.type) {
        EXPECT_EQ(0, std::memcmp(qt.data, st.data, st.n_bytes)) << qt.name;
        continue;
      }
      // The first row: the reference quantizer on the F32 source row.
      std::vector<uint8_t> want(gguf::row_size(qt.type, st.ne[0]));
      kernels::quantize_row(qt.type, reinterpret_cast<const float*>(st.data), want.data(),
                            st.ne[0]);
      EXPECT_EQ(0, std::memcmp(qt.data, want.data(), want.size())) << qt.name;
    }
    const auto got = run(out);
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
      den += double(ref[i]) * ref[i];
    }
    const double err = std::sqrt(num / den);
    std::printf("%-9s %5.1f%% of F32 size, relative RMS logit error %.4f\n", mix.c_str(),
                100.0 * double(r.bytes_out) / double(r.bytes_in), err);
    EXPECT_LE(err, max_err);
    EXPECT_EQ(q.get_int("general.quantization_version"), 2);
    std::remove(out.c_str());
  }
  std::remove(src.c_str());
}

TEST(Quantize, RequantizingAQuantizedModelWarns) {
  const std::string src =
      std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/llama-moe-q8_0.gguf";
  const std::string out = test::scratch_path("quant_requant.gguf");
  QuantizeOptions qo;
  qo.mix = "Q4_0";
  std::string warning;
  qo.warn = [&](const std::string& w) { warning += w; };
  quantize_model(src, out, qo);
  EXPECT_NE(warning.find("requantizing from q8_0"), std::string::npos) << warning;
  auto model = Model::load(out);  // loads and is Q4_0 (E = 64: no fallback needed)
  EXPECT_EQ(gguf::File::open(out).tensor("blk.0.attn_q.weight").type, TensorType::Q4_0);
  // output.weight would be Q6_K; its 64-element rows fall back to Q8_0.
  EXPECT_EQ(gguf::File::open(out).tensor("output.weight").type, TensorType::Q8_0);
  std::remove(out.c_str());
}

}  // namespace
}  // namespace lynx
