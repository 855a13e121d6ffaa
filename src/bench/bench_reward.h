// Private: `unstuck bench reward`, verifier throughput (math on the graded corpus, countdown on
// generated problems), the slowest adversarial completion at the answer length limit, and
// math-verify on the same corpus in the same run as the baseline when it is installed.
#pragma once

#include <ostream>
#include <string>

namespace unstuck::bench {

struct RewardBenchOptions {
  bool json = false;                                        // one JSON object instead of the table
  std::string corpus = "tests/reward/math_corpus.jsonl";    // graded math corpus (task records)
  std::string python = ".venv/bin/python";                  // interpreter with math-verify ("" skips it)
  std::string math_verify_script = "tests/reward/math_corpus/math_verify_score.py";
  int repeats = 20;                                         // passes over the corpus per timing
};

void run_reward_bench(const RewardBenchOptions& options, std::ostream& out);

}  // namespace unstuck::bench
