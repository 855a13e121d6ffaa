// GRPO metrics sinks: metrics.jsonl (truncated to the checkpoint on resume), TensorBoard scalars
// (every number of the line, plus sticking_frac/<tensor>), and the console progress line.
#include "train/grpo_metrics.h"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"

namespace unstuck::train {

double truncate_metrics(const std::filesystem::path& path, int64_t last_step) {
  std::vector<std::string> lines, keep;
  std::ifstream in(path);
  long long number = 0;
  for (std::string line; io::read_capped_line(in, line, io::kMaxJsonlLineBytes, path.string(), number);)
    lines.push_back(line);
  in.close();
  double first_reward = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const std::string where = path.string() + ":" + std::to_string(i + 1);
    nlohmann::json m;
    try {
      m = io::parse_json(lines[i], where);
    } catch (const UserError& e) {
      if (i + 1 != lines.size()) throw;
      spdlog::warn("train: dropping the torn last line of {} (the run was stopped while writing it): {}", path.string(),
                   e.what());
      continue;
    }
    if (!m.is_object() || !m.contains("step") || !m["step"].is_number_integer())
      throw UserError(where + ": expected a metrics object with an integer \"step\"");
    if (m["step"].get<int64_t>() > last_step) continue;
    if (keep.empty() && m.contains("reward_mean") && m["reward_mean"].is_number())
      first_reward = m["reward_mean"].get<double>();
    keep.push_back(lines[i]);
  }
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : keep) out << l << "\n";
  return first_reward;
}

MetricsWriter::MetricsWriter(const std::filesystem::path& run_dir, bool lead, std::optional<int64_t> resumed_step,
                             int64_t first_step, int64_t last_step)
    : lead_(lead), first_step_(first_step), last_step_(last_step) {
  if (!lead_) return;
  const std::filesystem::path path = run_dir / "metrics.jsonl";
  if (resumed_step) first_reward_ = truncate_metrics(path, *resumed_step);
  jsonl_.open(path, resumed_step ? std::ios::app : std::ios::trunc);
  tensorboard_.emplace(run_dir);
}

void MetricsWriter::write(const MetricsLine& m) {
  const int64_t step = m["step"].get<int64_t>();
  if (step == 1) first_reward_ = m["reward_mean"].get<double>();
  if (lead_) {
    jsonl_ << m.dump() << "\n";
    jsonl_.flush();
    std::vector<std::pair<std::string, double>> scalars;
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it.value().is_number() && it.key() != "step") scalars.emplace_back(it.key(), it.value().get<double>());
    if (m.contains("sticking_frac_per_tensor"))
      for (auto it = m["sticking_frac_per_tensor"].begin(); it != m["sticking_frac_per_tensor"].end(); ++it)
        scalars.emplace_back("sticking_frac/" + it.key(), it.value().get<double>());
    tensorboard_->add_scalars(step, scalars);
  }
  print_console_line(m);
}

void MetricsWriter::print_console_line(const MetricsLine& m) const {
  const int64_t step = m["step"].get<int64_t>();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step * 20 / last_step_;
  const std::string eval =
      m.contains("eval_accuracy") ? fmt::format(" | eval {:.3f}", m["eval_accuracy"].get<double>()) : std::string();
  // Steps without the reference metrics (grpo.ref_metrics_every) show "kl -".
  const std::string kl = m.contains("kl_ref_k3") ? fmt::format("{:.2e}", m["kl_ref_k3"].get<double>()) : "-";
  spdlog::info(
      "[{}{}] step {:>4}/{} | reward {:.3f} | acc {:.3f}{} | kl {} | sticking {:.3f} | clip {:.3f} | "
      "{:.1f}s/step, ETA {:.0f}s",
      std::string(std::size_t(done), '#'), std::string(std::size_t(20 - done), '.'), step, last_step_,
      m["reward_mean"].get<double>(), m["accuracy"].get<double>(), eval, kl, m["sticking_frac"].get<double>(),
      m["clip_frac"].get<double>(), m["step_seconds"].get<double>(),
      elapsed / double(step - first_step_ + 1) * double(last_step_ - step));
}

}  // namespace unstuck::train
