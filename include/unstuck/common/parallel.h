// Minimal fork-join parallel loop for CPU kernels: splits [0, n) into one contiguous chunk per
// thread. Results of our kernels never depend on the split (the SR bits are keyed by global index).
#pragma once

#include <cstddef>
#include <functional>

namespace unstuck {

// Threads to use when a caller asks for `requested` (0 = all hardware threads, shared evenly among
// the LOCAL_WORLD_SIZE ranks that `unstuck launch` or torchrun start on this machine).
int resolve_threads(int requested);

// Calls fn(begin, end, chunk) for `chunks` contiguous, near-equal chunks of [0, n), each chunk on its
// own OpenMP thread. Chunk boundaries are multiples of `align` elements except the last. Runs inline
// when chunks <= 1. Exceptions from any chunk are rethrown.
void parallel_chunks(std::size_t n, int chunks, std::size_t align,
                     const std::function<void(std::size_t, std::size_t, int)>& fn);

}  // namespace unstuck
