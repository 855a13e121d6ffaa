// Test helper: a tiny arithmetic task (data, tokenizer) in a temp folder and a run config with a
// tiny model that trains on it in seconds; a tiny SFT base policy and GRPO configs on top of it.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "unstuck/config/run_config.h"
#include "unstuck/data/generators.h"
#include "unstuck/tokenizer/tokenizer.h"
#include "unstuck/train/sft.h"
#include "common/model_shape.h"

namespace unstuck::train {

// A tiny arithmetic task with its tokenizer in a temp folder; returns a config that trains on it.
inline RunConfig tiny_setup(const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  RunConfig cfg;
  cfg.data.task = data::TaskKind::arithmetic;
  cfg.data.arithmetic.min_digits = 1;
  cfg.data.arithmetic.max_digits = 2;
  cfg.data.arithmetic.ops = {"add"};
  data::write_jsonl(dir / "train.jsonl", data::generate_records(cfg.data, 1, 2000, data::Split::train));
  data::write_jsonl(dir / "test.jsonl", data::generate_records(cfg.data, 1, 64, data::Split::test));
  cfg.data.arithmetic = {};  // the generator's settings: `unstuck data generate` reads them, a run refuses them
  {
    std::ofstream corpus(dir / "corpus.txt");
    corpus << "0123456789+=\n";
  }
  tokenizer::TrainOptions t;
  t.input = (dir / "corpus.txt").string();
  t.output = (dir / "tok.model").string();
  t.user_defined_symbols = {"<answer>", "</answer>"};
  tokenizer::train_tokenizer(t);
  cfg.data.train_path = (dir / "train.jsonl").string();
  cfg.data.test_path = (dir / "test.jsonl").string();
  cfg.tokenizer.path = t.output;
  cfg.run.output_dir = (dir / "runs").string();
  cfg.run.name = "tiny";
  cfg.model = testing::model_shape(0, 32, 2, 2, 1, 64, 24);  // vocabulary 0: from the tokenizer
  cfg.optim.lr = 3e-3;
  cfg.precision.mode = precision::PrecisionMode::fp32;
  cfg.rollout.max_new_tokens = 8;
  cfg.sft.steps = 60;
  cfg.sft.batch_size = 32;
  cfg.sft.lr.warmup_steps = 5;
  cfg.sft.log_every = 10;
  cfg.sft.eval_every = 0;
  cfg.sft.eval_samples = 32;
  cfg.run.log_level = LogLevel::warn;
  return cfg;
}

// tiny_setup(dir) plus an 80-step SFT base policy in dir/base (sft.output).
inline RunConfig tiny_sft_base(const std::filesystem::path& dir) {
  RunConfig base = tiny_setup(dir);
  base.sft.steps = 80;
  base.sft.output = (dir / "base").string();
  run_sft(base);
  return base;
}

// A short FP32 GRPO run named `name` from the base policy of tiny_sft_base: 3 steps of 8 prompts x
// 4 completions, evaluation at the end on 16 records.
inline RunConfig tiny_grpo_config(const RunConfig& base, const std::string& name) {
  RunConfig c = base;
  c.run.name = name;
  c.model = {};  // taken from the base policy
  c.tokenizer.path.clear();
  c.grpo.base_model = base.sft.output;
  c.sft = {};  // read by `unstuck sft` only; a train run refuses keys it does not read
  c.grpo.steps = 3;
  c.grpo.prompts_per_step = 8;
  c.grpo.group_size = 4;
  c.grpo.eval_every = 0;
  c.grpo.eval_samples = 16;
  c.precision.mode = precision::PrecisionMode::fp32;
  return c;
}

// The lines of <run_dir>/metrics.jsonl.
inline std::vector<nlohmann::json> read_metrics(const std::filesystem::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace unstuck::train
