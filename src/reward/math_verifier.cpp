// The math verifier: reads the final answer (extract_math_answer) and compares it with the
// record's answer by mathematical equivalence (compare_math_answers). The arithmetic task keeps
// the plain number verifier: exact comparison of normalized numbers, a non-numeric gold answer
// compared as trimmed text.
#include <memory>
#include <string>

#include "unstuck/reward/answer.h"
#include "unstuck/reward/math_answer.h"
#include "unstuck/reward/verifier.h"

namespace unstuck::reward {
namespace {

class MathVerifier : public Verifier {
 public:
  explicit MathVerifier(const RewardConfig& config)
      : formats_(parse_answer_formats(config.answer_formats, "reward.answer_formats")),
        max_answer_chars_(static_cast<size_t>(config.max_answer_chars)),
        options_(config.math) {}

  RewardResult score(const std::string& completion, const data::TaskRecord& record) const override {
    const auto answer = extract_math_answer(completion, formats_, options_);
    if (!answer || answer->size() > max_answer_chars_) return {0.0, RewardStatus::no_answer};
    switch (compare_math_answers(record.answer, *answer, options_)) {
      case MathMatch::equal:
        return {1.0, RewardStatus::correct};
      case MathMatch::different:
        return {0.0, RewardStatus::wrong};
      default:
        return {0.0, RewardStatus::no_answer};
    }
  }

 private:
  std::vector<AnswerFormat> formats_;
  size_t max_answer_chars_;
  MathOptions options_;
};

// Trimmed of spaces and surrounding $, for comparing non-numeric gold answers.
std::string plain_text(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n$");
  if (begin == std::string::npos) return "";
  const size_t end = s.find_last_not_of(" \t\r\n$");
  return s.substr(begin, end - begin + 1);
}

class NumberVerifier : public Verifier {
 public:
  explicit NumberVerifier(const RewardConfig& config)
      : formats_(parse_answer_formats(config.answer_formats, "reward.answer_formats")),
        max_answer_chars_(static_cast<size_t>(config.max_answer_chars)) {}

  RewardResult score(const std::string& completion, const data::TaskRecord& record) const override {
    const auto answer = extract_answer(completion, formats_);
    if (!answer || answer->size() > max_answer_chars_) return {0.0, RewardStatus::no_answer};
    const auto gold = normalize_number(record.answer);
    if (!gold) {
      const bool same = plain_text(*answer) == plain_text(record.answer);
      return {same ? 1.0 : 0.0, same ? RewardStatus::correct : RewardStatus::wrong};
    }
    const auto got = normalize_number(*answer);
    if (!got) return {0.0, RewardStatus::no_answer};
    if (*got == *gold) return {1.0, RewardStatus::correct};
    return {0.0, RewardStatus::wrong};
  }

 private:
  std::vector<AnswerFormat> formats_;
  size_t max_answer_chars_;
};

}  // namespace

std::unique_ptr<Verifier> make_math_verifier(const RewardConfig& config) {
  return std::make_unique<MathVerifier>(config);
}

std::unique_ptr<Verifier> make_number_verifier(const RewardConfig& config) {
  return std::make_unique<NumberVerifier>(config);
}

}  // namespace unstuck::reward
