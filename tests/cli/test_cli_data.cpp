// End-to-end tests of `unstuck data generate`, `unstuck reward score` and the benchmarks that take
// user input (`bench reward --config`, `bench sample`): deterministic output,
// the shipped datasets reproduced by their documented commands, a scoring round trip, and the
// exit code and message of bad input. Runs the built binary (UNSTUCK_BINARY) with std::system.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "unstuck/reward/sandbox.h"

namespace {

namespace fs = std::filesystem;

struct CliResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};

class CliData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("unstuck_cli_data_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CliResult run(const std::string& args) const {
    const fs::path log = dir_ / "log.txt";
    const std::string command = std::string("'") + UNSTUCK_BINARY + "' " + args + " > '" + log.string() + "' 2>&1";
    const int status = std::system(command.c_str());
    CliResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read(log);
    return r;
  }

  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  static std::vector<std::string> lines(const fs::path& path) {
    std::ifstream in(path);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

  fs::path dir_;
};

TEST_F(CliData, GenerateIsDeterministicAndWritesBothSplits) {
  for (const std::string sub : {"a", "b"}) {
    const CliResult r = run("data generate --task countdown --n 200 --seed 3 --out '" + (dir_ / sub).string() + "'");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("wrote 180 train records"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("wrote 20 test records"), std::string::npos) << r.out;
  }
  EXPECT_EQ(lines(dir_ / "a" / "train.jsonl").size(), 180u);
  EXPECT_EQ(read(dir_ / "a" / "train.jsonl"), read(dir_ / "b" / "train.jsonl"));
  EXPECT_EQ(read(dir_ / "a" / "test.jsonl"), read(dir_ / "b" / "test.jsonl"));
}

// docs/TASKS.md: the shipped data/ is exactly what these commands write.
TEST_F(CliData, ShippedDatasetsAreReproducedByTheirCommands) {
  for (const std::string task : {"arithmetic", "countdown"}) {
    const CliResult r =
        run("data generate --task " + task + " --n 20000 --seed 1 --out '" + (dir_ / task).string() + "'");
    ASSERT_EQ(r.code, 0) << r.out;
    const fs::path shipped = fs::path(UNSTUCK_SOURCE_DIR) / "data" / task;
    for (const std::string file : {"train.jsonl", "test.jsonl"}) {
      EXPECT_TRUE(read(dir_ / task / file) == read(shipped / file))
          << (shipped / file) << " differs from what its documented command writes";
    }
  }
}

TEST_F(CliData, BadGeneratorOptionsExitWithCode2AndNameTheKey) {
  const CliResult r = run("data generate --task arithmetic --n 10 --min-digits 5 --out '" + dir_.string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("error: data.arithmetic.min_digits (5) must be <= "
                       "data.arithmetic.max_digits (3)"),
            std::string::npos)
      << r.out;
}

TEST_F(CliData, ScoreRoundTrip) {
  ASSERT_EQ(run("data generate --task arithmetic --n 30 --seed 2 --out '" + dir_.string() + "'").code, 0);
  // Completions: correct, wrong but well formed, and missing, in turn; plus one countdown line.
  std::ofstream completions(dir_ / "completions.jsonl");
  int i = 0;
  for (const std::string& line : lines(dir_ / "train.jsonl")) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
    const std::string answer = j["answer"].get<std::string>();
    const std::string variants[] = {"<answer>" + answer + "</answer>", "<answer>-1</answer>", "I don't know"};
    j["completion"] = variants[i++ % 3];
    completions << j.dump() << "\n";
  }
  completions << R"({"task":"countdown","prompt":"Use 3 5 7 to make 22:","answer":"3*5+7",)"
              << R"("numbers":[3,5,7],"target":22,"completion":"<answer>7+3*5</answer>"})"
              << "\n";
  completions.close();
  const CliResult r = run("reward score --input '" + (dir_ / "completions.jsonl").string() + "' --output '" +
                          (dir_ / "scored.jsonl").string() + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("scored 28 completions"), std::string::npos) << r.out;
  const auto scored = lines(dir_ / "scored.jsonl");
  ASSERT_EQ(scored.size(), 28u);
  int correct = 0;
  for (size_t k = 0; k < scored.size(); ++k) {
    const auto j = nlohmann::ordered_json::parse(scored[k]);
    EXPECT_EQ(j.begin().key(), "task");  // the input's keys, in order, then reward and status
    const double reward = j["reward"].get<double>();
    const std::string status = j["status"].get<std::string>();
    if (k == 27 || k % 3 == 0) {
      EXPECT_EQ(status, "correct") << scored[k];
      EXPECT_EQ(reward, 1.0);
      ++correct;
    } else if (k % 3 == 1) {
      EXPECT_EQ(status, "wrong") << scored[k];
      EXPECT_EQ(reward, 0.1);
    } else {
      EXPECT_EQ(status, "no_answer") << scored[k];
      EXPECT_EQ(reward, 0.0);
    }
  }
  EXPECT_EQ(correct, 10);
  EXPECT_NE(r.out.find("correct"), std::string::npos);
}

