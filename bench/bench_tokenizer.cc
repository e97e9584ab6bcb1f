// Tokenizer throughput on 1 MB of mixed text, one thread, for each vocabulary in
// ../shared/data/vocab (or the GGUF files given as arguments). Not wired into CMake (bench/
// has no targets yet); `lynx-moe tokenize --bench -m FILE` measures the same. Build by hand:
//   g++ -std=c++20 -O2 -Iinclude -Isrc bench/bench_tokenizer.cc \
//     build/release/src/tokenizer/liblynx_tokenizer.a build/release/src/gguf/liblynx_gguf.a \
//     -lpcre2-8 -o bench_tokenizer
#include <cstdio>
#include <string>
#include <vector>

#include "lynx/gguf.h"
#include "lynx/tokenizer.h"
#include "tokenizer/report.h"

int main(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) files.push_back(argv[i]);
  if (files.empty()) {
    for (const char* n :
         {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-deepseek-llm.gguf"}) {
      files.push_back(std::string("../shared/data/vocab/") + n);
    }
  }
  const std::string text = lynx::tok::mixed_text(1000000);
  std::printf("| vocabulary | model | pre | tokens | MB/s (best of 5) |\n|---|---|---|---|---|\n");
  for (const auto& path : files) {
    try {
      const auto f = lynx::gguf::File::open(path);
      const auto tok = lynx::Tokenizer::from_gguf(f);
      const auto r = lynx::tok::bench_encode(*tok, text, 5);
      std::printf("| %s | %s | %s | %zu | %.2f |\n", path.c_str(), tok->model().c_str(),
                  tok->pre().empty() ? "-" : tok->pre().c_str(), r.n_tokens, r.mb_per_s);
    } catch (const std::exception& e) {
      std::printf("| %s | error: %s |\n", path.c_str(), e.what());
    }
  }
  return 0;
}
