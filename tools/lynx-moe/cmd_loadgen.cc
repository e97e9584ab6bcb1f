// `lynx-moe loadgen`: open-loop load against an OpenAI-compatible server.
//
// Requests arrive on a schedule drawn in advance (Poisson, or bursty: gamma inter-arrival
// times with coefficient of variation > 1, as vLLM's benchmark does), whether or not earlier
// ones have finished: an open loop, so a slow server sees its queue grow instead of the
// client politely slowing down (a closed loop hides overload). Each request streams a
// completion of exactly the drawn length (ignore_eos) from a prompt of exactly the drawn
// number of token ids; the client records time to first token (TTFT), time per output token
// (TPOT = (last - first) / (tokens - 1), per request) and end-to-end latency.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <system_error>
#include <thread>

#include "commands.h"
#include "common.h"
#include "lynx/error.h"

namespace lynx::cli {
namespace {

using json = nlohmann::json;

// "N" (fixed), "A:B" (uniform integer in [A, B]) or "normal:MEAN:STD" (rounded, at least 1).
struct Dist {
  std::string kind = "fixed";
  double a = 0, b = 0;
  static Dist parse(const std::string& s, const std::string& flag) {
    Dist d;
    try {
      if (s.rfind("normal:", 0) == 0) {
        const size_t c = s.find(':', 7);
        if (c == std::string::npos) throw std::invalid_argument(s);
        d.kind = "normal";
        d.a = std::stod(s.substr(7, c - 7));
        d.b = std::stod(s.substr(c + 1));
      } else if (const size_t c = s.find(':'); c != std::string::npos) {
        d.kind = "uniform";
        d.a = std::stod(s.substr(0, c));
        d.b = std::stod(s.substr(c + 1));
      } else {
        d.a = d.b = std::stod(s);
      }
    } catch (const std::exception&) {
      throw UsageError(flag + ": '" + s + "' is not N, A:B or normal:MEAN:STD");
    }
    // Finite and below 2^24 tokens, so the int() of a draw is defined.
    const double top = double(1 << 24);
    if (!(d.a >= 1 && d.a <= top) || !(d.b >= (d.kind == "normal" ? 0 : d.a) && d.b <= top)) {
      throw UsageError(flag + ": bad range '" + s + "' (values in [1, 16777216])");
    }
    return d;
  }
  int draw(std::mt19937_64& rng) const {
    if (kind == "uniform") return std::uniform_int_distribution<int>(int(a), int(b))(rng);
    if (kind == "normal") {
      return std::max(1, int(std::lround(std::normal_distribution<double>(a, b)(rng))));
    }
    return int(a);
  }
};

struct Args {
  std::string url = "http://127.0.0.1:8080", arrivals = "poisson", prompt_len = "64",
              gen_len = "64", output = "text", model, api_key, out_file;
  double rate = 1, duration = 10, burstiness = 0.25, timeout = 300;
  uint64_t seed = 1;
  int max_inflight = 512;
};

struct Sample {
  int status = -1;  // HTTP status; -1 = no answer
  std::string error;
  double ttft = NAN, tpot = NAN, e2e = NAN;
  int tokens = 0;
  double t_end = 0;
};

json percentiles(std::vector<double> v) {
  std::erase_if(v, [](double x) { return std::isnan(x); });
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  // Nearest-rank percentile: the smallest value with at least q of the samples at or below.
  auto p = [&](double q) {
    const size_t rank = size_t(std::ceil(q * double(v.size())));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
  };
  double mean = 0;
  for (double x : v) mean += x;
  return {{"n", v.size()},  {"mean", mean / double(v.size())},
          {"p50", p(0.5)},  {"p90", p(0.9)},
          {"p99", p(0.99)}, {"max", v.back()}};
}

httplib::Headers auth(const Args& a) {
  if (a.api_key.empty()) return {};
  return {{"Authorization", "Bearer " + a.api_key}};
}

// Sum over MoE layers of a routing counter on the server's /metrics (-1 when unavailable).
double routing_counter(const Args& a, const std::string& name) {
  httplib::Client c(a.url);
  c.set_read_timeout(10, 0);
  auto res = c.Get("/metrics", auth(a));
  if (!res || res->status != 200) return -1;
  double sum = 0;
  const std::string& t = res->body;
  for (size_t at = 0; (at = t.find(name + "{", at)) != std::string::npos; ++at) {
    if (at > 0 && t[at - 1] != '\n') continue;
    const size_t sp = t.find(' ', at);
    sum += std::stod(t.substr(sp + 1));
  }
  return sum;
}

Sample run_one(const Args& a, const std::string& model, const std::vector<int>& prompt, int gen) {
  Sample s;
  json body = {{"prompt", prompt},   {"max_tokens", gen},
               {"ignore_eos", true}, {"temperature", 0},
               {"stream", true},     {"stream_options", {{"include_usage", true}}}};
  if (!model.empty()) body["model"] = model;
  httplib::Client c(a.url);
  c.set_read_timeout(time_t(a.timeout), 0);
  c.set_write_timeout(10, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = auth(a);
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  const double t0 = now_seconds();
  double first = NAN, last = NAN;
  std::string buf, error_body;
  req.response_handler = [&](const httplib::Response& r) {
    s.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    const double now = now_seconds();
    if (s.status != 200) {
      error_body.append(d, n);
      return true;
    }
    buf.append(d, n);
    for (size_t at; (at = buf.find("\n\n")) != std::string::npos;) {
      const std::string ev = buf.substr(0, at);
      buf.erase(0, at + 2);
      if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
      const json j = json::parse(ev.substr(6), nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) s.error = j["error"].value("message", "error event");
      if (j.contains("usage") && j["usage"].is_object()) {
        s.tokens = j["usage"].value("completion_tokens", 0);
      }
      if (j.contains("choices") && !j["choices"].empty()) {
        if (std::isnan(first)) first = now;
        last = now;
      }
    }
    return true;
  };
  auto res = c.send(req);
  s.t_end = now_seconds();
  if (!res) {
    s.error = "connection: " + httplib::to_string(res.error());
    return s;
  }
  s.status = res->status;
  if (s.status != 200) {
    s.error = "http " + std::to_string(s.status);
    return s;
  }
  s.ttft = first - t0;
  s.e2e = s.t_end - t0;
  if (s.tokens > 1 && !std::isnan(first)) s.tpot = (last - first) / double(s.tokens - 1);
  return s;
}

// What the server serves, from /v1/models: the model id, its vocabulary (for token-id
// prompts) and its routing policy.
struct ServerInfo {
  std::string model, routing;
  int n_vocab = 256;
};

ServerInfo fetch_server_info(const Args& a) {
  httplib::Client c(a.url);
  c.set_read_timeout(10, 0);
  auto models = c.Get("/v1/models", auth(a));
  if (!models || models->status != 200) {
    throw Error("cannot reach " + a.url + "/v1/models" +
                (models ? " (HTTP " + std::to_string(models->status) + ")" : ""));
  }
  const json mj = json::parse(models->body, nullptr, false);
  if (mj.is_discarded() || !mj.contains("data") || !mj["data"].is_array() || mj["data"].empty() ||
      !mj["data"][0].is_object()) {
    throw Error(a.url + "/v1/models: not a model list");
  }
  const json& m0 = mj["data"][0];
  ServerInfo info;
  info.model = a.model.empty() ? m0.value("id", "") : a.model;
  if (m0.contains("meta") && m0["meta"].is_object()) {
    info.n_vocab = m0["meta"].value("n_vocab", 256);
    info.routing = m0["meta"].value("routing", "");
  }
  if (info.n_vocab < 1) throw Error(a.url + "/v1/models: n_vocab " + std::to_string(info.n_vocab));
  return info;
}

struct Job {
  double at = 0;  // arrival time, seconds after the start
  std::vector<int> prompt;
  int gen = 0;
};

// The whole schedule, drawn before the first request: arrival times (exponential gaps for
// Poisson, gamma gaps with shape k < 1 for bursty: same mean rate, coefficient of variation
// 1/sqrt(k)) and each request's prompt and length.
std::vector<Job> draw_jobs(const Args& a, int n_vocab) {
  const Dist plen = Dist::parse(a.prompt_len, "--prompt-len");
  const Dist glen = Dist::parse(a.gen_len, "--gen-len");
  std::mt19937_64 rng(a.seed);
  std::vector<Job> jobs;
  for (double t = 0;;) {
    if (a.arrivals == "poisson") {
      t += std::exponential_distribution<double>(a.rate)(rng);
    } else {
      const double k = a.burstiness;
      t += std::gamma_distribution<double>(k, 1.0 / (a.rate * k))(rng);
    }
    if (!(t < a.duration)) break;  // also ends on a NaN gap instead of looping forever
    jobs.push_back({t, {}, 0});
  }
  for (auto& j : jobs) {
    j.prompt.resize(size_t(plen.draw(rng)));
    // Ids below 256 are bytes in byte-level vocabularies; any id is a valid prompt token.
    for (int& id : j.prompt) id = std::uniform_int_distribution<int>(0, n_vocab - 1)(rng);
    j.gen = glen.draw(rng);
  }
  return jobs;
}

// Joins every started request thread, also when the loop that starts them is left by an
// exception: a joinable std::thread destroyed would call std::terminate.
struct Joiner {
  std::vector<std::thread> threads;
  ~Joiner() {
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }
};

// Sends each job at its arrival time on a thread of its own (open loop). A request the
// client cannot send (too many in flight, or no thread to be had: std::system_error from the
// thread's creation) is recorded as a client error in its sample and counted, never hidden.
// Returns the number of requests not sent.
int send_all(const Args& a, const std::string& model, const std::vector<Job>& jobs,
             std::vector<Sample>& samples) {
  samples.assign(jobs.size(), Sample{});
  std::atomic<int> inflight{0};
  int skipped = 0;
  Joiner joiner;
  const double t0 = now_seconds();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const double wait = t0 + jobs[i].at - now_seconds();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    if (inflight >= a.max_inflight) {
      samples[i].error = "client: too many requests in flight";
      ++skipped;
      continue;
    }
    ++inflight;
    try {
      joiner.threads.emplace_back([&, i] {
        // Nothing may leave a thread function (std::terminate): a request that cannot even
        // allocate is a client error like the others.
        try {
          samples[i] = run_one(a, model, jobs[i].prompt, jobs[i].gen);
        } catch (const std::exception& e) {
          samples[i].error = std::string("client: ") + e.what();
        }
        --inflight;
      });
    } catch (const std::system_error& e) {
      --inflight;
      samples[i].error = std::string("client: cannot start a thread: ") + e.what();
      ++skipped;
    }
  }
  return skipped;
}

json summarize(const Args& a, const ServerInfo& info, const std::vector<Job>& jobs,
               const std::vector<Sample>& samples, int skipped, double elapsed) {
  std::vector<double> ttft, tpot, e2e;
  std::map<std::string, int> errors;
  int64_t out_tokens = 0, in_tokens = 0;
  int ok = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (s.status == 200 && s.error.empty()) {
      ++ok;
      ttft.push_back(s.ttft);
      tpot.push_back(s.tpot);
      e2e.push_back(s.e2e);
      out_tokens += s.tokens;
      in_tokens += int64_t(jobs[i].prompt.size());
    } else {
      ++errors[s.error.empty() ? "http " + std::to_string(s.status) : s.error];
    }
  }
  // One record per request in arrival order, so that repetitions of a point can be pooled
  // (a P99 over several runs) and tails traced to their requests; NaN fields are null.
  json requests = json::array();
  auto num = [](double x) { return std::isnan(x) ? json(nullptr) : json(x); };
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    json r = {{"at_s", jobs[i].at},        {"prompt_tokens", jobs[i].prompt.size()},
              {"max_tokens", jobs[i].gen}, {"status", s.status},
              {"tokens", s.tokens},        {"ttft_s", num(s.ttft)},
              {"tpot_s", num(s.tpot)},     {"e2e_s", num(s.e2e)}};
    if (!s.error.empty()) r["error"] = s.error;
    requests.push_back(std::move(r));
  }
  return {{"url", a.url},
          {"model", info.model},
          {"routing", info.routing},
          {"arrivals", a.arrivals},
          {"rate", a.rate},
          {"duration_s", a.duration},
          {"prompt_len", a.prompt_len},
          {"gen_len", a.gen_len},
          {"sent", int(jobs.size()) - skipped},
          {"completed", ok},
          {"errors", errors},
          {"elapsed_s", elapsed},
          {"ttft_s", percentiles(ttft)},
          {"tpot_s", percentiles(tpot)},
          {"e2e_s", percentiles(e2e)},
          {"throughput",
           {{"requests_per_s", ok / elapsed},
            {"output_tokens_per_s", double(out_tokens) / elapsed},
            {"total_tokens_per_s", double(out_tokens + in_tokens) / elapsed}}},
          {"requests", std::move(requests)}};
}

