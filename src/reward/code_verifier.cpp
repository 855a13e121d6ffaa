// reward.verifier: code. The completion's program (a fenced block, or the whole text) runs in the
// sandbox (unstuck/reward/sandbox.h) against its record's tests: MBPP asserts, a HumanEval check(),
// APPS/TACO stdin/stdout pairs or calls of fn_name. Expected outputs are compared here, outside the
// sandbox; they never enter it, and nothing about the tests is written to disk. Asserts run in a
// judge process the program cannot reach (src/reward/assert_judge.py): the program runs in a child
// that answers the tests' calls with plain data, so no trick inside the program can forge a pass.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "reward/assert_judge.h"
#include "unstuck/common/error.h"
#include "unstuck/reward/answer.h"
#include "unstuck/reward/sandbox.h"
#include "unstuck/reward/verifier.h"

namespace unstuck::reward {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Calls of fn_name (APPS call-based). stdin: {"program", "fn_name", "inputs", "nonce"}; each input
// is the argument list. Last line: "<nonce> [[1, value] or [0, null] per input]" (repr for values
// JSON cannot hold).
constexpr const char* kCallHarness = R"PY(
import json, os, sys
def _unstuck_run(job):
    run, build, anything, dumps, represent, kind, listtype = exec, compile, BaseException, json.dumps, repr, type, list
    write, leave, streams = os.write, os._exit, (sys.stdout, sys.stderr)
    report, nonce, name = os.dup(1), job["nonce"], job["fn_name"]
    scope, results, fn = {"__name__": "solution"}, [], None
    try:
        run(build(job["program"], "<solution>", "exec"), scope)
        fn = scope.get(name)
        if fn is None and "Solution" in scope:
            fn = getattr(scope["Solution"](), name)
    except anything:
        fn = None
    for args in job["inputs"]:
        try:
            value = fn(*args) if kind(args) is listtype else fn(args)
            results.append([1, value])
        except anything:
            results.append([0, None])
    parts = []
    for item in results:
        try:
            parts.append(dumps(item, allow_nan=False, default=represent))
        except anything:
            parts.append("[1, " + dumps(represent(item[1])) + "]")
    for stream in streams:
        try:
            stream.flush()
        except anything:
            pass
    write(report, (nonce + " [" + ",".join(parts) + "]\n").encode())
    leave(0)
_job = json.loads(sys.stdin.buffer.read())
os.close(0)
os.open(os.devnull, os.O_RDONLY)
_unstuck_run(_job)
)PY";

// Standard input (APPS, TACO). stdin: "<bytes of the program>\n<program><the test's input>": the
// harness reads exactly the program, so the program reads the input as its stdin, as __main__.
constexpr const char* kStdioHarness = R"PY(
import os
_size = b""
while not _size.endswith(b"\n"):
    _c = os.read(0, 1)
    if not _c:
        break
    _size += _c
_left, _program = int(_size), b""
while len(_program) < _left:
    _c = os.read(0, _left - len(_program))
    if not _c:
        break
    _program += _c
_code = compile(_program.decode("utf-8", "replace"), "<solution>", "exec")
del _size, _c, _left, _program
exec(_code, {"__name__": "__main__"})
)PY";

// ---- the program ----

