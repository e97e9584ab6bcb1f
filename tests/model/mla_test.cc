// deepseek2 (multi-head latent attention) against the independent NumPy reference
// (tests/reference/deepseek2_ref.py, the decompressed form; fixtures from
// make_mla_fixtures.py): logits at every position by prefill, token by token and batched with
// another sequence, also with YaRN rope scaling; the older attn_kv_b layout gives the same
// logits; the latent KV cache's size per token; bad files (and bad YaRN values) named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "../scratch.h"
#include "kernels/kernels.h"
#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/weights.h"

namespace lynx {
namespace {

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/mla/";
const char* const kShapes[] = {"tiny-deepseek-v2", "tiny-deepseek-v3"};

std::vector<int32_t> tokens() {
  return testing_util::read_tokens(kDir + "tokens.txt");
}

std::vector<float> golden(const std::string& shape, size_t n) {
  return testing_util::read_logits(kDir + shape + ".logits.f32", n);
}

using testing_util::exact_ctx;
using testing_util::rel_err;

constexpr double kTol = 1e-5;  // measured: at most 5e-7

// Every position's logits, three ways: one prefill batch; one token per step; and token by
// token interleaved in the same batches with a second sequence fed the tokens reversed.
void check_goldens(const Model& m, const std::string& shape) {
  const auto toks = tokens();
  const int V = m.config().n_vocab, n = int(toks.size());
  const auto want = golden(shape, size_t(n) * V);
  {
    Context ctx(m, exact_ctx());
    const int32_t s = ctx.new_sequence();
    std::vector<BatchToken> batch;
    for (int i = 0; i < n; ++i) batch.push_back({toks[size_t(i)], s, i, kTokenPrefill, true});
    ctx.eval(batch);
    for (int i = 0; i < n; ++i) {
      EXPECT_LT(rel_err(ctx.logits(i), &want[size_t(i) * V], size_t(V)), kTol)
          << shape << " prefill position " << i;
    }
  }
  Context a(m, exact_ctx()), b(m, exact_ctx());
  const int32_t sa = a.new_sequence();
  const int32_t sb0 = b.new_sequence(), sb1 = b.new_sequence();
  for (int i = 0; i < n; ++i) {
    std::vector<BatchToken> one = {{toks[size_t(i)], sa, i, kTokenDecode, true}};
    a.eval(one);
    std::vector<BatchToken> two = {{toks[size_t(n - 1 - i)], sb1, i, kTokenDecode, true},
                                   {toks[size_t(i)], sb0, i, kTokenDecode, true}};
    b.eval(two);
    EXPECT_LT(rel_err(a.logits(0), &want[size_t(i) * V], size_t(V)), kTol)
        << shape << " decode position " << i;
    // Batch invariance: the same token's row, bit for bit, whatever else is in the batch.
    const auto la = a.logits(0), lb = b.logits(1);
    ASSERT_TRUE(std::equal(la.begin(), la.end(), lb.begin())) << shape << " position " << i;
  }
}

TEST(Mla, GoldensAtEveryPositionPrefillDecodeAndBatched) {
  for (const char* shape : kShapes) {
    auto m = Model::load(kDir + shape + ".gguf");
    const ModelConfig& c = m->config();
    ASSERT_EQ(c.arch, "deepseek2");
    ASSERT_TRUE(c.mla());
    EXPECT_EQ(c.layer_kinds[0].ffn, FfnKind::kDense);  // leading_dense_block_count = 1
    EXPECT_EQ(c.layer_kinds[1].ffn, FfnKind::kMoeShared);
    check_goldens(*m, shape);
  }
}

// The decompressed form (ContextOptions::mla_decompress_min: runs of at least 2 tokens here,
// so the fixtures' prompts take it): the goldens at every position by one prefill and by
// chunks, each chunk's rows within float rounding of the absorbed form's, over F32, F16 and
// Q8_0 caches; chunks of any length at or above the minimum give the same bits as one
// prefill; and a prefill that returns only its last logits gives that row's bits.
TEST(Mla, DecompressedPrefillMatchesGoldensAndTheAbsorbedForm) {
  const auto toks = tokens();
  const int n = int(toks.size());
  for (const char* shape : kShapes) {
    auto m = Model::load(kDir + shape + ".gguf");
    const int V = m->config().n_vocab;
    const auto want = golden(shape, size_t(n) * V);
    for (gguf::TensorType cache :
         {gguf::TensorType::F32, gguf::TensorType::F16, gguf::TensorType::Q8_0}) {
      SCOPED_TRACE(std::string(shape) + " cache " + gguf::tensor_type_name(cache));
      // Logits at every position, the prompt fed in chunks of `chunk` tokens.
      auto run = [&](int min, int chunk, bool all_logits) {
        ContextOptions o = exact_ctx();
        o.mla_decompress_min = min;
        o.cache_type_k = o.cache_type_v = cache;
        Context ctx(*m, o);
        const int32_t s = ctx.new_sequence();
        std::vector<float> out;
        for (int b = 0; b < n; b += chunk) {
          std::vector<BatchToken> batch;
          const int e = std::min(n, b + chunk);
          for (int i = b; i < e; ++i) {
            batch.push_back({toks[size_t(i)], s, i, kTokenPrefill, all_logits || i == n - 1});
          }
          ctx.eval(batch);
          for (int r = 0; r < ctx.n_logits(); ++r) {
            out.insert(out.end(), ctx.logits(r).begin(), ctx.logits(r).end());
          }
        }
        return out;
      };
      const auto dec = run(2, n, true), abs = run(0, n, true);
      ASSERT_EQ(dec.size(), size_t(n) * V);
      const double tol = cache == gguf::TensorType::F32 ? kTol : 1e-2;  // the cache's rounding
      bool differs = false;
      for (int i = 0; i < n; ++i) {
        const std::span<const float> d(dec.data() + size_t(i) * V, size_t(V));
        if (cache == gguf::TensorType::F32) {
          EXPECT_LT(rel_err(d, &want[size_t(i) * V], size_t(V)), tol) << "position " << i;
        }
        EXPECT_LT(rel_err(d, &abs[size_t(i) * V], size_t(V)), 1e-5) << "position " << i;
        differs = differs || !std::equal(d.begin(), d.end(), abs.begin() + size_t(i) * V);
      }
      if (n > 2) EXPECT_TRUE(differs) << "the decompressed form did not run";
      for (int chunk : {2, 3, 5}) {
        EXPECT_TRUE(std::equal(dec.begin(), dec.end(), run(2, chunk, true).begin()))
            << "chunks of " << chunk;
      }
      const auto last = run(2, n, false);
      ASSERT_EQ(last.size(), size_t(V));
      EXPECT_TRUE(std::equal(last.begin(), last.end(), dec.end() - V)) << "last logits only";
    }
  }
}

// The cache holds per token and layer the latent and the rope part, nothing per head:
// kv_lora_rank + qk_rope_dim floats (tiny shapes: 64 + 16 = 80, i.e. 320 bytes per layer; a
// GQA cache of the same heads would hold 2 x 4 x 48 = 384 floats). DeepSeek-V2-Lite:
// (512 + 64) x 4 bytes x 27 layers = 62,208 bytes per token (docs/models.md).
TEST(Mla, KvCacheStoresTheLatentPerToken) {
  auto m = Model::load(kDir + std::string(kShapes[0]) + ".gguf");
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.cache_k_dim(), c.kv_lora_rank + c.qk_rope_dim);
  EXPECT_EQ(c.cache_k_dim(), 80);
  EXPECT_EQ(c.cache_v_dim(), 0);
  ModelConfig lite;
  lite.kv_lora_rank = 512;
  lite.qk_rope_dim = 64;
  EXPECT_EQ(size_t(lite.cache_k_dim() + lite.cache_v_dim()) * sizeof(float) * 27, 62208u);
}

// Copies a fixture, letting `edit` change metadata and `tensor` replace or drop tensors.
using KvEdit = std::function<bool(const std::string&, gguf::Value&)>;
using TensorEdit = std::function<bool(const gguf::TensorInfo&, gguf::Writer&)>;
using Keys = std::vector<std::pair<std::string, gguf::Value>>;
std::string rewrite(const std::string& shape, const std::string& name, const KvEdit& edit,
                    const TensorEdit& tensor, const Keys& extra = {}) {
  gguf::File f = gguf::File::open(kDir + shape + ".gguf");
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (edit(kv.key, v)) w.set(kv.key, v);
  }
  for (const auto& [k, v] : extra) w.set(k, v);
  for (const auto& t : f.tensors()) {
    if (tensor(t, w)) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
  }
  const std::string path = test::scratch_path("mla_" + name + ".gguf");
  w.write(path);
  return path;
}

