// Tools in the rollout: the tool-call parser, the tool workers, and the multi-turn loop.
#include "unstuck/rollout/tools.h"

#include <algorithm>
#include <regex>
#include <chrono>
#include <string>
#include <utility>

#include "unstuck/common/error.h"
#include "unstuck/data/prompt_formatter.h"
#include "unstuck/reward/function_config.h"
#include "unstuck/reward/sandbox.h"
#include "unstuck/reward/worker_pool.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace unstuck::rollout {

namespace {

std::string trimmed(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::vector<ToolCall> parse_hermes(const std::string& text) {
  static const std::string open = "<tool_call>", close = "</tool_call>";
  std::vector<ToolCall> calls;
  for (std::size_t at = text.find(open); at != std::string::npos; at = text.find(open, at)) {
    const std::size_t begin = at + open.size(), end = text.find(close, begin);
    if (end == std::string::npos) return {};  // cut at the token limit: no call
    const auto body = nlohmann::ordered_json::parse(trimmed(text.substr(begin, end - begin)), nullptr, false);
    if (body.is_discarded() || !body.is_object()) return {};
    const auto name = body.find("name");
    if (name == body.end() || !name->is_string()) return {};
    const auto args = body.find("arguments");
    calls.push_back(
        {name->get<std::string>(), args == body.end() || args->is_null() ? nlohmann::ordered_json::object() : *args});
    at = end + close.size();
  }
  return calls;
}

// Llama 3.1: a turn ending `{"name": "<name>", "parameters": <JSON>}<eos>`; `before` receives the
// text ahead of the call.
std::vector<ToolCall> parse_llama3(const std::string& text, const std::string& eos, std::string* before = nullptr) {
  static const std::regex open(R"re(\{"name":\s*"([^"]+)",\s*"parameters":\s*)re");
  std::string rest = text.substr(0, text.find_last_not_of(" \t\r\n") + 1);
  if (eos.empty() || rest.size() < eos.size() || rest.compare(rest.size() - eos.size(), eos.size(), eos) != 0)
    return {};  // no end of turn (cut at the limit): no call
  rest.resize(rest.size() - eos.size());
  std::smatch m;
  if (!std::regex_search(rest, m, open) || rest.empty() || rest.back() != '}') return {};
  const std::size_t body = std::size_t(m.position(0) + m.length(0));
  if (body >= rest.size()) return {};
  const auto args = nlohmann::ordered_json::parse(rest.substr(body, rest.size() - 1 - body), nullptr, false);
  if (args.is_discarded()) return {};
  if (before) *before = rest.substr(0, std::size_t(m.position(0)));
  return {{m[1].str(), args.is_null() ? nlohmann::ordered_json::object() : args}};
}

std::string without_suffix(std::string text, const std::string& suffix) {
  if (!suffix.empty() && text.size() >= suffix.size() &&
      text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0)
    text.resize(text.size() - suffix.size());
  return text;
}

nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls) {
  nlohmann::json out = nlohmann::json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", nlohmann::json::parse(c.arguments.dump())}}}});
  return out;
}

}  // namespace

std::vector<ToolCall> parse_tool_calls(const std::string& text, ToolCallFormat format, const std::string& eos) {
  return format == ToolCallFormat::llama3_json ? parse_llama3(text, eos) : parse_hermes(text);
}

ToolCallFormat tool_call_format(const data::PromptFormatter& format) {
  using Json = nlohmann::ordered_json;
  const Json call = {{"type", "function"},
                     {"function", {{"name", "probe_tool"}, {"arguments", Json{{"probe_argument", 1}}}}}};
  const Json probe = Json::array({Json{{"role", "user"}, {"content", "x"}},
                                  Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}}});
  const std::string shown = format.render_conversation(probe, false);
  if (shown.find("<tool_call>") != std::string::npos) return ToolCallFormat::hermes;
  if (std::regex_search(shown, std::regex(R"re(\{"name":\s*"probe_tool",\s*"parameters":\s*\{"probe_argument")re")))
    return ToolCallFormat::llama3_json;
  throw UserError(
      "tools: the chat template (" + format.describe() +
      ") writes an assistant's tool call in a form Unstuck does not read; it reads <tool_call>{\"name\", "
      "\"arguments\"}</tool_call> blocks (Qwen2.5, Qwen3, Hermes) and Llama 3.1's {\"name\", \"parameters\"} "
      "JSON. The template rendered a call to probe_tool(probe_argument=1) as:\n" +
      shown.substr(shown.size() > 400 ? shown.size() - 400 : 0));
}

