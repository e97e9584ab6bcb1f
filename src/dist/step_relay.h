// `serve --expert-parallel`: rank 0 runs the HTTP server and the scheduler; every other rank
// replays rank 0's steps on its own context, so that all ranks run each forward pass (and
// meet in each MoE layer's combine) on the same batch. Rank 0 sends each validated batch
// with the context's routing spec before running it (ContextOptions::before_eval); the
// followers map rank 0's sequence ids to their own (a position 0 starts a sequence afresh, a
// position below the sequence's length truncates it), and stop when rank 0 says so. Every
// wait is Mpi::wait (deadline, interrupt: PeerFailure), except a follower's wait for the next
// step, which has no deadline (an idle server sends nothing).
#pragma once
#include <span>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "lynx/context.h"

namespace lynx::dist {

class StepRelay {
 public:
  explicit StepRelay(const Mpi& mpi) : mpi_(mpi) {}

  // Rank 0: one step for the other ranks.
  void send(const std::string& routing, std::span<const BatchToken> batch);
  // Rank 0: the server stopped; the other ranks return from follow().
  void send_stop();
  // Other ranks: replays rank 0's steps on `ctx` until send_stop. A step that fails with a
  // NonFiniteError failed on rank 0 too (same inputs, same arithmetic): the follower goes on
  // with the next step; any other error propagates (the ranks diverged: end the job).
  void follow(Context& ctx);

 private:
  // MPI_Ibcast from rank 0, waited for under the deadline when `deadline`.
  void bcast(void* data, size_t bytes, bool deadline);

  const Mpi& mpi_;
};

}  // namespace lynx::dist
