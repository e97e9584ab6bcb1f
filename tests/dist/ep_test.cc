// Expert parallelism against the single process, run under mpirun (tests/dist/CMakeLists.txt):
//   test_dist_ep equal MODEL...   every policy, prefill and decode, both combines: each rank
//                                 runs the model whole (CpuExpertExecutor) and as its shard
//                                 (MpiExpertExecutor) and compares the logits of every
//                                 position: gather bit-identical, allreduce within the
//                                 reference tolerance (NMSE 1e-5, tests/model/golden_test.cc)
//   test_dist_ep handshake MODEL  rank 1 claims another build, model and placement: every rank
//                                 must raise the CollectiveError naming it; and the placement
//                                 parser's refusals
//   test_dist_ep die MODEL        rank 1 kills itself (SIGKILL) inside a step: the job must end
//                                 non-zero (run with a timeout, tests/dist/expect_fail.sh)
//   test_dist_ep hang MODEL       rank 1 stops itself (SIGSTOP) inside a step: rank 0 must give
//                                 up at its deadline (PeerFailure, the failure hook) and end
//                                 the job
//   test_dist_ep tier MODEL       each rank with an expert tier of two slots over its shard: the
//                                 routing sees every rank's residency (docs/offload.md): exact
//                                 top-k as one process with every expert loaded; lynx and cover
//                                 (miss cost pinned) as one process routed with the same
//                                 residency (gather bit-identical, allreduce within tolerance),
//                                 the same on every rank; cover reads fewer experts than with
//                                 the residency hidden (gather combine)
//   test_dist_ep tier-allreduce MODEL  the same with the allreduce combine
// Exit status 0 when every check holds; each failure is printed with its rank.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dist/handshake.h"
#include "dist/hash.h"
#include "dist/session.h"
#include "lynx/context.h"
#include "model/cpu_expert_executor.h"
#include "model/expert_tier.h"

