// reward.terms: the reward is the weighted sum of the terms' rewards, each term scored as the single
// form would score it (a built-in verifier with its format credit, a Python function on its own
// workers, a command); each term's reward and extras come back by the term's name; the first term's
// status is the completion's, and a term that fails makes it reward_error, naming the term. Every
// mistake in the list is refused naming the item.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <fstream>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/config/run_config.h"
#include "unstuck/reward/function_config.h"
#include "unstuck/reward/verifier.h"

namespace unstuck::reward {
namespace {

namespace fs = std::filesystem;

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

class RewardTerms : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("unstuck_terms_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }
  // The reward section of a run config loaded from YAML, as a user writes it.
  RewardConfig load(const std::string& reward_yaml) {
    return load_run_config(write("run.yaml", "reward:\n" + reward_yaml)).reward;
  }
  static data::TaskRecord math_record(const std::string& answer) {
    data::TaskRecord r;
    r.task = "math";
    r.prompt = "p";
    r.answer = answer;
    return r;
  }

  fs::path dir_;
};

// A TRL batch function (shorter is better) and a verl one returning a dict, that raises on "boom".
const char* kBrevity = R"PY(
def brevity(prompts, completions, **kwargs):
    return [1.0 if len(c) < 20 else 0.0 for c in completions]
)PY";
const char* kVerlDict = R"PY(
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if "boom" in solution_str:
        raise ValueError("boom in the completion")
    return {"score": 0.5 if ground_truth in solution_str else 0.0, "chars": len(solution_str)}
)PY";

TEST_F(RewardTerms, TheRewardIsTheWeightedSumAndEachTermIsReported) {
  const fs::path brevity = write("brevity.py", kBrevity), dict = write("dict.py", kVerlDict);
  const std::string python = UNSTUCK_PYTHON;
  const RewardConfig config = load(
      "  terms:\n"
      "    - verifier: math\n"
      "      weight: 1.0\n"
      "    - function: {path: " +
      brevity.string() + ", name: brevity, style: trl, python: " + python +
      ", workers: 1}\n"
      "      weight: 0.25\n"
      "    - name: contains\n"
      "      function: {path: " +
      dict.string() + ", python: " + python +
      ", workers: 1}\n"
      "      weight: -2.0\n");
  EXPECT_EQ(term_names(config), (std::vector<std::string>{"math", "brevity", "contains"}));
  EXPECT_TRUE(scorer_can_fail(config, "math"));
  const auto verifier = make_verifier("math", config);
  RewardConfig single;  // the math verifier as the single form scores it (format credit 0.1)
  const auto math = make_verifier("math", single);
  const std::vector<std::string> completions{
      "<answer>42</answer>",                             // correct, short, contains 42
      "a long way round, and then <answer>41</answer>",  // wrong with the tag, long, no 42
      "no answer at all, but 42 appears in it",          // no_answer, long, contains
      "boom <answer>42</answer>",                        // the dict term fails; long
  };
  const data::TaskRecord record = math_record("42");
  const std::vector<const data::TaskRecord*> records(completions.size(), &record);
  const std::vector<RewardResult> results = verifier->score_batch(completions, records, {});
  ASSERT_EQ(results.size(), completions.size());
  const double brevity_of[] = {1, 0, 0, 0}, contains_of[] = {0.5, 0, 0.5, 0};
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const RewardResult& r = results[i];
    const RewardResult m = math->score(completions[i], record);
    SCOPED_TRACE(completions[i]);
    EXPECT_EQ(r.terms.at("math"), m.reward);
    EXPECT_EQ(r.terms.at("brevity"), brevity_of[i]);
    EXPECT_EQ(r.terms.at("contains"), contains_of[i]);
    EXPECT_DOUBLE_EQ(r.reward, m.reward + 0.25 * brevity_of[i] - 2.0 * contains_of[i]);
    if (i < 3) {
      EXPECT_EQ(r.status, m.status);                                           // the first term's
      EXPECT_EQ(r.extra.at("contains/chars"), double(completions[i].size()));  // a term's extras, by its name
    }
  }
  EXPECT_EQ(results[0].status, RewardStatus::correct);
  EXPECT_EQ(results[1].status, RewardStatus::wrong);
  EXPECT_EQ(results[2].status, RewardStatus::no_answer);
  // A failing term: the completion is reward_error, naming the term, and its other terms still count.
  EXPECT_EQ(results[3].status, RewardStatus::error);
  EXPECT_EQ(results[3].error.rfind("reward.terms 'contains': ", 0), 0u) << results[3].error;
  EXPECT_NE(results[3].error.find("ValueError: boom in the completion"), std::string::npos) << results[3].error;
  EXPECT_EQ(results[3].reward, 1.0);
  // score() is score_batch() of one.
  const RewardResult one = verifier->score(completions[0], record);
  EXPECT_EQ(one.reward, results[0].reward);
  EXPECT_EQ(one.terms, results[0].terms);
}

