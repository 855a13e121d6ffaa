// Tools in the rollout: the tool-call parser on the Qwen / Hermes format (and what TRL takes as no
// call), the multi-turn loop on scripted turns (the tokens, which ones are the tools', the sampling
// offsets, the budget and the iteration limit), and the tool workers on tests/rollout/tool_corpus.py.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "unstuck/common/error.h"
#include "unstuck/data/prompt_formatter.h"
#include "unstuck/reward/sandbox.h"
#include "unstuck/reward/worker_pool.h"
#include "unstuck/rollout/tools.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace unstuck::rollout {
namespace {

TEST(ParseToolCalls, ReadsEveryBlockOfATurn) {
  const auto one = parse_tool_calls(
      "<tool_call>\n{\"name\": \"multiply\", \"arguments\": {\"a\": 3, \"b\": 4}}\n</tool_call><|im_end|>");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].name, "multiply");
  EXPECT_EQ(one[0].arguments.dump(), "{\"a\":3,\"b\":4}");
  const auto two = parse_tool_calls(
      "Let me compute.\n<tool_call>{\"name\": \"add\", \"arguments\": {\"b\": 1, \"a\": 2}}</tool_call>\n"
      "<tool_call>\n{\"name\": \"now\"}\n</tool_call>");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].arguments.dump(), "{\"b\":1,\"a\":2}");  // the model's order
  EXPECT_EQ(two[1].name, "now");
  EXPECT_TRUE(two[1].arguments.is_object() && two[1].arguments.empty());  // missing: {} (as TRL)
  const auto null_args = parse_tool_calls("<tool_call>{\"name\": \"now\", \"arguments\": null}</tool_call>");
  ASSERT_EQ(null_args.size(), 1u);
  EXPECT_TRUE(null_args[0].arguments.is_object());
  // Arguments that are not an object stay as written: the call fails in the tool (TRL does the same).
  const auto text_args = parse_tool_calls("<tool_call>{\"name\": \"add\", \"arguments\": \"1, 2\"}</tool_call>");
  ASSERT_EQ(text_args.size(), 1u);
  EXPECT_TRUE(text_args[0].arguments.is_string());
}

TEST(ParseToolCalls, AMalformedOrUnclosedBlockMeansNoCallAtAll) {
  EXPECT_TRUE(parse_tool_calls("The answer is 12.").empty());
  EXPECT_TRUE(parse_tool_calls("<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1}</tool_call>").empty());
  EXPECT_TRUE(parse_tool_calls("<tool_call>{\"arguments\": {}}</tool_call>").empty());
  EXPECT_TRUE(parse_tool_calls("<tool_call>{\"name\": 7}</tool_call>").empty());
  EXPECT_TRUE(parse_tool_calls("<tool_call>[1, 2]</tool_call>").empty());
  EXPECT_TRUE(parse_tool_calls("<tool_call>{\"name\": \"add\", \"arguments\": {}}").empty());  // cut at the limit
  // One bad block spoils the turn: TRL's parse_response falls back to plain text.
  EXPECT_TRUE(parse_tool_calls("<tool_call>{\"name\": \"a\"}</tool_call><tool_call>oops</tool_call>").empty());
}

// Tokens are characters here: decode() is the identity on their codes.
std::vector<int32_t> ids(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<int32_t>& t) { return {t.begin(), t.end()}; }

Completion turn(const std::string& s, FinishReason finish = FinishReason::eos) {
  Completion c;
  c.tokens = ids(s);
  c.logprobs.assign(c.tokens.size(), -0.5f);
  c.finish = finish;
  return c;
}

