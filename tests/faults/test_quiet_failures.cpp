// The quiet failures of issue 31, each through the CLI as a user meets it: `unstuck config check`
// runs the run's own checks (where `config show` passes), runs that lose their learning say so (and
// one that skipped most of its steps exits 3), a run near its cgroup's memory limit stops with a
// named error and keeps its checkpoint, and a rank that outlives a killed rank 0 prints one line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <thread>

#include "faults/fault_util.h"
#include "train/tiny_task.h"
#include "unstuck/common/cuda_info.h"
#include "unstuck/dist/launcher.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/grpo.h"

namespace unstuck::faults {
namespace {

struct Cli {
  int code = -1;
  std::string out;
};

// `unstuck ARGS` with `env` (NAME=value ...) before it, stdout and stderr into `log`.
Cli cli(const std::string& args, const fs::path& log, const std::string& env = "") {
  const std::string command = env + " '" + UNSTUCK_BINARY + "' " + args + " > '" + log.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(log)};
}

// The "error: ..." line of a command's output, the machine's available memory (which moves
// between two commands) masked.
std::string error_line(const std::string& text) {
  const std::size_t at = text.rfind("error: ");
  if (at == std::string::npos) return "";
  static const std::regex available("this machine's [0-9.]+ [KMGTP]?i?B");
  return std::regex_replace(text.substr(at, text.find('\n', at) - at), available, "this machine's N");
}

class QuietFailures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("unstuck_quiet_failures_" + std::to_string(::getpid()));
    base_ = train::tiny_sft_base(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // A GRPO config file of the tiny task named `name`, with `edit` applied.
  template <class Edit>
  static fs::path config(const std::string& name, Edit edit) {
    RunConfig c = train::tiny_grpo_config(base_, name);
    edit(c);
    const fs::path file = dir_ / (name + ".yaml");
    write_file(file, resolved_yaml(c));
    return file;
  }
  static fs::path config(const std::string& name) {
    return config(name, [](RunConfig&) {});
  }

  static fs::path dir_;
  static RunConfig base_;
};
fs::path QuietFailures::dir_;
RunConfig QuietFailures::base_;

// `generate --config C` samples as C's rollout section says (its temperature used to be replaced by
// the flags' greedy defaults); a flag given wins; without --config the default is greedy. --json
// writes one object per prompt and a timing line that says how it sampled, on --threads threads.
TEST_F(QuietFailures, GenerateSamplesAsItsConfigSaysAndItsFlagsOverrideIt) {
  const fs::path file = config("gen", [](RunConfig& c) {
    c.rollout.temperature = 1.0;
    c.rollout.top_k = 5;
  });
  const std::string model = base_.sft.output;
  auto last_json = [](const std::string& out) {
    std::vector<nlohmann::json> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.front() == '{') lines.push_back(nlohmann::json::parse(line));
    }
    return lines;
  };
  const std::string args = "generate --model '" + model + "' --prompt '12+7=' --json --seed 3 --threads 1 ";
  const Cli from_config = cli(args + "--config " + file.string(), dir_ / "gen1.log");
  ASSERT_EQ(from_config.code, 0) << from_config.out;
  const auto lines = last_json(from_config.out);
  ASSERT_EQ(lines.size(), 2u) << from_config.out;
  EXPECT_EQ(lines[0]["prompt"], "12+7=");
  EXPECT_FALSE(lines[0]["ids"].empty());
  EXPECT_EQ(lines[0]["ids"].size(), lines[0]["logprobs"].size());
  EXPECT_TRUE(lines[0]["finish"] == "eos" || lines[0]["finish"] == "length") << lines[0];
  EXPECT_EQ(lines[1]["timing"]["threads"], 1);
  EXPECT_EQ(lines[1]["sampling"]["temperature"], 1.0);
  EXPECT_EQ(lines[1]["sampling"]["top_k"], 5);
  const Cli flagged = cli(args + "--config " + file.string() + " --temperature 0", dir_ / "gen2.log");
  ASSERT_EQ(flagged.code, 0) << flagged.out;
  EXPECT_EQ(last_json(flagged.out).back()["sampling"]["temperature"], 0.0);
  EXPECT_EQ(last_json(flagged.out).back()["sampling"]["top_k"], 5);
  const Cli plain = cli(args, dir_ / "gen3.log");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(last_json(plain.out).back()["sampling"]["temperature"], 0.0);
  EXPECT_EQ(last_json(plain.out).back()["sampling"]["top_k"], 0);
}

