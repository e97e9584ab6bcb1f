// Nonsense on the command line and broken models (issue 15): every command rejects a bad
// flag with a message naming it and exit status 2 (1 for a failure at run time), and nothing
// crashes, hangs or writes where it should not.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "lynx/gguf.h"
#include "util.h"

namespace lynx {
namespace {

using test::run_cli;

const std::string kModel = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-8x2.gguf";
const std::string kTmp = std::string(LYNX_BINARY_DIR) + "/hostile_cli";

struct Case {
  std::string args, expect;  // expect: a substring of the message
};

TEST(HostileCli, NonsenseFlagsExitTwoWithAMessage) {
  std::filesystem::create_directories(kTmp);
  const std::string gen = "generate -m " + kModel + " -p hi -n 2 ";
  const std::vector<Case> cases = {
      {gen + "--temp nan", "--temp"},
      {gen + "--temp -1", "--temp"},
      {gen + "--top-p 2", "--top-p"},
      {gen + "--top-p 0", "--top-p"},
      {gen + "--top-k -5", "--top-k"},
      {gen + "-t -1", "--threads"},
      {gen + "-n 0", "--n-predict"},
      {gen + "-B 0", "--parallel"},
      {gen + "-c 0", "--ctx"},
      {gen + "--routing ''", "empty value"},
      {gen + "--routing ';'", "no routing policy"},
      {gen + "--routing nosuch", "nosuch"},
      {gen + "--routing static-k:k=65", "static-k"},
      {gen + "--routing ser:kmin=100,t=0.5", "kmin"},
      {gen + "--routing oea:k0=100", "k0"},
      {gen + "--routing budget:m=100", "budget"},
      {gen + "-f " + kTmp, "directory"},
      {"eval -m " + kModel + " --data " + kTmp + " --prefix -1", "--prefix"},
      {"eval -m " + kModel + " --data " + kTmp + " --max-tokens -3", "--max-tokens"},
      {"eval -m " + kModel + " --data " + kTmp + " --batch 0", "--batch"},
      {"eval -m " + kModel + " --data " + kTmp + " --routing static-k:k=3", "static-k"},
      {"bench -m " + kModel + " --threads 0", "--threads"},
      {"bench -m " + kModel + " --bandwidth nan", "--bandwidth"},
      {"bench -m " + kModel + " --routing oea:k0=9", "k0"},
      {"route-sim --routing static-k:k=65 --experts 64 --k 8", "static-k"},
      {"route-sim --routing topk --experts 64 --k 80", "--k"},
      {"route-sim --routing topk --std nan", "--std"},
      {"route-sim --routing topk --steps 0", "--steps"},
      {"loadgen --rate nan --url http://127.0.0.1:9", "--rate"},
      {"loadgen --rate 0 --url http://127.0.0.1:9", "--rate"},
      {"loadgen --duration inf --url http://127.0.0.1:9", "--duration"},
      {"loadgen --rate 1e5 --duration 1e5 --url http://127.0.0.1:9", "1,000,000"},
      {"loadgen --prompt-len nan --url http://127.0.0.1:9", "--prompt-len"},
      {"logits -m " + kModel + " --tokens 1,99999", "99999"},
      {"logits -m " + kModel + " --tokens 1 -t -1", "--threads"},
      {"logits -m " + kModel + " --tokens 1 --routing ''", "empty value"},
      {"tokenize -m " + kModel + " -f " + kTmp, "directory"},
      {"tokenize -m " + kModel + " -p x --bench --reps 0", "--reps"},
      {"synth --shape tiny-moe --router-std nan -o " + kTmp + "/x.gguf", "--router-std"},
      {"synth --shape nosuch -o " + kTmp + "/x.gguf", "nosuch"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.code(), 2) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
  }
}

// route-sim with infinite logits (NaN and inf rows): every policy routes them (it used to
// segfault in lynx on a NaN bin index).
TEST(HostileCli, RouteSimWithInfiniteStdRuns) {
  const auto r = run_cli(
      "route-sim --routing 'topk;lynx;oea:k0=4;budget:m=16;ser:kmin=2,t=0.5;static-k:k=4' "
      "--experts 64 --k 8 --batch 4 --steps 2 --std inf --repeats 1");
  EXPECT_EQ(r.code(), 0) << r.out;
  EXPECT_NE(r.out.find("lynx"), std::string::npos) << r.out;
  // All logits are drawn up front: a huge --steps is refused, not an overflow or bad_alloc.
  const auto big = run_cli("route-sim --routing topk --steps 16000000 --batch 65536");
  EXPECT_EQ(big.code(), 1) << big.out;
  EXPECT_NE(big.out.find("2^28"), std::string::npos) << big.out;
}

// Copies the bundled model with every router weight of layer 0 set to NaN.
std::string nan_router_model() {
  std::filesystem::create_directories(kTmp);
  const gguf::File f = gguf::File::open(kModel);
  gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  }
  for (const auto& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.name == "blk.0.ffn_gate_inp.weight") {
      EXPECT_EQ(t.type, gguf::TensorType::F32);
      std::vector<float> nan(t.n_bytes / 4, std::numeric_limits<float>::quiet_NaN());
      w.add_tensor(t.name, t.type, ne, nan.data(), t.n_bytes);
    } else {
      w.add_tensor(t.name, t.type, ne, t.data, t.n_bytes);
    }
  }
  const std::string path = kTmp + "/nan-router.gguf";
  w.write(path);
  return path;
}