// Free text through the command line: --answer-formats takes last_expression, an unknown format
// is named with the known ones, and log lines (the code sandbox's) stay off the scored output.
TEST_F(CliData, ScoreReadsFreeTextWithLastExpression) {
  std::ofstream input(dir_ / "free.jsonl");
  input << R"({"task":"math","prompt":"p","answer":"22","completion":"Adding 15 and 7 gives 22."})"
        << "\n"
        << R"({"task":"math","prompt":"p","answer":"22","completion":"A guess is 22, but it is 23."})"
        << "\n"
        << R"({"task":"code","prompt":"p","answer":"","test_list":["assert f() == 1"],)"
        << R"("completion":"```python\ndef f():\n    return 1\n```"})"
        << "\n";
  input.close();
  const std::string args = "reward score --input '" + (dir_ / "free.jsonl").string() + "' --output '" +
                           (dir_ / "scored.jsonl").string() + "' --answer-formats ";
  const CliResult r = run(args + "answer_tag,boxed,hashes,last_expression");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto scored = lines(dir_ / "scored.jsonl");
  ASSERT_EQ(scored.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(scored[0])["status"], "correct") << scored[0];
  EXPECT_EQ(nlohmann::json::parse(scored[1])["status"], "wrong") << scored[1];
  EXPECT_EQ(nlohmann::json::parse(scored[2])["status"], "correct") << scored[2];
  const CliResult plain = run(args + "answer_tag,boxed,hashes");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(nlohmann::json::parse(lines(dir_ / "scored.jsonl")[0])["status"], "no_answer");
  const CliResult bad = run(args + "boxed,last_number");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("unknown answer format 'last_number' (known: answer_tag, boxed, hashes, "
                         "last_expression)"),
            std::string::npos)
      << bad.out;
  // stdout alone: the summary, never a log line (those go to stderr).
  const fs::path out = dir_ / "stdout.txt";
  const std::string command = std::string("'") + UNSTUCK_BINARY + "' " + args +
                              "answer_tag,boxed,hashes,last_expression > '" + out.string() + "' 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0);
  const std::string stdout_text = read(out);
  EXPECT_NE(stdout_text.find("scored 3 completions"), std::string::npos) << stdout_text;
  EXPECT_EQ(stdout_text.find("[info]"), std::string::npos) << stdout_text;
  // --output -: the scored JSONL alone on stdout (the summary on stderr), no file named "-".
  const fs::path piped = dir_ / "piped.jsonl";
  const std::string dash = std::string("cd '") + dir_.string() + "' && '" + UNSTUCK_BINARY +
                           "' reward score --input free.jsonl --output - --answer-formats "
                           "answer_tag,boxed,hashes,last_expression > '" +
                           piped.string() + "' 2> '" + (dir_ / "summary.txt").string() + "'";
  ASSERT_EQ(std::system(dash.c_str()), 0) << dash;
  const auto piped_lines = lines(piped);
  ASSERT_EQ(piped_lines.size(), 3u) << read(piped);
  EXPECT_EQ(nlohmann::json::parse(piped_lines[0])["status"], "correct");
  EXPECT_EQ(nlohmann::json::parse(piped_lines[1])["status"], "wrong");
  EXPECT_NE(read(dir_ / "summary.txt").find("scored 3 completions"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "-"));
}

