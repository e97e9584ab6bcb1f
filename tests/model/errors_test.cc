// Bad models and bad batches get a clear error naming the problem, and change nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../scratch.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"

namespace lynx {
namespace {

const std::string kFixture =
    std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/olmoe-f32.gguf";

// Copies the fixture, letting `edit` drop or change metadata and tensors.
std::string rewrite(const std::string& name,
                    const std::function<bool(const std::string& key, gguf::Value& v)>& edit_kv,
                    const std::function<bool(const gguf::TensorInfo& t)>& keep_tensor) {
  gguf::File f = gguf::File::open(kFixture);
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (edit_kv(kv.key, v)) w.set(kv.key, v);
  }
  for (const auto& t : f.tensors()) {
    if (!keep_tensor(t)) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
  }
  const std::string path = test::scratch_path("model_err_" + name + ".gguf");
  w.write(path);
  return path;
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

auto keep_all_kv = [](const std::string&, gguf::Value&) { return true; };
auto keep_all_tensors = [](const gguf::TensorInfo&) { return true; };

TEST(ModelErrors, UnsupportedArchitectureIsNamed) {
  auto p = rewrite(
      "arch",
      [](const std::string& k, gguf::Value& v) {
        if (k == "general.architecture") v = gguf::Value::str("mamba");
        return true;
      },
      keep_all_tensors);
  expect_load_error(p, "unsupported architecture 'mamba'");
  // ... and the message lists every registered family (src/model/arch/registry.cc).
  expect_load_error(p, "(supported: llama, qwen2moe, qwen3moe, olmoe, qwen2, qwen3, deepseek2");
  expect_load_error(p, ", gpt-oss");
}

TEST(ModelErrors, MissingTensorIsNamed) {
  auto p = rewrite("missing", keep_all_kv, [](const gguf::TensorInfo& t) {
    return t.name != "blk.1.ffn_down_exps.weight";
  });
  expect_load_error(p, "missing tensor 'blk.1.ffn_down_exps.weight'");
}

TEST(ModelErrors, MissingMetadataIsNamed) {
  auto p = rewrite(
      "nokey", [](const std::string& k, gguf::Value&) { return k != "olmoe.block_count"; },
      keep_all_tensors);
  expect_load_error(p, "olmoe.block_count");
}

TEST(ModelErrors, WrongShapeIsNamed) {
  auto p = rewrite(
      "shape",
      [](const std::string& k, gguf::Value& v) {
        if (k == "olmoe.expert_feed_forward_length" || k == "olmoe.feed_forward_length") {
          v = gguf::Value::u32(48);
        }
        return true;
      },
      keep_all_tensors);
  expect_load_error(p, "blk.0.ffn_gate_exps.weight' has shape");
}

TEST(ModelErrors, BadExpertCountIsNamed) {
  auto p = rewrite(
      "kgtN",
      [](const std::string& k, gguf::Value& v) {
        if (k == "olmoe.expert_used_count") v = gguf::Value::u32(99);
        return true;
      },
      keep_all_tensors);
  expect_load_error(p, "expert_used_count = 99");
}

// Rewrites one metadata key of the fixture and expects the load to fail naming it.
void expect_bad_value(const std::string& key, const gguf::Value& value, const std::string& msg) {
  SCOPED_TRACE(key + " = " + value.to_string());
  bool seen = false;
  auto p = rewrite(
      "value",
      [&](const std::string& k, gguf::Value& v) {
        if (k == key) v = value, seen = true;
        return true;
      },
      keep_all_tensors);
  if (!seen) {  // an optional key the fixture lacks: add it
    gguf::File f = gguf::File::open(p);
    gguf::Writer w;
    for (const auto& kv : f.metadata()) {
      if (kv.key != "general.alignment") w.set(kv.key, kv.value);
    }
    w.set(key, value);
    for (const auto& t : f.tensors()) {
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.n_bytes);
    }
    p = test::scratch_path("model_err_value_added.gguf");
    w.write(p);
  }
  expect_load_error(p, msg);
}

// Issue 15: values that were truncated or accepted silently.
TEST(ModelErrors, OutOfRangeMetadataIsRejected) {
  const uint64_t big = (uint64_t(1) << 32) + 8;  // int() of it is 8: a plausible count
  expect_bad_value("olmoe.expert_count", gguf::Value::u64(big), "olmoe.expert_count = 4294967304");
  expect_bad_value("olmoe.block_count", gguf::Value::u64(big + 2), "out of range");
  expect_bad_value("olmoe.context_length", gguf::Value::u64(big), "out of range");
  expect_bad_value("olmoe.context_length", gguf::Value::u32(0), "context_length = 0");
  expect_bad_value("olmoe.embedding_length", gguf::Value::u64(uint64_t(1) << 63), "int64");
  expect_bad_value("olmoe.attention.head_count_kv", gguf::Value::i32(-2), "out of range");
  expect_bad_value("olmoe.expert_feed_forward_length", gguf::Value::u64(big), "out of range");
  // head_count x key_length would overflow the int q_dim().
  expect_bad_value("olmoe.attention.key_length", gguf::Value::u32(1u << 29), "out of range");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char* key : {"olmoe.attention.layer_norm_rms_epsilon", "olmoe.rope.freq_base"}) {
    expect_bad_value(key, gguf::Value::f32(nan), "positive finite");
    expect_bad_value(key, gguf::Value::f32(0.f), "positive finite");
    expect_bad_value(key, gguf::Value::f32(-1e-5f), "positive finite");
    expect_bad_value(key, gguf::Value::f32(std::numeric_limits<float>::infinity()),
                     "positive finite");
  }
  expect_bad_value("olmoe.expert_weights_scale", gguf::Value::f32(-2.f), "expert_weights_scale");
  expect_bad_value("olmoe.expert_weights_scale", gguf::Value::f32(nan), "expert_weights_scale");
}

