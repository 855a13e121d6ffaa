// The one place that decides where a rank computes (`run.device`): auto takes this rank's CUDA
// device (LOCAL_RANK) when one is usable, else the CPU; cuda without a usable device is an error
// naming the key and the reason. Free of libtorch: the trainer turns the answer into a torch device.
#pragma once

#include <string>

#include "unstuck/config/run_config.h"

namespace unstuck {

struct ResolvedDevice {
  DeviceKind kind = DeviceKind::cpu;  // cpu or cuda, never auto
  int index = 0;                      // CUDA device ordinal (0 on the CPU)
  std::string name() const;           // "cpu", "cuda:1"
};

// `cuda_devices`: usable CUDA devices on this machine; `why_not`: the reason when there are none.
// Throws UserError for run.device: cuda with no usable device, or a LOCAL_RANK without its own
// device (ranks on one machine never share a GPU).
ResolvedDevice resolve_device(DeviceKind requested, int local_rank, int cuda_devices, const std::string& why_not);

// resolve_device() with this build's and this machine's CUDA devices (common/cuda_info.h).
ResolvedDevice resolve_device(const RunConfig& config, int local_rank);

// This process's device: resolve_device() with its LOCAL_RANK from the launch environment
// (dist/launch_env.h), read only when there is a GPU to pick. The trainers compute there and the
// pre-flight checks its memory.
ResolvedDevice rank_device(const RunConfig& config);

}  // namespace unstuck
