// libFuzzer target: the YAML config loader with overrides, validation and the pre-flight memory
// estimate. Input: YAML text, then (after a 0x01 byte) `key=value` override lines. Any input must
// load or give a UserError.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/train/memory_plan.h"
#include "unstuck/config/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find('\x01');
  unstuck::RunConfig config;
  const unstuck::config::Field root = unstuck::config::bind(config);
  try {
    unstuck::config::load_yaml_string(root, input.substr(0, split), "fuzz.yaml");
    if (split != std::string::npos) {
      std::istringstream overrides(input.substr(split + 1));
      for (std::string line; std::getline(overrides, line);) unstuck::config::apply_override(root, line);
    }
    unstuck::validate(config);
    if (config.model.vocab_size == 0) config.model.vocab_size = 1000;
    unstuck::train::check_limits(config);
    for (const char* command : {"sft", "train", "eval"})
      unstuck::train::check_memory(unstuck::train::plan_memory(config, command),
                                   unstuck::train::host_memory_limit(1e12));
    (void)unstuck::resolved_yaml(config);
  } catch (const unstuck::UserError&) {
  }
  return 0;
}
