// Materialize (master -> compute weights) and the non-finite check: pick the SIMD path, split the
// range over threads. Results never depend on either choice (the SR bits are keyed by global index).
#include "unstuck/precision/rounding.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cpu_kernels.h"
#include "unstuck/common/parallel.h"
#include "unstuck/precision/fp8.h"
#include "unstuck/precision/round_math.h"

namespace unstuck::precision {
namespace {

// Below this many elements a pass runs on the calling thread: thread start-up would dominate.
constexpr std::size_t kMinElementsPerThread = 1 << 16;

int threads_for(std::size_t n, const KernelOptions& options) {
  const int wanted = resolve_threads(options.threads);
  const std::size_t by_size = std::max<std::size_t>(1, n / kMinElementsPerThread);
  return static_cast<int>(std::min<std::size_t>(wanted, by_size));
}

}  // namespace

const char* round_mode_name(RoundMode mode) {
  switch (mode) {
    case RoundMode::fp32:
      return "fp32";
    case RoundMode::bf16_rn:
      return "bf16_rn";
    case RoundMode::bf16_sr:
      return "bf16_sr";
    case RoundMode::fp16_rn:
      return "fp16_rn";
    case RoundMode::fp16_sr:
      return "fp16_sr";
  }
  return "?";
}

std::size_t compute_element_bytes(RoundMode mode) { return mode == RoundMode::fp32 ? 4 : 2; }

bool is_stochastic(RoundMode mode) { return mode == RoundMode::bf16_sr || mode == RoundMode::fp16_sr; }

namespace cpu {

void round_range(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key, uint64_t index0,
                 SimdLevel simd) {
  switch (simd) {
    case SimdLevel::avx512:
      return round_avx512(src, dst, n, mode, key, index0);
    case SimdLevel::avx2:
      return round_avx2(src, dst, n, mode, key, index0);
    case SimdLevel::scalar:
      return round_scalar(src, dst, n, mode, key, index0);
  }
}

void fp8_range(const float* src, uint16_t* dst, std::size_t n, uint64_t index0, float down, float up, bool stochastic,
               SrKey key, SimdLevel simd) {
  switch (simd) {
    case SimdLevel::avx512:
      return fp8_avx512(src, dst, n, index0, down, up, stochastic, key);
    case SimdLevel::avx2:
      return fp8_avx2(src, dst, n, index0, down, up, stochastic, key);
    case SimdLevel::scalar:
      return fp8_scalar(src, dst, n, index0, down, up, stochastic, key);
  }
}

}  // namespace cpu

void materialize(const float* master, void* compute, std::size_t n, RoundMode mode, SrKey key, uint64_t global_offset,
                 const KernelOptions& options) {
  const std::size_t bytes = compute_element_bytes(mode);
  parallel_chunks(n, threads_for(n, options), kBf16SrTile, [&](std::size_t begin, std::size_t end, int) {
    cpu::round_range(master + begin, static_cast<char*>(compute) + begin * bytes, end - begin, mode, key,
                     global_offset + begin, options.simd);
  });
}

void materialize_coarse_bf16(const float* master, uint16_t* compute, std::size_t n, int mantissa_bits, bool stochastic,
                             SrKey key, uint64_t global_offset, const KernelOptions& options) {
  if (mantissa_bits < 1 || mantissa_bits > 7)
    throw std::invalid_argument("materialize_coarse_bf16: mantissa_bits must be in [1, 7], not " +
                                std::to_string(mantissa_bits));
  parallel_chunks(n, threads_for(n, options), kFp16SrTile, [&](std::size_t begin, std::size_t end, int) {
    for (std::size_t i = begin; i < end; ++i)
      compute[i] = stochastic
                       ? bf16_coarse_sr(master[i], mantissa_bits, sr_bits_fp16(key.seed, key.step, global_offset + i))
                       : bf16_coarse_rn(master[i], mantissa_bits);
  });
}

uint64_t fp8_channel_count(const std::vector<Fp8Matrix>& matrices) {
  uint64_t rows = 0;
  for (const Fp8Matrix& m : matrices) rows = std::max(rows, m.first_row + m.rows);
  return rows;
}

namespace {

// One row's part of [lo, hi): its channel and global range [first, end).
struct Fp8Piece {
  uint64_t channel, first, end;
};

// The pieces of [lo, hi) (global indices) that lie in one row of one FP8 matrix, in order;
// `matrices` sorted by offset.
std::vector<Fp8Piece> fp8_pieces(const std::vector<Fp8Matrix>& matrices, uint64_t lo, uint64_t hi) {
  std::vector<Fp8Piece> pieces;
  for (const Fp8Matrix& m : matrices) {
    const uint64_t end = m.offset + m.rows * m.cols;
    if (end <= lo) continue;
    if (m.offset >= hi) break;
    for (uint64_t i = std::max(lo, m.offset); i < std::min(hi, end);) {
      const uint64_t row = (i - m.offset) / m.cols;
      const uint64_t row_end = std::min({hi, end, m.offset + (row + 1) * m.cols});
      pieces.push_back({m.first_row + row, i, row_end});
      i = row_end;
    }
  }
  return pieces;
}

// Calls fn(piece) for every piece of [global_offset, global_offset + n), the pieces split over
// threads (no two threads write one channel; n sizes the thread count as for the other kernels).
void for_each_fp8_piece(const std::vector<Fp8Matrix>& matrices, uint64_t global_offset, std::size_t n,
                        const KernelOptions& options, const std::function<void(const Fp8Piece&)>& fn) {
  const std::vector<Fp8Piece> pieces = fp8_pieces(matrices, global_offset, global_offset + n);
  const int threads =
      int(std::min<std::size_t>(std::size_t(threads_for(n, options)), std::max<std::size_t>(pieces.size(), 1)));
  parallel_chunks(pieces.size(), threads, 1, [&](std::size_t begin, std::size_t end, int) {
    for (std::size_t p = begin; p < end; ++p) fn(pieces[p]);
  });
}

}  // namespace

void fp8_channel_amax(const float* master, std::size_t n, uint64_t global_offset,
                      const std::vector<Fp8Matrix>& matrices, float* amax, const KernelOptions& options) {
  for_each_fp8_piece(matrices, global_offset, n, options, [&](const Fp8Piece& p) {
    float m = amax[p.channel];
    for (uint64_t i = p.first; i < p.end; ++i) {
      const float a = std::fabs(master[i - global_offset]);
      if (a <= 3.4028234663852886e38f && a > m) m = a;  // finite only (NaN fails both)
    }
    amax[p.channel] = m;
  });
}

void materialize_fp8(const float* master, uint16_t* compute, std::size_t n, uint64_t global_offset,
                     const std::vector<Fp8Matrix>& matrices, const int32_t* exponent, bool stochastic, SrKey key,
                     const KernelOptions& options) {
  // Everything as BF16 first (the vectorized kernel), then the FP8 channels over it.
  materialize(master, compute, n, stochastic ? RoundMode::bf16_sr : RoundMode::bf16_rn, key, global_offset, options);
  for_each_fp8_piece(matrices, global_offset, n, options, [&](const Fp8Piece& p) {
    const int e = exponent[p.channel];
    const double down = fp8_pow2(-e), up = fp8_pow2(e);
    const std::size_t at = std::size_t(p.first - global_offset);
    if (fp8_fast_exponent(e))  // the FP32 path, vectorized
      return cpu::fp8_range(master + at, compute + at, std::size_t(p.end - p.first), p.first, float(down), float(up),
                            stochastic, key, options.simd);
    for (uint64_t i = p.first; i < p.end; ++i)
      compute[i - global_offset] = fp8_e4m3_scaled_by(master[i - global_offset], down, up, stochastic,
                                                      stochastic ? sr_bits_fp16(key.seed, key.step, i) : 0u);
  });
}

std::size_t count_nonfinite(const float* x, std::size_t n, const KernelOptions& options) {
  std::atomic<std::size_t> total{0};
  parallel_chunks(n, threads_for(n, options), 1024, [&](std::size_t begin, std::size_t end, int) {
    // Exponent all ones <=> NaN or Inf; a branch-free loop the compiler vectorizes.
    std::size_t bad = 0;
    for (std::size_t i = begin; i < end; ++i) {
      uint32_t b;
      std::memcpy(&b, x + i, sizeof b);
      bad += (b & 0x7F800000u) == 0x7F800000u;
    }
    total += bad;
  });
  return total.load();
}

}  // namespace unstuck::precision
