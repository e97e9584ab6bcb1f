// Chat templates of released models rendered by lynx's engine and by python3-jinja2 the way
// transformers renders them (render_goldens.py): the outputs must be byte-identical, and
// where jinja2 raises, lynx must raise too.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lynx/chat_template.h"

namespace lynx {
namespace {

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/tests/template/";
constexpr int64_t kNow = 1768478400;  // 2026-01-15 12:00 UTC, as render_goldens.py fixes it

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TemplateGolden, ByteIdenticalToJinja2) {
  const auto goldens = nlohmann::ordered_json::parse(slurp(kDir + "goldens.json"));
  ASSERT_GT(goldens.size(), 100u);
  std::map<std::string, ChatTemplate> parsed;
  std::map<std::string, std::pair<int, int>> tally;  // template -> (passed, cases)
  TemplateOptions opt;
  opt.now = kNow;
  for (const auto& rec : goldens) {
    const std::string name = rec["template"];
    auto it = parsed.find(name);
    if (it == parsed.end()) {
      const std::string src = rec.contains("source") ? rec["source"].get<std::string>()
                                                     : slurp(kDir + "templates/" + name);
      try {
        it = parsed.emplace(name, ChatTemplate(src, opt)).first;
      } catch (const Error& e) {
        ADD_FAILURE() << name << ": " << e.what();
        continue;
      }
    }
    const std::string label = name + " / " + rec.value("case", std::string("-"));
    auto& [passed, cases] = tally[name];
    ++cases;
    if (rec.contains("error")) {
      EXPECT_THROW(it->second.render(rec["context"]), Error)
          << label << ": jinja2 raised " << rec["error"];
      passed += 1;
      continue;
    }
    std::string got;
    try {
      got = it->second.render(rec["context"]);
    } catch (const Error& e) {
      ADD_FAILURE() << label << ": " << e.what();
      continue;
    }
    const std::string want = rec["output"];
    EXPECT_EQ(got, want) << label;
    passed += got == want;
  }
  for (const auto& [name, pc] : tally)
    std::printf("  %-55s %d/%d\n", name.c_str(), pc.first, pc.second);
}

}  // namespace
}  // namespace lynx
