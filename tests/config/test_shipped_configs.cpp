// Every YAML file shipped in configs/ loads and validates: a config that drifts from the option
// structs (renamed key, bad value) fails here rather than in a user's run.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "unstuck/config/config.h"
#include "unstuck/config/run_config.h"

namespace unstuck {
namespace {

TEST(ShippedConfigs, AllLoadAndValidate) {
  // From the repository root, where the configs' comments run them (their relative paths, such as
  // a tool's file, are from there).
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(UNSTUCK_SOURCE_DIR);
  int count = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(UNSTUCK_SOURCE_DIR) + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    EXPECT_NO_THROW(load_run_config(e.path())) << e.path();
    ++count;
  }
  std::filesystem::current_path(before);
  EXPECT_GE(count, 8);
}

// The paper reproduction compares arms that must differ only in the precision mode and the learning
// rate (and their run names): anything else would confound the comparison in docs/RESULTS.md.
TEST(ShippedConfigs, PaperArmsDifferOnlyInPrecisionAndLearningRate) {
  const std::filesystem::path dir = std::filesystem::path(UNSTUCK_SOURCE_DIR) / "configs/paper";
  const RunConfig reference = load_run_config(dir / "fp16.yaml");
  std::set<std::string> arms, modes;
  std::set<double> lrs;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    RunConfig arm = load_run_config(e.path());
    arms.insert(e.path().stem().string());
    modes.insert(std::string(config::enum_name(arm.precision.mode)));
    lrs.insert(arm.optim.lr);
    arm.precision.mode = reference.precision.mode;
    arm.optim.lr = reference.optim.lr;
    arm.run.name = reference.run.name;
    EXPECT_EQ(resolved_yaml(arm, false), resolved_yaml(reference, false)) << e.path();
  }
  EXPECT_EQ(arms, (std::set<std::string>{"fp32", "fp16", "bf16", "bf16_lr_k", "bf16_sr", "fp16_sr"}));
  EXPECT_EQ(modes, (std::set<std::string>{"fp32", "fp16", "bf16", "bf16_sr", "fp16_sr"}));
  EXPECT_EQ(lrs.size(), 2u);  // x, and k*x for bf16_lr_k
  EXPECT_GT(load_run_config(dir / "bf16_lr_k.yaml").optim.lr, reference.optim.lr);
  EXPECT_TRUE(reference.grpo.round_base_to_bf16);  // the base starts on the BF16 grid
}

}  // namespace
}  // namespace unstuck