// Older files hold attn_kv_b (per head: nope key rows, then v value rows, over kv_lora)
// instead of attn_k_b / attn_v_b; the loader splits it into the same products.
TEST(Mla, OlderKvBLayoutGivesTheSameLogits) {
  const std::string shape = kShapes[1];
  auto split = Model::load(kDir + shape + ".gguf");
  const ModelConfig& c = split->config();
  const int64_t H = c.n_head, R = c.kv_lora_rank, nope = c.qk_nope_dim, vd = c.v_head_dim;
  gguf::File src = gguf::File::open(kDir + shape + ".gguf");
  auto rows = [&](const std::string& name) {  // dequantized [n_mat x rows x cols]
    const gguf::TensorInfo* t = src.find_tensor(name);
    std::vector<float> out(size_t(t->n_elements()));
    const size_t rb = gguf::row_size(t->type, t->ne[0]);
    for (int64_t r = 0; r < t->ne[1] * t->ne[2]; ++r) {
      kernels::ref::dequantize_row(t->type, t->data + size_t(r) * rb, &out[size_t(r * t->ne[0])],
                                   t->ne[0]);
    }
    return out;
  };
  std::vector<std::vector<float>> keep;  // the kv_b data outlives the writer
  auto path = rewrite(
      shape, "kv_b", [](const std::string&, gguf::Value&) { return true; },
      [&](const gguf::TensorInfo& t, gguf::Writer& w) {
        const std::string& n = t.name;
        if (n.find("attn_v_b") != std::string::npos) return true;  // dropped
        if (n.find("attn_k_b") == std::string::npos) return false;
        const std::string p = n.substr(0, n.find("attn_k_b"));
        const auto kb = rows(n), vb = rows(p + "attn_v_b.weight");  // [H][R][nope], [H][v][R]
        std::vector<float> kvb(size_t(H * (nope + vd) * R));
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t i = 0; i < nope; ++i) {
            for (int64_t r = 0; r < R; ++r) {
              kvb[size_t((h * (nope + vd) + i) * R + r)] = kb[size_t((h * R + r) * nope + i)];
            }
          }
          for (int64_t j = 0; j < vd; ++j) {
            for (int64_t r = 0; r < R; ++r) {
              kvb[size_t((h * (nope + vd) + nope + j) * R + r)] = vb[size_t((h * vd + j) * R + r)];
            }
          }
        }
        keep.push_back(std::move(kvb));
        w.add_tensor(p + "attn_kv_b.weight", gguf::TensorType::F32, {R, H * (nope + vd)},
                     keep.back().data(), keep.back().size() * sizeof(float));
        return true;
      });
  auto old = Model::load(path);
  EXPECT_FALSE(old->layer(0).wkv_b.present());
  EXPECT_EQ(old->layer(0).wk_b.rows, R);
  check_goldens(*old, shape);
}

