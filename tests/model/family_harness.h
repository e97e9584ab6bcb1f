// The checks every model family's golden suite makes, in one place: each family test names its
// fixture directory (tests/reference/fixtures/<family>/, written by make_<family>_fixtures.py
// from the family's NumPy reference) and calls these, keeping only what is its own (the config
// it reads, the mechanisms that must matter, its bad files).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "logits_util.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"

namespace lynx::testing_util {

// A tensor's replacement in a rewritten file: its shape, bytes and type (the original's when
// unset).
struct TensorData {
  std::vector<int64_t> ne;
  std::vector<uint8_t> bytes;
  std::optional<gguf::TensorType> type = std::nullopt;
};

// F32 values as an F32 tensor of the given shape.
TensorData f32_tensor(std::vector<int64_t> ne, const std::vector<float>& values);

// What a rewrite changes in a copy of a fixture; an unset member changes nothing.
struct GgufEdit {
  // Sees each metadata key and may change its value; false drops the key.
  std::function<bool(const std::string& key, gguf::Value& value)> kv;
  // Keys added (after the copied ones).
  std::vector<std::pair<std::string, gguf::Value>> add;
  // true drops the tensor.
  std::function<bool(const gguf::TensorInfo&)> drop;
  // A replacement for the tensor, or nullopt to copy it.
  std::function<std::optional<TensorData>(const gguf::TensorInfo&)> replace;
};

// Keeps every key but sets `key` to `value` (added when missing).
GgufEdit set_key(const std::string& key, gguf::Value value);
// The same for several keys at once.
GgufEdit set_keys(std::vector<std::pair<std::string, gguf::Value>> keys);
// Drops the named tensor.
GgufEdit drop_tensor(const std::string& name);
// Drops every tensor `pred` is true for.
GgufEdit drop_where(std::function<bool(const gguf::TensorInfo&)> pred);
// Gives the named tensor other F32 contents of its own shape.
GgufEdit replace_f32(const std::string& name, std::vector<float> values);
// Drops the named metadata key.
GgufEdit drop_key(const std::string& key);

class FamilyFixtures {
 public:
  // The fixtures of tests/reference/fixtures/<family>/.
  explicit FamilyFixtures(std::string family);

  const std::string& dir() const { return dir_; }
  // The path of fixture `name` (without .gguf).
  std::string gguf(const std::string& name) const { return dir_ + name + ".gguf"; }
  std::unique_ptr<Model> load(const std::string& name) const { return Model::load(gguf(name)); }
  // The token ids the goldens were made from (tokens.txt).
  std::vector<int32_t> tokens() const;
  // n F32 golden logits of fixture `name`.
  std::vector<float> golden(const std::string& name, size_t n) const;
  // Every position's logits of tokens() by one prefill batch ([n x V]).
  std::vector<float> prefill(const Model& m, const ContextOptions& o = exact_ctx()) const;
  // A copy of fixture `name` with `edit` applied, written to a scratch file named after the
  // family and `out`; returns its path.
  std::string rewrite(const std::string& name, const std::string& out, const GgufEdit& edit) const;

 private:
  std::string family_, dir_;
};

// Every position's logits against the goldens, three ways: one prefill batch; one token per
// step; and token by token interleaved in the same batches with a second sequence fed the
// tokens reversed, whose row must equal the single sequence's bit for bit (batch invariance).
void expect_goldens_at_every_position(const FamilyFixtures& fx, const std::string& name,
                                      double tol = 1e-5);
void expect_goldens_at_every_position(const FamilyFixtures& fx, const Model& m,
                                      const std::string& golden_name, double tol = 1e-5);

// The default path (quantized activations, integer products) of fixture `name` stays within
// `tol` of the exact goldens and picks the same arg-max at every position.
void expect_integer_path_near_goldens(const FamilyFixtures& fx, const std::string& name,
                                      double tol);

// Every routing policy runs a decode batch of B sequences: finite logits; in every MoE layer
// between 1 and min(B x k, N) distinct experts, and Lynx and OEA (which only move choices onto
// experts the batch already has) no more than top-k; dense layers route nothing.
void expect_every_policy_runs(const FamilyFixtures& fx, const std::string& name, int B = 8);

// Loading `path` fails with an Error whose message contains `substring`.
void expect_load_error(const std::string& path, const std::string& substring);

}  // namespace lynx::testing_util
