#include "unstuck/model/lazy_zeros.h"

#include <torch/torch.h>

#include <cstdlib>
#include <new>

namespace unstuck::model {

torch::Tensor lazy_zeros(int64_t n, torch::ScalarType dtype, const torch::Device& device) {
  if (!device.is_cpu()) return torch::zeros({n}, torch::TensorOptions().dtype(dtype).device(device));
  constexpr std::size_t kAlign = 64;  // as libtorch's CPU allocator aligns
  const std::size_t bytes = std::size_t(std::max<int64_t>(n, 1)) * c10::elementSize(dtype);
  void* raw = std::calloc(bytes + kAlign, 1);
  if (!raw) throw std::bad_alloc();
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(raw) + kAlign - 1) & ~(kAlign - 1));
  return torch::from_blob(
      aligned, {n}, [raw](void*) { std::free(raw); }, torch::TensorOptions().dtype(dtype));
}

}  // namespace unstuck::model