// The tokenizer must cover the embedding rows: a 100-entry vocabulary for 128 rows would
// let the sampler pick ids the tokenizer cannot decode (issue 15, item 10).
TEST(ModelErrors, TokenizerSmallerThanEmbeddingIsRejected) {
  std::vector<std::string> toks;
  for (int i = 0; i < 128; ++i) toks.push_back(std::to_string(i));  // distinct tokens
  toks.resize(100);
  expect_bad_value("tokenizer.ggml.tokens", gguf::Value::str_array(toks),
                   "the tokenizer has 100 tokens but token_embd.weight has 128 rows");
  for (int i = 100; i < 128; ++i) toks.push_back(std::to_string(i));
  gguf::File f = gguf::File::open(kFixture);
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  }
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(toks));
  for (const auto& t : f.tensors()) {
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.n_bytes);
  }
  const std::string p = test::scratch_path("model_err_vocab_ok.gguf");
  w.write(p);
  EXPECT_NO_THROW(Model::load(p));  // equal sizes load
}

// NaN router weights load (the loader does not scan weights) but the first step fails with
// a NonFiniteError naming the layer and the sequence, and leaves the cache unchanged.
TEST(ModelErrors, NanRouterFailsTheStepNamingTheLayer) {
  gguf::File f = gguf::File::open(kFixture);
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  }
  for (const auto& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.name == "blk.1.ffn_gate_inp.weight") {
      std::vector<float> v(t.n_bytes / 4, std::numeric_limits<float>::quiet_NaN());
      w.add_tensor(t.name, t.type, ne, v.data(), t.n_bytes);
    } else {
      w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
    }
  }
  const std::string p = test::scratch_path("model_err_nan_router.gguf");
  w.write(p);
  auto m = Model::load(p);
  for (const char* policy : {"topk", "lynx", "budget:m=4"}) {
    ContextOptions co;
    co.n_threads = 1;
    co.n_ctx = 8;
    co.routing = policy;
    Context ctx(*m, co);
    const int32_t a = ctx.new_sequence(), b = ctx.new_sequence();
    std::vector<BatchToken> batch = {{1, a, 0, kTokenPrefill, true},
                                     {2, b, 0, kTokenPrefill, true}};
    try {
      ctx.eval(batch);
      ADD_FAILURE() << policy << ": a step with NaN router logits succeeded";
    } catch (const NonFiniteError& e) {
      EXPECT_NE(std::string(e.what()).find("router logits of layer 1"), std::string::npos)
          << e.what();
      EXPECT_EQ(e.sequences(), (std::vector<int32_t>{a, b})) << e.what();
    }
    EXPECT_EQ(ctx.sequence_length(a), 0);
  }
}