json run(const Args& a) {
  const ServerInfo info = fetch_server_info(a);
  const std::vector<Job> jobs = draw_jobs(a, info.n_vocab);
  const double d_policy0 = routing_counter(a, "lynx_routing_distinct_policy_total");
  const double d_exact0 = routing_counter(a, "lynx_routing_distinct_exact_total");
  std::vector<Sample> samples;
  const double t0 = now_seconds();
  const int skipped = send_all(a, info.model, jobs, samples);
  const double elapsed = now_seconds() - t0;
  const double d_policy1 = routing_counter(a, "lynx_routing_distinct_policy_total");
  const double d_exact1 = routing_counter(a, "lynx_routing_distinct_exact_total");
  json r = summarize(a, info, jobs, samples, skipped, elapsed);
  if (d_policy0 >= 0 && d_exact1 > d_exact0) {
    // Distinct experts activated by the server during the run relative to exact top-k
    // (all steps and MoE layers): what the routing policy saved.
    r["distinct_experts_ratio"] = (d_policy1 - d_policy0) / (d_exact1 - d_exact0);
  }
  return r;
}

void print_text(const json& r) {
  std::printf("%s  %s arrivals at %.2f req/s for %.0f s (routing %s)\n",
              r["url"].get<std::string>().c_str(), r["arrivals"].get<std::string>().c_str(),
              r["rate"].get<double>(), r["duration_s"].get<double>(),
              r["routing"].get<std::string>().c_str());
  std::printf("sent %d, completed %d, errors %zu kinds\n", r["sent"].get<int>(),
              r["completed"].get<int>(), r["errors"].size());
  for (const auto& [k, v] : r["errors"].items())
    std::printf("  %5d  %s\n", v.get<int>(), k.c_str());
  for (const char* key : {"ttft_s", "tpot_s", "e2e_s"}) {
    const json& p = r[key];
    if (p.is_null()) continue;
    std::printf("%-7s ms  mean %8.2f  p50 %8.2f  p90 %8.2f  p99 %8.2f\n", key,
                1e3 * p["mean"].get<double>(), 1e3 * p["p50"].get<double>(),
                1e3 * p["p90"].get<double>(), 1e3 * p["p99"].get<double>());
  }
  std::printf("throughput: %.2f req/s, %.1f output tok/s\n",
              r["throughput"]["requests_per_s"].get<double>(),
              r["throughput"]["output_tokens_per_s"].get<double>());
  if (r.contains("distinct_experts_ratio")) {
    std::printf("distinct experts vs exact top-k: %.3f\n",
                r["distinct_experts_ratio"].get<double>());
  }
}

}  // namespace

