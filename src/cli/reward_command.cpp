// `unstuck reward score`: scores a JSONL file of task records with a "completion" each, by the
// verifier its "task" names (or --task), or by a run config's reward section (--config: its
// verifier, or its reward.function / reward.command on reward workers, or its reward.terms, the
// records read through its data mapping as `train` reads them); each scorer's lines in one batch.
// A completion is a string or chat messages (TRL's [{"role": "assistant", "content": ...}]); an
// optional "completion_ids" (token ids) goes to TRL functions. Without --config a line is one of
// ours ({task, prompt, answer, ...}) or verl's ({data_source, prompt: messages,
// reward_model: {ground_truth}, extra_info}). Writes each input line plus "reward" and "status" (and
// "error" for a scorer's failure, "reward_extra" for its named numbers, "reward_columns" for other
// named values, "reward_metrics" for TRL's log_metric values, "reward_terms" for each term's reward),
// and prints the count, the mean reward (over the scored lines) and the status histogram. Every line
// is checked before anything is written.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/config/run_config.h"
#include "unstuck/data/dataset.h"
#include "unstuck/data/record.h"
#include "unstuck/io/json_file.h"
#include "unstuck/reward/verifier.h"

namespace unstuck::cli {
namespace {

struct ScoreArgs {
  std::string input;
  std::string output;
  std::string run_config;  // --config: a run config whose reward.* scores
  std::string task;        // --task: the verifier of lines without "task" (without --config)
  std::vector<std::string> overrides;
  reward::RewardConfig config;
};

// One input line: the original object (key order kept) and its score.
struct ScoredLine {
  nlohmann::ordered_json object;
  reward::RewardResult result;
};

nlohmann::ordered_json parse_line(const std::string& line, const std::string& where) {
  nlohmann::ordered_json object = data::parse_json_line(line, where);
  if (!object.is_object()) {
    throw UserError(where + ": expected a JSON object, got " + object.type_name());
  }
  if (!object.contains("completion") || !(object["completion"].is_string() || object["completion"].is_array())) {
    throw UserError(where + ": missing \"completion\" (a string, or chat messages) next to the task record");
  }
  return object;
}

// A completion's text: the string, or its messages' contents one after another (TRL's chat form).
std::string completion_text(const nlohmann::ordered_json& completion, const std::string& where) {
  if (completion.is_string()) return completion.get<std::string>();
  std::string text;
  for (std::size_t k = 0; k < completion.size(); ++k) {
    const auto& m = completion[k];
    if (!m.is_object() || !m.contains("content") || !m["content"].is_string())
      throw UserError(where + ": \"completion\" message " + std::to_string(k) +
                      ": expected {\"role\": \"assistant\", \"content\": string}");
    text += m["content"].get<std::string>();
  }
  return text;
}

// The optional "completion_ids": token ids (TRL's completion_ids), else none.
std::vector<int32_t> completion_ids(const nlohmann::ordered_json& object, const std::string& where) {
  std::vector<int32_t> ids;
  if (!object.contains("completion_ids")) return ids;
  const auto& list = object["completion_ids"];
  if (!list.is_array()) throw UserError(where + ": \"completion_ids\" must be a list of token ids");
  for (const auto& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      throw UserError(where + ": \"completion_ids\" must be a list of token ids (integers >= 0), got " + id.dump());
    ids.push_back(int32_t(id.get<int64_t>()));
  }
  return ids;
}

// The line's record: through the run's data mapping (--config), as `train` reads its records; else
// our layout or verl's (answer, else reward_model.ground_truth), the verifier its "task" or --task.
data::TaskRecord record_of(const nlohmann::ordered_json& record_json, const data::DataConfig* mapping,
                           const std::string& task) {
  if (mapping) return data::record_from_mapping(record_json, *mapping);
  nlohmann::ordered_json line = record_json;
  if (!line.contains("task")) {
    if (task.empty())
      throw UserError(
          "missing \"task\" (the verifier: math, arithmetic, countdown, code); give it in the line, "
          "or --task NAME for every line, or --config a run config");
    line["task"] = task;
  }
  if (line.contains("answer") || !data::find_path(line, "reward_model.ground_truth"))
    return data::record_from_json(line);
  data::DataConfig verl;  // verl's layout: the prompt as messages, the answer under reward_model
  verl.answer_key = "reward_model.ground_truth";
  return data::record_from_mapping(line, verl);
}

// The input lines read as `train` reads records (with --config: its data mapping and scorer), each
// with its completion text and token ids, and where it came from.
struct ScoreInput {
  ScoreArgs args;           // --config resolved into args.config
  std::string config_task;  // --config: the data.task that names the verifier when reward.verifier is empty
  std::vector<ScoredLine> scored;
  std::vector<data::TaskRecord> records;
  std::vector<std::string> completions, wheres;
  std::vector<std::vector<int32_t>> ids;
};

ScoreInput read_input(const ScoreArgs& args_in) {
  ScoreInput input;
  ScoreArgs& args = input.args;
  args = args_in;
  std::optional<data::DataConfig> mapping;
  if (!args.run_config.empty()) {
    const RunConfig run = load_run_config(args.run_config, args.overrides);
    args.config = run.reward;
    input.config_task = config::enum_name(run.data.task);
    mapping = run.data;
    if (!args.task.empty())
      throw UserError("reward score: --task goes without --config (its data.task names the verifier)");
  } else if (!args.overrides.empty()) {
    throw UserError("reward score: key=value overrides go with --config (got '" + args.overrides[0] + "')");
  }
  reward::validate(args.config);
  std::ifstream in(args.input);
  if (!in) throw UserError("cannot open --input '" + args.input + "'");
  std::string line;
  for (long long number = 0; io::read_capped_line(in, line, io::kMaxJsonlLineBytes, args.input, number);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = args.input + ":" + std::to_string(number);
    ScoredLine out{parse_line(line, where), {}};
    nlohmann::ordered_json record_json = out.object;
    for (const char* k : {"completion", "completion_ids", "reward", "status", "error", "reward_extra", "reward_columns",
                          "reward_metrics", "reward_terms"})
      record_json.erase(k);
    try {
      input.records.push_back(record_of(record_json, mapping ? &*mapping : nullptr, args.task));
    } catch (const UserError& e) {
      throw UserError(where + ": " + e.what());
    }
    input.completions.push_back(completion_text(out.object["completion"], where));
    input.ids.push_back(completion_ids(out.object, where));
    input.wheres.push_back(where);
    input.scored.push_back(std::move(out));
  }
  return input;
}

// Lines grouped by the scorer that takes them (their task's verifier, or the config's scorer for
// all), each group in one batch: a function's or command's workers, or the code sandboxes, run it
// in parallel. Started once; `score` scores every group and may be called again (bench reward).
struct ScoreGroups {
  struct Group {
    std::vector<std::size_t> lines;
    std::unique_ptr<reward::Verifier> verifier;
    std::vector<std::string> texts;
    std::vector<const data::TaskRecord*> ptrs;
    std::vector<std::vector<int32_t>> ids;
  };
  std::vector<Group> groups;

