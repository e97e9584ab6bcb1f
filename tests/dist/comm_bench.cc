// ep_comm_bench: the combine collectives of expert parallelism alone, timed per batch size, to
// choose the scheme (docs/distributed.md). Run under mpirun -np R:
//   ep_comm_bench [n_embd=2048] [k=8] [n_expert=64] [iters=200]
// For T = 1..32 tokens per step it times, per MoE layer (median over iters, microseconds):
//   allreduce   MPI_Allreduce of the [T x n_embd] f32 partial sums
//   rs+ag       reduce-scatter + all-gather of the same (what MpiExpertExecutor does: every
//               rank ends with the same bits)
//   gather      all-gather of the expert output rows, T k n_embd f32 split over the ranks
//               (the bit-exact combine)
//   a2a         dispatch + combine with MPI_Alltoallv: each rank owns T/R tokens (data-
//               parallel attention) and sends each token's row to the ranks of its k experts,
//               then gets the k expert outputs back (uniform random routing, seeded)
// Then the routing's residency (docs/offload.md, "Under expert parallelism"), per MoE layer:
//   gather+head  the gather combine with each rank's head as MpiExpertExecutor sends it
//               before residency (digest and totals, 56 bytes)
//   +residency   the same with the residency block appended (8 bytes and N bits)
//   alone        the residency block in an all-gather of its own (a message per layer)
//   per step     every layer's blocks in one all-gather (a message per step; [layers=48])
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

