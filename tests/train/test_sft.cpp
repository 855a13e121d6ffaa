// SFT end to end on a tiny model: the completion loss falls, the run directory holds the resolved
// config, metrics and log, and the written model directory loads back (policy + tokenizer) with
// the weights it saved. Also the per-mode optimizer plumbing of TrainableWeights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/data/generators.h"
#include "unstuck/tokenizer/tokenizer.h"
#include "unstuck/train/policy_dir.h"
#include "unstuck/train/sft.h"
#include "unstuck/config/lr_schedule.h"
#include "unstuck/train/trainable_weights.h"
#include "common/model_shape.h"
#include "train/tiny_task.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

std::vector<double> losses(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

TEST(Sft, LossFallsAndModelDirectoryLoadsBack) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_sft_" + std::to_string(::getpid()));
  const RunConfig cfg = tiny_setup(dir);
  const SftResult r = run_sft(cfg);
  const fs::path run = dir / "runs" / "tiny";
  for (const char* f : {"config.yaml", "run.json", "sft.log", "sft_metrics.jsonl"})
    EXPECT_TRUE(fs::exists(run / f)) << f;
  const std::vector<double> l = losses(run / "sft_metrics.jsonl");
  ASSERT_GE(l.size(), 6u);
  // Teacher-forced completion loss on a learnable task: the last window is well below the first
  // (the first window starts near ln(vocab) ~ 3).
  EXPECT_LT(l.back(), 0.75 * l.front()) << "first " << l.front() << " last " << l.back();
  EXPECT_GE(r.accuracy, 0.0);
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.model", "config.yaml", "sft_result.json"})
    EXPECT_TRUE(fs::exists(r.model_dir / f)) << f;
  const Policy p = load_policy(r.model_dir, {});
  EXPECT_EQ(p.config.model.dim, 32);
  EXPECT_EQ(p.tokenizer.vocab_size(), p.config.model.vocab_size);
  EXPECT_FALSE(torch::equal(p.master, torch::zeros_like(p.master)));

  // The CLI evaluates and samples from the written directory.
  const std::string out = (dir / "eval.json").string();
  const std::string eval =
      std::string(UNSTUCK_BINARY) + " eval --model " + r.model_dir.string() + " --samples 16 --k 2 --json > " + out;
  ASSERT_EQ(std::system(eval.c_str()), 0) << eval;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["records"].get<int64_t>(), 16);
  EXPECT_TRUE(j.contains("greedy_accuracy") && j.contains("pass_at_2")) << j.dump();
  const std::string gen = std::string(UNSTUCK_BINARY) + " generate --model " + r.model_dir.string() +
                          " --prompt 1+2= > " + (dir / "gen.txt").string();
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  std::ifstream g(dir / "gen.txt");
  std::string line;
  std::getline(g, line);
  EXPECT_EQ(line.rfind("1+2=\t", 0), 0u) << line;

  // The run ends with its health, as `unstuck train` does: logged and in run.json.
  EXPECT_EQ(r.health_summary, "sft: health over 60 step(s): 0 of 60 optimizer steps skipped; no warnings");
  EXPECT_FALSE(r.health_failed);
  const nlohmann::json run_json = nlohmann::json::parse(std::ifstream(run / "run.json"));
  EXPECT_EQ(run_json["health"]["steps"], 60);
  EXPECT_EQ(run_json["health"]["warnings"].size(), 0u);

  // bench generate --config times that config's rollout: its policy, its training prompts x
  // group_size, its sampling and stop tokens, its precision and threads; options override it.
  const fs::path yaml = dir / "bench_generate.yaml";
  std::ofstream(yaml) << "data: {task: arithmetic, train_path: " << (dir / "train.jsonl").string()
                      << ", test_path: " << (dir / "test.jsonl").string() << "}\n"
                      << "grpo: {base_model: " << r.model_dir.string() << ", prompts_per_step: 3, group_size: 2}\n"
                      << "rollout: {max_new_tokens: 6, temperature: 0.7, top_k: 5}\n"
                      << "precision: {mode: fp32, threads: 1}\n";
  const auto bench = [&](const std::string& flags) {
    const fs::path json = dir / "bench.json";
    const std::string cmd = std::string(UNSTUCK_BINARY) + " bench generate --config " + yaml.string() +
                            " --repeats 1 --json " + flags + " > " + json.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return nlohmann::json::parse(std::ifstream(json));
  };
  const nlohmann::json b = bench("");
  EXPECT_EQ(b["sequences"], 6);  // 3 prompts x 2
  EXPECT_EQ(b["new_tokens"], 6);
  EXPECT_EQ(b["threads"], 1);
  EXPECT_EQ(b["sampling"]["temperature"], 0.7);
  EXPECT_EQ(b["sampling"]["top_k"], 5);
  EXPECT_FALSE(b["sampling"]["stop_ids"].empty());
  EXPECT_EQ(b["model"]["path"], r.model_dir.string());
  EXPECT_GT(b["prompt_tokens"].get<double>(), 2);                      // "a+b=" formatted as training formats it
  EXPECT_TRUE(b.contains("fp32") && !b.contains("bf16")) << b.dump();  // precision.mode fp32
  EXPECT_GT(b["fp32"]["kv_tokens_per_s"].get<double>(), 0);
  EXPECT_FALSE(b["fp32"].contains("recompute_tokens_per_s"));  // the user's rollout only
  const nlohmann::json o = bench("--sequences 4 --dtype bf16");
  EXPECT_EQ(o["sequences"], 4);
  EXPECT_TRUE(o.contains("bf16") && !o.contains("fp32")) << o.dump();
  EXPECT_EQ(o["sampling"]["temperature"], 0.7);
  // A config whose base model is not there is named.
  std::ofstream(yaml) << "grpo: {base_model: " << (dir / "no_model").string() << "}\n";
  const std::string missing =
      std::string(UNSTUCK_BINARY) + " bench generate --config " + yaml.string() + " 2> " + (dir / "err.txt").string();
  EXPECT_NE(std::system(missing.c_str()), 0);
  std::ifstream err_in(dir / "err.txt");
  const std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(err.find("grpo.base_model '" + (dir / "no_model").string() + "' is not a model directory"),
            std::string::npos)
      << err;
  // With --model, the error names --model's path, not the config's key.
  const std::string given = std::string(UNSTUCK_BINARY) + " bench generate --config " + yaml.string() + " --model " +
                            (dir / "other").string() + " 2> " + (dir / "err2.txt").string();
  EXPECT_NE(std::system(given.c_str()), 0);
  std::ifstream err2_in(dir / "err2.txt");
  const std::string err2((std::istreambuf_iterator<char>(err2_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(err2.find("--model '" + (dir / "other").string() + "' is not a model directory"), std::string::npos)
      << err2;
  EXPECT_EQ(err2.find("grpo.base_model"), std::string::npos) << err2;
  fs::remove_all(dir);
}

TEST(Sft, VocabularyMismatchIsNamed) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_sft_vocab_" + std::to_string(::getpid()));
  RunConfig cfg = tiny_setup(dir);
  cfg.model.vocab_size = 999;
  try {
    run_sft(cfg);
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.vocab_size is 999"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// run.device: cuda trains on the GPU (the paper's --gpu preset trains its base so), with the CPU's
// loss curve and weights up to the devices' float rounding; without a usable device it is an error
// naming the key, before the run directory is created.
TEST(Sft, TrainsOnTheConfiguredDevice) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_sft_device_" + std::to_string(::getpid()));
  RunConfig cfg = tiny_setup(dir);
  cfg.sft.steps = 20;
  cfg.run.device = DeviceKind::cuda;
  if (!torch::cuda::is_available()) {
    try {
      run_sft(cfg);
      ADD_FAILURE() << "run.device: cuda trained without a CUDA device";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("run.device"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "runs" / "tiny")) << "the run directory was created before the device check";
    fs::remove_all(dir);
    GTEST_SKIP() << "no CUDA device: checked the error only";
  }
  cfg.run.name = "gpu";
  const SftResult gpu = run_sft(cfg);
  cfg.run.device = DeviceKind::cpu;
  cfg.run.name = "cpu";
  const SftResult cpu = run_sft(cfg);
  std::ifstream run_json(dir / "runs" / "gpu" / "run.json");
  EXPECT_EQ(nlohmann::json::parse(run_json)["device"].get<std::string>(), "cuda:0");
  const std::vector<double> lg = losses(dir / "runs" / "gpu" / "sft_metrics.jsonl");
  const std::vector<double> lc = losses(dir / "runs" / "cpu" / "sft_metrics.jsonl");
  ASSERT_EQ(lg.size(), lc.size());
  // Tolerances: one window of 10 steps apart the runs differ only by float summation order
  // (1e-3 relative); after 20 Adam steps the weights differ by well under 1% of their norm.
  EXPECT_NEAR(lg.front(), lc.front(), 1e-3 * lc.front());
  const torch::Tensor wg = load_policy(gpu.model_dir, {"run.device=cpu"}).master;
  const torch::Tensor wc = load_policy(cpu.model_dir, {"run.device=cpu"}).master;
  EXPECT_LT((wg - wc).norm().item<double>(), 1e-2 * wc.norm().item<double>());
  fs::remove_all(dir);
}

// A policy trained on a GPU loads anywhere: load_policy() ignores the device its run recorded
// (auto: a usable GPU, else the CPU) and honours only a run.device override.
TEST(Sft, PolicyLoadsOnThisMachinesDevice) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_sft_policy_device_" + std::to_string(::getpid()));
  RunConfig cfg = tiny_setup(dir);
  cfg.sft.steps = 2;
  const SftResult r = run_sft(cfg);
  const fs::path yaml = r.model_dir / kRunConfigFile;
  std::stringstream text;
  text << std::ifstream(yaml).rdbuf();
  std::string s = text.str();
  const std::size_t at = s.find("device: auto");
  ASSERT_NE(at, std::string::npos) << s;
  s.replace(at, 12, "device: cuda");  // as `unstuck sft run.device=cuda` writes it
  std::ofstream(yaml) << s;
  const c10::DeviceType here = torch::cuda::is_available() ? c10::kCUDA : c10::kCPU;
  EXPECT_EQ(load_policy(r.model_dir, {}).model->flat_weights().device().type(), here);
  EXPECT_EQ(load_policy(r.model_dir, {"run.device=cpu"}).model->flat_weights().device().type(), c10::kCPU);
  if (!torch::cuda::is_available()) {
    try {
      load_policy(r.model_dir, {"run.device=cuda"});
      ADD_FAILURE() << "run.device=cuda loaded without a CUDA device";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("run.device"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

// A one-layer model over a 16-token vocabulary for optimizer-level tests.
model::ModelConfig one_layer_model() { return testing::model_shape(16, 32, 1, 2, 2, 32, 16); }

// Every precision mode steps: the master moves and the compute weights are the rounding of it. At
// lr 1e-5 the first Adam step moves every weight by ~1e-5: FP32 changes them all, BF16 RN only
// those with |w| below ~256 * 1e-5 (about 15% of N(0, 0.02) weights, no norm gain).
TEST(TrainableWeights, StepsInEveryMode) {
  const model::ModelConfig c = one_layer_model();
  const model::ParamLayout layout = model::llama_layout(c);
  torch::Tensor init = torch::empty({layout.total});
  model::init_llama_weights(layout, c, init, 1);
  init = init.to(torch::kBFloat16).to(torch::kFloat32);  // master on the BF16 grid
  precision::OptimConfig optim;
  for (auto mode : {precision::PrecisionMode::fp32, precision::PrecisionMode::bf16, precision::PrecisionMode::bf16_sr,
                    precision::PrecisionMode::fp16, precision::PrecisionMode::fp16_sr}) {
    precision::PrecisionConfig pc;
    pc.mode = mode;
    TrainableWeights w(c, init.clone(), pc, 7);
    // Every id of the vocabulary, so every embedding row has a gradient (a random draw left ids out
    // and their rows unchanged, which moved the FP32 count below 0.99 by chance).
    const torch::Tensor tokens = (torch::arange(48, torch::kLong) * 7 % 16).reshape({4, 12});
    const torch::Tensor logits = w.model().forward(tokens);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 16}), tokens.reshape({-1}));
    (loss * w.loss_scale()).backward();
    w.accumulate_grads();
    const OptimizerStepStats st = w.optimizer_step(optim, 1e-5);
    const char* name = config::enum_name(mode);
    EXPECT_FALSE(st.skipped) << name;
    EXPECT_GT(st.grad_norm, 0.0) << name;
    EXPECT_FALSE(torch::equal(w.master(), init)) << name;
    EXPECT_TRUE(torch::equal(w.compute(), w.master().to(w.compute().scalar_type())) ||
                mode == precision::PrecisionMode::bf16_sr || mode == precision::PrecisionMode::fp16_sr)
        << name;
    const double changed = double(st.changed) / double(st.elements);
    if (mode == precision::PrecisionMode::bf16) EXPECT_LT(changed, 0.3) << "BF16 RN should stick at lr 1e-5";
    if (mode == precision::PrecisionMode::fp32) EXPECT_GT(changed, 0.99);
  }
}

// Outside the FP16 modes a NaN gradient stops training with the tensor and the step named.
TEST(TrainableWeights, NonFiniteGradientIsNamed) {
  const model::ModelConfig c = one_layer_model();
  const model::ParamLayout layout = model::llama_layout(c);
  torch::Tensor init = torch::empty({layout.total});
  model::init_llama_weights(layout, c, init, 1);
  precision::PrecisionConfig pc;
  pc.mode = precision::PrecisionMode::bf16;
  TrainableWeights w(c, init, pc, 1);
  const torch::Tensor tokens = torch::randint(0, 16, {2, 6}, torch::kLong);
  const torch::Tensor logits = w.model().forward(tokens);
  (logits.sum() * std::numeric_limits<float>::quiet_NaN()).backward();
  w.accumulate_grads();
  try {
    w.optimizer_step({}, 1e-3);
    ADD_FAILURE() << "NaN gradient accepted";
  } catch (const UserError& e) {
    EXPECT_NE(
        std::string(e.what()).find("non-finite gradient in tensor 'model.embed_tokens.weight' at optimizer step 1"),
        std::string::npos)
        << e.what();
  }
}

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  EXPECT_DOUBLE_EQ(config::scheduled_lr(config::LrSchedule::constant, 1e-3, 5, 110, 10, 0.1), 1e-3);
  EXPECT_DOUBLE_EQ(config::scheduled_lr(config::LrSchedule::cosine, 1e-3, 5, 110, 10, 0.1), 5e-4);
  EXPECT_DOUBLE_EQ(config::scheduled_lr(config::LrSchedule::warmup, 1e-3, 50, 110, 10, 0.1), 1e-3);
  EXPECT_NEAR(config::scheduled_lr(config::LrSchedule::cosine, 1e-3, 60, 110, 10, 0.1), 5.5e-4, 1e-12);
  EXPECT_NEAR(config::scheduled_lr(config::LrSchedule::cosine, 1e-3, 110, 110, 10, 0.1), 1e-4, 1e-12);
}

}  // namespace
}  // namespace unstuck::train
