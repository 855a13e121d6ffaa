// The verifier registry (math, arithmetic, countdown), the format-credit combination rule, and
// RewardConfig's checks.
#include "unstuck/reward/verifier.h"

#include <algorithm>
#include <memory>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/reward/answer.h"

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
  const FunctionConfig& f = config.function;
  if (f.path.empty()) return;
  const std::string fp = p + "function.";
  if (!config.verifier.empty())
    throw UserError(p + "verifier '" + config.verifier + "' and " + fp +
                    "path both set: one of them scores (weighted reward terms are not built yet)");
  if (f.name.empty()) throw UserError(fp + "name: empty (the function to call in " + f.path + ")");
  if (f.python.empty()) throw UserError(fp + "python: empty (the interpreter that runs " + f.path + ")");
  if (f.workers < 1 || f.workers > 64) throw UserError(fp + "workers must be in [1, 64], got " + std::to_string(f.workers));
  if (f.batch_size < 1) throw UserError(fp + "batch_size must be >= 1, got " + std::to_string(f.batch_size));
  if (!(f.timeout_s > 0 && f.timeout_s <= 86400))
    throw UserError(fp + "timeout_s must be in (0, 86400] seconds, got " + config::format_double(f.timeout_s));
  if (f.memory_mb < 0) throw UserError(fp + "memory_mb must be >= 0 (0 = no limit), got " + std::to_string(f.memory_mb));
  if (!(f.max_error_frac >= 0 && f.max_error_frac <= 1))
    throw UserError(fp + "max_error_frac must be in [0, 1], got " + config::format_double(f.max_error_frac));
}

std::string verifier_name(const RewardConfig& config, const std::string& data_task) {
  return config.verifier.empty() ? data_task : config.verifier;
}

std::vector<std::string> verifier_names() { return {"math", "arithmetic", "countdown"}; }

std::unique_ptr<Verifier> make_verifier(const std::string& name, const RewardConfig& config) {
  validate(config);
  if (!config.function.path.empty()) return make_function_verifier(config);
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
