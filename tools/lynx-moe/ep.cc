#include "ep.h"

#include <cstdio>
#include <cstdlib>

#ifdef LYNX_HAVE_MPI
#include "dist/session.h"
#include "dist/step_relay.h"
#endif

namespace lynx::cli {

void add_ep_flags(CLI::App* cmd, EpFlags* f) {
  auto* ep = cmd->add_flag("--expert-parallel", f->on,
                           "Spread each MoE layer's experts over the ranks of an MPI job (run "
                           "under mpirun -np R; docs/distributed.md)");
  cmd->add_option("--placement", f->placement,
                  "Expert placement JSON (from `lynx-moe place`; default: contiguous)")
      ->needs(ep);
  cmd->add_option("--ep-combine", f->combine,
                  "How the ranks combine expert outputs: allreduce (partial sums, least "
                  "traffic) or gather (rows, bit-identical to one process)")
      ->check(CLI::IsMember({"allreduce", "gather"}))
      ->needs(ep);
}

#ifdef LYNX_HAVE_MPI

struct ExpertParallel::Impl {
  std::unique_ptr<dist::Session> session;
  std::vector<std::unique_ptr<dist::MpiExpertExecutor*>> made;  // per configured context
};

ExpertParallel::ExpertParallel(const EpFlags& f) : impl_(std::make_unique<Impl>()) {
  if (!f.on) return;
  dist::SessionOptions o;
  o.placement_file = f.placement;
  o.combine = f.combine == "gather" ? dist::Combine::kGather : dist::Combine::kAllReduce;
  o.version = std::string("lynx-moe 0.1.0 (") + LYNX_GIT_COMMIT + ")";
  impl_->session = std::make_unique<dist::Session>(std::move(o));
  // Every rank computes the same results: only rank 0 prints them.
  if (rank() != 0 && !std::freopen("/dev/null", "w", stdout)) {
    throw Error("cannot silence stdout on rank " + std::to_string(rank()));
  }
}

void ExpertParallel::run(const EpFlags& flags, const std::function<void(ExpertParallel&)>& body) {
  if (!flags.on) {
    ExpertParallel off(flags);
    body(off);
    return;
  }
  ExpertParallel ep(flags);
  try {
    body(ep);
  } catch (const dist::CollectiveError& e) {
    std::fprintf(stderr, "error (rank %d of %d): %s\n", ep.rank(), ep.ranks(), e.what());
    std::fflush(stdout);
    ep.impl_.reset();  // MPI_Finalize: every rank is here
    std::exit(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error (rank %d of %d): %s\n", ep.rank(), ep.ranks(), e.what());
    std::fflush(stdout);
    std::fflush(stderr);
    ep.impl_->session->mpi().abort(1);
  }
}

bool ExpertParallel::on() const {
  return impl_->session != nullptr;
}
int ExpertParallel::rank() const {
  return on() ? impl_->session->mpi().rank() : 0;
}
int ExpertParallel::ranks() const {
  return on() ? impl_->session->mpi().size() : 1;
}

std::unique_ptr<Model> ExpertParallel::load_model(const std::string& path, bool repack,
                                                  bool repack_float) {
  if (!on()) return cli::load_model(path, repack, repack_float);
  LoadOptions lo;
  lo.repack = repack;
  lo.repack_float = repack_float;
  auto model = impl_->session->load(path, lo);
  const std::vector<uint64_t> rss = impl_->session->resident_bytes();
  std::string line;
  for (size_t r = 0; r < rss.size(); ++r) {
    line += (r ? ", " : "") + std::to_string(rss[r] >> 20) + " MiB";
  }
  if (rank() == 0) {
    std::fprintf(stderr, "expert parallel: %d ranks; resident after load: %s\n", ranks(),
                 line.c_str());
  }
  return model;
}

int ExpertParallel::configure(ContextOptions& co) {
  if (!on()) return -1;
  impl_->made.push_back(std::make_unique<dist::MpiExpertExecutor*>(nullptr));
  co.make_experts = impl_->session->executor_factory(impl_->made.back().get());
  return int(impl_->made.size()) - 1;
}

std::vector<RankShare> ExpertParallel::gather(int id) {
  if (!on() || id < 0 || size_t(id) >= impl_->made.size() || !*impl_->made[size_t(id)]) {
    return {};
  }
  std::vector<RankShare> out;
  for (const dist::RankStats& s : impl_->session->gather(**impl_->made[size_t(id)])) {
    out.push_back({s.tokens, s.experts, s.bytes, s.comm_bytes, s.compute_s, s.comm_s});
  }
  return out;
}

void ExpertParallel::send_step(const std::string& routing, std::span<const BatchToken> batch) {
  if (on()) dist::StepRelay(impl_->session->mpi()).send(routing, batch);
}
void ExpertParallel::send_stop() {
  if (on()) dist::StepRelay(impl_->session->mpi()).send_stop();
}
void ExpertParallel::follow(Context& ctx) {
  if (on()) dist::StepRelay(impl_->session->mpi()).follow(ctx);
}

#else  // a build without MPI

struct ExpertParallel::Impl {};

ExpertParallel::ExpertParallel(const EpFlags& f) : impl_(std::make_unique<Impl>()) {
  if (f.on) {
    throw UsageError(
        "--expert-parallel: this build has no MPI support (install OpenMPI with "
        "scripts/install-deps.sh and reconfigure)");
  }
}
void ExpertParallel::run(const EpFlags& flags, const std::function<void(ExpertParallel&)>& body) {
  ExpertParallel ep(flags);
  body(ep);
}
bool ExpertParallel::on() const {
  return false;
}
int ExpertParallel::rank() const {
  return 0;
}
int ExpertParallel::ranks() const {
  return 1;
}
std::unique_ptr<Model> ExpertParallel::load_model(const std::string& path, bool repack,
                                                  bool repack_float) {
  return cli::load_model(path, repack, repack_float);
}
int ExpertParallel::configure(ContextOptions&) {
  return -1;
}
std::vector<RankShare> ExpertParallel::gather(int) {
  return {};
}
void ExpertParallel::send_step(const std::string&, std::span<const BatchToken>) {}
void ExpertParallel::send_stop() {}
void ExpertParallel::follow(Context&) {}

#endif

ExpertParallel::~ExpertParallel() = default;

}  // namespace lynx::cli
