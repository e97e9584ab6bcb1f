// HfConfig: config.json fields with errors that name the field and the model type.
#include <cmath>
#include <limits>

#include "convert/family.h"
#include "lynx/error.h"

namespace lynx::convert {

HfConfig::HfConfig(nlohmann::json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {
  if (!j_.is_object()) throw Error(path_ + ": not a JSON object");
  if (!j_.contains("model_type") || !j_["model_type"].is_string()) {
    throw Error(path_ + ": no \"model_type\" string (is this a Hugging Face config.json?)");
  }
  model_type_ = j_["model_type"].get<std::string>();
  lift_text_config();
  lift_rope_parameters();
  check_sizes();
}

// Fields that size a tensor or divide another value: zero would make a division by zero
// (SIGFPE) or an empty model, so each present one must be a positive integer up front.
void HfConfig::check_sizes() const {
  static constexpr const char* kPositive[] = {
      "hidden_size",
      "num_attention_heads",
      "num_key_value_heads",
      "num_hidden_layers",
      "head_dim",
      "intermediate_size",
      "moe_intermediate_size",
      "vocab_size",
      "moe_layer_freq",
      "num_experts_per_tok",
      "num_local_experts",
      "num_experts",
      "n_routed_experts",
      "kv_lora_rank",
      "qk_rope_head_dim",
      "qk_nope_head_dim",
      "v_head_dim",
      "n_group",
      "topk_group",
      "sliding_window",
      "max_position_embeddings",
  };
  for (const char* k : kPositive) {
    // A per-layer list (Hunyuan's moe_intermediate_size) is checked by its family.
    if (has(k) && !j_[k].is_array() && get_int(k) == 0) {
      fail(std::string("\"") + k + "\" must be at least 1, got 0");
    }
  }
  if (has("num_attention_heads") && has("num_key_value_heads") &&
      get_int("num_attention_heads") % get_int("num_key_value_heads") != 0) {
    fail("num_attention_heads (" + std::to_string(get_int("num_attention_heads")) +
         ") is not a multiple of num_key_value_heads (" +
         std::to_string(get_int("num_key_value_heads")) + ")");
  }
}

// Vision-language checkpoints (qwen3_vl_moe, qwen3_5_moe, gemma4, mistral3) nest the language
// model's fields in "text_config": they are lifted to the top level, where the family rules read
// them (the top-level model_type stays; a field given both ways must agree).
void HfConfig::lift_text_config() {
  if (model_type_ != "qwen3_vl_moe" && model_type_ != "qwen3_5_moe" && model_type_ != "gemma4" &&
      model_type_ != "mistral3") {
    return;
  }
  if (!j_.contains("text_config") || !j_["text_config"].is_object()) {
    fail("\"text_config\" (the language model's fields) is missing or not an object");
  }
  const nlohmann::json tc = j_["text_config"];
  for (const auto& [k, v] : tc.items()) {
    if (k == "model_type") continue;
    if (j_.contains(k) && j_[k] != v) {
      fail("\"" + k + "\" is " + j_[k].dump() + " but text_config." + k + " is " + v.dump());
    }
    j_[k] = v;
  }
}

// transformers 5 writes the rotary settings as one "rope_parameters" object (rope_theta,
// rope_type with its scaling fields, partial_rotary_factor) where older configs have top-level
// rope_theta, rope_scaling and partial_rotary_factor. The family rules read the older layout,
// so the object is lifted into it here; a value written both ways must agree, since which one
// a model's code reads depends on the transformers version it was saved with.
void HfConfig::lift_rope_parameters() {
  // Gemma 4 gives one set per attention type, which its family reads as it is (gemma4.cc).
  if (!has("rope_parameters") || model_type_ == "gemma4") return;
  const nlohmann::json rp = j_["rope_parameters"];
  if (!rp.is_object()) fail("\"rope_parameters\" must be an object");
  if (!rp.contains("rope_type") && !rp.contains("rope_theta") && !rp.empty() &&
      rp.begin()->is_object()) {
    // One set per attention type (Gemma 3 / 4 style): only gemma4 reads that, above.
    fail("\"rope_parameters\" per layer type is not supported");
  }
  auto lift = [&](const char* k) {
    if (!rp.contains(k) || rp[k].is_null()) return;
    if (has(k) && j_[k] != rp[k]) {
      fail(std::string("\"") + k + "\" is " + j_[k].dump() + " but rope_parameters." + k + " is " +
           rp[k].dump());
    }
    j_[k] = rp[k];
  };
  lift("rope_theta");
  lift("partial_rotary_factor");
  std::string type;
  for (const char* k : {"type", "rope_type"}) {  // rope_type wins, as in yarn_keys
    if (rp.contains(k)) {
      if (!rp[k].is_string()) fail(std::string("rope_parameters.") + k + " must be a string");
      type = rp[k].get<std::string>();
    }
  }
  if (type.empty() || type == "default") return;
  nlohmann::json scaling = rp;
  scaling.erase("rope_theta");
  scaling.erase("partial_rotary_factor");
  if (has("rope_scaling")) {
    const nlohmann::json& old = j_["rope_scaling"];
    if (!old.is_object()) fail("\"rope_scaling\" must be an object");
    for (const auto& [k, v] : scaling.items()) {
      if (old.contains(k) && old[k] != v) {
        fail("rope_scaling." + k + " is " + old[k].dump() + " but rope_parameters." + k + " is " +
             v.dump());
      }
    }
    for (const auto& [k, v] : old.items()) scaling.emplace(k, v);
  }
  j_["rope_scaling"] = scaling;
}

void HfConfig::fail(const std::string& what) const {
  throw Error(path_ + " (model_type " + gguf::printable(model_type_) + "): " + what);
}

bool HfConfig::has(const char* key) const {
  return j_.contains(key) && !j_[key].is_null();
}

const nlohmann::json& HfConfig::at(const char* key) const {
  if (!has(key)) fail(std::string("missing key \"") + key + "\"");
  return j_[key];
}

int64_t HfConfig::get_int(const char* key) const {
  const nlohmann::json& v = at(key);
  // Some configs write integers as 4096.0; accept those, refuse fractions.
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < 0 || x > (int64_t(1) << 40)) fail(std::string("\"") + key + "\" is out of range");
    return x;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 0 && d <= double(int64_t(1) << 40) && std::floor(d) == d) return int64_t(d);
  }
  fail(std::string("\"") + key + "\" must be a non-negative integer, got " + v.dump());
}

int64_t HfConfig::get_int(const char* key, int64_t def) const {
  return has(key) ? get_int(key) : def;
}

double HfConfig::get_float(const char* key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    fail(std::string("\"") + key + "\" must be a finite number, got " + v.dump());
  }
  return v.get<double>();
}

double HfConfig::get_float(const char* key, double def) const {
  return has(key) ? get_float(key) : def;
}

bool HfConfig::get_bool(const char* key, bool def) const {
  if (!has(key)) return def;
  if (!j_[key].is_boolean()) fail(std::string("\"") + key + "\" must be true or false");
  return j_[key].get<bool>();
}

std::string HfConfig::get_string(const char* key, const std::string& def) const {
  if (!has(key)) return def;
  if (!j_[key].is_string()) fail(std::string("\"") + key + "\" must be a string");
  return j_[key].get<std::string>();
}

}  // namespace lynx::convert
