// The `unstuck` command: wires the sub-commands (commands.h) together, reports the build and the
// machine for --version, and turns exceptions into one line on stderr and an exit code
// (2: a mistake the user can fix, 1: anything else; CLI11 parse errors keep CLI11's codes).
#include <torch/cuda.h>
#include <torch/version.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "unstuck/common/allocator.h"
#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#include "unstuck/common/simd.h"
#include "unstuck/log/logging.h"

namespace {

std::string cuda_line() {
  std::string why_not;
  const int devices = unstuck::cuda_device_count(&why_not);
  std::string line = unstuck::cuda_compiled() ? "compiled in" : "not compiled in";
  line += ", " + std::to_string(devices) + " usable device(s)";
  if (devices == 0 && !why_not.empty()) line += ": " + why_not;
  return line;
}

std::string version_report() {
  std::ostringstream out;
  out << "unstuck " << UNSTUCK_VERSION << "\n"
      << "libtorch " << TORCH_VERSION << "\n"
      << "CUDA kernels: " << cuda_line() << "\n"
      << "torch CUDA: " << (torch::cuda::is_available() ? "available" : "not available") << ", "
      << static_cast<int>(torch::cuda::device_count()) << " device(s)\n"
      << "NCCL: " << (unstuck::nccl_compiled() ? "compiled in, " : "") << unstuck::nccl_version() << "\n"
      << "CPU SIMD: " << unstuck::simd_level_name(unstuck::detect_simd_level());
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // Log lines go to stderr from the start, so a command's stdout (bench --json, reward score
    // --output -, generate --json) stays what it says; commands with a run log replace this.
    unstuck::setup_logging(unstuck::LogLevel::info);
    unstuck::keep_freed_memory();
  } catch (const unstuck::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  CLI::App app{
      "unstuck: RLVR (GRPO) training of language models with FP32 master weights and FP16, BF16 or FP8 "
      "compute weights, rounded to nearest or stochastically",
      "unstuck"};
  app.set_version_flag("--version", version_report,
                       "Print the versions of unstuck and libtorch, CUDA and NCCL availability and "
                       "the CPU SIMD level, then exit");
  app.require_subcommand(1);
  unstuck::cli::add_config_command(app);
  unstuck::cli::add_bench_command(app);
  unstuck::cli::add_data_command(app);
  unstuck::cli::add_reward_command(app);
  unstuck::cli::add_tokenizer_command(app);
  unstuck::cli::add_train_commands(app);
  unstuck::cli::add_launch_command(app);
  unstuck::cli::add_model_commands(app);
  if (argc <= 1) {
    std::cout << app.help();
    return 0;
  }
  // CLI11 reports an unknown command as "A subcommand is required"; name it instead.
  const std::string first = argv[1];
  if (first.rfind("-", 0) != 0) {
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == first;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::cerr << "error: unknown command '" << first << "' (commands: " << names << ")\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const unstuck::cli::ExitCode& e) {
    return e.code;
  } catch (const unstuck::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
