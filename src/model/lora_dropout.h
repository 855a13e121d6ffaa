// lora.dropout's masks as counter-based bits: whether element `feature` of the adapter input at
// `position` of row `row` is kept is a pure function of (key, layer, module, row, position,
// feature) (Philox4x32-10), so the masks do not depend on the batch, row chunk, rank or world size
// a row is computed in, and the backward pass and an activation-checkpointing recompute regenerate
// them instead of keeping them. Libtorch-free so device code and the CPU fill share it.
#pragma once

#include <cstdint>

#include "unstuck/common/hd.h"
#include "unstuck/precision/philox.h"

namespace unstuck::model {

// What identifies one adapted module's masks in a forward pass: the pass's 64-bit key, and
// (layer, module, whether the rows are distinct prompts of a shared-prompt pass) packed in `tag`.
struct DropoutStream {
  uint64_t key = 0;
  uint32_t tag = 0;
};
UNSTUCK_HD uint32_t dropout_tag(int64_t layer, int module, bool prompts) {
  return (uint32_t(layer) << 4) | uint32_t(module) | (prompts ? 0x80000000u : 0u);
}

// Drop threshold of probability p: element dropped iff the top 24 bits of its lane are below it
// (the uniform k * 2^-24 < p).
inline uint32_t dropout_threshold(double p) {
  const double t = p * 16777216.0;
  const uint32_t whole = uint32_t(t);
  return double(whole) == t ? whole : whole + 1;
}

// Counter (feature / 4, position, row, tag) under the key; lane feature % 4. One Philox block
// serves four consecutive features.
UNSTUCK_HD precision::Philox4x32 dropout_block(DropoutStream s, uint32_t row, uint32_t position, uint32_t feature) {
  return precision::philox4x32_10(precision::Philox4x32{{feature >> 2, position, row, s.tag}}, uint32_t(s.key),
                                  uint32_t(s.key >> 32));
}

// The keep bits (1 kept, 0 dropped) of `features` consecutive elements at (row, position), written
// to out[0 .. features).
UNSTUCK_HD void dropout_keep_row(DropoutStream s, uint32_t threshold, uint32_t row, uint32_t position, int64_t features,
                                 uint8_t* out) {
  for (int64_t f = 0; f < features; f += 4) {
    const precision::Philox4x32 r = dropout_block(s, row, position, uint32_t(f));
    for (int64_t lane = 0; lane < 4 && f + lane < features; ++lane) out[f + lane] = (r.v[lane] >> 8) >= threshold;
  }
}

// CUDA: keep bits (rows * positions * features bytes, row-major) for ids[rows] and
// position_ids[rows * positions] on the device, on `stream` (a cudaStream_t). Built with CUDA only.
void dropout_keep_cuda(uint8_t* out, const int64_t* ids, const int64_t* position_ids, int64_t rows, int64_t positions,
                       int64_t features, DropoutStream s, uint32_t threshold, void* stream);

}  // namespace unstuck::model