// TRL's None: a term that returned None for a completion is left out of its sum (TRL's nansum), the
// status is the first scored term's; when every term returned None the completion is not_applicable
// with a NaN reward. TRL's multi-task example, in its form: one function per task.
TEST_F(RewardTerms, ATermThatReturnedNoneIsLeftOutAsTrlLeavesItOut) {
  const fs::path file = write("tasks.py", R"PY(
def math_only(prompts, completions, kind, **kwargs):
    return [None if k != "math" else (1.0 if "42" in c else -1.0) for c, k in zip(completions, kind)]

def code_only(prompts, completions, kind, **kwargs):
    return [None if k != "code" else (1.0 if "def" in c else -1.0) for c, k in zip(completions, kind)]
)PY");
  const std::string python = UNSTUCK_PYTHON, f = file.string();
  const RewardConfig config = load(
      "  terms:\n"
      "    - function: {path: " +
      f + ", name: math_only, style: trl, python: " + python +
      ", workers: 1}\n      weight: 1.0\n"
      "    - function: {path: " +
      f + ", name: code_only, style: trl, python: " + python + ", workers: 1}\n      weight: 0.5\n");
  const auto verifier = make_verifier("math", config);
  data::TaskRecord math = math_record("42"), code = math_record("x"), other = math_record("y");
  math.fields["kind"] = "math";
  code.fields["kind"] = "code";
  other.fields["kind"] = "chat";
  const std::vector<RewardResult> r =
      verifier->score_batch({"it is 42", "def f(): pass", "hello"}, {&math, &code, &other}, {});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].reward, 1.0);
  EXPECT_EQ(r[0].status, RewardStatus::correct);
  EXPECT_EQ(r[0].terms, (std::map<std::string, double>{{"math_only", 1.0}}));
  EXPECT_EQ(r[1].reward, 0.5);  // only the second term scored it: its status, its weighted reward
  EXPECT_EQ(r[1].status, RewardStatus::correct);
  EXPECT_EQ(r[1].terms, (std::map<std::string, double>{{"code_only", 1.0}}));
  EXPECT_TRUE(std::isnan(r[2].reward));
  EXPECT_EQ(r[2].status, RewardStatus::not_applicable);
  EXPECT_TRUE(r[2].terms.empty());
}

