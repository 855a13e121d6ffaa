// Faults around a training run (issue 14): tampered checkpoints refused before any run file is
// touched, SIGKILL at random moments (checkpoint writes included) followed by a bit-exact resume, a
// torn metrics line, a moved run resumed in place, a diverged fp16 run stopped with a hint, SFT and
// eval pre-flight, and the task of `eval` never defaulted.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <random>
#include <thread>

#include "common/processes.h"
#include "faults/fault_util.h"
#include "train/tiny_task.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/grpo.h"
#include "unstuck/train/sft.h"
#include "unstuck/reward/function_config.h"

namespace unstuck::faults {
namespace {

using train::run_grpo;

// Rewrites the manifest so the (tampered) files pass their checksums: only the contents checks
// can catch them.
void reseal(const fs::path& ckpt) {
  nlohmann::json manifest = io::read_json_file(ckpt / "manifest.json");
  for (auto it = manifest.begin(); it != manifest.end(); ++it) {
    const std::string bytes = read_file(ckpt / it.key());
    it.value() = {{"bytes", bytes.size()}, {"fnv1a64", train::checkpoint_checksum(bytes)}};
  }
  io::write_json_file(ckpt / "manifest.json", manifest);
}

struct CliResult {
  int code = -1;
  std::string out;
};

CliResult run_cli(const std::string& args, const fs::path& log) {
  const std::string command = std::string("'") + UNSTUCK_BINARY + "' " + args + " > '" + log.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(log)};
}

class RunFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("unstuck_run_faults_" + std::to_string(::getpid()));
    base_ = train::tiny_sft_base(dir_);
    // A finished 3-step run with a checkpoint after every step: the material for tampering.
    RunConfig c = grpo("done");
    c.grpo.checkpoint_every = 1;
    c.grpo.keep_checkpoints = 3;
    done_ = run_grpo(c).run_dir;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static RunConfig grpo(const std::string& name) { return train::tiny_grpo_config(base_, name); }

  // A copy of the finished run named `name`, its checkpoints cut to step 2.
  static fs::path copy_run(const std::string& name) {
    const fs::path to = dir_ / "runs" / name;
    fs::remove_all(to);
    fs::copy(done_, to, fs::copy_options::recursive);
    fs::remove_all(to / "checkpoints" / "step_00000003");
    return to;
  }

  static fs::path dir_, done_;
  static RunConfig base_;
};
fs::path RunFaults::dir_, RunFaults::done_;
RunConfig RunFaults::base_;

