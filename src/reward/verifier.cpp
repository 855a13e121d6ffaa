// The verifier registry (math, arithmetic, countdown, code), the format-credit combination rule, and
// RewardConfig's checks.
#include "unstuck/reward/verifier.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <utility>

#include "unstuck/common/error.h"
#include "unstuck/common/value_names.h"
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
  if (c.workers < 1 || c.workers > 256)
    throw UserError(p + "workers must be in [1, 256], got " + std::to_string(c.workers));
  if (!(c.cpu_s > 0 && c.cpu_s <= 3600))
    throw UserError(p + "cpu_s must be in (0, 3600], got " + format_double(c.cpu_s));
  if (!(c.wall_s > 0 && c.wall_s <= 3600))
    throw UserError(p + "wall_s must be in (0, 3600], got " + format_double(c.wall_s));
  if (c.memory_mb < 16) throw UserError(p + "memory_mb must be >= 16, got " + std::to_string(c.memory_mb));
  if (c.file_mb < 0) throw UserError(p + "file_mb must be >= 0, got " + std::to_string(c.file_mb));
  if (c.max_disk_mb < 1 || c.max_disk_mb > 65536)
    throw UserError(p + "max_disk_mb must be in [1, 65536], got " + std::to_string(c.max_disk_mb));
  if (c.processes < 1) throw UserError(p + "processes must be >= 1, got " + std::to_string(c.processes));
  if (c.output_kb < 1) throw UserError(p + "output_kb must be >= 1, got " + std::to_string(c.output_kb));
  if (c.max_tests < 1) throw UserError(p + "max_tests must be >= 1, got " + std::to_string(c.max_tests));
}

// reward.terms: each term's scorer on every completion (the terms in parallel threads: a function's
// workers, a command's and the code sandboxes then overlap), combined as the weighted sum.
class TermsVerifier : public Verifier {
 public:
  struct Term {
    std::string name;
    double weight = 1.0;
    std::unique_ptr<Verifier> scorer;
  };
  explicit TermsVerifier(std::vector<Term> terms) : terms_(std::move(terms)) {}

  bool reads_environments() const override {
    return std::any_of(terms_.begin(), terms_.end(), [](const Term& t) { return t.scorer->reads_environments(); });
  }

  RewardResult score(const std::string& completion, const data::TaskRecord& record) const override {
    return score_batch({completion}, {&record}, {})[0];
  }

  // As TRL combines its reward functions: a term that returned None for a completion is left out of
  // its sum (and its status is the first scored term's); none scored it: not_applicable, NaN.
  std::vector<RewardResult> score_batch(const std::vector<std::string>& completions,
                                        const std::vector<const data::TaskRecord*>& records,
                                        const ScoringContext& context) const override {
    std::vector<std::future<std::vector<RewardResult>>> running;
    for (const Term& t : terms_)
      running.push_back(
          std::async(std::launch::async, [&] { return t.scorer->score_batch(completions, records, context); }));
    std::vector<std::vector<RewardResult>> by_term;
    for (auto& f : running) by_term.push_back(f.get());  // a term's UserError surfaces here, after all finished
    std::vector<RewardResult> out(completions.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      RewardResult& r = out[i];
      r.status = RewardStatus::not_applicable;
      for (std::size_t k = 0; k < terms_.size(); ++k) {
        const RewardResult& term = by_term[k][i];
        for (const auto& [key, value] : term.columns) r.columns[terms_[k].name + "/" + key] = value;
        for (const auto& [key, values] : term.metrics) r.metrics[terms_[k].name + "/" + key] = values;
        if (term.status == RewardStatus::not_applicable) continue;
        if (r.status == RewardStatus::not_applicable) r.status = term.status;
        r.reward += terms_[k].weight * term.reward;
        r.terms[terms_[k].name] = term.reward;
        for (const auto& [key, value] : term.extra) r.extra[terms_[k].name + "/" + key] = value;
        if (term.status == RewardStatus::error && r.error.empty()) {
          r.status = RewardStatus::error;
          r.error = "reward.terms '" + terms_[k].name + "': " + term.error;
        }
      }
      if (r.status == RewardStatus::not_applicable) r.reward = std::nan("");
    }
    return out;
  }

 private:
  std::vector<Term> terms_;
};

constexpr std::size_t kMaxTerms = 16;

// "math, arithmetic, countdown, code": the names make_verifier() knows, for errors.
std::string known_verifiers() {
  std::string known;
  for (const std::string& n : verifier_names()) known += (known.empty() ? "" : ", ") + n;
  return known;
}

// A scorer that can fail on a completion (reward_error): user code on workers, or the code sandbox.
bool can_fail(const std::string& verifier, const FunctionConfig& function, const std::vector<std::string>& command) {
  return !function.path.empty() || !command.empty() || verifier == "code";
}

