// Datasets with a field mapping (GSM8K, MATH, verl-style records), reference answer extraction,
// the prompt formatter (prompt_template or a chat template, system prompt), reward.verifier, and
// the Parquet conversion script.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/data/dataset.h"
#include "unstuck/data/generators.h"
#include "unstuck/data/prompt_formatter.h"
#include "unstuck/reward/verifier.h"
#include "common/error_of.h"

namespace unstuck::data {
namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("unstuck_test_dataset_" + std::to_string(::getpid()) + "_" + name);
}

fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

using unstuck::testing::error_of;

DataConfig gsm8k_config() {
  DataConfig c;
  c.task = TaskKind::math;
  c.prompt_key = "question";
  c.answer_key = "answer";
  c.answer_extraction = AnswerExtraction::gsm8k;
  return c;
}

const char* kChatMl =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

TEST(Dataset, Gsm8kRecordsLoadWithTheNumberAfterTheHashes) {
  const fs::path path = write_file(
      "gsm8k.jsonl",
      R"({"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?", "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"})"
      "\n\n"
      R"({"question": "Weng earns $12 an hour.", "answer": "#### 1,200"})"
      "\n");
  const auto records = read_dataset(path, gsm8k_config());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].task, "math");
  EXPECT_EQ(records[0].answer, "72");
  EXPECT_EQ(records[0].prompt.substr(0, 22), "Natalia sold clips to ");
  EXPECT_TRUE(records[0].messages.empty());
  EXPECT_EQ(records[1].answer, "1,200");
  EXPECT_TRUE(records[0].fields.contains("question"));
  // The math verifier reads the extracted answer: a completion that ends in \boxed{72} is correct.
  reward::RewardConfig rc;
  rc.verifier = "math";
  const auto verifier = reward::make_verifier(reward::verifier_name(rc, "math"), rc);
  EXPECT_EQ(verifier->score("... so \\boxed{72}", records[0]).status, reward::RewardStatus::correct);
  EXPECT_EQ(verifier->score("... so \\boxed{1200}", records[1]).status, reward::RewardStatus::correct);
  fs::remove(path);
}

TEST(Dataset, MathRecordsTakeTheLastBoxedWithNestedBraces) {
  DataConfig c;
  c.task = TaskKind::math;
  c.prompt_key = "problem";
  c.answer_key = "solution";
  c.answer_extraction = AnswerExtraction::boxed;
  const fs::path path = write_file(
      "math.jsonl",
      R"({"problem": "Compute $\\frac12+\\frac13$.", "solution": "First $\\boxed{x}$ is wrong; the sum is $\\boxed{\\frac{5}{6}}$.", "level": "Level 2", "type": "Prealgebra"})"
      "\n");
  const auto records = read_dataset(path, c);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].answer, "\\frac{5}{6}");
  EXPECT_EQ(records[0].fields["level"], "Level 2");
  EXPECT_EQ(extract_reference("no box here", AnswerExtraction::boxed), std::nullopt);
  EXPECT_EQ(extract_reference("\\boxed{\\frac{1}{2}", AnswerExtraction::boxed), std::nullopt);  // unbalanced
  EXPECT_EQ(extract_reference("  7 ", AnswerExtraction::none), "7");
  fs::remove(path);
}

TEST(Dataset, VerlRecordsKeepTheirMessagesAndReadDottedAnswerKeys) {
  DataConfig c;
  c.task = TaskKind::math;
  c.answer_key = "reward_model.ground_truth";
  const fs::path path = write_file(
      "verl.jsonl",
      R"({"data_source": "openai/gsm8k", "prompt": [{"role": "system", "content": "Think."}, {"role": "user", "content": "What is 6*7?"}], "ability": "math", "reward_model": {"style": "rule", "ground_truth": "42"}, "extra_info": {"index": 0}})"
      "\n");
  const auto records = read_dataset(path, c);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].answer, "42");
  EXPECT_EQ(records[0].prompt, "What is 6*7?");
  ASSERT_EQ(records[0].messages.size(), 2u);
  EXPECT_EQ(records[0].messages[0]["content"], "Think.");
  EXPECT_EQ(records[0].task, "math");

  nlohmann::ordered_json nested = {{"a", {{"b", nlohmann::ordered_json::array({{{"c", 5}}})}}}};
  ASSERT_NE(find_path(nested, "a.b.0.c"), nullptr);
  EXPECT_EQ(*find_path(nested, "a.b.0.c"), 5);
  EXPECT_EQ(find_path(nested, "a.b.1.c"), nullptr);
  EXPECT_EQ(find_path(nested, "a.x"), nullptr);

  // Without a chat template a message list has nowhere to go: the error names the key to set.
  EXPECT_NE(error_of([&] {
              PromptFormatter(c, temp_path("none")).render(records[0]);
            }).find("set data.chat_template to auto or a .jinja file"),
            std::string::npos);
  const fs::path tpl = write_file("verl.jinja", kChatMl);
  c.chat_template = tpl.string();
  c.system_prompt = "Ignored: the record has its own system message.";
  EXPECT_EQ(PromptFormatter(c, temp_path("none")).render(records[0]),
            "<|im_start|>system\nThink.<|im_end|>\n<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n");
  fs::remove(tpl);
  fs::remove(path);
}

