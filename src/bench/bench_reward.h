// Private: `unstuck bench reward`, verifier throughput (math on the graded corpus, countdown on
// generated problems), the slowest adversarial completion at the answer length limit, and
// math-verify on the same corpus in the same run as the baseline when it is installed; a verl-style
// reward function on 1 and 2 reward workers and the code verifier on 1 and 2 sandboxes, each against
// the built-in math verifier on the same completions in the same run.
#pragma once

#include <ostream>
#include <string>

namespace unstuck::bench {

struct RewardBenchOptions {
  bool json = false;                                      // one JSON object instead of the table
  std::string corpus = "tests/reward/math_corpus.jsonl";  // graded math corpus (task records)
  std::string python = ".venv/bin/python";                // interpreter with math-verify ("" skips it)
  std::string math_verify_script = "tests/reward/math_corpus/math_verify_score.py";
  int repeats = 20;                 // passes over the corpus per timing
  int function_completions = 4000;  // completions a reward function (verl form, on 1 and 2 workers) scores
  int code_completions = 48;        // MBPP-style completions the code verifier runs (on 1 and 2 sandboxes)
};

void run_reward_bench(const RewardBenchOptions& options, std::ostream& out);

}  // namespace unstuck::bench
