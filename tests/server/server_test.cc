// The server in process on an ephemeral loopback port, driven over HTTP: formats, usage,
// faults, concurrency, cancellation, overload, authentication, exact routing, shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "util.h"

namespace lynx::test {
namespace {

std::string text_of(const Stream& s, bool chat) {
  std::string t;
  for (const json& c : s.chunks()) {
    for (const json& ch : c["choices"]) {
      if (chat) {
        if (ch["delta"].contains("content")) t += ch["delta"]["content"].get<std::string>();
      } else {
        t += ch["text"].get<std::string>();
      }
    }
  }
  return t;
}

// Metrics are updated by other threads than the one that answered: wait for the value.
void expect_metric(const Running& srv, const std::string& sample, double want) {
  std::string m;
  eventually([&] {
    m = get(srv, "/metrics").body;
    return metric(m, sample) == want;
  });
  EXPECT_EQ(metric(m, sample), want) << sample;
}

void expect_error(const Reply& r, int status, const std::string& code) {
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_FALSE(r.body.empty());
  const json j = r.j();
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"].contains("type"));
  if (!code.empty()) {
    EXPECT_EQ(j["error"]["code"], code) << r.body;
  }
}

TEST(Server, ModelsHealthMetrics) {
  Running srv(tiny_options());
  Reply r = get(srv, "/health");
  EXPECT_EQ(r.status, 200);
  r = get(srv, "/v1/models");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.j()["object"], "list");
  EXPECT_EQ(r.j()["data"][0]["id"], "tiny");
  EXPECT_EQ(r.j()["data"][0]["meta"]["n_ctx"], 512);
  EXPECT_EQ(get(srv, "/v1/models/tiny").status, 200);
  expect_error(get(srv, "/v1/models/other"), 404, "model_not_found");
  expect_error(get(srv, "/v1/nothing"), 404, "");
  r = get(srv, "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("# TYPE lynx_time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(r.body.find("lynx_info{routing=\"topk\"} 1"), std::string::npos);
  expect_metric(srv, "lynx_requests_running", 0);
}

TEST(Server, StartupErrors) {
  // The reference fixture has no tokenizer: the server refuses it, naming the reason.
  ServerOptions o = tiny_options();
  o.model_path = std::string(LYNX_SOURCE_DIR) + "/tests/reference/fixtures/qwen2moe-f32.gguf";
  try {
    Server s(o);
    ADD_FAILURE() << "a model without tokenizer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer"), std::string::npos) << e.what();
  }
  o = tiny_options();
  o.max_batch = 0;
  EXPECT_THROW(Server{o}, Error);
  o = tiny_options();
  o.routing = "no-such-policy";
  EXPECT_THROW(Server{o}, Error);
  // A port that is taken.
  Running first(tiny_options());
  o = tiny_options();
  o.port = first.server->port();
  Server second(o);
  EXPECT_THROW(second.start(), Error);
  // Stopping right after starting does not hang (httplib ignores a stop before its accept
  // loop runs; start() waits for it).
  for (int i = 0; i < 3; ++i) {
    Server quick(tiny_options());
    quick.start();
    quick.stop();
  }
}

