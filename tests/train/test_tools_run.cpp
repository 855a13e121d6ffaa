// Multi-turn GRPO with a tool, end to end through `unstuck train`: a small Qwen2-shaped policy
// fine-tuned to call multiply(a, b) (tests/train/tool_standin.py) is trained with tools.functions;
// the calls it writes are run by the tool workers, their results reach its context and it answers
// after them; the loss reads only its own tokens; the same seed gives the same run, two ranks sample
// the rows one does, and a run resumed from a checkpoint continues bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "train/tiny_task.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<nlohmann::json> read_lines(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class ToolsRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("unstuck_tools_run_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    const std::string make = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR + "/tests/train/tool_standin.py " +
                             dir_.string() + " > " + (dir_.string() + ".standin.log") + " 2>&1";
    made_ = std::system(make.c_str());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (WIFEXITED(made_) && WEXITSTATUS(made_) == 77) GTEST_SKIP() << "transformers is not installed";
    ASSERT_EQ(made_, 0) << read_text(dir_.string() + ".standin.log");
  }

  // The run's YAML: 2 prompts x 4 completions a step, fp32, the multiply tool.
  static fs::path config(const std::string& name, int64_t steps,
                         const std::string& reward = "{verifier: math, answer_formats: [boxed], format_reward: 0.0}",
                         const std::string& tools = std::string("  functions: [{path: ") + UNSTUCK_SOURCE_DIR +
                                                    "/tests/rollout/tool_corpus.py, name: multiply}]\n") {
    const fs::path path = dir_ / (name + ".yaml");
    std::ofstream out(path);
    out << "run: {name: " << name << ", output_dir: " << (dir_ / "runs").string() << ", seed: 3}\n"
        << "data: {task: math, train_path: " << (dir_ / "data/train.jsonl").string()
        << ", test_path: " << (dir_ / "data/test.jsonl").string()
        << ", prompt_key: question, answer_key: answer, answer_extraction: gsm8k, chat_template: auto, "
           "prompt_template: \"{prompt}\"}\n"
        << "reward: " << reward << "\n"
        << "precision: {mode: fp32}\n"
        << "optim: {lr: 1.0e-3}\n"
        << "rollout: {temperature: 1.0, max_new_tokens: 96}\n"
        << "tools:\n"
        << tools << "  python: " << UNSTUCK_PYTHON << "\n"
        << "grpo: {base_model: " << (dir_ / "model").string() << ", steps: " << steps
        << ", prompts_per_step: 2, group_size: 4, minibatches: 1, eval_every: 0, eval_samples: 2, "
           "log_rollouts_every: 1, checkpoint_every: 2}\n";
    return path;
  }
  static int run(const std::string& args, const std::string& log) {
    const std::string cmd = std::string(UNSTUCK_BINARY) + " " + args + " > " + (dir_ / log).string() + " 2>&1";
    return std::system(cmd.c_str());
  }

  static fs::path dir_;
  static int made_;
};
fs::path ToolsRun::dir_;
int ToolsRun::made_ = -1;

// The rollouts of a run, both ranks' files merged, by (step, row).
std::map<std::pair<int64_t, int64_t>, nlohmann::json> rollouts_of(const fs::path& run_dir) {
  std::map<std::pair<int64_t, int64_t>, nlohmann::json> out;
  for (const auto& e : fs::directory_iterator(run_dir))
    if (e.path().filename().string().rfind("rollouts", 0) == 0)
      for (nlohmann::json& line : read_lines(e.path())) {
        const std::pair<int64_t, int64_t> key{line["step"].get<int64_t>(), line["row"].get<int64_t>()};
        out[key] = std::move(line);
      }
  return out;
}

