// Reward workers: reward files written here in verl's style (a GSM8K compute_score like verl's own)
// and TRL's (a batch function reading an extra column) score through the bundled Python worker as
// the built-in math verifier does; a function that raises, hangs, returns a non-number, the wrong
// count, prints, or kills its own process gives that item (or batch) a named error, and the pool
// restarts the worker and goes on; a file without the function, with the wrong signature or that
// fails to import is refused at start with the reason.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "common/processes.h"
#include "unstuck/common/error.h"
#include "unstuck/reward/verifier.h"
#include "unstuck/reward/worker_pool.h"

namespace unstuck::reward {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The project's interpreter, or $UNSTUCK_TEST_PYTHON (the unprivileged run of this suite cannot
// reach an interpreter under /root).
std::string test_python() {
  const char* p = std::getenv("UNSTUCK_TEST_PYTHON");
  return p && *p ? p : UNSTUCK_PYTHON;
}

class WorkerPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("unstuck_workers_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }
  WorkerOptions python(const fs::path& file, const std::string& fn, const std::string& style, int workers = 1) {
    WorkerOptions o;
    o.argv = python_reward_worker_argv(test_python(), file.string(), fn, style);
    o.name = "reward.function " + file.filename().string() + ":" + fn;
    o.workers = workers;
    o.timeout_s = 20;
    return o;
  }
  static std::string start_error(const WorkerOptions& o) {
    try {
      WorkerPool pool(o);
    } catch (const UserError& e) {
      return e.what();
    }
    return "<started>";
  }
  static Json verl_item(const std::string& completion, const std::string& truth) {
    return {{"data_source", "openai/gsm8k"},
            {"solution_str", completion},
            {"ground_truth", truth},
            {"extra_info", Json::object()}};
  }

  fs::path dir_;
};

// verl's GSM8K scorer in spirit: the number after the last "####", compared as text.
const char* kVerlGsm8k = R"PY(
import re

def extract_solution(solution_str):
    found = re.findall(r"#### (\-?[0-9\.\,]+)", solution_str)
    if not found:
        return None
    return found[-1].replace(",", "").replace("$", "")

def compute_score(data_source, solution_str, ground_truth, extra_info=None, format_score=0.0, score=1.0):
    answer = extract_solution(solution_str)
    if answer is None:
        return 0
    return {"score": score if answer == ground_truth else format_score, "acc": answer == ground_truth}
)PY";

TEST_F(WorkerPoolTest, VerlStyleScoresLikeTheMathVerifier) {
  WorkerPool pool(python(write("gsm8k.py", kVerlGsm8k), "compute_score", "verl"));
  RewardConfig config;
  config.format_reward = 0;
  const auto math = make_math_verifier(config);
  const std::vector<std::pair<std::string, std::string>> cases{{"so 3 + 4 = 7\n#### 7", "7"},
                                                               {"#### 8", "7"},
                                                               {"no answer here", "7"},
                                                               {"#### -5", "-5"},
                                                               {"#### 12", "12"},
                                                               {"#### 12", "13"}};
  Json batch = Json::array();
  for (const auto& [c, t] : cases) batch.push_back(verl_item(c, t));
  const auto results = pool.run({batch});
  ASSERT_EQ(results.size(), 1u);
  ASSERT_EQ(results[0].size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    data::TaskRecord record;
    record.task = "math";
    record.answer = cases[i].second;
    const double builtin = math->score(cases[i].first, record).reward;
    ASSERT_TRUE(results[0][i].ok) << results[0][i].error;
    EXPECT_EQ(results[0][i].score, builtin) << cases[i].first;
  }
  // A dict's other numeric keys come back as extras (verl logs them as reward_extra_info).
  EXPECT_EQ(results[0][0].extra.value("acc", -1.0), 1.0);
  EXPECT_EQ(results[0][1].extra.value("acc", -1.0), 0.0);
  EXPECT_TRUE(results[0][2].extra.empty());  // a plain number
}