// One scorer: at most one of verifier, function.path, command (at least one in a term, `term` its
// key), and the worker options of a function or command. `p` prefixes the keys ("reward.").
void validate_scorer(const std::string& verifier, const FunctionConfig& f, const std::vector<std::string>& command,
                     const std::string& p, const std::string& term) {
  if (!verifier.empty()) {
    const auto names = verifier_names();
    if (std::find(names.begin(), names.end(), verifier) == names.end())
      throw UserError(p + "verifier: unknown verifier '" + verifier + "' (known: " + known_verifiers() +
                      (term.empty() ? "; empty: the one data.task names)" : ")"));
  }
  const bool function = !f.path.empty(), has_command = !command.empty();
  const std::string several =
      term.empty() ? "one of them scores (for several, use reward.terms)" : "a term has one scorer";
  if (function && has_command) throw UserError(p + "function.path and " + p + "command both set: " + several);
  if (!function && !has_command) {
    if (!term.empty() && verifier.empty())
      throw UserError(term + ": no scorer; give one of verifier, function.path, command");
    return;
  }
  const std::string what = function ? p + "function.path" : p + "command";
  if (!verifier.empty()) throw UserError(p + "verifier '" + verifier + "' and " + what + " both set: " + several);
  if (has_command && command[0].empty()) throw UserError(p + "command: the program (its first element) is empty");
  const std::string fp = p + "function.";
  if (function && f.name.empty()) throw UserError(fp + "name: empty (the function to call in " + f.path + ")");
  if (!f.factory && !f.factory_kwargs.empty())
    throw UserError(fp + "factory_kwargs: set while " + fp + "factory is false (set factory: true to call " + f.name +
                    " with them)");
  for (const std::string& folder : f.pythonpath) {
    std::error_code ec;
    if (!std::filesystem::is_directory(folder, ec))
      throw UserError(fp + "pythonpath: '" + folder + "' is not a folder" +
                      (std::filesystem::exists(folder, ec) ? "" : " (it does not exist)"));
  }
  if (f.workers < 1 || f.workers > 64)
    throw UserError(fp + "workers must be in [1, 64], got " + std::to_string(f.workers));
  if (f.batch_size < 1) throw UserError(fp + "batch_size must be >= 1, got " + std::to_string(f.batch_size));
  if (!(f.timeout_s > 0 && f.timeout_s <= 86400))
    throw UserError(fp + "timeout_s must be in (0, 86400] seconds, got " + format_double(f.timeout_s));
  if (!(f.start_timeout_s > 0 && f.start_timeout_s <= 86400))
    throw UserError(fp + "start_timeout_s must be in (0, 86400] seconds, got " + format_double(f.start_timeout_s));
  if (f.memory_mb < 0)
    throw UserError(fp + "memory_mb must be >= 0 (0 = no limit), got " + std::to_string(f.memory_mb));
  if (!(f.max_error_frac >= 0 && f.max_error_frac <= 1))
    throw UserError(fp + "max_error_frac must be in [0, 1], got " + format_double(f.max_error_frac));
}

}  // namespace

void validate(const RewardConfig& config, const std::string& prefix) {
  const std::string p = prefix.empty() ? "" : prefix + ".";
  parse_answer_formats(config.answer_formats, p + "answer_formats");
  if (!(config.format_reward >= 0.0 && config.format_reward < 1.0)) {
    throw UserError(p + "format_reward must be in [0, 1) (a correct answer earns 1), got " +
                    format_double(config.format_reward));
  }
  if (config.max_answer_chars < 1 || config.max_answer_chars > (1 << 20)) {
    throw UserError(p + "max_answer_chars must be in [1, 1048576], got " + std::to_string(config.max_answer_chars));
  }
  if (!(config.math.numeric_tolerance >= 0.0 && config.math.numeric_tolerance < 1.0)) {
    throw UserError(p + "math.numeric_tolerance must be in [0, 1) (relative), got " +
                    format_double(config.math.numeric_tolerance));
  }
  if (config.max_expression_depth < 1 || config.max_expression_depth > 1000) {
    throw UserError(p + "max_expression_depth must be in [1, 1000], got " +
                    std::to_string(config.max_expression_depth));
  }
  validate_code(config.code, p + "code.");
  if (config.terms.empty()) return validate_scorer(config.verifier, config.function, config.command, p, "");
  const std::string tp = p + "terms";
  for (const auto& [key, set] :
       {std::pair<std::string, bool>{"verifier '" + config.verifier + "'", !config.verifier.empty()},
        {"function.path", !config.function.path.empty()},
        {"command", !config.command.empty()}})
    if (set)
      throw UserError(tp + " and " + p + key +
                      " both set: with terms, each term names its scorer (move it into a term)");
  if (config.terms.size() > kMaxTerms)
    throw UserError(tp + ": " + std::to_string(config.terms.size()) + " terms, more than " + std::to_string(kMaxTerms));
  bool any_weight = false;
  const std::vector<std::string> names = term_names(config);
  for (std::size_t i = 0; i < config.terms.size(); ++i) {
    const RewardTerm& t = config.terms[i];
    const std::string at = tp + "[" + std::to_string(i) + "]";
    validate_scorer(t.verifier, t.function, t.command, at + ".", at);
    const std::string& name = names[i];
    const bool plain = std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
    if (name.empty() || !plain)
      throw UserError(at + ".name: '" + name + "' is not a metric name (letters, digits, '_', '-', '.')");
    for (std::size_t j = 0; j < i; ++j)
      if (names[j] == name)
        throw UserError(at + ": the name '" + name + "' is also " + tp + "[" + std::to_string(j) +
                        "]'s; give each term its own name (" + at + ".name)");
    any_weight = any_weight || t.weight != 0;
  }
  if (!any_weight) throw UserError(tp + ": every weight is 0, so every reward would be 0");
}

