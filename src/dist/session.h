// An expert-parallel run as the command line drives it: MPI for the process, the placement,
// this rank's shard of the model behind the start-up handshake, executors for its contexts,
// and the per-rank statistics gathered from every rank.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "dist/mpi_expert_executor.h"
#include "dist/placement.h"
#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx::dist {

struct SessionOptions {
  std::string placement_file;  // empty: contiguous
  Combine combine = Combine::kAllReduce;
  std::string version;  // this build, compared in the handshake
};

class Session {
 public:
  explicit Session(SessionOptions opts);

  const Mpi& mpi() const { return mpi_; }
  Mpi& mpi() { return mpi_; }
  const Placement& placement() const { return placement_; }

  // Loads this rank's shard of `path` (opts.keep_expert is set here) and runs the handshake:
  // when any rank fails to load or differs in build, model or placement, every rank throws
  // the same CollectiveError.
  std::unique_ptr<Model> load(const std::string& path, LoadOptions opts);

  // ContextOptions::experts for contexts on the model load() returned; the executor it
  // makes is also stored in *made when given (for take_stats / gather). `combine`: the
  // options' unless given.
  std::shared_ptr<const ExpertBackend> experts(MpiExpertExecutor** made = nullptr);
  std::shared_ptr<const ExpertBackend> experts(MpiExpertExecutor** made, Combine combine);

  // Every rank's statistics since the last call for `ex` (collective: every rank calls it
  // at the same point, with its executor of the same context).
  std::vector<RankStats> gather(MpiExpertExecutor& ex) const;

  // Resident memory of every rank now (collective), bytes.
  std::vector<uint64_t> resident_bytes() const;

 private:
  Mpi mpi_;
  SessionOptions opts_;
  Placement placement_;
  const Model* model_ = nullptr;
};

}  // namespace lynx::dist