  explicit ScoreGroups(const ScoreInput& in) {
    const ScoreArgs& args = in.args;
    std::map<std::string, std::vector<std::size_t>> by_name;
    for (std::size_t i = 0; i < in.scored.size(); ++i)
      by_name[args.run_config.empty() ? in.records[i].task : reward::verifier_name(args.config, in.config_task)]
          .push_back(i);
    for (const auto& [name, lines] : by_name) {
      Group g;
      g.lines = lines;
      for (std::size_t i : lines) {
        g.texts.push_back(in.completions[i]);
        g.ptrs.push_back(&in.records[i]);
        g.ids.push_back(in.ids[i]);
      }
      // A scorer that cannot start is named for what chose it: the config, or (without one) the
      // first line whose "task" named it.
      try {
        g.verifier = reward::make_verifier(name, args.config);
      } catch (const UserError& e) {
        throw UserError((args.run_config.empty() ? in.wheres[lines[0]] : "--config " + args.run_config) + ": " +
                        e.what());
      }
      groups.push_back(std::move(g));
    }
  }

  // Scores every line into `scored`; a record a scorer cannot take (countdown without "numbers") is
  // blamed on its group's first line.
  void score(const ScoreInput& in, std::vector<ScoredLine>& scored) const {
    for (const Group& g : groups) {
      reward::ScoringContext context;
      context.completion_ids = &g.ids;
      std::vector<reward::RewardResult> results;
      try {
        results = g.verifier->score_batch(g.texts, g.ptrs, context);
      } catch (const UserError& e) {
        throw UserError(in.wheres[g.lines[0]] + ": " + e.what());
      }
      for (std::size_t k = 0; k < g.lines.size(); ++k) scored[g.lines[k]].result = std::move(results[k]);
    }
  }
};

void score(const ScoreArgs& args_in) {
  ScoreInput input = read_input(args_in);
  const ScoreArgs& args = input.args;
  std::vector<ScoredLine>& scored = input.scored;
  ScoreGroups(input).score(input, scored);
  for (ScoredLine& out : scored) {
    out.object["reward"] = out.result.status == reward::RewardStatus::not_applicable
                               ? nlohmann::json(nullptr)
                               : nlohmann::json(out.result.reward);
    out.object["status"] = config::enum_name(out.result.status);
    if (out.result.status == reward::RewardStatus::error) out.object["error"] = out.result.error;
    for (const auto& [key, value] : out.result.extra) out.object["reward_extra"][key] = value;
    for (const auto& [key, value] : out.result.columns) out.object["reward_columns"][key] = value;
    for (const auto& [key, values] : out.result.metrics) out.object["reward_metrics"][key] = values;
    for (const auto& [name, value] : out.result.terms) out.object["reward_terms"][name] = value;
  }

  // --output -: the JSONL on stdout, and the summary below on stderr so stdout stays JSONL.
  const bool to_stdout = args.output == "-";
  std::FILE* summary = to_stdout ? stderr : stdout;
  if (to_stdout) {
    for (const ScoredLine& s : scored) std::cout << s.object.dump() << "\n";
    std::cout.flush();
    if (!std::cout) throw UserError("failed writing the scored lines to stdout (--output -)");
  } else if (!args.output.empty()) {
    std::ofstream file(args.output);
    if (!file) throw UserError("cannot write --output '" + args.output + "'");
    for (const ScoredLine& s : scored) file << s.object.dump() << "\n";
    file.flush();
    if (!file) throw UserError("failed writing --output '" + args.output + "'");
  }

  std::array<int64_t, reward::kRewardStatusNames.size()> histogram{};
  double total = 0.0;
  int64_t applicable = 0;
  for (const ScoredLine& s : scored) {
    if (s.result.status != reward::RewardStatus::not_applicable) {
      total += s.result.reward;
      ++applicable;
    }
    ++histogram[static_cast<size_t>(s.result.status)];
  }
  const auto count = static_cast<int64_t>(scored.size());
  std::fprintf(summary, "scored %lld completions from %s\n", static_cast<long long>(count), args.input.c_str());
  std::fprintf(summary, "mean reward %.4f\n", applicable > 0 ? total / static_cast<double>(applicable) : 0.0);
  for (const auto& [status, name] : reward::kRewardStatusNames) {
    const int64_t k = histogram[static_cast<size_t>(status)];
    std::fprintf(summary, "  %-14s %8lld  (%5.1f%%)\n", name, static_cast<long long>(k),
                 count > 0 ? 100.0 * static_cast<double>(k) / static_cast<double>(count) : 0.0);
  }
  if (!args.output.empty() && !to_stdout) std::fprintf(summary, "wrote %s\n", args.output.c_str());
}

void add_score(CLI::App& parent) {
  auto args = std::make_shared<ScoreArgs>();
  CLI::App* cmd =
      parent.add_subcommand("score",
                            "Score completions: each JSONL line is a task record plus \"completion\"; \"task\" names "
                            "the verifier (math, arithmetic, countdown, code)");
  cmd->add_option("--input", args->input, "JSONL of task records with a \"completion\" each")->required();
  cmd->add_option("--output", args->output,
                  "JSONL to write: each input line plus \"reward\" and \"status\" (-: stdout, the summary then "
                  "goes to stderr)");
  CLI::Option* cfg = cmd->add_option("--config", args->run_config,
                                     "a run config: its reward.* scores (reward.function, reward.verifier or the "
                                     "verifier of its data.task) instead of each line's \"task\", and its data.* "
                                     "mapping reads the lines as train reads its records");
  cmd->add_option("--task", args->task,
                  "without --config: the verifier of lines that have no \"task\" (verl records, say)")
      ->excludes(cfg);
  cmd->add_option("overrides", args->overrides, "key=value overrides of --config, e.g. reward.function.workers=4");
  cmd->add_option("--format-reward", args->config.format_reward,
                  "reward of a non-correct completion with a non-blank <answer>...</answer>")
      ->capture_default_str()
      ->excludes(cfg);
  cmd->add_option("--answer-formats", args->config.answer_formats,
                  "answer formats tried in order: answer_tag, boxed, hashes, last_expression")
      ->delimiter(',')
      ->capture_default_str()
      ->excludes(cfg);
  cmd->add_option("--numeric-tolerance", args->config.math.numeric_tolerance,
                  "math: relative tolerance between rational answers (0: exact)")
      ->capture_default_str()
      ->excludes(cfg);
  cmd->add_flag("!--units-required", args->config.math.units_optional,
                "math: unit words after a number must match the gold answer's")
      ->excludes(cfg);
  cmd->callback([args] { score(*args); });
}

// "reward.function fn.py:compute_score", "reward.terms (2)", "reward.verifier code", ...
std::string scorer_text(const reward::RewardConfig& c, const std::string& verifier) {
  switch (reward::scorer_kind(c)) {
    case reward::ScorerKind::terms:
      return "reward.terms (" + std::to_string(c.terms.size()) + " terms)";
    case reward::ScorerKind::function:
      return "reward.function " + c.function.path + (c.function.name.empty() ? "" : ":" + c.function.name);
    case reward::ScorerKind::command:
      return "reward.command " + c.command.front();
    case reward::ScorerKind::verifier:
      break;
  }
  return "the " + verifier + " verifier";
}

}  // namespace

void time_configured_scorer(const std::string& config, const std::vector<std::string>& overrides,
                            const std::string& input, int passes, bool json, std::ostream& out) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  ScoreArgs args;
  args.input = input;
  args.run_config = config;
  args.overrides = overrides;
  ScoreInput in = read_input(args);
  if (in.scored.empty()) throw UserError("--input '" + input + "' holds no completions");
  const auto t_start = Clock::now();
  const ScoreGroups groups(in);  // workers and sandboxes start here, as the trainer's do
  const double start_seconds = since(t_start);
  std::vector<double> seconds;
  for (int p = 0; p < passes; ++p) {
    const auto t = Clock::now();
    groups.score(in, in.scored);
    seconds.push_back(since(t));
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double n = double(in.scored.size());
  const double best = sorted.front(), median = sorted[sorted.size() / 2];
  nlohmann::ordered_json statuses = nlohmann::ordered_json::object();
  double total = 0;
  int64_t applicable = 0;
  for (const ScoredLine& s : in.scored) {
    const std::string name = config::enum_name(s.result.status);
    statuses[name] = statuses.value(name, 0) + 1;
    if (s.result.status != reward::RewardStatus::not_applicable) {
      total += s.result.reward;
      ++applicable;
    }
  }
  const std::string verifier = reward::verifier_name(in.args.config, in.config_task);
  const nlohmann::ordered_json result = {{"config", config},
                                         {"input", input},
                                         {"scorer", reward::scorer_key(reward::scorer_kind(in.args.config))},
                                         {"verifier", verifier},
                                         {"completions", in.scored.size()},
                                         {"start_seconds", start_seconds},
                                         {"passes", passes},
                                         {"seconds", seconds},
                                         {"completions_per_s", n / std::max(best, 1e-9)},
                                         {"completions_per_s_median", n / std::max(median, 1e-9)},
                                         {"mean_reward", applicable > 0 ? total / double(applicable) : 0.0},
                                         {"statuses", statuses}};
  if (json) {
    out << result.dump() << "\n";
    return;
  }
  out << "unstuck bench reward --config " << config << ": " << scorer_text(in.args.config, verifier) << " on "
      << in.scored.size() << " completions of " << input << "\n"
      << fmt::format("  start (workers, sandboxes): {:.3f} s\n", start_seconds)
      << fmt::format("  {:.1f} completions/s best of {} pass(es), {:.1f} median ({:.3f} s per pass)\n",
                     n / std::max(best, 1e-9), passes, n / std::max(median, 1e-9), median)
      << fmt::format("  mean reward {:.4f}; statuses {}\n", result["mean_reward"].get<double>(), statuses.dump());
}

void add_reward_command(CLI::App& app) {
  CLI::App* reward = app.add_subcommand("reward", "Verifiers: score completions of task records");
  add_score(*reward);
  // Bare `unstuck reward` prints this command's help (CLI11 runs sub-command callbacks first).
  reward->callback([reward] {
    if (reward->get_subcommands().empty()) throw CLI::CallForHelp();
  });
}

}  // namespace unstuck::cli
