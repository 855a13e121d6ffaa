// Private: `unstuck bench sample`, one decode step's draw from (rows, vocab) logits: the fused CPU
// sampler (src/rollout/sample_kernel.h) against libtorch's ops it replaces, timed in the same run, for
// plain sampling, greedy and top-k + top-p; on a CUDA device the kernel's twin (sample_cuda.cu) against
// the same ops there.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string>

namespace unstuck::bench {

struct SampleBenchOptions {
  bool json = false;           // one JSON object instead of the table
  int64_t rows = 64;           // rows drawn per step
  int64_t vocab = 151936;      // logits per row (Qwen2's vocabulary)
  int threads = 0;             // libtorch threads (0 = all cores)
  int repeats = 20;            // timed rounds after a warm-up (best kept; candidates interleaved)
  std::string device = "cpu";  // cpu, cuda or cuda:N (on CUDA: the kernel's twin, greedy and temperature only)
};

void run_sample_bench(const SampleBenchOptions& options, std::ostream& out);

}  // namespace unstuck::bench