void expect_load_error(const std::string& path, const std::string& substring) {
  try {
    Model::load(path);
    ADD_FAILURE() << "loading " << path << " did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << substring;
  }
}

TEST(Mla, BadFilesAreNamed) {
  const std::string shape = kShapes[1];
  auto all_kv = [](const std::string&, gguf::Value&) { return true; };
  auto drop = [](const char* name) {
    return [name](const gguf::TensorInfo& t, gguf::Writer&) { return t.name == name; };
  };
  expect_load_error(rewrite(shape, "missing", all_kv, drop("blk.1.attn_kv_a_mqa.weight")),
                    "missing tensor 'blk.1.attn_kv_a_mqa.weight'");
  expect_load_error(rewrite(shape, "nokb", all_kv, drop("blk.1.attn_k_b.weight")),
                    "missing tensor 'blk.1.attn_k_b.weight' (or 'blk.1.attn_kv_b.weight')");
  expect_load_error(rewrite(shape, "shexp", all_kv, drop("blk.1.ffn_up_shexp.weight")),
                    "missing tensor 'blk.1.ffn_up_shexp.weight'");
  // kv_lora_rank 32 instead of 64: the first tensor sized by it has the wrong shape.
  auto rank = [](const std::string& k, gguf::Value& v) {
    if (k == "deepseek2.attention.kv_lora_rank") v = gguf::Value::u32(32);
    return true;
  };
  expect_load_error(rewrite(shape, "rank", rank, [](auto&, auto&) { return false; }),
                    "tensor 'blk.0.attn_kv_a_mqa.weight' has shape");
  // A per-head key length not above the rope part: inconsistent head dimensions.
  auto heads = [](const std::string& k, gguf::Value& v) {
    if (k == "deepseek2.attention.key_length_mla") v = gguf::Value::u32(16);
    return true;
  };
  expect_load_error(rewrite(shape, "heads", heads, [](auto&, auto&) { return false; }),
                    "inconsistent head dimensions");
}