struct Script {
  std::map<int64_t, std::vector<std::string>> turns;  // row -> its turns after the first
  std::vector<std::vector<int64_t>> offsets, max_new, rows;
  int64_t tool_rounds = 0;
  ToolTurnHooks hooks() {
    ToolTurnHooks h;
    h.turn = [](const std::vector<int32_t>& ids) { return AssistantTurn{parse_tool_calls(text(ids)), {}}; };
    h.run = [this](const std::vector<std::vector<ToolCall>>& calls) {
      ++tool_rounds;
      std::vector<std::vector<ToolOutcome>> out;
      for (const auto& row : calls) {
        out.emplace_back();
        for (const ToolCall& c : row)
          out.back().push_back(
              {c.name == "fail" ? "{'error': 'x'}" : "=" + c.arguments.dump(), c.name == "fail", 0.25});
      }
      return out;
    };
    h.suffix = [](const std::vector<ToolCall>&, const std::vector<ToolOutcome>& results) {
      std::string s = "[";
      for (const ToolOutcome& o : results) s += o.content;
      return ids(s + "]");
    };
    h.generate = [this](const std::vector<int64_t>& r, const std::vector<std::vector<int32_t>>&,
                        const std::vector<int64_t>& off, const std::vector<int64_t>& mx) {
      rows.push_back(r);
      offsets.push_back(off);
      max_new.push_back(mx);
      std::vector<Completion> out;
      for (int64_t row : r) {
        auto& queue = turns.at(row);
        out.push_back(turn(queue.front()));
        queue.erase(queue.begin());
      }
      return out;
    };
    return h;
  }
};

const std::string kCall = "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call>";

TEST(RunToolTurns, AppendsResultsAndTurnsAndMarksTheToolsTokens) {
  std::vector<std::vector<int32_t>> prompts = {ids("P0"), ids("P1")};
  std::vector<Completion> c = {turn("A" + kCall), turn("no call")};
  Script s;
  s.turns[0] = {"B" + kCall, "done"};
  ToolTurnLimits limits;
  limits.max_new_tokens = 400;
  const auto stats = run_tool_turns(prompts, c, s.hooks(), limits);
  const std::string result = "[={\"x\":1}]";
  EXPECT_EQ(text(c[0].tokens), "A" + kCall + result + "B" + kCall + result + "done");
  ASSERT_EQ(c[0].from_tool.size(), c[0].tokens.size());
  ASSERT_EQ(c[0].logprobs.size(), c[0].tokens.size());
  for (std::size_t t = 0; t < c[0].tokens.size(); ++t) {
    const std::size_t first = 1 + kCall.size(), second = first + result.size() + 1 + kCall.size();
    const bool tool = (t >= first && t < first + result.size()) || (t >= second && t < second + result.size());
    EXPECT_EQ(c[0].from_tool[t], tool ? 1 : 0) << t;
    EXPECT_EQ(c[0].logprobs[t], tool ? 0.0f : -0.5f) << t;
  }
  EXPECT_TRUE(c[1].from_tool.empty());  // a row without calls is untouched
  EXPECT_EQ(text(c[1].tokens), "no call");
  EXPECT_EQ(stats[0].calls, 2);
  EXPECT_EQ(stats[0].turns, 3);
  EXPECT_EQ(stats[0].tool_tokens, int64_t(2 * result.size()));
  EXPECT_DOUBLE_EQ(stats[0].seconds, 0.5);
  EXPECT_EQ(stats[1].calls, 0);
  // Each turn samples from where the row's completion is, within what is left of the budget.
  ASSERT_EQ(s.offsets.size(), 2u);
  const int64_t after1 = int64_t(1 + kCall.size() + result.size());
  EXPECT_EQ(s.offsets[0], std::vector<int64_t>{after1});
  EXPECT_EQ(s.max_new[0], std::vector<int64_t>{400 - after1});
  const int64_t after2 = after1 + int64_t(1 + kCall.size() + result.size());
  EXPECT_EQ(s.offsets[1], std::vector<int64_t>{after2});
}

