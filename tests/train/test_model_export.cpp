// Model directories out of a GRPO run: RUN_DIR/final_model/ holds the exact final compute weights
// (bf16_sr: the stochastically rounded ones, not the master rounded to nearest); `unstuck export`
// regenerates the same bits from the checkpoint, writes the master for --dtype fp32, shards on
// --shard-size, and its output loads in transformers (same logits) and as an Unstuck policy.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/model/llama.h"
#include "unstuck/model/lora.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/grpo.h"
#include "unstuck/train/model_export.h"
#include "unstuck/train/policy_dir.h"
#include "common/weight_bytes.h"
#include "train/tiny_task.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

using unstuck::testing::weight_bytes;

TEST(ModelExport, FinalModelAndExportHoldTheRunsComputeWeights) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_export_" + std::to_string(::getpid()));
  const RunConfig base = tiny_sft_base(dir);
  RunConfig c = tiny_grpo_config(base, "sr");
  c.precision.mode = precision::PrecisionMode::bf16_sr;
  c.grpo.steps = 2;
  c.optim.lr = 1e-3;
  const GrpoResult r = run_grpo(c);
  const fs::path final_dir = r.run_dir / "final_model";
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.model", "config.yaml"})
    EXPECT_TRUE(fs::exists(final_dir / f)) << f;
  EXPECT_EQ(io::read_json_file(final_dir / "config.json")["dtype"], "bfloat16");

  // The export of the last checkpoint in the compute dtype regenerates the same bits.
  const fs::path exported = dir / "exported";
  EXPECT_EQ(export_run(r.run_dir, exported, {}), io::DType::bf16);
  const auto final_bytes = weight_bytes(final_dir);
  EXPECT_EQ(weight_bytes(exported), final_bytes);

  // They are the stochastically rounded weights: not the master rounded to nearest everywhere.
  const TrainerState st = load_checkpoint(latest_checkpoint(r.run_dir / "checkpoints"));
  const model::LoadedModel sr = model::load_pretrained(final_dir);
  const torch::Tensor nearest = st.master.to(torch::kBFloat16).to(torch::kFloat32);
  const double differ = (sr.flat != nearest).to(torch::kFloat64).mean().item<double>();
  std::printf("final_model: %.3f of the elements differ from round-to-nearest of the master\n", differ);
  EXPECT_GT(differ, 0.0);
  EXPECT_TRUE(torch::equal(sr.flat.to(torch::kBFloat16).to(torch::kFloat32), sr.flat));

  // --dtype fp32 writes the master exactly; the CLI shards on --shard-size.
  ExportOptions fp32;
  fp32.dtype = "fp32";
  export_run(r.run_dir, dir / "master", fp32);
  EXPECT_TRUE(torch::equal(model::load_pretrained(dir / "master").flat, st.master));
  const fs::path hf_root = dir / "hf";
  const std::string cmd = std::string(UNSTUCK_BINARY) + " export --run " + r.run_dir.string() + " --step 2 --out " +
                          (hf_root / "fp16").string() + " --dtype fp16 --shard-size 20KB";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_TRUE(fs::exists(hf_root / "fp16" / "model.safetensors.index.json"));

  // transformers loads the export and computes the same logits.
  const model::LoadedModel half = model::load_pretrained(hf_root / "fp16");
  const model::LlamaModel model(half.config, half.flat);
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(0, half.config.vocab_size, {2, 10}, torch::kLong);
  const torch::Tensor logits = model.forward(tokens);
  nlohmann::json out = {
      {"architecture", "LlamaForCausalLM"}, {"tokens", nlohmann::json::array()}, {"logits", nlohmann::json::array()}};
  for (int64_t b = 0; b < 2; ++b) {
    out["tokens"].push_back(std::vector<int64_t>(tokens[b].data_ptr<int64_t>(), tokens[b].data_ptr<int64_t>() + 10));
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t t = 0; t < 10; ++t) {
      const torch::Tensor l = logits[b][t].contiguous();
      rows.push_back(std::vector<float>(l.data_ptr<float>(), l.data_ptr<float>() + l.numel()));
    }
    out["logits"].push_back(rows);
  }
  io::write_json_file(hf_root / "fp16" / "unstuck_logits.json", out, -1);
  const std::string check = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR +
                            "/tests/model/hf_families.py check " + hf_root.string() + " 2>&1";
  EXPECT_EQ(std::system(check.c_str()), 0);

  // An FP8-coded export needs an FP8 run; an unknown format is named.
  for (const auto& [format, why] : {std::pair<std::string, std::string>{"fp8", "precision.mode is bf16_sr, not fp8_rn"},
                                    {"gguf", "--format must be hf, fp8, peft or merged, got 'gguf'"}}) {
    ExportOptions o;
    o.format = format;
    try {
      export_run(r.run_dir, dir / ("refused_" + format), o);
      ADD_FAILURE() << "--format " << format << " was accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / ("refused_" + format)));
  }

  // And it is an Unstuck policy directory again.
  const Policy p = load_policy(final_dir, {});
  EXPECT_EQ(p.config.model.vocab_size, sr.config.vocab_size);
  fs::remove_all(dir);
}

