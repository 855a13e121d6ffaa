// The plan makes the run's decisions before step 1 (issue 48, item 4): the compute and forward
// weights' dtypes, the reference kept, the decode mode, the measure pass; run.json is written once
// at the start with them and once at the end (health, start-up), and the trainer follows them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/tiny_task.h"
#include "unstuck/common/error.h"
#include "unstuck/dist/communicator.h"
#include "unstuck/io/json_file.h"
#include "unstuck/train/grpo.h"
#include "unstuck/train/run_plan.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;
using precision::PrecisionMode;

class RunDecisionsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("unstuck_decisions_" + std::to_string(::getpid())));
    base_ = new RunConfig(tiny_sft_base(*dir_));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete base_;
    delete dir_;
  }
  static RunDecisions decided(RunConfig c) {
    const auto comm = dist::make_single_process_communicator();
    return plan_run(std::move(c), {"train"}, *comm).decisions;
  }
  static fs::path* dir_;
  static RunConfig* base_;
};
fs::path* RunDecisionsTest::dir_ = nullptr;
RunConfig* RunDecisionsTest::base_ = nullptr;

TEST_F(RunDecisionsTest, ThePlanDecidesDtypesReferenceDecodeAndTheMeasurePass) {
  RunConfig c = tiny_grpo_config(*base_, "decide");
  c.precision.mode = PrecisionMode::bf16_sr;
  RunDecisions d = decided(c);
  EXPECT_EQ(d.compute_weights_dtype, "BFloat16");
  EXPECT_EQ(d.forward_dtype, "BFloat16");
  EXPECT_EQ(d.reference_dtype, "BFloat16");           // grpo.ref_metrics_every: 1 by default
  EXPECT_EQ(d.decode, rollout::DecodeMode::dynamic);  // auto on the CPU
  EXPECT_FALSE(d.measure_apart);
  EXPECT_EQ(d.dist_backend, "single");

  // FP16 weights compute in FP32 on the CPU; so does the reference.
  c.precision.mode = PrecisionMode::fp16;
  d = decided(c);
  EXPECT_EQ(d.compute_weights_dtype, "Half");
  EXPECT_EQ(d.forward_dtype, "Float");
  EXPECT_EQ(d.reference_dtype, "Float");

  // No KL and no reference metrics: no reference; two epochs: the policy measured apart.
  c.precision.mode = PrecisionMode::fp32;
  c.grpo.kl_coef = 0;
  c.grpo.ref_metrics_every = 0;
  c.grpo.ppo_epochs = 2;
  c.rollout.decode = rollout::DecodeMode::fixed;
  d = decided(c);
  EXPECT_EQ(d.reference_dtype, "none");
  EXPECT_FALSE(d.keeps_reference());
  EXPECT_TRUE(d.measure_apart);
  EXPECT_EQ(d.decode, rollout::DecodeMode::fixed);
}

TEST_F(RunDecisionsTest, RunJsonHoldsThePlansDecisionsFromTheStartAndTheEndRecordAfter) {
  RunConfig c = tiny_grpo_config(*base_, "decided_run");
  c.precision.mode = PrecisionMode::bf16;
  c.grpo.steps = 1;
  c.grpo.kl_coef = 0;
  c.grpo.ref_metrics_every = 0;
  const RunDecisions planned = decided(c);
  const GrpoResult r = run_grpo(c);
  const nlohmann::json run = io::read_json_file(r.run_dir / "run.json");
  EXPECT_EQ(run["plan"]["decisions"], planned.to_json());
  EXPECT_EQ(run["forward_dtype"], planned.forward_dtype);
  EXPECT_EQ(run["compute_weights_dtype"], "BFloat16");
  EXPECT_EQ(run["reference_dtype"], "none");
  EXPECT_EQ(run["dist_backend"], "single");
  // The end record: the run's health and its start-up stages up to the first rollout token.
  ASSERT_TRUE(run.contains("health")) << run.dump();
  ASSERT_TRUE(run.contains("startup")) << run.dump();
  EXPECT_NE(run["startup"].dump().find("first rollout token"), std::string::npos) << run["startup"].dump();
}

TEST_F(RunDecisionsTest, ARunThatFailsAfterItsFirstStepKeepsItsStartUpInRunJson) {
  // A verl-style reward that scores step 1's 32 completions and raises from then on (one worker, so
  // one counter): step 2 fails to score and the run stops with an error, before its end record.
  const fs::path fn = *dir_ / "fails_after_step_1.py";
  std::ofstream(fn) << "calls = 0\n"
                       "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                       "    global calls\n"
                       "    calls += 1\n"
                       "    if calls > 32:\n"
                       "        raise RuntimeError('broken after step 1')\n"
                       "    return 1.0 if solution_str.strip() == ground_truth else 0.0\n";
  RunConfig c = tiny_grpo_config(*base_, "fails_after_step_1");
  c.reward.function.path = fn.string();
  c.reward.function.name = "compute_score";
  c.reward.function.style = reward::FunctionStyle::verl;
  c.reward.function.python = UNSTUCK_PYTHON;
  c.reward.function.workers = 1;
  std::string error;
  try {
    run_grpo(c);
  } catch (const UserError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("completions of step 2 failed to score"), std::string::npos) << error;
  const nlohmann::json run = io::read_json_file(*dir_ / "runs" / "fails_after_step_1" / "run.json");
  EXPECT_FALSE(run.contains("health")) << "the run did not end: no end record";
  ASSERT_TRUE(run.contains("startup")) << run.dump();
  EXPECT_NE(run["startup"].dump().find("first rollout token"), std::string::npos) << run["startup"].dump();
}

}  // namespace
}  // namespace unstuck::train