// A checkpoint whose files pass the checksums but whose contents are inconsistent is refused by
// name, and the run directory is left exactly as it was (metrics.jsonl, config.yaml, run.json).
TEST_F(RunFaults, TamperedCheckpointsAreRefusedBeforeTouchingTheRun) {
  struct Tamper {
    const char* name;
    const char* expect;  // part of the error
    std::function<void(const fs::path&)> apply;
  };
  const auto edit_trainer = [](const std::function<void(nlohmann::json&)>& f) {
    return [f](const fs::path& ckpt) {
      nlohmann::json j = io::read_json_file(ckpt / "trainer.json");
      f(j);
      io::write_json_file(ckpt / "trainer.json", j, -1);
    };
  };
  const auto edit_state = [](const std::function<void(std::vector<io::Tensor>&)>& f) {
    return [f](const fs::path& ckpt) {
      io::SafetensorsFile st = io::read_safetensors(ckpt / "state.safetensors");
      f(st.tensors);
      std::vector<io::TensorView> views;
      for (const io::Tensor& t : st.tensors) views.push_back(io::view_of(t));
      io::write_safetensors(ckpt / "state.safetensors", views);
    };
  };
  const std::vector<Tamper> tampers = {
      {"master_as_f16", "tensor 'master' is F16, expected F32", edit_state([](std::vector<io::Tensor>& ts) {
         for (io::Tensor& t : ts)
           if (t.name == "master") {
             t.dtype = io::DType::f16;
             t.bytes.resize(t.bytes.size() / 2);
           }
       })},
      {"short_exp_avg", "tensor 'exp_avg' has", edit_state([](std::vector<io::Tensor>& ts) {
         for (io::Tensor& t : ts)
           if (t.name == "exp_avg") {
             t.shape = {t.shape[0] - 128};
             t.bytes.resize(t.bytes.size() - 512);
           }
       })},
      {"nan_master", "tensor 'master' holds NaN/Inf", edit_state([](std::vector<io::Tensor>& ts) {
         for (io::Tensor& t : ts)
           if (t.name == "master") std::memset(t.bytes.data() + 40, 0xff, 4);
       })},
      {"order_out_of_range", "data order is not a permutation",
       edit_trainer([](nlohmann::json& j) { j["order"][0] = 1000000; })},
      {"order_duplicate", "data order is not a permutation",
       edit_trainer([](nlohmann::json& j) { j["order"][0] = j["order"][1]; })},
      {"negative_step", "step -5", edit_trainer([](nlohmann::json& j) { j["step"] = -5; })},
      {"cursor_out_of_range", "cursor", edit_trainer([](nlohmann::json& j) { j["cursor"] = -3; })},
      {"garbage_data_rng", "data_rng is not a generator state",
       edit_trainer([](nlohmann::json& j) { j["data_rng"] = "hello world"; })},
      {"negative_scale", "scaler.scale", edit_trainer([](nlohmann::json& j) { j["scaler"]["scale"] = -1.0; })},
      {"step_type", "key 'step' has the wrong type", edit_trainer([](nlohmann::json& j) { j["step"] = "two"; })},
      {"missing_key", "missing key 'scaler.growth_tracker'",
       edit_trainer([](nlohmann::json& j) { j["scaler"].erase("growth_tracker"); })},
      {"garbage_rng_bin", "rng.bin", [](const fs::path& ckpt) { write_file(ckpt / "rng.bin", "garbage"); }},
      // Found while building fuzz_checkpoint (what a resume does with each loaded field): the right
      // size but not a generator state made libtorch throw a c10::Error after the run was opened.
      {"unseeded_rng_bin", "not a sampling generator state",
       [](const fs::path& ckpt) {
         write_file(ckpt / "rng.bin", std::string(read_file(ckpt / "rng.bin").size(), '\0'));
       }},
      {"float_step", "key 'step' has the wrong type (number), expected an integer",
       edit_trainer([](nlohmann::json& j) { j["step"] = 1e300; })},
      {"huge_step", "at most 2^53", edit_trainer([](nlohmann::json& j) { j["step"] = INT64_MAX; })},
      {"float_order", "key 'order' holds 0.5 at index 0, expected integers",
       edit_trainer([](nlohmann::json& j) { j["order"][0] = 0.5; })},
      {"huge_hysteresis", "scaler.hysteresis_tracker 9007199254740993 outside [0, 2^53]",
       edit_trainer([](nlohmann::json& j) { j["scaler"]["hysteresis_tracker"] = (int64_t(1) << 53) + 1; })},
      {"tiny_scale", "scaler.scale must be finite and within [2^-126, 2^126]",
       edit_trainer([](nlohmann::json& j) { j["scaler"]["scale"] = 1e-300; })},
      {"extra_tensor", "unexpected tensor 'bias'", edit_state([](std::vector<io::Tensor>& ts) {
         io::Tensor extra = ts.front();
         extra.name = "bias";
         ts.push_back(extra);
       })},
      {"wrong_model_size", "parameters, the model (grpo.base_model) has", edit_state([](std::vector<io::Tensor>& ts) {
         for (io::Tensor& t : ts) {
           t.shape = {t.shape[0] + 128};
           t.bytes.resize(t.bytes.size() + 512);
         }
       })},
  };
  for (const Tamper& t : tampers) {
    const fs::path run = copy_run(std::string("tamper_") + t.name);
    const fs::path ckpt = run / "checkpoints" / "step_00000002";
    t.apply(ckpt);
    reseal(ckpt);
    const std::string metrics = read_file(run / "metrics.jsonl"), config = read_file(run / "config.yaml");
    const std::string e = user_error([&] { run_grpo(grpo(std::string("tamper_") + t.name), run); });
    EXPECT_NE(e.find(t.expect), std::string::npos) << t.name << ": " << e;
    EXPECT_NE(e.find(ckpt.string()), std::string::npos) << t.name << " does not name the checkpoint: " << e;
    EXPECT_EQ(read_file(run / "metrics.jsonl"), metrics) << t.name;
    EXPECT_EQ(read_file(run / "config.yaml"), config) << t.name;
    EXPECT_FALSE(fs::exists(run / "train.log") && read_file(run / "train.log").find("resumed") != std::string::npos);
  }
  // A manifest with a wrong JSON type names manifest.json and the key.
  const fs::path run = copy_run("tamper_manifest");
  const fs::path ckpt = run / "checkpoints" / "step_00000002";
  nlohmann::json manifest = io::read_json_file(ckpt / "manifest.json");
  manifest["rng.bin"]["bytes"] = "many";
  io::write_json_file(ckpt / "manifest.json", manifest);
  const std::string e = user_error([&] { train::load_checkpoint(ckpt); });
  EXPECT_NE(e.find((ckpt / "manifest.json").string() + "': key 'rng.bin.bytes' has the wrong type"), std::string::npos)
      << e;
  // A size stored as a float is a type error, not a truncated conversion.
  manifest["rng.bin"]["bytes"] = 1e30;
  io::write_json_file(ckpt / "manifest.json", manifest);
  const std::string f = user_error([&] { train::load_checkpoint(ckpt); });
  EXPECT_NE(f.find("key 'rng.bin.bytes' has the wrong type (number), expected an integer"), std::string::npos) << f;
}