// reward.function's own keys are checked with the config, before a worker starts: factory_kwargs
// without factory, a pythonpath entry that is not a folder; and the interpreter an empty
// reward.function.python means: $VIRTUAL_ENV's, else ./.venv's, else python3.
TEST_F(RewardTerms, FunctionKeysAreCheckedAndTheInterpreterIsTheProjects) {
  const fs::path f = write("r.py", kBrevity);
  EXPECT_EQ(error_of([&] { load("  function: {path: " + f.string() + ", factory_kwargs: {a: 1}}\n"); }),
            "reward.function.factory_kwargs: set while reward.function.factory is false (set factory: true to call "
            "compute_score with them)");
  EXPECT_EQ(error_of([&] {
              load("  function: {path: " + f.string() + ", pythonpath: [" + (dir_ / "nope").string() + "]}\n");
            }),
            "reward.function.pythonpath: '" + (dir_ / "nope").string() + "' is not a folder (it does not exist)");
  EXPECT_EQ(error_of([&] { load("  function: {path: " + f.string() + ", pythonpath: [" + f.string() + "]}\n"); }),
            "reward.function.pythonpath: '" + f.string() + "' is not a folder");
  FunctionConfig fc;
  fc.python = "/opt/py/bin/python3";
  EXPECT_EQ(reward_python(fc), "/opt/py/bin/python3");
  fc.python.clear();
  const fs::path venv = dir_ / "venv";
  fs::create_directories(venv / "bin");
  std::ofstream(venv / "bin/python") << "";
  const char* saved = std::getenv("VIRTUAL_ENV");
  const std::string old = saved ? saved : "";
  ::setenv("VIRTUAL_ENV", venv.c_str(), 1);
  EXPECT_EQ(reward_python(fc), (venv / "bin/python").string());
  ::unsetenv("VIRTUAL_ENV");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  EXPECT_EQ(reward_python(fc), "python3");  // no .venv here
  fs::rename(venv, dir_ / ".venv");
  EXPECT_EQ(reward_python(fc), (dir_ / ".venv/bin/python").string());
  fs::current_path(cwd);
  if (saved) ::setenv("VIRTUAL_ENV", old.c_str(), 1);
}

TEST_F(RewardTerms, ErrorLimitIsTheSmallestOfTheTermsThatCanFail) {
  RewardConfig config;
  EXPECT_FALSE(scorer_can_fail(config, "math"));
  EXPECT_EQ(error_limit(config, "math").key, "reward.function.max_error_frac");
  config.terms.resize(3);
  config.terms[0].verifier = "math";
  config.terms[0].function.max_error_frac = 0.01;  // a built-in cannot fail: not its limit
  config.terms[1].verifier = "countdown";
  config.terms[2].command = {"./judge"};
  config.terms[2].function.max_error_frac = 0.2;
  EXPECT_TRUE(scorer_can_fail(config, "math"));
  const ErrorLimit limit = error_limit(config, "math");
  EXPECT_EQ(limit.key, "reward.terms[2].function.max_error_frac");
  EXPECT_EQ(limit.max_frac, 0.2);
  EXPECT_EQ(limit.scorer, "reward.terms");
  config.terms.pop_back();
  EXPECT_FALSE(scorer_can_fail(config, "math"));  // math and countdown never fail
}

