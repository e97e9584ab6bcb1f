#include "tokenizer/report.h"

#include <algorithm>
#include <random>

#include <time.h>

#include "lynx/gguf.h"
#include "tokenizer/unicode.h"

namespace lynx::tok {

std::string describe_tokens(const Tokenizer& tok, std::span<const int32_t> ids, bool ids_only) {
  std::string out;
  if (ids_only) {
    out += '[';
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ", ";
      out += std::to_string(ids[i]);
    }
    out += "]\n";
    return out;
  }
  for (int32_t id : ids) {
    std::string num = std::to_string(id);
    if (num.size() < 6) num.insert(0, 6 - num.size(), ' ');
    // A piece is bytes from the file: printable() keeps escape sequences off the terminal.
    out += num + " -> '" + gguf::printable(tok.token_to_piece(id)) + "'\n";
  }
  return out;
}

std::string mixed_text(size_t bytes, uint64_t seed) {
  static const char* kWords[] = {
      "the",   "of",      "and",       "to",     "in",      "is",         "that",    "for",
      "it",    "as",      "was",       "with",   "be",      "by",         "on",      "not",
      "he",    "this",    "are",       "or",     "his",     "from",       "at",      "which",
      "but",   "have",    "an",        "had",    "they",    "you",        "were",    "their",
      "one",   "all",     "we",        "can",    "her",     "has",        "there",   "been",
      "if",    "more",    "when",      "will",   "would",   "who",        "so",      "no",
      "model", "expert",  "router",    "batch",  "token",   "inference",  "memory",  "bandwidth",
      "layer", "weights", "mixture",   "sparse", "compute", "throughput", "latency", "Lynx",
      "GGUF",  "don't",   "it's",      "we'll",  "they've", "I'm",        "Qwen",    "DeepSeek",
      "OLMoE", "Mixtral", "quantized", "kernel", "cache"};
  static const char* kCode[] = {
      "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
      "def forward(self, x):\n    return self.w2(F.silu(self.w1(x)) * self.w3(x))\n",
      "if (err != nullptr) { return -EINVAL; }\n", "    const auto& e = experts[ids[t * k + j]];\n",
      "<div class=\"row\">{{ value | trim }}</div>\n"};
  static const char* kCyrillic[] = {"модель", "эксперт", "память", "скорость", "токен"};
  static const uint32_t kEmoji[] = {0x1F600, 0x1F680, 0x1F999, 0x2705, 0x1F525};
  std::mt19937_64 rng(seed);
  std::string s;
  s.reserve(bytes + 256);
  while (s.size() < bytes) {
    const int kind = static_cast<int>(rng() % 20);
    if (kind < 13) {  // a sentence
      const int n = 5 + static_cast<int>(rng() % 15);
      for (int i = 0; i < n; ++i) {
        std::string w = kWords[rng() % std::size(kWords)];
        if (i == 0) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
        s += w;
        if (rng() % 11 == 0) s += ',';
        s += ' ';
      }
      if (rng() % 4 == 0) s += std::to_string(rng() % 100000) + " ";
      s.back() = '.';
      s += rng() % 5 == 0 ? "\n\n" : " ";
    } else if (kind < 15) {
      s += kCode[rng() % std::size(kCode)];
    } else if (kind < 17) {
      s += kCyrillic[rng() % std::size(kCyrillic)];
      s += ' ';
    } else if (kind < 19) {
      for (int i = 0, n = 2 + static_cast<int>(rng() % 10); i < n; ++i) {
        utf8_append(s, 0x4E00 + static_cast<uint32_t>(rng() % 0x5000));
      }
      s += "。";
    } else {
      utf8_append(s, kEmoji[rng() % std::size(kEmoji)]);
      s += ' ';
    }
  }
  // Cut at a character boundary.
  size_t cut = bytes;
  while (cut > 0 && (static_cast<uint8_t>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  return s;
}

BenchResult bench_encode(const Tokenizer& tok, std::string_view text, int reps) {
  BenchResult r;
  double best = 1e30;
  // Thread CPU time: on a shared machine the wall clock also counts time spent descheduled.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  };
  for (int i = 0; i < std::max(1, reps); ++i) {
    const double t0 = cpu_now();
    const auto ids = tok.encode(text, false, false);
    const double dt = cpu_now() - t0;
    best = std::min(best, dt);
    r.n_tokens = ids.size();
  }
  r.seconds = best;
  r.mb_per_s = best > 0 ? double(text.size()) / 1e6 / best : 0;
  return r;
}

}  // namespace lynx::tok
