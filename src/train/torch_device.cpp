#include "unstuck/train/torch_device.h"

#include "unstuck/config/device.h"

namespace unstuck::train {

c10::Device torch_device(const RunConfig& config) { return torch_device(rank_device(config)); }

c10::Device torch_device(const ResolvedDevice& d) {
  return d.kind == DeviceKind::cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d.index))
                                    : c10::Device(c10::kCPU);
}

}  // namespace unstuck::train