// A dense model has no router: a NaN norm weight shows in the hidden states, named by layer.
TEST(ModelErrors, NanNormInADenseModelNamesTheLayer) {
  const std::string dense =
      std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/llama-dense-f32.gguf";
  gguf::File f = gguf::File::open(dense);
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  }
  for (const auto& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    std::vector<float> v(t.n_bytes / 4, std::numeric_limits<float>::quiet_NaN());
    w.add_tensor(t.name, t.type, ne,
                 t.name == "blk.1.attn_norm.weight" ? static_cast<const void*>(v.data()) : t.data,
                 t.n_bytes);
  }
  const std::string p = test::scratch_path("model_err_nan_norm.gguf");
  w.write(p);
  auto m = Model::load(p);
  ContextOptions co;
  co.n_threads = 1;
  co.n_ctx = 4;
  Context ctx(*m, co);
  const int32_t s = ctx.new_sequence();
  BatchToken t{3, s, 0, kTokenPrefill, true};
  try {
    ctx.eval({&t, 1});
    ADD_FAILURE() << "a NaN norm weight went unnoticed";
  } catch (const NonFiniteError& e) {
    EXPECT_NE(std::string(e.what()).find("hidden states after layer 1 (sequence 0)"),
              std::string::npos)
        << e.what();
  }
}

// Routing specs that do not fit the model are refused when the context is made.
TEST(ModelErrors, RoutingSpecAboveTheModelsK) {
  auto m = Model::load(kFixture);  // olmoe fixture: 16 experts, k = 4
  for (const char* spec : {"static-k:k=5", "ser:kmin=9,t=0.5", "oea:k0=65", "budget:m=17"}) {
    ContextOptions co;
    co.routing = spec;
    EXPECT_THROW(Context(*m, co), Error) << spec;
  }
  ContextOptions ok;
  ok.routing = "static-k:k=4";
  EXPECT_NO_THROW(Context(*m, ok));
}

TEST(ModelErrors, NotAGgufFile) {
  const std::string path = test::scratch_path("model_err_text.gguf");
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fputs("this is not a model", f);
  std::fclose(f);
  EXPECT_THROW(Model::load(path), Error);
  EXPECT_THROW(Model::load("/nonexistent/model.gguf"), Error);
}

class BatchErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    model = Model::load(kFixture);
    ContextOptions co;
    co.n_threads = 1;
    co.n_ctx = 8;
    ctx = std::make_unique<Context>(*model, co);
    seq = ctx->new_sequence();
    BatchToken t{1, seq, 0, kTokenPrefill, true};
    ctx->eval({&t, 1});
  }
  void expect_rejected(std::vector<BatchToken> batch, const std::string& substring) {
    const int32_t before = ctx->sequence_length(seq);
    try {
      ctx->eval(batch);
      ADD_FAILURE() << "batch accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
    }
    EXPECT_EQ(ctx->sequence_length(seq), before) << "a rejected batch changed the cache";
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  int32_t seq = -1;
};

TEST_F(BatchErrors, UnknownSequence) {
  expect_rejected({{1, 7, 0, 0, true}}, "unknown sequence id 7");
}
TEST_F(BatchErrors, PositionGap) {
  expect_rejected({{1, seq, 1, 0, true}, {2, seq, 3, 0, true}}, "position 3 given, 2 expected");
}
TEST_F(BatchErrors, TokenOutOfRange) {
  expect_rejected({{100000, seq, 1, 0, true}}, "token id 100000 out of range");
}
TEST_F(BatchErrors, ContextLimit) {
  std::vector<BatchToken> b;
  for (int i = 1; i <= 8; ++i) b.push_back({1, seq, i, kTokenPrefill, false});
  expect_rejected(b, "exceeds the context limit of 8");
}
TEST_F(BatchErrors, EmptyBatch) {
  expect_rejected({}, "empty batch");
}
TEST_F(BatchErrors, UnknownRoutingPolicy) {
  EXPECT_THROW(ctx->set_routing("nonsense:x=1"), Error);
  EXPECT_EQ(ctx->routing(), "topk");
}

TEST_F(BatchErrors, FreedSequenceIsGoneAndIdReused) {
  ctx->free_sequence(seq);
  std::vector<BatchToken> b = {{1, seq, 1, 0, true}};
  EXPECT_THROW(ctx->eval(b), Error);
  EXPECT_THROW(ctx->sequence_length(seq), Error);
  EXPECT_EQ(ctx->new_sequence(), seq);
  EXPECT_EQ(ctx->sequence_length(seq), 0);
}

}  // namespace
}  // namespace lynx
