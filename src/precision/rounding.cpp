// Materialize (master -> compute weights) and the non-finite check: pick the SIMD path, split the
// range over threads. Results never depend on either choice (the SR bits are keyed by global index).
#include "unstuck/precision/rounding.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cpu_kernels.h"
#include "unstuck/common/parallel.h"
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
    case RoundMode::fp32: return "fp32";
    case RoundMode::bf16_rn: return "bf16_rn";
    case RoundMode::bf16_sr: return "bf16_sr";
    case RoundMode::fp16_rn: return "fp16_rn";
    case RoundMode::fp16_sr: return "fp16_sr";
  }
  return "?";
}

std::size_t compute_element_bytes(RoundMode mode) { return mode == RoundMode::fp32 ? 4 : 2; }

bool is_stochastic(RoundMode mode) {
  return mode == RoundMode::bf16_sr || mode == RoundMode::fp16_sr;
}

namespace cpu {

void round_range(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key,
                 uint64_t index0, SimdLevel simd) {
  switch (simd) {
    case SimdLevel::avx512: return round_avx512(src, dst, n, mode, key, index0);
    case SimdLevel::avx2: return round_avx2(src, dst, n, mode, key, index0);
    case SimdLevel::scalar: return round_scalar(src, dst, n, mode, key, index0);
  }
}

}  // namespace cpu

void materialize(const float* master, void* compute, std::size_t n, RoundMode mode, SrKey key,
                 uint64_t global_offset, const KernelOptions& options) {
  const std::size_t bytes = compute_element_bytes(mode);
  parallel_chunks(n, threads_for(n, options), kBf16SrTile,
                  [&](std::size_t begin, std::size_t end, int) {
                    cpu::round_range(master + begin, static_cast<char*>(compute) + begin * bytes,
                                     end - begin, mode, key, global_offset + begin, options.simd);
                  });
}

void materialize_coarse_bf16(const float* master, uint16_t* compute, std::size_t n, int mantissa_bits,
                             bool stochastic, SrKey key, uint64_t global_offset, const KernelOptions& options) {
  if (mantissa_bits < 1 || mantissa_bits > 7)
    throw std::invalid_argument("materialize_coarse_bf16: mantissa_bits must be in [1, 7], not " +
                                std::to_string(mantissa_bits));
  parallel_chunks(n, threads_for(n, options), kFp16SrTile, [&](std::size_t begin, std::size_t end, int) {
    for (std::size_t i = begin; i < end; ++i)
      compute[i] = stochastic ? bf16_coarse_sr(master[i], mantissa_bits,
                                               sr_bits_fp16(key.seed, key.step, global_offset + i))
                              : bf16_coarse_rn(master[i], mantissa_bits);
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
