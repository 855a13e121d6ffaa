// GRPO trainer end to end on a tiny SFT policy: every metric of a step is logged, a fixed seed
// reproduces the run exactly, sampling and training log-probs agree in FP32, and at a small
// learning rate BF16 round-to-nearest leaves more compute weights stuck than BF16 with stochastic
// rounding, which leaves more than FP32.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/tiny_task.h"
#include "unstuck/train/grpo.h"
#include "unstuck/train/sft.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> read_metrics(const fs::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class GrpoTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("unstuck_grpo_" + std::to_string(::getpid()));
    base_ = tiny_setup(dir_);
    base_.sft.steps = 80;
    base_.sft.output = (dir_ / "base").string();
    run_sft(base_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static RunConfig grpo_config(const std::string& name, precision::PrecisionMode mode) {
    RunConfig c = base_;
    c.run.name = name;
    c.model = {};  // taken from the base policy
    c.tokenizer.path.clear();
    c.grpo.base_model = base_.sft.output;
    c.grpo.round_base_to_bf16 = true;
    c.grpo.steps = 3;
    c.grpo.prompts_per_step = 8;
    c.grpo.group_size = 4;
    c.grpo.eval_every = 0;
    c.grpo.eval_samples = 16;
    c.precision.mode = mode;
    c.optim.lr = 1e-5;
    return c;
  }

  static fs::path dir_;
  static RunConfig base_;
};
fs::path GrpoTest::dir_;
RunConfig GrpoTest::base_;

TEST_F(GrpoTest, LogsEveryMetricAndReproducesWithTheSameSeed) {
  const GrpoResult a = run_grpo(grpo_config("a", precision::PrecisionMode::fp32));
  const GrpoResult b = run_grpo(grpo_config("b", precision::PrecisionMode::fp32));
  const auto ma = read_metrics(a.run_dir), mb = read_metrics(b.run_dir);
  ASSERT_EQ(ma.size(), 3u);
  ASSERT_EQ(mb.size(), 3u);
  for (const char* key : {"step", "reward_mean", "reward_std", "accuracy", "kl_ref_k3", "kl_ref_exact",
                          "entropy", "response_len_mean", "clip_frac", "grad_norm", "lr", "loss_scale",
                          "skipped_steps", "sticking_frac", "sticking_frac_per_tensor", "update_ratio",
                          "logprob_mismatch", "zero_adv_frac", "tokens_per_s", "step_seconds",
                          "changed_from_start_frac"})
    EXPECT_TRUE(ma[0].contains(key)) << key;
  EXPECT_TRUE(ma.back().contains("eval_accuracy"));
  // FP32: the log-probs kept at sampling time equal the training forward's (KV cache vs full).
  EXPECT_LT(ma[0]["logprob_mismatch"].get<double>(), 1e-4);
  // Same seed, same machine: the same run, metric for metric (timings aside).
  for (std::size_t i = 0; i < ma.size(); ++i)
    for (const char* key : {"reward_mean", "accuracy", "kl_ref_k3", "grad_norm", "sticking_frac", "entropy"})
      EXPECT_EQ(ma[i][key], mb[i][key]) << "step " << i + 1 << " " << key;
}

TEST_F(GrpoTest, Bf16NearestSticksMoreThanStochasticRounding) {
  double sticking[3];
  int k = 0;
  for (auto mode : {precision::PrecisionMode::bf16, precision::PrecisionMode::bf16_sr, precision::PrecisionMode::fp32}) {
    const GrpoResult r = run_grpo(grpo_config(std::string("stick_") + std::to_string(k), mode));
    sticking[k++] = read_metrics(r.run_dir)[0]["sticking_frac"].get<double>();
  }
  EXPECT_GT(sticking[0], sticking[1]) << "bf16 RN vs bf16 SR";
  EXPECT_GT(sticking[1], sticking[2]) << "bf16 SR vs fp32";
  EXPECT_LT(sticking[2], 0.01);
}

}  // namespace
}  // namespace unstuck::train