// What only a real run used to reject: `config show` passes it, `config check` fails with the
// run's own message (exit 2) and writes nothing; a good config passes and writes nothing either.
TEST_F(QuietFailures, ConfigCheckRunsEveryCheckOfTheRun) {
  struct Case {
    std::string name, overrides, needle;
  };
  std::vector<Case> cases = {
      {"memory", "grpo.prompts_per_step=100000000 grpo.minibatches=1", "exceeds this machine's"},
      {"no_data", "data.train_path=" + (dir_ / "missing.jsonl").string(), "missing.jsonl"},
      {"fit", "rollout.max_new_tokens=20", "every prompt is longer than 4 tokens"},
      {"no_base", "grpo.base_model=" + (dir_ / "nowhere").string(), "grpo.base_model must be a policy directory"},
      {"bad_tokenizer", "tokenizer.path=" + (dir_ / "nothing.model").string(), "nothing.model"},
      // A run directory under a file: train used to fail at its first write, config check said ok.
      {"output_dir_file", "run.output_dir=" + (dir_ / "a_file" / "runs").string(),
       "run.output_dir: cannot write the run directory"},
      // A key this run does not read: lora.* without lora.rank trained every parameter in silence.
      {"unread_key", "lora.init=pissa lora.dropout=0.05", "lora.dropout: lora.rank is 0 (full-parameter training)"},
  };
  write_file(dir_ / "a_file", "not a folder");
  // rollout.decode: graphs where run.device: auto resolves to the CPU (machines without a GPU).
  if (cuda_device_count() == 0)
    cases.push_back({"graphs_on_cpu", "run.device=auto rollout.decode=graphs", "rollout.decode: graphs needs a GPU"});
  const fs::path file = config("check");
  for (const Case& c : cases) {
    const fs::path log = dir_ / ("check_" + c.name + ".log");
    EXPECT_EQ(cli("config show --no-docs " + file.string() + " " + c.overrides, log).code, 0) << c.name;
    const Cli check = cli("config check --command train --config " + file.string() + " " + c.overrides, log);
    EXPECT_EQ(check.code, 2) << c.name << ": " << check.out;
    EXPECT_NE(check.out.find(c.needle), std::string::npos) << c.name << ": " << check.out;
    const Cli train = cli("train --config " + file.string() + " " + c.overrides, dir_ / ("train_" + c.name + ".log"));
    EXPECT_EQ(train.code, 2) << c.name;
    EXPECT_EQ(error_line(check.out), error_line(train.out)) << c.name;  // the same message
    EXPECT_FALSE(error_line(check.out).empty()) << c.name;
    EXPECT_FALSE(fs::exists(dir_ / "runs" / "check")) << c.name << " wrote the run directory";
  }
  // A run directory that already holds checkpoints, and an unwritable SFT output.
  const Cli done = cli("train --config " + file.string() + " run.name=done grpo.steps=1", dir_ / "done.log");
  ASSERT_EQ(done.code, 0) << done.out;
  // A toy plan's allocator slack is not "above the plan" (src/train/peak_check.h).
  EXPECT_EQ(done.out.find("measured peak memory"), std::string::npos) << done.out;
  const Cli again =
      cli("config check --config " + file.string() + " --command train run.name=done", dir_ / "again.log");
  EXPECT_EQ(again.code, 2);
  EXPECT_NE(again.out.find("already holds checkpoints of an earlier run"), std::string::npos) << again.out;
  const fs::path sft_file = dir_ / "sft.yaml";
  write_file(sft_file, resolved_yaml(base_));
  const Cli sft = cli(
      "config check --command sft --config " + sft_file.string() + " sft.output=/proc/unstuck_cannot_write_here/model",
      dir_ / "sft.log");
  EXPECT_EQ(sft.code, 2);
  EXPECT_NE(sft.out.find("sft.output: cannot write the model directory"), std::string::npos) << sft.out;
  // A good config: the plan, exit 0, nothing written.
  const Cli ok = cli("config check --command train --config " + file.string(), dir_ / "ok.log");
  ASSERT_EQ(ok.code, 0) << ok.out;
  for (const char* part :
       {"train: plan", "train data", "test data", "stop ids", "seeds", "memory plan per rank", "config check: ok"})
    EXPECT_NE(ok.out.find(part), std::string::npos) << part << "\n" << ok.out;
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "check"));
  const Cli json = cli("config check --json --command train --config " + file.string(), dir_ / "json.log");
  ASSERT_EQ(json.code, 0) << json.out;
  const nlohmann::json plan = nlohmann::json::parse(json.out);
  EXPECT_EQ(plan["command"], "train");
  EXPECT_GT(plan["memory"]["peak_bytes"].get<double>(), 0);
  EXPECT_EQ(plan["data"]["train"]["records"].get<int64_t>(), plan["data"]["train"]["kept"].get<int64_t>());
}

