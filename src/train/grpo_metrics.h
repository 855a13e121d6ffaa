// Private: where a GRPO run's metrics go. One writer per run: a line per rollout batch in
// <run dir>/metrics.jsonl, the same scalars as TensorBoard events, and the console progress line.
// On resume, metrics.jsonl keeps the lines of the steps up to the checkpoint (a torn last line of a
// killed run is dropped) and the new steps are appended.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "unstuck/log/tensorboard.h"

namespace unstuck::train {

using MetricsLine = nlohmann::ordered_json;

// A step's sums over this rank's rows, by name; every rank's are added by one all-reduce of
// flat() (visit()'s order, the config's idiom) and assign() reads the sums back.
struct StepSums {
  // Rows and groups of the batch.
  double correct = 0, generated_tokens = 0, truncated = 0, kl_penalty = 0, reward_errors = 0;
  double zero_variance_groups = 0, groups = 0;
  // Over the completion tokens, from the measurement before the update.
  double tokens = 0, kl_ref_k3 = 0, kl_ref_exact = 0, entropy = 0, logprob_mismatch = 0, logprob_mismatch_k3 = 0;
  double tis_weight = 0, tis_clipped = 0;
  // Per optimizer step: the tokens, and those clipped (any side, low, high, dual).
  std::vector<double> update_tokens, clipped, clipped_low, clipped_high, dual_clipped;
  // The training forwards: positions through them (each distinct prompt once per row chunk plus the
  // completions, per optimizer pass), completion positions computed and the sampled tokens among them.
  double forward_positions = 0, completion_positions = 0, completion_tokens = 0;
  // Compute weights changed from the start, each rank counting its shard, and the ranks that could not.
  double changed = 0, ranks_not_counting = 0;
  // The largest abs(sampler's - trainer's log-prob) over this rank's completion tokens; not a sum
  // (not in visit()): the ranks' maximum is gathered apart.
  double logprob_mismatch_max = 0;

  // The order of the flat buffer is fixed (an all-reduce's summation order may depend on the position).
  template <class V>
  void visit(V&& v) {
    for (double* x : {&correct, &generated_tokens, &zero_variance_groups, &groups, &kl_ref_k3, &kl_ref_exact, &entropy,
                      &logprob_mismatch, &tokens, &truncated, &logprob_mismatch_k3, &kl_penalty, &tis_weight,
                      &tis_clipped, &reward_errors})
      v(*x);
    for (std::vector<double>* part : {&clipped, &update_tokens, &clipped_low, &clipped_high, &dual_clipped})
      for (double& x : *part) v(x);
    for (double* x : {&completion_positions, &completion_tokens, &ranks_not_counting, &changed, &forward_positions})
      v(*x);
  }
  std::vector<double> flat() {
    std::vector<double> out;
    visit([&](double& x) { out.push_back(x); });
    return out;
  }
  void assign(const std::vector<double>& values) {
    std::size_t i = 0;
    visit([&](double& x) { x = values.at(i++); });
  }
  // The mean over the optimizer steps of `part`'s clipped tokens / tokens.
  double clip_mean(const std::vector<double>& part) const {
    double sum = 0;
    for (std::size_t u = 0; u < part.size(); ++u) sum += part[u] / update_tokens[u];
    return sum / double(part.size());
  }
};

// Keeps the metrics lines of steps <= `last_step` (a resumed run rewrites what came after). A torn
// last line (the run was killed while writing it) is dropped with a warning; a bad line elsewhere is
// an error naming file and line. Returns the first kept line's reward_mean (0 when none).
double truncate_metrics(const std::filesystem::path& path, int64_t last_step);

class MetricsWriter {
 public:
  // `lead`: this rank writes the files (other ranks only print the console line). `resumed_step`:
  // the checkpoint's step when the run continues one. `first_step` .. `last_step`: this run's steps.
  MetricsWriter(const std::filesystem::path& run_dir, bool lead, std::optional<int64_t> resumed_step,
                int64_t first_step, int64_t last_step);

  // reward_mean of the run's first step (from the kept lines on resume; else set by write()).
  double first_reward_mean() const { return first_reward_; }
  // Writes one step's line (its "step" key first) to every sink.
  void write(const MetricsLine& m);

 private:
  void print_console_line(const MetricsLine& m) const;

  bool lead_;
  int64_t first_step_, last_step_;
  double first_reward_ = 0;
  std::ofstream jsonl_;
  std::optional<TensorBoardWriter> tensorboard_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace unstuck::train