nlohmann::json assistant_message(const std::string& text, const std::string& plain, const std::string& eos,
                                 ToolCallFormat format) {
  return read_assistant_turn(text, plain, eos, format).message;
}

AssistantTurn read_assistant_turn(const std::string& text, const std::string& plain, const std::string& eos,
                                  ToolCallFormat format) {
  AssistantTurn turn;
  nlohmann::json& m = turn.message;
  m = {{"role", "assistant"}};
  if (format == ToolCallFormat::llama3_json) {  // the call is the turn's end; the text before it the content
    std::string before;
    turn.calls = parse_llama3(text, eos, &before);
    m["content"] = trimmed(turn.calls.empty() ? without_suffix(text, eos) : before);
    if (!turn.calls.empty()) m["tool_calls"] = tool_calls_json(turn.calls);
    return turn;
  }
  std::string rest = without_suffix(text, eos);
  turn.calls = parse_hermes(rest);
  const std::vector<ToolCall>& calls = turn.calls;
  if (calls.empty() && rest.find("<tool_call>") != std::string::npos) {
    m["content"] = plain;
    return turn;
  }
  const std::size_t lead = rest.find_first_not_of(" \t\n\r");
  const std::size_t think_end = rest.find("</think>");
  if (lead != std::string::npos && rest.compare(lead, 7, "<think>") == 0 && think_end != std::string::npos) {
    m["reasoning_content"] = trimmed(rest.substr(lead + 7, think_end - lead - 7));
    rest = rest.substr(think_end + 8);
  }
  std::string content;  // the last stretch of text outside the blocks (transformers' parser keeps that one)
  for (std::size_t at = 0;;) {
    const std::size_t open = rest.find("<tool_call>", at);
    const std::string piece = trimmed(rest.substr(at, open == std::string::npos ? std::string::npos : open - at));
    if (!piece.empty()) content = piece;
    if (open == std::string::npos) break;
    at = rest.find("</tool_call>", open) + 12;
  }
  m["content"] = content;
  if (!calls.empty()) m["tool_calls"] = tool_calls_json(calls);
  return turn;
}

