#include "unstuck/train/torch_device.h"

#include "unstuck/common/cuda_info.h"
#include "unstuck/config/device.h"
#include "unstuck/dist/launch_env.h"

namespace unstuck::train {

c10::Device torch_device(const RunConfig& config) {
  const int local_rank = config.run.device != DeviceKind::cpu && cuda_device_count() > 0
                             ? dist::launch_env_from_environment().local_rank : 0;
  const ResolvedDevice d = resolve_device(config, local_rank);
  return d.kind == DeviceKind::cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d.index))
                                    : c10::Device(c10::kCPU);
}

}  // namespace unstuck::train