// The run killed while writing a metrics line: the torn last line is dropped with a warning and the
// run continues; a bad line elsewhere is an error naming file and line.
TEST_F(RunFaults, TornMetricsLineIsDropped) {
  const fs::path run = copy_run("torn");
  {
    std::ofstream out(run / "metrics.jsonl", std::ios::app);
    out << "{\"step\": 3, \"reward_me";
  }
  const train::GrpoResult r = run_grpo(grpo("torn"), run);
  EXPECT_EQ(r.steps, 3);
  const auto metrics = train::read_metrics(run);
  ASSERT_EQ(metrics.size(), 3u);
  EXPECT_EQ(metrics.back()["step"], 3);
  const fs::path bad = copy_run("torn_middle");
  std::string text = read_file(bad / "metrics.jsonl");
  text.insert(0, "{oops\n");
  write_file(bad / "metrics.jsonl", text);
  EXPECT_NE(user_error([&] {
              run_grpo(grpo("torn_middle"), bad);
            }).find((bad / "metrics.jsonl").string() + ":1: invalid JSON"),
            std::string::npos);
}

// fp16 at an absurd learning rate (weights beyond FP16's 65504 after one step) overflows from step
// 2 on; the run stops with a hint after max_consecutive_skips skipped steps instead of finishing
// "successfully" on frozen weights.
TEST_F(RunFaults, DivergedFp16RunStopsWithAHint) {
  RunConfig c = grpo("diverged");
  c.precision.mode = precision::PrecisionMode::fp16;
  c.optim.lr = 1e6;
  c.grpo.steps = 6;
  c.precision.loss_scale.max_consecutive_skips = 3;
  const std::string e = user_error([&] { run_grpo(c); });
  EXPECT_NE(e.find("3 optimizer steps in a row were skipped"), std::string::npos) << e;
  EXPECT_NE(e.find("lower optim.lr (1e+06 now)"), std::string::npos) << e;
  EXPECT_NE(e.find("precision.mode=bf16_sr"), std::string::npos) << e;
}

TEST_F(RunFaults, GrpoPreflightNamesTheKey) {
  RunConfig c = grpo("empty_base");
  c.grpo.base_model = "";
  EXPECT_NE(user_error([&] { run_grpo(c); }).find("grpo.base_model must be a policy directory"), std::string::npos);
  c = grpo("long_completion");
  c.rollout.max_new_tokens = 20;  // the tiny model serves 24 tokens; prompts are ~7
  const std::string e = user_error([&] { run_grpo(c); });
  // Overlong prompts are dropped (data.*); when none is left the run stops before its first step.
  EXPECT_NE(e.find("every prompt is longer than 4 tokens"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "long_completion" / "metrics.jsonl"));
}

