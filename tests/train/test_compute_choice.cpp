// precision.compute: auto. The pick follows the probe's times with a margin for native; what needs
// no probe gets none; a GRPO run records the choice (run.json, checkpoints); a resume takes the
// checkpoint's choice instead of probing again and continues bit-exactly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/tiny_task.h"
#include "unstuck/config/config.h"
#include "unstuck/io/json_file.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/compute_choice.h"
#include "unstuck/train/grpo.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;
using precision::ComputeMode;
using precision::PrecisionMode;

TEST(ComputeChoice, PicksFp32OnlyWhenClearlyFaster) {
  EXPECT_EQ(pick_compute({1.0, 0.90, 128, 3}), ComputeMode::fp32);
  EXPECT_EQ(pick_compute({1.0, 0.97, 128, 3}), ComputeMode::native);  // within the 5% margin
  EXPECT_EQ(pick_compute({1.0, 1.50, 128, 3}), ComputeMode::native);
}

TEST(ComputeChoice, ResolvesWithoutAProbeWhereTheAnswerIsKnown) {
  const model::ModelConfig m = testing::model_shape(64, 32, 2, 2, 1, 64, 24);
  precision::PrecisionConfig p;
  p.mode = PrecisionMode::bf16_sr;
  p.compute = ComputeMode::fp32;  // configured: as given, even against a checkpoint's record
  ComputeChoice c = resolve_compute(m, p, torch::kCPU, ComputeMode::native);
  EXPECT_EQ(c.mode, ComputeMode::fp32);
  EXPECT_FALSE(c.probe);
  p.compute = ComputeMode::auto_;
  c = resolve_compute(m, p, torch::kCPU, ComputeMode::fp32);  // resuming: the checkpoint's
  EXPECT_EQ(c.mode, ComputeMode::fp32);
  EXPECT_FALSE(c.probe);
  EXPECT_NE(c.reason.find("checkpoint"), std::string::npos) << c.reason;
  c = resolve_compute(m, p, torch::Device(torch::kCUDA, 0), std::nullopt);  // CUDA: native
  EXPECT_EQ(c.mode, ComputeMode::native);
  EXPECT_FALSE(c.probe);
  for (PrecisionMode mode : {PrecisionMode::fp32, PrecisionMode::fp16, PrecisionMode::fp16_sr}) {
    p.mode = mode;  // FP32 weights, or FP16 weights on a CPU: FP32 compute either way
    c = resolve_compute(m, p, torch::kCPU, std::nullopt);
    EXPECT_EQ(c.mode, ComputeMode::native) << config::enum_name(mode);
    EXPECT_FALSE(c.probe) << config::enum_name(mode);
  }
  p.mode = PrecisionMode::bf16;  // BF16 on a CPU: timed
  c = resolve_compute(m, p, torch::kCPU, std::nullopt);
  ASSERT_TRUE(c.probe);
  EXPECT_GT(c.probe->native_s, 0.0);
  EXPECT_GT(c.probe->fp32_s, 0.0);
  EXPECT_EQ(c.mode, pick_compute(*c.probe));
  const nlohmann::json j = c.to_json(ComputeMode::auto_);
  EXPECT_EQ(j["configured"], "auto");
  EXPECT_EQ(j["resolved"], config::enum_name(c.mode));
  EXPECT_TRUE(j["probe"].contains("native_ms") && j["probe"].contains("fp32_ms"));
}

ComputeMode other(ComputeMode m) { return m == ComputeMode::fp32 ? ComputeMode::native : ComputeMode::fp32; }

