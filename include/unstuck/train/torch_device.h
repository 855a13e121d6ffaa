// The torch device a command computes on, from `run.device` (config/device.h decides; this turns
// the answer into a c10::Device). Light: no torch/torch.h.
#pragma once

#include <c10/core/Device.h>

#include "unstuck/config/device.h"
#include "unstuck/config/run_config.h"

namespace unstuck::train {

// run.device resolved for this process: auto takes this rank's CUDA device (LOCAL_RANK, read only
// when there is a GPU to pick) when one is usable, else the CPU; cuda without a usable device throws
// a UserError naming the key.
c10::Device torch_device(const RunConfig& config);
// A device already resolved (a run's plan holds its rank's) as a c10::Device.
c10::Device torch_device(const ResolvedDevice& device);

}  // namespace unstuck::train
