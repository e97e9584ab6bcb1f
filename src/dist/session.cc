#include "dist/session.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "dist/handshake.h"
#include "lynx/gguf.h"
#include "model/memory_budget.h"
#include "util/file.h"

namespace lynx::dist {
namespace {

std::string read_file(const std::string& path) {
  return util::read_file_bounded(path, 256 * util::kMiB, "placement file");
}

}  // namespace

Session::Session(SessionOptions opts) : opts_(std::move(opts)) {}

std::unique_ptr<Model> Session::load(const std::string& path, LoadOptions opts) {
  Identity id;
  id.version = opts_.version;
  std::unique_ptr<Model> model;
  try {
    // The shape first (header only), so that the filter knows the placement while loading.
    const gguf::File f = gguf::File::open(path);
    const std::string arch = f.get_string("general.architecture");
    const int n_layer = int(f.get_int(arch + ".block_count"));
    const int n_expert = int(f.get_int(arch + ".expert_count", 0));
    if (n_expert <= 0) {
      throw Error(path + " has no experts: expert parallelism needs an MoE model");
    }
    placement_ = opts_.placement_file.empty()
                     ? default_placement(mpi_.size(), n_expert, n_layer)
                     : read_placement(read_file(opts_.placement_file), opts_.placement_file,
                                      mpi_.size(), n_expert, n_layer);
    id.placement_hash = placement_hash(placement_);
    model_identity(path, f.data_offset(), id);
    const int me = mpi_.rank();
    opts.keep_expert = [this, me](int il, int e) { return placement_.rank_of(il, e) == me; };
    // The ranks on one machine share its memory: each one's expert tier (docs/offload.md)
    // sizes itself from an equal part of what is there, unless told a budget.
    if (opts.mem_budget == 0 && opts.expert_cache < 0) {
      const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
      const int n = local ? std::max(1, std::atoi(local)) : 1;
      if (n > 1) opts.mem_budget = detect_memory_budget().bytes / size_t(n);
    }
    model = Model::load(path, opts);
  } catch (const std::exception& e) {
    id.error = e.what();
  }
  handshake(mpi_, id);
  model_ = model.get();
  return model;
}

std::shared_ptr<const ExpertBackend> Session::experts(MpiExpertExecutor** made) {
  return experts(made, opts_.combine);
}

std::shared_ptr<const ExpertBackend> Session::experts(MpiExpertExecutor** made, Combine combine) {
  if (!model_) throw Error("expert parallel: no model loaded");
  return std::make_shared<const ExpertBackend>(
      [this, made, combine](kernels::ThreadPool& pool, bool int_acts) {
        auto ex =
            std::make_unique<MpiExpertExecutor>(mpi_, *model_, placement_, combine, pool, int_acts);
        if (made) *made = ex.get();
        return std::unique_ptr<ExpertExecutor>(std::move(ex));
      });
}

std::vector<RankStats> Session::gather(MpiExpertExecutor& ex) const {
  return mpi_.allgather(ex.take_stats());
}

std::vector<uint64_t> Session::resident_bytes() const {
  uint64_t pages_total = 0, pages_resident = 0;
  std::ifstream statm("/proc/self/statm");
  statm >> pages_total >> pages_resident;
  return mpi_.allgather(pages_resident * uint64_t(sysconf(_SC_PAGESIZE)));
}

}  // namespace lynx::dist
