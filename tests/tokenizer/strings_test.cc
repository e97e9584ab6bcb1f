// util::trim and util::contains (src/util/strings.h), shared by chat templates (Jinja's
// `trim`), routing specs and the GGUF summary.
#include <gtest/gtest.h>

#include "util/strings.h"

namespace lynx {
namespace {

TEST(UtilStrings, TrimStripsPythonsAsciiWhitespaceByDefault) {
  EXPECT_EQ(util::trim(" \t\n\r\v\fhi there\x1c\x1d\x1e\x1f "), "hi there");
  EXPECT_EQ(util::trim("\n\n"), "");
  EXPECT_EQ(util::trim(""), "");
  // Non-ASCII bytes (here the UTF-8 of U+00A0, no-break space) are not ASCII whitespace.
  EXPECT_EQ(util::trim("\xC2\xA0x\xC2\xA0"), "\xC2\xA0x\xC2\xA0");
  EXPECT_EQ(util::trim("a\x1b"), "a\x1b");  // 0x1b (escape) is not whitespace
}

TEST(UtilStrings, TrimWithACharacterSetStripsOnlyThose) {
  EXPECT_EQ(util::trim(" \tlynx:alpha=3\t ", " \t"), "lynx:alpha=3");
  EXPECT_EQ(util::trim("\nx\n", " \t"), "\nx\n");
  EXPECT_EQ(util::trim(" \t \t", " \t"), "");
}

TEST(UtilStrings, Contains) {
  EXPECT_TRUE(util::contains("blk.0.ffn_up_exps.weight", "_exps"));
  EXPECT_FALSE(util::contains("blk.0.ffn_up.weight", "_exps"));
  EXPECT_TRUE(util::contains("abc", ""));
  EXPECT_FALSE(util::contains("", "a"));
}

}  // namespace
}  // namespace lynx
