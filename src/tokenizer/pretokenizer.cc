#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "lynx/error.h"
#include "lynx/gguf.h"
#include "tokenizer/unicode.h"

namespace lynx::tok {
namespace {

// The regex strings are facts of the tokenizers they reproduce (HF tokenizer.json
// pre_tokenizer patterns, as llama.cpp's llm_tokenizer_bpe lists them per pre type). Where
// llama.cpp rewrote a pattern only because its regex engine lacks a feature, the original
// pattern is used, since PCRE2 has the feature:
//  - GPT-2: llama.cpp's pattern ends in `\s+(?!\S)`, but its hand-written matcher for that
//    pattern also takes a lone trailing whitespace run, i.e. `|\s+`, which is written here.
//  - `(?i:'s|...)` stays spelled out as '[sS]... : PCRE2's caseless mode would also fold
//    U+017F and U+212A, which llama.cpp never matches.
//  - gpt-4o / tekken use the \p{Lu}/\p{Ll} classes of the original instead of llama.cpp's
//    ASCII-only [^a-z]/[^A-Z] approximation.

constexpr const char* kContractions =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))";

constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string llama3_like(const char* digits) {
  return std::string(kContractions) + R"(|[^\r\n\p{L}\p{N}]?\p{L}+|)" + digits +
         R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

std::string gpt4o() {
  const std::string c = std::string(kContractions) + "?";
  return R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" + c +
         R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" + c +
         R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek LLM's cased-letter class. Three Greek Extended range ends are escaped: in
// llama.cpp's source they were NFC-normalized into lookalikes (U+1F7D -> U+03CE, U+1FD3 ->
// U+0390, U+1FDB -> U+038A), which turns their ranges around; these are the original ends.
constexpr const char* kDeepseekLetters =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-"
    "ᲺᲽ-"
    "Ჿᴀ-"
    "ᴫᵫ-ᵷᵹ-ᶚ"
    "Ḁ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴ"
    "ℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-"
    "𐓓𐓘-"
    "𐓻𐲀-"
    "𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";

constexpr const char* kCjk = "[一-龥ࠀ-一가-퟿]+";

struct PreSpec {
  PreTokenizerInfo info;
  std::vector<std::string> regexes;
};

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  for (auto n : names) {
    if (n == name) return true;
  }
  return false;
}

// The name -> regex table (llama.cpp's llama_vocab::impl::load pre-type names).
bool lookup(std::string_view name, PreSpec* spec) {
  PreTokenizerInfo& info = spec->info;
  auto& rx = spec->regexes;
  info.name = std::string(name);
  if (name == "default" || name.empty()) {
    rx = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  } else if (one_of(name, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                           "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "jais",
                           "trillion", "granite-docling", "exaone4"})) {
    rx = {kGpt2};
  } else if (one_of(name, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                           "midm-2.0", "lfm2", "jina-v5-nano"})) {
    rx = {llama3_like(R"(\p{N}{1,3})")};
    info.ignore_merges = true;
    info.add_bos = true;
  } else if (one_of(name, {"dbrx", "smaug-bpe"})) {
    rx = {llama3_like(R"(\p{N}{1,3})")};
  } else if (one_of(name, {"glm4", "chatglm-bpe"})) {
    rx = {llama3_like(R"(\p{N}{1,3})")};
    info.no_bos = true;
  } else if (one_of(name, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan",
                           "solar-open", "megrez"})) {
    rx = {llama3_like(R"(\p{N})")};
  } else if (name == "qwen35") {
    rx = {
        std::string(kContractions) +
        R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  } else if (name == "deepseek-llm") {
    rx = {"[\r\n]", kDeepseekLetters, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$",
          kCjk,     R"(\p{N}+)"};
  } else if (name == "deepseek-coder") {
    rx = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"};
  } else if (one_of(name, {"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"})) {
    rx = {
        R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  } else if (name == "falcon") {
    rx = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
  } else if (one_of(name, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                           "minerva-7b", "mellum2"})) {
    rx = {R"(\p{N})", kGpt2};
  } else if (one_of(name, {"poro-chat", "bloom", "gpt3-finnish"})) {
    rx = {" ?[^(\\s|.,!?…。，、।۔،)]+"};
  } else if (name == "tekken") {
    rx = {kTekken};
    info.ignore_merges = true;
    info.add_bos = true;
  } else if (one_of(name, {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"})) {
    rx = {gpt4o()};
  } else if (name == "seed-coder") {
    rx = {std::string(kContractions) +
          R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  } else if (one_of(name, {"grok-2"})) {
    rx = {llama3_like(R"(\p{N})")};
  } else if (one_of(name, {"bailingmoe", "bailingmoe2", "llada-moe"})) {
    rx = {
        R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"};
  } else {
    return false;
  }
  return true;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  // Bytes a match can start with (PCRE2's start bitmap); words holding none are skipped
  // without calling the matcher, which matters for the six-pass DeepSeek pre-tokenizer.
  bool has_bitmap = false;
  std::array<bool, 256> can_start{};
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

std::unique_ptr<PreTokenizer> PreTokenizer::create(std::string_view name) {
  PreSpec spec;
  if (!lookup(name, &spec)) {
    throw Error("unknown pre-tokenizer '" + gguf::printable(name) +
                "' (tokenizer.ggml.pre); lynx-moe knows gpt-2, llama3/llama-bpe, qwen2, "
                "deepseek-llm, deepseek-v3, olmo, dbrx, gpt-4o, tekken, ... (docs/tokenizer.md)");
  }
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->info_ = spec.info;
  for (const auto& pattern : spec.regexes) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // UCP: \s, \p{..} and friends use Unicode properties; DOLLAR_ENDONLY: `$` is the end of
    // the word only, as in std::regex (ECMAScript), not also before a final newline.
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      throw Error("pre-tokenizer '" + std::string(name) + "': regex does not compile at " +
                  std::to_string(err_off) + ": " + reinterpret_cast<const char*>(msg));
    }
    auto rx = std::make_unique<Regex>();
    rx->code = code;
    rx->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // else the interpreter runs
    const uint8_t* bitmap = nullptr;
    if (pcre2_pattern_info(code, PCRE2_INFO_FIRSTBITMAP, &bitmap) == 0 && bitmap) {
      rx->has_bitmap = true;
      for (int b = 0; b < 256; ++b) rx->can_start[b] = (bitmap[b / 8] >> (b % 8)) & 1;
    }
    pre->regexes_.push_back(std::move(rx));
  }
  return pre;
}

namespace {

// Per-call PCRE2 state, so split() is const and thread-safe.
struct MatchState {
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit = nullptr;
  pcre2_match_data* md = nullptr;
  MatchState() {
    mctx = pcre2_match_context_create(nullptr);
    // Long whitespace runs make `\s+(?!\S)` and `\s*[\r\n]+` backtrack deeply; give the JIT
    // room instead of failing.
    jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (jit) pcre2_jit_stack_assign(mctx, nullptr, jit);
    md = pcre2_match_data_create(1, nullptr);
  }
  ~MatchState() {
    pcre2_match_data_free(md);
    pcre2_jit_stack_free(jit);
    pcre2_match_context_free(mctx);
  }
};

// Splits the words of `in` (spans of `text`) by one regex into `out`.
template <typename Rx>
void split_by(const Rx& rx, std::string_view text, const std::vector<Span>& in,
              std::vector<Span>* out, MatchState& st) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (const Span& w : in) {
    // The word is the whole subject: lookaheads and `$` must not see past it.
    const PCRE2_SPTR s = subject + w.first;
    const PCRE2_SIZE len = w.second - w.first;
    if (rx.has_bitmap) {
      bool any = false;
      for (PCRE2_SIZE i = 0; i < len && !any; ++i) any = rx.can_start[s[i]];
      if (!any) {
        out->push_back(w);
        continue;
      }
    }
    PCRE2_SIZE pos = 0;
    PCRE2_SIZE gap = 0;  // start of the pending unmatched text
    while (pos < len) {
      const int rc = rx.jit ? pcre2_jit_match(rx.code, s, len, pos, 0, st.md, st.mctx)
                            : pcre2_match(rx.code, s, len, pos, PCRE2_NO_UTF_CHECK, st.md, st.mctx);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        throw Error(std::string("pre-tokenizer regex failed: ") +
                    reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
      PCRE2_SIZE mb = ov[0], me = ov[1];
      if (me == mb) {
        // None of the patterns can match empty; step one character if one ever does.
        pos = mb + utf8_len_from_lead(s[mb]);
        continue;
      }
      if (mb > gap) out->emplace_back(w.first + gap, w.first + mb);
      out->emplace_back(w.first + mb, w.first + me);
      gap = pos = me;
    }
    if (gap < len) out->emplace_back(w.first + gap, w.first + len);
  }
}

}  // namespace

void PreTokenizer::split(std::string_view raw, std::vector<Span>* words) const {
  if (raw.empty()) return;
  Sanitized san;
  const bool valid = sanitize_utf8(raw, &san);
  const std::string_view text = valid ? raw : std::string_view(san.text);

  MatchState st;
  std::vector<Span> cur{{0u, static_cast<uint32_t>(text.size())}};
  std::vector<Span> next;
  for (const auto& rx : regexes_) {
    next.clear();
    next.reserve(cur.size() * 2 + 16);
    split_by(*rx, text, cur, &next, st);
    cur.swap(next);
  }
  if (valid) {
    words->insert(words->end(), cur.begin(), cur.end());
    return;
  }
  // Map back to the raw bytes: the words keep the original (invalid) bytes, so byte-level BPE
  // stays lossless.
  for (const Span& w : cur) {
    words->emplace_back(san.to_raw[w.first], san.to_raw[w.second]);
  }
}

}  // namespace lynx::tok
