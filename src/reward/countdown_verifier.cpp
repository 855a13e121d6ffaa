// The countdown verifier: the answer must be an expression over the record's "numbers", each used
// exactly once, whose exact rational value equals "target". "expr = N" is accepted when N is the
// target. Work is bounded by RewardConfig::max_answer_chars and max_expression_depth.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/reward/answer.h"
#include "reward/expression.h"
#include "unstuck/reward/verifier.h"

namespace unstuck::reward {
namespace {

struct CountdownProblem {
  std::vector<int64_t> numbers;  // sorted
  int64_t target = 0;
};

CountdownProblem read_problem(const data::TaskRecord& record) {
  const nlohmann::json& f = record.fields;
  const bool ok = f.is_object() && f.contains("numbers") && f["numbers"].is_array() && f.contains("target") &&
                  f["target"].is_number_integer() &&
                  std::all_of(f["numbers"].begin(), f["numbers"].end(),
                              [](const nlohmann::json& x) { return x.is_number_integer(); });
  if (!ok) {
    throw UserError(
        "a countdown record needs \"numbers\" (a list of integers) and \"target\" (an "
        "integer); record with prompt '" +
        record.prompt + "' has " + f.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  CountdownProblem problem;
  problem.numbers = f["numbers"].get<std::vector<int64_t>>();
  std::sort(problem.numbers.begin(), problem.numbers.end());
  problem.target = f["target"].get<int64_t>();
  return problem;
}

class CountdownVerifier : public Verifier {
 public:
  explicit CountdownVerifier(const RewardConfig& config)
      : formats_(parse_answer_formats(config.answer_formats, "reward.answer_formats")) {
    limits_.max_chars = static_cast<size_t>(config.max_answer_chars);
    limits_.max_depth = config.max_expression_depth;
  }

  RewardResult score(const std::string& completion, const data::TaskRecord& record) const override {
    const CountdownProblem problem = read_problem(record);
    const auto answer = extract_answer(completion, formats_);
    if (!answer || answer->size() > limits_.max_chars) return {0.0, RewardStatus::no_answer};
    std::string_view expression = *answer;
    // "3*5+7 = 22": the claimed result must be a number, and the target.
    bool claims_target = true;
    const size_t equals = expression.find('=');
    if (equals != std::string_view::npos) {
      const auto claimed = normalize_number(expression.substr(equals + 1));
      if (!claimed) return {0.0, RewardStatus::no_answer};
      claims_target = *claimed == std::to_string(problem.target);
      expression = expression.substr(0, equals);
    }
    const ExpressionResult result = evaluate_expression(expression, limits_);
    switch (result.status) {
      case ExprStatus::empty:
      case ExprStatus::syntax_error:
      case ExprStatus::too_long:
      case ExprStatus::too_deep:
        return {0.0, RewardStatus::no_answer};
      default:
        break;
    }
    std::vector<int64_t> used = result.literals;
    std::sort(used.begin(), used.end());
    if (used != problem.numbers) return {0.0, RewardStatus::invalid};
    if (result.status != ExprStatus::ok) return {0.0, RewardStatus::invalid};
    const bool hits = result.value.den == 1 && result.value.num == problem.target;
    if (hits && claims_target) return {1.0, RewardStatus::correct};
    return {0.0, RewardStatus::wrong};
  }

 private:
  std::vector<AnswerFormat> formats_;
  ExpressionLimits limits_;
};

}  // namespace

std::unique_ptr<Verifier> make_countdown_verifier(const RewardConfig& config) {
  return std::make_unique<CountdownVerifier>(config);
}

}  // namespace unstuck::reward
