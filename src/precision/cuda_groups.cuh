// Private to the precision CUDA kernels: which global indices one thread handles (its "group"),
// loading and storing a group, and rounding it with the round_math.h functions. Host-and-device, so
// the mapping can also be exercised on the CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "unstuck/precision/round_math.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision::cuda {

constexpr int kThreads = 256;  // threads per block of every precision kernel

// A thread handles G elements. SR modes follow the tile layout of the SR schedule in round_math.h:
// group g is Philox block g, and its G elements lie 16 apart, so the 16 groups of a tile (one
// half-warp) cover 16 * G consecutive elements and each load instruction of a half-warp reads
// contiguous memory. RN and FP32 groups are G consecutive elements (L = 1), loaded as vectors.
template <RoundMode M>
struct Layout {
  static constexpr bool kSr = M == RoundMode::bf16_sr || M == RoundMode::fp16_sr;
  static constexpr int G = (M == RoundMode::bf16_rn || M == RoundMode::bf16_sr) ? 8 : 4;
  static constexpr int L = kSr ? 16 : 1;  // groups per tile
  using Out = std::conditional_t<M == RoundMode::fp32, float, uint16_t>;
};
static_assert(kBf16SrTile == 16 * Layout<RoundMode::bf16_sr>::G && kFp16SrTile == 16 * Layout<RoundMode::fp16_sr>::G,
              "the SR tile layout in round_math.h changed: update Layout and round_group");

// Global index of element k of group g.
template <RoundMode M>
UNSTUCK_HD uint64_t element_index(uint64_t g, int k) {
  constexpr int G = Layout<M>::G, L = Layout<M>::L;
  return (g / L) * (uint64_t(L) * G) + g % L + uint64_t(L) * k;
}

// The groups [first_group(begin), end_group(end)) cover the global range [begin, end).
template <RoundMode M>
UNSTUCK_HD uint64_t first_group(uint64_t begin) {
  constexpr uint64_t kTile = uint64_t(Layout<M>::L) * Layout<M>::G;
  return begin / kTile * Layout<M>::L;
}
template <RoundMode M>
UNSTUCK_HD uint64_t end_group(uint64_t end) {
  constexpr uint64_t kTile = uint64_t(Layout<M>::L) * Layout<M>::G;
  return (end + kTile - 1) / kTile * Layout<M>::L;
}

// G elements of T as one or two aligned 16-byte (or one 8-byte) memory operations.
template <typename T, int G>
struct alignas(G * sizeof(T) < 16 ? G * sizeof(T) : 16) Pack {
  T v[G];
};

// True when group g (first index i0) is G consecutive elements inside [begin, end) whose address
// in ptr (ptr[i - base] holds index i) is aligned for one Pack.
template <RoundMode M, typename T>
UNSTUCK_HD bool vector_ok(const T* ptr, uint64_t base, uint64_t i0, uint64_t begin, uint64_t end) {
  constexpr int G = Layout<M>::G;
  return Layout<M>::L == 1 && i0 >= begin && i0 + G <= end &&
         reinterpret_cast<uintptr_t>(ptr + (i0 - base)) % alignof(Pack<T, G>) == 0;
}

// Loads the elements of group g that lie in [begin, end); ptr[i - base] holds global index i
// (base <= begin). Elements outside the range read as 0. The loops unroll with predicates, so the
// arrays stay in registers.
template <RoundMode M, typename T>
UNSTUCK_HD void load_group(const T* __restrict__ ptr, uint64_t base, uint64_t g, uint64_t begin, uint64_t end,
                           T (&out)[Layout<M>::G]) {
  constexpr int G = Layout<M>::G;
  const uint64_t i0 = element_index<M>(g, 0);
  if (vector_ok<M>(ptr, base, i0, begin, end)) {
    const Pack<T, G> pack = *reinterpret_cast<const Pack<T, G>*>(ptr + (i0 - base));
#pragma unroll
    for (int k = 0; k < G; ++k) out[k] = pack.v[k];
    return;
  }
#pragma unroll
  for (int k = 0; k < G; ++k) {
    const uint64_t i = element_index<M>(g, k);
    out[k] = (i >= begin && i < end) ? ptr[i - base] : T(0);
  }
}