TEST(RunToolTurns, StopsAtTheIterationLimitAndCountsFailures) {
  std::vector<std::vector<int32_t>> prompts = {ids("P")};
  const std::string fail = "<tool_call>{\"name\": \"fail\"}</tool_call>";
  std::vector<Completion> c = {turn(fail)};
  Script s;
  s.turns[0] = {kCall, kCall, kCall};
  ToolTurnLimits limits;
  limits.max_new_tokens = 1000;
  limits.max_iterations = 2;
  const auto stats = run_tool_turns(prompts, c, s.hooks(), limits);
  EXPECT_EQ(s.tool_rounds, 2);
  EXPECT_EQ(stats[0].calls, 2);
  EXPECT_EQ(stats[0].failures, 1);
  EXPECT_EQ(stats[0].turns, 3);
  EXPECT_EQ(s.turns[0].size(), 1u);  // the third scripted turn was never sampled
}

TEST(RunToolTurns, ResultsThatDoNotFitAreDroppedAndTheLastTurnIsCutToTheBudget) {
  const std::string result = "[={\"x\":1}]";
  std::vector<std::vector<int32_t>> prompts = {ids("P"), ids("Q")};
  std::vector<Completion> c = {turn(kCall), turn(kCall)};
  Script s;
  s.turns[1] = {"a long answer that will not fit"};
  ToolTurnLimits limits;
  limits.max_new_tokens = int64_t(kCall.size() + result.size()) + 4;
  limits.max_context = 1000;
  // Row 0's context is too long for the model: its results are dropped, it ends as it was.
  prompts[0] = ids(std::string(1000 - kCall.size() - result.size(), 'p'));
  const auto stats = run_tool_turns(prompts, c, s.hooks(), limits);
  EXPECT_EQ(text(c[0].tokens), kCall);
  EXPECT_TRUE(c[0].from_tool.empty());
  EXPECT_EQ(stats[0].dropped, 1);
  EXPECT_EQ(c[0].finish, FinishReason::eos);
  // Row 1: its results fit, its next turn is cut to the 4 tokens left and ends at the length limit.
  EXPECT_EQ(text(c[1].tokens), kCall + result + "a lo");
  EXPECT_EQ(c[1].finish, FinishReason::length);
  EXPECT_EQ(s.max_new.at(0), std::vector<int64_t>{4});
}

std::string corpus() { return std::string(UNSTUCK_SOURCE_DIR) + "/tests/rollout/tool_corpus.py"; }

TEST(ToolRunner, DerivesSchemasAndCallsToolsAsTrlDoes) {
  ToolsConfig cfg;
  cfg.functions = {{corpus(), "multiply"}, {corpus(), "sleepy"}};
  cfg.python = UNSTUCK_PYTHON;
  cfg.timeout_s = 2;
  ToolRunner tools(cfg);
  ASSERT_EQ(tools.schemas().size(), 2u);
  EXPECT_EQ(tools.schemas()[0]["function"]["name"], "multiply");
  // Key order as transformers writes it (the template's tojson keeps it).
  EXPECT_EQ(tools.schemas()[0].dump().substr(0, 40), "{\"type\":\"function\",\"function\":{\"name\":\"m");
  const auto out = tools.call({{"multiply", {{"a", 6}, {"b", 7}}},
                               {"multiply", {{"a", 6}}},
                               {"divide", nlohmann::ordered_json::object()},
                               {"sleepy", {{"seconds", 30}}}});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].content, "42");
  EXPECT_FALSE(out[0].failed);
  EXPECT_EQ(out[1].content, "{'error': \"multiply() missing 1 required positional argument: 'b'\"}");
  EXPECT_TRUE(out[1].failed);
  EXPECT_EQ(out[2].content, "{'error': 'Tool divide not found.'}");
  EXPECT_TRUE(out[3].failed);  // past tools.timeout_s: an error the model reads, the worker restarted
  EXPECT_NE(out[3].content.find("timed out"), std::string::npos) << out[3].content;
  EXPECT_EQ(tools.call({{"multiply", {{"a", 2}, {"b", 3}}}}).at(0).content, "6");  // still serving
}

