// Sub-command registration for the `unstuck` binary. Each command lives in its own file and adds
// itself to the CLI11 app here; main.cpp only wires them together and maps exceptions to exit codes.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "unstuck/config/run_config.h"

namespace CLI {
class App;
}

namespace unstuck::cli {

// Thrown by a command that has already reported its failure: main exits with `code` silently.
struct ExitCode {
  int code = 1;
};

void add_config_command(CLI::App& app);     // unstuck config show|check|docs ...
void add_bench_command(CLI::App& app);      // unstuck bench precision|generate|step [--json] ...
void add_data_command(CLI::App& app);       // unstuck data generate --task ... --n ... --out DIR
void add_reward_command(CLI::App& app);     // unstuck reward score --input F [--output G]
void add_tokenizer_command(CLI::App& app);  // unstuck tokenizer train|encode ...
void add_train_commands(CLI::App& app);     // unstuck sft | train | eval | generate
void add_launch_command(CLI::App& app);     // unstuck launch --nproc N -- train --config C
void add_model_commands(CLI::App& app);     // unstuck inspect MODEL_DIR | export --run RUN_DIR --out DIR

// The config of `unstuck train --config C` or `--resume R` (R's config.yaml, into R wherever it
// now is), with `overrides` applied. Throws UserError when neither is given.
RunConfig load_train_config(const std::string& config, const std::string& resume,
                            const std::vector<std::string>& overrides);

// `unstuck bench reward --config C --input F`: C's scorer (reward.function, reward.command,
// reward.terms or a verifier, as `train` would start it) timed over F's completions (read as
// `reward score --config C` reads them), `passes` times after its start; a table or one JSON object.
void time_configured_scorer(const std::string& config, const std::vector<std::string>& overrides,
                            const std::string& input, int passes, bool json, std::ostream& out);

}  // namespace unstuck::cli