ToolRunner::ToolRunner(const ToolsConfig& config) {
  reward::FunctionConfig interpreter;
  interpreter.python = config.python;
  const std::string python = reward::reward_python(interpreter);
  nlohmann::ordered_json specs = nlohmann::ordered_json::array();
  std::string names;
  for (const ToolSpec& t : config.functions) {
    specs.push_back({{"path", t.path}, {"name", t.name}});
    names += (names.empty() ? "" : ", ") + t.name;
  }
  reward::WorkerOptions o;
  o.argv = {python, "-c", reward::python_reward_worker_source(), "--style", "tools", "--tools", specs.dump()};
  for (const std::string& folder : config.pythonpath) o.argv.insert(o.argv.end(), {"--pythonpath", folder});
  if (!config.environment.path.empty()) {
    o.argv.insert(
        o.argv.end(),
        {"--environment", nlohmann::json{{"path", config.environment.path}, {"name", config.environment.name}}.dump()});
    names += std::string(names.empty() ? "" : ", ") + "environment " + config.environment.name;
  }
  if (config.builtin_python) {
    o.argv.push_back("--builtin-python");
    names += std::string(names.empty() ? "" : ", ") + "python";
    sandbox_ = std::make_unique<reward::SandboxOptions>();
    sandbox_->limits.cpu_s = config.timeout_s;
    sandbox_->limits.wall_s = config.timeout_s;
    if (config.memory_mb > 0) sandbox_->limits.memory_mb = config.memory_mb;
    sandbox_->parallel = config.workers;
    python_ = reward::sandboxed_python(python, *sandbox_, "tools", "");
  }
  o.name = "tools (" + names + ")";
  // The built-in alone: one worker, for its schema.
  o.workers = config.functions.empty() && config.environment.path.empty() ? 1 : config.workers;
  o.timeout_s = config.timeout_s;
  o.start_timeout_s = config.start_timeout_s;
  o.memory_mb = config.memory_mb;
  pool_ = std::make_unique<reward::WorkerPool>(std::move(o));
  const auto answer = pool_->run({nlohmann::json::array({{{"schemas", true}}})});
  const reward::WorkerResult& r = answer.at(0).at(0);
  if (!r.ok || !r.value.is_string())
    throw UserError("tools: the tool workers did not give the tools' schemas: " + (r.ok ? r.value.dump() : r.error));
  schemas_ = nlohmann::ordered_json::parse(r.value.get<std::string>());
  if (config.environment.path.empty()) return;
  const reward::WorkerResult e = pool_->run({nlohmann::json::array({{{"environment", true}}})}).at(0).at(0);
  if (!e.ok || !e.value.is_object() || !e.value.value("class", nlohmann::json()).is_string())
    throw UserError("tools.environment: the tool workers did not describe the environment: " +
                    (e.ok ? e.value.dump() : e.error));
  environment_class_ = e.value["class"].get<std::string>();
  environment_scores_ = e.value.value("get_reward", false);
}

std::vector<std::string> ToolRunner::reset_environments(const std::vector<nlohmann::json>& kwargs,
                                                        const std::atomic<bool>* cancel) {
  std::vector<nlohmann::json> batches;
  std::vector<int64_t> pinned;
  for (std::size_t i = 0; i < kwargs.size(); ++i) {
    batches.push_back(nlohmann::json::array({{{"reset", i}, {"kwargs", kwargs[i]}}}));
    pinned.push_back(int64_t(i));
  }
  const auto answers = pool_->run(batches, nullptr, cancel, pinned);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    const reward::WorkerResult& r = answers[i].at(0);
    const nlohmann::json observation =
        r.ok && r.value.is_object() ? r.value.value("observation", nlohmann::json(0)) : nlohmann::json(0);
    if (!observation.is_null() && !observation.is_string())
      throw UserError("tools.environment: " + environment_class_ + ".reset of row " + std::to_string(i) +
                      " failed: " + (r.ok ? "the worker answered " + r.value.dump() : r.error));
    out.push_back(observation.is_null() ? "" : observation.get<std::string>());
  }
  return out;
}

std::vector<EnvironmentScore> ToolRunner::environment_rewards(std::size_t n, const std::atomic<bool>* cancel) {
  std::vector<nlohmann::json> batches;
  std::vector<int64_t> pinned;
  for (std::size_t i = 0; i < n; ++i) {
    batches.push_back(nlohmann::json::array({{{"reward", i}}}));
    pinned.push_back(int64_t(i));
  }
  std::vector<EnvironmentScore> out;
  for (const auto& answer : pool_->run(batches, nullptr, cancel, pinned)) {
    const reward::WorkerResult& r = answer.at(0);
    if (r.ok && !r.none)
      out.push_back({r.score, ""});
    else
      out.push_back({0.0, environment_class_ + ".get_reward: " + (r.ok ? std::string("returned None") : r.error)});
  }
  return out;
}

std::vector<reward::WorkerResult> ToolRunner::score_with_environments(const nlohmann::json& function,
                                                                      const std::vector<nlohmann::json>& items,
                                                                      const nlohmann::json& trainer_state,
                                                                      const std::atomic<bool>* cancel) {
  const std::size_t w = std::size_t(workers());
  std::vector<nlohmann::json> batches(std::min(w, items.size()), nlohmann::json::array());
  std::vector<int64_t> pinned;
  for (std::size_t b = 0; b < batches.size(); ++b) pinned.push_back(int64_t(b));
  for (std::size_t i = 0; i < items.size(); ++i) batches[i % w].push_back(items[i]);  // slot i's worker
  std::vector<std::vector<reward::WorkerResult>> answers;
  {
    const std::lock_guard<std::mutex> lock(scoring_);
    answers = pool_->run(batches, {{"score", function}, {"trainer_state", trainer_state}}, cancel, pinned);
  }
  std::vector<reward::WorkerResult> out(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) out[i] = answers[i % w].at(i / w);
  return out;
}

