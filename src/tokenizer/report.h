// Helpers behind `lynx-moe tokenize`: the llama-tokenize style listing and the throughput
// benchmark (kept in the library so they are unit-tested without the CLI).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "lynx/tokenizer.h"

namespace lynx::tok {

// One line per token, "    id -> 'piece'", or with ids_only a single "[id, id, ...]" line.
// Pieces are printed as their bytes (invalid UTF-8 included), as llama-tokenize does.
std::string describe_tokens(const Tokenizer& tok, std::span<const int32_t> ids, bool ids_only);

// Deterministic "mixed" text of `bytes` bytes: English prose, source code, numbers,
// Cyrillic, CJK and emoji, newlines and indentation.
std::string mixed_text(size_t bytes, uint64_t seed = 1);

struct BenchResult {
  double mb_per_s = 0;  // best of the repetitions, MB = 1e6 bytes
  double seconds = 0;   // best repetition, thread CPU time
  size_t n_tokens = 0;
};
// Encodes `text` `reps` times on the calling thread (no BOS, specials not parsed).
BenchResult bench_encode(const Tokenizer& tok, std::string_view text, int reps);

}  // namespace lynx::tok
