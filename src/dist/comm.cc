#include "dist/comm.h"

#include <unistd.h>

namespace lynx::dist {

Mpi::Mpi() {
  int init = 0;
  MPI_Initialized(&init);
  if (init) throw Error("MPI is already initialized in this process");
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  // A communicator of our own, so library traffic never matches another component's.
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
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
