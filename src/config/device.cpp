// run.device resolution: auto / cpu / cuda plus LOCAL_RANK -> cpu or cuda:<local_rank>.
#include "unstuck/config/device.h"

#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#include "unstuck/dist/launch_env.h"

namespace unstuck {

std::string ResolvedDevice::name() const { return kind == DeviceKind::cuda ? "cuda:" + std::to_string(index) : "cpu"; }

ResolvedDevice resolve_device(DeviceKind requested, int local_rank, int cuda_devices, const std::string& why_not) {
  if (requested == DeviceKind::cpu || (requested == DeviceKind::auto_ && cuda_devices <= 0)) return {};
  if (cuda_devices <= 0)
    throw UserError("run.device is cuda but no CUDA device is usable: " +
                    (why_not.empty() ? std::string("none found") : why_not) + " (set run.device: cpu or auto)");
  if (local_rank < 0 || local_rank >= cuda_devices)
    throw UserError("run.device " + std::string(requested == DeviceKind::cuda ? "cuda" : "auto") + ": LOCAL_RANK " +
                    std::to_string(local_rank) + " has no CUDA device of its own (this machine has " +
                    std::to_string(cuda_devices) +
                    "); start at most that many ranks per machine or set run.device: cpu");
  return {DeviceKind::cuda, local_rank};
}

ResolvedDevice resolve_device(const RunConfig& config, int local_rank) {
  if (config.run.device == DeviceKind::cpu) return {};
  std::string why_not;
  const int n = cuda_device_count(&why_not);
  return resolve_device(config.run.device, local_rank, n, why_not);
}

ResolvedDevice rank_device(const RunConfig& config) {
  if (config.run.device == DeviceKind::cpu) return {};
  std::string why_not;
  const int n = cuda_device_count(&why_not);
  return resolve_device(config.run.device, n > 0 ? dist::launch_env_from_environment().local_rank : 0, n, why_not);
}

}  // namespace unstuck
