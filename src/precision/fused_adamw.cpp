// Fused AdamW step over segments of the flat buffers: validates the hyper-parameters, computes the
// per-step scalars once, then runs the SIMD kernel on every segment, split over threads, and sums the
// per-segment counts of compute-weight elements that changed.
#include "unstuck/precision/fused_adamw.h"

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cpu_kernels.h"
#include "unstuck/common/parallel.h"

namespace unstuck::precision {
namespace {

void check_hyper(const AdamWHyper& h) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("AdamW: " + what); };
  if (!(h.lr >= 0) || !std::isfinite(h.lr)) fail("lr must be finite and >= 0, got " + std::to_string(h.lr));
  if (!(h.beta1 >= 0 && h.beta1 < 1)) fail("beta1 must be in [0, 1), got " + std::to_string(h.beta1));
  if (!(h.beta2 >= 0 && h.beta2 < 1)) fail("beta2 must be in [0, 1), got " + std::to_string(h.beta2));
  if (!(h.eps > 0)) fail("eps must be > 0, got " + std::to_string(h.eps));
  if (!(h.weight_decay >= 0)) fail("weight_decay must be >= 0, got " + std::to_string(h.weight_decay));
  if (h.step < 1) fail("step must be >= 1, got " + std::to_string(h.step));
  if (!(h.grad_scale > 0) || !std::isfinite(h.grad_scale))
    fail("grad_scale must be finite and > 0, got " + std::to_string(h.grad_scale));
}

uint64_t adamw_range(const cpu::AdamWRange& r, const AdamWScalars& s, RoundMode mode, SrKey key, SimdLevel simd) {
  switch (simd) {
    case SimdLevel::avx512:
      return cpu::adamw_avx512(r, s, mode, key);
    case SimdLevel::avx2:
      return cpu::adamw_avx2(r, s, mode, key);
    case SimdLevel::scalar:
      break;
  }
  return cpu::adamw_scalar(r, s, mode, key);
}

}  // namespace

AdamWScalars adamw_scalars(const AdamWHyper& h) {
  check_hyper(h);
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, double(h.step));
  AdamWScalars s{};
  s.beta1 = float(h.beta1);
  s.one_minus_beta1 = float(1.0 - h.beta1);
  s.beta2 = float(h.beta2);
  s.one_minus_beta2 = float(1.0 - h.beta2);
  s.step_size = float(h.lr / bc1);
  s.sqrt_bc2 = float(std::sqrt(bc2));
  s.eps = float(h.eps);
  s.decay_factor = float(1.0 - h.lr * h.weight_decay);
  s.grad_scale = float(h.grad_scale);
  return s;
}

AdamWStepStats fused_adamw_step(const AdamWBuffers& b, const std::vector<Segment>& segments, const AdamWHyper& hyper,
                                RoundMode mode, SrKey key, const KernelOptions& options) {
  const AdamWScalars s = adamw_scalars(hyper);
  AdamWStepStats stats;
  stats.changed.assign(segments.size(), 0);
  const std::size_t bytes = compute_element_bytes(mode);
  const int threads = resolve_threads(options.threads);
  for (std::size_t k = 0; k < segments.size(); ++k) {
    const Segment& seg = segments[k];
    if (seg.offset < b.base) throw std::invalid_argument("AdamW: segment starts before the buffer base");
    const std::size_t first = seg.offset - b.base;
    std::atomic<uint64_t> changed{0};
    // Small segments run inline; large ones are split over threads (64K elements at least each).
    const int chunks = static_cast<int>(std::min<uint64_t>(threads, std::max<uint64_t>(1, seg.size >> 16)));
    parallel_chunks(seg.size, chunks, kBf16SrTile, [&](std::size_t begin, std::size_t end, int) {
      const std::size_t i = first + begin;
      cpu::AdamWRange r{
          b.master + i, b.grad + i,         b.exp_avg + i, b.exp_avg_sq + i, static_cast<char*>(b.compute) + i * bytes,
          end - begin,  seg.offset + begin, seg.decay};
      changed += adamw_range(r, s, mode, key, options.simd);
    });
    stats.changed[k] = changed.load();
    stats.changed_total += stats.changed[k];
    stats.elements += seg.size;
  }
  return stats;
}

}  // namespace unstuck::precision
