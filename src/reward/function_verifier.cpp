// reward.function (the user's Python reward function, verl's or TRL's form) and reward.command (any
// program speaking the workers' JSONL protocol), on reward workers. Each completion becomes an item
// of the style's shape from its task record; items go to the workers in batches of
// reward.function.batch_size.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/common/value_names.h"
#include "unstuck/reward/verifier.h"
#include "unstuck/reward/worker_pool.h"

namespace unstuck::reward {
namespace {

using Json = nlohmann::json;

// verl: data_source (the record's, else its task), solution_str, ground_truth (the answer),
// extra_info (the record's, else {}).
Json verl_item(const std::string& completion, const data::TaskRecord& r) {
  const auto field = [&](const char* key, Json fallback) { return r.fields.contains(key) ? r.fields[key] : fallback; };
  return {{"data_source", field("data_source", r.task)},
          {"solution_str", completion},
          {"ground_truth", r.answer},
          {"extra_info", field("extra_info", Json::object())}};
}

// TRL: the prompt as the dataset has it (chat messages, or text) and the completion in the same
// form; every other column (answer, task, the record's fields) by name.
Json trl_item(const std::string& completion, const data::TaskRecord& r) {
  const bool chat = !r.messages.empty();
  Json columns = r.fields;
  columns["answer"] = r.answer;
  columns["task"] = r.task;
  return {{"prompt", chat ? r.messages : Json(r.prompt)},
          {"completion", chat ? Json::array({{{"role", "assistant"}, {"content", completion}}}) : Json(completion)},
          {"columns", columns}};
}

// A reward command's item: the prompt as the dataset has it, the completion, the record's answer,
// task and other fields.
Json command_item(const std::string& completion, const data::TaskRecord& r) {
  return {{"prompt", r.messages.empty() ? Json(r.prompt) : r.messages},
          {"completion", completion},
          {"answer", r.answer},
          {"task", r.task},
          {"fields", r.fields}};
}

using MakeItem = Json (*)(const std::string&, const data::TaskRecord&);

class WorkerVerifier : public Verifier {
 public:
  WorkerVerifier(const FunctionConfig& f, std::vector<std::string> argv, std::string name, MakeItem make_item)
      : config_(f), make_item_(make_item) {
    WorkerOptions o;
    o.argv = std::move(argv);
    o.name = std::move(name);
    o.workers = f.workers;
    o.timeout_s = f.timeout_s;
    o.start_timeout_s = f.start_timeout_s;
    o.memory_mb = f.memory_mb;
    name_ = o.name;
    pool_ = std::make_unique<WorkerPool>(std::move(o));
    if (make_item_ != trl_item) return;
    const WorkerResult d = pool_->run({Json::array({{{"describe", true}}})}).at(0).at(0);
    if (!d.ok || !d.value.is_object())
      throw UserError(name_ + ": its worker did not describe the function: " + (d.ok ? d.value.dump() : d.error));
    if (!d.value.value("environments", false)) return;
    // It reads TRL's environment_factory instances: the tool workers that hold them call it.
    function_ = {{"path", f.path},
                 {"name", f.name},
                 {"pythonpath", f.pythonpath},
                 {"kwargs", f.kwargs.empty() ? Json::object() : Json::parse(f.kwargs.json)},
                 {"factory_kwargs", f.factory ? Json::parse(f.factory_kwargs.json) : Json()}};
    pool_.reset();
  }

  bool reads_environments() const override { return !function_.is_null(); }

  RewardResult score(const std::string& completion, const data::TaskRecord& record) const override {
    return score_batch({completion}, {&record}, {}).at(0);
  }

  std::vector<RewardResult> score_batch(const std::vector<std::string>& completions,
                                        const std::vector<const data::TaskRecord*>& records,
                                        const ScoringContext& context) const override {
    const std::size_t n = completions.size();
    std::vector<Json> items;
    for (std::size_t i = 0; i < n; ++i) items.push_back(item(completions[i], *records[i], i, context));
    Json state = nullptr;
    if (config_.style == FunctionStyle::trl)
      state = {{"global_step", context.global_step},
               {"max_steps", context.max_steps},
               {"epoch", context.epoch},
               {"num_train_epochs", 1},
               {"is_world_process_zero", context.world_process_zero},
               {"is_local_process_zero", context.world_process_zero}};
    std::vector<RewardResult> out;
    if (reads_environments()) {  // once on each tool worker's rows (TRL: once on each process's)
      if (!context.environments)
        throw UserError(name_ +
                        " takes environments, the instances of TRL's environment_factory: it scores only "
                        "in a run with tools.environment (unstuck train, and unstuck eval of its policy)");
      for (std::size_t i = 0; i < n; ++i) items[i]["slot"] = i;
      for (const WorkerResult& a : context.environments(function_, items, state)) out.push_back(result_of(a));
      return out;
    }
    const std::size_t size = std::size_t(std::max(config_.batch_size, 1));
    std::vector<Json> batches;
    for (std::size_t b = 0; b < n; b += size)
      batches.push_back(Json(std::vector<Json>(items.begin() + b, items.begin() + std::min(n, b + size))));
    const std::vector<std::vector<WorkerResult>> answers = pool_->run(batches, state, context.stop);
    for (const auto& batch : answers)
      for (const WorkerResult& a : batch) out.push_back(result_of(a));
    return out;
  }