// tools.builtin_python: the schema the worker derives for python(code), and the policy's programs run
// in the code sandbox: what they print, the error's last line, the time limit, bad arguments.
TEST(ToolRunner, TheBuiltinPythonToolRunsCodeInTheSandbox) {
  if (!reward::sandbox_capabilities().missing.empty())
    GTEST_SKIP() << "the sandbox lacks " << reward::sandbox_capabilities().missing;
  ToolsConfig cfg;
  cfg.builtin_python = true;
  cfg.python = UNSTUCK_PYTHON;
  cfg.timeout_s = 2;
  ToolRunner tools(cfg);
  ASSERT_EQ(tools.schemas().size(), 1u);
  const auto& fn = tools.schemas()[0]["function"];
  EXPECT_EQ(fn["name"], "python");
  EXPECT_EQ(fn["parameters"]["required"], nlohmann::ordered_json::array({"code"}));
  EXPECT_EQ(fn["parameters"]["properties"]["code"]["type"], "string");
  const auto out = tools.call({{"python", {{"code", "print(6 * 7)"}}},
                               {"python", {{"code", "print('partial')\n1 / 0"}}},
                               {"python", {{"code", "while True:\n    pass"}}},
                               {"python", {{"source", "print(1)"}}},
                               {"python", {{"code", "import socket\nsocket.create_connection(('1.1.1.1', 53), 1)"}}}});
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].content, "42\n");
  EXPECT_FALSE(out[0].failed);
  EXPECT_EQ(out[1].content, "partial\nZeroDivisionError: division by zero");
  EXPECT_TRUE(out[1].failed);
  EXPECT_TRUE(out[2].failed);
  EXPECT_NE(out[2].content.find("error"), std::string::npos) << out[2].content;
  EXPECT_EQ(out[3].content, "{'error': 'python takes one argument, code, a string'}");
  EXPECT_TRUE(out[4].failed) << out[4].content;  // no network in the sandbox
}

TEST(ToolRunner, AToolWithoutASchemaIsRefusedAtTheStartNamingIt) {
  ToolsConfig cfg;
  cfg.functions = {{corpus(), "undescribed"}};
  cfg.python = UNSTUCK_PYTHON;
  try {
    ToolRunner tools(cfg);
    FAIL() << "started";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("undescribed: the docstring's Args: has no description of 'y'"),
              std::string::npos)
        << e.what();
  }
}

std::string environments() { return std::string(UNSTUCK_SOURCE_DIR) + "/tests/rollout/tool_environments.py"; }

// transformers' own get_json_schema of `expr` (Python, evaluated with tool_environments imported), or
// null when transformers is not installed.
nlohmann::ordered_json transformers_schema(const std::string& expr) {
  const std::string out = ::testing::TempDir() + "/schema_" + std::to_string(::getpid()) + ".json";
  const std::string cmd = std::string(UNSTUCK_PYTHON) + " -c \"import json, sys; sys.path.insert(0, '" +
                          UNSTUCK_SOURCE_DIR + "/tests/rollout'); from tool_environments import *; " +
                          "from transformers.utils import get_json_schema; print(json.dumps(get_json_schema(" + expr +
                          ")))\" > " + out + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) return nullptr;
  std::ifstream in(out);
  return nlohmann::ordered_json::parse(in);
}

