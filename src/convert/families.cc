// The convert families: one table per model_type in families/<family>.cc (family.h says what
// a table holds; facts from llama.cpp's convert_hf_to_gguf.py, keys written per model class,
// and gguf-py/gguf/tensor_mapping.py, HF name -> tensor), listed here; and what they share.
// Tokenizer pre-tokenizer names: the ones llama.cpp's hash table picks for these families'
// released tokenizers (Qwen1.5/2/3 "qwen2", OLMo "olmo", DeepSeek-LLM / V2 "deepseek-llm",
// DeepSeek-V3 "deepseek-v3", Llama 3 style BPE "llama-bpe", gpt-oss's o200k "gpt-4o", GLM-4.5
// "glm4", MiniMax-M2 "minimax-m2", dots.llm1's Qwen2 tokenizer "qwen2", Qwen3-Next "qwen2", Qwen3.5
// "qwen35", Hunyuan-A13B "hunyuan", GLM-5 "glm4" (GLM-4.5's; not checked against llama.cpp's hash),
// Mistral Small 4 "tekken".
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

}  // namespace table

namespace {

using namespace table;

constexpr const Family* kFamilies[] = {
    &kMixtral,   &kLlama,     &kMistral, &kQwen2Moe,   &kQwen3Moe,    &kQwen3VlMoe,
    &kOlmoe,     &kQwen2,     &kQwen3,   &kDeepseekV2, &kDeepseekV3,  &kGptOss,
    &kGlm4Moe,   &kMinimaxM2, &kDots1,   &kErnie45Moe, &kBailingMoe2, &kQwen3Next,
    &kQwen35Moe, &kStep35,    &kGemma4,  &kHunyuanMoe, &kGlmMoeDsa,   &kMistral4};

}  // namespace

const TensorRule* find_rule(const Family& f, std::string_view tensor, bool mla_split) {
  auto fits = [&](const TensorRule& r) {
    return tensor == r.tensor &&
           (r.layout == Layout::kAny || (r.layout == Layout::kMlaSplit) == mla_split);
  };
  for (const TensorRule& r : f.global) {
    if (fits(r)) return &r;
  }
  for (const auto& group : f.layer) {
    for (const TensorRule& r : group) {
      if (fits(r)) return &r;
    }
  }
  return nullptr;
}

const char* absent_reason(const Family& f, std::string_view tensor) {
  for (const Absent& a : f.absent) {
    if (tensor == a.tensor) return a.why;
  }
  return nullptr;
}

// The registered architectures (src/model/arch/registry.cc) that no table converts, and why:
// none since mistral4 got its table; a new architecture without one gets a line here.
std::span<const Unconverted> unconverted() {
  return {};
}

std::span<const Family* const> families() {
  return kFamilies;
}

const Family& find_family(const std::string& model_type) {
  for (const Family* f : kFamilies) {
    if (model_type == f->model_type) return *f;
    for (const char* other : f->other_model_types) {
      if (model_type == other) return *f;
    }
  }
  std::string list;
  for (const Family* f : kFamilies) {
    list += std::string(list.empty() ? "" : ", ") + f->model_type;
    for (const char* other : f->other_model_types) list += std::string(", ") + other;
  }
  throw Error("config.json: model_type '" + gguf::printable(model_type) +
              "' is not supported by convert (supported: " + list + ")");
}

}  // namespace lynx::convert
