// The tiny Hugging Face checkpoints of tests/reference/make_hf_checkpoint.py: made by the ctest
// fixture convert_make_hf_checkpoints before the convert tests run, or here (once per process)
// when a test binary runs on its own. Empty when python3 with NumPy is not available.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace lynx::test {

inline const std::string& hf_checkpoints() {
  static const std::string dir = [] {
    const std::string d = std::string(LYNX_BINARY_DIR) + "/hf-fixtures";
    // qwen3 is written last; mistral3_fp8 and hunyuan_tiktoken are the newest checkpoints (an older
    // directory lacks it).
    if (!std::filesystem::exists(d + "/qwen3/expected.gguf") ||
        !std::filesystem::exists(d + "/mistral3_fp8/config.json") ||
        !std::filesystem::exists(d + "/hunyuan_tiktoken/hy.tiktoken")) {
      const std::string cmd = std::string(LYNX_PYTHON3) + " " + LYNX_SOURCE_DIR +
                              "/tests/reference/make_hf_checkpoint.py --out " + d + " > /dev/null";
      if (std::system(cmd.c_str()) != 0) return std::string();
    }
    return d;
  }();
  return dir;
}

}  // namespace lynx::test
