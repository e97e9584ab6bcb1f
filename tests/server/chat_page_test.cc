// The chat page at / (docs/serving.md, "Chat page"): served as the bytes of
// src/server/chat_page.html with a Content-Security-Policy whose hashes are those of the
// page's inline script and style (checked here by an independent SHA-256, so a wrong hash
// cannot hide where no browser runs), public like /health, and the other routes as before.
// The page's behaviour in a browser is scripts/e2e-chatpage's test.
#include <gtest/gtest.h>
#include <strings.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "server/chat_page.h"
#include "util.h"

namespace lynx::test {
namespace {

// SHA-256 (FIPS 180-4), for the test only.
std::array<uint8_t, 32> sha256(const std::string& msg) {
  static constexpr uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
      0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
      0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
      0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
      0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
      0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
      0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
      0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string m = msg;
  const uint64_t bits = uint64_t(msg.size()) * 8;
  m += char(0x80);
  while (m.size() % 64 != 56) m += char(0);
  for (int i = 7; i >= 0; --i) m += char(uint8_t(bits >> (8 * i)));
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = 0;
      for (int b = 0; b < 4; ++b) w[i] = (w[i] << 8) | uint8_t(m[off + size_t(4 * i + b)]);
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a[8];
    std::copy(h, h + 8, a);
    for (int i = 0; i < 64; ++i) {
      const uint32_t S1 = rotr(a[4], 6) ^ rotr(a[4], 11) ^ rotr(a[4], 25);
      const uint32_t ch = (a[4] & a[5]) ^ (~a[4] & a[6]);
      const uint32_t t1 = a[7] + S1 + ch + k[i] + w[i];
      const uint32_t S0 = rotr(a[0], 2) ^ rotr(a[0], 13) ^ rotr(a[0], 22);
      const uint32_t maj = (a[0] & a[1]) ^ (a[0] & a[2]) ^ (a[1] & a[2]);
      std::copy_backward(a, a + 7, a + 8);
      a[4] += t1;
      a[0] = t1 + S0 + maj;
    }
    for (int i = 0; i < 8; ++i) h[i] += a[i];
  }
  std::array<uint8_t, 32> out{};
  for (int i = 0; i < 32; ++i) out[size_t(i)] = uint8_t(h[i / 4] >> (24 - 8 * (i % 4)));
  return out;
}

std::string base64(const std::array<uint8_t, 32>& d) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < d.size(); i += 3) {
    const size_t n = std::min<size_t>(3, d.size() - i);
    uint32_t v = 0;
    for (size_t j = 0; j < 3; ++j) v = (v << 8) | (j < n ? d[i + j] : 0);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? abc[(v >> (18 - 6 * j)) & 63] : '=';
  }
  return out;
}

std::string element_text(const std::string& html, const std::string& tag) {
  const size_t open = html.find("<" + tag + ">");
  const size_t close = html.find("</" + tag + ">");
  if (open == std::string::npos || close == std::string::npos) return "";
  const size_t begin = open + tag.size() + 2;
  return html.substr(begin, close - begin);
}

std::string header(const Reply& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (strcasecmp(k.c_str(), name.c_str()) == 0) return v;
  }
  return "";
}

TEST(Sha256, KnownAnswers) {
  // FIPS 180-2 appendix B.1 and the empty message.
  EXPECT_EQ(base64(sha256("abc")), "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=");
  EXPECT_EQ(base64(sha256("")), "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
}

TEST(ChatPage, ServedAtRootWithItsPolicy) {
  std::ifstream f(std::string(LYNX_SOURCE_DIR) + "/src/server/chat_page.html", std::ios::binary);
  ASSERT_TRUE(f) << "src/server/chat_page.html";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string file = ss.str();
  ASSERT_EQ(std::string(server::chat_page()), file) << "the build embeds the file as it is";

  Running srv(tiny_options());
  const Reply r = get(srv, "/");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(header(r, "Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(header(r, "X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(r.body, file);

  const std::string csp = header(r, "Content-Security-Policy");
  EXPECT_EQ(csp, std::string(server::chat_page_csp()));
  EXPECT_EQ(csp.rfind("default-src 'none'; ", 0), 0u) << csp;
  EXPECT_NE(csp.find("connect-src 'self'"), std::string::npos) << csp;
  const std::string script = element_text(file, "script");
  const std::string style = element_text(file, "style");
  ASSERT_FALSE(script.empty());
  ASSERT_FALSE(style.empty());
  EXPECT_NE(csp.find("script-src 'sha256-" + base64(sha256(script)) + "';"), std::string::npos)
      << csp;
  EXPECT_NE(csp.find("style-src 'sha256-" + base64(sha256(style)) + "';"), std::string::npos)
      << csp;
  EXPECT_EQ(csp.find("unsafe"), std::string::npos) << csp;

  // Self-contained, and model text is never parsed as markup (the browser test shows it).
  for (const char* s : {"://", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"}) {
    EXPECT_EQ(file.find(s), std::string::npos) << s;
  }

  // HEAD: the headers without the body.
  auto c = srv.client();
  auto head = c.Head("/");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
  // Only GET and HEAD.
  EXPECT_EQ(post(srv, "/", "{}").status, 404);
}

TEST(ChatPage, PublicWhenTheApiNeedsAKey) {
  ServerOptions o = tiny_options();
  o.api_key = "sekret";
  Running srv(o);
  EXPECT_EQ(get(srv, "/").status, 200);  // the page asks for the key itself
  EXPECT_EQ(get(srv, "/v1/models").status, 401);
  EXPECT_EQ(get(srv, "/metrics").status, 401);
  EXPECT_EQ(get(srv, "/index.html").status, 401);  // only / itself is public
}

}  // namespace
}  // namespace lynx::test
