// Marks functions that run on both host and device. The per-element math of our kernels is written
// once with UNSTUCK_HD so the CPU reference the tests check is the same code the CUDA kernels run.
#pragma once

#if defined(__CUDACC__)
#define UNSTUCK_HD __host__ __device__ __forceinline__
#else
#define UNSTUCK_HD inline
#endif