// tools.environment, TRL's environment_factory: TRL's documented IncrementEnv unchanged. Its public
// method is the tool (schema as transformers derives it for the bound method); each row (slot) has its
// own instance, reset with the row's columns, on its own worker (two here), reused across episodes;
// get_reward() reads the instance's state.
TEST(ToolRunner, AnEnvironmentKeepsOneInstancePerRowAsTrlDoes) {
  ToolsConfig cfg;
  cfg.environment = {environments(), "IncrementEnv"};
  cfg.functions = {{corpus(), "multiply"}};
  cfg.python = UNSTUCK_PYTHON;
  cfg.workers = 2;
  ToolRunner tools(cfg);
  ASSERT_TRUE(tools.has_environment());
  EXPECT_EQ(tools.environment_class(), "IncrementEnv");
  EXPECT_TRUE(tools.environment_scores());
  ASSERT_EQ(tools.schemas().size(), 2u);  // TRL: the standalone tools, then the environment's methods
  EXPECT_EQ(tools.schemas()[0]["function"]["name"], "multiply");
  const nlohmann::ordered_json expected = transformers_schema("IncrementEnv().increment");
  if (!expected.is_null()) EXPECT_EQ(tools.schemas()[1].dump(), expected.dump());
  for (int episode = 0; episode < 2; ++episode) {
    std::vector<nlohmann::json> rows;
    for (int i = 0; i < 4; ++i) rows.push_back({{"target", i + 1}, {"prompt", "Count."}, {"answer", ""}});
    EXPECT_EQ(tools.reset_environments(rows), std::vector<std::string>(4, ""));  // reset returned None
    std::vector<ToolCall> calls;  // row i adds 1 (i + 1) times: rows 0..3 reach their targets, row 3 after a multiply
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k <= i; ++k) calls.push_back({"increment", {{"step", 1}}, i});
    calls.push_back({"multiply", {{"a", 2}, {"b", 3}}, 3});
    calls.push_back({"increment", {{"step", 5}}, 2});  // row 2 overshoots
    // A policy that calls reset (to start over at a target it reached) or get_reward (to read its
    // score) is told there is no such tool, and its instance is untouched.
    calls.push_back({"reset", {{"target", 0}}, 2});
    calls.push_back({"get_reward", nlohmann::ordered_json::object(), 0});
    const std::vector<ToolOutcome> out = tools.call(calls);
    EXPECT_EQ(out[0].content, "1");
    EXPECT_EQ(out[9].content, "4");  // row 3's fourth increment: its own counter
    EXPECT_EQ(out[10].content, "6");
    EXPECT_EQ(out[11].content, "8");
    EXPECT_EQ(out[12].content, "{'error': 'Tool reset not found.'}");
    EXPECT_EQ(out[13].content, "{'error': 'Tool get_reward not found.'}");
    EXPECT_TRUE(out[12].failed && out[13].failed);
    const std::vector<EnvironmentScore> scores = tools.environment_rewards(4);
    ASSERT_EQ(scores.size(), 4u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(scores[std::size_t(i)].error, "") << "episode " << episode << " row " << i;
      EXPECT_EQ(scores[std::size_t(i)].score, i == 2 ? 0.0 : 1.0) << "episode " << episode << " row " << i;
    }
  }
}

// A TRL reward function that takes environments is called where the instances live: on each tool
// worker with its rows (two workers, five rows), every row reading its own instance, with TRL's
// columns and trainer_state; a row whose instance does not exist fails its worker's batch.
TEST(ToolRunner, ARewardFunctionReadsTheInstancesWhereTheyLive) {
  ToolsConfig cfg;
  cfg.environment = {environments(), "IncrementEnv"};
  cfg.python = UNSTUCK_PYTHON;
  cfg.workers = 2;
  ToolRunner tools(cfg);
  std::vector<nlohmann::json> rows, items;
  for (int i = 0; i < 5; ++i) rows.push_back({{"target", 10 + i}});
  tools.reset_environments(rows);
  std::vector<ToolCall> calls;  // row i counts to i
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < i; ++k) calls.push_back({"increment", {{"step", 1}}, i});
  tools.call(calls);
  for (int i = 0; i < 5; ++i)
    items.push_back({{"prompt", "Count."},
                     {"completion", "done"},
                     {"completion_ids", nlohmann::json::array()},
                     {"columns", {{"target", 10 + i}}},
                     {"slot", i}});
  const nlohmann::json function{{"path", environments()}, {"name", "counters"}, {"kwargs", nlohmann::json::object()}};
  const std::vector<reward::WorkerResult> scored = tools.score_with_environments(function, items, {{"global_step", 7}});
  ASSERT_EQ(scored.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(scored[std::size_t(i)].ok) << scored[std::size_t(i)].error;
    EXPECT_FALSE(scored[std::size_t(i)].none) << "row " << i << " read another row's instance";
    EXPECT_DOUBLE_EQ(scored[std::size_t(i)].score, double(i) + 0.07) << "row " << i;
  }
  items[3]["slot"] = 9;  // never reset: worker 1's batch (rows 1, 3) fails, worker 0's scores
  const std::vector<reward::WorkerResult> gone = tools.score_with_environments(function, items, {{"global_step", 0}});
  EXPECT_TRUE(gone[0].ok && gone[2].ok && gone[4].ok);
  EXPECT_FALSE(gone[1].ok || gone[3].ok);
  EXPECT_NE(gone[3].error.find("the environment instances of rows [9] are gone"), std::string::npos) << gone[3].error;
}

