// `unstuck launch`: start N ranks of an unstuck command on this machine with the torchrun
// environment (see unstuck/dist/launcher.h), e.g. `unstuck launch --nproc 2 -- train --config C`.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "unstuck/common/error.h"
#include "unstuck/dist/launcher.h"

namespace unstuck::cli {

void add_launch_command(CLI::App& app) {
  auto o = std::make_shared<dist::LaunchOptions>();
  CLI::App* cmd =
      app.add_subcommand("launch",
                         "Start --nproc ranks of an unstuck command on this machine (RANK, WORLD_SIZE, LOCAL_RANK, "
                         "MASTER_ADDR, MASTER_PORT set as torchrun does); forwards Ctrl-C/SIGTERM, stops all ranks "
                         "when one fails");
  cmd->add_option("--nproc", o->nproc, "ranks on this machine")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--nnodes", o->nnodes, "machines in the run (start `unstuck launch` on each)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--node-rank", o->node_rank, "index of this machine")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--master-addr", o->master_addr, "address of the machine with rank 0")->capture_default_str();
  cmd->add_option("--master-port", o->master_port, "rendezvous port on that machine (0: a free one, one machine only)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--grace", o->grace_s, "seconds between SIGTERM and SIGKILL when stopping the ranks")
      ->capture_default_str();
  auto rest = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *rest, "after --: the unstuck command every rank runs, e.g. -- train --config C")
      ->required();
  cmd->footer("Example: unstuck launch --nproc 2 -- train --config configs/grpo/countdown.yaml");
  cmd->callback([o, rest] {
    if (rest->front() == "launch") throw UserError("launch: the command cannot be `launch` itself");
    o->command = {std::filesystem::read_symlink("/proc/self/exe").string()};
    o->command.insert(o->command.end(), rest->begin(), rest->end());
    const int code = dist::launch_local(*o, std::cerr);
    if (code != 0) throw ExitCode{code};
  });
}

}  // namespace unstuck::cli
