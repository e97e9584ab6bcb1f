// The registered families, one description per file of this folder (registry.cc lists them).
#pragma once
#include "model/arch/arch.h"

namespace lynx::arch {

extern const ArchDesc kLlama;        // llama.cc: Llama, Mixtral
extern const ArchDesc kQwen2Moe;     // qwen2moe.cc
extern const ArchDesc kQwen3Moe;     // qwen3moe.cc
extern const ArchDesc kQwen3VlMoe;   // qwen3moe.cc: Qwen3-VL-30B-A3B / 235B-A22B (text)
extern const ArchDesc kOlmoe;        // olmoe.cc
extern const ArchDesc kQwen2;        // qwen2.cc (dense)
extern const ArchDesc kQwen3;        // qwen3.cc (dense)
extern const ArchDesc kDeepseek2;    // deepseek2.cc: DeepSeek-V2 / V2-Lite / V3 layout (MLA)
extern const ArchDesc kMistral4;     // deepseek2.cc: Mistral Small 4
extern const ArchDesc kGlmDsa;       // deepseek2.cc: GLM-5 (DSA indexer unused)
extern const ArchDesc kGlm4Moe;      // glm4moe.cc: GLM-4.5, GLM-4.5-Air
extern const ArchDesc kGptOss;       // gpt_oss.cc: gpt-oss-20b / 120b
extern const ArchDesc kMinimaxM2;    // minimax_m2.cc: MiniMax-M2 / M2.1 / M2.5
extern const ArchDesc kErnie45Moe;   // ernie4_5_moe.cc: ERNIE-4.5-21B-A3B / 300B-A47B
extern const ArchDesc kDots1;        // dots1.cc: dots.llm1 (rednote-hilab)
extern const ArchDesc kBailingMoe2;  // bailingmoe2.cc: Ling / Ring 2.0 (inclusionAI)
extern const ArchDesc kHunyuanMoe;   // hunyuan_moe.cc: Hunyuan-A13B (Tencent)
extern const ArchDesc kGemma4;       // gemma4.cc: Gemma 4 26B-A4B (Google)
extern const ArchDesc kStep35;       // step35.cc: Step-3.5-Flash (StepFun)
extern const ArchDesc kQwen3Next;    // qwen3next.cc: Qwen3-Next-80B-A3B, Qwen3-Coder-Next
extern const ArchDesc kQwen35Moe;    // qwen3next.cc: Qwen3.5 35B-A3B / 122B-A10B / 397B-A17B

}  // namespace lynx::arch