TEST_F(WorkerPoolTest, TrlStyleGetsEveryColumnAndRunsOncePerBatch) {
  const fs::path file = write("trl.py", R"PY(
calls = 0

def reward_answer(prompts, completions, answer, **kwargs):
    global calls
    calls += 1
    print("printed by the function: must not reach the protocol")
    return [float(c.strip().endswith(a)) + 0.001 * calls + (10.0 if kwargs.get("difficulty", [None])[0] == "hard" else 0.0)
            for c, a in zip(completions, answer)]
)PY");
  WorkerPool pool(python(file, "reward_answer", "trl"));
  const auto item = [](const std::string& completion, const std::string& answer) {
    return Json{
        {"prompt", "2+2="}, {"completion", completion}, {"columns", {{"answer", answer}, {"difficulty", "easy"}}}};
  };
  const auto results =
      pool.run({Json::array({item("it is 4", "4"), item("it is 5", "4")}), Json::array({item("7", "7")})});
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0][0].ok && results[0][1].ok && results[1][0].ok);
  EXPECT_DOUBLE_EQ(results[0][0].score, 1.001);  // one call for the whole first batch
  EXPECT_DOUBLE_EQ(results[0][1].score, 0.001);
  EXPECT_DOUBLE_EQ(results[1][0].score, 1.002);  // the module stays imported: the second call
}

TEST_F(WorkerPoolTest, FailuresAreNamedPerItemOrBatchAndTheWorkerIsRestarted) {
  const fs::path file = write("bad.py", R"PY(
import os, time

def compute_score(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "raise":
        return 1 / 0
    if solution_str == "hang":
        time.sleep(600)
    if solution_str == "text":
        return "abc"
    if solution_str == "nan":
        return float("nan")
    if solution_str == "die":
        os.kill(os.getpid(), 9)
    if solution_str == "hog":
        return len(bytearray(2 << 30))
    return 0.5
)PY");
  WorkerOptions o = python(file, "compute_score", "verl");
  o.timeout_s = 2;
  o.memory_mb = 1024;
  WorkerPool pool(o);
  const auto one = [&](const std::string& what) {
    const auto r = pool.run({Json::array({verl_item(what, "1"), verl_item("fine", "1")})});
    return r.at(0);
  };
  auto r = one("raise");
  EXPECT_FALSE(r[0].ok);
  EXPECT_NE(r[0].error.find("ZeroDivisionError"), std::string::npos) << r[0].error;
  EXPECT_NE(r[0].error.find("bad.py"), std::string::npos) << r[0].error;  // the traceback names the file
  EXPECT_TRUE(r[1].ok);
  EXPECT_EQ(r[1].score, 0.5);
  r = one("text");
  EXPECT_EQ(r[0].error, "returned str: 'abc'");
  r = one("nan");
  EXPECT_EQ(r[0].error, "returned nan");
  EXPECT_EQ(pool.restarts(), 0);
  r = one("hog");  // the address-space limit: a MemoryError, not the machine's memory
  EXPECT_NE(r[0].error.find("MemoryError"), std::string::npos) << r[0].error;
  EXPECT_TRUE(r[1].ok);
  EXPECT_EQ(pool.restarts(), 1);  // the worker that ran out of memory is recycled
  // The whole batch shares its worker's fate: both items fail, the worker restarts, the next batch scores.
  r = one("hang");
  EXPECT_EQ(r[0].error, "timed out after 2 s (the worker was restarted)");
  EXPECT_EQ(r[1].error, r[0].error);
  EXPECT_EQ(pool.restarts(), 2);
  r = one("die");
  EXPECT_EQ(r[0].error, "the worker was killed by signal 9 (Killed) while scoring this batch");
  EXPECT_EQ(pool.restarts(), 3);
  r = one("fine");
  EXPECT_TRUE(r[0].ok && r[1].ok);
}

TEST_F(WorkerPoolTest, OneBadItemCostsThatItemAloneWithItsCause) {
  const fs::path file = write("odd.py", R"PY(
import sys

class BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr")

def compute_score(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "huge":
        return 10 ** 400
    if solution_str == "above float32":
        return 1e39
    if solution_str == "bad repr":
        return BadRepr()
    if solution_str == "exit":
        sys.exit(3)
    if solution_str == "interrupt":
        raise KeyboardInterrupt
    if solution_str == "surrogate":
        raise ValueError("bad \udc80 byte")
    if solution_str == "dict of odd keys":
        return {"score": 1.0, "\udc81": 2.0, "big": 10 ** 400}
    return 0.5
)PY");
  WorkerPool pool(python(file, "compute_score", "verl"));
  const std::vector<std::string> odd = {"huge", "above float32", "bad repr", "exit", "interrupt", "surrogate"};
  Json batch = Json::array();
  for (const std::string& what : odd) batch.push_back(verl_item(what, "1"));
  batch.push_back(verl_item("dict of odd keys", "1"));
  batch.push_back(verl_item("fine", "1"));
  const auto r = pool.run({batch}).at(0);
  ASSERT_EQ(r.size(), odd.size() + 2);
  for (std::size_t i = 0; i < odd.size(); ++i) EXPECT_FALSE(r[i].ok) << odd[i];
  EXPECT_NE(r[0].error.find("outside float32's range"), std::string::npos) << r[0].error;
  EXPECT_EQ(r[1].error, "returned 1e+39, outside float32's range (|score| <= 3.4e38)");
  EXPECT_EQ(r[2].error, "returned BadRepr: <a BadRepr whose repr raised RuntimeError>");
  EXPECT_NE(r[3].error.find("SystemExit: 3"), std::string::npos) << r[3].error;
  EXPECT_NE(r[4].error.find("KeyboardInterrupt"), std::string::npos) << r[4].error;
  EXPECT_NE(r[5].error.find("ValueError: bad \\udc80 byte"), std::string::npos) << r[5].error;
  ASSERT_TRUE(r[6].ok) << r[6].error;  // its odd extras are named or dropped, its score kept
  EXPECT_EQ(r[6].score, 1.0);
  EXPECT_EQ(r[6].extra.size(), 1u);
  EXPECT_EQ(r[6].extra.count("\\udc81"), 1u);
  ASSERT_TRUE(r[7].ok) << r[7].error;
  EXPECT_EQ(r[7].score, 0.5);
  EXPECT_EQ(pool.restarts(), 0);  // nothing above ended the worker
}

// A reward function that leaves processes behind in every way Python allows: a child in a new
// session, a double-forked daemon, a plain child.
const char* kLeavesProcesses = R"PY(
import os, subprocess, sys

def compute_score(data_source, solution_str, ground_truth, extra_info):
    token = ground_truth
    sleep = [sys.executable, "-c", "import time; time.sleep(600)", token]
    subprocess.Popen(sleep, start_new_session=True)
    subprocess.Popen(sleep)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, sleep)
        os._exit(0)
    os.wait()
    return 1.0
)PY";