// reset()'s string is returned (the trainer appends it to the prompt), private methods are no tools,
// and TRL's contract is enforced: a class without reset is refused at the start, a reset that raises
// stops the run naming the row and the error.
TEST(ToolRunner, AnEnvironmentsObservationsAndItsContract) {
  ToolsConfig cfg;
  cfg.environment = {environments(), "GreetingEnv"};
  cfg.python = UNSTUCK_PYTHON;
  ToolRunner tools(cfg);
  ASSERT_EQ(tools.schemas().size(), 1u);
  EXPECT_EQ(tools.schemas()[0]["function"]["name"], "whoami");
  EXPECT_FALSE(tools.environment_scores());
  EXPECT_EQ(tools.reset_environments({{{"name", "Ada"}}, {{"name", "Bob"}}}),
            (std::vector<std::string>{" (You are talking to Ada.)", " (You are talking to Bob.)"}));
  EXPECT_EQ(tools.call({{"whoami", nlohmann::ordered_json::object(), 1}}).at(0).content, "Bob");
  EXPECT_EQ(tools.call({{"_private", nlohmann::ordered_json::object(), 1}}).at(0).content,
            "{'error': 'Tool _private not found.'}");
  cfg.environment.name = "NoReset";
  try {
    ToolRunner refused(cfg);
    FAIL() << "started";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("NoReset has no reset method"), std::string::npos) << e.what();
  }
  cfg.environment.name = "FailingReset";
  ToolRunner failing(cfg);
  try {
    failing.reset_environments({nlohmann::json::object()});
    FAIL() << "reset";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("FailingReset.reset of row 0 failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no task for this row"), std::string::npos) << e.what();
  }
}

// A row's calls go to the worker holding its instance (tools.environment). When that worker dies and
// cannot start again, the row's calls fail with the reason instead of waiting for it, and the other
// rows' worker still answers.
TEST(ToolRunner, APinnedCallWhoseWorkerCannotStartAgainFailsWithTheReason) {
  const std::filesystem::path marker =
      std::filesystem::temp_directory_path() / ("unstuck_crash_marker_" + std::to_string(::getpid()));
  std::filesystem::remove(marker);
  ::setenv("UNSTUCK_TEST_CRASH_MARKER", marker.c_str(), 1);
  ToolsConfig cfg;
  cfg.environment = {std::string(UNSTUCK_SOURCE_DIR) + "/tests/rollout/tool_crash_env.py", "CrashEnv"};
  cfg.python = UNSTUCK_PYTHON;
  cfg.workers = 2;
  ToolRunner tools(cfg);
  tools.reset_environments({nlohmann::json::object(), nlohmann::json::object()});
  const std::vector<ToolOutcome> crashed = tools.call({{"crash", nlohmann::ordered_json::object(), 1}});
  const std::vector<ToolOutcome> out =
      tools.call({{"where", nlohmann::ordered_json::object(), 0}, {"where", nlohmann::ordered_json::object(), 1}});
  ::unsetenv("UNSTUCK_TEST_CRASH_MARKER");
  std::filesystem::remove(marker);
  EXPECT_TRUE(crashed.at(0).failed) << crashed.at(0).content;
  EXPECT_FALSE(out.at(0).failed) << out.at(0).content;
  EXPECT_TRUE(out.at(1).failed);
  EXPECT_NE(out.at(1).content.find("could not be started again"), std::string::npos) << out.at(1).content;
}