TEST_F(ToolsRun, CallsRunTheirResultsReachThePolicyAndStayOutOfTheLoss) {
  ASSERT_EQ(run("train --config " + config("calls", 2).string(), "calls.log"), 0) << read_text(dir_ / "calls.log");
  const fs::path run_dir = dir_ / "runs" / "calls";
  const auto metrics = read_metrics(run_dir);
  ASSERT_EQ(metrics.size(), 2u);
  double calls = 0;
  for (const auto& m : metrics) {
    calls += m["tools/calls"].get<double>();
    // The loss reads the policy's tokens: as many as it generated (a tool's result is not among them).
    EXPECT_DOUBLE_EQ(m["loss_tokens_mean"].get<double>(), m["response_len_mean"].get<double>());
    if (m["tools/calls"].get<double>() > 0) EXPECT_GT(m["tools/tool_tokens"].get<double>(), 0.0);
    // Each round continues the row's KV cache: it computes the row's last sampled token and the
    // results, at most one token a turn beyond the tools' (not the ~160-token context again).
    const double computed = m["tools/context_tokens"].get<double>();
    EXPECT_LE(computed, m["tools/tool_tokens"].get<double>() + m["tools/turns"].get<double>() - 1 + 1e-9) << m;
    if (m["tools/calls"].get<double>() > 0) EXPECT_GT(computed, 0.0) << m;
  }
  EXPECT_GT(calls, 0.0) << "the fine-tuned policy calls multiply";
  // The tool workers are in the memory plan: other processes, resident memory measured at the start.
  const nlohmann::json memory = nlohmann::json::parse(read_text(run_dir / "run.json"))["plan"]["memory"];
  const nlohmann::json* workers = nullptr;
  for (const nlohmann::json& part : memory["parts"])
    if (part["what"].get<std::string>().rfind("tool workers: 2 process(es)", 0) == 0) workers = &part;
  ASSERT_NE(workers, nullptr) << memory.dump(1);
  bool rounds = false;  // the kept contexts beside a round's cache
  for (const nlohmann::json& part : memory["parts"])
    rounds = rounds || part["what"].get<std::string>().rfind("KV caches of the tool rounds", 0) == 0;
  EXPECT_TRUE(rounds) << memory.dump(1);
  EXPECT_TRUE((*workers)["other_process"].get<bool>());
  EXPECT_GT((*workers)["bytes"].get<double>(), 2 * 4.0 * (1 << 20)) << "two Python processes";
  EXPECT_LT((*workers)["bytes"].get<double>(), 2 * 1024.0 * (1 << 20));
  // Every call the policy wrote was run: the result that follows it is a * b, in the template's
  // tool message, and the policy's next turn comes after it.
  const std::regex call(
      R"(<tool_call>\n\{"name": "multiply", "arguments": \{"a": (\d+), "b": (\d+)\}\}\n</tool_call>)");
  int64_t checked = 0;
  for (const auto& [key, line] : rollouts_of(run_dir)) {
    if (!line.contains("turns")) continue;
    const auto& turns = line["turns"];
    for (std::size_t t = 0; t + 1 < turns.size(); ++t) {
      if (turns[t]["from"] != "policy" || turns[t + 1]["from"] != "tools") continue;
      std::smatch m;
      const std::string text = turns[t]["text"];
      if (!std::regex_search(text, m, call)) continue;
      const int64_t product = std::stoll(m[1]) * std::stoll(m[2]);
      EXPECT_NE(turns[t + 1]["text"].get<std::string>().find("<tool_response>\n" + std::to_string(product) +
                                                             "\n</tool_response>"),
                std::string::npos)
          << turns[t + 1]["text"];
      EXPECT_LT(t + 2, turns.size()) << "the policy answers after the result";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// Multi-turn GRPO in every precision mode, and with LoRA: the calls run, the loss reads the policy's
// tokens only, the update is finite, and a resumed run continues bit for bit (BF16-SR: its rounding
// stream is part of the checkpoint).
TEST_F(ToolsRun, EveryPrecisionModeAndLoraTrainWithTools) {
  const std::vector<std::string> runs = {"precision.mode=fp16",
                                         "precision.mode=fp16_sr",
                                         "precision.mode=bf16",
                                         "precision.mode=bf16_sr",
                                         "precision.mode=fp8_rn",
                                         "precision.mode=fp8_sr",
                                         "precision.mode=bf16_sr lora.rank=4 lora.alpha=8"};
  // Rewarded for using the tool's product, so the groups' rewards differ and the updates are not zero.
  const std::string reward =
      std::string("{function: {path: ") + UNSTUCK_SOURCE_DIR +
      "/tests/train/tool_reward.py, name: used_the_product, style: trl, python: " + UNSTUCK_PYTHON + ", workers: 1}}";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string name = "mode" + std::to_string(i);
    const int64_t steps = i == 3 ? 4 : 2;  // BF16-SR: resumed below
    ASSERT_EQ(run("train --config " + config(name, steps, reward).string() + " " + runs[i], name + ".log"), 0)
        << runs[i] << "\n"
        << read_text(dir_ / (name + ".log"));
    double calls = 0, grad = 0;
    for (const auto& m : read_metrics(dir_ / "runs" / name)) {
      calls += m["tools/calls"].get<double>();
      EXPECT_DOUBLE_EQ(m["loss_tokens_mean"].get<double>(), m["response_len_mean"].get<double>()) << runs[i];
      EXPECT_TRUE(std::isfinite(m["grad_norm"].get<double>())) << runs[i] << " step " << m["step"];
      grad += m["grad_norm"].get<double>();
    }
    EXPECT_GT(calls, 0.0) << runs[i];
    EXPECT_GT(grad, 0.0) << runs[i] << ": no step updated";
  }
  // Resumed at step 2, BF16-SR continues as it went.
  const fs::path a = dir_ / "runs" / "mode3", r = dir_ / "runs" / "mode3_resumed";
  fs::copy(a, r, fs::copy_options::recursive);
  fs::remove_all(r / "checkpoints" / "step_00000004");
  fs::remove(r / "rollouts.jsonl");
  ASSERT_EQ(run("train --resume " + r.string() + " run.name=mode3_resumed", "mode3_resumed.log"), 0)
      << read_text(dir_ / "mode3_resumed.log");
  const auto ma = read_metrics(a), mr = read_metrics(r);
  ASSERT_EQ(mr.size(), 4u);
  for (std::size_t k = 2; k < 4; ++k)
    for (const char* key : {"reward_mean", "grad_norm", "entropy", "tools/calls", "tools/tool_tokens"})
      EXPECT_EQ(mr[k][key], ma[k][key]) << "step " << k + 1 << " " << key;
}

// 1 when an assistant turn of `messages` called multiply(a, b) and the tool message after it holds
// a * b (tests/train/tool_reward.py's rule).
int used_the_product(const nlohmann::json& messages) {
  for (std::size_t i = 0; i + 1 < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    if (m["role"] != "assistant" || !m.contains("tool_calls")) continue;
    const nlohmann::json& f = m["tool_calls"][0]["function"];
    const nlohmann::json& answer = messages[i + 1];
    if (f["name"] == "multiply" && answer["role"] == "tool" && f["arguments"].is_object() &&
        answer["content"] == std::to_string(f["arguments"].value("a", 0) * f["arguments"].value("b", 0)))
      return 1;
  }
  return 0;
}

// A TRL reward function gets each completion as TRL gives it with tools: messages, the assistant turns
// with their tool_calls and the tool messages after them (tests/train/tool_reward.py scores 1 when a
// tool message holds the product of its call). Rows whose rollout ran a call score 1, the others 0.
TEST_F(ToolsRun, RewardFunctionsReceiveTheConversation) {
  const std::string reward =
      std::string("{function: {path: ") + UNSTUCK_SOURCE_DIR +
      "/tests/train/tool_reward.py, name: used_the_product, style: trl, python: " + UNSTUCK_PYTHON + ", workers: 1}}";
  ASSERT_EQ(run("train --config " + config("messages", 2, reward).string(), "messages.log"), 0)
      << read_text(dir_ / "messages.log");
  int64_t with_tools = 0, rows = 0;
  for (const auto& [key, line] : rollouts_of(dir_ / "runs" / "messages")) {
    bool called = false;
    for (const auto& turn : line["turns"]) called = called || turn["from"] == "tools";
    EXPECT_EQ(line["reward"].get<double>(), called ? 1.0 : 0.0) << line.dump();
    // The log shows the same messages: the first is the policy's first turn.
    ASSERT_FALSE(line["messages"].empty());
    EXPECT_EQ(line["messages"][0]["role"], "assistant");
    with_tools += called;
    ++rows;
  }
  EXPECT_EQ(rows, 16);
  EXPECT_GT(with_tools, 0);
  const auto metrics = read_metrics(dir_ / "runs" / "messages");
  for (const auto& m : metrics) EXPECT_EQ(m.value("reward_error_frac", -1.0), 0.0) << m.dump();
  // The evaluation after the last step runs the same tool rounds (greedy) and gives the function the
  // conversation: the policy's calls score there too.
  ASSERT_TRUE(metrics.back().contains("eval_accuracy")) << metrics.back().dump();
  EXPECT_GT(metrics.back()["eval_accuracy"].get<double>(), 0.0);
  // `unstuck eval` of the trained model runs its tools too, and scores as the run's evaluation did.
  // Its sampled pass@k runs the tool rounds as well and is scored with the conversation.
  ASSERT_EQ(run("eval --model " + (dir_ / "runs/messages/final_model").string() + " --json --k 2", "eval.log"), 0)
      << read_text(dir_ / "eval.log");
  const std::string shown = read_text(dir_ / "eval.log");
  const nlohmann::json j = nlohmann::json::parse(shown.substr(shown.rfind("{\"model\"")));
  EXPECT_DOUBLE_EQ(j["greedy_accuracy"].get<double>(), metrics.back()["eval_accuracy"].get<double>()) << shown;
  ASSERT_TRUE(j.contains("pass_at_2")) << shown;
  EXPECT_GT(j["pass_at_2"].get<double>(), 0.0) << shown;
  // `unstuck generate` of it shows the conversation: its call, the tool's answer, its last turn.
  const std::string question = read_lines(dir_ / "data/test.jsonl").at(0)["question"];
  std::ofstream(dir_ / "prompts.txt") << question << "\n";
  ASSERT_EQ(run("generate --model " + (dir_ / "runs/messages/final_model").string() + " --prompts-file " +
                    (dir_ / "prompts.txt").string() + " --json",
                "generate.log"),
            0)
      << read_text(dir_ / "generate.log");
  const std::string generated = read_text(dir_ / "generate.log");
  const nlohmann::json g =
      nlohmann::json::parse(generated.substr(generated.find("{\"prompt\""))
                                .substr(0, generated.substr(generated.find("{\"prompt\"")).find('\n')));
  ASSERT_TRUE(g.contains("messages")) << generated;
  EXPECT_EQ(used_the_product(g["messages"]), 1) << g["messages"].dump();
}

// A verl-style function gets the whole multi-turn response as solution_str (tests/train/tool_reward.py's
// read_the_product finds a call and the product after it), as verl's reward managers decode it: every
// row whose rollout ran a call scores 1, every other 0.
TEST_F(ToolsRun, VerlFunctionsReadTheWholeResponse) {
  const std::string reward =
      std::string("{function: {path: ") + UNSTUCK_SOURCE_DIR +
      "/tests/train/tool_reward.py, name: read_the_product, style: verl, python: " + UNSTUCK_PYTHON + ", workers: 1}}";
  ASSERT_EQ(run("train --config " + config("verl", 1, reward).string(), "verl.log"), 0) << read_text(dir_ / "verl.log");
  int64_t with_tools = 0;
  for (const auto& [key, line] : rollouts_of(dir_ / "runs" / "verl")) {
    bool called = false;
    for (const auto& turn : line["turns"]) called = called || turn["from"] == "tools";
    EXPECT_EQ(line["reward"].get<double>(), called ? 1.0 : 0.0) << line.dump();
    with_tools += called;
  }
  EXPECT_GT(with_tools, 0);
}

// Dynamic sampling (grpo.filter_groups) on two ranks keeps each row's tool loop with its group: the
// rows a rank logs, sampled on either rank, show their messages and calls, and their reward follows
// the conversation the reward function read.
TEST_F(ToolsRun, DynamicSamplingKeepsEachRowsConversationOnTwoRanks) {
  const std::string reward =
      std::string("{function: {path: ") + UNSTUCK_SOURCE_DIR +
      "/tests/train/tool_reward.py, name: used_the_product, style: trl, python: " + UNSTUCK_PYTHON + ", workers: 1}}";
  ASSERT_EQ(run("launch --nproc 2 -- train --config " + config("filtered", 2, reward).string() +
                    " grpo.filter_groups=zero_variance grpo.oversample=2",
                "filtered.log"),
            0)
      << read_text(dir_ / "filtered.log");
  int64_t rows = 0, called_rows = 0;
  for (const auto& [key, line] : rollouts_of(dir_ / "runs" / "filtered")) {
    ASSERT_TRUE(line.contains("messages") && line.contains("tool_calls")) << line.dump();
    bool called = false;
    for (const auto& turn : line["turns"]) called = called || turn["from"] == "tools";
    EXPECT_EQ(line["tool_calls"].get<int64_t>() > 0, called) << line.dump();
    EXPECT_EQ(line["reward"].get<double>(), double(used_the_product(line["messages"]))) << line.dump();
    ASSERT_FALSE(line["messages"].empty());
    EXPECT_EQ(line["messages"][0]["role"], "assistant");
    called_rows += called;
    ++rows;
  }
  EXPECT_EQ(rows, 16);
  EXPECT_GT(called_rows, 0);
  for (const auto& m : read_metrics(dir_ / "runs" / "filtered")) EXPECT_TRUE(m.contains("sampling_rounds")) << m;
}

// tools.environment, TRL's environment_factory, end to end (tests/train/tool_environment.py): each
// row's MultiplyEnv is reset with its record, and what reset() returns ends the row's prompt; the
// policy calls the environment's multiply on its own instance; get_reward() is the row's reward (the
// reward function returns None, as TRL's nansum leaves it): the number of products its own instance
// computed, i.e. its calls.
// The task's records as tools.environment rows: each says "What is" and carries a and b (the
// environment writes the rest), and `extra`'s columns; written as data/<name>_{train,test}.jsonl.
// Returns the config overrides that read them.
std::string environment_data(const fs::path& dir, const std::string& name, const nlohmann::json& extra) {
  for (const char* split : {"train", "test"}) {
    std::ofstream out(dir / "data" / (name + "_" + split + ".jsonl"));
    for (const nlohmann::json& r : read_lines(dir / "data" / (std::string(split) + ".jsonl"))) {
      const std::string q = r["question"];
      const std::size_t times = q.find(" times ");
      nlohmann::json row{{"question", "What is"},
                         {"a", std::stoll(q.substr(8, times - 8))},
                         {"b", std::stoll(q.substr(times + 7))},
                         {"answer", r["answer"]}};
      row.update(extra.value(split, nlohmann::json::object()));
      out << row.dump() << "\n";
    }
  }
  return " data.train_path=" + (dir / "data" / (name + "_train.jsonl")).string() +
         " data.test_path=" + (dir / "data" / (name + "_test.jsonl")).string();
}

// A logged row's multiply(a, b) calls with two integers (the products its instance computed).
int64_t multiply_calls(const nlohmann::json& line) {
  int64_t products = 0;
  for (const nlohmann::json& m : line["messages"])
    if (m["role"] == "assistant" && m.contains("tool_calls"))
      for (const nlohmann::json& c : m["tool_calls"]) {
        const nlohmann::json& args = c["function"]["arguments"];
        products += c["function"]["name"] == "multiply" && args.is_object() && args.size() == 2 &&
                    args.value("a", nlohmann::json()).is_number_integer() &&
                    args.value("b", nlohmann::json()).is_number_integer();
      }
  return products;
}

TEST_F(ToolsRun, AnEnvironmentOwnsItsStateAndReward) {
  const std::string env = std::string(UNSTUCK_SOURCE_DIR) + "/tests/train/tool_environment.py";
  const std::string reward =
      "{function: {path: " + env + ", name: abstain, style: trl, python: " + UNSTUCK_PYTHON + ", workers: 1}}";
  const std::string data = environment_data(dir_, "env", nlohmann::json::object());
  ASSERT_EQ(run("train --config " +
                    config("env", 2, reward, "  environment: {path: " + env + ", name: MultiplyEnv}\n").string() + data,
                "env.log"),
            0)
      << read_text(dir_ / "env.log");
  int64_t rows = 0, rewarded = 0;
  for (const auto& [key, line] : rollouts_of(dir_ / "runs" / "env")) {
    const std::string prompt = line["prompt"];  // the record's "What is", then what reset() returned
    EXPECT_TRUE(std::regex_search(prompt, std::regex("What is \\d+ times \\d+\\?<\\|im_end\\|>"))) << prompt;
    const int64_t products = multiply_calls(line);
    EXPECT_EQ(line["reward"].get<double>(), double(products)) << line.dump();
    rewarded += products > 0;
    ++rows;
  }
  EXPECT_EQ(rows, 16);
  EXPECT_GT(rewarded, 0);
  for (const auto& m : read_metrics(dir_ / "runs" / "env")) EXPECT_TRUE(m.contains("reward/MultiplyEnv")) << m;
}

// A TRL reward function that takes environments (as TRL's grpo_2048 example writes one:
// reward_score(environments, **kwargs)) reads each row's own instance, as TRL passes
// environment_factory's instances: products_seen counts the products the row's instance computed and
// get_reward counts them again, so a row's reward is twice its calls (rows on both tool workers, in
// order). The instances are the class of the function's own file (isinstance holds). The run's
// evaluation and `unstuck eval` read the instances too; without tools.environment the function is
// refused before training.
TEST_F(ToolsRun, ARewardFunctionReadsEachRowsOwnInstanceAsTrlPassesThem) {
  const std::string env = std::string(UNSTUCK_SOURCE_DIR) + "/tests/train/tool_environment.py";
  const std::string reward =
      "{function: {path: " + env + ", name: products_seen, style: trl, python: " + UNSTUCK_PYTHON + ", workers: 1}}";
  const std::string data = environment_data(dir_, "seen", nlohmann::json::object());
  ASSERT_EQ(
      run("train --config " +
              config("seen", 2, reward, "  environment: {path: " + env + ", name: MultiplyEnv}\n").string() + data,
          "seen.log"),
      0)
      << read_text(dir_ / "seen.log");
  int64_t rows = 0, rewarded = 0;
  for (const auto& [key, line] : rollouts_of(dir_ / "runs" / "seen")) {
    const int64_t products = multiply_calls(line);
    EXPECT_EQ(line["reward"].get<double>(), 2.0 * double(products)) << line.dump();
    rewarded += products > 0;
    ++rows;
  }
  EXPECT_EQ(rows, 16);
  EXPECT_GT(rewarded, 0);
  const auto metrics = read_metrics(dir_ / "runs" / "seen");
  for (const auto& m : metrics) EXPECT_EQ(m.value("reward_error_frac", -1.0), 0.0) << m.dump();
  ASSERT_TRUE(metrics.back().contains("eval_accuracy")) << metrics.back().dump();
  EXPECT_GT(metrics.back()["eval_accuracy"].get<double>(), 0.0) << "the greedy policy's calls, read off the instances";
  ASSERT_EQ(run("eval --model " + (dir_ / "runs/seen/final_model").string() + " --json", "seen_eval.log"), 0)
      << read_text(dir_ / "seen_eval.log");
  const std::string shown = read_text(dir_ / "seen_eval.log");
  const nlohmann::json j = nlohmann::json::parse(shown.substr(shown.rfind("{\"model\"")));
  EXPECT_DOUBLE_EQ(j["greedy_accuracy"].get<double>(), metrics.back()["eval_accuracy"].get<double>()) << shown;
  // The tools without the environment: refused before the first rollout, naming what is missing.
  EXPECT_NE(run("train --config " + config("seen_alone", 1, reward).string() + data, "seen_alone.log"), 0);
  const std::string refused = read_text(dir_ / "seen_alone.log");
  EXPECT_NE(refused.find("takes environments"), std::string::npos) << refused;
  EXPECT_NE(refused.find("tools.environment is not set"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("first rollout token"), std::string::npos) << refused;
}

// A reset() whose string leaves no room for the completion stops the run naming the class, the
// lengths and the record, wherever rows are reset: the training rows, the run's evaluation (here the
// test rows alone are long-winded) and `unstuck generate --config`.
TEST_F(ToolsRun, AnObservationThatOutgrowsTheContextIsNamed) {
  const std::string env = std::string(UNSTUCK_SOURCE_DIR) + "/tests/train/tool_environment.py";
  const std::string tools = "  environment: {path: " + env + ", name: LongWinded}\n";
  const std::string named = "tools.environment: LongWinded.reset appended 6000 characters to a prompt";
  const fs::path cfg = config("long", 1, "{verifier: math, answer_formats: [boxed], format_reward: 0.0}", tools);
  EXPECT_NE(run("train --config " + cfg.string() + environment_data(dir_, "long", nlohmann::json::object()),
                "long_train.log"),
            0);
  EXPECT_NE(read_text(dir_ / "long_train.log").find(named), std::string::npos) << read_text(dir_ / "long_train.log");
  const std::string short_train = environment_data(dir_, "long_eval", {{"train", {{"short", true}}}});
  EXPECT_NE(run("train --config " + cfg.string() + short_train + " run.name=long_eval", "long_eval.log"), 0);
  const std::string evaluated = read_text(dir_ / "long_eval.log");
  EXPECT_NE(evaluated.find(named), std::string::npos) << evaluated;
  EXPECT_NE(evaluated.find("first rollout token"), std::string::npos) << "the training rows fit: " << evaluated;
  EXPECT_EQ(read_text(dir_ / "long_train.log").find("first rollout token"), std::string::npos)
      << "the training rows do not: " << read_text(dir_ / "long_train.log");
  std::ofstream(dir_ / "long_prompts.txt") << "What is\n";
  EXPECT_NE(run("generate --model " + (dir_ / "model").string() + " --config " + cfg.string() + " --prompts-file " +
                    (dir_ / "long_prompts.txt").string(),
                "long_generate.log"),
            0);
  EXPECT_NE(read_text(dir_ / "long_generate.log").find(named), std::string::npos)
      << read_text(dir_ / "long_generate.log");
}

// The prompts render the tools' schemas, and the data is fitted to those lengths before training:
// with room for 124 prompt tokens, every prompt (158-160 tokens with the tools, about 20 without) is
// dropped.
TEST_F(ToolsRun, PromptsRenderTheToolsAndAreFittedWithThem) {
  ASSERT_EQ(run("data check --config " + config("check", 1).string(), "check.log"), 0) << read_text(dir_ / "check.log");
  const std::string shown = read_text(dir_ / "check.log");
  EXPECT_NE(shown.find("with 1 tool(s)"), std::string::npos) << shown;
  EXPECT_NE(shown.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"multiply\""), std::string::npos)
      << shown;
  EXPECT_NE(shown.find("dropped (longer than 928 tokens): 0"), std::string::npos) << shown;
  ASSERT_EQ(run("data check --config " + config("check", 1).string() + " rollout.max_new_tokens=900", "short.log"), 0);
  EXPECT_NE(read_text(dir_ / "short.log").find("dropped (longer than 124 tokens): 600"), std::string::npos)
      << read_text(dir_ / "short.log");
}

TEST_F(ToolsRun, SameSeedSameRunTwoRanksTheSameRowsAndResumeBitExact) {
  ASSERT_EQ(run("train --config " + config("a", 4).string(), "a.log"), 0) << read_text(dir_ / "a.log");
  ASSERT_EQ(run("launch --nproc 2 -- train --config " + config("b", 4).string(), "b.log"), 0)
      << read_text(dir_ / "b.log");
  const auto ra = rollouts_of(dir_ / "runs" / "a"), rb = rollouts_of(dir_ / "runs" / "b");
  ASSERT_EQ(ra.size(), 4u * 8u);
  ASSERT_EQ(rb.size(), ra.size());
  for (const auto& [key, line] : ra) {
    // Step 1 samples from the same weights: its rows are the same text, token for token.
    if (key.first > 1) continue;
    EXPECT_EQ(line["completion"], rb.at(key)["completion"]) << "step " << key.first << " row " << key.second;
    EXPECT_EQ(line["reward"], rb.at(key)["reward"]);
  }
  // Resumed at step 2 in one process, the run continues as it went.
  fs::copy(dir_ / "runs" / "a", dir_ / "runs" / "a_resumed", fs::copy_options::recursive);
  fs::remove_all(dir_ / "runs" / "a_resumed" / "checkpoints" / "step_00000004");
  fs::remove(dir_ / "runs" / "a_resumed" / "rollouts.jsonl");
  ASSERT_EQ(run("train --resume " + (dir_ / "runs" / "a_resumed").string() + " run.name=a_resumed", "r.log"), 0)
      << read_text(dir_ / "r.log");
  const auto ma = read_metrics(dir_ / "runs" / "a"), mr = read_metrics(dir_ / "runs" / "a_resumed");
  ASSERT_EQ(mr.size(), 4u);
  for (std::size_t i = 2; i < 4; ++i)
    for (const char* key :
         {"reward_mean", "grad_norm", "entropy", "tools/calls", "tools/tool_tokens", "loss_tokens_mean"})
      EXPECT_EQ(mr[i][key], ma[i][key]) << "resumed, step " << i + 1 << " " << key;
  const auto rr = rollouts_of(dir_ / "runs" / "a_resumed");
  for (const auto& [key, line] : rr) EXPECT_EQ(line["completion"], ra.at(key)["completion"]);
  // A second run of the same config is the same run.
  ASSERT_EQ(run("train --config " + config("a2", 4).string(), "a2.log"), 0) << read_text(dir_ / "a2.log");
  const auto ra2 = rollouts_of(dir_ / "runs" / "a2");
  for (const auto& [key, line] : ra) EXPECT_EQ(line["completion"], ra2.at(key)["completion"]);
}

}  // namespace
}  // namespace unstuck::train