// SFT: what would fail after the last step (writing the model, the first evaluation) fails before
// the first one.
TEST_F(RunFaults, SftPreflightRunsBeforeTraining) {
  RunConfig c = base_;
  c.run.name = "sft_unwritable";
  c.sft.output = "/proc/unstuck_cannot_write_here/model";
  const std::string e = user_error([&] { train::run_sft(c); });
  EXPECT_NE(e.find("sft.output: cannot write the model directory"), std::string::npos) << e;
  EXPECT_EQ(read_file(dir_ / "runs" / "sft_unwritable" / "sft_metrics.jsonl"), "");
  c = base_;
  c.run.name = "sft_long";
  c.sft.output.clear();
  c.rollout.max_new_tokens = 20;
  const std::string e2 = user_error([&] { train::run_sft(c); });
  EXPECT_NE(e2.find("sft: test records: every prompt is longer than 4 tokens"), std::string::npos) << e2;
  EXPECT_EQ(read_file(dir_ / "runs" / "sft_long" / "sft_metrics.jsonl"), "");
}

// `eval` on a model directory without config.yaml refuses to guess the task.
TEST_F(RunFaults, EvalNeedsTheTask) {
  const fs::path model = dir_ / "no_config_model";
  fs::remove_all(model);
  fs::copy(base_.sft.output, model, fs::copy_options::recursive);
  fs::remove(model / "config.yaml");
  const CliResult r = run_cli("eval --model '" + model.string() + "'", dir_ / "eval.log");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("has no config.yaml"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("data.task=countdown"), std::string::npos) << r.out;
  const CliResult given =
      run_cli("eval --model '" + model.string() + "' data.task=arithmetic rollout.max_new_tokens=8 data.test_path='" +
                  base_.data.test_path + "' --samples 4",
              dir_ / "eval2.log");
  EXPECT_EQ(given.code, 0) << given.out;
}