ScorerKind scorer_kind(const RewardConfig& config) {
  if (!config.terms.empty()) return ScorerKind::terms;
  if (!config.function.path.empty()) return ScorerKind::function;
  if (!config.command.empty()) return ScorerKind::command;
  return ScorerKind::verifier;
}

const char* scorer_key(ScorerKind kind) {
  switch (kind) {
    case ScorerKind::terms:
      return "reward.terms";
    case ScorerKind::function:
      return "reward.function";
    case ScorerKind::command:
      return "reward.command";
    case ScorerKind::verifier:
      break;
  }
  return "reward.verifier";
}

RewardConfig term_config(const RewardConfig& config, std::size_t i) {
  RewardConfig single = config;
  single.terms.clear();
  single.verifier = config.terms.at(i).verifier;
  single.function = config.terms.at(i).function;
  single.command = config.terms.at(i).command;
  return single;
}

int64_t scorer_workers(const RewardConfig& config) {
  switch (scorer_kind(config)) {
    case ScorerKind::terms: {
      int64_t n = 0;
      for (std::size_t i = 0; i < config.terms.size(); ++i) n += scorer_workers(term_config(config, i));
      return n;
    }
    case ScorerKind::function:
    case ScorerKind::command:
      return config.function.workers;
    case ScorerKind::verifier:
      break;
  }
  return 0;
}

std::vector<std::string> term_names(const RewardConfig& config) {
  std::vector<std::string> names;
  for (const RewardTerm& t : config.terms)
    names.push_back(!t.name.empty()       ? t.name
                    : !t.verifier.empty() ? t.verifier
                    : t.command.empty()   ? t.function.name
                                          : std::string("command"));
  return names;
}

ErrorLimit error_limit(const RewardConfig& config, const std::string& verifier_name) {
  const ScorerKind kind = scorer_kind(config);
  if (kind != ScorerKind::terms) {
    const std::string scorer = scorer_key(kind) + (kind == ScorerKind::verifier ? " " + verifier_name : "");
    return {config.function.max_error_frac, "reward.function.max_error_frac", scorer};
  }
  ErrorLimit limit{1.0, "", "reward.terms"};
  for (std::size_t i = 0; i < config.terms.size(); ++i) {
    const RewardTerm& t = config.terms[i];
    if (can_fail(t.verifier, t.function, t.command) &&
        (limit.key.empty() || t.function.max_error_frac < limit.max_frac))
      limit = {t.function.max_error_frac, "reward.terms[" + std::to_string(i) + "].function.max_error_frac",
               "reward.terms"};
  }
  return limit;
}

bool scorer_can_fail(const RewardConfig& config, const std::string& verifier_name) {
  if (!config.terms.empty()) return !error_limit(config, verifier_name).key.empty();
  return can_fail(verifier_name, config.function, config.command);
}

std::string verifier_name(const RewardConfig& config, const std::string& data_task) {
  return config.verifier.empty() ? data_task : config.verifier;
}

std::vector<std::string> verifier_names() { return {"math", "arithmetic", "countdown", "code"}; }

std::unique_ptr<Verifier> make_verifier(const std::string& name, const RewardConfig& config) {
  validate(config);
  switch (scorer_kind(config)) {
    case ScorerKind::terms: {
      std::vector<TermsVerifier::Term> terms;
      const std::vector<std::string> names = term_names(config);
      for (std::size_t i = 0; i < config.terms.size(); ++i)
        terms.push_back(
            {names[i], config.terms[i].weight, make_verifier(config.terms[i].verifier, term_config(config, i))});
      return std::make_unique<TermsVerifier>(std::move(terms));
    }
    case ScorerKind::function:
      return make_function_verifier(config);
    case ScorerKind::command:
      return make_command_verifier(config);
    case ScorerKind::verifier:
      break;
  }
  if (name == "code") return make_code_verifier(config);  // pass or fail: no format credit
  std::unique_ptr<Verifier> correctness;
  if (name == "math") {
    correctness = make_math_verifier(config);
  } else if (name == "arithmetic") {
    correctness = make_number_verifier(config);
  } else if (name == "countdown") {
    correctness = make_countdown_verifier(config);
  } else {
    throw UserError("unknown verifier '" + name + "' (known: " + known_verifiers() + ")");
  }
  return std::make_unique<FormatCreditVerifier>(std::move(correctness), config);
}

RewardResult with_format_credit(RewardResult correctness, const std::string& completion, const RewardConfig& config) {
  if (correctness.status == RewardStatus::correct) return correctness;
  correctness.reward = config.format_reward > 0.0 && has_answer_tag(completion) ? config.format_reward : 0.0;
  return correctness;
}

}  // namespace unstuck::reward
