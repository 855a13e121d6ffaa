// What this build and this machine offer on the GPU side. Safe to call on a machine without a GPU
// driver: the answers then say "not usable" and why, nothing aborts.
#pragma once

#include <string>

namespace unstuck {

// True when our CUDA kernels were compiled in (UNSTUCK_CUDA found nvcc).
bool cuda_compiled();
// Number of usable CUDA devices (0 without a driver or device, or when CUDA is not compiled in).
// When 0 and `why_not` is given, it receives a one-line reason.
int cuda_device_count(std::string* why_not = nullptr);
// Free and total memory of CUDA device `device` now (cudaMemGetInfo), in bytes; false (and nothing
// written) without CUDA, without that device, or on a runtime error.
bool cuda_memory(int device, double* free_bytes, double* total_bytes);
// True when the NCCL backend was compiled in.
bool nccl_compiled();
// NCCL library version ("2.28.3") or a reason it is unavailable.
std::string nccl_version();

}  // namespace unstuck