// Where two id lists part: "equal", or the lengths and the first index that differs.
template <class T>
std::string first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i == a.size() && i == b.size()) return "equal";
  return "lengths " + std::to_string(a.size()) + " and " + std::to_string(b.size()) + ", first difference at " +
         std::to_string(i);
}

// TRL 1.16's own loop (GRPOTrainer._tool_call_loop and _get_tool_suffix_ids, unchanged) on a Qwen2-style
// tokenizer with TRL's Qwen2.5 chat template and the scripted turns of tests/rollout/trl_tool_loop.py:
// the prompts rendered with the tools, each row's completion ids and which of them are the tools'
// equal Unstuck's, through one call, failing calls, an unknown tool, a malformed call, and results
// dropped for the completion budget.
// TRL's tool loop (tests/rollout/trl_tool_loop.py, `family` qwen or llama) and ours on the same
// scripted turns: prompts, completion ids, tool masks, log-probs and messages equal; `expected` is
// the tool-call format ours must read off the template.
void expect_trl_tool_parity(const std::string& family, ToolCallFormat expected) {
  const std::filesystem::path out = std::filesystem::temp_directory_path() / ("unstuck_trl_tool_loop_" + family);
  std::filesystem::remove_all(out);
  const std::string cmd = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR + "/tests/rollout/trl_tool_loop.py " +
                          out.string() + " " + family + " > " + (out.string() + ".log") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "trl is not installed";
  ASSERT_EQ(rc, 0) << cmd;
  std::ifstream in(out / "trl.json");
  const nlohmann::json trl = nlohmann::json::parse(in);
  const std::filesystem::path model_dir = trl["model_dir"].get<std::string>();
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_dir);  // with tokenizer_config.json (its eos_token)
  ToolsConfig cfg;
  for (const auto& name : trl["tools"])
    cfg.functions.push_back({trl["corpus"].get<std::string>(), name.get<std::string>()});
  cfg.python = UNSTUCK_PYTHON;
  ToolRunner tools(cfg);
  data::DataConfig dc;
  dc.chat_template = "auto";
  const data::PromptFormatter format = data::PromptFormatter(dc, model_dir).with_tools(tools.schemas());
  const ToolCallFormat syntax = tool_call_format(format);
  ASSERT_EQ(syntax, expected);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Completion> completions;
  std::map<int64_t, std::vector<std::vector<int32_t>>> later;
  for (const auto& row : trl["rows"]) {
    data::TaskRecord record;
    record.messages = nlohmann::json::array({{{"role", "user"}, {"content", row["user"]}}});
    prompts.push_back(tok.encode(format.render(record)));
    EXPECT_EQ(first_difference(prompts.back(), row["prompt_ids"].get<std::vector<int32_t>>()), "equal")
        << "prompt of " << row["user"];
    const auto turns = row["turns"].get<std::vector<std::vector<int32_t>>>();
    Completion first;
    first.tokens = turns[0];
    first.logprobs.assign(first.tokens.size(), -0.5f);
    first.finish = FinishReason::eos;
    completions.push_back(first);
    later[int64_t(completions.size()) - 1] = {turns.begin() + 1, turns.end()};
  }
  ToolTurnHooks hooks;
  hooks.turn = [&](const std::vector<int32_t>& ids) {
    return read_assistant_turn(tok.decode(ids, false), tok.decode(ids, true), format.eos_token(), syntax);
  };
  hooks.run = [&](const std::vector<std::vector<ToolCall>>& calls) {
    std::vector<std::vector<ToolOutcome>> results;
    for (const auto& row : calls) results.push_back(tools.call(row));
    return results;
  };
  hooks.suffix = [&](const std::vector<ToolCall>& calls, const std::vector<ToolOutcome>& results) {
    return tool_result_tokens(format, tok, calls, results);
  };
  hooks.generate = [&](const std::vector<int64_t>& rows, const std::vector<std::vector<int32_t>>&,
                       const std::vector<int64_t>&, const std::vector<int64_t>&) {
    std::vector<Completion> next;
    for (int64_t r : rows) {
      Completion c;
      c.tokens = later.at(r).front();
      later.at(r).erase(later.at(r).begin());
      c.logprobs.assign(c.tokens.size(), -0.5f);
      c.finish = FinishReason::eos;
      next.push_back(c);
    }
    return next;
  };
  ToolTurnLimits limits;
  limits.max_new_tokens = trl["max_completion_length"].get<int64_t>();
  limits.max_context = 4096;
  const std::vector<ToolTurnStats> stats = run_tool_turns(prompts, completions, hooks, limits);
  int64_t calls = 0, failures = 0;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const auto& row = trl["rows"][i];
    EXPECT_EQ(first_difference(completions[i].tokens, row["completion_ids"].get<std::vector<int32_t>>()), "equal")
        << "row " << i;
    std::vector<int> mask;
    for (std::size_t t = 0; t < completions[i].tokens.size(); ++t)
      mask.push_back(completions[i].from_tool.empty() || completions[i].from_tool[t] == 0 ? 1 : 0);
    EXPECT_EQ(first_difference(mask, row["tool_mask"].get<std::vector<int>>()), "equal") << "row " << i;
    std::vector<float> logprobs(completions[i].logprobs.begin(), completions[i].logprobs.end());
    EXPECT_EQ(first_difference(logprobs, row["logprobs"].get<std::vector<float>>()), "equal") << "row " << i;
    // What the reward functions receive: TRL's completion messages.
    EXPECT_EQ(stats[i].messages, row["messages"]) << "row " << i;
    calls += stats[i].calls;
    failures += stats[i].failures;
  }
  for (const auto& probe : trl["parsed"]) {  // single turns through TRL's parse_response
    const auto ids = probe["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(assistant_message(tok.decode(ids, false), tok.decode(ids, true), format.eos_token(), syntax),
              probe["message"])
        << tok.decode(ids, false);
  }
  EXPECT_EQ(calls, trl["tool_calls"].get<int64_t>());
  EXPECT_EQ(failures, trl["tool_failures"].get<int64_t>());
  EXPECT_EQ(stats[4].dropped, 1);  // the case the script is built to reach
}

TEST(TrlToolParity, PromptsCompletionsAndMasksEqualTrlsToolLoop) {
  expect_trl_tool_parity("qwen", ToolCallFormat::hermes);
}

// Llama 3.1's template (TRL's shipped llama3_1.jinja): a call is a turn of bare JSON with
// "parameters", a result an ipython message (its text as JSON, as the template's tojson writes it).
TEST(TrlToolParity, Llama31JsonCallsEqualTrlsToolLoop) { expect_trl_tool_parity("llama", ToolCallFormat::llama3_json); }

// A template that writes tool calls in a form we do not read is refused by name before any run.
TEST(ToolCallFormat, AnUnknownFormIsRefusedWithWhatTheTemplateWrote) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "unstuck_tool_format";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "t.jinja")
      << "{% for m in messages %}{% if m.tool_calls %}CALL {{ m.tool_calls[0].function.name }}"
         "{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}";
  data::DataConfig dc;
  dc.chat_template = (dir / "t.jinja").string();
  const data::PromptFormatter format(dc, dir);
  try {
    tool_call_format(format);
    ADD_FAILURE() << "an unknown tool-call form was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("CALL probe_tool"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("t.jinja"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace unstuck::rollout