// SIGKILL at random moments of a CLI run (checkpoint writes included, one per step), then
// `--resume` from a copy moved elsewhere: the result equals an uninterrupted run bit for bit, and
// the resumed run writes into the directory given.
TEST_F(RunFaults, KilledRunsResumeBitExactlyInTheirNewPlace) {
  RunConfig c = grpo("reference");
  c.grpo.steps = 4;
  c.grpo.checkpoint_every = 1;
  const fs::path config = dir_ / "kill.yaml";
  write_file(config, resolved_yaml(c));
  ASSERT_EQ(run_cli("train --config '" + config.string() + "'", dir_ / "ref.log").code, 0);
  const torch::Tensor expected =
      train::load_checkpoint(train::latest_checkpoint(dir_ / "runs" / "reference" / "checkpoints")).master;
  // The kill window is the reference run's time after its first checkpoint (steps 2-4 and their
  // checkpoints, from metrics.jsonl), so the trials land mid-run on a fast or a loaded machine.
  double window = 0;
  for (const auto& m : train::read_metrics(dir_ / "runs" / "reference"))
    if (m["step"].get<int64_t>() > 1) window += m["step_seconds"].get<double>();
  window = std::max(window, 0.05);
  std::mt19937 rng(14);
  int interrupted = 0;  // trials killed before the run finished (the others resume nothing)
  for (int trial = 0; trial < 4; ++trial) {
    const std::string name = "killed_" + std::to_string(trial);
    const fs::path run = dir_ / "runs" / name;
    fs::remove_all(run);
    std::cout.flush();
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string log = (dir_ / (name + ".log")).string();
      ::freopen(log.c_str(), "w", stdout);
      ::freopen(log.c_str(), "a", stderr);
      ::execl(UNSTUCK_BINARY, UNSTUCK_BINARY, "train", "--config", config.c_str(), ("run.name=" + name).c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Wait for the first checkpoint, then kill at a random moment of the window, which spans steps
    // and checkpoint writes; trial 0 kills at once, so at least one trial lands mid-run however the
    // machine's load makes this run's steps differ from the reference's.
    for (int i = 0; i < 12000 && train::latest_checkpoint(run / "checkpoints").empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const double kill_after = trial == 0 ? 0.0 : std::uniform_real_distribution<double>(0.0, window)(rng);
    std::this_thread::sleep_for(std::chrono::duration<double>(kill_after));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (train::latest_checkpoint(run / "checkpoints").empty()) continue;  // killed before the first checkpoint
    const int64_t reached = train::load_checkpoint(train::latest_checkpoint(run / "checkpoints")).step;
    interrupted += reached < 4;
    std::cout << "trial " << trial << ": killed after " << kill_after << " s, newest checkpoint step " << reached
              << "\n";
    const fs::path moved = dir_ / "moved" / name;
    fs::remove_all(moved);
    fs::create_directories(moved.parent_path());
    fs::rename(run, moved);
    const CliResult r = run_cli("train --resume '" + moved.string() + "'", dir_ / (name + "_resume.log"));
    ASSERT_EQ(r.code, 0) << "trial " << trial << " (killed after " << kill_after << " s): " << r.out;
    EXPECT_FALSE(fs::exists(run)) << "the resumed run wrote into the old place";
    const auto metrics = train::read_metrics(moved);
    ASSERT_EQ(metrics.size(), 4u) << "trial " << trial;
    const torch::Tensor got = train::load_checkpoint(train::latest_checkpoint(moved / "checkpoints")).master;
    EXPECT_TRUE(torch::equal(got, expected)) << "trial " << trial << " (killed after " << kill_after << " s)";
  }
  EXPECT_GE(interrupted, 1) << "no trial was killed mid-run";
}

// Ctrl-C while a reward function hangs (reward.function.timeout_s 120): the run stops within a
// second or two, not after the timeout; the hung step is not applied, the newest checkpoint (step 1)
// is the run's last state and resumes; no worker is left behind.
TEST_F(RunFaults, CtrlCDuringAHungRewardStopsAtOnceKeepingTheLastCheckpoint) {
  const fs::path marker = dir_ / "hanging";
  fs::remove(marker);
  const fs::path file = dir_ / "hang_from_step_2.py";
  write_file(file,
             "import time\n"
             "def reward(prompts, completions, trainer_state, **kwargs):\n"
             "    if trainer_state.global_step >= 1:\n"
             "        open('" +
                 marker.string() +
                 "', 'w').close()\n"
                 "        time.sleep(600)\n"
                 "    return [0.0 for _ in completions]\n");
  RunConfig c = grpo("ctrl_c");
  c.grpo.checkpoint_every = 1;
  c.reward.function.path = file.string();
  c.reward.function.name = "reward";
  c.reward.function.style = reward::FunctionStyle::trl;
  c.reward.function.python = UNSTUCK_PYTHON;
  c.reward.function.workers = 1;
  c.reward.function.timeout_s = 120;
  const fs::path config = dir_ / "ctrl_c.yaml";
  write_file(config, resolved_yaml(c));
  const fs::path log = dir_ / "ctrl_c.log";
  std::cout.flush();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::freopen(log.c_str(), "w", stdout);
    ::freopen(log.c_str(), "a", stderr);
    ::execl(UNSTUCK_BINARY, UNSTUCK_BINARY, "train", "--config", config.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 12000 && !fs::exists(marker); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(fs::exists(marker)) << read_file(log);
  const auto sent = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  const std::string out = read_file(log);
  EXPECT_LT(took, 3.0) << "Ctrl-C waited on the hung reward call\n" << out;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("stopped by signal during step 2"), std::string::npos) << out;
  EXPECT_NE(out.find("stopped during step 2 (not applied; the newest checkpoint is kept)"), std::string::npos) << out;
  const fs::path run = dir_ / "runs" / "ctrl_c";
  EXPECT_EQ(train::load_checkpoint(train::latest_checkpoint(run / "checkpoints")).step, 1);
  EXPECT_EQ(train::read_metrics(run).size(), 1u);
  EXPECT_EQ(unstuck::testing::processes_with(file.string()), 0) << "a reward worker outlived the run";
}

}  // namespace
}  // namespace unstuck::faults