// The fenced blocks of `text`: from a ``` line (any language tag) to a line of backticks alone,
// un-indented by the opening fence's indentation.
std::vector<std::string> fenced_blocks(const std::string& text) {
  std::vector<std::string> blocks;
  std::istringstream lines(text);
  bool inside = false;
  std::size_t indent = 0;
  std::string block;
  for (std::string line; std::getline(lines, line);) {
    const std::size_t start = line.find_first_not_of(" \t");
    const bool fence = start != std::string::npos && line.compare(start, 3, "```") == 0;
    if (!inside) {
      if (fence && line.find('`', start + 3) == std::string::npos) {
        inside = true;
        indent = start;
        block.clear();
      }
      continue;
    }
    if (fence && line.find_first_not_of("` \t\r", start) == std::string::npos) {
      blocks.push_back(block);
      inside = false;
      continue;
    }
    std::size_t k = 0;
    while (k < indent && k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
    block += line.substr(k) + "\n";
  }
  return blocks;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// The program of a completion, or "" when it has none.
std::string extract_program(const std::string& completion, CodeExtract how) {
  if (how == CodeExtract::whole) return blank(completion) ? "" : completion;
  if (how == CodeExtract::answer_tag) {
    const std::optional<std::string> a = extract_answer(completion, AnswerFormat::answer_tag);
    return a && !blank(*a) ? *a : "";
  }
  const std::vector<std::string> blocks = fenced_blocks(completion);
  if (blocks.empty()) return "";
  const std::string& b = how == CodeExtract::first_block ? blocks.front() : blocks.back();
  return blank(b) ? "" : b;
}

// ---- the tests of a record ----

enum class TestKind { asserts, stdio, calls };

struct TestPlan {
  TestKind kind = TestKind::asserts;
  std::string setup;                  // asserts: test_imports and test_setup_code
  std::string entry_point;            // asserts: HumanEval's entry point (may shadow a builtin)
  std::vector<std::string> tests;     // asserts: one program text per test
  std::vector<Json> inputs, outputs;  // stdio, calls
  std::string fn_name;                // calls
  std::size_t size() const { return kind == TestKind::asserts ? tests.size() : inputs.size(); }
};

[[noreturn]] void bad_record(const std::string& why) { throw UserError("reward.verifier code: the record's " + why); }

std::string string_field(const Json& fields, const char* key) {
  const Json& v = fields.at(key);
  if (!v.is_string()) bad_record(std::string(key) + " must be a string, got " + v.type_name());
  return v.get<std::string>();
}

std::vector<std::string> strings_field(const Json& fields, const char* key) {
  const Json& v = fields.at(key);
  if (!v.is_array()) bad_record(std::string(key) + " must be a list of strings, got " + v.type_name());
  std::vector<std::string> out;
  for (const Json& s : v) {
    if (!s.is_string()) bad_record(std::string(key) + " must be a list of strings, has a " + s.type_name());
    out.push_back(s.get<std::string>());
  }
  return out;
}

TestPlan plan_io(const Json& fields) {
  Json io = fields.at("input_output");
  if (io.is_string()) {
    io = Json::parse(io.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (io.is_discarded()) bad_record("input_output is a string but not JSON");
  }
  if (!io.is_object() || !io.contains("inputs") || !io.contains("outputs") || !io["inputs"].is_array() ||
      !io["outputs"].is_array())
    bad_record("input_output must be {\"inputs\": [...], \"outputs\": [...]} (optional \"fn_name\")");
  if (io["inputs"].size() != io["outputs"].size())
    bad_record("input_output has " + std::to_string(io["inputs"].size()) + " inputs and " +
               std::to_string(io["outputs"].size()) + " outputs");
  TestPlan plan;
  plan.kind = TestKind::stdio;
  if (io.contains("fn_name") && io["fn_name"].is_string() && !io["fn_name"].get<std::string>().empty()) {
    plan.kind = TestKind::calls;
    plan.fn_name = io["fn_name"].get<std::string>();
  }
  plan.inputs = io["inputs"].get<std::vector<Json>>();
  plan.outputs = io["outputs"].get<std::vector<Json>>();
  return plan;
}

// The record's tests, at most max_tests of them. Throws UserError when it has none of the formats.
TestPlan plan_tests(const data::TaskRecord& record, int max_tests) {
  const Json& f = record.fields;
  TestPlan plan;
  if (f.contains("test_list")) {
    plan.tests = strings_field(f, "test_list");
    if (f.contains("test_imports"))
      for (const std::string& line : strings_field(f, "test_imports")) plan.setup += line + "\n";
    if (f.contains("test_setup_code")) plan.setup += string_field(f, "test_setup_code") + "\n";
  } else if (f.contains("test") && f.contains("entry_point")) {
    const std::string entry = string_field(f, "entry_point");
    plan.entry_point = entry;
    plan.tests = {string_field(f, "test") + "\n\ncheck(globals()[" + Json(entry).dump() + "])\n"};
  } else if (f.contains("input_output")) {
    plan = plan_io(f);
  } else {
    std::string keys;
    for (const auto& [k, v] : f.items()) keys += (keys.empty() ? "" : ", ") + k;
    throw UserError(
        "reward.verifier code: the record has none of test_list, test + entry_point, input_output (its "
        "fields: " +
        (keys.empty() ? std::string("none") : keys) + ")");
  }
  if (plan.size() == 0) bad_record("tests are empty (nothing to check a program against)");
  const std::size_t keep = std::min(plan.size(), std::size_t(max_tests));
  plan.tests.resize(std::min(plan.tests.size(), keep));
  plan.inputs.resize(std::min(plan.inputs.size(), keep));
  plan.outputs.resize(std::min(plan.outputs.size(), keep));
  return plan;
}

// ---- comparing outside the sandbox ----

// APPS writes a stdin or stdout as a string, sometimes as a list of lines.
std::string io_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const Json& line : v) out += (line.is_string() ? line.get<std::string>() : line.dump()) + "\n";
    return out;
  }
  return v.dump();
}

