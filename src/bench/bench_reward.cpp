// `unstuck bench reward`: completions/s of the math verifier on the graded corpus and of the
// countdown verifier on generated problems; the slowest adversarial completion at the configured
// answer length limit; and math-verify (Python) on the same corpus, run as a child process, for
// the speed ratio and both agreements with the human verdicts.
#include "bench/bench_reward.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reward/adversarial_answers.h"
#include "unstuck/common/error.h"
#include "unstuck/data/generators.h"
#include "unstuck/data/record.h"
#include "unstuck/reward/verifier.h"

namespace unstuck::bench {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct Scored {
  data::TaskRecord record;
  std::string completion;
  bool human = false;
};

std::vector<Scored> read_corpus(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError("cannot open --corpus '" + path + "' (run from the repository root)");
  std::vector<Scored> rows;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const Json j = data::parse_json_line(line, path + ":" + std::to_string(n));
    Json record = j;
    record.erase("completion");
    rows.push_back(
        {data::record_from_json(record), j.at("completion").get<std::string>(), j.value("human", "") == "correct"});
  }
  return rows;
}

volatile int64_t sink_ = 0;

// Completions per second of `verifier` over `rows`, best of three timings of `repeats` passes.
double completions_per_second(const reward::Verifier& verifier, const std::vector<Scored>& rows, int repeats) {
  double best = 0.0;
  for (int t = 0; t < 3; ++t) {
    const auto start = Clock::now();
    int64_t sink = 0;
    for (int r = 0; r < repeats; ++r) {
      for (const Scored& s : rows) sink += static_cast<int>(verifier.score(s.completion, s.record).status);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    sink_ = sink;  // keeps the scoring from being optimized away
    best = std::max(best, static_cast<double>(rows.size()) * repeats / seconds);
  }
  return best;
}

std::vector<Scored> countdown_rows() {
  data::CountdownOptions options;
  const auto records = data::generate_countdown(options, 0.1, 1, 2000, data::Split::test);
  std::vector<Scored> rows;
  for (const auto& r : records) {
    rows.push_back({r, "Let me try the numbers.\n<answer>" + r.answer + "</answer>", true});
    rows.push_back({r, "Combining them: <answer>" + r.answer + "+1</answer>", false});
  }
  return rows;
}

// The slowest single completion: each adversarial answer, at the answer length limit, in a tag and
// in a box, inside 4 KB of reasoning text, against gold answers of several kinds.
Json worst_case(const reward::Verifier& verifier, size_t max_answer_chars) {
  std::string reasoning;
  while (reasoning.size() < 4096) reasoning += "We add 12 and 30 to get 42, then \\frac{1}{2} of it. ";
  data::TaskRecord r;
  r.task = "math";
  r.prompt = "q";
  double worst = 0.0;
  std::string worst_answer;
  int64_t count = 0;
  for (const std::string gold : {"22", "x^2+1", "[1, 2)", "\\{1, 2\\}", "\\frac{\\sqrt{3}}{2}"}) {
    r.answer = gold;
    for (const std::string& a : reward::adversarial_math_answers(max_answer_chars)) {
      for (const std::string& c : {reasoning + "<answer>" + a + "</answer>", reasoning + "\\boxed{" + a + "}"}) {
        double s = 1e9;  // fastest of five runs: the input's cost, not the machine's load
        for (int run = 0; run < 5; ++run) {
          const auto start = Clock::now();
          (void)verifier.score(c, r);
          s = std::min(s, std::chrono::duration<double>(Clock::now() - start).count());
        }
        ++count;
        if (s > worst) {
          worst = s;
          worst_answer = a.substr(0, 40);
        }
      }
    }
  }
  return Json{{"completions", count},
              {"answer_chars", max_answer_chars},
              {"completion_chars", reasoning.size() + max_answer_chars + 17},
              {"worst_ms", worst * 1e3},
              {"worst_answer_prefix", worst_answer}};
}

// math-verify on the corpus in a child process: {"n", "seconds", "correct": [...]}, or null when
// the interpreter or math-verify is missing.
Json run_math_verify(const RewardBenchOptions& o) {
  if (o.python.empty()) return nullptr;
  const std::string command = "'" + o.python + "' '" + o.math_verify_script + "' '" + o.corpus + "' 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return nullptr;
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe.get())) output.append(buffer, n);
  try {
    return Json::parse(output);
  } catch (const nlohmann::json::exception&) {
    return nullptr;  // math-verify not installed: the script failed to import it
  }
}

