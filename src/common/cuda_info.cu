// What this build and machine offer on the GPU side (CUDA build). Every answer comes from the CUDA
// runtime or NCCL without aborting: no driver, no device or a broken install gives 0 / a reason.
// Builds without CUDA use cuda_info_stub.cpp instead.
#include <cuda_runtime.h>

#include <string>

#include "unstuck/common/cuda_info.h"

#if defined(UNSTUCK_HAVE_NCCL)
#include <nccl.h>
#endif

namespace unstuck {

bool cuda_compiled() { return true; }

int cuda_device_count(std::string* why_not) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // e.g. cudaErrorInsufficientDriver (no driver installed) or cudaErrorNoDevice. Clear the error
    // so a later, unrelated cudaGetLastError() does not report it.
    (void)cudaGetLastError();
    if (why_not) *why_not = std::string("CUDA runtime: ") + cudaGetErrorString(err);
    return 0;
  }
  if (count == 0 && why_not) *why_not = "CUDA runtime reports no devices";
  return count;
}

bool cuda_memory(int device, double* free_bytes, double* total_bytes) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  size_t free = 0, total = 0;
  const cudaError_t err = cudaMemGetInfo(&free, &total);
  (void)cudaSetDevice(previous);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  *free_bytes = double(free);
  *total_bytes = double(total);
  return true;
}

bool nccl_compiled() {
#if defined(UNSTUCK_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

std::string nccl_version() {
#if defined(UNSTUCK_HAVE_NCCL)
  int code = 0;
  const ncclResult_t res = ncclGetVersion(&code);
  if (res != ncclSuccess) return std::string("unavailable (") + ncclGetErrorString(res) + ")";
  // NCCL_VERSION(X, Y, Z) is X*1000 + Y*100 + Z up to 2.8, and X*10000 + Y*100 + Z from 2.9 on.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
#else
  return "unavailable (built without NCCL)";
#endif
}

}  // namespace unstuck