// Rewrites a checkpoint's recorded compute mode (and its manifest entry), as another machine's
// probe would have chosen it.
void set_recorded_compute(const fs::path& ckpt, const std::string& mode) {
  nlohmann::json t = io::read_json_file(ckpt / "trainer.json");
  t["compute"] = mode;
  io::write_json_file(ckpt / "trainer.json", t, -1);
  std::ifstream in(ckpt / "trainer.json", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  nlohmann::json manifest = io::read_json_file(ckpt / "manifest.json");
  manifest["trainer.json"] = {{"bytes", bytes.size()}, {"fnv1a64", checkpoint_checksum(bytes)}};
  io::write_json_file(ckpt / "manifest.json", manifest);
}

TEST(ComputeChoice, GrpoRecordsTheChoiceAndAResumeKeepsIt) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_compute_choice_" + std::to_string(::getpid()));
  const RunConfig base = tiny_sft_base(dir);
  RunConfig half = tiny_grpo_config(base, "auto_half");
  half.precision.mode = PrecisionMode::bf16_sr;
  half.precision.compute = ComputeMode::auto_;
  half.grpo.steps = 2;
  half.grpo.checkpoint_every = 2;
  const GrpoResult h = run_grpo(half);
  const nlohmann::json run = io::read_json_file(h.run_dir / "run.json");
  const nlohmann::json& choice = run["compute_choice"];
  EXPECT_EQ(choice["configured"], "auto");
  ASSERT_TRUE(choice.contains("probe")) << choice.dump();
  const std::string resolved = choice["resolved"];
  ASSERT_TRUE(resolved == "native" || resolved == "fp32") << resolved;
  const ComputeMode chosen = resolved == "fp32" ? ComputeMode::fp32 : ComputeMode::native;
  EXPECT_EQ(run["forward_dtype"], chosen == ComputeMode::fp32 ? "Float" : "BFloat16");
  const fs::path ckpt = latest_checkpoint(h.run_dir / "checkpoints");
  EXPECT_EQ(load_checkpoint(ckpt).compute, resolved);

  // A copy of the run whose checkpoint says the other mode: the resume follows the checkpoint.
  const fs::path copy = h.run_dir.parent_path() / "auto_other";
  fs::copy(h.run_dir, copy, fs::copy_options::recursive);
  set_recorded_compute(latest_checkpoint(copy / "checkpoints"), config::enum_name(other(chosen)));
  RunConfig other_cfg = half;
  other_cfg.run.name = "auto_other";
  other_cfg.grpo.steps = 3;
  run_grpo(other_cfg, copy);
  const nlohmann::json other_run = io::read_json_file(copy / "run.json");
  EXPECT_EQ(other_run["compute_choice"]["resolved"], config::enum_name(other(chosen)));
  EXPECT_FALSE(other_run["compute_choice"].contains("probe"));
  EXPECT_EQ(other_run["forward_dtype"], other(chosen) == ComputeMode::fp32 ? "Float" : "BFloat16");
  EXPECT_EQ(load_checkpoint(latest_checkpoint(copy / "checkpoints")).compute, config::enum_name(other(chosen)));

  // The untouched run resumed to step 4 equals 4 straight steps with the chosen mode configured.
  half.grpo.steps = 4;
  const GrpoResult b = run_grpo(half, h.run_dir);
  RunConfig straight = half;
  straight.run.name = "explicit_straight";
  straight.precision.compute = chosen;
  const GrpoResult a = run_grpo(straight);
  const auto ma = read_metrics(a.run_dir), mb = read_metrics(b.run_dir);
  ASSERT_EQ(ma.size(), 4u);
  ASSERT_EQ(mb.size(), 4u);
  for (std::size_t i = 0; i < ma.size(); ++i)
    for (const char* key : {"reward_mean", "grad_norm", "entropy", "sticking_frac", "logprob_mismatch"})
      EXPECT_EQ(ma[i][key], mb[i][key]) << "step " << i + 1 << " " << key;
  const TrainerState sa = load_checkpoint(latest_checkpoint(a.run_dir / "checkpoints"));
  const TrainerState sb = load_checkpoint(latest_checkpoint(b.run_dir / "checkpoints"));
  EXPECT_EQ(sb.step, 4);
  EXPECT_TRUE(torch::equal(sa.master, sb.master));
  EXPECT_TRUE(torch::equal(sa.exp_avg_sq, sb.exp_avg_sq));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace unstuck::train
