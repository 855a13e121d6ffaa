#include "unstuck/model/lazy_zeros.h"

#include <sys/mman.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <new>

namespace unstuck::model {
namespace {

constexpr std::size_t kAlign = 64;                       // as libtorch's CPU allocator aligns
constexpr std::size_t kHugePage = std::size_t(2) << 20;  // x86-64's transparent huge page
constexpr std::size_t kHugeFrom = 4 * kHugePage;         // smaller buffers keep calloc's pages

// Fresh anonymous pages (zeros, untouched until used), 2 MiB-aligned and advised as transparent huge
// pages: where the kernel allows them (`madvise` or `always` in /sys/kernel/mm/transparent_hugepage/
// enabled), the first touch costs one fault per 2 MiB instead of one per 4 KiB (the first optimizer
// step at a real model's size touches gigabytes of moments; docs/PERFORMANCE.md has the measurement).
// Without huge pages the advice is ignored and the pages are ordinary ones, as calloc's.
torch::Tensor huge_page_zeros(int64_t n, torch::ScalarType dtype, std::size_t bytes) {
  const std::size_t mapped = bytes + kHugePage;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  void* aligned = reinterpret_cast<void*>((start + kHugePage - 1) & ~(kHugePage - 1));
  (void)madvise(aligned, (bytes + kHugePage - 1) & ~(kHugePage - 1), MADV_HUGEPAGE);  // advice only
  return torch::from_blob(
      aligned, {n}, [raw, mapped](void*) { munmap(raw, mapped); }, torch::TensorOptions().dtype(dtype));
}

}  // namespace

torch::Tensor lazy_zeros(int64_t n, torch::ScalarType dtype, const torch::Device& device) {
  if (!device.is_cpu()) return torch::zeros({n}, torch::TensorOptions().dtype(dtype).device(device));
  const std::size_t bytes = std::size_t(std::max<int64_t>(n, 1)) * c10::elementSize(dtype);
  if (bytes >= kHugeFrom) return huge_page_zeros(n, dtype, bytes);
  void* raw = std::calloc(bytes + kAlign, 1);
  if (!raw) throw std::bad_alloc();
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(raw) + kAlign - 1) & ~(kAlign - 1));
  return torch::from_blob(
      aligned, {n}, [raw](void*) { std::free(raw); }, torch::TensorOptions().dtype(dtype));
}

}  // namespace unstuck::model
