// Private: `unstuck bench precision`, measuring the rounding kernels and the fused AdamW against
// baselines measured in the same run (copy bandwidth, libtorch's cast, unfused libtorch ops).
#pragma once

#include <cstddef>
#include <ostream>

namespace unstuck::bench {

struct PrecisionBenchOptions {
  bool json = false;                 // one JSON object instead of the table
  std::size_t elements = 64u << 20;  // buffer length (64M FP32 = 256 MB, far out of cache)
  int repeats = 5;                   // timed repetitions per measurement; the best is kept
  int threads = 0;                   // all-threads figures use this many (0 = all cores)
};

void run_precision_bench(const PrecisionBenchOptions& options, std::ostream& out);

}  // namespace unstuck::bench