void register_loadgen(CLI::App& app) {
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("loadgen", "Open-loop load against an OpenAI-compatible server");
  cmd->add_option("--url", a->url, "Server base URL");
  cmd->add_option("--rate", a->rate, "Mean arrival rate (requests/s)")
      ->check(number_in(0, 1e5, true));
  cmd->add_option("--duration", a->duration, "Seconds during which requests are sent")
      ->check(number_in(0, 86400 * 7, true));
  cmd->add_option("--arrivals", a->arrivals, "poisson or bursty")
      ->check(CLI::IsMember({"poisson", "bursty"}));
  cmd->add_option("--burstiness", a->burstiness,
                  "Gamma shape of bursty inter-arrival times (< 1 = burstier)")
      ->check(number_in(1e-3, 1e3));
  cmd->add_option("--prompt-len", a->prompt_len, "Prompt tokens: N, A:B or normal:MEAN:STD");
  cmd->add_option("--gen-len", a->gen_len, "Generated tokens: N, A:B or normal:MEAN:STD");
  cmd->add_option("--model", a->model, "Model id (default: the server's)");
  cmd->add_option("--api-key", a->api_key, "Bearer token");
  cmd->add_option("--seed", a->seed, "Seed of arrivals and lengths");
  cmd->add_option("--timeout", a->timeout, "Per-request read timeout (s)")
      ->check(number_in(0, 86400, true));
  cmd->add_option("--max-inflight", a->max_inflight, "Client-side cap on open requests")
      ->check(int_in(1, 1 << 16));
  cmd->add_option("-o,--output", a->output, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--out-file", a->out_file, "Also write the JSON result to this file");
  cmd->callback([a] {
    // The schedule is drawn in advance: bound its size (a typo of --rate or --duration would
    // otherwise try to hold billions of requests).
    if (a->rate * a->duration > 1e6) {
      throw UsageError("--rate x --duration asks for more than 1,000,000 requests");
    }
    Dist::parse(a->prompt_len, "--prompt-len");  // before contacting the server
    Dist::parse(a->gen_len, "--gen-len");
    const json r = run(*a);
    if (a->output == "json") {
      std::printf("%s\n", r.dump(2).c_str());
    } else {
      print_text(r);
    }
    if (!a->out_file.empty()) {
      FILE* f = std::fopen(a->out_file.c_str(), "w");
      if (!f) throw Error("cannot write " + a->out_file + ": " + std::strerror(errno));
      const bool ok = std::fprintf(f, "%s\n", r.dump(2).c_str()) >= 0;
      if (std::fclose(f) != 0 || !ok) throw Error("cannot write " + a->out_file);
    }
  });
}

}  // namespace lynx::cli
