// The rule for silence: a key the chosen command and configuration do not read is an error, never
// a quiet default. unused_keys() walks the whole config tree against a default one and reports
// each key set to something other than its default that a rule says is not read here, with why.
// Keys no rule names are read by every run; tests/config checks that each key of the tree is
// either named by a rule or listed as always read, so a new key needs a decision.
#pragma once

#include <string>
#include <vector>

#include "unstuck/config/run_config.h"

namespace unstuck {

struct UnusedKey {
  std::string key;  // dotted, e.g. "lora.dropout"
  std::string why;  // what makes it unread here, and what would read it
};

// The keys of `config` that `command` ("train" or "sft") does not read, in tree order. Other
// commands (eval, generate) read a handful of sections by name and are not walked. `loaded_model`
// (train): the shape grpo.base_model's config.json gives; a model.* key equal to it is not counted
// as set (a resumed run's saved config holds that shape).
std::vector<UnusedKey> unused_keys(const RunConfig& config, const std::string& command,
                                   const model::ModelConfig* loaded_model = nullptr);

// Throws UserError listing every unused key (one per line) when there is any. With `warn_only`
// (a resumed run, whose config was accepted when it started), logs them as one warning instead.
void refuse_unused_keys(const RunConfig& config, const std::string& command,
                        const model::ModelConfig* loaded_model = nullptr, bool warn_only = false);

// The key prefixes the rules name ("lora.alpha", "sft.", ...), for the coverage test.
std::vector<std::string> unused_key_rule_prefixes();

}  // namespace unstuck
