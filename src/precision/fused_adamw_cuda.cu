// CUDA fused AdamW: one launch covers every segment. Each thread updates one group of elements with
// adamw_element() and rounds it like materialize_cuda(); each block works on one segment at a time,
// so the changed-bit counts reduce per warp into one device counter per segment.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_groups.cuh"
#include "unstuck/precision/cuda_kernels.h"

namespace unstuck::precision {
namespace cuda {

// A non-empty segment as the kernel sees it. Its groups [g0, g0 + groups) are split into block
// tiles of kThreads groups, numbered from tile0 in the launch.
struct DeviceSegment {
  uint64_t begin, end;  // global indices
  uint64_t g0;          // first group
  uint64_t tile0;       // first block tile
  uint32_t slot;        // index into the changed counters (the caller's segment index)
  uint32_t decay;
};

struct DeviceBuffers {
  float* master;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  void* compute;
  uint64_t base;  // global index of element 0 of every pointer
};

UNSTUCK_HD uint32_t out_bits(float x) { return float_bits(x); }
UNSTUCK_HD uint32_t out_bits(uint16_t x) { return x; }

// One thread's work on group g of segment [begin, end); returns how many compute elements changed.
template <RoundMode M>
UNSTUCK_HD unsigned adamw_group(const DeviceBuffers& b, uint64_t begin, uint64_t end, bool decay, const AdamWScalars& s,
                                SrKey key, uint64_t g) {
  constexpr int G = Layout<M>::G;
  using Out = typename Layout<M>::Out;
  Out* compute = static_cast<Out*>(b.compute);
  float p[G], grad[G], m[G], v[G];
  Out old_bits[G], new_bits[G];
  load_group<M>(b.master, b.base, g, begin, end, p);
  load_group<M>(b.grad, b.base, g, begin, end, grad);
  load_group<M>(b.exp_avg, b.base, g, begin, end, m);
  load_group<M>(b.exp_avg_sq, b.base, g, begin, end, v);
  load_group<M>(static_cast<const Out*>(compute), b.base, g, begin, end, old_bits);
  unsigned in_range = 0;
#pragma unroll
  for (int k = 0; k < G; ++k) {
    const uint64_t i = element_index<M>(g, k);
    const bool valid = i >= begin && i < end;
    in_range |= valid ? 1u << k : 0u;
    if (valid) adamw_element(p[k], m[k], v[k], grad[k], decay, s);
  }
  round_group<M>(p, new_bits, key, g);
  unsigned changed = 0;
#pragma unroll
  for (int k = 0; k < G; ++k) {
    changed += ((in_range >> k) & 1u) && out_bits(new_bits[k]) != out_bits(old_bits[k]) ? 1 : 0;
  }
  store_group<M>(b.master, b.base, g, begin, end, p);
  store_group<M>(b.exp_avg, b.base, g, begin, end, m);
  store_group<M>(b.exp_avg_sq, b.base, g, begin, end, v);
  store_group<M>(compute, b.base, g, begin, end, new_bits);
  return changed;
}

// Block-stride loop over block tiles. All threads of a block share the tile, hence the segment:
// the warp sums go to that segment's counter.
template <RoundMode M>
__global__ void fused_adamw_kernel(DeviceBuffers b, const DeviceSegment* __restrict__ segments, int num_segments,
                                   uint64_t tiles, AdamWScalars s, SrKey key,
                                   unsigned long long* __restrict__ changed) {
  for (uint64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int lo = 0, hi = num_segments - 1;  // last segment with tile0 <= tile
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (segments[mid].tile0 <= tile)
        lo = mid;
      else
        hi = mid - 1;
    }
    const DeviceSegment seg = segments[lo];
    const uint64_t g = seg.g0 + (tile - seg.tile0) * kThreads + threadIdx.x;
    unsigned long long count = 0;
    if (g < end_group<M>(seg.end)) count = adamw_group<M>(b, seg.begin, seg.end, seg.decay, s, key, g);
    count = warp_sum(count);
    if ((threadIdx.x & 31) == 0 && count != 0) atomicAdd(&changed[seg.slot], count);
  }
}

}  // namespace cuda

AdamWStepStats fused_adamw_cuda(const AdamWBuffers& buffers, const std::vector<Segment>& segments,
                                const AdamWScalars& scalars, RoundMode mode, SrKey key, void* stream) {
  constexpr const char* kName = "fused_adamw_cuda";
  AdamWStepStats stats;
  stats.changed.assign(segments.size(), 0);
  return cuda::dispatch_mode(mode, [&](auto tag) {
    constexpr RoundMode M = decltype(tag)::value;
    std::vector<cuda::DeviceSegment> table;
    uint64_t tiles = 0;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const Segment& seg = segments[i];
      if (seg.offset < buffers.base) {
        throw std::invalid_argument(std::string(kName) + ": segment " + std::to_string(i) + " starts at " +
                                    std::to_string(seg.offset) + ", below the buffers' base " +
                                    std::to_string(buffers.base));
      }
      stats.elements += seg.size;
      if (seg.size == 0) continue;
      const uint64_t end = seg.offset + seg.size;
      const uint64_t g0 = cuda::first_group<M>(seg.offset);
      table.push_back({seg.offset, end, g0, tiles, uint32_t(i), seg.decay ? 1u : 0u});
      tiles += (cuda::end_group<M>(end) - g0 + cuda::kThreads - 1) / cuda::kThreads;
    }
    if (table.empty()) return stats;

    // One device allocation: the per-segment counters, then the segment table.
    const auto s = static_cast<cudaStream_t>(stream);
    const std::size_t counter_bytes = segments.size() * sizeof(unsigned long long);
    const std::size_t table_offset = (counter_bytes + 15) / 16 * 16;
    const std::size_t bytes = table_offset + table.size() * sizeof(cuda::DeviceSegment);
    const unsigned blocks = cuda::grid_blocks(tiles, kName);
    char* scratch = nullptr;
    cuda::check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&scratch), bytes, s), kName);
    auto* counters = reinterpret_cast<unsigned long long*>(scratch);
    auto* device_table = reinterpret_cast<cuda::DeviceSegment*>(scratch + table_offset);
    std::vector<unsigned long long> host_counters(segments.size(), 0);
    cudaError_t err = cudaMemsetAsync(counters, 0, counter_bytes, s);
    if (err == cudaSuccess) {
      err = cudaMemcpyAsync(device_table, table.data(), table.size() * sizeof table[0], cudaMemcpyHostToDevice, s);
    }
    if (err == cudaSuccess) {
      const cuda::DeviceBuffers b{buffers.master,     buffers.grad,    buffers.exp_avg,
                                  buffers.exp_avg_sq, buffers.compute, buffers.base};
      cuda::fused_adamw_kernel<M>
          <<<blocks, cuda::kThreads, 0, s>>>(b, device_table, int(table.size()), tiles, scalars, key, counters);
      err = cudaGetLastError();
    }
    if (err == cudaSuccess) {
      err = cudaMemcpyAsync(host_counters.data(), counters, counter_bytes, cudaMemcpyDeviceToHost, s);
    }
    const cudaError_t free_err = cudaFreeAsync(scratch, s);  // always release, even after an error
    if (err == cudaSuccess) err = free_err;
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    cuda::check_cuda(err, kName);
    for (std::size_t i = 0; i < segments.size(); ++i) {
      stats.changed[i] = host_counters[i];
      stats.changed_total += host_counters[i];
    }
    return stats;
  });
}

}  // namespace unstuck::precision
