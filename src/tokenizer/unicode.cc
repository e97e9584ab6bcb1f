#include "tokenizer/unicode.h"

namespace lynx::tok {

int utf8_decode(const uint8_t* p, size_t n, uint32_t* cp) {
  if (n == 0) return -1;
  const uint8_t c = p[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len;
  uint32_t v;
  uint32_t min;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;  // continuation byte, overlong lead C0/C1, or F5..FF
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= n) return -1;
    if ((p[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (p[i] & 0x3F);
    // Reject overlongs and out-of-range values as early as the second byte allows, so an
    // incomplete prefix is only reported when some continuation could make it valid.
    if (i == 1) {
      if (len == 3 && c == 0xE0 && p[1] < 0xA0) return 0;
      if (len == 3 && c == 0xED && p[1] >= 0xA0) return 0;  // surrogates
      if (len == 4 && c == 0xF0 && p[1] < 0x90) return 0;
      if (len == 4 && c == 0xF4 && p[1] >= 0x90) return 0;
    }
  }
  if (v < min) return 0;
  *cp = v;
  return len;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool sanitize_utf8(std::string_view raw, Sanitized* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
  const size_t n = raw.size();
  // Fast path: scan for the first invalid byte; most text is valid.
  size_t i = 0;
  uint32_t cp;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int len = utf8_decode(p + i, n - i, &cp);
    if (len <= 0) break;
    i += len;
  }
  out->text.clear();
  out->to_raw.clear();
  if (i == n) return true;

  out->text.reserve(n + 16);
  out->to_raw.reserve(n + 17);
  out->text.append(raw.substr(0, i));
  for (size_t k = 0; k < i; ++k) out->to_raw.push_back(static_cast<uint32_t>(k));
  while (i < n) {
    const int len = utf8_decode(p + i, n - i, &cp);
    if (len > 0) {
      for (int k = 0; k < len; ++k) {
        out->text += static_cast<char>(p[i + k]);
        out->to_raw.push_back(static_cast<uint32_t>(i + k));
      }
      i += len;
    } else {
      // One invalid byte -> U+FFFD (3 bytes), all mapping back to that byte.
      out->text += "\xEF\xBF\xBD";
      for (int k = 0; k < 3; ++k) out->to_raw.push_back(static_cast<uint32_t>(i));
      i += 1;
    }
  }
  out->to_raw.push_back(static_cast<uint32_t>(n));
  return false;
}

ByteMap::ByteMap() {
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    utf8_append(byte_to_utf8[b], printable ? static_cast<uint32_t>(b) : next++);
  }
}

int ByteMap::cp_to_byte(uint32_t cp) const {
  if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) {
    return static_cast<int>(cp);
  }
  if (cp < 256 || cp >= 256 + 68) return -1;
  // The n-th non-printable byte maps to 256 + n.
  int n = static_cast<int>(cp - 256);
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable && n-- == 0) return b;
  }
  return -1;
}

}  // namespace lynx::tok