namespace lynx::dist {
namespace {

int g_failures = 0;

void fail(const Mpi& mpi, const std::string& what) {
  std::fprintf(stderr, "FAIL (rank %d): %s\n", mpi.rank(), what.c_str());
  ++g_failures;
}

// The logits of every position of a fixed workload: three sequences prefilled together, then
// decode steps of three tokens (batch-aware policies see a real batch). Greedy tokens come
// from the reference run (`forced` empty) and are replayed by the EP run, so both see the
// same inputs even where a near tie would pick another token.
std::vector<std::vector<float>> workload(const Model& m, ContextOptions co,
                                         std::vector<int32_t>& forced) {
  const int V = m.config().n_vocab, S = 3, P = 7, G = 5;
  co.n_ctx = P + G + 1;
  co.n_threads = 1;
  Context ctx(m, co);
  std::vector<std::vector<float>> out;
  std::vector<int32_t> seq(S), next(S);
  std::vector<BatchToken> batch;
  for (int s = 0; s < S; ++s) {
    seq[size_t(s)] = ctx.new_sequence();
    for (int p = 0; p < P; ++p) {
      batch.push_back(
          {int32_t((s * 131 + p * 17 + 5) % V), seq[size_t(s)], p, kTokenPrefill, true});
    }
  }
  size_t f = 0;
  for (int g = 0;; ++g) {
    ctx.eval(batch);
    for (int i = 0; i < ctx.n_logits(); ++i) {
      auto l = ctx.logits(i);
      out.emplace_back(l.begin(), l.end());
    }
    if (g == G) break;
    // The next token of each sequence: its last logits row's arg-max.
    std::vector<BatchToken> dec;
    for (int s = 0; s < S; ++s) {
      const int row = g == 0 ? (s + 1) * P - 1 : s;
      auto l = ctx.logits(row);
      int32_t best = 0;
      for (int v = 1; v < V; ++v) {
        if (l[size_t(v)] > l[size_t(best)]) best = v;
      }
      if (f < forced.size())
        best = forced[f];
      else
        forced.push_back(best);
      ++f;
      dec.push_back({best, seq[size_t(s)], P + g, kTokenDecode, true});
    }
    batch = dec;
  }
  return out;
}

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? num / den : num;
}

void check_equal(Session& session, const std::string& path) {
  const Mpi& mpi = session.mpi();
  auto whole = Model::load(path);
  auto shard = session.load(path, {});
  const int k = whole->config().n_expert_used, n = whole->config().n_expert;
  std::vector<std::string> policies = {
      "topk",        "lynx", "oea:k0=1", "budget:m=" + std::to_string(n / 2), "ser:kmin=1,t=0.5",
      "static-k:k=1"};
  if (k < 2) policies = {"topk", "lynx"};
  for (const std::string& spec : policies) {
    for (const Combine combine : {Combine::kGather, Combine::kAllReduce}) {
      const char* cname = combine == Combine::kGather ? "gather" : "allreduce";
      ContextOptions co;
      co.routing = spec;
      std::vector<int32_t> forced;
      const auto ref = workload(*whole, co, forced);
      co.experts = session.experts(nullptr, combine);
      const auto ep = workload(*shard, co, forced);
      const std::string what = path + " " + spec + " " + cname;
      if (ep.size() != ref.size()) {
        fail(mpi, what + ": " + std::to_string(ep.size()) + " logits rows, expected " +
                      std::to_string(ref.size()));
        continue;
      }
      double worst = 0;
      for (size_t p = 0; p < ref.size(); ++p) {
        const double e = nmse(ep[p], ref[p]);
        worst = std::max(worst, e);
        if (combine == Combine::kGather
                ? std::memcmp(ep[p].data(), ref[p].data(), ref[p].size() * sizeof(float)) != 0
                : !(e <= 1e-5)) {
          fail(mpi, what + ": position row " + std::to_string(p) + " differs (NMSE " +
                        std::to_string(e) + ")");
          break;
        }
      }
      if (mpi.rank() == 0) {
        std::printf("ok %-40s %-9s R=%d rows=%zu worst NMSE %.3g\n",
                    (path.substr(path.rfind('/') + 1) + " " + spec).c_str(), cname, mpi.size(),
                    ref.size(), worst);
      }
    }
  }
}

void check_handshake(Session& session, const std::string& path) {
  const Mpi& mpi = session.mpi();
  struct Case {
    const char* name;
    void (*spoil)(Identity&);
    const char* expect;
  };
  const Case cases[] = {
      {"version", [](Identity& id) { id.version += "-other"; }, "same binary"},
      {"model", [](Identity& id) { id.model_hash ^= 1; }, "different model"},
      {"size", [](Identity& id) { id.file_size += 1; }, "different model"},
      {"placement", [](Identity& id) { id.placement_hash ^= 1; }, "different expert placement"},
      {"load", [](Identity& id) { id.error = "bad file"; }, "cannot load its shard: bad file"},
  };
  for (const Case& c : cases) {
    Identity id;
    id.version = "v";
    model_identity(path, 64, id);
    if (mpi.rank() == 1) c.spoil(id);
    try {
      handshake(mpi, id);
      fail(mpi, std::string("handshake ") + c.name + ": no error");
    } catch (const CollectiveError& e) {
      if (!std::strstr(e.what(), c.expect) || !std::strstr(e.what(), "rank 1")) {
        fail(mpi, std::string("handshake ") + c.name + ": unexpected message: " + e.what());
      }
    }
  }
  Identity same;
  same.version = "v";
  model_identity(path, 64, same);
  try {
    handshake(mpi, same);
  } catch (const std::exception& e) {
    fail(mpi, std::string("handshake of equal ranks failed: ") + e.what());
  }
  if (mpi.rank() == 0) std::printf("ok handshake R=%d\n", mpi.size());
}

// Placement: the contiguous split and the JSON parser's refusals (each names the defect).
void check_placement(const Mpi& mpi) {
  const Placement c = default_placement(4, 10, 2);
  const std::vector<int> want = {0, 0, 0, 1, 1, 2, 2, 2, 3, 3};
  if (c.layers.size() != 2 || c.layers[1] != want) fail(mpi, "contiguous 10 experts over 4 ranks");
  const Placement ok =
      read_placement(R"({"ranks":2,"experts":3,"layers":[[1,0,1],[0,0,1]]})", "t", 2, 3, 2);
  if (ok.experts_of(0, 1) != std::vector<int>{0, 2} || placement_hash(ok) == placement_hash(c)) {
    fail(mpi, "parsed placement");
  }
  const std::pair<const char*, const char*> bad[] = {
      {"[1,2", "not valid JSON"},
      {"[]", "expected a JSON object"},
      {R"({"ranks":2,"experts":3})", "missing \"layers\""},
      {R"({"ranks":4,"experts":3,"layers":[]})", "the job has 2 ranks"},
      {R"({"ranks":2,"experts":4,"layers":[]})", "the model has 3 experts"},
      {R"({"ranks":2,"experts":3,"layers":[[0,1,1]]})", "array of 2 arrays"},
      {R"({"ranks":2,"experts":3,"layers":[[0,1,1],[0,1]]})", "layers[1] must list"},
      {R"({"ranks":2,"experts":3,"layers":[[0,1,1],[0,2,1]]})", "layers[1][1] = 2 is not a rank"},
      {R"({"ranks":2,"experts":3,"layers":[[0,1,1],[0,"1",1]]})", "is not a rank"},
  };
  for (const auto& [text, expect] : bad) {
    try {
      read_placement(text, "t", 2, 3, 2);
      fail(mpi, std::string("placement accepted: ") + text);
    } catch (const Error& e) {
      if (!std::strstr(e.what(), expect)) {
        fail(mpi, std::string("placement ") + text + ": unexpected message: " + e.what());
      }
    }
  }
  if (mpi.rank() == 0) std::printf("ok placement\n");
}

// What the routing of one MoE layer was given: the residency mask and costs (absent: nullptr).
struct Residency {
  bool present = false;
  std::vector<uint8_t> mask;
  std::vector<float> cost;
};

// Forwards to `inner` (an MpiExpertExecutor) and logs the residency the routing is given and
// how many times it was gathered in a message of its own; with `hide`, the routing is given
// none (as before residency was gathered under EP) while the log still gets it.
class RecordingExecutor final : public ExpertExecutor {
 public:
  RecordingExecutor(std::unique_ptr<ExpertExecutor> inner, int n, std::vector<Residency>& log,
                    int64_t& gathers, bool hide)
      : inner_(std::move(inner)), n_(size_t(n)), log_(log), gathers_(gathers), hide_(hide) {}
  void run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il, const LayerWeights& layer,
           float* out) override {
    inner_->run(plan, x, il, layer, out);
  }
  const uint8_t* resident(int il) override {
    const uint8_t* m = inner_->resident(il);
    gathers_ = dynamic_cast<MpiExpertExecutor&>(*inner_).residency_gathers();
    Residency r;
    r.present = m != nullptr;
    if (m) r.mask.assign(m, m + n_);
    log_.push_back(std::move(r));
    return hide_ ? nullptr : m;
  }
  const float* cost(int il) override {
    const float* c = inner_->cost(il);
    if (c) log_.back().cost.assign(c, c + n_);
    return hide_ ? nullptr : c;
  }

