// configs/examples/*.yaml end to end: transformers-built stand-ins of the families the configs name
// (example_standins.py: model directory with a tokenizer trained in the test and the family's chat
// template, 20 GSM8K / MATH records + one overlong one), then `unstuck data check` and 2 GRPO steps
// of `unstuck train` with only the model and dataset paths (and the run's size) overridden.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

// "real": Qwen2ForCausalLM / Llama 3 stand-ins with a byte-level BPE tokenizer.json, as the configs
// name them. ("llama-sp", a LlamaForCausalLM and a SentencePiece tokenizer.model for both configs,
// is kept in example_standins.py for debugging the data path alone.)
constexpr const char* kStandin = "real";

struct Output {
  int status = -1;
  std::string text;
};

Output run(const std::string& cmd) {
  Output out;
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.text.append(buf.data(), n);
  out.status = ::pclose(pipe);
  return out;
}

size_t count_lines(const fs::path& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

void run_example(const std::string& config, const std::string& kind, const std::string& assistant_header) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_example_" + kind + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string make = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR +
                           "/tests/train/example_standins.py " + dir.string() + " " + kind + " " + kStandin;
  const Output made = run(make);
  ASSERT_EQ(made.status, 0) << make << "\n" << made.text;

  // The two paths a user changes: the model directory and the dataset folder.
  const std::string paths = " grpo.base_model=" + (dir / "model").string() +
                            " data.train_path=" + (dir / "data/train.jsonl").string() +
                            " data.test_path=" + (dir / "data/test.jsonl").string();
  const std::string cfg = std::string(UNSTUCK_SOURCE_DIR) + "/configs/examples/" + config;

  const Output check =
      run(std::string(UNSTUCK_BINARY) + " data check --config " + cfg + paths + " rollout.max_new_tokens=16");
  ASSERT_EQ(check.status, 0) << check.text;
  EXPECT_NE(check.text.find("train: 17 records"), std::string::npos) << check.text;
  EXPECT_NE(check.text.find("test: 4 records"), std::string::npos) << check.text;
  EXPECT_NE(check.text.find("dropped (longer than 496 tokens): 1\n"), std::string::npos) << check.text;
  EXPECT_NE(check.text.find("--- prompt 3 ("), std::string::npos) << check.text;
  EXPECT_NE(check.text.find(assistant_header + "\n--- end of prompt 1 ---"), std::string::npos) << check.text;
  EXPECT_NE(check.text.find("within \\boxed{}."), std::string::npos) << check.text;

  const fs::path runs = dir / "runs";
  const std::string train = std::string(UNSTUCK_BINARY) + " train --config " + cfg + paths +
                            " run.output_dir=" + runs.string() +
                            " grpo.steps=2 grpo.prompts_per_step=2 grpo.group_size=2 grpo.minibatches=1 "
                            "grpo.eval_samples=2 grpo.eval_every=0 rollout.max_new_tokens=16";
  const Output trained = run(train);
  ASSERT_EQ(trained.status, 0) << train << "\n" << trained.text;
  fs::path run_dir;
  for (const auto& e : fs::directory_iterator(runs)) run_dir = e.path();
  EXPECT_EQ(count_lines(run_dir / "metrics.jsonl"), 2u);
  std::ifstream log(run_dir / "train.log");
  const std::string log_text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(log_text.find("dropped 1 of 17 records whose prompt exceeds 496 tokens"), std::string::npos) << log_text;
  EXPECT_NE(log_text.find("prompts from chat template " + (dir / "model").string()), std::string::npos) << log_text;
  fs::remove_all(dir);
}

TEST(ExampleConfigs, Gsm8kQwen25RunsTwoGrpoSteps) {
  run_example("gsm8k_qwen2.5.yaml", "gsm8k", "<|im_start|>assistant\n");
}

TEST(ExampleConfigs, MathLlama3RunsTwoGrpoSteps) {
  run_example("math_llama3.yaml", "math", "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

}  // namespace

// configs/examples/tools_qwen2.5.yaml: its task written by scripts/make_tool_task.py, the Qwen2
// stand-in with a ChatML template that has a tools branch (tests/train/chatml_tools.jinja; the
// real Qwen2.5 template's is the same form), run from the repository root as the config's comment
// says (its tool's path is relative to it): `data check` shows both tools' schemas in the prompt,
// and two GRPO steps run with the calculator and the sandboxed python.
TEST(ExampleConfigs, ToolsQwen25RunsTwoGrpoSteps) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_example_tools_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Output made = run(std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR + "/tests/train/example_standins.py " +
                          dir.string() + " gsm8k " + kStandin + " 2048");  // room for the tools' schemas
  ASSERT_EQ(made.status, 0) << made.text;
  const Output task = run("python3 " + std::string(UNSTUCK_SOURCE_DIR) + "/scripts/make_tool_task.py " +
                          (dir / "task").string() + " --train 12 --test 3");
  ASSERT_EQ(task.status, 0) << task.text;
  EXPECT_EQ(count_lines(dir / "task/train.jsonl"), 12u);
  const std::string root = std::string("cd ") + UNSTUCK_SOURCE_DIR + " && " + UNSTUCK_BINARY;
  const std::string args =
      " --config configs/examples/tools_qwen2.5.yaml grpo.base_model=" + (dir / "model").string() +
      " data.train_path=" + (dir / "task/train.jsonl").string() +
      " data.test_path=" + (dir / "task/test.jsonl").string() + " data.chat_template=" + UNSTUCK_SOURCE_DIR +
      "/tests/train/chatml_tools.jinja tools.python=" + UNSTUCK_PYTHON + " rollout.max_new_tokens=48";
  const Output check = run(root + " data check" + args);
  ASSERT_EQ(check.status, 0) << check.text;
  EXPECT_NE(check.text.find("with 2 tool(s)"), std::string::npos) << check.text;
  EXPECT_NE(check.text.find("\"name\": \"calculate\""), std::string::npos) << check.text;
  EXPECT_NE(check.text.find("\"name\": \"python\""), std::string::npos) << check.text;
  const Output trained = run(root + " train" + args + " run.output_dir=" + (dir / "runs").string() +
                             " grpo.steps=2 grpo.prompts_per_step=2 grpo.group_size=2 grpo.minibatches=1 "
                             "grpo.eval_samples=2 grpo.eval_every=0 grpo.log_rollouts_every=1");
  ASSERT_EQ(trained.status, 0) << trained.text;
  EXPECT_EQ(count_lines(dir / "runs/tools-qwen2.5/metrics.jsonl"), 2u);
  EXPECT_EQ(count_lines(dir / "runs/tools-qwen2.5/rollouts.jsonl"), 8u);
  fs::remove_all(dir);
}