ToolRunner::~ToolRunner() = default;

int ToolRunner::workers() const { return pool_->options().workers; }

std::vector<ToolOutcome> ToolRunner::run_python(const std::vector<ToolCall>& calls) const {
  std::vector<reward::SandboxJob> jobs;
  std::vector<ToolOutcome> out(calls.size());
  std::vector<std::size_t> ran;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const nlohmann::ordered_json& args = calls[i].arguments;
    const auto code = args.is_object() ? args.find("code") : args.end();
    if (!args.is_object() || code == args.end() || !code->is_string() || args.size() != 1) {
      out[i] = {"{'error': 'python takes one argument, code, a string'}", true, 0.0};
      continue;
    }
    jobs.push_back({{python_, "-I", "-"}, code->get<std::string>()});
    ran.push_back(i);
  }
  if (jobs.empty()) return out;
  const std::vector<reward::SandboxOutcome> outcomes = reward::run_sandboxed(jobs, *sandbox_);
  for (std::size_t k = 0; k < ran.size(); ++k) {
    const reward::SandboxOutcome& o = outcomes[k];
    ToolOutcome& t = out[ran[k]];
    t.seconds = o.wall_s;
    if (o.end == reward::SandboxEnd::exited && o.exit_code == 0) {
      t.content = o.out;
      continue;
    }
    t.failed = true;
    if (o.end != reward::SandboxEnd::exited) {
      t.content = o.out + "{'error': '" + reward::outcome_text(o) + "'}";
      continue;
    }
    const std::string err = o.err.substr(0, o.err.find_last_not_of(" \n") + 1);
    const std::size_t line = err.find_last_of('\n');  // the error's last line
    t.content = o.out + err.substr(line == std::string::npos ? 0 : line + 1);
  }
  return out;
}

std::vector<ToolOutcome> ToolRunner::call(const std::vector<ToolCall>& calls, const std::atomic<bool>* cancel) {
  std::vector<ToolCall> python, others;
  std::vector<std::size_t> python_at, others_at;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const bool builtin = sandbox_ && calls[i].name == "python";
    (builtin ? python : others).push_back(calls[i]);
    (builtin ? python_at : others_at).push_back(i);
  }
  std::vector<ToolOutcome> out(calls.size());
  const std::vector<ToolOutcome> ran = run_python(python);
  for (std::size_t k = 0; k < ran.size(); ++k) out[python_at[k]] = ran[k];
  const std::vector<ToolOutcome> called = call_workers(others, cancel);
  for (std::size_t k = 0; k < called.size(); ++k) out[others_at[k]] = called[k];
  return out;
}