TEST(Server, CompletionUsageAndStreamingMatch) {
  Running srv(tiny_options());
  // Greedy, past end-of-generation tokens: exactly max_tokens tokens.
  const std::string body =
      R"({"model":"tiny","prompt":"Hello, world","max_tokens":12,"temperature":0,"ignore_eos":true)";
  Reply r = post(srv, "/v1/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.j();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  // Byte-level vocabulary without merges: one token per byte, no BOS.
  EXPECT_EQ(j["usage"]["prompt_tokens"], 12);
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["usage"]["total_tokens"], 24);
  const std::string text = j["choices"][0]["text"];

  Stream s = post_stream(srv, "/v1/completions",
                         body + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(s.status, 200);
  ASSERT_GE(s.data.size(), 3u);
  EXPECT_EQ(s.data.back(), "[DONE]");
  // Every event is one "data: ..." line followed by a blank line.
  size_t events = 0;
  for (size_t at = 0; (at = s.raw.find("data: ", at)) != std::string::npos; ++at) ++events;
  EXPECT_EQ(events, s.data.size());
  EXPECT_EQ(s.raw.substr(s.raw.size() - 2), "\n\n");
  const auto chunks = s.chunks();
  EXPECT_EQ(text_of(s, false), text);
  const json& usage = chunks.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 12);
  const json& last = chunks[chunks.size() - 2];
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  for (size_t i = 0; i + 2 < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i]["object"], "text_completion");
    EXPECT_TRUE(chunks[i]["choices"][0]["finish_reason"].is_null());
  }
  // Usage reaches the metrics.
  const std::string m = get(srv, "/metrics").body;
  expect_metric(srv, "lynx_generation_tokens_total", 24);
  expect_metric(srv, "lynx_prompt_tokens_total", 24);
  expect_metric(srv, "lynx_requests_finished_total{reason=\"length\"}", 2);
  expect_metric(srv, "lynx_time_to_first_token_seconds_count", 2);
  expect_metric(srv, "lynx_time_per_output_token_seconds_count", 22);
  expect_metric(srv, "lynx_http_responses_total{endpoint=\"/v1/completions\",code=\"200\"}", 2);
}

