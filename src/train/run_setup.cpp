// Run start-up shared by the commands: the start-up clock, the seeds, the tokenizer file, run.json.
#include "unstuck/train/run_setup.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "unstuck/common/memory_usage.h"
#include "unstuck/config/config.h"
#include "unstuck/train/memory_plan.h"
#include "unstuck/io/json_file.h"

namespace unstuck::train {
namespace {

// SplitMix64: a bijective mix, so distinct (seed, stream) pairs give unrelated stream seeds.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

StartupClock::StartupClock() { mark("launch"); }

void StartupClock::mark(const std::string& stage) {
  const double now = seconds_since_process_start();
  stages_.push_back({stage, now - last_, current_rss_bytes()});
  last_ = now;
}

double StartupClock::seconds() const { return last_; }

std::string StartupClock::summary() const {
  std::string out = fmt::format("{:.1f} s:", last_);
  for (std::size_t i = 0; i < stages_.size(); ++i)
    out += fmt::format("{} {} {:.1f} s", i ? "," : "", stages_[i].name, stages_[i].seconds);
  return out + fmt::format(" (resident {})", format_bytes(double(stages_.back().rss)));
}

nlohmann::json StartupClock::to_json() const {
  nlohmann::json stages = nlohmann::json::array();
  for (const Stage& s : stages_) stages.push_back({{"stage", s.name}, {"seconds", s.seconds}, {"rss_bytes", s.rss}});
  return {{"seconds", last_}, {"stages", stages}};
}

Seeds derive_seeds(uint64_t s) {
  return {mix(s * 4 + 1), mix(s * 4 + 2), mix(s * 4 + 3), mix(s * 4 + 4), mix(mix(s) ^ 0x6c6f7261645f6f75ULL)};
}

std::filesystem::path tokenizer_file(const RunConfig& config) {
  if (!config.tokenizer.path.empty()) return config.tokenizer.path;
  return std::filesystem::path("data") / config::enum_name(config.data.task) / "tokenizer.model";
}

void record_in_run_json(const RunContext& ctx, const nlohmann::json& fields) {
  nlohmann::json run = io::read_json_file(ctx.run_dir / "run.json");
  run.update(fields);
  io::write_json_file(ctx.run_dir / "run.json", run);
}

}  // namespace unstuck::train
