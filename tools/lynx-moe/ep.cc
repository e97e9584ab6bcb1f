#include "ep.h"

#include <algorithm>
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
  cmd->add_option("--ep-timeout", f->timeout_s,
                  "Seconds a rank waits in a step's collectives before it declares a peer "
                  "hung or dead and the job ends (serve answers 503 first); default 30")
      ->check(CLI::Range(0.1, 86400.0))
      ->needs(ep);
  add_tier_flags(cmd, &f->tier);
}

std::string ep_metrics_text(const std::vector<RankShare>& ranks) {
  if (ranks.empty()) return {};
  std::string o;
  auto num = [](double v) {
    char b[40];
    std::snprintf(b, sizeof b, "%.17g", v);
    return std::string(b);
  };
  auto metric = [&](const char* name, const char* type, const char* help,
                    double (*get)(const RankShare&)) {
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (size_t r = 0; r < ranks.size(); ++r) {
      o += std::string(name) + "{rank=\"" + std::to_string(r) + "\"} " + num(get(ranks[r])) + "\n";
    }
  };
  metric("lynx_ep_rank_routed_tokens_total", "counter",
         "Token-expert assignments routed to the rank's experts, summed over MoE layers.",
         [](const RankShare& s) { return double(s.tokens); });
  metric("lynx_ep_rank_local_experts_total", "counter",
         "Distinct local experts the rank computed, summed over MoE layers and steps.",
         [](const RankShare& s) { return double(s.experts); });
  metric("lynx_ep_rank_expert_bytes_total", "counter", "Expert weight bytes the rank streamed.",
         [](const RankShare& s) { return double(s.bytes); });
  metric("lynx_ep_rank_received_bytes_total", "counter",
         "Bytes the rank received in the combine collectives.",
         [](const RankShare& s) { return double(s.comm_bytes); });
  metric("lynx_ep_rank_compute_seconds_total", "counter",
         "Seconds the rank spent computing its experts (and mixing).",
         [](const RankShare& s) { return s.compute_s; });
  metric("lynx_ep_rank_comm_seconds_total", "counter",
         "Seconds the rank spent in the combine collectives (includes waiting for the slowest "
         "rank).",
         [](const RankShare& s) { return s.comm_s; });
  double sum = 0, busiest = 0;
  for (const RankShare& s : ranks) {
    sum += double(s.tokens);
    busiest = std::max(busiest, double(s.tokens));
  }
  const double share = sum > 0 ? busiest / sum : 0;
  o += "# HELP lynx_ep_ranks Ranks of the expert-parallel job.\n# TYPE lynx_ep_ranks gauge\n";
  o += "lynx_ep_ranks " + std::to_string(ranks.size()) + "\n";
  o += "# HELP lynx_ep_busiest_rank_share The busiest rank's share of the routed assignments "
       "since the start (1/ranks is balanced).\n# TYPE lynx_ep_busiest_rank_share gauge\n";
  o += "lynx_ep_busiest_rank_share " + num(share) + "\n";
  o += "# HELP lynx_ep_imbalance Busiest rank's routed assignments over the mean since the "
       "start (1 is balanced).\n# TYPE lynx_ep_imbalance gauge\n";
  o += "lynx_ep_imbalance " + num(share * double(ranks.size())) + "\n";
  return o;
}

#ifdef LYNX_HAVE_MPI

namespace {
std::vector<RankShare> shares(const std::vector<dist::RankStats>& all) {
  std::vector<RankShare> out;
  for (const dist::RankStats& s : all) {
    out.push_back({s.tokens, s.experts, s.bytes, s.comm_bytes, s.compute_s, s.comm_s});
  }
  return out;
}
}  // namespace

struct ExpertParallel::Impl {
  TierFlags tier;
  std::unique_ptr<dist::Session> session;
  std::vector<std::unique_ptr<dist::MpiExpertExecutor*>> made;  // per configured context
};

ExpertParallel::ExpertParallel(const EpFlags& f) : impl_(std::make_unique<Impl>()) {
  impl_->tier = f.tier;
  if (!f.on) return;
  dist::SessionOptions o;
  o.placement_file = f.placement;
  o.combine = f.combine == "gather" ? dist::Combine::kGather : dist::Combine::kAllReduce;
  o.version = std::string("lynx-moe 0.1.0 (") + LYNX_GIT_COMMIT + ")";
  impl_->session = std::make_unique<dist::Session>(std::move(o));
  impl_->session->mpi().set_timeout(f.timeout_s);
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
  if (!on()) return cli::load_model(path, repack, repack_float, impl_->tier);
  LoadOptions lo;
  lo.repack = repack;
  lo.repack_float = repack_float;
  apply_tier_flags(impl_->tier, lo);  // each rank's tier holds slots for its shard only
  auto model = impl_->session->load(path, lo);
  if (model && model->expert_tier()) {
    std::fprintf(stderr, "rank %d: %s\n", rank(), model->expert_tier_summary().c_str());
  }
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
  co.experts = impl_->session->experts(impl_->made.back().get());
  return int(impl_->made.size()) - 1;
}

std::vector<RankShare> ExpertParallel::gather(int id) {
  if (!on() || id < 0 || size_t(id) >= impl_->made.size() || !*impl_->made[size_t(id)]) {
    return {};
  }
  return shares(impl_->session->gather(**impl_->made[size_t(id)]));
}

std::vector<RankShare> ExpertParallel::totals(int id) const {
  if (!on() || id < 0 || size_t(id) >= impl_->made.size() || !*impl_->made[size_t(id)]) {
    return {};
  }
  return shares((*impl_->made[size_t(id)])->totals());
}

void ExpertParallel::set_failure_hook(std::function<void(const std::string&)> hook) {
  if (on()) impl_->session->mpi().set_failure_hook(std::move(hook));
}
void ExpertParallel::interrupt(const std::string& why) {
  if (on()) impl_->session->mpi().interrupt(why);
}
void ExpertParallel::abort(int code) {
  std::fflush(nullptr);
  if (on()) impl_->session->mpi().abort(code);
  std::_Exit(code);
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

struct ExpertParallel::Impl {
  TierFlags tier;
};

ExpertParallel::ExpertParallel(const EpFlags& f) : impl_(std::make_unique<Impl>()) {
  impl_->tier = f.tier;
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
  return cli::load_model(path, repack, repack_float, impl_->tier);
}
int ExpertParallel::configure(ContextOptions&) {
  return -1;
}
std::vector<RankShare> ExpertParallel::gather(int) {
  return {};
}
std::vector<RankShare> ExpertParallel::totals(int) const {
  return {};
}
void ExpertParallel::set_failure_hook(std::function<void(const std::string&)>) {}
void ExpertParallel::interrupt(const std::string&) {}
void ExpertParallel::abort(int code) {
  std::fflush(nullptr);
  std::_Exit(code);
}
void ExpertParallel::send_step(const std::string&, std::span<const BatchToken>) {}
void ExpertParallel::send_stop() {}
void ExpertParallel::follow(Context&) {}

#endif

ExpertParallel::~ExpertParallel() = default;

}  // namespace lynx::cli