  // Completion i's item in the function's (command's) form, with what `context` knows of it.
  Json item(const std::string& completion, const data::TaskRecord& record, std::size_t i,
            const ScoringContext& context) const {
    Json it = make_item_(completion, record);
    if (config_.style == FunctionStyle::trl)  // TRL passes completion_ids always: [] where not known
      it["completion_ids"] = context.completion_ids ? Json(context.completion_ids->at(i)) : Json::array();
    if (context.conversations) {  // tools: TRL's completion is the conversation; a command gets both
      if (make_item_ == command_item)
        it["messages"] = context.conversations->at(i);
      else if (config_.style == FunctionStyle::trl)
        it["completion"] = context.conversations->at(i);
    }
    if (context.responses && make_item_ == verl_item)  // verl decodes the whole multi-turn response
      it["solution_str"] = context.responses->at(i);
    return it;
  }

  static RewardResult result_of(const WorkerResult& a) {
    RewardResult r;
    for (const auto& [key, value] : a.columns.items()) r.columns[key] = value;
    for (const auto& [key, values] : a.metrics.items()) r.metrics[key] = values.get<std::vector<double>>();
    if (!a.ok) {
      r.status = RewardStatus::error;
      r.error = a.error;
    } else if (a.none) {
      r.status = RewardStatus::not_applicable;
      r.reward = std::nan("");
    } else {
      r.reward = a.score;
      for (const auto& [key, value] : a.extra.items()) r.extra[key] = value.get<double>();
      const bool correct = a.extra.contains("acc") ? a.extra["acc"].get<double>() != 0 : a.score >= 1.0;
      r.status = correct ? RewardStatus::correct : RewardStatus::wrong;
    }
    return r;
  }

 private:
  FunctionConfig config_;
  MakeItem make_item_;
  std::string name_;
  std::unique_ptr<WorkerPool> pool_;  // run() is not const; scoring changes no observable state
  Json function_;                     // not null: it reads environments; what the tool workers load
};

}  // namespace

std::string reward_python(const FunctionConfig& f) {
  if (!f.python.empty()) return f.python;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv && *venv && fs::exists(fs::path(venv) / "bin/python", ec))
    return (fs::path(venv) / "bin/python").string();
  if (fs::exists(".venv/bin/python", ec)) return (fs::current_path(ec) / ".venv/bin/python").string();
  return "python3";
}

std::vector<RewardResult> Verifier::score_batch(const std::vector<std::string>& completions,
                                                const std::vector<const data::TaskRecord*>& records,
                                                const ScoringContext&) const {
  std::vector<RewardResult> out;
  out.reserve(completions.size());
  for (std::size_t i = 0; i < completions.size(); ++i) out.push_back(score(completions[i], *records[i]));
  return out;
}

std::unique_ptr<Verifier> make_function_verifier(const RewardConfig& config) {
  if (config.function.path.empty()) throw UserError("reward.function.path: empty (no reward function configured)");
  const FunctionConfig& f = config.function;
  std::vector<std::string> argv =
      python_reward_worker_argv(reward_python(f), f.path, f.name, std::string(enum_name(f.style)));
  for (const std::string& folder : f.pythonpath) argv.insert(argv.end(), {"--pythonpath", folder});
  if (!f.kwargs.empty()) argv.insert(argv.end(), {"--kwargs", f.kwargs.json});
  if (f.factory) argv.insert(argv.end(), {"--factory-kwargs", f.factory_kwargs.json});
  return std::make_unique<WorkerVerifier>(f, std::move(argv), "reward.function " + f.path + ":" + f.name,
                                          f.style == FunctionStyle::verl ? verl_item : trl_item);
}

std::unique_ptr<Verifier> make_command_verifier(const RewardConfig& config) {
  if (config.command.empty()) throw UserError("reward.command: empty (no reward command configured)");
  return std::make_unique<WorkerVerifier>(config.function, config.command, "reward.command " + config.command[0],
                                          command_item);
}

}  // namespace unstuck::reward