 private:
  std::unique_ptr<ExpertExecutor> inner_;
  size_t n_;
  std::vector<Residency>& log_;
  int64_t& gathers_;
  bool hide_;
};

// Every expert in memory (CpuExpertExecutor), the routing given the logged residency in turn.
class ReplayingExecutor final : public ExpertExecutor {
 public:
  ReplayingExecutor(kernels::ThreadPool& pool, bool int_acts, const std::vector<Residency>& log)
      : cpu_(pool, int_acts), log_(log) {}
  void run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il, const LayerWeights& layer,
           float* out) override {
    cpu_.run(plan, x, il, layer, out);
  }
  const uint8_t* resident(int) override {
    at_ = next_++;
    if (at_ >= log_.size() || !log_[at_].present) return nullptr;
    return log_[at_].mask.data();
  }
  const float* cost(int) override {
    if (at_ >= log_.size() || log_[at_].cost.empty()) return nullptr;
    return log_[at_].cost.data();
  }

 private:
  CpuExpertExecutor cpu_;
  const std::vector<Residency>& log_;
  size_t next_ = 0, at_ = 0;
};

// Bit-identical under the gather combine; within the reference tolerance under allreduce (its
// sums' order differs from the single process's, check_equal).
bool same_logits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                 Combine combine) {
  if (a.size() != b.size()) return false;
  for (size_t p = 0; p < a.size(); ++p) {
    if (a[p].size() != b[p].size()) return false;
    if (combine == Combine::kGather
            ? std::memcmp(a[p].data(), b[p].data(), a[p].size() * sizeof(float)) != 0
            : !(nmse(a[p], b[p]) <= 1e-5)) {
      return false;
    }
  }
  return true;
}

