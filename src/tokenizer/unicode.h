// UTF-8 helpers and GPT-2's byte <-> code point mapping, shared by the tokenizers.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lynx::tok {

// Length of a UTF-8 sequence from its lead byte alone, without validation (llama.cpp's SPM
// splits characters this way: a stray continuation byte counts as one character).
inline size_t utf8_len_from_lead(uint8_t c) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

// Decodes one strictly valid UTF-8 character (no overlongs, no surrogates, <= U+10FFFF) at
// p[0..n). Returns its length, 0 when the bytes are invalid, or -1 when they are a valid but
// incomplete prefix (more bytes could complete it).
int utf8_decode(const uint8_t* p, size_t n, uint32_t* cp);

void utf8_append(std::string& out, uint32_t cp);

// Text made safe for a UTF-8 regex engine: every byte that is not part of a valid character
// becomes U+FFFD (as llama.cpp does when it converts text to code points). `to_raw` maps each
// byte offset of `text` (and its end) back to the original string; empty when the input was
// already valid, in which case offsets are identical.
struct Sanitized {
  std::string text;
  std::vector<uint32_t> to_raw;
};
// Returns true (and leaves `out` empty) when `raw` is valid UTF-8.
bool sanitize_utf8(std::string_view raw, Sanitized* out);

// GPT-2's bytes_to_unicode: printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to
// themselves, the other 68 bytes to U+0100, U+0101, ... in byte order, so every byte has a
// visible, non-space code point.
struct ByteMap {
  std::array<std::string, 256> byte_to_utf8;  // encoded form of each byte
  ByteMap();
  // The byte an encoded code point stands for, or -1.
  int cp_to_byte(uint32_t cp) const;
};

}  // namespace lynx::tok