// DeepSeek-V2-Lite's YaRN keys (make_mla_fixtures.py YARN) on the V2-like fixture; the
// golden tiny-deepseek-v2-yarn.logits.f32 is the reference's forward pass of that file.
Keys yarn_keys() {
  return {{"deepseek2.rope.scaling.type", gguf::Value::str("yarn")},
          {"deepseek2.rope.scaling.factor", gguf::Value::f32(40.f)},
          {"deepseek2.rope.scaling.original_context_length", gguf::Value::u32(4096)},
          {"deepseek2.rope.scaling.yarn_log_multiplier", gguf::Value::f32(0.0707f)}};
}
const auto kAllKv = [](const std::string&, gguf::Value&) { return true; };
const auto kNoTensor = [](const gguf::TensorInfo&, gguf::Writer&) { return false; };

TEST(Mla, YarnGoldensAtEveryPositionPrefillDecodeAndBatched) {
  const std::string path = rewrite(kShapes[0], "yarn", kAllKv, kNoTensor, yarn_keys());
  auto m = Model::load(path);
  const RopeYarn& y = m->config().yarn;
  ASSERT_TRUE(y.on);
  EXPECT_EQ(y.factor, 40.f);
  EXPECT_EQ(y.orig_ctx, 4096);
  // Rope part of 16 dims, base 1e4: 16 ln(4096 / (2 pi beta)) / (2 ln 1e4) = 2.618 (beta 32)
  // and 5.628 (beta 1): pairs 0-1 keep their frequency, 6-7 are divided by 40, 2-5 blend.
  EXPECT_EQ(y.low, 2.f);
  EXPECT_EQ(y.high, 6.f);
  EXPECT_EQ(y.mscale, 1.f);                   // DeepSeek: cos / sin unscaled
  EXPECT_NEAR(y.kq_mul, 1.5896261651, 1e-6);  // (1 + 0.0707 ln 40)^2
  check_goldens(*m, std::string(kShapes[0]) + "-yarn");
  // The variant's logits differ from the unscaled ones: the goldens test the scaling.
  const size_t V = size_t(m->config().n_vocab), n = tokens().size();
  const auto plain = golden(kShapes[0], n * V),
             yarn = golden(std::string(kShapes[0]) + "-yarn", n * V);
  EXPECT_GT(rel_err(std::span(plain).subspan((n - 1) * V, V), &yarn[(n - 1) * V], V), 1e-2);
}

