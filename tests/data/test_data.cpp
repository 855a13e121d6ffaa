// Tests of the data component: the JSONL record format and its errors, the prompt/completion
// templates, and the generators (determinism, pinned output, disjoint and duplicate-free splits,
// correct arithmetic answers, every countdown instance solvable), including the shipped datasets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/data/data_config.h"
#include "unstuck/data/generators.h"
#include "unstuck/data/record.h"
#include "unstuck/reward/verifier.h"
#include "common/error_of.h"

namespace unstuck::data {
namespace {

namespace fs = std::filesystem;

fs::path temp_file(const std::string& name, const std::string& text) {
  const fs::path path = fs::temp_directory_path() / ("unstuck_test_data_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path;
}

using unstuck::testing::error_of;

TaskRecord countdown_record() {
  TaskRecord r;
  r.task = "countdown";
  r.prompt = "Use 3 5 7 to make 22:";
  r.answer = "3*5+7";
  r.fields = {{"numbers", {3, 5, 7}}, {"target", 22}};
  return r;
}

// ---- records and JSONL -----------------------------------------------------------------------

TEST(Record, JsonRoundTripKeepsFieldsAndPutsRequiredKeysFirst) {
  const TaskRecord r = countdown_record();
  const std::string text = record_to_json(r).dump();
  EXPECT_EQ(text, R"({"task":"countdown","prompt":"Use 3 5 7 to make 22:","answer":"3*5+7",)"
                  R"("numbers":[3,5,7],"target":22})");
  const TaskRecord back = parse_record_line(text, "x:1");
  EXPECT_EQ(back.task, r.task);
  EXPECT_EQ(back.prompt, r.prompt);
  EXPECT_EQ(back.answer, r.answer);
  EXPECT_EQ(back.fields, r.fields);
  // nlohmann's hooks.
  const nlohmann::json j = r;
  EXPECT_EQ(j.get<TaskRecord>().fields, r.fields);
}

TEST(Record, NumericAnswerIsKeptAsText) {
  const TaskRecord r = parse_record_line(R"({"task":"math","prompt":"p","answer":42})", "x:1");
  EXPECT_EQ(r.answer, "42");
  EXPECT_TRUE(r.fields.empty());
}

TEST(Record, BadLinesNameFileLineAndProblem) {
  EXPECT_EQ(error_of([] { parse_record_line(R"({"task":"math","answer":"1"})", "f.jsonl:3"); }),
            "f.jsonl:3: missing key 'prompt'");
  EXPECT_EQ(error_of([] { parse_record_line(R"({"task":7,"prompt":"p","answer":"1"})", "f:1"); }),
            "f:1: 'task' must be a string, got number");
  EXPECT_EQ(error_of([] { parse_record_line(R"({"task":"m","prompt":"p","answer":[1]})", "f:1"); }),
            "f:1: 'answer' must be a string or a number, got array");
  EXPECT_EQ(error_of([] { parse_record_line("[1, 2]", "f:9"); }), "f:9: expected a JSON object, got array");
  const std::string bad_json = error_of([] { parse_record_line(R"({"task": "m", )", "f:4"); });
  EXPECT_EQ(bad_json.rfind("f:4: invalid JSON: ", 0), 0u) << bad_json;
}

TEST(Record, ReadJsonlSkipsBlankLinesAndReportsTheLineNumber) {
  const std::string good = R"({"task":"math","prompt":"1+1=","answer":"2"})";
  const fs::path ok = temp_file("ok.jsonl", good + "\n\n" + good + "\n");
  EXPECT_EQ(read_jsonl(ok).size(), 2u);
  const fs::path bad = temp_file("bad.jsonl", good + "\n\n" + good + "\n{oops\n");
  const std::string message = error_of([&] { read_jsonl(bad); });
  EXPECT_EQ(message.rfind(bad.string() + ":4: invalid JSON", 0), 0u) << message;
  EXPECT_EQ(error_of([] { read_jsonl("/nonexistent/x.jsonl"); }),
            "cannot open '/nonexistent/x.jsonl' (a JSONL file of task records)");
  fs::remove(ok);
  fs::remove(bad);
}

TEST(Record, WriteThenReadGivesTheSameRecords) {
  const fs::path path =
      fs::temp_directory_path() / ("unstuck_test_data_" + std::to_string(::getpid())) / "sub" / "r.jsonl";
  const std::vector<TaskRecord> records = {countdown_record(), countdown_record()};
  write_jsonl(path, records);
  const auto back = read_jsonl(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].fields, records[1].fields);
  fs::remove_all(path.parent_path().parent_path());
}

// ---- templates and config ----------------------------------------------------------------------

TEST(Templates, DefaultsGiveThePromptAndAnAnswerTaggedCompletion) {
  const DataConfig config;
  TaskRecord a;
  a.task = "arithmetic";
  a.prompt = "12+35=";
  a.answer = "47";
  EXPECT_EQ(format_prompt(a, config), "12+35=");
  EXPECT_EQ(format_completion(a, config), "<answer>47</answer>");
  EXPECT_EQ(format_prompt(countdown_record(), config), "Use 3 5 7 to make 22:");
  EXPECT_EQ(format_completion(countdown_record(), config), "<answer>3*5+7</answer>");
}

TEST(Templates, FieldsListsAndLiteralBraces) {
  const TaskRecord r = countdown_record();
  EXPECT_EQ(fill_template("[{numbers}] -> {target} ({task}) {{x}}", r), "[3 5 7] -> 22 (countdown) {x}");
  EXPECT_EQ(error_of([&] { fill_template("{targte}", r, "data.prompt_template"); }),
            "data.prompt_template: unknown placeholder {targte} (record has: prompt, answer, task, "
            "numbers, target)");
  EXPECT_EQ(error_of([&] { fill_template("a {prompt", r, "t"); }),
            "t: unclosed '{' at position 2 (write '{{' for a literal brace)");
  EXPECT_EQ(error_of([&] { fill_template("a } b", r, "t"); }),
            "t: unmatched '}' at position 2 (write '}}' for a literal brace)");
}

TEST(DataConfigCheck, ErrorsNameTheKey) {
  DataConfig c;
  validate(c);
  c.arithmetic.ops = {"add", "sub"};
  EXPECT_EQ(error_of([&] { validate(c); }), "data.arithmetic.ops: unknown op 'sub' (known: add, mul)");
  c = DataConfig{};
  c.arithmetic.min_digits = 4;
  EXPECT_EQ(error_of([&] { validate(c); }), "data.arithmetic.min_digits (4) must be <= data.arithmetic.max_digits (3)");
  c = DataConfig{};
  c.countdown.count = 9;
  EXPECT_EQ(error_of([&] { validate(c); }), "data.countdown.count must be in [2, 6], got 9");
  c = DataConfig{};
  c.test_fraction = 1.0;
  EXPECT_EQ(error_of([&] { validate(c); }), "data.test_fraction must be in [0, 1), got 1.0");
}

TEST(DataConfigCheck, DefaultPathsFollowTheTask) {
  DataConfig c;
  EXPECT_EQ(train_file(c), fs::path("data/arithmetic/train.jsonl"));
  c.task = TaskKind::countdown;
  EXPECT_EQ(test_file(c), fs::path("data/countdown/test.jsonl"));
  c.test_path = "x.jsonl";
  EXPECT_EQ(test_file(c), fs::path("x.jsonl"));
}

// ---- generators --------------------------------------------------------------------------------

std::vector<std::string> prompts(const std::vector<TaskRecord>& records) {
  std::vector<std::string> out;
  for (const auto& r : records) out.push_back(r.prompt + r.answer);
  return out;
}

std::set<std::string> keys(const std::vector<TaskRecord>& records) {
  std::set<std::string> out;
  for (const auto& r : records) out.insert(canonical_key(r));
  return out;
}

TEST(Generators, SameArgumentsSameRecordsOtherSeedOtherRecords) {
  const DataConfig c;
  EXPECT_EQ(prompts(generate_arithmetic(c.arithmetic, 0.1, 7, 300, Split::train)),
            prompts(generate_arithmetic(c.arithmetic, 0.1, 7, 300, Split::train)));
  EXPECT_NE(prompts(generate_arithmetic(c.arithmetic, 0.1, 7, 300, Split::train)),
            prompts(generate_arithmetic(c.arithmetic, 0.1, 8, 300, Split::train)));
  EXPECT_EQ(prompts(generate_countdown(c.countdown, 0.1, 7, 300, Split::test)),
            prompts(generate_countdown(c.countdown, 0.1, 7, 300, Split::test)));
  EXPECT_NE(prompts(generate_countdown(c.countdown, 0.1, 7, 300, Split::test)),
            prompts(generate_countdown(c.countdown, 0.1, 8, 300, Split::test)));
  // A prefix property: asking for more records extends the list.
  const auto few = prompts(generate_countdown(c.countdown, 0.1, 7, 50, Split::train));
  auto many = prompts(generate_countdown(c.countdown, 0.1, 7, 100, Split::train));
  many.resize(50);
  EXPECT_EQ(few, many);
}

// Pinned output: the generators use their own RNG and hash, so these hold on every platform and
// standard library. A change here changes every dataset; regenerate data/ and say so.
TEST(Generators, PinnedFirstRecords) {
  const DataConfig c;
  const auto a = generate_arithmetic(c.arithmetic, 0.1, 1, 3, Split::train);
  EXPECT_EQ(prompts(a), (std::vector<std::string>{"82+7=89", "249+573=822", "32+37=69"}));
  const auto d = generate_countdown(c.countdown, 0.1, 1, 2, Split::train);
  EXPECT_EQ(record_to_json(d[0]).dump(),
            R"({"task":"countdown","prompt":"Use 24 26 22 to make 72:","answer":"22+24+26",)"
            R"("numbers":[24,26,22],"target":72})");
  EXPECT_EQ(split_of("12+35", 0.1), Split::train);
}

TEST(Generators, SplitsAreDisjointForAnySeedsAndDuplicateFree) {
  const DataConfig c;
  for (const TaskKind task : {TaskKind::arithmetic, TaskKind::countdown}) {
    DataConfig config = c;
    config.task = task;
    const auto train = generate_records(config, 1, 3000, Split::train);
    const auto test = generate_records(config, 2, 600, Split::test);
    const auto train_keys = keys(train);
    const auto test_keys = keys(test);
    EXPECT_EQ(train_keys.size(), train.size()) << "duplicates in train";
    EXPECT_EQ(test_keys.size(), test.size()) << "duplicates in test";
    std::vector<std::string> both;
    std::set_intersection(train_keys.begin(), train_keys.end(), test_keys.begin(), test_keys.end(),
                          std::back_inserter(both));
    EXPECT_TRUE(both.empty()) << both.size() << " problems in both splits, e.g. " << both.front();
    for (const auto& r : train) EXPECT_EQ(split_of(canonical_key(r), 0.1), Split::train);
  }
}

TEST(Generators, CommutedArithmeticProblemsShareASplit) {
  EXPECT_EQ(canonical_key(parse_record_line(
                R"({"task":"arithmetic","prompt":"35+12=","answer":"47","a":35,"b":12,"op":"add"})", "x")),
            "12+35");
}

TEST(Generators, SplitShareFollowsTestFraction) {
  int test = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) test += split_of("key" + std::to_string(i), 0.25) == Split::test;
  // Binomial(20000, 0.25): sd ~61, so +-400 is over 6 sd.
  EXPECT_NEAR(test, n / 4, 400);
}

TEST(Generators, ArithmeticRespectsOptionsAndAnswersAreRight) {
  ArithmeticOptions o;
  o.min_digits = 2;
  o.max_digits = 3;
  o.ops = {"mul"};
  for (const auto& r : generate_arithmetic(o, 0.1, 3, 500, Split::train)) {
    const int64_t a = r.fields["a"].get<int64_t>();
    const int64_t b = r.fields["b"].get<int64_t>();
    EXPECT_TRUE(a >= 10 && a <= 999 && b >= 10 && b <= 999) << r.prompt;
    EXPECT_EQ(r.prompt, std::to_string(a) + "*" + std::to_string(b) + "=");
    EXPECT_EQ(r.answer, std::to_string(a * b));
  }
}

TEST(Generators, TooSmallProblemSpaceIsAnErrorNamingTheOptions) {
  ArithmeticOptions o;
  o.min_digits = 1;
  o.max_digits = 1;
  o.ops = {"add"};  // 55 unordered pairs
  const std::string message = error_of([&] { generate_arithmetic(o, 0.1, 1, 100, Split::train); });
  EXPECT_NE(message.find("distinct arithmetic problems for the train split, 100 requested; widen "
                         "data.arithmetic.min_digits..max_digits"),
            std::string::npos)
      << message;
}

// Independent exhaustive check: can `values` (all of them, each once) make `target`?
using Fraction = std::pair<int64_t, int64_t>;  // num, den > 0

Fraction reduced(int64_t n, int64_t d) {
  if (d < 0) {
    n = -n;
    d = -d;
  }
  const int64_t g = std::gcd(n < 0 ? -n : n, d);
  return {n / g, d / g};
}

bool solvable(std::vector<Fraction> values, int64_t target) {
  if (values.size() == 1) return values[0] == Fraction{target, 1};
  for (size_t i = 0; i < values.size(); ++i) {
    for (size_t j = 0; j < values.size(); ++j) {
      if (i == j) continue;
      std::vector<Fraction> rest;
      for (size_t k = 0; k < values.size(); ++k) {
        if (k != i && k != j) rest.push_back(values[k]);
      }
      const auto [an, ad] = values[i];
      const auto [bn, bd] = values[j];
      std::vector<Fraction> results = {reduced(an * bd + bn * ad, ad * bd), reduced(an * bd - bn * ad, ad * bd),
                                       reduced(an * bn, ad * bd)};
      if (bn != 0) results.push_back(reduced(an * bd, ad * bn));
      for (const Fraction& r : results) {
        rest.push_back(r);
        if (solvable(rest, target)) return true;
        rest.pop_back();
      }
    }
  }
  return false;
}

void expect_countdown_instance_ok(const TaskRecord& r, const CountdownOptions& o, const reward::Verifier& verifier,
                                  bool brute_force) {
  const auto numbers = r.fields.at("numbers").get<std::vector<int64_t>>();
  const int64_t target = r.fields.at("target").get<int64_t>();
  ASSERT_EQ(static_cast<int>(numbers.size()), o.count) << r.prompt;
  for (const int64_t x : numbers) EXPECT_TRUE(x >= o.min_number && x <= o.max_number) << r.prompt;
  EXPECT_TRUE(target >= o.min_target && target <= o.max_target) << r.prompt;
  // The kept solution is a correct answer, and the completion template carries it.
  const auto result = verifier.score(format_completion(r, DataConfig{}), r);
  EXPECT_EQ(result.status, reward::RewardStatus::correct) << r.prompt << " " << r.answer;
  if (brute_force) {
    std::vector<Fraction> values;
    for (const int64_t x : numbers) values.push_back({x, 1});
    EXPECT_TRUE(solvable(values, target)) << r.prompt;
  }
}

TEST(Generators, EveryCountdownInstanceIsSolvable) {
  const auto verifier = reward::make_verifier("countdown", reward::RewardConfig{});
  for (const int count : {2, 3, 4}) {
    CountdownOptions o;
    o.count = count;
    o.max_number = count == 2 ? 30 : 12;  // two numbers make few distinct problems
    for (const Split split : {Split::train, Split::test}) {
      for (const auto& r : generate_countdown(o, 0.2, 5, split == Split::train ? 150 : 40, split)) {
        expect_countdown_instance_ok(r, o, *verifier, true);
      }
    }
  }
}

// The datasets shipped in data/ (docs/TASKS.md gives the commands that made them).
TEST(ShippedData, ArithmeticAndCountdownFilesAreValidAndDisjoint) {
  const fs::path root = fs::path(UNSTUCK_SOURCE_DIR) / "data";
  const auto verifier = reward::make_verifier("countdown", reward::RewardConfig{});
  const auto math = reward::make_verifier("arithmetic", reward::RewardConfig{});
  for (const std::string task : {"arithmetic", "countdown"}) {
    const auto train = read_jsonl(root / task / "train.jsonl");
    const auto test = read_jsonl(root / task / "test.jsonl");
    EXPECT_EQ(train.size(), 18000u) << task;
    EXPECT_EQ(test.size(), 2000u) << task;
    const auto train_keys = keys(train);
    const auto test_keys = keys(test);
    EXPECT_EQ(train_keys.size(), train.size());
    for (const auto& k : test_keys) ASSERT_EQ(train_keys.count(k), 0u) << task << " " << k;
    for (const auto* split : {&train, &test}) {
      for (const auto& r : *split) {
        EXPECT_EQ(r.task, task);
        if (task == "countdown") {
          expect_countdown_instance_ok(r, CountdownOptions{}, *verifier, false);
        } else {
          EXPECT_EQ(math->score(format_completion(r, DataConfig{}), r).reward, 1.0) << r.prompt;
        }
      }
    }
  }
}

}  // namespace
}  // namespace unstuck::data