// --config: the run config's reward section scores, here a reward.function (verl's form) on its
// workers; a completion the function fails on gets status reward_error and the error's text.
TEST_F(CliData, ScoreWithARunConfigsRewardFunction) {
  const fs::path fn = dir_ / "fn.py";
  std::ofstream(fn)
      << "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
         "    if solution_str == 'boom':\n"
         "        raise KeyError('boom')\n"
         "    return {'score': 0.25 if ground_truth in solution_str else 0.0, 'acc': ground_truth in solution_str}\n";
  const fs::path cfg = dir_ / "fn.yaml";
  std::ofstream(cfg) << "reward:\n  function:\n    path: " << fn.string() << "\n    python: " << UNSTUCK_PYTHON << "\n";
  const fs::path input = dir_ / "fn_in.jsonl";
  std::ofstream(input) << R"({"task":"math","prompt":"p","answer":"42","completion":"it is 42"})"
                       << "\n"
                       << R"({"task":"math","prompt":"p","answer":"42","completion":"it is 41"})"
                       << "\n"
                       << R"({"task":"math","prompt":"p","answer":"42","completion":"boom"})"
                       << "\n";
  const CliResult r = run("reward score --config '" + cfg.string() + "' --input '" + input.string() + "' --output '" +
                          (dir_ / "fn_out.jsonl").string() + "' reward.function.workers=1");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto out = lines(dir_ / "fn_out.jsonl");
  ASSERT_EQ(out.size(), 3u);
  const auto a = nlohmann::json::parse(out[0]), b = nlohmann::json::parse(out[1]), c = nlohmann::json::parse(out[2]);
  EXPECT_EQ(a["reward"], 0.25);
  EXPECT_EQ(a["status"], "correct");  // the dict's "acc"
  EXPECT_EQ(b["reward"], 0.0);
  EXPECT_EQ(b["status"], "wrong");
  EXPECT_EQ(c["status"], "reward_error");
  EXPECT_NE(c["error"].get<std::string>().find("KeyError: 'boom'"), std::string::npos) << out[2];
  EXPECT_NE(r.out.find("reward_error          1"), std::string::npos) << r.out;
  // Overrides need --config; --format-reward and --config exclude each other.
  EXPECT_EQ(run("reward score --input '" + input.string() + "' reward.function.workers=1").code, 2);
  EXPECT_NE(
      run("reward score --config '" + cfg.string() + "' --format-reward 0.2 --input '" + input.string() + "'").code, 0);
  // A function that cannot start is the config's fault, named so, not line 1's.
  const CliResult missing =
      run("reward score --config '" + cfg.string() + "' --input '" + input.string() + "' reward.function.name=nope");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.out.find("error: --config " + cfg.string() + ": reward.function " + fn.string() + ":nope: "),
            std::string::npos)
      << missing.out;
  EXPECT_EQ(missing.out.find(input.string() + ":1"), std::string::npos) << missing.out;
}

