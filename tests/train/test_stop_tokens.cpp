// Stop tokens of a policy directory: the tokenizer's EOS plus every eos_token_id that config.json
// and generation_config.json list (instruct models stop at several), honoured by eval, generate and
// GRPO rollouts, recorded in run.json; a bad id is an error that names the file.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/rollout/sampler.h"
#include "unstuck/train/evaluate.h"
#include "unstuck/train/grpo.h"
#include "unstuck/train/policy_dir.h"
#include "train/tiny_task.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

class StopTokens : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("unstuck_stop_tokens_" + std::to_string(::getpid())));
    base_ = new RunConfig(tiny_sft_base(*dir_));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete base_;
    delete dir_;
  }
  // A copy of the base policy whose generation_config.json is `gen` (no file when null).
  static fs::path policy_with(const std::string& name, const nlohmann::json& gen) {
    const fs::path out = *dir_ / name;
    fs::remove_all(out);
    fs::copy(base_->sft.output, out, fs::copy_options::recursive);
    fs::remove(out / "generation_config.json");
    if (!gen.is_null()) io::write_json_file(out / "generation_config.json", gen);
    return out;
  }
  static std::vector<std::vector<int32_t>> prompts(const Policy& p) {
    data::TaskRecord r;
    r.task = "arithmetic";
    r.prompt = "12+34=";
    const data::PromptFormatter f(p.config.data, base_->sft.output);
    return {prompt_ids(r, f, p.tokenizer)};
  }
  static inline fs::path* dir_ = nullptr;
  static inline RunConfig* base_ = nullptr;
};

TEST_F(StopTokens, GenerationConfigAddsStopsThatEndCompletions) {
  const Policy plain = load_policy(policy_with("plain", nullptr), {});
  const int32_t eos = plain.tokenizer.eos_id();
  ASSERT_GE(eos, 0);
  EXPECT_EQ(plain.stop_ids, std::vector<int32_t>{eos});

  rollout::GenerateOptions o;
  o.sampling.temperature = 0;
  o.sampling.max_new_tokens = 6;
  o.stop_ids = plain.stop_ids;
  const auto free = rollout::generate(*plain.model, prompts(plain), o, at::make_generator<at::CPUGeneratorImpl>(0));
  ASSERT_GE(free[0].tokens.size(), 2u);
  const int32_t first = free[0].tokens[0];
  ASSERT_NE(first, eos);

  // The model's first greedy token listed as a second stop (as Llama 3 lists <|eot_id|>).
  const Policy listed = load_policy(policy_with("listed", {{"eos_token_id", {eos, first}}}), {});
  EXPECT_EQ(listed.stop_ids, (std::vector<int32_t>{eos, first}));
  o.stop_ids = listed.stop_ids;
  const auto stopped =
      rollout::generate(*listed.model, prompts(listed), o, at::make_generator<at::CPUGeneratorImpl>(0));
  EXPECT_EQ(stopped[0].tokens, std::vector<int32_t>{first});
  EXPECT_EQ(stopped[0].finish, rollout::FinishReason::eos);
  EXPECT_EQ(completion_text(stopped[0].tokens, listed.tokenizer, listed.stop_ids), "");
  EXPECT_NE(completion_text(free[0].tokens, plain.tokenizer, plain.stop_ids), "");

  // A single id (not a list) and null are accepted too.
  EXPECT_EQ(load_policy(policy_with("single", {{"eos_token_id", first}}), {}).stop_ids,
            (std::vector<int32_t>{eos, first}));
  EXPECT_EQ(load_policy(policy_with("null", {{"eos_token_id", nullptr}}), {}).stop_ids, std::vector<int32_t>{eos});
}

TEST_F(StopTokens, BadIdsNameTheFile) {
  const auto message = [](const nlohmann::json& gen) {
    try {
      load_policy(policy_with("bad", gen), {});
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string outside = message({{"eos_token_id", {3, 1000000}}});
  EXPECT_NE(outside.find("generation_config.json"), std::string::npos) << outside;
  EXPECT_NE(outside.find("outside the model's vocabulary"), std::string::npos) << outside;
  const std::string text = message({{"eos_token_id", "</s>"}});
  EXPECT_NE(text.find("generation_config.json: key 'eos_token_id' must be an integer"), std::string::npos) << text;
  const std::string negative = message({{"eos_token_id", -5}});
  EXPECT_NE(negative.find("eos_token_id"), std::string::npos) << negative;
  const std::string not_object = message(nlohmann::json::array({1, 2}));
  EXPECT_NE(not_object.find("expected a JSON object"), std::string::npos) << not_object;
}

// A GRPO run from a base that lists a second stop records the set in run.json and stops its
// rollouts there: with the model's most common first token as a stop, completions get shorter.
TEST_F(StopTokens, GrpoRolloutsStopAtTheBasesStopTokens) {
  const Policy plain = load_policy(policy_with("grpo_plain", nullptr), {});
  policy_with("grpo_base", nullptr);
  rollout::GenerateOptions o;
  o.sampling.temperature = 0;
  o.sampling.max_new_tokens = 6;
  const int32_t first =
      rollout::generate(*plain.model, prompts(plain), o, at::make_generator<at::CPUGeneratorImpl>(0))[0].tokens[0];
  const int32_t eos = plain.tokenizer.eos_id();
  io::write_json_file(*dir_ / "grpo_base" / "generation_config.json", {{"eos_token_id", {eos, first}}});

  const auto first_step = [](const GrpoResult& r) {
    std::ifstream in(r.run_dir / "metrics.jsonl");
    std::string line;
    std::getline(in, line);
    return nlohmann::json::parse(line);
  };
  RunConfig c = tiny_grpo_config(*base_, "plain_stops");
  c.grpo.base_model = (*dir_ / "grpo_plain").string();
  c.grpo.steps = 1;
  const GrpoResult plain_run = run_grpo(c);
  c.run.name = "two_stops";
  c.grpo.base_model = (*dir_ / "grpo_base").string();
  const GrpoResult r = run_grpo(c);
  EXPECT_EQ(io::read_json_file(plain_run.run_dir / "run.json").at("stop_token_ids"), nlohmann::json({eos}));
  EXPECT_EQ(io::read_json_file(r.run_dir / "run.json").at("stop_token_ids"), nlohmann::json({eos, first}));
  const double plain_len = first_step(plain_run).at("response_len_mean").get<double>();
  const double stopped_len = first_step(r).at("response_len_mean").get<double>();
  EXPECT_LT(stopped_len, 0.6 * plain_len)
      << "plain " << plain_len << ", with the model's first token as a stop " << stopped_len;
}

}  // namespace
}  // namespace unstuck::train
