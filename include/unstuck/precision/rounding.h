// Materializing compute weights from the FP32 master: FP32 -> BF16 / FP16 with round-to-nearest-even
// or stochastic rounding (the SR contract of docs/PRECISION.md), or a plain FP32 copy. CPU entry
// points are vectorized (AVX-512 / AVX2 / scalar, chosen at run time) and multi-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "unstuck/common/simd.h"

namespace unstuck::precision {

// How the master is turned into compute weights.
enum class RoundMode {
  fp32,     // compute weights are an FP32 copy (no rounding)
  bf16_rn,  // BF16, nearest-even
  bf16_sr,  // BF16, stochastic
  fp16_rn,  // FP16, nearest-even
  fp16_sr,  // FP16, stochastic
};

const char* round_mode_name(RoundMode mode);
// Bytes per compute-weight element: 4 for fp32, else 2.
std::size_t compute_element_bytes(RoundMode mode);
bool is_stochastic(RoundMode mode);

// Key of the stochastic-rounding random stream: the run's rounding seed and the optimizer step.
struct SrKey {
  uint64_t seed = 0;
  uint64_t step = 0;
};

// Options shared by the CPU kernels.
struct KernelOptions {
  int threads = 0;                         // 0 = all hardware threads
  SimdLevel simd = detect_simd_level();    // code path; results are identical for every level
};

// Rounds master[0, n) into compute[0, n) (uint16_t bits for bf16/fp16, float for fp32).
// `global_offset` is the index of master[0] in the unsharded flat buffer: it keys the SR bits, so
// rounding a shard gives the same bits as rounding the whole buffer.
void materialize(const float* master, void* compute, std::size_t n, RoundMode mode, SrKey key,
                 uint64_t global_offset = 0, const KernelOptions& options = {});

// The grid-scaled analog (precision.analog_mantissa_bits): master[0, n) rounded to BF16 patterns with
// `mantissa_bits` (1..7) mantissa bits, nearest-even or stochastic (bf16_coarse_rn / bf16_coarse_sr).
// SR takes element i's 32 bits of the FP16 schedule, sr_bits_fp16(seed, step, i): the bits depend on
// (seed, step, global index) only, as in `materialize`. Scalar code: an analysis tool, not a fast path.
void materialize_coarse_bf16(const float* master, uint16_t* compute, std::size_t n, int mantissa_bits,
                             bool stochastic, SrKey key, uint64_t global_offset = 0,
                             const KernelOptions& options = {});

// Number of elements of x[0, n) that are NaN or +-Inf (vectorized, multi-threaded).
std::size_t count_nonfinite(const float* x, std::size_t n, const KernelOptions& options = {});

}  // namespace unstuck::precision
