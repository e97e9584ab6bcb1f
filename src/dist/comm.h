// The MPI library for this process, and the few collectives expert parallelism needs. MPI's
// default error handler stays in force: when a peer process dies, OpenMPI's runtime ends the
// whole job (mpirun exits non-zero) instead of leaving a collective waiting for ever.
#pragma once
#include <mpi.h>

#include <cstdint>
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
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

// "host:pid" of this process, for messages.
std::string process_name();

}  // namespace lynx::dist