// A GSM8K-style verl compute_score: the number in the last <answer>...</answer> against the ground
// truth, with the verifier's format credit (the user's function the workers time).
constexpr const char* kBenchFunction = R"PY(
import re
_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    found = _TAG.findall(solution_str)
    if not found:
        return 0.0
    try:
        return 1.0 if float(found[-1].strip().replace(",", "")) == float(ground_truth) else 0.1
    except ValueError:
        return 0.1
)PY";

// Completions per second of one score_batch call over `rows` (best of two).
double batch_rate(const reward::Verifier& verifier, const std::vector<Scored>& rows) {
  std::vector<std::string> texts;
  std::vector<const data::TaskRecord*> records;
  for (const Scored& s : rows) {
    texts.push_back(s.completion);
    records.push_back(&s.record);
  }
  double best = 0.0;
  for (int t = 0; t < 2; ++t) {
    const auto start = Clock::now();
    const auto results = verifier.score_batch(texts, records, {});
    sink_ = int64_t(results.size());
    best = std::max(best, double(rows.size()) / std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

// The corpus's rows cycled to n, with a plain-number gold so a float() comparison applies.
std::vector<Scored> arithmetic_rows(int n) {
  std::vector<Scored> rows;
  for (int i = 0; i < n; ++i) {
    Scored s;
    s.record.task = "arithmetic";
    s.record.prompt = std::to_string(i) + "+" + std::to_string(2 * i) + "=";
    s.record.answer = std::to_string(3 * i);
    s.completion = "Adding them: <answer>" + std::to_string(i % 3 == 0 ? 3 * i + 1 : 3 * i) + "</answer>";
    rows.push_back(std::move(s));
  }
  return rows;
}

// MBPP-style records (3 asserts each) with a correct program in a fenced block.
std::vector<Scored> code_rows(int n) {
  std::vector<Scored> rows;
  for (int i = 0; i < n; ++i) {
    Scored s;
    s.record.task = "code";
    s.record.prompt = "Write add_k(x) that returns x + " + std::to_string(i) + ".";
    s.record.answer = "";
    const std::string k = std::to_string(i);
    s.record.fields["test_list"] = {"assert add_k(1) == 1 + " + k, "assert add_k(-5) == -5 + " + k,
                                    "assert add_k(10**6) == 10**6 + " + k};
    s.completion = "Here it is:\n```python\ndef add_k(x):\n    return x + " + k + "\n```\n";
    rows.push_back(std::move(s));
  }
  return rows;
}

// The reward function on 1 and 2 workers and the code verifier on 1 and 2 sandboxes, each with the
// built-in math verifier's rate on the same completions. Null parts when python is not there.
Json worker_rates(const RewardBenchOptions& o) {
  Json out;
  const std::vector<Scored> numbers = arithmetic_rows(o.function_completions);
  reward::RewardConfig config;
  const auto builtin = reward::make_verifier("math", config);
  const double builtin_rate = batch_rate(*builtin, numbers);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("unstuck-bench-reward-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "gsm8k_reward.py").string();
  std::ofstream(file) << kBenchFunction;
  config.function.path = file;
  config.function.python = o.python.empty() ? "python3" : o.python;
  Json functions = Json::array();
  for (int workers : {1, 2}) {
    config.function.workers = workers;
    const auto f = reward::make_verifier("math", config);
    const double rate = batch_rate(*f, numbers);
    functions.push_back({{"workers", workers}, {"completions_per_s", rate}, {"vs_builtin", rate / builtin_rate}});
  }
  std::filesystem::remove_all(dir);
  out["function"] = {{"completions", numbers.size()}, {"builtin_completions_per_s", builtin_rate}, {"runs", functions}};
  const std::vector<Scored> programs = code_rows(o.code_completions);
  reward::RewardConfig code;
  Json sandboxes = Json::array();
  for (int workers : {1, 2}) {
    code.code.workers = workers;
    const auto v = reward::make_verifier("code", code);
    sandboxes.push_back({{"workers", workers}, {"completions_per_s", batch_rate(*v, programs)}});
  }
  out["code"] = {{"completions", programs.size()}, {"tests_per_completion", 3}, {"runs", sandboxes}};
  return out;
}

}  // namespace

void run_reward_bench(const RewardBenchOptions& o, std::ostream& out) {
  const reward::RewardConfig config;
  const std::vector<Scored> corpus = read_corpus(o.corpus);
  const auto math = reward::make_verifier("math", config);
  const auto countdown = reward::make_verifier("countdown", config);
  const std::vector<Scored> cd = countdown_rows();

  Json result;
  int64_t agree = 0, false_positives = 0;
  for (const Scored& s : corpus) {
    const bool ours = math->score(s.completion, s.record).status == reward::RewardStatus::correct;
    agree += ours == s.human;
    false_positives += ours && !s.human;
  }
  const double math_rate = completions_per_second(*math, corpus, o.repeats);
  result["math"] = {{"completions", corpus.size()},
                    {"completions_per_s", math_rate},
                    {"human_agreement", static_cast<double>(agree) / static_cast<double>(corpus.size())},
                    {"false_positives", false_positives}};
  result["countdown"] = {{"completions", cd.size()},
                         {"completions_per_s", completions_per_second(*countdown, cd, o.repeats)}};
  result["worst_case"] = worst_case(*math, static_cast<size_t>(config.max_answer_chars));

  const Json mv = run_math_verify(o);
  if (mv.is_object() && mv.value("n", 0) == static_cast<int64_t>(corpus.size())) {
    int64_t mv_agree = 0;
    for (size_t i = 0; i < corpus.size(); ++i) mv_agree += mv["correct"][i].get<bool>() == corpus[i].human;
    const double mv_rate = static_cast<double>(corpus.size()) / mv["seconds"].get<double>();
    result["math_verify"] = {{"completions_per_s", mv_rate},
                             {"human_agreement", static_cast<double>(mv_agree) / static_cast<double>(corpus.size())}};
    result["speedup_vs_math_verify"] = math_rate / mv_rate;
  } else {
    result["math_verify"] = nullptr;  // not installed (pip install -r requirements-bench.txt)
  }
  const Json workers = worker_rates(o);
  result["function"] = workers["function"];
  result["code"] = workers["code"];
  if (o.json) {
    out << result.dump() << "\n";
    return;
  }
  out << "unstuck bench reward: math on " << corpus.size() << " graded completions, countdown on " << cd.size()
      << " generated ones\n\n"
      << std::fixed << std::setprecision(0);
  out << "math        " << std::setw(12) << math_rate << " completions/s   agreement " << std::setprecision(1)
      << 100.0 * result["math"]["human_agreement"].get<double>() << "%, false positives " << false_positives << "\n";
  out << std::setprecision(0) << "countdown   " << std::setw(12)
      << result["countdown"]["completions_per_s"].get<double>() << " completions/s\n";
  if (!result["math_verify"].is_null()) {
    out << "math-verify " << std::setw(12) << result["math_verify"]["completions_per_s"].get<double>()
        << " completions/s   agreement " << std::setprecision(1)
        << 100.0 * result["math_verify"]["human_agreement"].get<double>() << "%\n"
        << "speedup vs math-verify: " << result["speedup_vs_math_verify"].get<double>() << "x\n";
  } else {
    out << "math-verify: not installed (pip install -r requirements-bench.txt)\n";
  }
  out << std::setprecision(3) << "worst case: " << result["worst_case"]["worst_ms"].get<double>()
      << " ms per completion (answers of " << config.max_answer_chars << " chars)\n"
      << "targets: speedup >= 100, worst case < 10 ms\n";
  out << "\nreward.function (verl compute_score, GSM8K-style) on " << result["function"]["completions"].get<int64_t>()
      << " completions; built-in verifier " << std::setprecision(0)
      << result["function"]["builtin_completions_per_s"].get<double>() << " completions/s\n";
  for (const auto& r : result["function"]["runs"])
    out << "  " << r["workers"].get<int>() << " worker(s) " << std::setw(10) << r["completions_per_s"].get<double>()
        << " completions/s   " << std::setprecision(2) << r["vs_builtin"].get<double>() << "x the built-in\n"
        << std::setprecision(0);
  out << "code verifier on " << result["code"]["completions"].get<int64_t>()
      << " MBPP-style completions (3 asserts each, one sandbox per completion)\n";
  for (const auto& r : result["code"]["runs"])
    out << "  " << r["workers"].get<int>() << " sandbox(es) " << std::setw(8) << std::setprecision(1)
        << r["completions_per_s"].get<double>() << " completions/s\n";
}

}  // namespace unstuck::bench