TEST(Dataset, BadLinesNameTheFileLineAndKey) {
  const fs::path path = write_file("bad.jsonl", "{\"question\": \"q\", \"answer\": \"#### 1\"}\n{\"q\": \"x\"}\n");
  EXPECT_EQ(error_of([&] { read_dataset(path, gsm8k_config()); }),
            path.string() + ":2: missing data.prompt_key 'question'");
  std::ofstream(path) << "{\"question\": \"q\", \"answer\": \"72\"}\n";
  EXPECT_EQ(
      error_of([&] { read_dataset(path, gsm8k_config()); }),
      path.string() + ":1: data.answer_key 'answer': no '####' followed by an answer (data.answer_extraction: gsm8k)");
  std::ofstream(path) << "{\"question\": [{\"role\": \"user\"}], \"answer\": \"#### 1\"}\n";
  EXPECT_EQ(
      error_of([&] { read_dataset(path, gsm8k_config()); }),
      path.string() + ":1: data.prompt_key 'question' message 0: expected {\"role\": string, \"content\": string}");
  std::ofstream(path) << "{\"question\": \"q\", \"answer\": [1]}\n";
  EXPECT_EQ(error_of([&] { read_dataset(path, gsm8k_config()); }),
            path.string() + ":1: data.answer_key 'answer' must be a string or a number, got array");
  fs::remove(path);
}

TEST(Dataset, GeneratedRecordsLoadUnchangedWithTheDefaultMapping) {
  DataConfig c;
  c.task = TaskKind::countdown;
  const auto generated = generate_records(c, 3, 5, Split::train);
  const fs::path path = temp_path("countdown.jsonl");
  write_jsonl(path, generated);
  const auto loaded = read_dataset(path, c);
  ASSERT_EQ(loaded.size(), generated.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_EQ(record_to_json(loaded[i]), record_to_json(generated[i]));
    EXPECT_EQ(format_prompt(loaded[i], c), format_prompt(generated[i], c));
  }
  c.task = TaskKind::math;
  EXPECT_NE(error_of([&] { generate_records(c, 1, 1, Split::train); }).find("data.task math has no generator"),
            std::string::npos);
  fs::remove(path);
}

TEST(Dataset, ChatTemplatesComeFromTheModelDirectoryOrAFile) {
  const fs::path dir = temp_path("model");
  fs::create_directories(dir);
  DataConfig c = gsm8k_config();
  c.chat_template = "auto";
  EXPECT_NE(error_of([&] {
              PromptFormatter(c, dir);
            }).find("data.chat_template is auto but " + dir.string() + " has no chat template"),
            std::string::npos);
  nlohmann::json config = {{"bos_token", "<|begin_of_text|>"},
                           {"eos_token", "<|eot_id|>"},
                           {"chat_template", std::string("{{ bos_token }}") + kChatMl}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  c.system_prompt = "Reason step by step.";
  c.prompt_template = "Q: {prompt}";
  TaskRecord r;
  r.prompt = "2+2?";
  const PromptFormatter formatter(c, dir);
  EXPECT_FALSE(formatter.prepend_bos());
  EXPECT_EQ(formatter.render(r),
            "<|begin_of_text|><|im_start|>system\nReason step by step.<|im_end|>\n<|im_start|>user\nQ: 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(formatter.describe(), "chat template " + (dir / "tokenizer_config.json").string() + ":chat_template");

  c.chat_template = "none";
  const PromptFormatter plain(c, dir);
  EXPECT_TRUE(plain.prepend_bos());
  EXPECT_EQ(plain.render(r), "Q: 2+2?");  // no system prompt without a template

  c.chat_template = (dir / "missing.jinja").string();
  EXPECT_EQ(error_of([&] { PromptFormatter(c, dir); }),
            "data.chat_template: cannot read '" + c.chat_template + "' (auto, none or a .jinja file)");
  std::ofstream(dir / "bad.jinja") << "{% macro x() %}{% endmacro %}";
  c.chat_template = (dir / "bad.jinja").string();
  EXPECT_EQ(error_of([&] { PromptFormatter(c, dir); }),
            "chat template " + c.chat_template + ": line 1, column 4: unsupported statement 'macro'");
  fs::remove_all(dir);
}

TEST(Dataset, RewardVerifierIsNamedIndependentlyOfTheTask) {
  reward::RewardConfig rc;
  EXPECT_EQ(reward::verifier_name(rc, "countdown"), "countdown");
  rc.verifier = "math";
  EXPECT_EQ(reward::verifier_name(rc, "arithmetic"), "math");
  rc.verifier = "gsm8k";
  EXPECT_EQ(error_of([&] { reward::validate(rc); }),
            "reward.verifier: unknown verifier 'gsm8k' (known: math, arithmetic, countdown, code; empty: the one "
            "data.task names)");
}

TEST(Dataset, ParquetConversionScriptWritesRecordsThatLoad) {
  const fs::path dir = temp_path("parquet");
  fs::create_directories(dir);
  const std::string py = std::string(UNSTUCK_PYTHON);
  const std::string make =
      py +
      " -c \"import pyarrow as pa, pyarrow.parquet as pq; pq.write_table(pa.Table.from_pylist(["
      "{'prompt': [{'role': 'user', 'content': 'What is 6*7?'}], 'reward_model': {'ground_truth': '42'}},"
      "{'prompt': [{'role': 'user', 'content': 'Caf\\u00e9 2+2?'}], 'reward_model': {'ground_truth': '4'}}]), '" +
      (dir / "verl.parquet").string() + "')\"";
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  const std::string convert = py + " " + UNSTUCK_SOURCE_DIR + "/scripts/parquet_to_jsonl.py " +
                              (dir / "verl.parquet").string() + " --out " + (dir / "out/verl.jsonl").string();
  ASSERT_EQ(std::system(convert.c_str()), 0) << convert;
  DataConfig c;
  c.task = TaskKind::math;
  c.answer_key = "reward_model.ground_truth";
  const auto records = read_dataset(dir / "out/verl.jsonl", c);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].prompt, "What is 6*7?");
  EXPECT_EQ(records[1].prompt, "Caf\xc3\xa9 2+2?");
  EXPECT_EQ(records[1].answer, "4");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace unstuck::data