// FP8 modes: final_model and the export hold the run's FP8 compute weights (BF16 values on each
// channel's scaled E4M3 grid), regenerated from the checkpoint's master with its channel scales.
TEST(ModelExport, Fp8RunsExportTheirFp8ComputeWeights) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_export_fp8_" + std::to_string(::getpid()));
  const RunConfig base = tiny_sft_base(dir);
  RunConfig c = tiny_grpo_config(base, "fp8");
  c.precision.mode = precision::PrecisionMode::fp8_sr;
  c.grpo.steps = 2;
  c.optim.lr = 1e-3;
  const GrpoResult r = run_grpo(c);
  EXPECT_EQ(export_run(r.run_dir, dir / "exported", {}), io::DType::bf16);
  EXPECT_EQ(weight_bytes(dir / "exported"), weight_bytes(r.run_dir / "final_model"));
  // A linear layer's rows hold at most 4 significant bits (E4M3 times a power of two); the norms are BF16.
  const model::LoadedModel m = model::load_pretrained(dir / "exported");
  const model::ParamLayout layout = model::llama_layout(m.config);
  const model::ParamEntry* q = layout.find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  const torch::Tensor qw = m.flat.narrow(0, q->offset, q->numel);
  const torch::Tensor bits = qw.to(torch::kBFloat16).view(torch::kShort).to(torch::kInt);
  EXPECT_EQ((bits & 0xF).ne(0).sum().item<int64_t>(), 0) << "low 4 of BF16's 7 mantissa bits must be zero";

  // --format fp8: the same weights as compressed-tensors' E4M3 codes with a BF16 scale per output
  // channel; transformers (with the compressed-tensors package) loads them into those exact weights.
  ExportOptions coded;
  coded.format = "fp8";
  EXPECT_EQ(export_run(r.run_dir, dir / "fp8", coded), io::DType::f8_e4m3);
  const std::string check = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR +
                            "/tests/train/check_fp8_export.py " + (dir / "fp8").string() + " " +
                            (dir / "exported").string() + " 2>&1";
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
  // The coded export is of the compute weights only.
  coded.dtype = "fp32";
  try {
    export_run(r.run_dir, dir / "fp8_fp32", coded);
    ADD_FAILURE() << "--format fp8 --dtype fp32 was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("drop --dtype fp32"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "fp8_fp32"));
  fs::remove_all(dir);
}

// LoRA runs: --format peft writes the adapters (their compute weights: final_adapter/'s exactly)
// as a PEFT adapter directory and --format merged a full model; peft on the base and transformers on
// the merged model give Unstuck's logits (check_lora_export.py states the tolerances). --format hf
// is refused for a LoRA run and peft / merged for a full-parameter run, by name.
TEST(ModelExport, LoraRunsExportPeftAdaptersAndMergedModels) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_export_lora_" + std::to_string(::getpid()));
  const RunConfig base = tiny_sft_base(dir);
  RunConfig c = tiny_grpo_config(base, "lora_fp32");
  c.lora.rank = 4;
  c.lora.target_modules = {"q_proj", "v_proj", "up_proj", "down_proj"};
  c.grpo.steps = 2;
  c.optim.lr = 1e-2;
  const GrpoResult r = run_grpo(c);
  ExportOptions peft;
  peft.format = "peft";
  EXPECT_EQ(export_run(r.run_dir, dir / "peft", peft), io::DType::f32);
  ExportOptions merged;
  merged.format = "merged";
  EXPECT_EQ(export_run(r.run_dir, dir / "merged", merged), io::DType::f32);

  // Unstuck's forward of the base plus the checkpoint's adapters, unmerged.
  const model::LoadedModel m = model::load_pretrained(base.sft.output);
  const TrainerState st = load_checkpoint(latest_checkpoint(r.run_dir / "checkpoints"));
  model::LlamaModel ours(m.config, m.flat);
  ours.set_adapters(model::lora_spec(c.lora), st.master.clone());
  const std::vector<int64_t> tokens = {1, 5, 9, 3, 7, 2, 8, 4, 6, 5, 11, 3};
  const torch::Tensor logits = [&] {
    torch::NoGradGuard g;
    return ours.forward(torch::tensor(tokens).unsqueeze(0))[0].contiguous();
  }();
  {
    std::ofstream(dir / "ours.bin", std::ios::binary)
        .write(static_cast<const char*>(logits.data_ptr()), std::streamsize(logits.numel() * 4));
    io::write_json_file(dir / "ours.json", {{"tokens", tokens}, {"logits_file", (dir / "ours.bin").string()}});
  }
  const std::string check = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR +
                            "/tests/train/check_lora_export.py " + base.sft.output + " " + (dir / "peft").string() +
                            " " + (dir / "merged").string() + " " + (dir / "ours.json").string() + " 2>&1";
  EXPECT_EQ(std::system(check.c_str()), 0) << check;

  // A BF16-SR LoRA run: the export's adapters are final_adapter/'s compute weights bit for bit.
  RunConfig sr = c;
  sr.run.name = "lora_sr";
  sr.precision.mode = precision::PrecisionMode::bf16_sr;
  const GrpoResult rs = run_grpo(sr);
  EXPECT_EQ(export_run(rs.run_dir, dir / "peft_sr", peft), io::DType::bf16);
  const torch::Tensor exported = model::load_peft_adapter(dir / "peft_sr", m.config).flat;
  EXPECT_TRUE(torch::equal(exported, model::load_peft_adapter(rs.run_dir / "final_adapter", m.config).flat));
  EXPECT_FALSE(torch::equal(exported, load_checkpoint(latest_checkpoint(rs.run_dir / "checkpoints")).master));

  const auto refused = [&](const fs::path& run, const std::string& format, const std::string& says) {
    ExportOptions o;
    o.format = format;
    try {
      export_run(run, dir / ("refused_" + format), o);
      ADD_FAILURE() << "--format " << format << " was accepted for " << run;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(r.run_dir, "hf", "trained LoRA adapters (lora.rank 4): use --format peft");
  RunConfig full = tiny_grpo_config(base, "full");
  full.grpo.steps = 1;
  refused(run_grpo(full).run_dir, "peft", "trained every parameter (lora.rank 0)");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace unstuck::train
