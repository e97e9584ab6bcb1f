#include "family_harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../scratch.h"
#include "lynx/error.h"

namespace lynx::testing_util {

TensorData f32_tensor(std::vector<int64_t> ne, const std::vector<float>& values) {
  TensorData t{std::move(ne), std::vector<uint8_t>(values.size() * sizeof(float)),
               gguf::TensorType::F32};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

GgufEdit set_key(const std::string& key, gguf::Value value) {
  GgufEdit e;
  e.add.emplace_back(key, std::move(value));
  return e;
}

GgufEdit set_keys(std::vector<std::pair<std::string, gguf::Value>> keys) {
  GgufEdit e;
  e.add = std::move(keys);
  return e;
}

GgufEdit drop_where(std::function<bool(const gguf::TensorInfo&)> pred) {
  GgufEdit e;
  e.drop = std::move(pred);
  return e;
}

GgufEdit replace_f32(const std::string& name, std::vector<float> values) {
  GgufEdit e;
  e.replace = [name,
               values = std::move(values)](const gguf::TensorInfo& t) -> std::optional<TensorData> {
    if (t.name != name) return std::nullopt;
    return f32_tensor(std::vector<int64_t>(t.ne, t.ne + t.n_dims), values);
  };
  return e;
}

GgufEdit drop_tensor(const std::string& name) {
  GgufEdit e;
  e.drop = [name](const gguf::TensorInfo& t) { return t.name == name; };
  return e;
}

GgufEdit drop_key(const std::string& key) {
  GgufEdit e;
  e.kv = [key](const std::string& k, gguf::Value&) { return k != key; };
  return e;
}

FamilyFixtures::FamilyFixtures(std::string family)
    : family_(std::move(family)),
      dir_(std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/" + family_ + "/") {}

std::vector<int32_t> FamilyFixtures::tokens() const {
  return read_tokens(dir_ + "tokens.txt");
}

std::vector<float> FamilyFixtures::golden(const std::string& name, size_t n) const {
  return read_logits(dir_ + name + ".logits.f32", n);
}

std::vector<float> FamilyFixtures::prefill(const Model& m, const ContextOptions& o) const {
  return prefill_logits(m, tokens(), o);
}

std::string FamilyFixtures::rewrite(const std::string& name, const std::string& out,
                                    const GgufEdit& edit) const {
  gguf::File f = gguf::File::open(gguf(name));
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (!edit.kv || edit.kv(kv.key, v)) w.set(kv.key, v);
  }
  for (const auto& [k, v] : edit.add) w.set(k, v);
  for (const auto& t : f.tensors()) {
    if (edit.drop && edit.drop(t)) continue;
    std::optional<TensorData> r = edit.replace ? edit.replace(t) : std::nullopt;
    if (r) {
      w.add_tensor(t.name, r->type.value_or(t.type), r->ne, r->bytes.data(), r->bytes.size());
    } else {
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.n_bytes);
    }
  }
  const std::string path = test::scratch_path(family_ + "_" + out + ".gguf");
  w.write(path);
  return path;
}

void expect_goldens_at_every_position(const FamilyFixtures& fx, const std::string& name,
                                      double tol) {
  auto m = fx.load(name);
  expect_goldens_at_every_position(fx, *m, name, tol);
}

namespace {
// A prefill that asks for the last position's logits only runs only that row through the last
// layer's attention and FFN (forward.cc): its logits must be the bits of the same row of
// `pre`, the prefill that asked for every position's.
void expect_last_row_alone_equal(const Model& m, const std::vector<int32_t>& toks,
                                 const ContextOptions& o, const std::vector<float>& pre,
                                 const std::string& what) {
  Context ctx(m, o);
  const int32_t s = ctx.new_sequence();
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < toks.size(); ++i) {
    batch.push_back({toks[i], s, int32_t(i), kTokenPrefill, i + 1 == toks.size()});
  }
  ctx.eval(batch);
  ASSERT_EQ(ctx.n_logits(), 1);
  const size_t V = size_t(m.config().n_vocab);
  const auto got = ctx.logits(0);
  ASSERT_TRUE(std::equal(got.begin(), got.end(), pre.end() - std::ptrdiff_t(V)))
      << what << ": the last position's logits of a prefill that asks for no others";
}
}  // namespace

