// `lynx-moe serve` as a process: flag values that make no sense are refused with exit code 2,
// the API key can come from the environment, and SIGTERM ends the process within the
// documented bound even with a slow client connected.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "../cli/util.h"
#include "serve_child.h"
#include "util.h"

namespace lynx::test {
namespace {

const std::string kModel = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";

TEST(ServeCli, NonsenseFlagValuesExitWith2) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--port 70000", "--port"},
      {"--port -1", "--port"},
      {"--http-threads -5", "--http-threads"},
      {"--shutdown-timeout nan", "--shutdown-timeout"},
      {"--shutdown-timeout -1", "--shutdown-timeout"},
      {"--shutdown-timeout inf", "--shutdown-timeout"},
      {"--max-batch 0", "--max-batch"},
      {"--max-step-tokens 0", "--max-step-tokens"},
      {"--ctx -1", "--ctx"},
      {"--ctx 1", "--ctx"},
      {"--max-queue -1", "--max-queue"},
      {"-t -1", "--threads"},
      {"--max-n 0", "--max-n"},
      {"--max-connections 0", "--max-connections"},
      {"--max-connections-per-ip -2", "--max-connections-per-ip"},
      {"--header-timeout 0", "--header-timeout"},
      {"--body-timeout nan", "--body-timeout"},
      {"--idle-timeout -3", "--idle-timeout"},
      {"--routing ''", "--routing"},
      {"--tpot-slo -5", "--tpot-slo"},
      {"--tpot-slo nan", "--tpot-slo"},
      {"--slo-window 0", "--slo-window"},
      {"--accuracy-budget -0.5", "--accuracy-budget"},
      {"--reasoning-format hidden", "--reasoning-format"},
      {"--tool-format xml", "--tool-format"},
      {"--api-key a --api-key-file /dev/null", "API key"},
      // Issue 29: an empty value never means "the default" (here: any port, no key), and
      // a key no client could send is refused instead of locking every client out.
      {"--port ''", "empty value"},
      {"--api-key ''", "empty value"},
      {"--api-key '   '", "whitespace"},
      {"--api-key ' k'", "whitespace"},
      {"--accuracy-budget -1", "--accuracy-budget"},
      {"--api-key-file /dev/zero", "not a regular file"},
  };
  for (const auto& [flags, name] : cases) {
    const CliRun r = run_cli("serve -m " + kModel + " " + flags);
    EXPECT_EQ(r.code(), 2) << flags << ": " << r.out;
    EXPECT_NE(r.out.find(name), std::string::npos) << flags << ": " << r.out;
  }
  const CliRun r = run_cli("serve -m " + kModel + " --port 0 --api-key-file /nonexistent/key");
  EXPECT_NE(r.code(), 0) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/key"), std::string::npos) << r.out;
  // An empty or blank LYNX_API_KEY is a key source that would turn authentication off.
  for (const char* env : {"LYNX_API_KEY= ", "LYNX_API_KEY='  ' "}) {
    const CliRun e =
        run_cli("serve -m " + kModel + " --port 0", std::string("timeout 60 env ") + env);
    EXPECT_EQ(e.code(), 2) << env << ": " << e.out;
    EXPECT_NE(e.out.find("LYNX_API_KEY"), std::string::npos) << env << ": " << e.out;
  }
  const std::string blank = std::string(LYNX_BINARY_DIR) + "/serve_cli_blank_key";
  { std::ofstream(blank) << "  \t\n"; }
  const CliRun b = run_cli("serve -m " + kModel + " --port 0 --api-key-file " + blank);
  EXPECT_EQ(b.code(), 2) << b.out;
  EXPECT_NE(b.out.find("empty"), std::string::npos) << b.out;
}

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(ServeCli, KeyFromEnvironmentAndSigtermWithASlowClient) {
  ServeChild c({"serve", "-m", kModel, "--port", "0", "--shutdown-timeout", "1", "--header-timeout",
                "300", "-t", "1"},
               "env-key");
  ASSERT_GT(c.port, 0) << c.log;
  httplib::Client http("127.0.0.1", c.port);
  http.set_read_timeout(30);
  auto res = http.Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = http.Get("/v1/models", {{"Authorization", "Bearer env-key"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  // The key is not on the command line.
  EXPECT_EQ(c.log.find("env-key"), std::string::npos);

  const int slow = connect_to(c.port);
  ASSERT_GE(slow, 0);
  std::atomic<bool> quit{false};
  std::thread trickle([&] {
    send(slow, "POST /v1/completions HTTP/1.1\r\n", 31, MSG_NOSIGNAL);
    for (int i = 0; i < 600 && !quit; ++i) {
      if (send(slow, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL) <= 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(c.pid, SIGTERM);
  // Bound: --shutdown-timeout + Server::kShutdownSlack_s, plus room for a loaded machine.
  const int code = c.wait_exit(int((1 + Server::kShutdownSlack_s + 20) * 1000));
  quit = true;
  trickle.join();
  close(slow);
  EXPECT_EQ(code, 0) << c.log;
  EXPECT_NE(c.log.find("stopped"), std::string::npos) << c.log;
}

// A second signal is not ignored while the graceful stop waits for a long request: the
// process exits at once with 128 + the signal.
TEST(ServeCli, SecondSignalExitsAtOnce) {
  ServeChild c({"serve", "-m", tiny_model(), "--port", "0", "--ctx", "4096", "--shutdown-timeout",
                "300", "-t", "1"},
               "");
  ASSERT_GT(c.port, 0) << c.log;
  std::atomic<int> events{0};
  std::thread client([&] {
    httplib::Client http("127.0.0.1", c.port);
    http.set_read_timeout(60);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt":"long","max_tokens":4000,"ignore_eos":true,"stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      ++events;
      return true;
    };
    http.send(req);
  });
  ASSERT_TRUE(eventually([&] { return events > 0; }, 60000));
  kill(c.pid, SIGTERM);
  // The first signal starts a stop that would wait up to 300 s for the request.
  eventually(
      [&] {
        c.pump();
        return c.log.find("shutting down") != std::string::npos;
      },
      20000);
  kill(c.pid, SIGTERM);
  const int code = c.wait_exit(20000);
  client.join();
  EXPECT_EQ(code, 128 + SIGTERM) << c.log;
  EXPECT_NE(c.log.find("second signal"), std::string::npos) << c.log;
}

// SIGHUP drains like SIGTERM (the stream in flight ends with [DONE], exit 0); SIGUSR1 and
// SIGUSR2, whose default action kills a process, are ignored (issue 29).
TEST(ServeCli, HangupDrainsAndUserSignalsAreIgnored) {
  ServeChild c({"serve", "-m", tiny_model(), "--port", "0", "--shutdown-timeout", "120", "-t", "1"},
               "");
  ASSERT_GT(c.port, 0) << c.log;
  std::atomic<int> events{0};
  std::mutex mu;
  std::string body;
  std::thread client([&] {
    httplib::Client http("127.0.0.1", c.port);
    http.set_read_timeout(120);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt":"long","max_tokens":48,"ignore_eos":true,"stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      std::lock_guard<std::mutex> lock(mu);
      body.append(d, n);
      ++events;
      return true;
    };
    http.send(req);
  });
  ASSERT_TRUE(eventually([&] { return events > 0; }, 60000));
  kill(c.pid, SIGUSR1);
  kill(c.pid, SIGUSR2);
  ASSERT_TRUE(eventually(
      [&] {
        c.pump();
        return c.log.find("ignored") != std::string::npos;
      },
      20000))
      << c.log;
  EXPECT_EQ(c.wait_exit(300), -1) << "a user signal ended serve: " << c.log;
  kill(c.pid, SIGHUP);
  const int code = c.wait_exit(120000);
  client.join();
  EXPECT_EQ(code, 0) << c.log;
  EXPECT_NE(c.log.find("received SIGHUP"), std::string::npos) << c.log;
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos) << body;
}

// loadgen's JSON has one record per request (arrival, lengths, status, TTFT, TPOT), so runs
// can be pooled; the records agree with the summary's counts and percentiles.
TEST(ServeCli, LoadgenRecordsEveryRequest) {
  ServeChild c({"serve", "-m", kModel, "--port", "0", "-t", "1"});
  ASSERT_GT(c.port, 0) << c.log;
  const CliRun r = run_cli("loadgen --url http://127.0.0.1:" + std::to_string(c.port) +
                           " --rate 40 --duration 0.5 --prompt-len 3:6 --gen-len 2:5 --seed 7"
                           " -o json");
  ASSERT_EQ(r.code(), 0) << r.out;
  const json j = json::parse(r.out.substr(r.out.find('{')));
  const json& reqs = j.at("requests");
  ASSERT_EQ(reqs.size(), j.at("sent").get<size_t>());
  ASSERT_GT(reqs.size(), 3u);
  EXPECT_EQ(j.at("completed").get<size_t>(), reqs.size());
  double prev = -1, worst_tpot = 0;
  size_t n_tpot = 0;
  for (const json& q : reqs) {
    EXPECT_EQ(q.at("status").get<int>(), 200) << q;
    EXPECT_GE(q.at("at_s").get<double>(), prev);  // arrival order
    prev = q.at("at_s").get<double>();
    const int want = q.at("max_tokens").get<int>();
    EXPECT_TRUE(want >= 2 && want <= 5) << q;
    EXPECT_EQ(q.at("tokens").get<int>(), want) << q;  // ignore_eos: exactly the drawn length
    const int plen = q.at("prompt_tokens").get<int>();
    EXPECT_TRUE(plen >= 3 && plen <= 6) << q;
    EXPECT_GT(q.at("ttft_s").get<double>(), 0) << q;
    EXPECT_GE(q.at("e2e_s").get<double>(), q.at("ttft_s").get<double>()) << q;
    worst_tpot = std::max(worst_tpot, q.at("tpot_s").get<double>());
    ++n_tpot;
  }
  EXPECT_EQ(j.at("tpot_s").at("n").get<size_t>(), n_tpot);
  EXPECT_DOUBLE_EQ(j.at("tpot_s").at("max").get<double>(), worst_tpot);
}

}  // namespace
}  // namespace lynx::test
