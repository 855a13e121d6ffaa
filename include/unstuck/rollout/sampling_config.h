// Options of the rollout sampler (temperature, top-k, top-p, completion length). Header-only and
// free of libtorch so the run config can hold it.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace unstuck::rollout {

// How the KV-cached decode loop runs its per-token steps (rollout.decode).
//   dynamic: each step attends over the filled slots and launches every op (the CPU's fast path);
//   fixed:   fixed-shape steps (rows padded to a bucket, attention over a bucket of slots with a key
//            mask, the slot to write held on the device), run op by op: what graphs replay, so the
//            exact fallback of `graphs` and its CPU test;
//   graphs:  those steps captured once per (row bucket, slot bucket) as CUDA graphs and replayed
//            (one launch per token; CUDA devices only);
//   automatic ("auto"): graphs on a CUDA device, dynamic on the CPU.
enum class DecodeMode { automatic, dynamic, fixed, graphs };
inline constexpr std::array<std::pair<DecodeMode, const char*>, 4> kDecodeModeNames{{
    {DecodeMode::automatic, "auto"},
    {DecodeMode::dynamic, "dynamic"},
    {DecodeMode::fixed, "fixed"},
    {DecodeMode::graphs, "graphs"},
}};
constexpr const auto& enum_names(DecodeMode) { return kDecodeModeNames; }

// Options of the sampler.
struct SamplingConfig {
  double temperature = 1.0;                   // softmax temperature; 0 = greedy
  int64_t top_k = 0;                          // keep the k most likely tokens; 0 = all
  double top_p = 1.0;                         // keep the smallest set with this much probability; 1 = all
  int64_t max_new_tokens = 32;                // completion length limit
  DecodeMode decode = DecodeMode::automatic;  // how the decode loop runs its steps (see DecodeMode)

  template <class V>
  void visit(V& v) {
    v("temperature", temperature, "softmax temperature; 0 = greedy decoding");
    v("top_k", top_k, "sample among the k most likely tokens; 0 = no limit");
    v("top_p", top_p, "nucleus sampling: smallest token set with this probability mass; 1 = off");
    v("max_new_tokens", max_new_tokens, "most tokens generated per completion");
    v("decode", decode,
      "decode steps: auto (CUDA graphs on a GPU, dynamic on the CPU), dynamic (attention over the filled "
      "slots, op by op), fixed (the graphs' fixed-shape steps run op by op: their exact fallback), graphs "
      "(fixed-shape steps captured per row and slot bucket as CUDA graphs; GPU only)");
  }
};

}  // namespace unstuck::rollout