void expect_goldens_at_every_position(const FamilyFixtures& fx, const Model& m,
                                      const std::string& golden_name, double tol) {
  const auto toks = fx.tokens();
  const int V = m.config().n_vocab, n = int(toks.size());
  const auto want = fx.golden(golden_name, size_t(n) * V);
  const auto pre = fx.prefill(m);
  expect_last_row_alone_equal(m, toks, exact_ctx(), pre, golden_name);
  for (int i = 0; i < n; ++i) {
    EXPECT_LT(
        rel_err(std::span(pre).subspan(size_t(i) * V, size_t(V)), &want[size_t(i) * V], size_t(V)),
        tol)
        << golden_name << " prefill position " << i;
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
    EXPECT_LT(rel_err(a.logits(0), &want[size_t(i) * V], size_t(V)), tol)
        << golden_name << " decode position " << i;
    const auto la = a.logits(0), lb = b.logits(1);
    ASSERT_TRUE(std::equal(la.begin(), la.end(), lb.begin()))
        << golden_name << " batched position " << i;
  }
}

void expect_integer_path_near_goldens(const FamilyFixtures& fx, const std::string& name,
                                      double tol) {
  auto m = fx.load(name);
  const int V = m->config().n_vocab, n = int(fx.tokens().size());
  const auto want = fx.golden(name, size_t(n) * V);
  ContextOptions o = exact_ctx();
  o.exact_activations = false;
  const auto got = fx.prefill(*m, o);
  expect_last_row_alone_equal(*m, fx.tokens(), o, got, name + " (integer path)");
  for (int i = 0; i < n; ++i) {
    const float* g = &got[size_t(i) * V];
    const float* w = &want[size_t(i) * V];
    EXPECT_LT(rel_err(std::span(got).subspan(size_t(i) * V, size_t(V)), w, size_t(V)), tol)
        << name << " position " << i;
    EXPECT_EQ(std::max_element(g, g + V) - g, std::max_element(w, w + V) - w)
        << name << " position " << i;
  }
}

void expect_every_policy_runs(const FamilyFixtures& fx, const std::string& name, int B) {
  auto m = fx.load(name);
  const auto toks = fx.tokens();
  ASSERT_GT(toks.size(), size_t(B)) << "the fixture's tokens feed B sequences";
  const ModelConfig& c = m->config();
  const int V = c.n_vocab, k = c.n_expert_used, n_exp = c.n_expert;
  std::vector<int> topk_experts(size_t(c.n_layer), 0);
  for (const std::string spec : {"topk", "lynx", "oea:k0=2", "budget:m=6", "ser:kmin=2,t=0.5",
                                 "static-k:k=2", "cover", "subst"}) {
    ContextOptions o = exact_ctx();
    o.routing = spec;
    Context ctx(*m, o);
    std::vector<int32_t> seqs;
    std::vector<BatchToken> batch;
    for (int b = 0; b < B; ++b) {
      seqs.push_back(ctx.new_sequence());
      batch.push_back({toks[size_t(b)], seqs.back(), 0, kTokenPrefill, false});
    }
    ctx.eval(batch);
    batch.clear();
    for (int b = 0; b < B; ++b) {
      batch.push_back({toks[size_t(b + 1)], seqs[size_t(b)], 1, kTokenDecode, true});
    }
    ctx.eval(batch);
    for (int b = 0; b < B; ++b) {
      const auto l = ctx.logits(b);
      EXPECT_TRUE(std::all_of(l.begin(), l.begin() + V, [](float x) { return std::isfinite(x); }))
          << spec;
    }
    const StepStats& st = ctx.last_step();
    ASSERT_EQ(st.layers.size(), size_t(c.n_layer)) << spec;
    int moe_layers = 0;
    for (size_t il = 0; il < st.layers.size(); ++il) {
      const int d = st.layers[il].distinct_experts;
      if (!c.layer_routed(int(il))) {
        EXPECT_EQ(d, 0) << spec << " dense layer " << il;
        continue;
      }
      ++moe_layers;
      EXPECT_GE(d, 1) << spec << " " << il;
      EXPECT_LE(d, std::min(B * k, n_exp)) << spec << " " << il;
      if (spec == "topk") topk_experts[il] = d;
      if (spec == "lynx" || spec == "oea:k0=2") EXPECT_LE(d, topk_experts[il]) << spec << " " << il;
    }
    EXPECT_GT(moe_layers, 0) << spec;
  }
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

}  // namespace lynx::testing_util
