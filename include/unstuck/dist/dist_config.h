// Options of multi-process training: which collective engine to use and how long a collective or
// the rendezvous may wait for a peer before the run fails naming it. Ranks themselves come from the
// launcher's environment (RANK, WORLD_SIZE, ...; see launch_env.h), not from the config.
#pragma once

#include <array>
#include <utility>

namespace unstuck::dist {

enum class DistBackend { automatic, gloo, nccl };
inline constexpr std::array<std::pair<DistBackend, const char*>, 3> kDistBackendNames{{
    {DistBackend::automatic, "auto"},
    {DistBackend::gloo, "gloo"},
    {DistBackend::nccl, "nccl"},
}};
constexpr const auto& enum_names(DistBackend) { return kDistBackendNames; }

struct DistConfig {
  DistBackend backend = DistBackend::automatic;  // auto: single process at world size 1, else gloo
  double timeout_s = 300;                        // seconds a rendezvous or collective waits for a peer before failing

  template <class V>
  void visit(V& v) {
    v("backend", backend, "collectives between ranks: auto (gloo when WORLD_SIZE > 1), gloo (CPU, TCP) or nccl (GPUs)");
    v("timeout_s", timeout_s,
      "seconds a rendezvous or collective waits for a peer; then the run stops, naming the rank");
  }
};

}  // namespace unstuck::dist
