// What this build offers on the GPU side, for builds without our CUDA kernels (UNSTUCK_CUDA=OFF or
// no nvcc): nothing, with the reason. CUDA builds compile cuda_info.cu instead, so this file is
// empty there.
#if !defined(UNSTUCK_HAVE_CUDA)

#include "unstuck/common/cuda_info.h"

namespace unstuck {

bool cuda_compiled() { return false; }

int cuda_device_count(std::string* why_not) {
  if (why_not) *why_not = "built without CUDA (configure with -DUNSTUCK_CUDA=ON)";
  return 0;
}

bool cuda_memory(int, double*, double*) { return false; }

bool nccl_compiled() { return false; }

std::string nccl_version() { return "unavailable (built without CUDA)"; }

}  // namespace unstuck

#endif  // !defined(UNSTUCK_HAVE_CUDA)