TEST(Mla, BadYarnValuesAreNamed) {
  auto with = [](const char* name, const std::string& key, gguf::Value v) {
    Keys k = yarn_keys();
    for (auto& [kk, vv] : k) {
      if (kk == key) vv = v;
    }
    if (key.empty()) k.pop_back();
    return rewrite(kShapes[0], name, kAllKv, kNoTensor, k);
  };
  const std::string f = "deepseek2.rope.scaling.factor";
  expect_load_error(with("y_zero", f, gguf::Value::f32(0.f)), f + " = 0");
  expect_load_error(with("y_neg", f, gguf::Value::f32(-2.f)), f + " = -2");
  expect_load_error(with("y_nan", f, gguf::Value::f32(std::nanf(""))), f);
  expect_load_error(with("y_type", "deepseek2.rope.scaling.type", gguf::Value::str("linear")),
                    "deepseek2.rope.scaling.type = 'linear' is not supported");
  expect_load_error(
      with("y_ctx", "deepseek2.rope.scaling.original_context_length", gguf::Value::u32(0)),
      "deepseek2.rope.scaling.original_context_length");
  expect_load_error(
      with("y_mul", "deepseek2.rope.scaling.yarn_log_multiplier", gguf::Value::f32(-1.f)),
      "deepseek2.rope.scaling.yarn_log_multiplier = -1");
  Keys no_factor = yarn_keys();
  no_factor.erase(no_factor.begin() + 1);
  expect_load_error(rewrite(kShapes[0], "y_nofactor", kAllKv, kNoTensor, no_factor),
                    f + " is required with YaRN");
}

// A family without a YaRN convention refuses a yarn file instead of running it unscaled.
TEST(Mla, YarnOnAFamilyWithoutItIsRefused) {
  const Keys k = {{"llama.rope.scaling.type", gguf::Value::str("yarn")},
                  {"llama.rope.scaling.factor", gguf::Value::f32(4.f)}};
  expect_load_error(rewrite("../llama-dense-f16", "y_llama", kAllKv, kNoTensor, k),
                    "YaRN rope scaling is not implemented for llama");
}

// The real-shape presets carry the released configs' rope_scaling, and synth writes the keys
// the loader reads back.
TEST(Mla, SynthPresetsWriteTheRealYarnKeys) {
  const SynthShape lite = synth_shape("deepseek-v2-lite"), v3 = synth_shape("deepseek-v3");
  EXPECT_EQ(lite.yarn_factor, 40.f);
  EXPECT_EQ(lite.yarn_orig_ctx, 4096);
  EXPECT_FLOAT_EQ(lite.yarn_log_mul, 0.0707f);  // 0.1 x mscale_all_dim 0.707
  EXPECT_EQ(v3.yarn_factor, 40.f);
  EXPECT_EQ(v3.yarn_orig_ctx, 4096);
  EXPECT_FLOAT_EQ(v3.yarn_log_mul, 0.1f);  // mscale_all_dim 1
  SynthOptions o;
  o.shape = synth_shape("tiny-deepseek-v3");
  o.shape.n_layer = 2;
  o.shape.n_vocab = 300;
  o.shape.yarn_factor = v3.yarn_factor;
  o.shape.yarn_orig_ctx = v3.yarn_orig_ctx;
  o.shape.yarn_log_mul = v3.yarn_log_mul;
  const std::string path = test::scratch_path("mla_synth_yarn.gguf");
  write_synth_model(o, path);
  auto m = Model::load(path);
  const RopeYarn& y = m->config().yarn;
  EXPECT_TRUE(y.on);
  EXPECT_EQ(y.factor, 40.f);
  EXPECT_EQ(y.orig_ctx, 4096);
  EXPECT_NEAR(y.kq_mul, (1 + 0.1 * std::log(40.0)) * (1 + 0.1 * std::log(40.0)), 1e-5);
}

}  // namespace
}  // namespace lynx
