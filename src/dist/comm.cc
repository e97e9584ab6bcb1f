#include "dist/comm.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "util/clock.h"

namespace lynx::dist {

Mpi::Mpi() {
  int init = 0;
  MPI_Initialized(&init);
  if (init) throw Error("MPI is already initialized in this process");
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  // A communicator of our own, so library traffic never matches another component's.
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  // Errors come back as return codes (then exceptions) rather than aborting the job here:
  // rank 0 of `serve` must outlive a dead peer long enough to answer its clients.
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Mpi::~Mpi() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  MPI_Finalize();
}

void Mpi::abort(int code) {
  MPI_Abort(comm_ != MPI_COMM_NULL ? comm_ : MPI_COMM_WORLD, code);
  _exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

void Mpi::interrupt(const std::string& why) {
  {
    std::lock_guard lk(mu_);
    if (why_.empty()) why_ = why;
  }
  interrupted_ = true;
}

void Mpi::fail(const std::string& why) const {
  bool first = false;
  {
    std::lock_guard lk(mu_);
    first = !failed_;
    failed_ = true;
    // Every later wait fails at once: a step after the failure must not wait out the
    // deadline again.
    if (why_.empty()) why_ = why;
  }
  interrupted_ = true;
  if (first && hook_) hook_(why);
  throw PeerFailure(why);
}

void Mpi::wait(MPI_Request& req, const char* what, bool deadline) const {
  const double t0 = util::now_seconds();
  for (uint64_t polls = 0;; ++polls) {
    int done = 0;
    const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      fail("expert parallel: rank " + std::to_string(rank_) + ": " + what +
           " failed: " + std::string(msg, size_t(len)) + " (a peer rank is gone)");
    }
    if (done) return;
    if (interrupted_) {
      std::string why;
      {
        std::lock_guard lk(mu_);
        why = why_.empty() ? std::string("expert parallel: interrupted") : why_;
      }
      fail(why);
    }
    const double waited = util::now_seconds() - t0;
    if (deadline && timeout_s_ > 0 && waited > timeout_s_) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout_s_);
      fail("expert parallel: rank " + std::to_string(rank_) + " waited more than " + secs +
           " s (--ep-timeout) in " + what + ": a peer rank hangs or died; the job must end");
    }
    // Spin for the first 50 us: a step's collectives take microseconds when the ranks arrive
    // together, and a non-blocking one needs a few MPI_Test calls to progress (yielding
    // there cost milliseconds per collective on the loaded machine, even at R = 1). Then
    // spin yielding the core to whoever wants it up to 1 ms; past that the peers are busy or
    // idle: sleep between polls, shortly first (a slow layer), then 1 ms (an idle server: a
    // follower waits here for rank 0's next step).
    if (waited < 50e-6) {
      continue;
    } else if (waited < 1e-3) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(waited < 0.1 ? 50 : 1000));
    }
  }
}

void Mpi::check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string(what) + " failed: " + std::string(msg, size_t(len)));
}

std::string process_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

}  // namespace lynx::dist
