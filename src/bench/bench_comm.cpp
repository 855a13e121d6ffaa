// `unstuck bench comm`: optimizer steps of TrainableWeights (random gradients, the config's model
// shape and precision mode) at world size 1 in this process and at world size 2 in two ranks that
// this command launches on loopback; reports per-step collective bytes and seconds against the
// ZeRO-1 minimum.
#include "bench/bench_comm.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "unstuck/config/config.h"
#include "unstuck/config/run_config.h"
#include "unstuck/dist/communicator.h"
#include "unstuck/dist/launcher.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/compute_choice.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::bench {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// The config's policy shape: its base model's when present, else the `model` section.
model::ModelConfig model_shape(const RunConfig& cfg) {
  if (fs::exists(fs::path(cfg.grpo.base_model) / "config.json"))
    return model::load_pretrained(cfg.grpo.base_model).config;
  model::ModelConfig m = cfg.model;
  if (m.vocab_size == 0) m.vocab_size = 1024;
  return m;
}

// Per optimizer step after the first: collective bytes and seconds, and the whole step's seconds.
Json measure(dist::Communicator& comm, const RunConfig& cfg, int64_t steps) {
  const model::ModelConfig mc = model_shape(cfg);
  const int64_t total = model::llama_layout(mc).total;
  torch::Tensor master = torch::randn({total}, at::make_generator<at::CPUGeneratorImpl>(1)) * 0.02;
  // The forward's dtype (precision.compute) plays no part in an optimizer step.
  train::TrainableWeights w(mc, master, train::with_compute(cfg.precision, precision::ComputeMode::native), 7, &comm);
  const auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
  double seconds = 0;
  for (int64_t k = 0; k < steps; ++k) {
    w.add_flat_grad(torch::randn({total}, gen) * 1e-3);
    if (k == 1) comm.reset_stats();
    const auto t0 = std::chrono::steady_clock::now();
    w.optimizer_step(cfg.optim, cfg.optim.lr);
    if (k >= 1) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double n = double(steps - 1);
  const std::size_t compute_bytes = w.compute().element_size();
  const double W = comm.world_size();
  const double minimum = (W - 1) / W * double(total) * double(4 + compute_bytes);
  Json j{{"world_size", comm.world_size()},
         {"backend", comm.backend_name()},
         {"parameters", total},
         {"compute_dtype_bytes", compute_bytes},
         {"bytes_per_step", double(comm.stats().bytes) / n},
         {"zero1_minimum_bytes", minimum},
         {"collective_calls_per_step", double(comm.stats().calls) / n},
         {"collective_seconds_per_step", comm.stats().seconds / n},
         {"optimizer_step_seconds", seconds / n}};
  j["bytes_over_minimum"] = minimum > 0 ? j["bytes_per_step"].get<double>() / minimum : 0.0;
  return j;
}

}  // namespace

void run_comm_bench(const CommBenchOptions& opt, std::ostream& out) {
  RunConfig cfg = load_run_config(fs::exists(opt.config) ? fs::path(opt.config) : fs::path());
  const int64_t steps = std::max<int64_t>(2, opt.steps);
  if (!opt.worker_out.empty()) {
    const auto comm = dist::make_gloo_communicator(dist::launch_env_from_environment(), 120);
    const Json j = measure(*comm, cfg, steps);
    if (comm->rank() == 0) std::ofstream(opt.worker_out) << j.dump() << "\n";
    return;
  }
  const auto single = dist::make_single_process_communicator();
  const Json one = measure(*single, cfg, steps);
  const fs::path tmp = fs::temp_directory_path() / ("unstuck_bench_comm_" + std::to_string(::getpid()) + ".json");
  dist::LaunchOptions lo;
  lo.command = {fs::read_symlink("/proc/self/exe").string(),
                "bench",
                "comm",
                "--config",
                opt.config,
                "--steps",
                std::to_string(steps),
                "--worker-out",
                tmp.string()};
  lo.nproc = 2;
  if (dist::launch_local(lo, std::cerr) != 0) throw std::runtime_error("bench comm: the world-size-2 ranks failed");
  std::ifstream in(tmp);
  const Json two = Json::parse(in);
  fs::remove(tmp);
  const Json result{{"config", opt.config},
                    {"precision", config::enum_name(cfg.precision.mode)},
                    {"measured_steps", steps - 1},
                    {"world_size_1", one},
                    {"world_size_2", two}};
  if (opt.json) {
    out << result.dump() << "\n";
    return;
  }
  out << "unstuck bench comm: ZeRO-1 optimizer step of " << one["parameters"].get<int64_t>() << " parameters ("
      << config::enum_name(cfg.precision.mode) << "), mean of " << steps - 1 << " steps after a warm-up\n\n"
      << std::left << std::setw(7) << "world" << std::right << std::setw(10) << "backend" << std::setw(15)
      << "bytes/step" << std::setw(15) << "ZeRO-1 min" << std::setw(9) << "ratio" << std::setw(8) << "calls"
      << std::setw(14) << "collective s" << std::setw(12) << "step s"
      << "\n";
  for (const Json* j : {&one, &two})
    out << std::left << std::setw(7) << (*j)["world_size"].get<int>() << std::right << std::setw(10)
        << (*j)["backend"].get<std::string>() << std::setw(15) << std::fixed << std::setprecision(0)
        << (*j)["bytes_per_step"].get<double>() << std::setw(15) << (*j)["zero1_minimum_bytes"].get<double>()
        << std::setw(9) << std::setprecision(3) << (*j)["bytes_over_minimum"].get<double>() << std::setw(8)
        << std::setprecision(0) << (*j)["collective_calls_per_step"].get<double>() << std::setw(14)
        << std::setprecision(4) << (*j)["collective_seconds_per_step"].get<double>() << std::setw(12)
        << (*j)["optimizer_step_seconds"].get<double>() << "\n";
  out << "\nbytes: per rank, ring algorithms (nccl-tests bus-bandwidth convention); ZeRO-1 minimum = "
         "(W-1)/W x parameters x (4 B gradient + compute-weight bytes)\n";
}

}  // namespace unstuck::bench
