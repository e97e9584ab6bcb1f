// Machine probes for the benchmarks' rooflines (`lynx-moe bench`, bench/bench_kernels): memory
// read bandwidth and the F32 FMA peak, measured with the thread pool. Not on the inference
// path; fma_chains (kernels.h) is the dispatched inner loop of the FMA probe.
#pragma once
#include <cstddef>

#include "kernels/thread_pool.h"

namespace lynx::kernels {

// Memory read bandwidth of this machine in GB/s (1e9 bytes/s): all pool threads sum-reduce
// disjoint parts of a `bytes` buffer, timed per 8 MiB segment, best of `runs` runs per
// segment (robust to other processes on a shared machine: the peak the machine can give).
// With runs = 1 it is the bandwidth of one pass, interference included: what a kernel running
// at that moment could get. The roofline for matmul_rows.
double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes = size_t{1} << 30, int runs = 5);

// F32 fused multiply-add peak of this machine in GFLOPS (1e9 flops/s; an FMA is 2 flops):
// every pool thread runs independent FMA chains on full vectors of the dispatched
// instruction set, best of `runs`. The compute roof of the float matmul path: a float matmul
// with n tokens takes 2 * n flops per weight.
double measure_fma_gflops(ThreadPool& pool, int runs = 5);

}  // namespace lynx::kernels