// A model whose router is NaN: generate fails with an error naming the layer instead of
// crashing (lynx) or printing garbage (topk), for every policy.
TEST(HostileCli, NanRouterFailsTheRequestsWithTheLayer) {
  const std::string m = nan_router_model();
  for (const char* policy : {"lynx", "topk", "oea:k0=1"}) {
    SCOPED_TRACE(policy);
    const auto r =
        run_cli("generate -m " + m + " -p 'hello there' -B 4 -n 3 --routing '" + policy + "'");
    EXPECT_EQ(r.code(), 1) << r.out;
    EXPECT_NE(r.out.find("non-finite"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("router logits of layer 0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("4 of 4 sequences failed"), std::string::npos) << r.out;
  }
}

// The issue's eval command: a prefix that reaches the end of the only document.
TEST(HostileCli, EvalPrefixAtTheDocumentEnd) {
  const std::string dir = kTmp + "/eval-data";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/doc.txt") << "one two three four five six seven eight nine ten eleven";
  const auto r = run_cli("eval -m " + kModel + " --data " + dir +
                         " --max-docs 1 --max-tokens 8 --prefix 7 --routing topk --batch 1");
  EXPECT_EQ(r.code(), 1) << r.out;
  EXPECT_NE(r.out.find("no document has a token to score"), std::string::npos) << r.out;
  const auto ok = run_cli("eval -m " + kModel + " --data " + dir +
                          " --max-docs 1 --max-tokens 8 --prefix 6 --routing topk --batch 1");
  EXPECT_EQ(ok.code(), 0) << ok.out;
}

// synth writes regular files only: /dev/full stays a device node (it used to be replaced by
// the renamed temporary file) and the failure is reported.
TEST(HostileCli, SynthRefusesADeviceNode) {
  struct stat before {};
  ASSERT_EQ(stat("/dev/full", &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  const auto r = run_cli("synth --shape tiny-moe --layers 1 -o /dev/full");
  EXPECT_EQ(r.code(), 1) << r.out;
  EXPECT_NE(r.out.find("not a regular file"), std::string::npos) << r.out;
  struct stat after {};
  ASSERT_EQ(stat("/dev/full", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode)) << "/dev/full was replaced";
  EXPECT_NE(access("/dev/full.tmp", F_OK), 0) << "a temporary file was left in /dev";
  // A directory is no place for a model either.
  const auto d = run_cli("synth --shape tiny-moe --layers 1 -o " + kTmp);
  EXPECT_EQ(d.code(), 1) << d.out;
  EXPECT_NE(d.out.find("not a regular file"), std::string::npos) << d.out;
}

// loadgen when threads cannot be created (issue 15, item 3): it used to abort with
// std::terminate. A fake server (Python's http.server, one thread per request) holds every
// completion for 2 s, so loadgen's request threads pile up; `ulimit -v` leaves room for a
// few of their stacks only. The run must finish and count the refused requests.
#if defined(__SANITIZE_ADDRESS__)  // GCC
#define LYNX_ASAN 1
#elif defined(__has_feature)  // clang
#if __has_feature(address_sanitizer)
#define LYNX_ASAN 1
#endif
#endif
TEST(HostileCli, LoadgenReportsThreadCreationFailure) {
#if defined(LYNX_ASAN)
  GTEST_SKIP() << "ASan reserves terabytes of address space: ulimit -v would stop it";
#else
  std::filesystem::create_directories(kTmp);
  const std::string script = kTmp + "/fake_server.py", port_file = kTmp + "/fake_port";
  std::filesystem::remove(port_file);
  std::ofstream(script) << R"(import http.server, json, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, body, ctype):
        self.send_response(200)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(json.dumps({'data': [{'id': 'fake', 'meta': {'n_vocab': 100}}]}).encode(),
                   'application/json')
    def do_POST(self):
        self.rfile.read(int(self.headers.get('Content-Length', 0)))
        time.sleep(2)
        self.reply(b'data: [DONE]\n\n', 'text/event-stream')
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
open(sys.argv[1] + '.tmp', 'w').write(str(s.server_address[1]))
import os; os.rename(sys.argv[1] + '.tmp', sys.argv[1])
s.timeout = 0.5
end = time.time() + 20
while time.time() < end and not os.path.exists(sys.argv[1] + '.stop'): s.handle_request()
)";
  std::filesystem::remove(port_file + ".stop");
  ASSERT_EQ(
      std::system(("/usr/bin/python3 " + script + " " + port_file + " >/dev/null 2>&1 &").c_str()),
      0);
  std::string port;
  for (int i = 0; i < 100 && port.empty(); ++i) {
    std::ifstream(port_file) >> port;
    if (port.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(port.empty()) << "the fake server did not start";
  const auto r = run_cli("loadgen --url http://127.0.0.1:" + port +
                             " --rate 300 --duration 1 --timeout 5 --gen-len 1 --prompt-len 1",
                         "ulimit -v 300000; ");
  std::ofstream(port_file + ".stop") << "1";  // the fake server exits within 0.5 s
  EXPECT_EQ(r.out.find("terminate"), std::string::npos) << r.out;
  EXPECT_EQ(r.code(), 0) << r.out;
  EXPECT_NE(r.out.find("cannot start a thread"), std::string::npos) << r.out;
#endif
}

// Issue 29, item 8: an empty value is refused, never taken as 0 or "" (which meant the
// default, or any port, or all cores); a negative or too large unsigned value does not wrap.
TEST(HostileCli, EmptyNegativeAndHugeValuesExitTwo) {
  std::filesystem::create_directories(kTmp);
  const std::string gen = "generate -m " + kModel + " -p hi -n 2 ";
  const std::vector<Case> cases = {
      {gen + "-t ''", "--threads: '' is not an integer"},
      {gen + "--seed ''", "--seed: an empty value"},
      {gen + "--seed -1", "must not be negative"},
      {gen + "--seed 18446744073709551616", "out of range"},
      {gen + "--seed 99999999999999999999999", "out of range"},
      {gen + "-n ''", "--n-predict"},
      {gen + "--temp ''", "--temp"},
      {"quantize " + kModel + " " + kTmp + "/q.gguf Q8_0 -t -1", "--threads"},
      {"quantize " + kModel + " " + kTmp + "/q.gguf Q8_0 -t ''", "--threads"},
      {"synth --shape tiny-moe --layers 1 -o ''", "empty value"},
      {"tokenize -m " + kModel + " -p ''", "empty value"},
      {"route-sim --routing topk --seed -5", "must not be negative"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const auto r = run_cli(c.args, "timeout 60 ");
    EXPECT_EQ(r.code(), 2) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
  }
  // The largest seed is a seed, not an error.
  const auto ok = run_cli(gen + "--seed 18446744073709551615 --temp 0.5 -q");
  EXPECT_EQ(ok.code(), 0) << ok.out;
}

// Issue 29, item 3: every file input is a regular file of bounded size. /dev/zero, a FIFO
// without a writer and /dev/stdin on a pipe used to be read until memory ran out (or to
// block for ever); each is now refused at once.
TEST(HostileCli, DevicesFifosAndPipesAreNotRead) {
  std::filesystem::create_directories(kTmp);
  const std::string fifo = kTmp + "/fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string gen = "generate -m " + kModel + " -p hi -n 2 ";
  for (const std::string& bad : {std::string("/dev/zero"), fifo, std::string("/dev/stdin")}) {
    const std::vector<std::string> cmds = {
        gen + "-f " + bad,
        "tokenize -m " + kModel + " -f " + bad,
        "bench -m " + kModel + " --batch 1 --prompt-file " + bad,
        gen + "--routing subst:sim=" + bad,
        "quantize " + kModel + " " + kTmp + "/q.gguf Q8_0 --imatrix " + bad,
        "route-sim --routing topk -m " + kModel + " --placement-file " + bad + " --ranks 2",
    };
    for (const auto& cmd : cmds) {
      SCOPED_TRACE(cmd);
      // `yes |` makes /dev/stdin an endless pipe; `timeout` ends a regression instead of
      // hanging the suite.
      const auto r = run_cli(cmd, "yes 2>/dev/null | timeout 60 ");
      EXPECT_TRUE(r.code() == 1 || r.code() == 2) << r.out;
      EXPECT_NE(r.out.find("not a regular file"), std::string::npos) << r.out;
    }
  }
  std::filesystem::remove(fifo);
}

// The text generate printed for sequence 0 (from "[0] " to the summary table).
std::string generated_text(const std::string& out) {
  const size_t b = out.find("[0] ");
  if (b == std::string::npos) return {};
  return out.substr(b, out.find("\nrouting ", b) - b);
}

// Issue 29, item 1: a tiny positive temperature samples the greedy tokens.
TEST(HostileCli, TinyTemperatureIsGreedy) {
  const std::string gen = "generate -m " + kModel + " -p 'The cat' -n 12 --ignore-eos ";
  const auto greedy = run_cli(gen + "--temp 0");
  ASSERT_EQ(greedy.code(), 0) << greedy.out;
  for (const char* t : {"1e-38", "1e-39", "1e-45"}) {
    SCOPED_TRACE(t);
    const auto r = run_cli(gen + "--temp " + t + " --seed 5");
    ASSERT_EQ(r.code(), 0) << r.out;
    EXPECT_EQ(generated_text(r.out), generated_text(greedy.out));
    EXPECT_FALSE(generated_text(r.out).empty()) << r.out;
  }
}

// --help still exits 0 (the mapping of parse errors to 2 leaves it alone).
TEST(HostileCli, HelpExitsZero) {
  EXPECT_EQ(run_cli("generate --help").code(), 0);
  EXPECT_EQ(run_cli("nosuch-command").code(), 2);
}

}  // namespace
}  // namespace lynx