TEST_F(WorkerPoolTest, NothingAFunctionStartsOutlivesItsWorker) {
  const std::string token = "unstuck-leftover-" + std::to_string(::getpid());
  const fs::path file = write("leaves.py", kLeavesProcesses);
  {
    WorkerPool pool(python(file, "compute_score", "verl"));
    const auto r = pool.run({Json::array({verl_item("x", token)})}).at(0);
    ASSERT_TRUE(r[0].ok) << r[0].error;
    EXPECT_EQ(unstuck::testing::processes_with(token), 3);  // all three running while the worker lives
  }
  EXPECT_EQ(unstuck::testing::processes_with(token), 0) << "left after the pool stopped";
}

TEST_F(WorkerPoolTest, NothingOutlivesATrainerKilledBySigkill) {
  const std::string token = "unstuck-orphan-" + std::to_string(::getpid());
  const fs::path file = write("leaves.py", kLeavesProcesses);
  const WorkerOptions options = python(file, "compute_score", "verl");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t trainer = ::fork();
  if (trainer == 0) {  // a stand-in trainer: scores once, says so, waits to be killed
    WorkerPool pool(options);
    const auto r = pool.run({Json::array({verl_item("x", token)})}).at(0);
    (void)!::write(ready[1], r[0].ok ? "y" : "n", 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(c, 'y');
  EXPECT_EQ(unstuck::testing::processes_with(token), 3);
  ::kill(trainer, SIGKILL);
  int status = 0;
  ::waitpid(trainer, &status, 0);
  EXPECT_EQ(unstuck::testing::processes_with(token), 0) << "left after the trainer was killed";
}

// Restarts run beside the others' scoring: a worker whose import takes 3 s when restarted does not
// time out the healthy worker's 1 s requests meanwhile.
TEST_F(WorkerPoolTest, ASlowRestartDoesNotFailHealthyWorkers) {
  const fs::path marker = dir_ / "restarted";
  const fs::path file = write("slow.py", R"PY(
import os, time
MARKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "restarted")
if os.path.exists(MARKER):
    time.sleep(3)  # a restart imports slowly (torch, transformers)
open(MARKER, "w").close()

def compute_score(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "hang":
        time.sleep(600)
    time.sleep(0.2)
    return 1.0
)PY");
  WorkerOptions o = python(file, "compute_score", "verl", 2);
  o.timeout_s = 1;
  WorkerPool pool(o);
  std::vector<Json> batches{Json::array({verl_item("hang", "1")})};
  for (int k = 0; k < 8; ++k) batches.push_back(Json::array({verl_item("fine", "1")}));
  const auto r = pool.run(batches);
  EXPECT_EQ(r[0][0].error, "timed out after 1 s (the worker was restarted)");
  for (std::size_t k = 1; k < r.size(); ++k) EXPECT_TRUE(r[k][0].ok) << k << ": " << r[k][0].error;
  EXPECT_EQ(pool.restarts(), 1);
}

// A restart that fails is each waiting batch's reward_error, named, not the end of the run; the
// worker is tried again with back-off and comes back once it can start.
TEST_F(WorkerPoolTest, AFailedRestartIsTheBatchesErrorAndIsRetried) {
  const fs::path file = write("flaky.py", R"PY(
import os
BROKEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "broken")
if os.path.exists(BROKEN):
    raise RuntimeError("the model server is down")

def compute_score(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "die":
        os.kill(os.getpid(), 9)
    return 1.0
)PY");
  WorkerOptions o = python(file, "compute_score", "verl", 1);
  o.timeout_s = 5;
  WorkerPool pool(o);
  std::ofstream(dir_ / "broken") << "";
  const auto first = pool.run({Json::array({verl_item("die", "1")})});
  EXPECT_EQ(first[0][0].error, "the worker was killed by signal 9 (Killed) while scoring this batch");
  const auto waiting = pool.run({Json::array({verl_item("fine", "1"), verl_item("fine", "1")})});
  ASSERT_EQ(waiting[0].size(), 2u);
  EXPECT_FALSE(waiting[0][0].ok);
  EXPECT_NE(waiting[0][0].error.find("could not be started again"), std::string::npos) << waiting[0][0].error;
  EXPECT_NE(waiting[0][0].error.find("the model server is down"), std::string::npos) << waiting[0][0].error;
  fs::remove(dir_ / "broken");
  std::vector<WorkerResult> later;
  for (int attempt = 0; attempt < 40 && !(later.size() == 1 && later[0].ok); ++attempt) {
    later = pool.run({Json::array({verl_item("fine", "1")})})[0];
    if (!later[0].ok) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_EQ(later.size(), 1u);
  EXPECT_TRUE(later[0].ok) << later[0].error;  // back once it can start (back-off: at most ~8 s here)
}

TEST_F(WorkerPoolTest, AStartPastStartTimeoutIsRefusedNamingTheKey) {
  const fs::path file = write("sleepy.py",
                              "import time\ntime.sleep(30)\n"
                              "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
                              "    return 1.0\n");
  WorkerOptions o = python(file, "compute_score", "verl");
  o.start_timeout_s = 1;
  EXPECT_EQ(start_error(o),
            "reward.function sleepy.py:compute_score: the worker was not ready within 1 s (raise "
            "reward.function.start_timeout_s, or a term's function.start_timeout_s)");
}

// A reward file inside a package (relative imports, as trl/rewards/accuracy_rewards.py has), named
// by its path, as verl's pkg://a.b.c, or as a.b.c with the package's folder on pythonpath.
TEST_F(WorkerPoolTest, PackageFilesAndModulesLoadAsVerlAndPythonLoadThem) {
  fs::create_directories(dir_ / "src" / "mypkg" / "rewards");
  write("src/mypkg/__init__.py", "");
  write("src/mypkg/rewards/__init__.py", "");
  write("src/mypkg/rewards/helpers.py", "def answer_of(text):\n    return text.strip().split()[-1]\n");
  write("src/mypkg/rewards/accuracy.py",
        "from .helpers import answer_of\nfrom ..rewards import helpers\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        "    return float(answer_of(solution_str) == ground_truth and helpers.answer_of is answer_of)\n");
  const Json batch = Json::array({verl_item("so it is 7", "7"), verl_item("so it is 8", "7")});
  const auto scores = [&](WorkerOptions o) {
    const auto r = WorkerPool(std::move(o)).run({batch}).at(0);
    std::vector<double> out;
    for (const WorkerResult& x : r) out.push_back(x.ok ? x.score : -1.0);
    return out;
  };
  const std::vector<double> expected{1.0, 0.0};
  EXPECT_EQ(scores(python(dir_ / "src/mypkg/rewards/accuracy.py", "compute_score", "verl")), expected);
  for (const std::string& module :
       {"pkg://mypkg.rewards.accuracy", "pkg://mypkg/rewards/accuracy", "mypkg.rewards.accuracy"}) {
    WorkerOptions o = python(dir_ / "unused.py", "compute_score", "verl");
    o.argv = python_reward_worker_argv(test_python(), module, "compute_score", "verl");
    o.argv.insert(o.argv.end(), {"--pythonpath", (dir_ / "src").string()});
    EXPECT_EQ(scores(o), expected) << module;
  }
  WorkerOptions missing = python(dir_ / "unused.py", "compute_score", "verl");
  missing.argv = python_reward_worker_argv(test_python(), "pkg://no_such_pkg.rewards", "compute_score", "verl");
  const std::string why = start_error(missing);
  EXPECT_NE(why.find("importing no_such_pkg.rewards failed"), std::string::npos) << why;
  EXPECT_NE(why.find("ModuleNotFoundError"), std::string::npos) << why;
}

TEST(FunctionConfig, WhatNamesAModule) {
  EXPECT_TRUE(names_a_module("pkg://verl.utils.reward_score"));
  EXPECT_TRUE(names_a_module("verl.utils.reward_score"));
  EXPECT_TRUE(names_a_module("my_reward"));
  EXPECT_FALSE(names_a_module("rewards/my_reward.py"));
  EXPECT_FALSE(names_a_module("my_reward.py"));
  EXPECT_FALSE(names_a_module("a..b"));
  EXPECT_FALSE(names_a_module("1abc"));
  EXPECT_FALSE(names_a_module(""));
}

TEST(WorkerScores, FiniteScoresAboveFloat32AreRefusedByTheTrainerSide) {
  // A reward command or worker that answers 1e39 itself: named, not inf in the trainer.
  EXPECT_EQ(worker_item_result(Json{{"score", 1e39}}).error,
            "the score 1e+39 is outside float32's range (|score| <= 3.4e38)");
  EXPECT_TRUE(worker_item_result(Json{{"score", 3.4e38}}).ok);
}

// TRL 1.16's calling convention, as GRPOTrainer._calculate_rewards has it: completion_ids,
// trainer_state (global_step, max_steps, epoch), log_extra and log_metric, every column; an async
// function is awaited; None is "not applicable"; log_extra's numbers come back as extras, its text
// as columns, log_metric's values once per call.
TEST_F(WorkerPoolTest, TrlFunctionsGetTrlsWholeCallingConvention) {
  const fs::path file = write("trl_full.py", R"PY(
import asyncio

async def reward(prompts, completions, completion_ids, trainer_state, log_extra, log_metric, level, **kwargs):
    await asyncio.sleep(0)
    log_extra("n_ids", [len(ids) for ids in completion_ids])
    log_extra("level_seen", list(level))
    log_metric("calls_step", float(trainer_state.global_step))
    scale = trainer_state.global_step / trainer_state.max_steps + trainer_state.epoch
    return [None if lv == "skip" else float(sum(ids)) + scale for ids, lv in zip(completion_ids, level)]
)PY");
  WorkerPool pool(python(file, "reward", "trl"));
  const auto item = [](std::vector<int> ids, const std::string& level) {
    return Json{{"prompt", "p"}, {"completion", "c"}, {"completion_ids", ids}, {"columns", {{"level", level}}}};
  };
  const Json state{{"global_step", 3}, {"max_steps", 4}, {"epoch", 0.5}};
  const auto results = pool.run({Json::array({item({1, 2, 3}, "easy"), item({}, "skip")})}, state);
  ASSERT_EQ(results.size(), 1u);
  const WorkerResult& a = results[0][0];
  const WorkerResult& b = results[0][1];
  ASSERT_TRUE(a.ok) << a.error;
  EXPECT_FALSE(a.none);
  EXPECT_EQ(a.score, 6 + 0.75 + 0.5);
  EXPECT_EQ(a.extra.value("n_ids", -1.0), 3.0);
  EXPECT_EQ(a.columns.value("level_seen", ""), "easy");
  EXPECT_EQ(a.metrics, (Json{{"calls_step", {3.0}}}));
  ASSERT_TRUE(b.ok) << b.error;
  EXPECT_TRUE(b.none);
  EXPECT_EQ(b.columns.value("n_ids", -1.0), 0.0);
  EXPECT_TRUE(b.metrics.empty()) << "a call's metrics come back once, on its first completion";
}

// reward.function.factory: the named object is called once with factory_kwargs (TRL's
// get_soft_overlong_punishment); reward.function.kwargs go to every call (verl's reward_kwargs), over
// the passed ones; a factory that fails or returns no function is refused at start, naming it.
TEST_F(WorkerPoolTest, FactoriesAndRewardKwargs) {
  const fs::path file = write("factory.py", R"PY(
def get_penalty(limit):
    def penalty(completion_ids, **kwargs):
        return [-1.0 if len(ids) > limit else 0.0 for ids in completion_ids]
    return penalty

def broken(limit):
    raise ValueError("no factory today")

def not_a_function(limit):
    return 3

def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0, ground_scale=1.0):
    return float(solution_str == ground_truth) * ground_scale + bonus
)PY");
  WorkerOptions o = python(file, "get_penalty", "trl");
  o.argv.insert(o.argv.end(), {"--factory-kwargs", R"({"limit": 2})"});
  WorkerPool pool(o);
  const auto item = [](std::vector<int> ids) {
    return Json{{"prompt", "p"}, {"completion", "c"}, {"completion_ids", ids}};
  };
  const auto r = pool.run({Json::array({item({1, 2}), item({1, 2, 3})})});
  EXPECT_EQ(r[0][0].score, 0.0);
  EXPECT_EQ(r[0][1].score, -1.0);
  for (const char* bad : {"broken", "not_a_function"}) {
    WorkerOptions b = python(file, bad, "trl");
    b.argv.insert(b.argv.end(), {"--factory-kwargs", R"({"limit": 2})"});
    const std::string e = start_error(b);
    EXPECT_NE(e.find(std::string("factory ") + bad), std::string::npos) << e;
  }
  WorkerOptions v = python(file, "compute_score", "verl");
  v.argv.insert(v.argv.end(), {"--kwargs", R"({"bonus": 0.25, "ground_scale": 2.0})"});
  WorkerPool verl(v);
  const auto s = verl.run({Json::array({verl_item("7", "7"), verl_item("8", "7")})});
  EXPECT_EQ(s[0][0].score, 2.25);
  EXPECT_EQ(s[0][1].score, 0.25);
  WorkerOptions unknown = python(file, "compute_score", "verl");
  unknown.argv.insert(unknown.argv.end(), {"--kwargs", R"({"colour": 1})"});
  const std::string e = start_error(unknown);
  EXPECT_NE(e.find("reward.function.kwargs colour"), std::string::npos) << e;
}

TEST(WorkerScores, NoneMetricsAndColumnsAreRead) {
  const WorkerResult none = worker_item_result(Json{{"none", true}, {"columns", {{"why", "skip"}}}});
  EXPECT_TRUE(none.ok && none.none);
  EXPECT_EQ(none.columns.value("why", ""), "skip");
  const WorkerResult r = worker_item_result(
      Json{{"score", 1.5}, {"extra", {{"acc", true}, {"bad", "x"}}}, {"metrics", {{"m", {1.0, "x", 2.0}}}}});
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.extra, (Json{{"acc", 1.0}}));
  EXPECT_EQ(r.metrics, (Json{{"m", {1.0, 2.0}}}));
}

TEST_F(WorkerPoolTest, TrlWrongCountAndRaiseFailTheBatch) {
  const fs::path file = write("trl_bad.py", R"PY(
def short(prompts, completions, **kwargs):
    return [1.0]

def raises(prompts, completions, **kwargs):
    raise ValueError("bad column")

def with_none(prompts, completions, **kwargs):
    return [None for _ in completions]
)PY");
  const Json batch = Json::array({{{"prompt", "p"}, {"completion", "a"}}, {{"prompt", "p"}, {"completion", "b"}}});
  auto r = WorkerPool(python(file, "short", "trl")).run({batch})[0];
  EXPECT_EQ(r[0].error, "returned 1 values for 2 completions");
  EXPECT_EQ(r[1].error, r[0].error);
  r = WorkerPool(python(file, "raises", "trl")).run({batch})[0];
  EXPECT_NE(r[0].error.find("ValueError: bad column"), std::string::npos) << r[0].error;
  // None is TRL's "not applicable to this completion", not an error (verl has no such value: there it is one).
  r = WorkerPool(python(file, "with_none", "trl")).run({batch})[0];
  EXPECT_TRUE(r[0].ok && r[0].none && r[1].none) << r[0].error;
}

TEST_F(WorkerPoolTest, BatchesRunOnSeveralWorkersAtOnce) {
  // Each worker draws its own number at import (its pid is 2 in every worker: each has a PID namespace).
  const fs::path file = write("pid.py",
                              "import random\nmine = random.SystemRandom().random()\n"
                              "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
                              "    return mine\n");
  WorkerPool pool(python(file, "compute_score", "verl", 2));
  const auto r = pool.run({Json::array({verl_item("a", "1")}), Json::array({verl_item("b", "1")})});
  ASSERT_TRUE(r[0][0].ok && r[1][0].ok);
  EXPECT_NE(r[0][0].score, r[1][0].score);  // two processes served the two batches
}

TEST_F(WorkerPoolTest, StartRefusesWhatCannotScoreNamingWhy) {
  const fs::path file = write("r.py",
                              "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
                              "    return 1\n\ndef two(a, b):\n    return 1\n"
                              "\ndef by_env(completions, environments, **kwargs):\n    return [1.0]\n"
                              "\ndef two_columns(completions, a, b, **kwargs):\n    return [1.0]\n");
  EXPECT_EQ(start_error(python(file, "nope", "verl")),
            "reward.function r.py:nope: the worker did not start: " + file.string() +
                " has no function 'nope' (its functions: by_env, compute_score, two, two_columns)");
  const std::string sig = start_error(python(file, "two", "verl"));
  EXPECT_NE(sig.find("two(a, b) cannot be called as verl calls compute_score (data_source=, solution_str=, "
                     "ground_truth=, extra_info=)"),
            std::string::npos)
      << sig;
  const std::string trl = start_error(python(file, "two", "trl"));
  EXPECT_NE(trl.find("cannot be called as TRL calls a reward function"), std::string::npos) << trl;
  // TRL's environments argument (environment_factory's instances): the worker starts and says the
  // function takes it (the tool workers holding the instances call it then); TRL's others do not.
  for (const char* name : {"by_env", "two_columns"}) {
    WorkerPool pool(python(file, name, "trl"));
    const WorkerResult d = pool.run({nlohmann::json::array({{{"describe", true}}})}).at(0).at(0);
    ASSERT_TRUE(d.ok) << d.error;
    EXPECT_EQ(d.value, nlohmann::json({{"environments", std::string(name) == "by_env"}})) << name;
  }
  const fs::path broken = write("broken.py", "import no_such_module_here\n");
  const std::string imp = start_error(python(broken, "f", "verl"));
  EXPECT_NE(imp.find("importing " + broken.string() + " failed"), std::string::npos) << imp;
  EXPECT_NE(imp.find("ModuleNotFoundError"), std::string::npos) << imp;
  EXPECT_NE(
      start_error(python(dir_ / "missing.py", "f", "verl")).find("no such file: " + (dir_ / "missing.py").string()),
      std::string::npos);
  WorkerOptions o = python(file, "compute_score", "verl");
  o.argv[0] = (dir_ / "no_python").string();
  EXPECT_EQ(start_error(o),
            "reward.function r.py:compute_score: the worker did not start: cannot execute the worker command");
  o.argv = {"/bin/sh", "-c", "echo hello"};
  EXPECT_EQ(
      start_error(o),
      "reward.function r.py:compute_score: the worker did not start: its first line is not {\"ready\": true}: hello");
  o.argv = {"/bin/sh", "-c", "exit 3"};
  EXPECT_EQ(start_error(o),
            "reward.function r.py:compute_score: the worker exited with status 3 before it was ready (its messages are "
            "above)");
}

}  // namespace
}  // namespace unstuck::reward