// Trailing whitespace of each line and trailing blank lines dropped.
std::string normalized_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    line.erase(line.find_last_not_of(" \t\r\f\v") + 1);
    lines.push_back(line);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

std::vector<std::string> tokens(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

bool same_output(const std::string& got, const std::string& expected) {
  return normalized_lines(got) == normalized_lines(expected) || tokens(got) == tokens(expected);
}

// Equal as JSON, or APPS's quirk: the expected value wrapped in a one-element list.
bool same_value(const Json& got, const Json& expected) {
  return got == expected || (expected.is_array() && expected.size() == 1 && got == expected[0]);
}

// What follows "<nonce> " on the last such line of `out`, or "" when there is none.
std::string marked_payload(const std::string& out, const std::string& nonce) {
  const std::string mark = nonce + " ";
  std::size_t at = std::string::npos;
  for (std::size_t p = out.find(mark); p != std::string::npos; p = out.find(mark, p + 1))
    if (p == 0 || out[p - 1] == '\n') at = p;
  if (at == std::string::npos) return "";
  const std::size_t end = out.find('\n', at);
  return out.substr(at + mark.size(), end == std::string::npos ? std::string::npos : end - at - mark.size());
}

std::string random_nonce() {
  std::random_device rd;
  char text[33];
  std::snprintf(text, sizeof text, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return text;
}

// ---- jobs and results ----

struct Tally {
  std::size_t passed = 0, total = 0;
  bool timeout = false, crashed = false;
  std::string error;  // the sandbox itself failed
};

class CodeVerifier : public Verifier {
 public:
  explicit CodeVerifier(const RewardConfig& config) : config_(config.code) {
    const CodeConfig& c = config_;
    options_.limits.cpu_s = c.cpu_s;
    options_.limits.wall_s = c.wall_s;
    options_.limits.memory_mb = c.memory_mb;
    options_.limits.file_mb = c.file_mb;
    options_.limits.disk_mb = c.max_disk_mb;
    options_.limits.processes = c.processes;
    options_.limits.output_kb = c.output_kb;
    options_.parallel = c.workers;
    options_.require_isolation = c.require_isolation;
    options_.read_paths = c.read_paths;
    python_ = sandboxed_python(c.python, options_, "reward.code", "reward.code.read_paths");
    // Said at the start of every run, so a weaker sandbox (require_isolation: false) is never a surprise.
    const SandboxCapabilities caps = sandbox_capabilities();
    if (caps.missing.empty())
      spdlog::info("reward.verifier code: {}; programs run by {}", caps.describe(), python_);
    else
      spdlog::warn(
          "reward.verifier code: {} (reward.code.require_isolation: false): resource limits only; "
          "docs/TASKS.md says what that does not guard against",
          caps.describe());
  }

  RewardResult score(const std::string& completion, const data::TaskRecord& record) const override {
    return score_batch({completion}, {&record}, {}).at(0);
  }

  std::vector<RewardResult> score_batch(const std::vector<std::string>& completions,
                                        const std::vector<const data::TaskRecord*>& records,
                                        const ScoringContext&) const override {
    const std::size_t n = completions.size();
    std::vector<TestPlan> plans;
    std::vector<std::string> programs, nonces;
    std::vector<std::size_t> first_job(n + 1, 0);
    std::vector<SandboxJob> jobs;
    for (std::size_t i = 0; i < n; ++i) {
      plans.push_back(plan_tests(*records[i], config_.max_tests));
      programs.push_back(extract_program(completions[i], config_.extract));
      nonces.push_back(random_nonce());
      first_job[i] = jobs.size();
      if (!programs[i].empty()) add_jobs(plans[i], programs[i], nonces[i], jobs);
    }
    first_job[n] = jobs.size();
    const std::vector<SandboxOutcome> outcomes = run_sandboxed(jobs, options_);
    std::vector<RewardResult> results;
    for (std::size_t i = 0; i < n; ++i) {
      if (programs[i].empty()) {
        results.push_back(with_extras(RewardResult(0.0, RewardStatus::no_answer), Tally{}));
        continue;
      }
      const std::vector<SandboxOutcome> mine(outcomes.begin() + long(first_job[i]),
                                             outcomes.begin() + long(first_job[i + 1]));
      results.push_back(result(tally(plans[i], mine, nonces[i])));
    }
    return results;
  }

 private:
  void add_jobs(const TestPlan& plan, const std::string& program, const std::string& nonce,
                std::vector<SandboxJob>& jobs) const {
    const auto dump = [](const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); };
    switch (plan.kind) {
      case TestKind::asserts:
        jobs.push_back({{python_, "-I", "-c", assert_judge_source()},
                        dump({{"program", program},
                              {"setup", plan.setup},
                              {"tests", plan.tests},
                              {"entry_point", plan.entry_point},
                              {"nonce", nonce}})});
        break;
      case TestKind::calls:
        jobs.push_back(
            {{python_, "-I", "-c", kCallHarness},
             dump({{"program", program}, {"fn_name", plan.fn_name}, {"inputs", plan.inputs}, {"nonce", nonce}})});
        break;
      case TestKind::stdio:
        for (const Json& input : plan.inputs)
          jobs.push_back(
              {{python_, "-I", "-c", kStdioHarness}, std::to_string(program.size()) + "\n" + program + io_text(input)});
        break;
    }
  }

  // The CPU limit ends a program by SIGXCPU or, one CPU second later, SIGKILL (the only one the
  // namespace's PID 1 gets: it ignores SIGXCPU); a SIGKILL after at least cpu_s of wall time counts.
  bool out_of_time(const SandboxOutcome& o) const {
    if (o.end == SandboxEnd::timed_out) return true;
    return o.end == SandboxEnd::signaled && (o.signal == SIGXCPU || (o.signal == SIGKILL && o.wall_s >= config_.cpu_s));
  }

  Tally tally(const TestPlan& plan, const std::vector<SandboxOutcome>& outcomes, const std::string& nonce) const {
    Tally t;
    t.total = plan.size();
    for (const SandboxOutcome& o : outcomes) {
      if (o.end == SandboxEnd::failed) t.error = "the sandbox failed: " + o.err;
      t.timeout = t.timeout || out_of_time(o);
      t.crashed =
          t.crashed || (!out_of_time(o) && (o.end == SandboxEnd::signaled || o.end == SandboxEnd::output_limit));
    }
    const auto clean_exit = [](const SandboxOutcome& o) { return o.end == SandboxEnd::exited && o.exit_code == 0; };
    if (plan.kind == TestKind::stdio) {
      for (std::size_t k = 0; k < outcomes.size(); ++k)
        if (clean_exit(outcomes[k]) && same_output(outcomes[k].out, io_text(plan.outputs[k]))) ++t.passed;
      return t;
    }
    if (outcomes.size() != 1 || !clean_exit(outcomes[0])) return t;
    const std::string payload = marked_payload(outcomes[0].out, nonce);
    if (plan.kind == TestKind::asserts) {
      // "<1|0 per test> <alive | exit N | signal N>": the judge says how the program's process ended.
      std::istringstream words(payload);
      std::string bits, ended;
      long signal = 0;
      words >> bits >> ended;
      if (ended == "signal" && words >> signal) {
        const bool cpu = signal == SIGXCPU || (signal == SIGKILL && outcomes[0].wall_s >= config_.cpu_s);
        (cpu ? t.timeout : t.crashed) = true;
      }
      if (bits.size() == t.total) t.passed = std::size_t(std::count(bits.begin(), bits.end(), '1'));
      return t;
    }
    const Json got = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (!got.is_array() || got.size() != t.total) return t;
    for (std::size_t k = 0; k < t.total; ++k) {
      const Json& item = got[k];
      if (item.is_array() && item.size() == 2 && item[0] == 1 && same_value(item[1], plan.outputs[k])) ++t.passed;
    }
    return t;
  }

  RewardResult result(const Tally& t) const {
    if (!t.error.empty()) return with_extras(RewardResult(0.0, RewardStatus::error, t.error), t);
    const bool all = t.total > 0 && t.passed == t.total;
    const double reward = config_.partial ? double(t.passed) / double(t.total) : (all ? 1.0 : 0.0);
    return with_extras(RewardResult(reward, all ? RewardStatus::correct : RewardStatus::wrong), t);
  }

  static RewardResult with_extras(RewardResult r, const Tally& t) {
    r.extra["code_pass_frac"] = t.total ? double(t.passed) / double(t.total) : 0.0;
    r.extra["code_timeout"] = t.timeout ? 1.0 : 0.0;
    r.extra["code_crashed"] = t.crashed ? 1.0 : 0.0;
    return r;
  }

  CodeConfig config_;
  SandboxOptions options_;
  std::string python_;  // the interpreter's executable, as it reports itself
};

}  // namespace

std::unique_ptr<Verifier> make_code_verifier(const RewardConfig& config) {
  return std::make_unique<CodeVerifier>(config);
}

}  // namespace unstuck::reward
