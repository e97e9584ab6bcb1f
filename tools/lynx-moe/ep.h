// --expert-parallel for the commands that run the model (generate, bench, eval, logits):
// under `mpirun -np R`, each rank loads its shard of the experts and the ranks split every
// MoE layer's expert step (src/dist, docs/distributed.md). Without the flag, or in a build
// without MPI, the commands run as a single process and this is a thin pass-through.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx::cli {

struct EpFlags {
  bool on = false;
  std::string placement;              // JSON from `lynx-moe place`; empty: contiguous
  std::string combine = "allreduce";  // allreduce | gather
  double timeout_s = 30;              // --ep-timeout: deadline of a step's collectives
  TierFlags tier;                     // --mem-budget, --expert-cache (add_ep_flags adds them)
};
void add_ep_flags(CLI::App* cmd, EpFlags* flags);

// One rank's share of some steps (dist::RankStats without MPI types).
struct RankShare {
  int64_t tokens = 0, experts = 0;
  uint64_t bytes = 0, comm_bytes = 0;
  double compute_s = 0, comm_s = 0;
};

// The per-rank lines of serve's /metrics (Prometheus text, label `rank`): each rank's totals
// and the busiest rank's share of the routed tokens. Empty when `ranks` is.
std::string ep_metrics_text(const std::vector<RankShare>& ranks);

class ExpertParallel {
 public:
  ~ExpertParallel();
  // Runs `body` with the flags' expert parallelism. When it is on, stdout is kept only on rank
  // 0, and an error ends every rank with a non-zero status: one that every rank saw (a failed
  // handshake) each rank reports and leaves MPI cleanly, one that only this rank saw ends the
  // job through MPI_Abort.
  static void run(const EpFlags& flags, const std::function<void(ExpertParallel&)>& body);

  bool on() const;
  int rank() const;   // 0 when off
  int ranks() const;  // 1 when off
  // load_model (common.h), or this rank's shard behind the handshake.
  std::unique_ptr<Model> load_model(const std::string& path, bool repack = true,
                                    bool repack_float = true);
  // Points a context's expert step at the ranks; returns the context's id for gather (-1 when
  // off). Call after load_model.
  int configure(ContextOptions& co);
  // Every rank's share of the context's steps since the last call (collective).
  std::vector<RankShare> gather(int id);
  // Every rank's totals since the start, as the context's last MoE layer received them
  // (not collective; any thread). Empty when off or before the first step.
  std::vector<RankShare> totals(int id) const;

  // Failures (dist/comm.h): `hook` runs once, on the thread whose wait failed, before that
  // wait throws dist::PeerFailure (a lynx::Error). interrupt() makes the wait in progress and
  // every later one fail with `why` (any thread). abort() ends every rank (MPI_Abort).
  void set_failure_hook(std::function<void(const std::string&)> hook);
  void interrupt(const std::string& why);
  [[noreturn]] void abort(int code);

  // serve (dist/step_relay.h): rank 0 sends each step of its engine's context to the other
  // ranks and, once the server stopped, tells them to stop; the other ranks follow.
  void send_step(const std::string& routing, std::span<const BatchToken> batch);
  void send_stop();
  void follow(Context& ctx);

 private:
  explicit ExpertParallel(const EpFlags& flags);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lynx::cli
