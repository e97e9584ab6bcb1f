// The convert families: one table per model_type in families/<family>.cc (family.h says what
// a table holds; facts from llama.cpp's convert_hf_to_gguf.py, keys written per model class,
// and gguf-py/gguf/tensor_mapping.py, HF name -> tensor), listed here; and what they share.
// Tokenizer pre-tokenizer names: the ones llama.cpp's hash table picks for these families'
// released tokenizers (Qwen1.5/2/3 "qwen2", OLMo "olmo", DeepSeek-LLM / V2 "deepseek-llm",
// DeepSeek-V3 "deepseek-v3", Llama 3 style BPE "llama-bpe", gpt-oss's o200k "gpt-4o", GLM-4.5
// "glm4", MiniMax-M2 "minimax-m2", dots.llm1's Qwen2 tokenizer "qwen2").
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert {
namespace table {

std::string key(const char* arch, const char* k) {
  return std::string(arch) + "." + k;
}

void no_rope_scaling(const HfConfig& c) {
  if (c.has("rope_scaling")) {
    c.fail("rope_scaling is set, which the converter does not support for this family");
  }
}

void plain_extra(const HfConfig& c, gguf::Writer&) {
  no_rope_scaling(c);
}

bool glm4moe_moe_layer(const HfConfig& c, int il) {
  return il >= c.get_int("first_k_dense_replace", 0);
}

}  // namespace table

namespace {

using namespace table;

constexpr const Family* kFamilies[] = {
    &kMixtral, &kLlama,     &kMistral, &kQwen2Moe,   &kQwen3Moe,    &kQwen3VlMoe,
    &kOlmoe,   &kQwen2,     &kQwen3,   &kDeepseekV2, &kDeepseekV3,  &kGptOss,
    &kGlm4Moe, &kMinimaxM2, &kDots1,   &kErnie45Moe, &kBailingMoe2, &kBailingMoe2AsV1Name};

}  // namespace

bool applies(When w, const LayerFacts& l) {
  switch (w) {
    case When::kAlways:
    case When::kOptional:
      return true;
    case When::kMoeLayer:
    case When::kMoeOptional:
      return l.moe;
    case When::kDenseLayer:
      return !l.moe;
    case When::kShared:
      return l.moe && l.shared;
    case When::kQLora:
      return l.q_lora;
    case When::kNoQLora:
      return !l.q_lora;
    case When::kKvBWhole:
      return !l.mla_split;
    case When::kKvBSplit:
      return l.mla_split;
    case When::kQkNorm:
      return l.qk_norm;
    case When::kNextn:
    case When::kNextnOptional:
      return l.nextn;
  }
  return false;
}

bool optional(When w) {
  return w == When::kOptional || w == When::kMoeOptional || w == When::kNextnOptional;
}

std::span<const Family* const> families() {
  return kFamilies;
}

const Family& find_family(const std::string& model_type) {
  for (const Family* f : kFamilies) {
    if (model_type == f->model_type) return *f;
  }
  std::string list;
  for (const Family* f : kFamilies) list += std::string(list.empty() ? "" : ", ") + f->model_type;
  throw Error("config.json: model_type '" + gguf::printable(model_type) +
              "' is not supported by convert (supported: " + list + ")");
}

}  // namespace lynx::convert
