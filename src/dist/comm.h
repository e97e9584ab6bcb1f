// The MPI library for this process, and the few collectives expert parallelism needs.
//
// Failures of peers (docs/distributed.md, "Failures"): the collectives of a step are
// non-blocking and waited for by polling (wait()), under a deadline (set_timeout) and an
// interrupt (interrupt(), from another thread), so that a rank that hangs, or a job that the
// MPI runtime is ending, never leaves this rank blocked: the wait throws PeerFailure, after
// calling the failure hook. The communicator returns errors (MPI_ERRORS_RETURN) instead of
// aborting, so a transport that reports a dead peer becomes a PeerFailure too.
#pragma once
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "lynx/error.h"

namespace lynx::dist {

// An error every rank raises at the same point of the same collective (a failed handshake,
// diverged routing): each rank can report it and leave MPI cleanly, no abort needed.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// This rank stopped waiting for its peers: a collective passed its deadline (a peer hangs or
// died), the transport reported an error, or interrupt() was called. Only this rank knows:
// the job must end (MPI_Abort), after the caller has told its clients.
class PeerFailure : public Error {
 public:
  using Error::Error;
};

class Mpi {
 public:
  Mpi();   // MPI_Init_thread (serialized: one thread at a time talks to MPI)
  ~Mpi();  // MPI_Finalize, unless abort() ran
  Mpi(const Mpi&) = delete;
  Mpi& operator=(const Mpi&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }

  // Ends every rank of the job with `code` (MPI_Abort): for an error only this rank saw.
  [[noreturn]] void abort(int code);

  // Deadline of each wait() that asks for one, seconds (0: none; the default).
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }
  // Called once, with the reason, by the first wait() that fails (on the thread that waits),
  // before it throws: rank 0 of `serve` answers 503 from there. Set it before the steps run.
  void set_failure_hook(std::function<void(const std::string&)> hook) { hook_ = std::move(hook); }
  // Makes the wait() in progress, and every later one, throw PeerFailure(why) (any thread).
  void interrupt(const std::string& why);
  bool interrupted() const { return interrupted_.load(); }

  // Completes `req` (a non-blocking collective of `what`) by polling MPI_Test. With
  // `deadline`, it gives up after timeout() seconds. Waiting long, it sleeps between polls
  // instead of spinning (an idle follower of `serve` waits here between requests). Throws
  // PeerFailure as described above.
  void wait(MPI_Request& req, const char* what, bool deadline = true) const;

  // Every rank's `v`, in rank order (v must be trivially copyable).
  template <typename T>
  std::vector<T> allgather(const T& v) const {
    static_assert(std::is_trivially_copyable_v<T>);
    std::vector<T> all(static_cast<size_t>(size_));
    check(MPI_Allgather(&v, int(sizeof(T)), MPI_BYTE, all.data(), int(sizeof(T)), MPI_BYTE, comm_),
          "MPI_Allgather");
    return all;
  }

  // Throws lynx::Error naming `what` when an MPI call did not succeed (only reachable with
  // an error handler that returns).
  static void check(int rc, const char* what);

 private:
  [[noreturn]] void fail(const std::string& why) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 0;
  std::function<void(const std::string&)> hook_;
  mutable std::atomic<bool> interrupted_{false};
  mutable std::mutex mu_;  // guards why_, failed_
  mutable std::string why_;
  mutable bool failed_ = false;
};

// "host:pid" of this process, for messages.
std::string process_name();

}  // namespace lynx::dist
