// The flat buffers' shared sizes (trainable_weights.cpp, flat_grad.cpp): internal to train/.
#pragma once

#include <cstdint>

#include "unstuck/dist/communicator.h"

namespace unstuck::train {

// The gradient norm is summed per block of this many global elements (in double), then over the
// blocks in order. Shards start at block boundaries, so the sum does not depend on the world size.
constexpr int64_t kNormBlock = 1 << 14;
// The optimizer updates this many elements at a time (a multiple of kNormBlock), saving their old
// compute weights first: the update statistics need the old values, never a copy of the model.
constexpr int64_t kSliceElems = 1 << 22;
// A parameter's gradient is added into the flat FP32 gradient this many elements at a time (the
// widening of a BF16 gradient makes an FP32 temporary of that size, not of the whole tensor).
constexpr int64_t kGradSliceElems = 1 << 22;

inline int64_t world_of(const dist::Communicator* comm) { return comm ? comm->world_size() : 1; }

}  // namespace unstuck::train
