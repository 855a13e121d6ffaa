// The verifier registry (math, arithmetic, countdown, code), the format-credit combination rule, and
// RewardConfig's checks.
#include "unstuck/reward/verifier.h"

#include <algorithm>
#include <memory>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/reward/answer.h"
#include "unstuck/reward/code_config.h"

namespace unstuck::reward {
namespace {

// Correctness from `inner`, then with_format_credit().
class FormatCreditVerifier : public Verifier {
 public:
  FormatCreditVerifier(std::unique_ptr<Verifier> inner, const RewardConfig& config)
      : inner_(std::move(inner)), config_(config) {}

  RewardResult score(const std::string& completion, const data::TaskRecord& record) const override {
    return with_format_credit(inner_->score(completion, record), completion, config_);
  }

 private:
  std::unique_ptr<Verifier> inner_;
  RewardConfig config_;
};

void validate_code(const CodeConfig& c, const std::string& p) {
  if (c.python.empty()) throw UserError(p + "python: empty (the interpreter that runs the programs)");
  if (c.workers < 1 || c.workers > 256) throw UserError(p + "workers must be in [1, 256], got " + std::to_string(c.workers));
  if (!(c.cpu_s > 0 && c.cpu_s <= 3600)) throw UserError(p + "cpu_s must be in (0, 3600], got " + config::format_double(c.cpu_s));
  if (!(c.wall_s > 0 && c.wall_s <= 3600)) throw UserError(p + "wall_s must be in (0, 3600], got " + config::format_double(c.wall_s));
  if (c.memory_mb < 16) throw UserError(p + "memory_mb must be >= 16, got " + std::to_string(c.memory_mb));
  if (c.file_mb < 0) throw UserError(p + "file_mb must be >= 0, got " + std::to_string(c.file_mb));
  if (c.processes < 1) throw UserError(p + "processes must be >= 1, got " + std::to_string(c.processes));
  if (c.output_kb < 1) throw UserError(p + "output_kb must be >= 1, got " + std::to_string(c.output_kb));
  if (c.max_tests < 1) throw UserError(p + "max_tests must be >= 1, got " + std::to_string(c.max_tests));
}

}  // namespace

void validate(const RewardConfig& config, const std::string& prefix) {
  const std::string p = prefix.empty() ? "" : prefix + ".";
  parse_answer_formats(config.answer_formats, p + "answer_formats");
  if (!config.verifier.empty()) {
    const auto names = verifier_names();
    if (std::find(names.begin(), names.end(), config.verifier) == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      throw UserError(p + "verifier: unknown verifier '" + config.verifier + "' (known: " + known +
                      "; empty: the one data.task names)");
    }
  }
  if (!(config.format_reward >= 0.0 && config.format_reward < 1.0)) {
    throw UserError(p + "format_reward must be in [0, 1) (a correct answer earns 1), got " +
                    config::format_double(config.format_reward));
  }
  if (config.max_answer_chars < 1 || config.max_answer_chars > (1 << 20)) {
    throw UserError(p + "max_answer_chars must be in [1, 1048576], got " +
                    std::to_string(config.max_answer_chars));
  }
  if (!(config.math.numeric_tolerance >= 0.0 && config.math.numeric_tolerance < 1.0)) {
    throw UserError(p + "math.numeric_tolerance must be in [0, 1) (relative), got " +
                    config::format_double(config.math.numeric_tolerance));
  }
  if (config.max_expression_depth < 1 || config.max_expression_depth > 1000) {
    throw UserError(p + "max_expression_depth must be in [1, 1000], got " +
                    std::to_string(config.max_expression_depth));
  }
  validate_code(config.code, p + "code.");
  const FunctionConfig& f = config.function;
  const bool function = !f.path.empty(), command = !config.command.empty();
  if (function && command)
    throw UserError(p + "function.path and " + p + "command both set: one of them scores (weighted reward terms are "
                    "not built yet)");
  if (!function && !command) return;
  const std::string what = function ? p + "function.path" : p + "command";
  if (!config.verifier.empty())
    throw UserError(p + "verifier '" + config.verifier + "' and " + what +
                    " both set: one of them scores (weighted reward terms are not built yet)");
  if (command && config.command[0].empty()) throw UserError(p + "command: the program (its first element) is empty");
  const std::string fp = p + "function.";
  if (function && f.name.empty()) throw UserError(fp + "name: empty (the function to call in " + f.path + ")");
  if (function && f.python.empty()) throw UserError(fp + "python: empty (the interpreter that runs " + f.path + ")");
  if (f.workers < 1 || f.workers > 64) throw UserError(fp + "workers must be in [1, 64], got " + std::to_string(f.workers));
  if (f.batch_size < 1) throw UserError(fp + "batch_size must be >= 1, got " + std::to_string(f.batch_size));
  if (!(f.timeout_s > 0 && f.timeout_s <= 86400))
    throw UserError(fp + "timeout_s must be in (0, 86400] seconds, got " + config::format_double(f.timeout_s));
  if (f.memory_mb < 0) throw UserError(fp + "memory_mb must be >= 0 (0 = no limit), got " + std::to_string(f.memory_mb));
  if (!(f.max_error_frac >= 0 && f.max_error_frac <= 1))
    throw UserError(fp + "max_error_frac must be in [0, 1], got " + config::format_double(f.max_error_frac));
}

bool scorer_can_fail(const RewardConfig& config, const std::string& verifier_name) {
  return !config.function.path.empty() || !config.command.empty() || verifier_name == "code";
}

std::string verifier_name(const RewardConfig& config, const std::string& data_task) {
  return config.verifier.empty() ? data_task : config.verifier;
}

std::vector<std::string> verifier_names() { return {"math", "arithmetic", "countdown", "code"}; }

std::unique_ptr<Verifier> make_verifier(const std::string& name, const RewardConfig& config) {
  validate(config);
  if (!config.function.path.empty()) return make_function_verifier(config);
  if (!config.command.empty()) return make_command_verifier(config);
  if (name == "code") return make_code_verifier(config);  // pass or fail: no format credit
  std::unique_ptr<Verifier> correctness;
  if (name == "math") {
    correctness = make_math_verifier(config);
  } else if (name == "arithmetic") {
    correctness = make_number_verifier(config);
  } else if (name == "countdown") {
    correctness = make_countdown_verifier(config);
  } else {
    std::string known;
    for (const std::string& n : verifier_names()) known += (known.empty() ? "" : ", ") + n;
    throw UserError("unknown verifier '" + name + "' (known: " + known + ")");
  }
  return std::make_unique<FormatCreditVerifier>(std::move(correctness), config);
}

RewardResult with_format_credit(RewardResult correctness, const std::string& completion,
                                const RewardConfig& config) {
  if (correctness.status == RewardStatus::correct) return correctness;
  correctness.reward =
      config.format_reward > 0.0 && has_answer_tag(completion) ? config.format_reward : 0.0;
  return correctness;
}

}  // namespace unstuck::reward