TEST_F(RewardTerms, MistakesAreRefusedNamingTheItem) {
  const auto error = [](const std::vector<std::string>& overrides) {
    return error_of([&] { load_run_config("", overrides); });
  };
  EXPECT_EQ(error({"reward.terms=[{verifier: math}]", "reward.verifier=math"}),
            "reward.terms and reward.verifier 'math' both set: with terms, each term names its scorer (move it into a "
            "term)");
  EXPECT_EQ(error({"reward.terms=[{verifier: math}]", "reward.command=[./judge]"}),
            "reward.terms and reward.command both set: with terms, each term names its scorer (move it into a term)");
  EXPECT_EQ(error({"reward.terms=[{verifier: math}, {weight: 2}]"}),
            "reward.terms[1]: no scorer; give one of verifier, function.path, command");
  EXPECT_EQ(error({"reward.terms=[{verifier: math, command: [./judge]}]"}),
            "reward.terms[0].verifier 'math' and reward.terms[0].command both set: a term has one scorer");
  EXPECT_EQ(error({"reward.terms=[{verifier: maths}]"}),
            "reward.terms[0].verifier: unknown verifier 'maths' (known: math, arithmetic, countdown, code)");
  EXPECT_EQ(error({"reward.terms=[{verifier: math}, {verifier: math, weight: 0.5}]"}),
            "reward.terms[1]: the name 'math' is also reward.terms[0]'s; give each term its own name "
            "(reward.terms[1].name)");
  EXPECT_EQ(error({"reward.terms=[{verifier: math, name: a/b}]"}),
            "reward.terms[0].name: 'a/b' is not a metric name (letters, digits, '_', '-', '.')");
  EXPECT_EQ(error({"reward.terms=[{verifier: math, weight: 0}, {verifier: countdown, weight: 0}]"}),
            "reward.terms: every weight is 0, so every reward would be 0");
  EXPECT_EQ(error({"reward.terms=[{verifier: math, weight: .inf}]"}),
            "reward.terms[0].weight must be a finite number, got .inf");
  EXPECT_EQ(error({"reward.terms=[{function: {path: r.py, workers: 0}}]"}),
            "reward.terms[0].function.workers must be in [1, 64], got 0");
  EXPECT_EQ(error({"reward.terms=[{verifier: math, wieght: 1}]"}),
            "override 'reward.terms=[{verifier: math, wieght: 1}]': unknown key 'reward.terms[0].wieght' (did you mean "
            "'reward.terms[0].weight'?)");
  EXPECT_EQ(error({"reward.terms=[{verifier: math}]", "reward.terms[1].weight=2"}),
            "override 'reward.terms[1].weight=2': reward.terms has 1 item(s), so [1] is not one (set the whole list: "
            "reward.terms=[{...}, ...])");
  // One item's key from the command line, after the list.
  const RunConfig ok =
      load_run_config("", {"reward.terms=[{verifier: math}, {verifier: countdown}]", "reward.terms[1].weight=0.5"});
  EXPECT_EQ(ok.reward.terms[1].weight, 0.5);
  EXPECT_EQ(ok.reward.terms[0].weight, 1.0);
  // The resolved config (config.yaml of a run) reads back as the same terms.
  const RunConfig again = load_run_config(write("resolved.yaml", resolved_yaml(ok)));
  EXPECT_EQ(resolved_yaml(again), resolved_yaml(ok));
  ASSERT_EQ(again.reward.terms.size(), 2u);
  EXPECT_EQ(again.reward.terms[1].verifier, "countdown");
  EXPECT_EQ(again.reward.terms[1].weight, 0.5);
}

// One order decides which configured scorer scores, for make_verifier, the silence rule and the
// benchmarks alike: terms, else a function, else a command, else the built-in verifier; a term's own
// config is read the same way, and the workers a scorer keeps are counted from it.
TEST(ScorerKind, OneOrderForEveryReader) {
  RewardConfig c;
  EXPECT_EQ(scorer_kind(c), ScorerKind::verifier);
  EXPECT_STREQ(scorer_key(scorer_kind(c)), "reward.verifier");
  EXPECT_EQ(scorer_workers(c), 0);
  c.command = {"judge"};
  c.function.workers = 3;
  EXPECT_EQ(scorer_kind(c), ScorerKind::command);
  EXPECT_EQ(scorer_workers(c), 3);
  c.function.path = "f.py";
  EXPECT_EQ(scorer_kind(c), ScorerKind::function);
  EXPECT_STREQ(scorer_key(scorer_kind(c)), "reward.function");
  RewardTerm math;
  math.verifier = "math";
  RewardTerm fn;
  fn.function.path = "g.py";
  fn.function.workers = 2;
  RewardTerm cmd;
  cmd.command = {"judge"};
  cmd.function.workers = 4;
  c.terms = {math, fn, cmd};
  EXPECT_EQ(scorer_kind(c), ScorerKind::terms);
  EXPECT_STREQ(scorer_key(scorer_kind(c)), "reward.terms");
  EXPECT_EQ(scorer_kind(term_config(c, 0)), ScorerKind::verifier);
  EXPECT_EQ(term_config(c, 0).verifier, "math");
  EXPECT_EQ(scorer_kind(term_config(c, 1)), ScorerKind::function);
  EXPECT_EQ(scorer_kind(term_config(c, 2)), ScorerKind::command);
  EXPECT_TRUE(term_config(c, 2).terms.empty());
  EXPECT_EQ(scorer_workers(c), 6);  // the function's 2 and the command's 4; the verifier runs here
  EXPECT_EQ(error_limit(term_config(c, 0), "math").scorer, "reward.verifier math");
  EXPECT_EQ(error_limit(term_config(c, 2), "math").scorer, "reward.command");
}

}  // namespace
}  // namespace unstuck::reward
