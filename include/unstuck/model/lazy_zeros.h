// Large zero-filled buffers whose pages are not touched until they are used. torch::zeros writes
// every byte at once (gigabytes at a real model's size: seconds of page faults at start-up before
// anything runs); on the CPU these come from calloc, which for large blocks maps fresh zero pages
// without writing them, so each page costs its fault when the optimizer (or the copy that fills
// it) first reaches it. Buffers of 8 MiB and more are mapped directly and advised as transparent
// huge pages, so that first touch faults once per 2 MiB. The memory plan counts them in full.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace unstuck::model {

// A contiguous 1-D tensor of `n` zeros of `dtype` on `device`, 64-byte aligned. On CUDA: torch::zeros.
torch::Tensor lazy_zeros(int64_t n, torch::ScalarType dtype, const torch::Device& device = torch::kCPU);

}  // namespace unstuck::model