// Stores the elements of group g that lie in [begin, end); layout as load_group.
template <RoundMode M, typename T>
UNSTUCK_HD void store_group(T* __restrict__ ptr, uint64_t base, uint64_t g, uint64_t begin, uint64_t end,
                            const T (&in)[Layout<M>::G]) {
  constexpr int G = Layout<M>::G;
  const uint64_t i0 = element_index<M>(g, 0);
  if (vector_ok<M>(ptr, base, i0, begin, end)) {
    Pack<T, G> pack;
#pragma unroll
    for (int k = 0; k < G; ++k) pack.v[k] = in[k];
    *reinterpret_cast<Pack<T, G>*>(ptr + (i0 - base)) = pack;
    return;
  }
#pragma unroll
  for (int k = 0; k < G; ++k) {
    const uint64_t i = element_index<M>(g, k);
    if (i >= begin && i < end) ptr[i - base] = in[k];
  }
}

// Rounds group g. SR: one Philox block per group; element k takes the bits that sr_bits_bf16 /
// sr_bits_fp16 give its global index (BF16: half k % 2 of word k / 2; FP16: word k).
template <RoundMode M>
UNSTUCK_HD void round_group(const float (&x)[Layout<M>::G], typename Layout<M>::Out (&y)[Layout<M>::G], SrKey key,
                            uint64_t g) {
  constexpr int G = Layout<M>::G;
  if constexpr (M == RoundMode::fp32) {
#pragma unroll
    for (int k = 0; k < G; ++k) y[k] = x[k];
  } else if constexpr (M == RoundMode::bf16_rn) {
#pragma unroll
    for (int k = 0; k < G; ++k) y[k] = bf16_rn(x[k]);
  } else if constexpr (M == RoundMode::fp16_rn) {
#pragma unroll
    for (int k = 0; k < G; ++k) y[k] = fp16_rn(x[k]);
  } else if constexpr (M == RoundMode::bf16_sr) {
    const Philox4x32 r = sr_block(key.seed, key.step, g);
#pragma unroll
    for (int k = 0; k < G; ++k) y[k] = bf16_sr(x[k], (r.v[k >> 1] >> (16 * (k & 1))) & 0xFFFFu);
  } else {
    const Philox4x32 r = sr_block(key.seed, key.step, g);
#pragma unroll
    for (int k = 0; k < G; ++k) y[k] = fp16_sr(x[k], r.v[k]);
  }
}

// Calls fn(std::integral_constant<RoundMode, M>{}) for the run-time `mode`.
template <typename Fn>
decltype(auto) dispatch_mode(RoundMode mode, Fn&& fn) {
  using RM = RoundMode;
  switch (mode) {
    case RM::fp32:
      return fn(std::integral_constant<RM, RM::fp32>{});
    case RM::bf16_rn:
      return fn(std::integral_constant<RM, RM::bf16_rn>{});
    case RM::bf16_sr:
      return fn(std::integral_constant<RM, RM::bf16_sr>{});
    case RM::fp16_rn:
      return fn(std::integral_constant<RM, RM::fp16_rn>{});
    case RM::fp16_sr:
      return fn(std::integral_constant<RM, RM::fp16_sr>{});
  }
  throw std::invalid_argument("unknown RoundMode " + std::to_string(int(mode)));
}

inline void check_cuda(cudaError_t err, const char* kernel) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(kernel) + ": CUDA error: " + cudaGetErrorString(err));
  }
}

// Blocks for a block- or grid-stride loop that wants `blocks_wanted`: 1 to 8 per SM.
inline unsigned grid_blocks(uint64_t blocks_wanted, const char* kernel) {
  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), kernel);
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), kernel);
  const uint64_t cap = uint64_t(sms) * 8;
  return unsigned(blocks_wanted == 0 ? 1 : (blocks_wanted < cap ? blocks_wanted : cap));
}

// Sum of `value` over the 32 lanes of a warp (every lane must call it).
__device__ __forceinline__ unsigned long long warp_sum(unsigned long long value) {
  for (int shift = 16; shift > 0; shift >>= 1) value += __shfl_xor_sync(0xFFFFFFFFu, value, shift);
  return value;
}

}  // namespace unstuck::precision::cuda
