#include "dist/step_relay.h"

#include <map>
#include <type_traits>

namespace lynx::dist {
namespace {

static_assert(std::is_trivially_copyable_v<BatchToken>);

// Sent first: the step's token count (-1: stop) and the routing spec's length.
struct Header {
  int64_t n_tokens = 0;
  int64_t routing_len = 0;
};

}  // namespace

void StepRelay::bcast(void* data, size_t bytes, bool deadline) {
  MPI_Request req;
  Mpi::check(MPI_Ibcast(data, int(bytes), MPI_BYTE, 0, mpi_.comm(), &req), "MPI_Ibcast");
  mpi_.wait(req, "the step relay (MPI_Ibcast)", deadline);
}

void StepRelay::send(const std::string& routing, std::span<const BatchToken> batch) {
  Header h{int64_t(batch.size()), int64_t(routing.size())};
  bcast(&h, sizeof h, true);
  std::string r = routing;
  bcast(r.data(), r.size(), true);
  std::vector<BatchToken> b(batch.begin(), batch.end());
  bcast(b.data(), b.size() * sizeof(BatchToken), true);
}

void StepRelay::send_stop() {
  Header h{-1, 0};
  bcast(&h, sizeof h, true);
}

void StepRelay::follow(Context& ctx) {
  std::map<int32_t, int32_t> local;  // rank 0's sequence id -> this context's
  std::vector<BatchToken> batch;
  std::string routing;
  for (;;) {
    // Between requests the server is idle for as long as it likes: no deadline here. Within a
    // step there is one (rank 0 hanging mid-step ends the job from this side).
    Header h;
    bcast(&h, sizeof h, false);
    if (h.n_tokens < 0) return;
    routing.resize(size_t(h.routing_len));
    bcast(routing.data(), routing.size(), true);
    batch.resize(size_t(h.n_tokens));
    bcast(batch.data(), batch.size() * sizeof(BatchToken), true);
    if (routing != ctx.routing()) ctx.set_routing(routing);
    {
      // The first token of each sequence in the step says where the sequence stands.
      std::map<int32_t, bool> seen;
      for (BatchToken& t : batch) {
        if (!seen.emplace(t.seq, true).second) {
          t.seq = local.at(t.seq);
          continue;
        }
        auto it = local.find(t.seq);
        if (t.pos == 0 || it == local.end()) {
          if (it != local.end()) ctx.free_sequence(it->second);
          it = local.insert_or_assign(t.seq, ctx.new_sequence()).first;
        } else if (t.pos < ctx.sequence_length(it->second)) {
          ctx.truncate_sequence(it->second, t.pos);
        }
        t.seq = it->second;
      }
    }
    // Any other error here means this rank diverged from rank 0, which is now inside the
    // step's collectives: it propagates, and the caller ends the job (MPI_Abort).
    try {
      ctx.eval(batch);
    } catch (const NonFiniteError&) {
      // Rank 0's step failed the same way (same inputs, same arithmetic): its scheduler ends
      // those requests.
    }
  }
}

}  // namespace lynx::dist