// `bench reward --config C --input F` times C's own scorer (here a reward.function on its worker)
// on F's completions: its start apart, each pass's seconds, the rate and the statuses, as JSON.
TEST_F(CliData, BenchRewardTimesTheConfiguredScorer) {
  const fs::path fn = dir_ / "fn.py";
  std::ofstream(fn) << "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                       "    return 1.0 if ground_truth in solution_str else 0.0\n";
  const fs::path cfg = dir_ / "fn.yaml";
  std::ofstream(cfg) << "reward:\n  function:\n    path: " << fn.string() << "\n    python: " << UNSTUCK_PYTHON << "\n";
  const fs::path input = dir_ / "fn_in.jsonl";
  {
    std::ofstream in(input);
    for (int i = 0; i < 30; ++i)
      in << R"({"task":"math","prompt":"p","answer":"42","completion":"it is )" << (i % 3 == 0 ? 42 : i) << "\"}\n";
  }
  const fs::path json_out = dir_ / "bench.json";
  const std::string command = std::string("'") + UNSTUCK_BINARY + "' bench reward --json --config '" + cfg.string() +
                              "' --input '" + input.string() + "' --passes 2 reward.function.workers=1 > '" +
                              json_out.string() + "' 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << read(json_out);
  const auto j = nlohmann::json::parse(read(json_out));
  EXPECT_EQ(j["scorer"], "reward.function");
  EXPECT_EQ(j["completions"], 30);
  EXPECT_EQ(j["passes"], 2);
  ASSERT_EQ(j["seconds"].size(), 2u);
  EXPECT_GT(j["completions_per_s"].get<double>(), 0.0);
  EXPECT_GE(j["completions_per_s"].get<double>(), j["completions_per_s_median"].get<double>());
  EXPECT_EQ(j["statuses"]["correct"], 10);
  EXPECT_EQ(j["statuses"]["wrong"], 20);
  EXPECT_NEAR(j["mean_reward"].get<double>(), 10.0 / 30.0, 1e-12);
  // The table names the scorer; --input and --passes need --config; --config needs --input.
  const CliResult table = run("bench reward --config '" + cfg.string() + "' --input '" + input.string() +
                              "' --passes 1 reward.function.workers=1");
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("reward.function " + fn.string()), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(" on 30 completions of "), std::string::npos) << table.out;
  EXPECT_NE(run("bench reward --input '" + input.string() + "'").code, 0);
  const CliResult no_input = run("bench reward --config '" + cfg.string() + "'");
  EXPECT_EQ(no_input.code, 2);
  EXPECT_NE(no_input.out.find("bench reward --config needs --input"), std::string::npos) << no_input.out;
}

// `bench sample` times the fused sampler against libtorch's ops on the same logits: each setting's
// two times and their ratio, as JSON and as a table; a CUDA device where none is says so.
TEST_F(CliData, BenchSampleTimesTheKernelAgainstTheOps) {
  const fs::path json_out = dir_ / "sample.json";
  const std::string command = std::string("'") + UNSTUCK_BINARY +
                              "' bench sample --json --rows 3 --vocab 5000 --repeats 2 --threads 1 > '" +
                              json_out.string() + "' 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << read(json_out);
  const auto j = nlohmann::json::parse(read(json_out));
  EXPECT_EQ(j["rows"], 3);
  EXPECT_EQ(j["vocab"], 5000);
  EXPECT_EQ(j["device"], "cpu");
  ASSERT_EQ(j["settings"].size(), 3u);
  for (const auto& s : j["settings"]) {
    EXPECT_GT(s["kernel_ms"].get<double>(), 0.0) << s;
    EXPECT_GT(s["ops_ms"].get<double>(), 0.0) << s;
    EXPECT_NEAR(s["ops_over_kernel"].get<double>(), s["ops_ms"].get<double>() / s["kernel_ms"].get<double>(), 1e-9);
  }
  const CliResult table = run("bench sample --rows 2 --vocab 300 --repeats 1");
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("2 rows x 300 logits on cpu"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("greedy"), std::string::npos) << table.out;
  if (!fs::exists("/dev/nvidia0")) {
    const CliResult cuda = run("bench sample --device cuda --rows 2 --vocab 300");
    EXPECT_EQ(cuda.code, 2) << cuda.out;
    EXPECT_NE(cuda.out.find("no CUDA device is available"), std::string::npos) << cuda.out;
  }
}

