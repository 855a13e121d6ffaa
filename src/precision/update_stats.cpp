// The update statistics of update_stats.h: one pass over a slice's old and new compute weights.
// Plain loops (the compiler vectorizes the 8 independent lanes); blocks are split over threads.
#include "precision/update_stats.h"

#include <algorithm>
#include <cstring>

#include "unstuck/common/parallel.h"
#include "unstuck/precision/round_math.h"

namespace unstuck::precision {
namespace {

template <class Bits>
uint64_t count_neq(const Bits* a, const Bits* b, std::size_t n) {
  uint64_t changed = 0;
  for (std::size_t i = 0; i < n; ++i) changed += a[i] != b[i];
  return changed;
}

float widen(RoundMode mode, const void* p, std::size_t i) {
  switch (mode) {
    case RoundMode::fp32:
      return static_cast<const float*>(p)[i];
    case RoundMode::bf16_rn:
    case RoundMode::bf16_sr:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case RoundMode::fp16_rn:
    case RoundMode::fp16_sr:
      return fp16_to_float(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.0f;
}

// Sums of one block [first, first + n), 8 lanes in double, then the lanes in order.
template <class Widen>
void block_sums(const Widen& w, std::size_t first, std::size_t n, double* delta, double* weight) {
  constexpr int kLanes = 8;
  double d[kLanes] = {}, s[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float b = w.before(first + i + std::size_t(l)), a = w.after(first + i + std::size_t(l));
      const double diff = double(a - b);
      d[l] += diff * diff;
      s[l] += double(b) * double(b);
    }
  for (int l = 0; i < n; ++i, ++l) {
    const float b = w.before(first + i), a = w.after(first + i);
    const double diff = double(a - b);
    d[l] += diff * diff;
    s[l] += double(b) * double(b);
  }
  double dt = 0, st = 0;
  for (int l = 0; l < kLanes; ++l) {
    dt += d[l];
    st += s[l];
  }
  *delta += dt;
  *weight += st;
}

struct Bf16Widen {
  const uint16_t *b, *a;
  float before(std::size_t i) const { return bits_float(uint32_t(b[i]) << 16); }
  float after(std::size_t i) const { return bits_float(uint32_t(a[i]) << 16); }
};
struct F32Widen {
  const float *b, *a;
  float before(std::size_t i) const { return b[i]; }
  float after(std::size_t i) const { return a[i]; }
};
struct AnyWiden {
  RoundMode mode;
  const void *b, *a;
  float before(std::size_t i) const { return widen(mode, b, i); }
  float after(std::size_t i) const { return widen(mode, a, i); }
};

}  // namespace

uint64_t count_changed_bits(const void* before, const void* after, std::size_t n, RoundMode mode) {
  if (mode == RoundMode::fp32)
    return count_neq(static_cast<const uint32_t*>(before), static_cast<const uint32_t*>(after), n);
  return count_neq(static_cast<const uint16_t*>(before), static_cast<const uint16_t*>(after), n);
}

void add_block_update_sums(const void* before, const void* after, std::size_t n, RoundMode mode, std::size_t block,
                           double* delta, double* weight, const KernelOptions& options) {
  if (n == 0) return;
  block = std::max<std::size_t>(block, 1);
  const std::size_t blocks = (n + block - 1) / block;
  const int threads = static_cast<int>(std::min<std::size_t>(std::size_t(resolve_threads(options.threads)), blocks));
  parallel_chunks(blocks, threads, 1, [&](std::size_t k0, std::size_t k1, int) {
    for (std::size_t k = k0; k < k1; ++k) {
      const std::size_t first = k * block, len = std::min(block, n - first);
      if (mode == RoundMode::fp32)
        block_sums(F32Widen{static_cast<const float*>(before), static_cast<const float*>(after)}, first, len, &delta[k],
                   &weight[k]);
      else if (mode == RoundMode::bf16_rn || mode == RoundMode::bf16_sr)
        block_sums(Bf16Widen{static_cast<const uint16_t*>(before), static_cast<const uint16_t*>(after)}, first, len,
                   &delta[k], &weight[k]);
      else
        block_sums(AnyWiden{mode, before, after}, first, len, &delta[k], &weight[k]);
    }
  });
}

}  // namespace unstuck::precision
