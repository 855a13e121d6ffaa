// Options of the rollout sampler (temperature, top-k, top-p, completion length). Header-only and
// free of libtorch so the run config can hold it.
#pragma once

#include <cstdint>

namespace unstuck::rollout {

// Options of the sampler.
struct SamplingConfig {
  double temperature = 1.0;     // softmax temperature; 0 = greedy
  int64_t top_k = 0;            // keep the k most likely tokens; 0 = all
  double top_p = 1.0;           // keep the smallest set with this much probability; 1 = all
  int64_t max_new_tokens = 32;  // completion length limit

  template <class V>
  void visit(V& v) {
    v("temperature", temperature, "softmax temperature; 0 = greedy decoding");
    v("top_k", top_k, "sample among the k most likely tokens; 0 = no limit");
    v("top_p", top_p, "nucleus sampling: smallest token set with this probability mass; 1 = off");
    v("max_new_tokens", max_new_tokens, "most tokens generated per completion");
  }
};

}  // namespace unstuck::rollout