// --config with reward.terms: each line's reward is the weighted sum, and "reward_terms" holds each
// term's reward by name.
TEST_F(CliData, ScoreWithRewardTerms) {
  const fs::path fn = dir_ / "short.py";
  std::ofstream(fn) << "def short(prompts, completions, **columns):\n"
                       "    return [1.0 if len(c) < 12 else 0.0 for c in completions]\n";
  const fs::path cfg = dir_ / "terms.yaml";
  std::ofstream(cfg) << "reward:\n  terms:\n    - verifier: math\n    - function: {path: " << fn.string()
                     << ", name: short, style: trl, python: " << UNSTUCK_PYTHON << ", workers: 1}\n      weight: 0.5\n";
  const fs::path input = dir_ / "terms_in.jsonl";
  std::ofstream(input) << R"({"task":"math","prompt":"p","answer":"42","completion":"<answer>42</answer>"})"
                       << "\n"
                       << R"({"task":"math","prompt":"p","answer":"42","completion":"42"})"
                       << "\n";
  const CliResult r = run("reward score --config '" + cfg.string() + "' --input '" + input.string() + "' --output '" +
                          (dir_ / "terms_out.jsonl").string() + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto out = lines(dir_ / "terms_out.jsonl");
  ASSERT_EQ(out.size(), 2u);
  const auto a = nlohmann::json::parse(out[0]), b = nlohmann::json::parse(out[1]);
  EXPECT_EQ(a["reward_terms"], (nlohmann::json{{"math", 1.0}, {"short", 0.0}}));
  EXPECT_EQ(a["reward"], 1.0);
  EXPECT_EQ(a["status"], "correct");
  EXPECT_EQ(b["reward_terms"], (nlohmann::json{{"math", 0.0}, {"short", 1.0}}));
  EXPECT_EQ(b["reward"], 0.5);
  EXPECT_EQ(b["status"], "no_answer");
}

// Code records score by running their programs in the sandbox, beside math records in the same file;
// each code line carries the verifier's extras.
TEST_F(CliData, ScoresCodeRecordsInTheSandbox) {
  if (!unstuck::reward::sandbox_capabilities().missing.empty())
    GTEST_SKIP() << unstuck::reward::sandbox_capabilities().describe();
  const fs::path input = dir_ / "code_in.jsonl";
  const nlohmann::json tests = {"assert add(1, 2) == 3", "assert add(5, 0) == 5"};
  const auto line = [&](const std::string& completion) {
    return nlohmann::json{{"task", "code"},
                          {"prompt", "Write add(a, b)."},
                          {"answer", ""},
                          {"test_list", tests},
                          {"completion", completion}}
               .dump() +
           "\n";
  };
  std::ofstream(input) << line("```python\ndef add(a, b):\n    return a + b\n```")
                       << line("```python\ndef add(a, b):\n    return a - b\n```")  // passes the second test only
                       << line("no code here")
                       << R"({"task":"math","prompt":"p","answer":"42","completion":"<answer>42</answer>"})"
                       << "\n";
  const CliResult r =
      run("reward score --input '" + input.string() + "' --output '" + (dir_ / "code_out.jsonl").string() + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto out = lines(dir_ / "code_out.jsonl");
  ASSERT_EQ(out.size(), 4u);
  const auto a = nlohmann::json::parse(out[0]), b = nlohmann::json::parse(out[1]), c = nlohmann::json::parse(out[2]),
             d = nlohmann::json::parse(out[3]);
  EXPECT_EQ(a["status"], "correct");
  EXPECT_EQ(a["reward"], 1.0);
  EXPECT_EQ(a["reward_extra"]["code_pass_frac"], 1.0);
  EXPECT_EQ(b["status"], "wrong");
  EXPECT_EQ(b["reward"], 0.0);
  EXPECT_EQ(b["reward_extra"]["code_pass_frac"], 0.5);
  EXPECT_EQ(c["status"], "no_answer");
  EXPECT_EQ(d["status"], "correct");
  EXPECT_EQ(d["reward"], 1.0);
}

TEST_F(CliData, MalformedScoreInputStopsWithTheLineNumber) {
  const fs::path input = dir_ / "bad.jsonl";
  std::ofstream(input) << R"({"task":"math","prompt":"p","answer":"1","completion":"<answer>1</answer>"})"
                       << "\n\n{not json\n";
  CliResult r = run("reward score --input '" + input.string() + "' --output '" + (dir_ / "out.jsonl").string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("error: " + input.string() + ":3: invalid JSON"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl")) << "nothing is written when a line is bad";

  std::ofstream(input) << R"({"task":"chess","prompt":"p","answer":"1","completion":"x"})"
                       << "\n";
  r = run("reward score --input '" + input.string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(input.string() + ":1: unknown verifier 'chess' (known: math, arithmetic, "
                                        "countdown, code)"),
            std::string::npos)
      << r.out;

  std::ofstream(input) << R"({"task":"math","prompt":"p","answer":"1"})"
                       << "\n";
  r = run("reward score --input '" + input.string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(":1: missing \"completion\""), std::string::npos) << r.out;
}

}  // namespace
