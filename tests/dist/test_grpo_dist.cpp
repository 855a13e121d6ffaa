// Data-parallel GRPO on a tiny task: `unstuck launch --nproc 2 -- train` agrees with one process
// on the same global batch and seed; a checkpoint of two ranks (a shard file each) resumes
// bit-exactly in two, within tolerance in three and in one, and exports the run's model; Ctrl-C through the
// launcher checkpoints every rank and exits 0; a rank killed mid-run makes the survivor exit
// non-zero within a bounded time naming the dead rank, leaving the last checkpoint intact.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/weight_bytes.h"
#include "train/tiny_task.h"
#include "unstuck/config/config.h"
#include "unstuck/dist/launcher.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/grpo.h"
#include "unstuck/train/model_export.h"

extern char** environ;

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

using unstuck::testing::weight_bytes;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Starts `argv` with extra environment variables; stdout and stderr go to `log`.
pid_t start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& vars, const fs::path& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  std::vector<char*> a, e;
  for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  for (auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  e.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, a[0], &fa, nullptr, a.data(), e.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Waits up to `seconds` for `pid`; returns its wait status, or -1 when it is still running.
int wait_for(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

class GrpoDistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("unstuck_grpo_dist_" + std::to_string(::getpid()));
    base_ = tiny_sft_base(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static RunConfig grpo_config(const std::string& name) {
    RunConfig c = tiny_grpo_config(base_, name);
    c.grpo.steps = 4;
    c.grpo.minibatches = 2;
    c.grpo.checkpoint_every = 2;
    c.precision.threads = 1;
    c.optim.lr = 1e-4;
    c.dist.timeout_s = 20;
    return c;
  }
  static fs::path write_config(const RunConfig& c) {
    const fs::path p = dir_ / (c.run.name + ".yaml");
    std::ofstream(p) << resolved_yaml(c);
    return p;
  }
  // `unstuck launch --nproc 2 -- train --config <c>`; returns the launcher's exit status.
  static int launch_two(const RunConfig& c, const std::string& wrapper = "") {
    const std::string cmd = wrapper + std::string(UNSTUCK_BINARY) + " launch --nproc 2 -- train --config " +
                            write_config(c).string() + " > " + (dir_ / (c.run.name + ".out")).string() + " 2>&1";
    return std::system(cmd.c_str());
  }

  static fs::path dir_;
  static RunConfig base_;
};
fs::path GrpoDistTest::dir_;
RunConfig GrpoDistTest::base_;

// Same global batch and seed: the rollouts of every step are identical (the sampling uniforms are
// drawn for the whole batch, each rank keeps its rows), so are rewards and accuracy; gradients
// differ only by the order of FP32 additions (each rank's backward sums over its own rows), which
// keeps the grad norm, KL and entropy within 1e-5 relative (+ 1e-7 absolute) and the FP32 master
// within 1e-6 after 4 steps (measured: 7.5e-9).
TEST_F(GrpoDistTest, WorldSizeTwoAgreesWithWorldSizeOne) {
  const GrpoResult one = run_grpo(grpo_config("ws1"));
  ASSERT_EQ(launch_two(grpo_config("ws2")), 0) << read_text(dir_ / "ws2.out");
  const auto m1 = read_metrics(one.run_dir), m2 = read_metrics(dir_ / "runs" / "ws2");
  ASSERT_EQ(m1.size(), 4u);
  ASSERT_EQ(m2.size(), 4u);
  for (std::size_t i = 0; i < m1.size(); ++i) {
    for (const char* key : {"reward_mean", "reward_std", "accuracy", "response_len_mean"})
      EXPECT_EQ(m1[i][key], m2[i][key]) << "step " << i + 1 << " " << key;
    for (const char* key : {"grad_norm", "kl_ref_k3", "entropy", "logprob_mismatch"}) {
      const double a = m1[i][key].get<double>(), b = m2[i][key].get<double>();
      EXPECT_LE(std::abs(a - b), 1e-5 * std::abs(a) + 1e-7) << "step " << i + 1 << " " << key;
    }
    // One token's mismatch, not a mean: the ranks' forwards over fewer rows round its log-probs
    // differently by a few FP32 ulps (log-probs to -10: ulps of 1e-6; measured up to 6e-7 here).
    EXPECT_LE(std::abs(m1[i]["logprob_mismatch_max"].get<double>() - m2[i]["logprob_mismatch_max"].get<double>()), 4e-6)
        << "step " << i + 1;
    EXPECT_EQ(m1[i]["collective_bytes"].get<double>(), 0.0);
    EXPECT_GT(m2[i]["collective_bytes"].get<double>(), 0.0);
  }
  const TrainerState s1 = load_checkpoint(latest_checkpoint(one.run_dir / "checkpoints"));
  const TrainerState s2 = load_checkpoint(latest_checkpoint(dir_ / "runs" / "ws2" / "checkpoints"));
  EXPECT_EQ(s2.step, 4);
  EXPECT_EQ(s1.order, s2.order);
  EXPECT_EQ(s1.sampling_rng, s2.sampling_rng);
  const double diff = (s1.master - s2.master).abs().max().item<double>();
  std::cout << "max |master(ws1) - master(ws2)| after 4 steps: " << diff << "\n";
  EXPECT_LT(diff, 1e-6);
  EXPECT_GT((s1.master - load_checkpoint(dir_ / "runs" / "ws1" / "checkpoints" / "step_00000002").master)
                .abs()
                .max()
                .item<double>(),
            1e-5);  // the steps moved the weights far more than that

  // Resumed at the same world size from step 2, the run continues bit-exactly.
  fs::copy(dir_ / "runs" / "ws2", dir_ / "runs" / "ws2_resumed", fs::copy_options::recursive);
  fs::remove_all(dir_ / "runs" / "ws2_resumed" / "checkpoints" / "step_00000004");
  const std::string resume_cmd = std::string(UNSTUCK_BINARY) + " launch --nproc 2 -- train --resume " +
                                 (dir_ / "runs" / "ws2_resumed").string() + " run.name=ws2_resumed > " +
                                 (dir_ / "ws2_resumed.out").string() + " 2>&1";
  ASSERT_EQ(std::system(resume_cmd.c_str()), 0) << read_text(dir_ / "ws2_resumed.out");
  const auto m2r = read_metrics(dir_ / "runs" / "ws2_resumed");
  ASSERT_EQ(m2r.size(), 4u);
  for (std::size_t i = 0; i < m2r.size(); ++i)
    for (const char* key : {"reward_mean", "grad_norm", "kl_ref_k3", "entropy", "sticking_frac", "update_ratio"})
      EXPECT_EQ(m2r[i][key], m2[i][key]) << "resumed, step " << i + 1 << " " << key;
  EXPECT_TRUE(torch::equal(load_checkpoint(latest_checkpoint(dir_ / "runs" / "ws2_resumed" / "checkpoints")).master,
                           s2.master));

  // Each rank wrote its own shard of the state; exported from them, the model is the one the run
  // ended with (rank 0's final_model, from the gathered compute weights), bit for bit.
  const fs::path last2 = latest_checkpoint(dir_ / "runs" / "ws2" / "checkpoints");
  EXPECT_TRUE(fs::exists(last2 / "state-00000-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(last2 / "state-00001-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(last2 / "state.safetensors"));
  EXPECT_EQ(export_run(dir_ / "runs" / "ws2", dir_ / "ws2_export", {}), io::DType::f32);
  EXPECT_EQ(weight_bytes(dir_ / "ws2_export"), weight_bytes(dir_ / "runs" / "ws2" / "final_model"));

  // The world-size-2 checkpoint of step 2 resumes in one process and continues like the
  // world-size-1 run.
  RunConfig resumed = grpo_config("ws2_then_ws1");
  const GrpoResult r = run_grpo(resumed, dir_ / "runs" / "ws2" / "checkpoints" / "step_00000002");
  const auto mr = read_metrics(r.run_dir);
  ASSERT_EQ(mr.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(mr[i]["reward_mean"], m1[i + 2]["reward_mean"]);
  EXPECT_LT(
      (load_checkpoint(latest_checkpoint(r.run_dir / "checkpoints")).master - s1.master).abs().max().item<double>(),
      1e-6);
}

// Per-rank checkpoints reshard on resume: with 12 prompts a step (whole groups for 1, 2 or 3 ranks
// and two minibatches), three ranks resume the two ranks' checkpoint of step 2 (each reads its own
// range across both files) and continue as two did: the same rollouts, the master within 1e-6
// after two more steps (gradients summed in another order); the three ranks write their shards.
TEST_F(GrpoDistTest, TwoRanksCheckpointResumesAtThree) {
  RunConfig c = grpo_config("reshard_ws2");
  c.grpo.prompts_per_step = 12;
  ASSERT_EQ(launch_two(c), 0) << read_text(dir_ / "reshard_ws2.out");
  const auto m2 = read_metrics(dir_ / "runs" / "reshard_ws2");
  ASSERT_EQ(m2.size(), 4u);
  const TrainerState s2 = load_checkpoint(latest_checkpoint(dir_ / "runs" / "reshard_ws2" / "checkpoints"));
  fs::copy(dir_ / "runs" / "reshard_ws2", dir_ / "runs" / "ws2_then_ws3", fs::copy_options::recursive);
  fs::remove_all(dir_ / "runs" / "ws2_then_ws3" / "checkpoints" / "step_00000004");
  const std::string three_cmd = std::string(UNSTUCK_BINARY) + " launch --nproc 3 -- train --resume " +
                                (dir_ / "runs" / "ws2_then_ws3").string() + " run.name=ws2_then_ws3 > " +
                                (dir_ / "ws2_then_ws3.out").string() + " 2>&1";
  ASSERT_EQ(std::system(three_cmd.c_str()), 0) << read_text(dir_ / "ws2_then_ws3.out");
  const auto m3 = read_metrics(dir_ / "runs" / "ws2_then_ws3");
  ASSERT_EQ(m3.size(), 4u);
  for (std::size_t i = 2; i < 4; ++i) EXPECT_EQ(m3[i]["reward_mean"], m2[i]["reward_mean"]) << "step " << i + 1;
  const fs::path last3 = latest_checkpoint(dir_ / "runs" / "ws2_then_ws3" / "checkpoints");
  const TrainerState s3 = load_checkpoint(last3);
  EXPECT_GE(s3.shards.size(), 2u);  // (a rank owning none of the tiny model's elements writes no file)
  for (const StateShard& sh : s3.shards)
    EXPECT_NE(sh.file.filename().string().find("-of-00003.safetensors"), std::string::npos) << sh.file;
  const double diff = (s3.master - s2.master).abs().max().item<double>();
  std::cout << "max |master(2 ranks) - master(2 then 3 ranks)| after 4 steps: " << diff << "\n";
  EXPECT_LT(diff, 1e-6);
}

// The variants whose statistics span the whole batch agree between one process and two: REINFORCE++'s
// batch moments (summed over the ranks), dynamic sampling's choice of groups (every rank sees every
// group of a round, so all choose the same batch and take their rows of it), the KL in the reward
// and truncated importance sampling over two minibatches. Rewards and the sampling account are
// identical; grad norm, penalty and weights within 1e-5 relative (+ 1e-7), sums in another order.
TEST_F(GrpoDistTest, BatchWideVariantsAgreeAcrossWorldSizes) {
  const auto variant = [](const std::string& name) {
    RunConfig c = grpo_config(name);
    c.grpo.steps = 3;
    c.grpo.checkpoint_every = 0;
    c.grpo.advantage = algo::AdvantageMode::reinforce_pp;
    c.grpo.filter_groups = algo::GroupFilter::zero_variance;
    c.grpo.oversample = 1;
    c.grpo.kl_coef = 0.05;
    c.grpo.kl_in = algo::KlIn::reward;
    c.grpo.tis_cap = 2;
    return c;
  };
  const GrpoResult one = run_grpo(variant("variants_ws1"));
  ASSERT_EQ(launch_two(variant("variants_ws2")), 0) << read_text(dir_ / "variants_ws2.out");
  const auto m1 = read_metrics(one.run_dir), m2 = read_metrics(dir_ / "runs" / "variants_ws2");
  ASSERT_EQ(m1.size(), 3u);
  ASSERT_EQ(m2.size(), 3u);
  for (std::size_t i = 0; i < m1.size(); ++i) {
    for (const char* key : {"reward_mean", "reward_std", "accuracy", "sampling_rounds", "groups_dropped",
                            "groups_filled", "sampled_reward_mean", "zero_adv_frac"}) {
      ASSERT_TRUE(m1[i].contains(key) && m2[i].contains(key)) << key;
      EXPECT_EQ(m1[i][key], m2[i][key]) << "step " << i + 1 << " " << key;
    }
    std::cout << "step " << i + 1 << ": rounds " << m1[i]["sampling_rounds"] << ", dropped " << m1[i]["groups_dropped"]
              << ", filled " << m1[i]["groups_filled"] << "\n";
    for (const char* key : {"grad_norm", "kl_reward_penalty", "tis_weight_mean", "entropy"}) {
      const double a = m1[i][key].get<double>(), b = m2[i][key].get<double>();
      EXPECT_LE(std::abs(a - b), 1e-5 * std::abs(a) + 1e-7) << "step " << i + 1 << " " << key;
    }
  }
}

// LoRA (rank 4, PiSSA's start, lora.dropout 0.1, a KL penalty to the start policy) in two processes
// agrees with one as the full-parameter run does: identical rewards, grad norm, KL and entropy within
// 1e-5 relative (+ 1e-7; the dropout masks are keyed by the rows' places in the whole batch), the
// adapters' FP32 master within 1e-6 after 4 steps but for at most 0.1% of its elements, those within
// 1e-5 (AdamW divides each element's gradient, summed in another order at world size 2, by its own
// scale: an element whose gradient is near 0 moves by up to lr x its relative difference; measured:
// 1 of 4352 off by 3.8e-6); resumed at world size 2 from step 2 it continues bit-exactly.
TEST_F(GrpoDistTest, LoraAgreesAcrossWorldSizesAndResumes) {
  const auto lora = [](const std::string& name) {
    RunConfig c = grpo_config(name);
    c.lora.rank = 4;
    c.lora.init = model::LoraInit::pissa;
    c.lora.dropout = 0.1;
    c.grpo.kl_coef = 0.01;
    c.optim.lr = 1e-3;
    return c;
  };
  const GrpoResult one = run_grpo(lora("lora_ws1"));
  ASSERT_EQ(launch_two(lora("lora_ws2")), 0) << read_text(dir_ / "lora_ws2.out");
  const auto m1 = read_metrics(one.run_dir), m2 = read_metrics(dir_ / "runs" / "lora_ws2");
  ASSERT_EQ(m1.size(), 4u);
  ASSERT_EQ(m2.size(), 4u);
  for (std::size_t i = 0; i < m1.size(); ++i) {
    for (const char* key : {"reward_mean", "accuracy", "response_len_mean"})
      EXPECT_EQ(m1[i][key], m2[i][key]) << "step " << i + 1 << " " << key;
    for (const char* key : {"grad_norm", "kl_ref_k3", "entropy"}) {
      const double a = m1[i][key].get<double>(), b = m2[i][key].get<double>();
      EXPECT_LE(std::abs(a - b), 1e-5 * std::abs(a) + 1e-7) << "step " << i + 1 << " " << key;
    }
  }
  const TrainerState s1 = load_checkpoint(latest_checkpoint(one.run_dir / "checkpoints"));
  const TrainerState s2 = load_checkpoint(latest_checkpoint(dir_ / "runs" / "lora_ws2" / "checkpoints"));
  EXPECT_EQ(s1.master.numel(), s2.master.numel());
  const double diff = (s1.master - s2.master).abs().max().item<double>();
  std::cout << "LoRA: max |adapter master(ws1) - master(ws2)| after 4 steps: " << diff << " (max |master| "
            << s1.master.abs().max().item<double>()
            << "), elements off by > 1e-6: " << (s1.master - s2.master).abs().gt(1e-6).sum().item<int64_t>() << " of "
            << s1.master.numel() << "\n";
  EXPECT_LT(diff, 1e-5);
  EXPECT_LE((s1.master - s2.master).abs().gt(1e-6).sum().item<int64_t>(), s1.master.numel() / 1000);

  fs::copy(dir_ / "runs" / "lora_ws2", dir_ / "runs" / "lora_ws2_resumed", fs::copy_options::recursive);
  fs::remove_all(dir_ / "runs" / "lora_ws2_resumed" / "checkpoints" / "step_00000004");
  const std::string resume_cmd = std::string(UNSTUCK_BINARY) + " launch --nproc 2 -- train --resume " +
                                 (dir_ / "runs" / "lora_ws2_resumed").string() + " run.name=lora_ws2_resumed > " +
                                 (dir_ / "lora_ws2_resumed.out").string() + " 2>&1";
  ASSERT_EQ(std::system(resume_cmd.c_str()), 0) << read_text(dir_ / "lora_ws2_resumed.out");
  const auto m2r = read_metrics(dir_ / "runs" / "lora_ws2_resumed");
  ASSERT_EQ(m2r.size(), 4u);
  for (std::size_t i = 0; i < m2r.size(); ++i)
    for (const char* key : {"reward_mean", "grad_norm", "kl_ref_k3", "sticking_frac", "sticking_frac_per_module"})
      EXPECT_EQ(m2r[i][key], m2[i][key]) << "resumed, step " << i + 1 << " " << key;
  EXPECT_TRUE(torch::equal(
      load_checkpoint(latest_checkpoint(dir_ / "runs" / "lora_ws2_resumed" / "checkpoints")).master, s2.master));
}

// Ctrl-C to the launcher: it forwards SIGINT, every rank finishes the same step, rank 0 writes the
// checkpoint of the gathered state, all exit 0.
TEST_F(GrpoDistTest, SigintThroughTheLauncherCheckpointsAndExitsZero) {
  RunConfig c = grpo_config("sigint2");
  c.grpo.steps = 100000;
  c.grpo.checkpoint_every = 0;
  EXPECT_EQ(launch_two(c, "timeout --preserve-status -s INT 8 "), 0) << read_text(dir_ / "sigint2.out");
  const fs::path ckpt = latest_checkpoint(dir_ / "runs" / "sigint2" / "checkpoints");
  ASSERT_FALSE(ckpt.empty()) << read_text(dir_ / "sigint2.out");
  const TrainerState st = load_checkpoint(ckpt);
  EXPECT_GE(st.step, 1);
  EXPECT_EQ(int64_t(read_metrics(dir_ / "runs" / "sigint2").size()), st.step);
}

// Rank 1 is killed (SIGKILL) mid-run while rank 0 runs on; rank 0 must fail its next collective,
// name rank 1 and exit non-zero within dist.timeout_s plus the roll call, never hang; the newest
// checkpoint stays loadable.
TEST_F(GrpoDistTest, KilledRankMakesTheOtherExitNonZeroNamingIt) {
  RunConfig c = grpo_config("killed");
  c.grpo.steps = 100000;
  c.grpo.checkpoint_every = 1;
  c.dist.timeout_s = 5;
  const fs::path cfg = write_config(c);
  const std::string port = std::to_string(dist::free_tcp_port());
  pid_t pids[2];
  for (int r = 0; r < 2; ++r)
    pids[r] = start({UNSTUCK_BINARY, "train", "--config", cfg.string()},
                    {{"RANK", std::to_string(r)},
                     {"WORLD_SIZE", "2"},
                     {"LOCAL_RANK", std::to_string(r)},
                     {"MASTER_ADDR", "127.0.0.1"},
                     {"MASTER_PORT", port}},
                    dir_ / ("killed_rank" + std::to_string(r) + ".log"));
  const fs::path ckpts = dir_ / "runs" / "killed" / "checkpoints";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (latest_checkpoint(ckpts).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(latest_checkpoint(ckpts).empty()) << read_text(dir_ / "killed_rank0.log");
  ::kill(pids[1], SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  const int status = wait_for(pids[0], 60);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::waitpid(pids[1], nullptr, 0);
  if (status == -1) ::kill(pids[0], SIGKILL);
  ASSERT_NE(status, -1) << "rank 0 still running 60 s after rank 1 died";
  const std::string log = read_text(dir_ / "killed_rank0.log");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << log;
  EXPECT_NE(log.find("rank 1 died or stopped answering"), std::string::npos) << log;
  EXPECT_LT(seconds, 30.0);
  std::cout << "rank 0 exited " << seconds << " s after rank 1 was killed\n";
  EXPECT_GE(load_checkpoint(latest_checkpoint(ckpts)).step, 1);
}

}  // namespace
}  // namespace unstuck::train