std::vector<ToolOutcome> ToolRunner::call_workers(const std::vector<ToolCall>& calls, const std::atomic<bool>* cancel) {
  if (calls.empty()) return {};
  std::vector<nlohmann::json> batches;
  std::vector<int64_t> pinned;  // tools.environment: each call on its row's worker, which holds its instance
  for (const ToolCall& c : calls) {
    batches.push_back(nlohmann::json::array(
        {{{"name", c.name}, {"arguments", nlohmann::json::parse(c.arguments.dump())}, {"slot", c.slot}}}));
    if (has_environment()) pinned.push_back(c.slot);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto answers = pool_->run(batches, nullptr, cancel, pinned);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<ToolOutcome> out;
  for (const auto& answer : answers) {
    const reward::WorkerResult& r = answer.at(0);
    ToolOutcome o;
    o.seconds = seconds;  // a call the worker could not time (it timed out or died) took the round
    if (r.ok && r.value.is_object() && r.value.value("content", nlohmann::json()).is_string()) {
      o.content = r.value["content"].get<std::string>();
      o.failed = r.value.value("failed", true);
      o.seconds = r.value.value("seconds", seconds);
    } else {  // a timeout or a dead worker: the model reads the error as TRL would show it
      o.content = "{'error': '" + (r.ok ? std::string("the tool worker answered ") + r.value.dump() : r.error) + "'}";
      o.failed = true;
    }
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<int32_t> tool_result_tokens(const data::PromptFormatter& format, const tokenizer::Tokenizer& tok,
                                        const std::vector<ToolCall>& calls, const std::vector<ToolOutcome>& results) {
  using Json = nlohmann::ordered_json;
  Json call = {{"type", "function"}, {"function", {{"name", calls.at(0).name}, {"arguments", Json::object()}}}};
  Json dummy = Json::array({Json{{"role", "user"}, {"content", "dummy"}},
                            Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}}});
  std::vector<int32_t> prefix = tok.encode(format.render_conversation(dummy, false));
  for (std::size_t i = 0; i < calls.size(); ++i)
    dummy.push_back({{"role", "tool"}, {"name", calls[i].name}, {"content", results[i].content}});
  const std::vector<int32_t> full = tok.encode(format.render_conversation(dummy, true));
  const auto eos = std::find(prefix.rbegin(), prefix.rend(), tok.eos_id());
  if (tok.eos_id() >= 0 && eos != prefix.rend()) prefix.erase(eos.base(), prefix.end());
  if (full.size() < prefix.size() || !std::equal(prefix.begin(), prefix.end(), full.begin()))
    throw UserError(
        "tools: the chat template's rendering of a tool result does not extend the assistant's turn "
        "(its tokens up to the EOS are not a prefix of the conversation with the tool message); "
        "the template cannot carry tool results");
  return {full.begin() + std::ptrdiff_t(prefix.size()), full.end()};
}

namespace {

// One row between rounds: waiting for its calls (pending) or done.
struct RowState {
  std::vector<ToolCall> calls;
  int64_t iterations = 0;
};

// Appends a row's tool suffix and its next turn, cut to the budget; returns the turn's tokens kept.
std::vector<int32_t> append_turn(Completion& c, const std::vector<int32_t>& suffix, const Completion& next,
                                 int64_t budget, ToolTurnStats& stats) {
  c.tokens.insert(c.tokens.end(), suffix.begin(), suffix.end());
  c.logprobs.insert(c.logprobs.end(), suffix.size(), 0.0f);
  if (c.from_tool.empty()) c.from_tool.assign(c.tokens.size() - suffix.size(), 0);
  c.from_tool.insert(c.from_tool.end(), suffix.size(), 1);
  stats.tool_tokens += int64_t(suffix.size());
  const std::size_t room = std::size_t(budget) - c.tokens.size();
  const std::size_t n = std::min(room, next.tokens.size());
  c.tokens.insert(c.tokens.end(), next.tokens.begin(), next.tokens.begin() + std::ptrdiff_t(n));
  c.logprobs.insert(c.logprobs.end(), next.logprobs.begin(), next.logprobs.begin() + std::ptrdiff_t(n));
  c.from_tool.insert(c.from_tool.end(), n, 0);
  c.finish = n < next.tokens.size() ? FinishReason::length : next.finish;
  ++stats.turns;
  return {next.tokens.begin(), next.tokens.begin() + std::ptrdiff_t(n)};
}

}  // namespace

std::vector<ToolTurnStats> run_tool_turns(const std::vector<std::vector<int32_t>>& prompts,
                                          std::vector<Completion>& completions, const ToolTurnHooks& hooks,
                                          const ToolTurnLimits& limits) {
  const std::size_t n = completions.size();
  std::vector<ToolTurnStats> stats(n);
  std::vector<RowState> rows(n);
  std::vector<int64_t> pending;  // rows whose last turn called tools
  for (std::size_t i = 0; i < n; ++i) {
    AssistantTurn turn = hooks.turn(completions[i].tokens);
    rows[i].calls = std::move(turn.calls);
    if (!rows[i].calls.empty()) pending.push_back(int64_t(i));
    if (!turn.message.is_null()) stats[i].messages.push_back(std::move(turn.message));
  }
  while (!pending.empty()) {
    std::vector<std::vector<ToolCall>> calls;
    for (int64_t r : pending) {
      calls.push_back(rows[std::size_t(r)].calls);
      for (ToolCall& c : calls.back()) c.slot = r;
    }
    const std::vector<std::vector<ToolOutcome>> results = hooks.run(calls);
    std::vector<int64_t> next_rows, offset, max_new;
    std::vector<std::vector<int32_t>> contexts, suffixes;
    for (std::size_t k = 0; k < pending.size(); ++k) {
      const std::size_t r = std::size_t(pending[k]);
      ToolTurnStats& s = stats[r];
      s.calls += int64_t(calls[k].size());
      double wait = 0.0;
      for (const ToolOutcome& o : results[k]) {
        s.failures += o.failed;
        wait = std::max(wait, o.seconds);
      }
      s.seconds += wait;
      ++rows[r].iterations;
      std::vector<int32_t> suffix = hooks.suffix(calls[k], results[k]);
      const int64_t used = int64_t(completions[r].tokens.size() + suffix.size());
      const int64_t context = int64_t(prompts[r].size()) + used;
      if (used > limits.max_new_tokens || (limits.max_context > 0 && context >= limits.max_context)) {
        ++s.dropped;  // TRL drops results that would pass the completion budget: the row ends as it is
        continue;
      }
      if (!s.messages.empty())
        for (std::size_t j = 0; j < calls[k].size(); ++j)
          stats[r].messages.push_back(
              {{"role", "tool"}, {"name", calls[k][j].name}, {"content", results[k][j].content}});
      std::vector<int32_t> ctx = prompts[r];
      ctx.insert(ctx.end(), completions[r].tokens.begin(), completions[r].tokens.end());
      ctx.insert(ctx.end(), suffix.begin(), suffix.end());
      next_rows.push_back(int64_t(r));
      contexts.push_back(std::move(ctx));
      suffixes.push_back(std::move(suffix));
      offset.push_back(used);
      max_new.push_back(limits.max_new_tokens - used);
    }
    if (next_rows.empty()) break;
    // Rows with no room left get their results and an empty turn (TRL cuts the turn to nothing).
    std::vector<int64_t> sampled_rows, sampled_offset, sampled_max;
    std::vector<std::vector<int32_t>> sampled_contexts;
    for (std::size_t k = 0; k < next_rows.size(); ++k)
      if (max_new[k] > 0) {
        sampled_rows.push_back(next_rows[k]);
        sampled_contexts.push_back(std::move(contexts[k]));
        sampled_offset.push_back(offset[k]);
        sampled_max.push_back(max_new[k]);
      }
    std::vector<Completion> sampled;
    if (!sampled_rows.empty()) sampled = hooks.generate(sampled_rows, sampled_contexts, sampled_offset, sampled_max);
    std::vector<Completion> next(next_rows.size());
    for (std::size_t k = 0, j = 0; k < next_rows.size(); ++k)
      if (max_new[k] > 0) next[k] = std::move(sampled[j++]);
    pending.clear();
    for (std::size_t k = 0; k < next_rows.size(); ++k) {
      const std::size_t r = std::size_t(next_rows[k]);
      const std::vector<int32_t> turn =
          append_turn(completions[r], suffixes[k], next[k], limits.max_new_tokens, stats[r]);
      AssistantTurn read = hooks.turn(turn);
      rows[r].calls = std::move(read.calls);
      if (!read.message.is_null() && !turn.empty()) stats[r].messages.push_back(std::move(read.message));
      const bool more = limits.max_iterations == 0 || rows[r].iterations < limits.max_iterations;
      if (!rows[r].calls.empty() && more) pending.push_back(int64_t(r));
    }
  }
  return stats;
}

}  // namespace unstuck::rollout