// bf16 at lr 1e3 loses its reward, fp16 at lr 1e6 skips every step after the first: both used to
// end with exit 0 and no word. Now the first warns and summarizes; the second also exits 3.
TEST_F(QuietFailures, RunsThatLoseTheirLearningSaySo) {
  const fs::path collapsed = config("collapsed", [](RunConfig& c) {
    c.precision.mode = precision::PrecisionMode::bf16;
    c.optim.lr = 1e3;
    c.grpo.steps = 12;
  });
  const Cli a = cli("train --config " + collapsed.string(), dir_ / "collapsed.log");
  EXPECT_EQ(a.code, 0) << a.out;
  // Which signals cross first depends on how the weights diverge (the reward's collapse, the KL,
  // non-finite logits: test_run_health.cpp checks each rule); the run must name at least one.
  EXPECT_NE(a.out.find("train: health over 12 step(s)"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find(" warning(s):\n  step "), std::string::npos) << a.out;
  const fs::path skipped = config("skipped", [](RunConfig& c) {
    c.precision.mode = precision::PrecisionMode::fp16;
    c.optim.lr = 1e6;
    c.grpo.steps = 6;
    c.precision.loss_scale.max_consecutive_skips = 0;  // the guard never stops it: only the health does
  });
  const Cli b = cli("train --config " + skipped.string(), dir_ / "skipped.log");
  EXPECT_EQ(b.code, 3) << b.out;
  EXPECT_NE(b.out.find("error: the run failed: train: health over 6 step(s): 5 of 6 optimizer steps skipped"),
            std::string::npos)
      << b.out;
  EXPECT_TRUE(fs::exists(dir_ / "runs" / "skipped" / "checkpoints")) << "the final checkpoint is still written";
  const nlohmann::json run = nlohmann::json::parse(read_file(dir_ / "runs" / "skipped" / "run.json"));
  EXPECT_TRUE(run["health"]["failed"].get<bool>());
  // The run's plan is in run.json as `unstuck config check --json` prints it.
  EXPECT_EQ(run["plan"]["command"], "train");
  EXPECT_EQ(run["plan"]["data"]["train"]["records"], 2000);
  EXPECT_EQ(run["plan"]["precision_mode"], "fp16");
  EXPECT_EQ(run["plan"]["memory"]["peak_bytes"], run["memory_plan"]["peak_bytes"]);
}

// A cgroup memory limit (a fake cgroup directory: memory.max, memory.current, memory.stat) is the
// limit the plan is checked against, and a run whose cgroup comes within 95% of it mid-run stops
// with a named error before the kernel would kill it; its last checkpoint resumes.
TEST_F(QuietFailures, CgroupMemoryLimitIsPlannedAndWatched) {
  const fs::path cg = dir_ / "cgroup";
  fs::create_directories(cg);
  const auto set_usage = [&](double bytes) {  // atomically, as the watcher may read it at any time
    write_file(cg / "memory.current.tmp", std::to_string(int64_t(bytes)) + "\n");
    fs::rename(cg / "memory.current.tmp", cg / "memory.current");
  };
  write_file(cg / "memory.stat", "anon 1\ninactive_file 0\n");
  write_file(cg / "memory.max", "1048576\n");  // 1 MiB: no run fits
  set_usage(0);
  const std::string env = "UNSTUCK_CGROUP_MEMORY_DIR='" + cg.string() + "'";
  const fs::path file = config("ceiling", [](RunConfig& c) {
    c.grpo.steps = 400;
    c.grpo.checkpoint_every = 1;
  });
  const Cli refused = cli("config check --command train --config " + file.string(), dir_ / "refused.log", env);
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.out.find("exceeds the cgroup memory limit 1.0 MiB (" + (cg / "memory.max").string()),
            std::string::npos)
      << refused.out;

  write_file(cg / "memory.max", std::to_string(int64_t(64) << 30) + "\n");  // 64 GiB
  set_usage(1e9);
  const fs::path run = dir_ / "runs" / "ceiling";
  const fs::path log = dir_ / "ceiling.log";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("UNSTUCK_CGROUP_MEMORY_DIR", cg.c_str(), 1);
    ::freopen(log.c_str(), "w", stdout);
    ::freopen(log.c_str(), "a", stderr);
    ::execl(UNSTUCK_BINARY, UNSTUCK_BINARY, "train", "--config", file.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Once two steps are checkpointed, the cgroup fills up (another process, as the run sees it).
  for (int i = 0; i < 6000 && train::latest_checkpoint(run / "checkpoints").filename() < "step_00000002"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  set_usage(63.0 * double(int64_t(1) << 30));
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string out = read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("before the kernel's out-of-memory killer: 63.0 GiB in use of the cgroup memory limit 64.0 GiB"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("The last checkpoint, " + run.string() + "/checkpoints/step_"), std::string::npos) << out;
  // The checkpoint it named resumes (the limit gone).
  const fs::path last = train::latest_checkpoint(run / "checkpoints");
  ASSERT_FALSE(last.empty());
  const int64_t stopped_at = train::load_checkpoint(last, train::CheckpointBuffers::defer).step;
  EXPECT_LT(stopped_at, 400);
  const Cli resumed =
      cli("train --resume " + run.string() + " grpo.steps=" + std::to_string(stopped_at + 1), dir_ / "resumed.log");
  EXPECT_EQ(resumed.code, 0) << resumed.out;
}

// Rank 0 killed (SIGKILL) mid-run: the survivor says so in one line, without c10d's backtrace.
TEST_F(QuietFailures, SurvivorOfAKilledRankZeroPrintsOneLine) {
  const fs::path file = config("dist", [](RunConfig& c) {
    c.grpo.steps = 400;
    c.precision.threads = 1;
  });
  const fs::path run = dir_ / "runs" / "dist";
  dist::LaunchOptions o;
  o.nproc = 2;
  o.grace_s = 10;
  o.command = {"/bin/sh", "-c",
               "if [ \"$RANK\" = 0 ]; then (i=0; while [ ! -s '" + run.string() +
                   "/metrics.jsonl' ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; sleep 0.3; kill -9 $$) & "
                   "fi; exec '" +
                   UNSTUCK_BINARY + "' train --config '" + file.string() + "' 2> '" + dir_.string() +
                   "/rank'\"$RANK\".err"};
  std::ostringstream launcher;
  EXPECT_EQ(dist::launch_local(o, launcher), 128 + 9) << launcher.str();
  EXPECT_NE(launcher.str().find("rank 0 (pid"), std::string::npos) << launcher.str();
  const std::string survivor = read_file(dir_ / "rank1.err");
  const std::string seen = survivor + "\n(launcher: " + launcher.str() + ")";  // how rank 1 ended, if killed
  EXPECT_EQ(survivor.find("frame #"), std::string::npos) << seen;
  EXPECT_EQ(survivor.find("Exception raised from"), std::string::npos) << seen;
  std::size_t errors = 0;
  for (std::size_t at = survivor.find("error:"); at != std::string::npos; at = survivor.find("error:", at + 1))
    ++errors;
  EXPECT_EQ(errors, 1u) << seen;
  EXPECT_NE(survivor.find("rank 1 of 2: rank 0"), std::string::npos) << seen;
}

}  // namespace
}  // namespace unstuck::faults
