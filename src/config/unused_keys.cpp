// unused_keys(): the config tree walked against a default one; each key set away from its default
// is checked against the rules below, first match wins. A rule is a key prefix and a test of the
// whole configuration that says why keys under it are not read, or nothing when they are.
#include "unstuck/config/unused_keys.h"

#include <functional>
#include <map>
#include <optional>
#include <set>

#include <spdlog/spdlog.h>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/reward/verifier.h"

namespace unstuck {
namespace {

using Why = std::optional<std::string>;

struct Rule {
  std::string prefix;  // a dotted key, or a section ending in '.'
  std::function<Why(const RunConfig&, const std::string& command, const std::string& key)> unread;
};

// The built-in verifiers that score: the terms' own, else the one reward.verifier or data.task
// names unless a function or a command replaces it.
std::set<std::string> builtin_verifiers(const RunConfig& c) {
  const reward::RewardConfig& r = c.reward;
  std::set<std::string> names;
  switch (reward::scorer_kind(r)) {
    case reward::ScorerKind::terms:
      for (std::size_t i = 0; i < r.terms.size(); ++i) {
        const reward::RewardConfig term = reward::term_config(r, i);
        if (reward::scorer_kind(term) == reward::ScorerKind::verifier && !term.verifier.empty())
          names.insert(term.verifier);
      }
      break;
    case reward::ScorerKind::function:
    case reward::ScorerKind::command:
      break;
    case reward::ScorerKind::verifier:
      names.insert(reward::verifier_name(r, config::enum_name(c.data.task)));
      break;
  }
  return names;
}

std::string scorers_text(const RunConfig& c) {
  const std::set<std::string> names = builtin_verifiers(c);
  if (names.empty()) return "no built-in verifier scores (a reward function or command does)";
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
  return "the verifiers that score are " + text;
}

bool scored_by(const RunConfig& c, std::initializer_list<const char*> verifiers) {
  const std::set<std::string> names = builtin_verifiers(c);
  for (const char* v : verifiers) {
    if (names.count(v) > 0) return true;
  }
  return false;
}

// Which rope_scaling keys each type reads.
bool rope_key_read(model::RopeType type, const std::string& leaf) {
  using model::RopeType;
  if (leaf == "type") return true;
  if (leaf == "factor") return type != RopeType::none;
  if (leaf == "low_freq_factor" || leaf == "high_freq_factor") return type == RopeType::llama3;
  if (leaf == "original_max_len") return type == RopeType::llama3 || type == RopeType::yarn;
  return type == RopeType::yarn;  // beta_fast, beta_slow, attention_factor
}

// reward.answer_formats and reward.max_answer_chars: read where an answer is extracted.
Why answers_extracted(const RunConfig& c, const std::string&, const std::string&) {
  if (scored_by(c, {"math", "arithmetic", "countdown"})) return std::nullopt;
  return "answers are extracted by the math, arithmetic and countdown verifiers, and " + scorers_text(c);
}

// data.arithmetic.* and data.countdown.*: the task generators' settings.
Why generator_settings(const RunConfig&, const std::string&, const std::string&) {
  return "the task generators' settings are read by `unstuck data generate` (its flags), never by a run, which "
         "reads data.train_path or the shipped data";
}

// <section>.warmup_steps and <section>.min_lr_ratio: read by the schedules that have a warm-up and a floor.
Why schedule_key(const config::LrScheduleConfig& s, const std::string& key) {
  const std::string section = key.substr(0, key.find('.'));
  const std::string schedule = section + ".lr_schedule is " + std::string(config::enum_name(s.schedule));
  if (key == section + ".warmup_steps" && s.schedule == config::LrSchedule::constant)
    return "the warm-up of the warmup and cosine schedules; " + schedule;
  if (key == section + ".min_lr_ratio" && s.schedule != config::LrSchedule::cosine)
    return "the floor of the cosine schedule; " + schedule;
  return std::nullopt;
}

Why test_share(const RunConfig&, const std::string&, const std::string&) {
  return "the test share is read by `unstuck data generate --test-fraction`; a run reads data.test_path";
}

Why sft_section(const RunConfig& c, const std::string& command, const std::string& key) {
  if (command == "sft") return schedule_key(c.sft.lr, key);
  return "sft.* is read by `unstuck sft`; this is a `unstuck " + command + "` run";
}

Why grpo_section(const RunConfig& c, const std::string& command, const std::string& key) {
  if (command == "train") return schedule_key(c.grpo.lr, key);
  return "grpo.* is read by `unstuck train`; this is a `unstuck " + command + "` run";
}

Why rollout_section(const RunConfig&, const std::string& command, const std::string& key) {
  // sft samples nothing; its evaluations read the answer length only.
  if (command == "train" || key == "rollout.max_new_tokens") return std::nullopt;
  return "sft evaluates greedily and reads only rollout.max_new_tokens from rollout.*";
}

Why model_section(const RunConfig& c, const std::string& command, const std::string& key) {
  if (key == "model.activation_checkpointing") return std::nullopt;  // a training choice
  if (command == "train") {
    return "`unstuck train` takes the model's shape from grpo.base_model's config.json, which "
           "differs (only model.activation_checkpointing is the run's)";
  }
  const std::string rope = "model.rope_scaling.";
  if (key.rfind(rope, 0) == 0 && !rope_key_read(c.model.rope_scaling.type, key.substr(rope.size()))) {
    return "model.rope_scaling.type is " + std::string(config::enum_name(c.model.rope_scaling.type)) +
           ", which does not read it";
  }
  return std::nullopt;
}

Why tools_section(const RunConfig& c, const std::string& command, const std::string& key) {
  if (command != "train") return "tools.* is read by `unstuck train`; this is a `unstuck " + command + "` run";
  if (key == "tools.functions" || key == "tools.builtin_python" || c.tools.enabled()) return std::nullopt;
  return "tools.functions is empty and tools.builtin_python false, so no tool runs";
}

Why lora_section(const RunConfig& c, const std::string&, const std::string& key) {
  if (key == "lora.rank" || c.lora.enabled()) return std::nullopt;
  return "lora.rank is 0 (full-parameter training); set lora.rank > 0 to train adapters";
}

Why loss_scale_section(const RunConfig& c, const std::string&, const std::string&) {
  if (precision::uses_loss_scaling(c.precision.mode)) return std::nullopt;
  return "precision.mode " + std::string(config::enum_name(c.precision.mode)) +
         " does not scale the loss (fp16 and fp16_sr do)";
}

Why verifier_key(const RunConfig& c, const std::string&, const std::string&) {
  if (!c.reward.terms.empty()) return "reward.terms is set, and each term names its own verifier";
  if (!c.reward.function.path.empty()) return "reward.function.path is set and scores instead";
  if (!c.reward.command.empty()) return "reward.command is set and scores instead";
  return std::nullopt;
}

Why function_keys(const RunConfig& c, const std::string&, const std::string& key) {
  if (!c.reward.terms.empty()) return "reward.terms is set, and each term has its own function";
  // A command's workers take the function's worker options (reward_config.h).
  if (c.reward.function.path.empty() && c.reward.command.empty()) {
    return "reward.function.path is empty, so no reward function runs";
  }
  if (c.reward.function.path.empty()) {
    static const std::set<std::string> kCommandReads = {"reward.function.workers",   "reward.function.batch_size",
                                                        "reward.function.timeout_s", "reward.function.start_timeout_s",
                                                        "reward.function.memory_mb", "reward.function.max_error_frac"};
    if (kCommandReads.count(key) == 0)
      return "reward.function.path is empty; reward.command reads only "
             "the worker options (workers, batch_size, timeout_s, ...)";
  }
  return std::nullopt;
}

Why command_key(const RunConfig& c, const std::string&, const std::string&) {
  if (!c.reward.terms.empty()) return "reward.terms is set, and each term has its own command";
  if (!c.reward.function.path.empty()) return "reward.function.path is set and scores instead";
  return std::nullopt;
}

Why code_keys(const RunConfig& c, const std::string&, const std::string&) {
  if (scored_by(c, {"code"})) return std::nullopt;
  return "it configures the code verifier, and " + scorers_text(c);
}

Why math_keys(const RunConfig& c, const std::string&, const std::string&) {
  if (scored_by(c, {"math"})) return std::nullopt;
  return "it configures the math verifier, and " + scorers_text(c);
}

Why expression_depth_key(const RunConfig& c, const std::string&, const std::string&) {
  if (scored_by(c, {"countdown"})) return std::nullopt;
  return "it configures the countdown verifier, and " + scorers_text(c);
}

Why format_reward_key(const RunConfig& c, const std::string&, const std::string&) {
  if (scored_by(c, {"math", "arithmetic", "countdown"})) return std::nullopt;
  return "format credit is given by the math, arithmetic and countdown verifiers, and " + scorers_text(c);
}

const std::vector<Rule>& rules() {
  static const std::vector<Rule> kRules = {
      // The generator's settings are `unstuck data generate`'s flags; runs read records.
      {"data.arithmetic.", generator_settings},
      {"data.countdown.", generator_settings},
      {"data.test_fraction", test_share},
      // The other command's section.
      {"sft.", sft_section},
      {"grpo.", grpo_section},
      {"rollout.", rollout_section},
      // The model: `train` takes its shape from grpo.base_model's config.json.
      {"model.", model_section},
      {"lora.", lora_section},
      {"tools.", tools_section},
      {"precision.loss_scale.", loss_scale_section},
      // The reward: what the configured scorers read.
      {"reward.verifier", verifier_key},
      {"reward.function.", function_keys},
      {"reward.command", command_key},
      {"reward.code.", code_keys},
      {"reward.math.", math_keys},
      {"reward.max_expression_depth", expression_depth_key},
      {"reward.answer_formats", answers_extracted},
      {"reward.max_answer_chars", answers_extracted},
      {"reward.format_reward", format_reward_key},
  };
  return kRules;
}

bool under(const std::string& key, const std::string& prefix) {
  if (prefix.back() == '.') return key.rfind(prefix, 0) == 0;
  return key == prefix;
}

// Every leaf as dotted key -> value; a list of sections counts by its length.
void leaves(const config::Field& field, const std::string& path, std::map<std::string, config::Value>& out,
            std::vector<std::string>& order) {
  if (field.kind == config::Kind::section) {
    for (const config::Field& child : field.children) {
      leaves(child, path.empty() ? child.name : path + "." + child.name, out, order);
    }
    return;
  }
  order.push_back(path);
  if (field.kind == config::Kind::section_list) {
    out[path] = static_cast<int64_t>(field.size());
  } else {
    out[path] = field.get();
  }
}

}  // namespace

std::vector<UnusedKey> unused_keys(const RunConfig& config, const std::string& command,
                                   const model::ModelConfig* loaded_model) {
  if (command != "train" && command != "sft") return {};
  RunConfig set = config;
  RunConfig defaults;
  RunConfig loaded;  // the defaults with the loaded model's shape: a saved config holds that shape
  if (loaded_model != nullptr && command == "train") {
    loaded.model = *loaded_model;
    loaded.model.activation_checkpointing = defaults.model.activation_checkpointing;
  }
  std::map<std::string, config::Value> values, default_values, loaded_values;
  std::vector<std::string> order, ignored;
  leaves(config::bind(set), "", values, order);
  leaves(config::bind(defaults), "", default_values, ignored);
  leaves(config::bind(loaded), "", loaded_values, ignored);
  std::vector<UnusedKey> unused;
  for (const std::string& key : order) {
    if (values[key] == default_values[key] || values[key] == loaded_values[key]) continue;
    for (const Rule& rule : rules()) {
      if (!under(key, rule.prefix)) continue;
      if (Why why = rule.unread(config, command, key)) unused.push_back({key, *why});
      break;
    }
  }
  return unused;
}

void refuse_unused_keys(const RunConfig& config, const std::string& command, const model::ModelConfig* loaded_model,
                        bool warn_only) {
  const std::vector<UnusedKey> unused = unused_keys(config, command, loaded_model);
  if (unused.empty()) return;
  std::string message = std::to_string(unused.size()) + " key(s) set that this `unstuck " + command +
                        "` run does not read (remove them, or set what reads them):";
  for (const UnusedKey& u : unused) message += "\n  " + u.key + ": " + u.why;
  if (!warn_only) throw UserError(message);
  spdlog::warn("{}\n(the run started with them; they stay unread)", message);
}

std::vector<std::string> unused_key_rule_prefixes() {
  std::vector<std::string> prefixes;
  for (const Rule& rule : rules()) prefixes.push_back(rule.prefix);
  return prefixes;
}

}  // namespace unstuck
