// The rule for silence (config/unused_keys.h): every key of the config tree is either read by
// every train and sft run or named by a rule; for each key a rule names, a configuration that
// does not read it, with the key set, is refused with the key's name and why.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/config/run_config.h"
#include "unstuck/config/unused_keys.h"

namespace unstuck {
namespace {

// Keys under a rule's prefix that every configuration of both commands reads.
const std::set<std::string> kReadUnderARule = {"model.activation_checkpointing", "lora.rank", "rollout.max_new_tokens"};

// Keys under no rule: read by every train and sft run (a new key lands here or in a rule).
const std::vector<std::string> kAlwaysRead = {
    "run.",
    "precision.mode",
    "precision.compute",
    "precision.threads",
    "precision.analog_mantissa_bits",
    "precision.offload",
    "optim.",
    "tokenizer.path",
    "data.task",
    "data.train_path",
    "data.test_path",
    "data.prompt_key",
    "data.answer_key",
    "data.answer_extraction",
    "data.chat_template",
    "data.system_prompt",
    "data.prompt_template",
    "data.completion_template",
    "reward.terms",
    "dist.",
};

struct Recipe {
  std::string command;
  std::function<void(RunConfig&)> make;  // a configuration that does not read the rule's keys
};

// One configuration per rule, in which the rule's keys are not read.
Recipe recipe_for(const std::string& prefix) {
  const std::map<std::string, Recipe> recipes = {
      {"data.arithmetic.", {"train", [](RunConfig&) {}}},
      {"data.countdown.", {"sft", [](RunConfig&) {}}},
      {"data.test_fraction", {"train", [](RunConfig&) {}}},
      {"sft.", {"train", [](RunConfig&) {}}},
      {"grpo.", {"sft", [](RunConfig&) {}}},
      {"rollout.", {"sft", [](RunConfig&) {}}},
      {"model.", {"train", [](RunConfig&) {}}},
      {"lora.", {"train", [](RunConfig& c) { c.lora.rank = 0; }}},
      {"tools.", {"sft", [](RunConfig&) {}}},
      {"precision.loss_scale.", {"train", [](RunConfig& c) { c.precision.mode = precision::PrecisionMode::bf16; }}},
      {"reward.verifier", {"train", [](RunConfig& c) { c.reward.function.path = "reward.py"; }}},
      {"reward.function.",
       {"train",
        [](RunConfig& c) {
          c.reward.terms.resize(1);
          c.reward.terms[0].verifier = "math";
        }}},
      {"reward.command", {"train", [](RunConfig& c) { c.reward.function.path = "reward.py"; }}},
      {"reward.code.", {"sft", [](RunConfig& c) { c.data.task = data::TaskKind::math; }}},
      {"reward.math.", {"train", [](RunConfig& c) { c.data.task = data::TaskKind::countdown; }}},
      {"reward.max_expression_depth", {"train", [](RunConfig& c) { c.data.task = data::TaskKind::math; }}},
      {"reward.answer_formats", {"train", [](RunConfig& c) { c.data.task = data::TaskKind::code; }}},
      {"reward.max_answer_chars", {"train", [](RunConfig& c) { c.reward.command = {"score"}; }}},
      {"reward.format_reward", {"sft", [](RunConfig& c) { c.reward.verifier = "code"; }}},
  };
  const auto it = recipes.find(prefix);
  if (it == recipes.end()) ADD_FAILURE() << "no test recipe for the rule on '" << prefix << "'";
  return it == recipes.end() ? Recipe{"train", [](RunConfig&) {}} : it->second;
}

bool under(const std::string& key, const std::string& prefix) {
  return prefix.back() == '.' ? key.rfind(prefix, 0) == 0 : key == prefix;
}

// Sets the leaf to a value other than its current one.
void change(config::Field& f) {
  using config::Kind;
  const config::Value v = f.get ? f.get() : config::Value{};
  switch (f.kind) {
    case Kind::boolean:
      f.set(!std::get<bool>(v));
      break;
    case Kind::integer:
      f.set(std::get<int64_t>(v) + 1);
      break;
    case Kind::real:
      f.set(std::get<double>(v) + 0.5);
      break;
    case Kind::string:
      f.set(std::get<std::string>(v) + "x");
      break;
    case Kind::enumeration:
      f.set(std::string(f.choices[0] == std::get<std::string>(v) ? f.choices[1] : f.choices[0]));
      break;
    case Kind::int_list:
      f.set(std::vector<int64_t>{7});
      break;
    case Kind::real_list:
      f.set(std::vector<double>{7.5});
      break;
    case Kind::string_list: {
      auto list = std::get<std::vector<std::string>>(v);
      list.push_back("x");
      f.set(list);
      break;
    }
    case Kind::mapping:
      f.set(std::string(R"({"a":1})"));
      break;
    case Kind::section_list:
      f.resize(f.size() + 1);
      break;
    case Kind::section:
      break;
  }
}

// The leaf `key` of a tree bound to `config`, or nullptr.
config::Field* find(config::Field& root, const std::string& key) {
  config::Field* f = &root;
  size_t start = 0;
  while (start <= key.size()) {
    const size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    config::Field* next = nullptr;
    for (config::Field& c : f->children) {
      if (c.name == part) next = &c;
    }
    if (next == nullptr) return nullptr;
    f = next;
    if (dot == std::string::npos) return f;
    start = dot + 1;
  }
  return nullptr;
}

void collect(const config::Field& f, const std::string& path, std::vector<std::string>& out) {
  if (f.kind != config::Kind::section) {
    out.push_back(path);
    return;
  }
  for (const config::Field& c : f.children) collect(c, path.empty() ? c.name : path + "." + c.name, out);
}

std::vector<std::string> all_keys() {
  RunConfig c;
  std::vector<std::string> keys;
  collect(config::bind(c), "", keys);
  return keys;
}

TEST(UnusedKeys, EveryKeyIsReadEverywhereOrNamedByARuleThatRefusesItWhereUnread) {
  const std::vector<std::string> prefixes = unused_key_rule_prefixes();
  int refused = 0;
  for (const std::string& key : all_keys()) {
    const std::string* rule = nullptr;
    for (const std::string& p : prefixes) {
      if (under(key, p)) {
        rule = &p;
        break;
      }
    }
    bool always = false;
    for (const std::string& p : kAlwaysRead) always = always || under(key, p);
    if (rule == nullptr) {
      EXPECT_TRUE(always) << key << ": no rule says when it is unread, and it is not listed as always read";
      continue;
    }
    EXPECT_FALSE(always) << key << " is listed as always read but a rule (" << *rule << ") names it";
    if (kReadUnderARule.count(key) > 0) continue;
    const Recipe recipe = recipe_for(*rule);
    RunConfig c;
    recipe.make(c);
    EXPECT_TRUE(unused_keys(c, recipe.command).empty()) << "the recipe of " << *rule << " alone is refused";
    config::Field root = config::bind(c);
    config::Field* leaf = find(root, key);
    ASSERT_NE(leaf, nullptr) << key;
    change(*leaf);
    const std::vector<UnusedKey> unused = unused_keys(c, recipe.command);
    bool named = false;
    for (const UnusedKey& u : unused) named = named || (u.key == key && !u.why.empty());
    EXPECT_TRUE(named) << key << " set in a " << recipe.command << " configuration that does not read it (" << *rule
                       << ") is not refused";
    refused += named;
  }
  EXPECT_GT(refused, 60);  // the rules name most of the tree's optional keys
}

TEST(UnusedKeys, WhatIsReadIsNeverRefused) {
  RunConfig c;
  c.lora.rank = 8;
  c.lora.dropout = 0.05;
  c.lora.init = model::LoraInit::pissa;
  c.precision.mode = precision::PrecisionMode::fp16;
  c.precision.loss_scale.initial_scale = 1024;
  c.data.task = data::TaskKind::math;
  c.reward.math.numeric_tolerance = 1e-6;
  c.reward.answer_formats = {"boxed", "last_expression"};
  c.grpo.steps = 7;
  c.model.activation_checkpointing = true;
  c.rollout.temperature = 0.7;
  EXPECT_TRUE(unused_keys(c, "train").empty());
  RunConfig s;
  s.sft.steps = 10;
  s.model.dim = 64;
  s.model.rope_scaling.type = model::RopeType::llama3;
  s.model.rope_scaling.low_freq_factor = 2.0;
  s.rollout.max_new_tokens = 12;
  EXPECT_TRUE(unused_keys(s, "sft").empty());
  // A reward command reads the function's worker options, not its module's.
  RunConfig cmd;
  cmd.reward.command = {"python3", "score.py"};
  cmd.reward.function.timeout_s = 5;
  EXPECT_TRUE(unused_keys(cmd, "train").empty());
  cmd.reward.function.name = "score";
  ASSERT_EQ(unused_keys(cmd, "train").size(), 1u);
  EXPECT_EQ(unused_keys(cmd, "train")[0].key, "reward.function.name");
}

// The schedule's keys (grpo.* and sft.* alike): warmup_steps is read by the warmup and cosine
// schedules, min_lr_ratio by cosine only.
TEST(UnusedKeys, TheScheduleKeysAreReadByTheSchedulesThatUseThem) {
  const auto refused = [](const RunConfig& c, const std::string& command) {
    std::string keys;
    for (const UnusedKey& u : unused_keys(c, command)) keys += u.key + " (" + u.why + ") ";
    return keys;
  };
  RunConfig g;
  g.grpo.lr.warmup_steps = 10;
  g.grpo.lr.min_lr_ratio = 0.2;
  EXPECT_EQ(refused(g, "train"),
            "grpo.warmup_steps (the warm-up of the warmup and cosine schedules; grpo.lr_schedule is constant) "
            "grpo.min_lr_ratio (the floor of the cosine schedule; grpo.lr_schedule is constant) ");
  g.grpo.lr.schedule = config::LrSchedule::warmup;
  EXPECT_EQ(refused(g, "train"), "grpo.min_lr_ratio (the floor of the cosine schedule; grpo.lr_schedule is warmup) ");
  g.grpo.lr.schedule = config::LrSchedule::cosine;
  EXPECT_EQ(refused(g, "train"), "");
  RunConfig s;  // sft: a 50-step warm-up, then cosine
  s.sft.lr.min_lr_ratio = 0.2;
  EXPECT_EQ(refused(s, "sft"), "");
  s.sft.lr.schedule = config::LrSchedule::constant;
  s.sft.lr.warmup_steps = 10;
  EXPECT_EQ(refused(s, "sft"),
            "sft.warmup_steps (the warm-up of the warmup and cosine schedules; sft.lr_schedule is constant) "
            "sft.min_lr_ratio (the floor of the cosine schedule; sft.lr_schedule is constant) ");
}

// train reads the model's shape from the base's config.json: the defaults and that shape (a resumed
// run's saved config) are not "set"; another value is.
TEST(UnusedKeys, TrainComparesTheModelKeysWithTheBaseModel) {
  model::ModelConfig loaded;
  loaded.dim = 32;
  loaded.n_layers = 2;
  RunConfig defaults;
  EXPECT_TRUE(unused_keys(defaults, "train", &loaded).empty());
  RunConfig saved;
  saved.model = loaded;
  EXPECT_TRUE(unused_keys(saved, "train", &loaded).empty());
  saved.model.dim = 64;
  const auto unused = unused_keys(saved, "train", &loaded);
  ASSERT_EQ(unused.size(), 1u);
  EXPECT_EQ(unused[0].key, "model.dim");
  EXPECT_NE(unused[0].why.find("grpo.base_model's config.json"), std::string::npos) << unused[0].why;
}

// The issue's cases, in the words a user sees.
TEST(UnusedKeys, TheRefusalNamesEachKeyAndWhy) {
  RunConfig c;
  c.lora.init = model::LoraInit::pissa;
  c.lora.dropout = 0.05;
  c.model.rope_scaling.beta_fast = 16;  // sft: type default reads no rope_scaling key
  std::string message;
  try {
    refuse_unused_keys(c, "sft");
  } catch (const UserError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("3 key(s) set that this `unstuck sft` run does not read"), std::string::npos) << message;
  EXPECT_NE(message.find("\n  lora.dropout: lora.rank is 0 (full-parameter training)"), std::string::npos) << message;
  EXPECT_NE(message.find("\n  lora.init: lora.rank is 0"), std::string::npos) << message;
  EXPECT_NE(message.find("\n  model.rope_scaling.beta_fast: model.rope_scaling.type is default"), std::string::npos)
      << message;
  EXPECT_TRUE(unused_keys(RunConfig{}, "train").empty());
  EXPECT_TRUE(unused_keys(RunConfig{}, "sft").empty());
}

}  // namespace
}  // namespace unstuck