// The prefix cache: turn 2 of a conversation (turn 1's prompt and answer, then more) starts
// from turn 1's KV cache, reports it in usage.prompt_tokens_details.cached_tokens and in
// /metrics, and answers what a server without the cache answers.
TEST(Server, PrefixCacheServesTheNextTurn) {
  ServerOptions with = tiny_options();
  with.cache_ram_bytes = size_t(16) << 20;
  Running cached(with), plain(tiny_options());
  auto complete = [](const Running& srv, const std::string& prompt, bool stream) {
    json body = {{"model", "tiny"},  {"prompt", prompt},   {"max_tokens", 12},
                 {"temperature", 0}, {"ignore_eos", true}, {"stream", stream}};
    if (!stream) return post(srv, "/v1/completions", body.dump()).j();
    body["stream_options"] = {{"include_usage", true}};
    Stream s = post_stream(srv, "/v1/completions", body.dump());
    json out = s.chunks().back();  // the usage chunk
    out["text"] = text_of(s, false);
    return out;
  };
  const json t1 = complete(cached, "Hello, world", false);
  ASSERT_TRUE(t1.contains("usage")) << t1.dump();
  EXPECT_EQ(t1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const std::string turn2 = "Hello, world" + t1["choices"][0]["text"].get<std::string>() + " more";
  const json t2 = complete(cached, turn2, false);
  const json p2 = complete(plain, turn2, false);
  EXPECT_EQ(t2["choices"][0]["text"], p2["choices"][0]["text"]);
  EXPECT_GE(t2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 12);
  EXPECT_LT(t2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            t2["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(p2["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // Streaming: the usage chunk carries it too (turn 2 again: now all but its last token).
  const json s2 = complete(cached, turn2, true);
  EXPECT_EQ(s2["text"], p2["choices"][0]["text"]);
  EXPECT_EQ(s2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            s2["usage"]["prompt_tokens"].get<int>() - 1);
  expect_metric(cached, "lynx_prefix_cache_requests_total", 3);
  expect_metric(cached, "lynx_prefix_cache_hits_total", 2);
  expect_metric(cached, "lynx_prefix_cache_entries", 2);
  expect_metric(plain, "lynx_prefix_cache_requests_total", 0);
}

TEST(Server, ChatStreamingAndNonStreaming) {
  Running srv(tiny_options());
  const std::string body =
      R"({"model":"tiny","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_tokens":8,"temperature":0,"ignore_eos":true)";
  Reply r = post(srv, "/v1/chat/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.j();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 10);  // the ChatML frame is in the prompt

  Stream s = post_stream(srv, "/v1/chat/completions", body + R"(,"stream":true})");
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(s.data.back(), "[DONE]");
  const auto chunks = s.chunks();
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(text_of(s, true), j["choices"][0]["message"]["content"]);
}

// Structured output end to end on the tiny model (random weights): a grammar that must end
// within a few tokens ends with "stop" and its text is a sentence of the grammar, streamed
// and not, for every choice; json_object output that stops parses; a bad grammar is a 400.
TEST(Server, StructuredOutputFollowsTheGrammar) {
  Running srv(tiny_options());
  const std::string body =
      R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":40,"temperature":0,"n":2,)"
      R"("grammar":"root ::= \"{\\\"a\\\": \" [0-9]{1,3} \"}\"")";
  Reply r = post(srv, "/v1/chat/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.j();
  for (const json& ch : j["choices"]) {
    EXPECT_EQ(ch["finish_reason"], "stop") << r.body;
    const std::string text = ch["message"]["content"];
    const json v = json::parse(text);
    EXPECT_TRUE(v["a"].is_number_integer()) << text;
    EXPECT_EQ(text.rfind("{\"a\": ", 0), 0u) << text;
  }
  Stream s = post_stream(srv, "/v1/chat/completions", body + R"(,"stream":true,"n":1})");
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(s.chunks().back()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(text_of(s, true), j["choices"][0]["message"]["content"]);

  r = post(
      srv, "/v1/completions",
      R"({"prompt":"x","max_tokens":60,"temperature":1,"response_format":{"type":"json_object"}})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = r.j()["choices"][0];
  if (c["finish_reason"] == "stop") {
    EXPECT_TRUE(json::parse(c["text"].get<std::string>()).is_object()) << c;
  } else {
    EXPECT_EQ(c["text"].get<std::string>().substr(0, 1), "{") << c;
  }
  expect_error(post(srv, "/v1/completions", R"({"prompt":"x","grammar":"root ::= (\"a\""})"), 400,
               "invalid_value");
}

TEST(Server, StopStringsLogprobsSeedsAndN) {
  Running srv(tiny_options());
  const std::string base =
      R"({"prompt":"The quick brown fox","max_tokens":24,"temperature":0,"ignore_eos":true)";
  const std::string full = post(srv, "/v1/completions", base + "}").j()["choices"][0]["text"];
  ASSERT_FALSE(full.empty());
  // A stop string taken from the middle of the greedy text (whole UTF-8 characters).
  size_t a = full.size() / 2;
  while (a > 0 && (uint8_t(full[a]) & 0xC0) == 0x80) --a;
  size_t b = a + 1;
  while (b < full.size() && (uint8_t(full[b]) & 0xC0) == 0x80) ++b;
  const std::string stop = full.substr(a, b - a);
  const std::string want = full.substr(0, full.find(stop));
  const std::string with_stop = base + R"(,"stop":[)" + json(stop).dump() + "]";
  Reply r = post(srv, "/v1/completions", with_stop + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["text"], want);
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(r.j()["usage"]["completion_tokens"].get<int>(), 24);
  Stream s = post_stream(srv, "/v1/completions", with_stop + R"(,"stream":true})");
  EXPECT_EQ(text_of(s, false), want);

  r = post(srv, "/v1/completions", base + R"(,"logprobs":0})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json lp = r.j()["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), 24u);
  for (const json& v : lp["token_logprobs"]) EXPECT_LE(v.get<double>(), 0.0);
  r = post(
      srv, "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5,"logprobs":true,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["logprobs"]["content"].size(), 5u);

  // Seeded sampling reproduces; n choices are counted in usage.
  const std::string sampled =
      R"({"prompt":"abc","max_tokens":16,"temperature":1.0,"seed":42,"ignore_eos":true,"n":3})";
  const json s1 = post(srv, "/v1/completions", sampled).j();
  const json s2 = post(srv, "/v1/completions", sampled).j();
  ASSERT_EQ(s1["choices"].size(), 3u);
  EXPECT_EQ(s1["usage"]["completion_tokens"], 48);
  EXPECT_EQ(s1["usage"]["prompt_tokens"], 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s1["choices"][i]["index"], i);
    EXPECT_EQ(s1["choices"][i]["text"], s2["choices"][i]["text"]);
  }
  EXPECT_NE(s1["choices"][0]["text"], s1["choices"][1]["text"]);  // seed + i per choice
}

TEST(Server, BadRequestsAre400AndHarmless) {
  ServerOptions o = tiny_options();
  o.n_ctx = 64;
  Running srv(o);
  expect_error(post(srv, "/v1/completions", R"({"prompt": "a",)"), 400, "invalid_json");
  expect_error(post(srv, "/v1/completions", R"({"prompt":"a","max_tokens":"9"})"), 400,
               "invalid_type");
  expect_error(post(srv, "/v1/chat/completions", R"({"messages":{"role":"user"}})"), 400,
               "invalid_type");
  expect_error(post(srv, "/v1/completions", R"({"prompt":"a","model":"nope"})"), 400,
               "model_not_found");
  expect_error(post(srv, "/v1/completions", R"({"prompt":"a","max_tokens":0})"), 400,
               "invalid_value");
  expect_error(post(srv, "/v1/completions", R"({"prompt":"a","max_tokens":100000})"), 400,
               "invalid_value");
  expect_error(post(srv, "/v1/completions",
                    R"({"prompt":")" + std::string(80, 'x') + R"(","max_tokens":1})"),
               400, "context_length_exceeded");
  expect_error(post(srv, "/v1/completions", R"({"prompt":"abc","max_tokens":62})"), 400,
               "context_length_exceeded");
  expect_error(post(srv, "/v1/chat/completions",
                    R"({"messages":[{"role":"user","content":"a"}],"stream":1})"),
               400, "invalid_type");
  // Nothing else is affected: a good request still works and no request was admitted.
  Reply r = post(srv, "/v1/completions", R"({"prompt":"abc","max_tokens":4,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["usage"]["completion_tokens"], 4);
  const std::string m = get(srv, "/metrics").body;
  expect_metric(srv, "lynx_http_responses_total{endpoint=\"/v1/completions\",code=\"400\"}", 7);
  expect_metric(srv, "lynx_requests_finished_total{reason=\"length\"}", 1);
}

TEST(Server, ApiKey) {
  ServerOptions o = tiny_options();
  o.api_key = "sekret";
  Running srv(o);
  const std::string body = R"({"prompt":"a","max_tokens":2})";
  expect_error(post(srv, "/v1/completions", body), 401, "invalid_api_key");
  expect_error(post(srv, "/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401,
               "invalid_api_key");
  expect_error(get(srv, "/v1/models"), 401, "invalid_api_key");
  expect_error(get(srv, "/metrics"), 401, "invalid_api_key");
  EXPECT_EQ(get(srv, "/health").status, 200);  // probes need no key
  EXPECT_EQ(post(srv, "/v1/completions", body, {{"Authorization", "Bearer sekret"}}).status, 200);
  EXPECT_EQ(get(srv, "/v1/models", {{"Authorization", "Bearer sekret"}}).status, 200);
}

TEST(Server, SixteenConcurrentClientsAllAnswered) {
  ServerOptions o = tiny_options();
  o.max_batch = 8;  // half of them wait for a slot
  Running srv(o);
  std::vector<std::thread> th;
  std::vector<int> status(16, 0), tokens(16, 0);
  std::vector<std::string> done(16);
  for (int i = 0; i < 16; ++i) {
    th.emplace_back([&, i] {
      const std::string body = R"({"prompt":"request )" + std::to_string(i) + R"(","max_tokens":)" +
                               std::to_string(4 + i) + R"(,"ignore_eos":true,"temperature":0)";
      if (i % 2) {
        Stream s = post_stream(srv, "/v1/completions",
                               body + R"(,"stream":true,"stream_options":{"include_usage":true}})");
        status[i] = s.status;
        if (s.data.size() >= 2 && s.data.back() == "[DONE]") {
          tokens[i] = s.chunks().back()["usage"]["completion_tokens"];
        }
      } else {
        Reply r = post(srv, "/v1/completions", body + "}");
        status[i] = r.status;
        if (r.status == 200) tokens[i] = r.j()["usage"]["completion_tokens"];
      }
    });
  }
  for (auto& t : th) t.join();
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(status[i], 200) << i;
    EXPECT_EQ(tokens[i], 4 + i) << i;
  }
  const std::string m = get(srv, "/metrics").body;
  expect_metric(srv, "lynx_requests_finished_total{reason=\"length\"}", 16);
  expect_metric(srv, "lynx_requests_running", 0);
}

TEST(Server, ClientDisconnectMidStreamFreesTheSlot) {
  ServerOptions o = tiny_options();
  o.n_ctx = 4096;
  Running srv(o);
  int seen = 0;
  Stream s = post_stream(
      srv, "/v1/completions",
      R"({"prompt":"go","max_tokens":4000,"ignore_eos":true,"stream":true,"temperature":0})",
      [&](const std::string&) { return ++seen < 2; });  // hang up after two events
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(seen, 2);
  std::string m;
  EXPECT_TRUE(eventually([&] {
    m = get(srv, "/metrics").body;
    return metric(m, "lynx_requests_finished_total{reason=\"cancelled\"}") == 1;
  })) << m;
  expect_metric(srv, "lynx_requests_running", 0);
  EXPECT_LT(metric(m, "lynx_generation_tokens_total"), 4000);
  // The slot is usable again.
  EXPECT_EQ(post(srv, "/v1/completions", R"({"prompt":"a","max_tokens":3})").status, 200);
}

TEST(Server, OverloadAnswers429WithRetryAfterAndQueuedCancelFrees) {
  ServerOptions o = tiny_options();
  o.max_batch = 1;
  o.max_queue = 1;
  o.retry_after_s = 3;
  Running srv(o);
  srv.server->set_paused(true);  // admitted requests wait: a deterministic full queue
  const std::string body = R"({"prompt":"x","max_tokens":5,"ignore_eos":true,"stream":true})";
  std::vector<Stream> got(2);
  std::vector<std::thread> th;
  for (int i = 0; i < 2; ++i) {
    th.emplace_back([&, i] { got[i] = post_stream(srv, "/v1/completions", body); });
  }
  ASSERT_TRUE(
      eventually([&] { return metric(get(srv, "/metrics").body, "lynx_requests_waiting") == 2; }));
  Reply r = post(srv, "/v1/completions", R"({"prompt":"x","max_tokens":5})");
  expect_error(r, 429, "rate_limit_exceeded");
  EXPECT_EQ(r.headers.find("Retry-After")->second, "3");
  EXPECT_EQ(r.j()["error"]["type"], "rate_limit_error");

  srv.server->set_paused(false);
  for (auto& t : th) t.join();
  for (const Stream& s : got) {
    EXPECT_EQ(s.status, 200);
    ASSERT_FALSE(s.data.empty());
    EXPECT_EQ(s.data.back(), "[DONE]");
  }
  // A queued client that gives up (here: its read timeout) is removed from the queue.
  srv.server->set_paused(true);
  std::thread waiter([&] { got[0] = post_stream(srv, "/v1/completions", body, {}, 400); });
  waiter.join();  // read timeout: the client hangs up while its request is queued
  std::string m;
  EXPECT_TRUE(eventually([&] {
    m = get(srv, "/metrics").body;
    return metric(m, "lynx_requests_finished_total{reason=\"cancelled\"}") == 1 &&
           metric(m, "lynx_requests_waiting") == 0;
  })) << m;
  srv.server->set_paused(false);
}

TEST(Server, ExactRequestIsNeverRemappedWhileTheBatchIs) {
  const std::string prompt =
      R"("prompt":"exact please","max_tokens":24,"temperature":0,"ignore_eos":true)";
  std::string reference;
  {
    Running topk(tiny_options());
    reference = post(topk, "/v1/completions", "{" + prompt + "}").j()["choices"][0]["text"];
  }
  ServerOptions o = tiny_options();
  o.routing = "lynx:alpha=3,beta=4";
  o.max_batch = 8;
  Running srv(o);
  srv.server->set_paused(true);  // all eight decode together from the first step on
  std::vector<std::string> text(8);
  std::vector<std::thread> th;
  for (int i = 0; i < 8; ++i) {
    th.emplace_back([&, i] {
      const std::string body = i == 0
                                   ? "{" + prompt + R"(,"routing":"exact"})"
                                   : R"({"prompt":"other text )" + std::to_string(i) +
                                         R"(","max_tokens":24,"temperature":0,"ignore_eos":true})";
      Reply r = post(srv, "/v1/completions", body);
      if (r.status == 200) text[i] = r.j()["choices"][0]["text"];
    });
  }
  ASSERT_TRUE(
      eventually([&] { return metric(get(srv, "/metrics").body, "lynx_requests_waiting") == 8; }));
  srv.server->set_paused(false);
  for (auto& t : th) t.join();
  EXPECT_EQ(text[0], reference);
  // The other requests were remapped: lynx changed assignments in this batch.
  const std::string m = get(srv, "/metrics").body;
  EXPECT_GT(metric(m, "lynx_routing_assignments_changed_total{layer=\"0\"}"), 0) << m;
  EXPECT_LT(metric(m, "lynx_routing_distinct_policy_total{layer=\"0\"}"),
            metric(m, "lynx_routing_distinct_exact_total{layer=\"0\"}"));
  EXPECT_NE(m.find("lynx_step_distinct_experts{layer=\"0\",routing=\"policy\"}"),
            std::string::npos);
}

TEST(Server, ShutdownFinishesOrCancelsInFlightRequests) {
  ServerOptions o = tiny_options();
  o.n_ctx = 4096;
  o.shutdown_timeout_s = 0.2;
  auto srv = std::make_unique<Running>(o);
  std::atomic<int> events{0};
  Stream s;
  std::thread client([&] {
    s = post_stream(*srv, "/v1/completions",
                    R"({"prompt":"long","max_tokens":4000,"ignore_eos":true,"stream":true})",
                    [&](const std::string&) {
                      ++events;
                      return true;
                    });
  });
  ASSERT_TRUE(eventually([&] { return events > 0; }));
  srv->server->stop();  // returns after the in-flight stream was ended cleanly
  client.join();
  EXPECT_EQ(s.status, 200);
  ASSERT_GE(s.data.size(), 2u);
  EXPECT_EQ(s.data.back(), "[DONE]");
  const json err = json::parse(s.data[s.data.size() - 2]);
  ASSERT_TRUE(err.contains("error")) << err.dump();
  EXPECT_NE(err["error"]["message"].get<std::string>().find("shutting down"), std::string::npos);
  // Nothing listens any more.
  EXPECT_EQ(get(*srv, "/health").status, -1);
  srv->server->stop();  // idempotent
}

// Server::fail (expert parallelism: a peer rank hung or died): queued and new requests are
// answered 503 with the reason, /health says "failed"; extra_metrics is appended to /metrics.
TEST(Server, FailAnswers503WithTheReasonAndExtraMetricsAreServed) {
  ServerOptions o = tiny_options();
  o.extra_metrics = [] { return std::string("lynx_test_extra{rank=\"1\"} 7\n"); };
  Running srv(o);
  EXPECT_EQ(metric(get(srv, "/metrics").body, "lynx_test_extra{rank=\"1\"}"), 7);
  srv.server->set_paused(true);  // the request stays queued until the failure
  Reply queued;
  std::thread client(
      [&] { queued = post(srv, "/v1/completions", R"({"prompt":"x","max_tokens":5})"); });
  ASSERT_TRUE(
      eventually([&] { return metric(get(srv, "/metrics").body, "lynx_requests_waiting") == 1; }));
  srv.server->fail("rank 1 did not answer");
  client.join();
  expect_error(queued, 503, "");
  EXPECT_NE(queued.body.find("rank 1 did not answer"), std::string::npos) << queued.body;
  const Reply fresh = post(srv, "/v1/completions", R"({"prompt":"x","max_tokens":5})");
  expect_error(fresh, 503, "service_unavailable");
  EXPECT_NE(fresh.body.find("rank 1 did not answer"), std::string::npos) << fresh.body;
  const Reply health = get(srv, "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.j()["status"], "failed");
  EXPECT_EQ(health.j()["error"], "rank 1 did not answer");
  srv.server->fail("again");  // idempotent: the first reason stays
  EXPECT_EQ(get(srv, "/health").j()["error"], "rank 1 did not answer");
}

}  // namespace
}  // namespace lynx::test