// Each rank with a tier of two slots over its shard (a fresh shard per run: the tiers start
// empty), miss cost pinned at 20 (bit-reproducible routing). Each combine carries the
// residency in its own message, so both are run (allreduce: one fixture, to keep it short: the
// tier's O_DIRECT reads take milliseconds on a busy disk).
void check_tier(Session& session, const std::string& path, Combine combine) {
  const Mpi& mpi = session.mpi();
  auto whole = Model::load(path);
  const int n = whole->config().n_expert;
  for (const std::string spec : {"topk", "lynx", "cover"}) {
    const std::string what = spec + (combine == Combine::kGather ? " gather" : " allreduce");
    struct Run {
      std::vector<Residency> log;
      std::vector<std::vector<float>> logits;
      uint64_t misses = 0;  // every rank's tier, summed
      int64_t gathers = 0;  // residency gathered in a message of its own
    };
    std::vector<int32_t> forced;
    auto run_ep = [&](bool hide) {
      LoadOptions lo;
      lo.expert_cache = int64_t(2 * (whole->expert_bytes(0) + 3 * 64));
      lo.expert_miss_cost = 20;
      auto shard = session.load(path, lo);
      Run r;
      if (!shard->expert_tier() || shard->expert_tier()->n_slots() != 2) {
        fail(mpi, what + ": the shard has no tier of two slots");
        return r;
      }
      auto ep = session.experts(nullptr, combine);
      ContextOptions co;
      co.routing = spec;
      co.experts = std::make_shared<const ExpertBackend>(
          [ep, n, &r, hide](kernels::ThreadPool& pool, bool int_acts) {
            return std::unique_ptr<ExpertExecutor>(
                new RecordingExecutor(ep->make(pool, int_acts), n, r.log, r.gathers, hide));
          });
      r.logits = workload(*shard, co, forced);
      for (uint64_t m : mpi.allgather(shard->expert_tier()->stats().misses)) r.misses += m;
      return r;
    };
    const Run seen = run_ep(false);
    // With the residency hidden from the routing (as before it was gathered): only cover's
    // reads are compared (below), so only cover runs it.
    const Run hidden = spec == "cover" ? run_ep(true) : Run{};
    // One process, every expert loaded, routed with the residency the EP run gathered.
    ContextOptions co;
    co.routing = spec;
    co.experts =
        std::make_shared<const ExpertBackend>([&seen](kernels::ThreadPool& pool, bool int_acts) {
          return std::unique_ptr<ExpertExecutor>(new ReplayingExecutor(pool, int_acts, seen.log));
        });
    const auto one = workload(*whole, co, forced);
    size_t partial = 0;  // routings given a mask with experts both in memory and not
    for (const Residency& r : seen.log) {
      const size_t in = size_t(std::count(r.mask.begin(), r.mask.end(), uint8_t(1)));
      if (r.present && in > 0 && in < r.mask.size() && r.cost.size() == r.mask.size()) ++partial;
    }
    if (seen.log.empty() || partial == 0) {
      fail(mpi, what + ": the routing was never given a residency with some experts missing (" +
                    std::to_string(seen.log.size()) + " routings)");
    }
    // The combines carry every later layer's residency: only the first step's first layer
    // needs a message of its own.
    if (seen.gathers != 1) {
      fail(mpi, what + ": the residency was gathered alone " + std::to_string(seen.gathers) +
                    " times (expected once, before the first layer of the first step)");
    }
    if (!same_logits(seen.logits, one, combine)) {
      fail(mpi, what + ": the EP logits differ from one process routed with the same residency");
    }
    Fnv1a h;
    for (const auto& row : seen.logits) h.add(row.data(), row.size() * sizeof(float));
    for (uint64_t d : mpi.allgather(h.value())) {
      if (d != h.value()) fail(mpi, what + ": the ranks' logits differ");
    }
    if (spec == "topk") {
      ContextOptions plain;
      plain.routing = spec;
      std::vector<int32_t> again = forced;
      if (!same_logits(seen.logits, workload(*whole, plain, again), combine)) {
        fail(mpi, what + ": the EP logits differ from one process with every expert loaded");
      }
    } else if (spec == "cover" && !(seen.misses < hidden.misses)) {
      // cover weighs each missing expert by its cost (20): it must read fewer. lynx only
      // counts resident experts as loaded; on these few steps it reads about as many either
      // way (docs/offload.md), so only its routing is checked (against the one process).
      fail(mpi, what + ": " + std::to_string(seen.misses) + " experts read with the residency " +
                    "seen, " + std::to_string(hidden.misses) + " with it hidden (expected fewer)");
    }
    if (mpi.rank() == 0) {
      const std::string hid =
          spec == "cover" ? ", hidden " + std::to_string(hidden.misses) : std::string();
      std::printf("ok tier %-34s R=%d routings=%zu (partial residency %zu) misses %llu%s\n",
                  (path.substr(path.rfind('/') + 1) + " " + what).c_str(), mpi.size(),
                  seen.log.size(), partial, (unsigned long long)seen.misses, hid.c_str());
    }
  }
}

