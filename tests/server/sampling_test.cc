// The sampling controls over HTTP, on the tests' tiny synthetic model and on the bundled
// trained one: logit_bias forces and bans tokens, penalties change a greedy completion that
// repeats, every choice of n keeps its own penalty state, bad values are a 400 naming the
// field.
#include <gtest/gtest.h>

#include <map>

#include "util.h"

namespace lynx::test {
namespace {

json completion(const Running& srv, const std::string& extra, int max_tokens = 24) {
  const std::string body = R"({"prompt":"The quick brown fox","max_tokens":)" +
                           std::to_string(max_tokens) +
                           R"(,"temperature":0,"ignore_eos":true,"logprobs":0)" + extra + "}";
  const Reply r = post(srv, "/v1/completions", body);
  EXPECT_EQ(r.status, 200) << body << ": " << r.body;
  return r.j();
}

// The most frequent token's count in a completion's tokens.
int most_repeats(const json& c) {
  std::map<std::string, int> n;
  int most = 0;
  for (const json& t : c["choices"][0]["logprobs"]["tokens"]) {
    most = std::max(most, ++n[t.get<std::string>()]);
  }
  return most;
}

TEST(ServerSampling, LogitBiasForcesAndBansTokens) {
  Running srv(tiny_options());
  // Token 120 is the byte 'x' in the tiny model's byte-level vocabulary. A +100 bias makes
  // every token of the completion that token, sampled or greedy, in both request forms.
  for (const std::string extra :
       {R"(,"logit_bias":{"120":100})", R"(,"logit_bias":{"120":100},"temperature":1.5,"seed":3)",
        R"(,"logit_bias":[[120,100]],"temperature":1,"seed":4,"top_p":0.5,"min_p":0.1)"}) {
    const json c = completion(srv, extra, 12);
    EXPECT_EQ(c["choices"][0]["text"], std::string(12, 'x')) << extra;
    EXPECT_EQ(c["usage"]["completion_tokens"], 12);
  }
  // Bans: 'a' and 'b' (97, 98) raised by 8 make most sampled tokens one of them, and both
  // appear; banned with -100 (or llama-server's false), 'a' never does. (Counted as tokens:
  // the vocabulary's <|extra_N|> tokens hold an 'a' too.)
  auto count = [](const json& c, const std::string& tok) {
    int n = 0;
    for (const json& t : c["choices"][0]["logprobs"]["tokens"]) n += t == tok;
    return n;
  };
  const std::string sampled = R"(,"temperature":1,"seed":11,"logit_bias":)";
  const json both = completion(srv, sampled + R"({"97":8,"98":8})", 32);
  EXPECT_GT(count(both, "a"), 0) << both.dump();
  EXPECT_GT(count(both, "b"), 0) << both.dump();
  for (const std::string ban : {R"({"97":-100,"98":8})", R"([[97,false],[98,8]])"}) {
    const json c = completion(srv, sampled + ban, 32);
    EXPECT_EQ(count(c, "a"), 0) << ban << ": " << c.dump();
    EXPECT_GT(count(c, "b"), 0) << ban << ": " << c.dump();
  }
}

TEST(ServerSampling, FrequencyPenaltyBreaksAGreedyLoop) {
  Running srv(tiny_options());
  const json plain = completion(srv, "", 32);
  const int repeats = most_repeats(plain);
  ASSERT_GE(repeats, 4) << "the greedy completion should repeat: " << plain["choices"][0]["text"];
  for (const std::string extra :
       {R"(,"frequency_penalty":2)", R"(,"presence_penalty":2,"frequency_penalty":1)",
        R"(,"repeat_penalty":3,"repeat_last_n":-1)", R"(,"repetition_penalty":3)"}) {
    const json c = completion(srv, extra, 32);
    EXPECT_NE(c["choices"][0]["text"], plain["choices"][0]["text"]) << extra;
    EXPECT_LT(most_repeats(c), repeats) << extra << ": " << c["choices"][0]["text"];
  }
  // Every choice of n has its own token counts: greedy choices stay identical to n = 1.
  const json one = completion(srv, R"(,"frequency_penalty":2)", 32);
  const json three = completion(srv, R"(,"frequency_penalty":2,"n":3)", 32);
  ASSERT_EQ(three["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(three["choices"][i]["text"], one["choices"][0]["text"]) << i;
  }
  // The chat endpoint takes the same fields.
  const Reply r = post(srv, "/v1/chat/completions",
                       R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":6,)"
                       R"("temperature":0,"ignore_eos":true,"logit_bias":{"121":100}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["message"]["content"], "yyyyyy");
}

// The bundled trained model: its greedy text falls into a loop ("the same as the same as
// ..."); a frequency penalty leads it out, and +100 on " the" (token 278) makes the whole
// completion that token.
TEST(ServerSampling, BundledModelPenaltiesAndBias) {
  ServerOptions o = tiny_options();
  o.model_path = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";
  Running srv(o);
  auto complete = [&](const std::string& extra) {
    const std::string body =
        R"({"prompt":"Once upon a time","max_tokens":40,"temperature":0,"logprobs":0)" + extra +
        "}";
    const Reply r = post(srv, "/v1/completions", body);
    EXPECT_EQ(r.status, 200) << body << ": " << r.body;
    return r.j();
  };
  const json plain = complete("");
  const std::string text = plain["choices"][0]["text"];
  EXPECT_NE(text.find("the same as the same as the same as"), std::string::npos) << text;
  for (const std::string extra : {R"(,"frequency_penalty":2)", R"(,"repeat_penalty":1.5)"}) {
    const json c = complete(extra);
    const std::string t = c["choices"][0]["text"];
    EXPECT_EQ(t.find("the same as the same as"), std::string::npos) << extra << ": " << t;
    EXPECT_LT(most_repeats(c), most_repeats(plain)) << extra << ": " << t;
  }
  const json forced = complete(R"(,"logit_bias":{"278":100},"ignore_eos":true,"max_tokens":10)");
  std::string want;
  for (int i = 0; i < 10; ++i) want += " the";
  EXPECT_EQ(forced["choices"][0]["text"], want);
}

TEST(ServerSampling, BadValuesAre400NamingTheField) {
  Running srv(tiny_options());
  const std::pair<std::string, std::string> cases[] = {
      {R"("logit_bias":{"300":5})", "logit_bias"},
      {R"("logit_bias":{"x":5})", "logit_bias"},
      {R"("logit_bias":{"5":500})", "logit_bias"},
      {R"("logit_bias":"5")", "logit_bias"},
      {R"("presence_penalty":3)", "presence_penalty"},
      {R"("frequency_penalty":[1])", "frequency_penalty"},
      {R"("repeat_penalty":-1)", "repeat_penalty"},
      {R"("repeat_last_n":-5)", "repeat_last_n"},
      {R"("min_p":2)", "min_p"},
      {R"("typical_p":0)", "typical_p"},
  };
  for (const auto& [field, param] : cases) {
    const Reply r = post(srv, "/v1/completions", R"({"prompt":"a","max_tokens":2,)" + field + "}");
    EXPECT_EQ(r.status, 400) << field << ": " << r.body;
    EXPECT_EQ(r.j()["error"]["param"], param) << field;
  }
  const Reply ok = post(srv, "/v1/completions", R"({"prompt":"a","max_tokens":2})");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

}  // namespace
}  // namespace lynx::test
