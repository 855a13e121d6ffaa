// The math verifier (also used for arithmetic): reads the final answer in the configured formats
// and compares it with the record's answer as normalized numbers, exactly (no tolerance). A
// record whose answer is not a number is compared as trimmed text.
#include <memory>
#include <string>

#include "unstuck/reward/answer.h"
#include "unstuck/reward/verifier.h"

namespace unstuck::reward {
namespace {

// Trimmed of spaces and surrounding $, for comparing non-numeric gold answers.
std::string plain_text(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n$");
  if (begin == std::string::npos) return "";
  const size_t end = s.find_last_not_of(" \t\r\n$");
  return s.substr(begin, end - begin + 1);
}

class MathVerifier : public Verifier {
 public:
  explicit MathVerifier(const RewardConfig& config)
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

}  // namespace unstuck::reward
