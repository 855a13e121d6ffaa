// Materializing compute weights from the FP32 master: FP32 -> BF16 / FP16 with round-to-nearest-even
// or stochastic rounding (the SR contract of docs/PRECISION.md), or a plain FP32 copy. CPU entry
// points are vectorized (AVX-512 / AVX2 / scalar, chosen at run time) and multi-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
  int threads = 0;                       // 0 = all hardware threads
  SimdLevel simd = detect_simd_level();  // code path; results are identical for every level
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
void materialize_coarse_bf16(const float* master, uint16_t* compute, std::size_t n, int mantissa_bits, bool stochastic,
                             SrKey key, uint64_t global_offset = 0, const KernelOptions& options = {});

// ---- FP8 E4M3FN compute weights (precision.mode fp8_rn / fp8_sr; the rule is unstuck/precision/fp8.h)

// A matrix whose rows (output channels) are FP8 channels: its first element in the unsharded flat
// buffer, its shape, and the index of its first row in the table of all channels' exponents.
struct Fp8Matrix {
  uint64_t offset = 0;
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t first_row = 0;
};

// The number of channels (rows) of `matrices`, sorted by offset and not overlapping.
uint64_t fp8_channel_count(const std::vector<Fp8Matrix>& matrices);

// For the elements master[0, n) (global index global_offset + i): amax[channel] = max(amax[channel],
// |x|) over the finite x of each FP8 channel the range meets (a part of a row counts for its row, so a
// shard's partial maxima combine into the row's by max). Elements outside the matrices are ignored.
void fp8_channel_amax(const float* master, std::size_t n, uint64_t global_offset,
                      const std::vector<Fp8Matrix>& matrices, float* amax, const KernelOptions& options = {});

// Rounds master[0, n) into compute[0, n) (BF16 patterns): elements of an FP8 channel by
// fp8_e4m3_scaled(x, exponent[channel], stochastic, sr_bits_fp16(seed, step, index)), every other
// element (embeddings, norms, biases, the head) to BF16 as the BF16 modes do (bf16_rn, or bf16_sr with
// sr_bits_bf16 of its index). Keyed by global index only: any split, shard or thread count gives the
// same bits.
void materialize_fp8(const float* master, uint16_t* compute, std::size_t n, uint64_t global_offset,
                     const std::vector<Fp8Matrix>& matrices, const int32_t* exponent, bool stochastic, SrKey key,
                     const KernelOptions& options = {});

// Number of elements of x[0, n) that are NaN or +-Inf (vectorized, multi-threaded).
std::size_t count_nonfinite(const float* x, std::size_t n, const KernelOptions& options = {});

}  // namespace unstuck::precision