namespace {

double median_us(int iters, MPI_Comm comm, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < iters + 10; ++i) {
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    fn();
    const double dt = MPI_Wtime() - t0;
    if (i >= 10) t.push_back(dt);  // the first calls set up connections
  }
  // The step waits for the slowest rank: the maximum over ranks of each rank's median.
  std::nth_element(t.begin(), t.begin() + ptrdiff_t(t.size() / 2), t.end());
  double med = t[t.size() / 2], worst = 0;
  MPI_Allreduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
  return worst * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, R = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &R);
  const int E = argc > 1 ? std::atoi(argv[1]) : 2048;
  const int K = argc > 2 ? std::atoi(argv[2]) : 8;
  const int N = argc > 3 ? std::atoi(argv[3]) : 64;
  const int iters = argc > 4 ? std::atoi(argv[4]) : 200;
  const int layers = argc > 5 ? std::atoi(argv[5]) : 48;
  if (rank == 0) {
    std::printf(
        "ep_comm_bench: R=%d n_embd=%d k=%d n_expert=%d, median us per MoE layer "
        "(slowest rank)\n\n| T | allreduce | rs+ag | gather | a2a | KB allreduce | "
        "KB gather | KB a2a/rank |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        R, E, K, N);
  }
  for (int T : {1, 2, 4, 8, 16, 32}) {
    const size_t n = size_t(T) * size_t(E);
    const size_t chunk = (n + size_t(R) - 1) / size_t(R);
    std::vector<float> part(chunk * size_t(R), 1.f), red(chunk), all(chunk * size_t(R));
    const double ar = median_us(iters, MPI_COMM_WORLD, [&] {
      MPI_Allreduce(MPI_IN_PLACE, part.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
    const double rsag = median_us(iters, MPI_COMM_WORLD, [&] {
      MPI_Reduce_scatter_block(part.data(), red.data(), int(chunk), MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
      MPI_Allgather(red.data(), int(chunk), MPI_FLOAT, all.data(), int(chunk), MPI_FLOAT,
                    MPI_COMM_WORLD);
    });
    // gather: T k rows split evenly (the first ranks take the remainder).
    const int rows = T * K;
    std::vector<int> cnt(static_cast<size_t>(R)), dsp(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) cnt[size_t(r)] = (rows / R + (r < rows % R ? 1 : 0)) * E;
    for (int r = 1; r < R; ++r) dsp[size_t(r)] = dsp[size_t(r) - 1] + cnt[size_t(r) - 1];
    std::vector<float> mine(size_t(cnt[size_t(rank)]) + 1), rowsbuf(size_t(rows) * E);
    const double ga = median_us(iters, MPI_COMM_WORLD, [&] {
      MPI_Allgatherv(mine.data(), cnt[size_t(rank)], MPI_FLOAT, rowsbuf.data(), cnt.data(),
                     dsp.data(), MPI_FLOAT, MPI_COMM_WORLD);
    });
    // a2a: token t is owned by rank t % R; its k experts drawn uniformly (same seed
    // everywhere, so every rank knows every count).
    std::mt19937 rng(1234 + unsigned(T));
    std::vector<int> sc(size_t(R), 0), rc(size_t(R), 0);
    for (int t = 0; t < T; ++t) {
      for (int s = 0; s < K; ++s) {
        const int e = int(rng() % unsigned(N));
        const int dst = int(int64_t(e) * R / N), src = t % R;
        if (src == rank) sc[size_t(dst)] += E;
        if (dst == rank) rc[size_t(src)] += E;
      }
    }
    std::vector<int> sd(size_t(R), 0), rd(size_t(R), 0);
    for (int r = 1; r < R; ++r) {
      sd[size_t(r)] = sd[size_t(r) - 1] + sc[size_t(r) - 1];
      rd[size_t(r)] = rd[size_t(r) - 1] + rc[size_t(r) - 1];
    }
    std::vector<float> sbuf(size_t(sd.back() + sc.back()) + 1),
        rbuf(size_t(rd.back() + rc.back()) + 1);
    const double a2a = median_us(iters, MPI_COMM_WORLD, [&] {
      MPI_Alltoallv(sbuf.data(), sc.data(), sd.data(), MPI_FLOAT, rbuf.data(), rc.data(), rd.data(),
                    MPI_FLOAT, MPI_COMM_WORLD);  // dispatch
      MPI_Alltoallv(rbuf.data(), rc.data(), rd.data(), MPI_FLOAT, sbuf.data(), sc.data(), sd.data(),
                    MPI_FLOAT, MPI_COMM_WORLD);  // combine
    });
    // Bytes this rank moves off-rank (a2a: the busiest rank, both directions).
    long long off = 0;
    for (int r = 0; r < R; ++r) {
      if (r != rank) off += 4LL * (sc[size_t(r)] + rc[size_t(r)]);
    }
    long long off_max = 0;
    MPI_Allreduce(&off, &off_max, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", T, ar, rsag, ga, a2a,
                  4.0 * double(n) / 1024, 4.0 * double(rows) * E / 1024, double(off_max) / 1024);
    }
  }
  const int head = 56, res = 8 + (N + 7) / 8;
  if (rank == 0) {
    std::printf(
        "\nresidency: %d bytes per rank and layer (%d layers per step)\n\n| T | gather+head | "
        "+residency | alone | per step |\n|---:|---:|---:|---:|---:|\n",
        res, layers);
  }
  for (int T : {1, 8, 32}) {
    const int rows = T * K;
    std::vector<double> us;
    for (int extra : {0, res}) {
      std::vector<int> cnt(static_cast<size_t>(R)), dsp(static_cast<size_t>(R));
      for (int r = 0; r < R; ++r) {
        cnt[size_t(r)] = (rows / R + (r < rows % R ? 1 : 0)) * E * 4 + head + extra;
      }
      for (int r = 1; r < R; ++r) dsp[size_t(r)] = dsp[size_t(r) - 1] + cnt[size_t(r) - 1];
      std::vector<char> mine(static_cast<size_t>(cnt[size_t(rank)]));
      std::vector<char> all(static_cast<size_t>(dsp.back() + cnt.back()));
      us.push_back(median_us(iters, MPI_COMM_WORLD, [&] {
        MPI_Allgatherv(mine.data(), cnt[size_t(rank)], MPI_BYTE, all.data(), cnt.data(), dsp.data(),
                       MPI_BYTE, MPI_COMM_WORLD);
      }));
    }
    for (int n_blocks : {1, layers}) {
      std::vector<char> mine(size_t(res) * size_t(n_blocks)), all(mine.size() * size_t(R));
      us.push_back(median_us(iters, MPI_COMM_WORLD, [&] {
        MPI_Allgather(mine.data(), int(mine.size()), MPI_BYTE, all.data(), int(mine.size()),
                      MPI_BYTE, MPI_COMM_WORLD);
      }));
    }
    if (rank == 0) {
      std::printf("| %d | %.1f | %.1f | %.1f | %.1f |\n", T, us[0], us[1], us[2], us[3]);
    }
  }
  MPI_Finalize();
  return 0;
}
