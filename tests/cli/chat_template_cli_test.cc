// `lynx-moe chat-template` prints exactly what jinja2 renders (the template goldens), and bad
// inputs fail with a message.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "util.h"

namespace {

using lynx::test::run_cli;
using ojson = nlohmann::ordered_json;

const std::string kDir = std::string(LYNX_SOURCE_DIR) + "/tests/template/";
const std::string kTmp = std::string(LYNX_BINARY_DIR) + "/chat_template_cli_";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(ChatTemplateCli, PrintsTheGoldenPromptExactly) {
  const auto goldens = ojson::parse(slurp(kDir + "goldens.json"));
  int checked = 0;
  for (const auto& rec : goldens) {
    const std::string name = rec["template"];
    if (!rec.contains("output") || name.rfind("feature:", 0) == 0) continue;
    const std::string c = rec["case"];
    if (c != "tools" && c != "thinking-nogen") continue;
    const ojson& ctx = rec["context"];
    write(kTmp + "messages.json", ctx["messages"].dump());
    std::string args = "chat-template --template " + kDir + "templates/" + name + " --messages " +
                       kTmp + "messages.json --bos '<|bos|>' --eos '<|eos|>'" + " --now 1768478400";
    if (!ctx["tools"].is_null()) {
      write(kTmp + "tools.json", ctx["tools"].dump());
      args += " --tools " + kTmp + "tools.json";
    }
    if (!ctx["add_generation_prompt"].get<bool>()) args += " --no-generation-prompt";
    if (ctx.contains("enable_thinking"))
      args += std::string(" --kwargs '{\"enable_thinking\": ") +
              (ctx["enable_thinking"].get<bool>() ? "true" : "false") + "}'";
    // stdout only: the prompt must be byte-identical.
    const auto r = run_cli(args + " 2>/dev/null; echo -n \"<rc=$?>\"");
    EXPECT_EQ(r.out, rec["output"].get<std::string>() + "<rc=0>") << name << " / " << c;
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(ChatTemplateCli, ErrorsAreMessages) {
  write(kTmp + "msgs.json", R"([{"role": "user", "content": "hi"}])");
  write(kTmp + "bad.jinja", "{% for m in messages %}{{ m.role }");
  write(kTmp + "raise.jinja", "{{ raise_exception('no ' ~ messages[0].role ~ ' allowed') }}");
  write(kTmp + "notjson.json", "[{");
  auto r =
      run_cli("chat-template --template " + kTmp + "bad.jinja --messages " + kTmp + "msgs.json");
  EXPECT_EQ(r.code(), 1) << r.out;
  EXPECT_NE(r.out.find("template: line 1"), std::string::npos) << r.out;
  r = run_cli("chat-template --template " + kTmp + "raise.jinja --messages " + kTmp + "msgs.json");
  EXPECT_EQ(r.code(), 1) << r.out;
  EXPECT_NE(r.out.find("no user allowed"), std::string::npos) << r.out;
  r = run_cli("chat-template --template " + kTmp + "raise.jinja --messages " + kTmp +
              "notjson.json");
  EXPECT_NE(r.out.find("not valid JSON"), std::string::npos) << r.out;
  r = run_cli("chat-template --messages " + kTmp + "msgs.json");
  EXPECT_EQ(r.code(), 2) << r.out;
  r = run_cli("chat-template -m " + std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf" +
              " --messages " + kTmp + "msgs.json");
  EXPECT_EQ(r.code(), 1) << r.out;
  EXPECT_NE(r.out.find("no tokenizer.chat_template"), std::string::npos) << r.out;
}

}  // namespace