// Rank 1 dies inside the second step (at the router of layer 1); the others wait in that
// layer's combine until the MPI runtime ends the job.
void die_mid_step(Session& session, const std::string& path) {
  auto shard = session.load(path, {});
  ContextOptions co;
  co.experts = session.experts();
  co.n_threads = 1;
  Context ctx(*shard, co);
  int steps = 0;
  const int me = session.mpi().rank();
  ctx.set_router_override([&](int layer, std::span<const BatchToken>, float*) {
    if (me == 1 && steps == 1 && layer == 1) std::raise(SIGKILL);
  });
  const int32_t s = ctx.new_sequence();
  for (int p = 0; p < 4; ++p, ++steps) {
    const BatchToken t{1, s, p, kTokenDecode, true};
    ctx.eval(std::span(&t, 1));
  }
  fail(session.mpi(), "rank 1 did not die, or the job went on without it");
}

// Rank 1 stops (SIGSTOP) inside the second step; rank 0, with a 2 s deadline, must give up
// in that layer's combine with a PeerFailure naming the deadline, after the failure hook ran
// once with the same reason; a later step fails at once with the same reason, without a
// second call of the hook. Rank 0 then prints "ok hang" and ends the job (MPI_Abort, which
// also ends the stopped rank): the test expects a non-zero status and that line.
void hang_mid_step(Session& session, const std::string& path) {
  auto shard = session.load(path, {});
  Mpi& mpi = session.mpi();
  mpi.set_timeout(2);
  int hook_calls = 0;
  std::string hook_why;
  mpi.set_failure_hook([&](const std::string& why) {
    ++hook_calls;
    hook_why = why;
  });
  ContextOptions co;
  co.experts = session.experts();
  co.n_threads = 1;
  Context ctx(*shard, co);
  int steps = 0;
  ctx.set_router_override([&](int layer, std::span<const BatchToken>, float*) {
    if (mpi.rank() == 1 && steps == 1 && layer == 1) std::raise(SIGSTOP);
  });
  const int32_t s = ctx.new_sequence();
  auto step = [&] {
    const BatchToken t{1, s, steps, kTokenDecode, true};
    ctx.eval(std::span(&t, 1));
    ++steps;
  };
  step();
  std::string first;
  try {
    step();
    fail(mpi, "the step with a stopped rank succeeded");
  } catch (const PeerFailure& e) {
    first = e.what();
  }
  if (first.find("--ep-timeout") == std::string::npos) {
    fail(mpi, "the failure does not name the deadline: " + first);
  }
  if (hook_calls != 1 || hook_why != first) {
    fail(mpi,
         "the failure hook ran " + std::to_string(hook_calls) + " times with '" + hook_why + "'");
  }
  try {
    step();
    fail(mpi, "a step after the failure succeeded");
  } catch (const PeerFailure& e) {
    if (e.what() != first) fail(mpi, std::string("a later step failed otherwise: ") + e.what());
  }
  if (hook_calls != 1) fail(mpi, "the failure hook ran again");
  if (g_failures == 0) std::fprintf(stderr, "ok hang: %s\n", first.c_str());
  mpi.abort(1);
}

}  // namespace
}  // namespace lynx::dist

int main(int argc, char** argv) {
  using namespace lynx::dist;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s equal|handshake|tier|tier-allreduce|die|hang MODEL...\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  int failures = 0;
  {
    Session session({});
    try {
      for (int i = 2; i < argc; ++i) {
        if (mode == "equal") check_equal(session, argv[i]);
        if (mode == "handshake") {
          check_handshake(session, argv[i]);
          check_placement(session.mpi());
        }
        if (mode == "tier") check_tier(session, argv[i], Combine::kGather);
        if (mode == "tier-allreduce") check_tier(session, argv[i], Combine::kAllReduce);
        if (mode == "die") die_mid_step(session, argv[i]);
        if (mode == "hang") hang_mid_step(session, argv[i]);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FAIL (rank %d): %s\n", session.mpi().rank(), e.what());
      session.mpi().abort(1);
    }
    // Every rank's failures count: the job fails when any rank saw one.
    for (int f : session.mpi().allgather(g_failures)) failures += f;
  }
  return failures == 0 ? 0 : 1;
}
